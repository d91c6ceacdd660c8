#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <parity/error.hpp>
#include <parity/policy.hpp>
#include <parity/tensor.hpp>
#include <string_view>
#include <vector>

namespace parity {
namespace {

// ---- Parsing -------------------------------------------------------------------------------------------------

constexpr std::string_view kPolicyForms =
    "expected bitwise, ulp<=N, allclose(atol=, rtol=), naive_relative(k=, floor=)";

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The policy text and where it came from, for messages.
struct Source {
  const std::string& text;
  const std::string& where;

  [[noreturn]] void reject(std::string_view what) const {
    throw InputError(fmt::format("{}: bad policy '{}': {}", where, text, what));
  }
  [[noreturn]] void unknown() const {
    throw InputError(fmt::format("{}: unknown policy '{}' ({})", where, text, kPolicyForms));
  }
};

double parse_tolerance(std::string_view name, std::string_view value, const Source& src) {
  double out = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc{} || end != value.data() + value.size() || !std::isfinite(out) || out < 0) {
    src.reject(fmt::format("{} must be a finite number >= 0, got '{}'", name, value));
  }
  return out;
}

// "atol=1e-5, rtol=1.3e-6" -> {atol: 1e-5, rtol: 1.3e-6}, accepting only the `allowed` names, each once.
std::map<std::string, double, std::less<>> parse_arguments(std::string_view args, std::string_view policy,
                                                           const std::vector<std::string_view>& allowed,
                                                           const Source& src) {
  std::map<std::string, double, std::less<>> out;
  if (trim(args).empty()) return out;
  while (true) {
    const auto comma = args.find(',');
    const std::string_view item = args.substr(0, comma);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) src.reject(fmt::format("expected name=value, got '{}'", trim(item)));
    const std::string_view name = trim(item.substr(0, eq));
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      src.reject(fmt::format("{} takes {}, not '{}'", policy, fmt::join(allowed, " and "), name));
    }
    if (out.contains(name)) src.reject(fmt::format("{} given twice", name));
    out.emplace(name, parse_tolerance(name, trim(item.substr(eq + 1)), src));
    if (comma == std::string_view::npos) return out;
    args.remove_prefix(comma + 1);
  }
}

Ulp parse_ulp(std::string_view bound, const Source& src) {
  Ulp out;
  const auto [end, ec] = std::from_chars(bound.data(), bound.data() + bound.size(), out.max_ulp);
  if (bound.empty() || ec != std::errc{} || end != bound.data() + bound.size() || out.max_ulp < 0) {
    src.reject(fmt::format("ulp<=N needs a whole number N >= 0, got '{}'", bound));
  }
  return out;
}

AllClose parse_allclose(std::string_view args, const Source& src) {
  const auto values = parse_arguments(args, "allclose", {"atol", "rtol"}, src);
  // As in PyTorch's assert_close: a default for one of them would silently loosen or tighten the check.
  if (!values.contains("atol") || !values.contains("rtol")) {
    src.reject("allclose needs both atol and rtol, e.g. allclose(atol=1e-5, rtol=1.3e-6)");
  }
  return {.atol = values.find("atol")->second, .rtol = values.find("rtol")->second};
}

Bitwise parse_bitwise_budget(std::string_view args, const Source& src) {
  const auto values = parse_arguments(args, "bitwise", {"max_fraction"}, src);
  const auto f = values.find("max_fraction");
  if (f == values.end() || !(f->second >= 0 && f->second < 1))
    src.reject("bitwise(...) takes max_fraction in [0, 1), e.g. bitwise(max_fraction=1e-6)");
  return {.max_fraction = f->second};
}

NaiveRelative parse_naive_relative(std::string_view args, const Source& src) {
  const auto values = parse_arguments(args, "naive_relative", {"k", "floor"}, src);
  if (!values.contains("k")) src.reject("naive_relative needs k, e.g. naive_relative(k=2, floor=1)");
  NaiveRelative out{.k = values.find("k")->second};
  if (const auto floor = values.find("floor"); floor != values.end()) out.floor_ulps = floor->second;
  return out;
}

