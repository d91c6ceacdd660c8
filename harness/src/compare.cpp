#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/tensor.hpp>
#include <stdexcept>

namespace parity {
namespace {

constexpr int64_t kMaxUlp = std::numeric_limits<int64_t>::max();

// What the ULP arithmetic needs to know about a floating dtype. Integer and fp8 outputs plug in here.
struct FloatFormat {
  at::ScalarType type;
  at::ScalarType bits_type;     // signed integer of the same width, to view the bit pattern
  int width;                    // bits per element
  int digits;                   // significand bits, the implicit one included
  int emin, emax;               // exponents of the smallest and largest normal binades
  uint64_t (*bits_of)(double);  // the bit pattern of a value rounded to this dtype
};

template <typename T>
constexpr FloatFormat format_of(at::ScalarType type, at::ScalarType bits_type, uint64_t (*bits_of)(double)) {
  using L = std::numeric_limits<T>;
  // numeric_limits counts exponents for a significand in [0.5, 1); IEEE binades are [1, 2).
  return {type,   bits_type, static_cast<int>(sizeof(T) * 8), L::digits, L::min_exponent - 1, L::max_exponent - 1,
          bits_of};
}

const FloatFormat& float_format(at::ScalarType t) {
  // Half and bfloat16 round from float: exact for every value representable in them, which is all the ULP
  // helpers promise.
  static const FloatFormat fp64 =
      format_of<double>(at::kDouble, at::kLong, [](double v) { return std::bit_cast<uint64_t>(v); });
  static const FloatFormat fp32 = format_of<float>(
      at::kFloat, at::kInt, [](double v) { return uint64_t{std::bit_cast<uint32_t>(static_cast<float>(v))}; });
  static const FloatFormat fp16 = format_of<c10::Half>(
      at::kHalf, at::kShort, [](double v) { return uint64_t{c10::Half(static_cast<float>(v)).x}; });
  static const FloatFormat bf16 = format_of<c10::BFloat16>(
      at::kBFloat16, at::kShort, [](double v) { return uint64_t{c10::BFloat16(static_cast<float>(v)).x}; });
  switch (t) {
    case at::kDouble:
      return fp64;
    case at::kFloat:
      return fp32;
    case at::kHalf:
      return fp16;
    case at::kBFloat16:
      return bf16;
    default:
      throw InputError(fmt::format("unsupported dtype {} for numeric comparison (supported: fp64, fp32, fp16, bf16)",
                                   dtype_name(t)));
  }
}

int64_t magnitude_mask(const FloatFormat& f) { return static_cast<int64_t>((uint64_t{1} << (f.width - 1)) - 1); }

// fp16 and bf16 have the same width; neither is narrower, so the output's own dtype wins.
at::ScalarType narrower(at::ScalarType actual, at::ScalarType expected) {
  return float_format(expected).width < float_format(actual).width ? expected : actual;
}

// Sign-magnitude bits to a biased integer whose order is the order of the values: -0 and +0 both map to 0.
at::Tensor ordered_bits_tensor(const at::Tensor& t, const FloatFormat& f) {
  const at::Tensor bits = t.contiguous().view(f.bits_type).to(at::kLong);  // sign-extends
  const at::Tensor magnitude = bits.bitwise_and(magnitude_mask(f));
  return at::where(bits.lt(0), magnitude.neg(), magnitude);
}

// |oa - ob|, saturating: opposite-sign fp64 distances exceed int64.
at::Tensor ulp_distance_tensor(const at::Tensor& a, const at::Tensor& b, const FloatFormat& f) {
  const at::Tensor oa = ordered_bits_tensor(a, f);
  const at::Tensor ob = ordered_bits_tensor(b, f);
  const at::Tensor same_sign = oa.ge(0).eq(ob.ge(0));
  // Substituting oa where signs differ keeps the subtraction from overflowing in the branch not taken.
  const at::Tensor same_sign_distance = oa.sub(at::where(same_sign, ob, oa)).abs();
  const at::Tensor ma = oa.abs();
  const at::Tensor opposite_sign_distance = ma.add(at::minimum(ob.abs(), ma.neg().add(kMaxUlp)));
  return at::where(same_sign, same_sign_distance, opposite_sign_distance);
}

std::vector<int64_t> unravel(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return index;
}

// Index of the largest value among `mask`ed elements; empty when the mask selects none.
std::vector<int64_t> worst_index(const at::Tensor& values, const at::Tensor& mask, at::IntArrayRef sizes) {
  if (!mask.any().item<bool>()) return {};
  const at::Tensor candidates = at::where(mask, values.to(at::kDouble), -std::numeric_limits<double>::infinity());
  return unravel(candidates.reshape({-1}).argmax().item<int64_t>(), sizes);
}

// Nearest-rank percentiles of |a-e|. Past 2^24 elements a strided subsample stands in for the whole tensor:
// sorting hundreds of millions of doubles costs more than the reports need, and with 16M samples even
// p99.9 rests on 16k of them.
std::array<double, 4> abs_percentiles(at::Tensor abs_err) {
  constexpr int64_t kMaxSamples = int64_t{1} << 24;
  constexpr std::array<double, 4> kRanks = {0.50, 0.90, 0.99, 0.999};
  std::array<double, 4> out{};
  const int64_t n = abs_err.numel();
  if (n == 0) return out;
  if (n > kMaxSamples) abs_err = abs_err.slice(0, 0, n, (n + kMaxSamples - 1) / kMaxSamples);
  const at::Tensor sorted = std::get<0>(abs_err.sort()).cpu();
  const int64_t m = sorted.numel();
  for (size_t i = 0; i < kRanks.size(); ++i) {
    const int64_t rank = static_cast<int64_t>(std::ceil(kRanks[i] * static_cast<double>(m))) - 1;
    out[i] = sorted[std::clamp<int64_t>(rank, 0, m - 1)].item<double>();
  }
  return out;
}

// Buckets 0..10 by ULP distance (see kUlpBuckets); the last bucket is filled by the caller.
std::array<int64_t, kUlpBuckets> ulp_histogram(const at::Tensor& ulps) {
  std::array<int64_t, kUlpBuckets> hist{};
  if (ulps.numel() == 0) return hist;
  const at::Tensor upper_bounds =
      at::tensor(std::vector<int64_t>{0, 1, 2, 4, 8, 16, 32, 64, 256, 1024}, ulps.options());
  const at::Tensor counts = at::bincount(at::bucketize(ulps, upper_bounds), {}, kUlpBuckets - 1).cpu();
  for (int b = 0; b < kUlpBuckets - 1; ++b) hist[b] = counts[b].item<int64_t>();
  return hist;
}

// Max and mean of a selection, 0 for an empty one (no comparable elements: nothing was off).
double max_or_zero(const at::Tensor& selected) { return selected.numel() == 0 ? 0.0 : selected.max().item<double>(); }
double mean_or_zero(const at::Tensor& selected) {
  return selected.numel() == 0 ? 0.0 : selected.to(at::kDouble).mean().item<double>();
}

// Flat indices of the first n set elements. Scanning in chunks keeps memory bounded when most elements are
// set, where nonzero() over the whole tensor would materialise every index.
std::vector<int64_t> first_set(const at::Tensor& flags, int n) {
  constexpr int64_t kChunk = int64_t{1} << 22;
  std::vector<int64_t> out;
  const at::Tensor flat = flags.reshape({-1});
  for (int64_t start = 0; start < flat.numel() && static_cast<int>(out.size()) < n; start += kChunk) {
    const at::Tensor hits = flat.slice(0, start, std::min(start + kChunk, flat.numel())).nonzero().reshape({-1});
    const int64_t take = std::min<int64_t>(hits.numel(), n - static_cast<int64_t>(out.size()));
    const at::Tensor taken = hits.slice(0, 0, take).cpu();
    for (int64_t i = 0; i < take; ++i) out.push_back(start + taken[i].item<int64_t>());
  }
  return out;
}

std::vector<Mismatch> describe_mismatches(const std::vector<int64_t>& flat_indices, const at::Tensor& a64,
                                          const at::Tensor& e64, const at::Tensor& abs_err, const at::Tensor& ulps,
                                          const at::Tensor& nan_involved) {
  std::vector<Mismatch> out;
  if (flat_indices.empty()) return out;
  const at::Tensor idx = at::tensor(flat_indices, at::TensorOptions(at::kLong)).to(a64.device());
  const auto pick = [&](const at::Tensor& t) { return t.reshape({-1}).index_select(0, idx).cpu(); };
  const at::Tensor a = pick(a64), e = pick(e64), d = pick(abs_err), u = pick(ulps), n = pick(nan_involved);
  for (size_t i = 0; i < flat_indices.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    out.push_back({.index = unravel(flat_indices[i], a64.sizes()),
                   .actual = a[k].item<double>(),
                   .expected = e[k].item<double>(),
                   .abs_diff = d[k].item<double>(),
                   .ulp = n[k].item<bool>() ? -1 : u[k].item<int64_t>()});
  }
  return out;
}

// Which elements agree, element by element, in the dtype ULPs are counted in.
struct Classes {
  at::Tensor any_nan;
  at::Tensor both_nan;
  at::Tensor nan_mismatch;
  at::Tensor inf_mismatch;
  at::Tensor value_differs;  // -0 == +0, NaN == NaN
  at::Tensor comparable;     // neither NaN nor an Inf mismatch: the elements with a finite error
};

Classes classify(const at::Tensor& a, const at::Tensor& e, bool allow_nan) {
  Classes c;
  const at::Tensor a_nan = a.isnan(), e_nan = e.isnan();
  c.any_nan = a_nan.logical_or(e_nan);
  c.both_nan = a_nan.logical_and(e_nan);
  // Both NaN can only happen where expected is NaN, so xor is "NaN only where expected is NaN".
  c.nan_mismatch = allow_nan ? a_nan.logical_xor(e_nan) : c.any_nan;
  c.value_differs = a.ne(e).logical_and(c.both_nan.logical_not());
  c.inf_mismatch = a.isinf().logical_or(e.isinf()).logical_and(c.value_differs).logical_and(c.any_nan.logical_not());
  c.comparable = c.any_nan.logical_or(c.inf_mismatch).logical_not();
  return c;
}

// Absolute and relative errors; relative ones only where |e| is a finite non-zero divisor.
void measure_errors(Metrics& m, const at::Tensor& abs_err, const at::Tensor& e64, const at::Tensor& comparable,
                    const at::Tensor& finite_pair) {
  const at::Tensor rel_defined = finite_pair.logical_and(e64.ne(0));
  const at::Tensor rel_err = abs_err.div(e64.abs());
  const at::Tensor comparable_abs = abs_err.masked_select(comparable);
  const at::Tensor defined_rel = rel_err.masked_select(rel_defined);
  m.max_abs = max_or_zero(comparable_abs);
  m.mean_abs = mean_or_zero(comparable_abs);
  m.max_rel = max_or_zero(defined_rel);
  m.mean_rel = mean_or_zero(defined_rel);
  m.abs_pct = abs_percentiles(comparable_abs);
  m.worst_abs_index = worst_index(abs_err, comparable, abs_err.sizes());
  m.worst_rel_index = worst_index(rel_err, rel_defined, abs_err.sizes());
}

void measure_ulps(Metrics& m, const at::Tensor& ulps, const Classes& c, bool allow_nan) {
  const at::Tensor comparable_ulps = ulps.masked_select(c.comparable);
  m.max_ulp = comparable_ulps.numel() == 0 ? 0 : comparable_ulps.max().item<int64_t>();
  m.mean_ulp = mean_or_zero(comparable_ulps);
  m.ulp_hist = ulp_histogram(comparable_ulps);
  // Matching NaNs are matches: counting them in bucket 0 keeps the histogram summing to numel.
  if (allow_nan) m.ulp_hist[0] += c.both_nan.sum().item<int64_t>();
  m.ulp_hist[kUlpBuckets - 1] = m.nan_mismatch + m.inf_mismatch;
  m.worst_ulp_index = worst_index(ulps, c.comparable, ulps.sizes());
}

// Whole-tensor agreement over the elements where both sides are finite.
void measure_agreement(Metrics& m, const at::Tensor& a64, const at::Tensor& e64, const at::Tensor& finite_pair) {
  const at::Tensor af = at::where(finite_pair, a64, 0.0), ef = at::where(finite_pair, e64, 0.0);
  const double norm_e = ef.norm().item<double>(), norm_a = af.norm().item<double>();
  const double norm_diff = af.sub(ef).norm().item<double>();
  m.rel_l2 = norm_e > 0 ? norm_diff / norm_e : (norm_diff > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  // Two zero vectors point the same way as far as a parity check cares; one zero vector does not.
  m.cosine =
      norm_a > 0 && norm_e > 0 ? af.mul(ef).sum().item<double>() / (norm_a * norm_e) : (norm_a == norm_e ? 1.0 : 0.0);
}

// Max of `err` over `bins` near-equal blocks along `dim` (block i spans [i*n/bins, (i+1)*n/bins)).
at::Tensor block_max(const at::Tensor& err, int64_t dim, int64_t bins) {
  const int64_t n = err.size(dim);
  std::vector<at::Tensor> blocks;
  for (int64_t i = 0; i < bins; ++i)
    blocks.push_back(err.slice(dim, i * n / bins, (i + 1) * n / bins).amax(dim, /*keepdim=*/true));
  return at::cat(blocks, dim);
}

ErrorGrid error_grid(const at::Tensor& abs_err, const Classes& c) {
  ErrorGrid g;
  if (abs_err.numel() == 0) return g;
  g.tensor_cols = abs_err.dim() == 0 ? 1 : abs_err.size(-1);
  g.tensor_rows = abs_err.numel() / g.tensor_cols;
  g.rows = std::min(g.tensor_rows, kErrorGridSide);
  g.cols = std::min(g.tensor_cols, kErrorGridSide);
  // abs_err is NaN wherever a NaN is involved and amax would spread it: a NaN or Inf mismatch becomes +Inf, a
  // matching NaN no error.
  const at::Tensor mismatch = c.nan_mismatch.logical_or(c.inf_mismatch);
  const at::Tensor err = at::where(mismatch, std::numeric_limits<double>::infinity(),
                                   at::where(c.comparable, abs_err, 0.0))
                             .reshape({g.tensor_rows, g.tensor_cols});
  const at::Tensor cells = block_max(block_max(err, 0, g.rows), 1, g.cols).cpu().contiguous();
  g.cells.assign(cells.data_ptr<double>(), cells.data_ptr<double>() + cells.numel());
  return g;
}

void require_same_shape(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.sizes() != expected.sizes()) {
    throw InputError(fmt::format("shape mismatch: got {} want {}", describe(actual), describe(expected)));
  }
}

}  // namespace

std::string ulp_bucket_label(int bucket) {
  static const char* const kLabels[kUlpBuckets] = {"0",     "1",     "2",      "3-4",      "5-8",   "9-16",
                                                   "17-32", "33-64", "65-256", "257-1024", ">1024", "NaN/Inf"};
  if (bucket < 0 || bucket >= kUlpBuckets) throw std::out_of_range(fmt::format("no ULP bucket {}", bucket));
  return kLabels[bucket];
}

Metrics compare(const at::Tensor& actual, const at::Tensor& expected, const CompareOptions& opts) {
  require_same_shape(actual, expected);
  const at::ScalarType ulp_type = narrower(actual.scalar_type(), expected.scalar_type());
  const FloatFormat& format = float_format(ulp_type);
  const at::Tensor expected_here = expected.to(actual.device());

  // Classification and ULPs in the narrower dtype (a wider tensor cannot be held to digits the other lacks);
  // magnitudes of errors in fp64, from the values as given.
  const at::Tensor a = actual.to(ulp_type), e = expected_here.to(ulp_type);
  const at::Tensor a64 = actual.to(at::kDouble), e64 = expected_here.to(at::kDouble);
  const Classes c = classify(a, e, opts.allow_nan);

  Metrics m;
  m.dtype = dtype_name(ulp_type);
  m.numel = actual.numel();
  m.bitwise_diff = c.value_differs.sum().item<int64_t>();
  m.nan_mismatch = c.nan_mismatch.sum().item<int64_t>();
  m.inf_mismatch = c.inf_mismatch.sum().item<int64_t>();
  m.nan_expected = e.isnan().sum().item<int64_t>();
  m.max_abs_expected_value = max_or_zero(e64.abs().masked_select(e64.isfinite()));

  const at::Tensor abs_err = at::where(a64.eq(e64), 0.0, a64.sub(e64).abs());  // Inf - Inf is no error
  const at::Tensor ulps = ulp_distance_tensor(a, e, format);
  const at::Tensor finite_pair = c.comparable.logical_and(a64.isfinite()).logical_and(e64.isfinite());
  measure_errors(m, abs_err, e64, c.comparable, finite_pair);
  measure_ulps(m, ulps, c, opts.allow_nan);
  measure_agreement(m, a64, e64, finite_pair);
  m.error_grid = error_grid(abs_err, c);

  const at::Tensor listed = c.value_differs.logical_or(c.nan_mismatch);
  m.first = describe_mismatches(first_set(listed, opts.first_n), a64, e64, abs_err, ulps, c.any_nan);
  return m;
}

int64_t ordered_bits(double value, at::ScalarType t) {
  const FloatFormat& f = float_format(t);
  const uint64_t bits = f.bits_of(value);
  const auto magnitude = static_cast<int64_t>(bits & static_cast<uint64_t>(magnitude_mask(f)));
  return (bits >> (f.width - 1)) & 1 ? -magnitude : magnitude;
}

int64_t ulp_distance(double a, double b, at::ScalarType t) {
  if (std::isnan(a) || std::isnan(b)) return -1;
  const __int128 distance = static_cast<__int128>(ordered_bits(a, t)) - ordered_bits(b, t);
  return static_cast<int64_t>(std::min<__int128>(distance < 0 ? -distance : distance, kMaxUlp));
}

double ulp_at(double x, at::ScalarType t) {
  const FloatFormat& f = float_format(t);
  const double magnitude = std::fabs(x);
  if (std::isnan(magnitude) || std::isinf(magnitude)) return magnitude;
  // Below the normal range the spacing is that of the subnormals; past the top binade (a value that would
  // round to Inf) it stays that of the top binade, so a bound built from it stays finite.
  const int exponent = magnitude == 0 ? f.emin : std::clamp(std::ilogb(magnitude), f.emin, f.emax);
  return std::ldexp(1.0, exponent - (f.digits - 1));
}

}  // namespace parity