PolicyKind parse_kind(std::string_view s, const Source& src) {
  if (s == "bitwise") return Bitwise{};
  if (s.starts_with("ulp")) {
    const std::string_view rest = trim(s.substr(3));
    if (!rest.starts_with("<=")) src.unknown();
    return parse_ulp(trim(rest.substr(2)), src);
  }
  const auto open = s.find('(');
  if (open == std::string_view::npos || !s.ends_with(')')) src.unknown();
  const std::string_view name = trim(s.substr(0, open));
  const std::string_view args = s.substr(open + 1, s.size() - open - 2);
  if (name == "allclose") return parse_allclose(args, src);
  if (name == "bitwise") return parse_bitwise_budget(args, src);
  if (name == "naive_relative") return parse_naive_relative(args, src);
  src.unknown();
}

// The only option there is; spelled out so that a typo cannot pass for it.
void require_nan_option(std::string_view option, const Source& src) {
  const auto eq = option.find('=');
  if (eq == std::string_view::npos || trim(option.substr(0, eq)) != "nan" ||
      trim(option.substr(eq + 1)) != "expected") {
    src.reject(fmt::format("unknown option '{}' (the only option is nan=expected)", trim(option)));
  }
}

// ---- Evaluation ----------------------------------------------------------------------------------------------

// What one policy found, before the NaN and Inf rules that every policy shares.
struct Verdict {
  bool within = false;
  std::string measured;               // the summary's body: measured vs allowed
  std::optional<double> allowed_abs;  // the bound at the greatest absolute difference, where there is one
  int64_t unlisted_mismatches = 0;    // differing elements compare() does not list (bitwise: signed zeros)
  std::vector<std::string> notes;     // extra detail lines
  double bound_max = 0, bound_mean = 0;
  // Where the policy bounds each element (allclose, ulp<=N): the finite elements past their bound. The mismatch
  // report then counts and lists these, as assert_close does, not every element that differs bitwise.
  std::optional<at::Tensor> outside;
};

// What every checker sees.
struct Inputs {
  const at::Tensor& actual;
  const at::Tensor& expected;  // on actual's device
  const Metrics& m;
  const std::optional<Metrics>& naive;
};

std::string format_index(const std::vector<int64_t>& index) { return fmt::format("[{}]", fmt::join(index, ",")); }

// Enough digits to tell neighbouring values of the dtype apart, and no more.
std::string format_value(double v, at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return fmt::format("{}", static_cast<float>(v));
    case at::kHalf:
      return fmt::format("{:.5g}", v);
    case at::kBFloat16:
      return fmt::format("{:.4g}", v);
    default:
      return fmt::format("{}", v);
  }
}

std::string plural(int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : (noun.ends_with("h") ? "es" : "s"));
}

double value_at(const at::Tensor& t, const std::vector<int64_t>& index) {
  at::Tensor v = t;
  for (const int64_t i : index) v = v.select(0, i);
  return v.item<double>();
}

at::Tensor abs_error64(const at::Tensor& a64, const at::Tensor& e64) {
  // The same infinity on both sides is no error (Inf - Inf would be NaN).
  return at::where(a64.eq(e64), 0.0, a64.sub(e64).abs());
}

Verdict check(const Bitwise& p, const Inputs& in) {
  // Bits are compared in the dtype compare() counted in; compare() counts -0 == +0, bitwise does not.
  const at::ScalarType type = parse_dtype(in.m.dtype, "metrics");
  const at::Tensor a = in.actual.to(type), e = in.expected.to(type);
  const int64_t signed_zeros =
      a.eq(0).logical_and(e.eq(0)).logical_and(a.signbit().ne(e.signbit())).sum().item<int64_t>();
  const int64_t differing = in.m.bitwise_diff + signed_zeros;
  const auto budget = static_cast<int64_t>(p.max_fraction * double(in.m.numel));
  Verdict v;
  v.within = differing <= budget;
  v.measured = fmt::format("{} / {} elements differ bitwise in {} ({} allowed)", differing, in.m.numel, in.m.dtype, budget);
  v.allowed_abs = 0.0;
  v.unlisted_mismatches = signed_zeros;
  if (signed_zeros > 0) v.notes.push_back(fmt::format("Signed-zero differences (+0 vs -0): {}", signed_zeros));
  return v;
}

// Elements more than n ULPs apart in `type` (the dtype compare() counted in), NaN positions left out: the ordered
// magnitudes of the two sides, which add across zero (+0 and -0 are both 0), clamped to n + 1 so nothing overflows.
at::Tensor ulp_outside(const at::Tensor& actual, const at::Tensor& expected, at::ScalarType type, int64_t n) {
  const auto ints = [&](const at::Tensor& t) {
    const at::Tensor x = t.to(type).contiguous();
    const at::ScalarType view = x.element_size() == 2 ? at::kShort : x.element_size() == 4 ? at::kInt : at::kLong;
    return x.view(view).to(at::kLong);
  };
  const at::Tensor a = ints(actual), e = ints(expected);
  const int64_t magnitude = (int64_t{1} << (8 * at::elementSize(type) - 1)) - 1;
  const at::Tensor ma = a.bitwise_and(magnitude), me = e.bitwise_and(magnitude);
  const at::Tensor across = a.lt(0).ne(e.lt(0));
  const at::Tensor apart = at::where(across, ma.clamp_max(n + 1) + me.clamp_max(n + 1), (ma - me).abs());
  return apart.gt(n).logical_and(actual.isnan().logical_or(expected.isnan()).logical_not());
}

Verdict check(const Ulp& p, const Inputs& in) {
  Verdict v;
  v.within = in.m.max_ulp <= p.max_ulp;
  v.measured = fmt::format("max ulp {} in {} (<= {} allowed)", in.m.max_ulp, in.m.dtype, p.max_ulp);
  if (!v.within) v.outside = ulp_outside(in.actual, in.expected, parse_dtype(in.m.dtype, "metrics"), p.max_ulp);
  return v;
}

Verdict check(const AllClose& p, const Inputs& in) {
  const at::Tensor a64 = in.actual.to(at::kDouble), e64 = in.expected.to(at::kDouble);
  const at::Tensor abs_err = abs_error64(a64, e64);
  const at::Tensor tolerance = e64.abs().mul(p.rtol).add(p.atol);
  // NaN positions answer to the NaN rule alone; an Inf mismatch has abs_err Inf and lands outside. An exact element is
  // inside whatever its tolerance: with rtol = 0 that of an infinite e is 0 * Inf = NaN.
  const at::Tensor considered = a64.isnan().logical_or(e64.isnan()).logical_not();
  const at::Tensor outside = considered.logical_and(abs_err.gt(0)).logical_and(abs_err.le(tolerance).logical_not());
  const int64_t n_outside = outside.sum().item<int64_t>();

  Verdict v;
  v.within = n_outside == 0;
  v.measured = fmt::format("{} / {} outside |a-e| <= {:g} + {:g}|e|", n_outside, in.m.numel, p.atol, p.rtol);
  if (considered.any().item<bool>()) {
    // The element that uses up most of its tolerance is the one worth naming.
    const at::Tensor used = at::where(abs_err.eq(0), 0.0, abs_err.div(tolerance));
    const int64_t worst = at::where(considered, used, -1.0).reshape({-1}).argmax().item<int64_t>();
    v.measured += fmt::format("; worst abs {:.2e} (<= {:.2e} allowed)", abs_err.reshape({-1})[worst].item<double>(),
                              tolerance.reshape({-1})[worst].item<double>());
  }
  if (!in.m.worst_abs_index.empty()) {
    v.allowed_abs = p.atol + p.rtol * std::fabs(value_at(e64, in.m.worst_abs_index));
  }
  v.outside = outside;
  return v;
}

double mean_abs_finite(const at::Tensor& t) {
  const at::Tensor t64 = t.to(at::kDouble);
  const at::Tensor finite = t64.abs().masked_select(t64.isfinite());
  return finite.numel() == 0 ? 0.0 : finite.mean().item<double>();
}

Verdict check(const NaiveRelative& p, const Inputs& in) {
  const at::ScalarType type = in.actual.scalar_type();
  const Metrics& naive = *in.naive;
  const double ulp_max = ulp_at(in.m.max_abs_expected_value, type);
  const double ulp_mean = ulp_at(mean_abs_finite(in.expected), type);
  Verdict v;
  v.bound_max = p.k * naive.max_abs + p.floor_ulps * ulp_max;
  v.bound_mean = p.k * naive.mean_abs + p.floor_ulps * ulp_mean;
  v.within = in.m.max_abs <= v.bound_max && in.m.mean_abs <= v.bound_mean;
  v.allowed_abs = v.bound_max;
  v.measured = fmt::format(
      "max abs {:.2e} (<= {:.2e} allowed = {:g} x naive {:.2e} + {:g} x ulp {:.2e}), "
      "mean abs {:.2e} (<= {:.2e} allowed = {:g} x naive {:.2e} + {:g} x ulp {:.2e})",
      in.m.max_abs, v.bound_max, p.k, naive.max_abs, p.floor_ulps, ulp_max, in.m.mean_abs, v.bound_mean, p.k,
      naive.mean_abs, p.floor_ulps, ulp_mean);
  v.notes.push_back(fmt::format("Naive composition: max abs {:.2e}, mean abs {:.2e}, max ulp {}", naive.max_abs,
                                naive.mean_abs, naive.max_ulp));
  return v;
}

std::string nan_inf_prefix(const Metrics& m) {
  std::vector<std::string> parts;
  if (m.nan_mismatch > 0) parts.push_back(plural(m.nan_mismatch, "NaN mismatch"));
  if (m.inf_mismatch > 0) parts.push_back(plural(m.inf_mismatch, "Inf mismatch"));
  return parts.empty() ? "" : fmt::format("{}; ", fmt::join(parts, ", "));
}

std::string histogram_line(const Metrics& m) {
  std::vector<std::string> buckets;
  for (int b = 0; b < kUlpBuckets; ++b) {
    if (m.ulp_hist[b] > 0) buckets.push_back(fmt::format("{}: {}", ulp_bucket_label(b), m.ulp_hist[b]));
  }
  return fmt::format("ULP histogram ({}): {}", m.dtype, fmt::join(buckets, ", "));
}

std::string mismatch_line(const Mismatch& x, at::ScalarType actual_type, at::ScalarType expected_type) {
  const std::string distance = x.ulp < 0 ? "NaN mismatch" : fmt::format("diff {:.1e}, {} ulp", x.abs_diff, x.ulp);
  return fmt::format("  {}: got {}, want {} ({})", format_index(x.index), format_value(x.actual, actual_type),
                     format_value(x.expected, expected_type), distance);
}

// The first n elements of `mask` (row-major), as compare() lists its first mismatches.
std::vector<Mismatch> first_of(const at::Tensor& mask, const Inputs& in, int n) {
  const at::Tensor flat = mask.reshape({-1}).nonzero().reshape({-1});
  const at::Tensor a = in.actual.reshape({-1}).to(at::kDouble), e = in.expected.reshape({-1}).to(at::kDouble);
  const at::ScalarType type = parse_dtype(in.m.dtype, "metrics");
  std::vector<Mismatch> out;
  for (int64_t i = 0; i < std::min<int64_t>(n, flat.numel()); ++i) {
    const int64_t at = flat[i].item<int64_t>();
    Mismatch x;
    for (int64_t rest = at, d = in.actual.dim() - 1; d >= 0; --d) {
      x.index.insert(x.index.begin(), rest % in.actual.size(d));
      rest /= in.actual.size(d);
    }
    x.actual = a[at].item<double>();
    x.expected = e[at].item<double>();
    const bool nan = std::isnan(x.actual) || std::isnan(x.expected);
    x.abs_diff = nan ? std::numeric_limits<double>::quiet_NaN() : std::fabs(x.actual - x.expected);
    x.ulp = nan ? -1 : ulp_distance(x.actual, x.expected, type);
    out.push_back(x);
  }
  return out;
}

// PyTorch assert_close style: counts, the greatest differences, then the first mismatching elements: those past their
// own bound where the policy bounds each element, else those that differ at all.
std::string mismatch_report(const Inputs& in, const Verdict& v, bool nan_expected, int first_n) {
  const Metrics& m = in.m;
  // compare() lists NaN-vs-NaN positions too unless NaN is expected there; bitwise_diff counts them equal.
  const at::Tensor both_nan_at = in.actual.isnan().logical_and(in.expected.isnan());
  const int64_t both_nan = nan_expected ? 0 : both_nan_at.sum().item<int64_t>();
  std::optional<at::Tensor> bad;  // the elements past their bound, and the NaN mismatches
  if (v.outside) {
    const at::Tensor nan_mismatch = in.actual.isnan().logical_xor(in.expected.isnan());
    bad = v.outside->logical_or(nan_mismatch).logical_or(nan_expected ? at::zeros_like(both_nan_at) : both_nan_at);
  }
  const int64_t listable = bad ? bad->sum().item<int64_t>() : m.bitwise_diff + both_nan;
  const int64_t mismatched = listable + (bad ? 0 : v.unlisted_mismatches);
  std::vector<std::string> lines;
  lines.push_back(fmt::format("Mismatched elements: {} / {} ({:.1f}%){}", mismatched, m.numel,
                              m.numel == 0 ? 0.0 : 100.0 * static_cast<double>(mismatched) / m.numel,
                              bad ? fmt::format(" past the tolerance ({} differ bitwise)", m.bitwise_diff) : ""));
  if (!m.worst_abs_index.empty()) {
    const std::string allowed = v.allowed_abs ? fmt::format(" (up to {:.2e} allowed)", *v.allowed_abs) : "";
    lines.push_back(fmt::format("Greatest absolute difference: {:.2e} at index {}{}", m.max_abs,
                                format_index(m.worst_abs_index), allowed));
  }
  if (!m.worst_rel_index.empty()) {
    lines.push_back(
        fmt::format("Greatest relative difference: {:.2e} at index {}", m.max_rel, format_index(m.worst_rel_index)));
  }
  if (!m.worst_ulp_index.empty()) {
    lines.push_back(fmt::format("Greatest ULP difference: {} at index {} (in {})", m.max_ulp,
                                format_index(m.worst_ulp_index), m.dtype));
  }
  if (m.nan_mismatch > 0) {
    lines.push_back(fmt::format("NaN mismatches: {} (expected is NaN at {} positions; NaN is {})", m.nan_mismatch,
                                m.nan_expected, nan_expected ? "expected there only" : "not expected"));
  }
  if (m.inf_mismatch > 0) lines.push_back(fmt::format("Inf mismatches: {}", m.inf_mismatch));
  lines.insert(lines.end(), v.notes.begin(), v.notes.end());
  lines.push_back(histogram_line(m));
  const std::vector<Mismatch> listed = bad ? first_of(*bad, in, first_n) : m.first;
  for (const Mismatch& x : listed) lines.push_back(mismatch_line(x, in.actual.scalar_type(), in.expected.scalar_type()));
  if (listable > static_cast<int64_t>(listed.size()))
    lines.push_back(fmt::format("  ... and {} more", listable - static_cast<int64_t>(listed.size())));
  return fmt::format("{}", fmt::join(lines, "\n"));
}

CheckResult failed(std::string summary) {
  CheckResult r;
  r.summary = std::move(summary);
  return r;
}

}  // namespace

Policy parse_policy(const std::string& text, const std::string& where) {
  const Source src{text, where};
  const std::string_view all = text;
  const auto semicolon = all.find(';');
  Policy p{.kind = parse_kind(trim(all.substr(0, semicolon)), src), .text = text};
  if (semicolon != std::string_view::npos) {
    require_nan_option(all.substr(semicolon + 1), src);
    p.nan_expected = true;
  }
  return p;
}

bool needs_naive(const Policy& p) { return std::holds_alternative<NaiveRelative>(p.kind); }

Policy against_golden(const Policy& p) {
  Policy g = p;
  if (auto* nr = std::get_if<NaiveRelative>(&g.kind)) {
    nr->k += 1;
    g.text = fmt::format("{} (k+1 vs golden, naive error vs reference)", p.text);
  }
  return g;
}

CheckResult evaluate(const Policy& policy, const at::Tensor& actual, const at::Tensor& expected,
                     const at::Tensor* naive, int first_n, const at::Tensor* naive_expected) {
  if (needs_naive(policy) && naive == nullptr) {
    throw InputError(fmt::format("policy '{}' needs the naive composition's output, and none was given", policy.text));
  }
  const CompareOptions opts{.first_n = first_n, .allow_nan = policy.nan_expected};
  CheckResult r;
  // A shape or dtype compare() cannot measure is a failed check of this tensor, not a harness error.
  try {
    r.metrics = compare(actual, expected, opts);
  } catch (const InputError& e) {
    return failed(e.what());
  }
  if (needs_naive(policy)) {
    try {
      r.naive_metrics = compare(*naive, naive_expected ? *naive_expected : expected, opts);
    } catch (const InputError& e) {
      return failed(fmt::format("naive: {}", e.what()));
    }
  }

  const at::Tensor expected_here = expected.to(actual.device());
  const Inputs in{actual, expected_here, r.metrics, r.naive_metrics};
  const Verdict v = std::visit([&](const auto& kind) { return check(kind, in); }, policy.kind);
  r.pass = v.within && r.metrics.nan_mismatch == 0 && r.metrics.inf_mismatch == 0;
  r.summary = nan_inf_prefix(r.metrics) + v.measured;
  r.bound_max = v.bound_max;
  r.bound_mean = v.bound_mean;
  if (!r.pass) r.detail = mismatch_report(in, v, policy.nan_expected, first_n);
  return r;
}

}  // namespace parity
