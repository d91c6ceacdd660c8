#include <fmt/format.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/tensor.hpp>
#include <stdexcept>
#include <type_traits>
#include <vector>

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

// ---- the single pass ------------------------------------------------------------------------------------------
// compare() reads both tensors once: every metric is a per-chunk partial (fixed chunk boundaries, so the result does
// not depend on the thread count) merged in chunk order afterwards.

constexpr int64_t kChunk = int64_t{1} << 18;  // elements; large enough that the partials cost little to merge
// Past this many elements the |err| percentiles come from a log-spaced histogram rather than a sort (see below).
constexpr int64_t kExactPercentileLimit = int64_t{1} << 16;
// The |err| histogram: a positive double's bits shifted right by 50 keep its exponent and two leading significand
// bits, so bucket b spans [bits b<<50, bits (b+1)<<50): four buckets per octave (a width ratio of 2^(1/4), about
// 13 per decade) over the whole fp64 range, with +Inf in its own bucket and 0 in bucket 0.
constexpr int kErrShift = 50;
constexpr int kErrBuckets = 1 << (64 - kErrShift - 1);  // the sign bit is always clear

// Storage type -> what the pass needs of it: the value in fp64 and its sign-magnitude bit pattern.
template <typename T>
struct Bits;
template <>
struct Bits<double> {
  static uint64_t of(double v) { return std::bit_cast<uint64_t>(v); }
};
template <>
struct Bits<float> {
  static uint64_t of(float v) { return std::bit_cast<uint32_t>(v); }
};
template <>
struct Bits<c10::Half> {
  static uint64_t of(c10::Half v) { return v.x; }
};
template <>
struct Bits<c10::BFloat16> {
  static uint64_t of(c10::BFloat16 v) { return v.x; }
};

// ULP histogram bucket of a distance: bit_width(u - 1) + 1 for u >= 1 groups 1, 2, 3-4, 5-8, ... by powers of
// two; the table folds the wider groups (65-256, 257-1024, >1024) together.
int ulp_bucket(uint64_t u) {
  static constexpr std::array<int8_t, 66> kFold = [] {
    std::array<int8_t, 66> t{};
    for (int k = 0; k < 66; ++k) t[k] = static_cast<int8_t>(k <= 8 ? k : k <= 9 ? 8 : k <= 11 ? 9 : 10);
    return t;
  }();
  return u == 0 ? 0 : kFold[std::bit_width(u - 1) + 1];
}

// -x where sign is 1, x where it is 0, without a branch.
int64_t negate_if(int64_t x, uint64_t sign) {
  const int64_t mask = -static_cast<int64_t>(sign);
  return (x ^ mask) - mask;
}

struct Partial {
  int64_t bitwise_diff = 0, nan_mismatch = 0, inf_mismatch = 0, nan_expected = 0, both_nan = 0;
  int64_t comparable = 0, rel_defined = 0;
  double sum_abs = 0, sum_rel = 0, sum_ulp = 0;
  double sum_aa = 0, sum_ee = 0, sum_dd = 0, sum_ae = 0;
  double max_abs = -1, max_rel = -1, max_abs_expected = 0;
  int64_t max_ulp = -1;
  int64_t max_abs_at = -1, max_rel_at = -1, max_ulp_at = -1;
  std::array<int64_t, kUlpBuckets> ulp_hist{};
  std::vector<uint32_t> err_hist = std::vector<uint32_t>(kErrBuckets);  // counts of one chunk fit 32 bits
  std::vector<int64_t> first;    // flat indices of the chunk's first listed elements
  std::vector<double> grid;      // the error grid's cells this chunk touched (max is order-free)
};

struct Grid {
  int64_t rows, cols;            // of the 2-D view
  int64_t cell_rows, cell_cols;  // cells
};

// Block i of n elements cut into `bins` spans [i*n/bins, (i+1)*n/bins); the block holding element r.
int64_t block_of(int64_t r, int64_t n, int64_t bins) { return ((r + 1) * bins - 1) / n; }
int64_t block_start(int64_t i, int64_t n, int64_t bins) { return i * n / bins; }

// One chunk [begin, end) of actual (TA) against expected (TE), classified and ULP-counted in TU. The accumulators
// are locals, not members of `p`: through a reference the compiler must assume the histogram stores alias them and
// keeps every sum in memory.
template <typename TA, typename TE, typename TU>
void scan_chunk(const TA* act, const TE* exp, int64_t begin, int64_t end, const Grid& g, const CompareOptions& opts,
                Partial& p, std::vector<double>* comparable_errors) {
  using UlpSum = std::conditional_t<sizeof(TU) == 8, double, uint64_t>;  // exact below fp64, which can saturate
  constexpr int kWidth = sizeof(TU) * 8;
  constexpr uint64_t kMagnitude = (uint64_t{1} << (kWidth - 1)) - 1;
  // +Inf: every exponent bit set, no significand bit; larger magnitudes are NaN.
  constexpr uint64_t kInfBits = kMagnitude & ~((uint64_t{1} << (std::numeric_limits<TU>::digits - 1)) - 1);
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  const bool allow_nan = opts.allow_nan;
  const auto first_n = static_cast<size_t>(std::max(opts.first_n, 0));
  int64_t bitwise_diff = 0, nan_mismatch = 0, inf_mismatch = 0, nan_expected = 0, both_nan = 0;
  int64_t comparable = 0, rel_defined = 0;
  double sum_abs = 0, sum_rel = 0, sum_aa = 0, sum_ee = 0, sum_dd = 0, sum_ae = 0;
  double max_abs = -1, max_rel = -1, max_abs_expected = 0;
  int64_t max_ulp = -1, max_abs_at = -1, max_rel_at = -1, max_ulp_at = -1;
  UlpSum sum_ulp = 0;
  std::array<int64_t, kUlpBuckets> ulp_hist{};
  uint32_t* const err_hist = p.err_hist.data();
  p.grid.assign(g.cell_rows * g.cell_cols, 0.0);

  // Walk the chunk in runs that stay within one grid cell, so the cell's max is a local in the hot loop.
  int64_t pos = begin;
  int64_t row = begin / g.cols, col = begin % g.cols;
  while (pos < end) {
    const int64_t cell_row = block_of(row, g.rows, g.cell_rows);
    const int64_t cell_col = block_of(col, g.cols, g.cell_cols);
    const int64_t run_end = pos + std::min(block_start(cell_col + 1, g.cols, g.cell_cols) - col, end - pos);
    double cell_max = 0;
    for (int64_t i = pos; i < run_end; ++i) {
      const double a64 = static_cast<double>(act[i]), e64 = static_cast<double>(exp[i]);
      // Classification in TU: a wider side is rounded to the narrower dtype first (exactly what .to() does).
      const uint64_t ab = Bits<TU>::of(static_cast<TU>(act[i])), eb = Bits<TU>::of(static_cast<TU>(exp[i]));
      const uint64_t am = ab & kMagnitude, em = eb & kMagnitude;
      const bool a_nan = am > kInfBits, e_nan = em > kInfBits;
      const bool any_nan = a_nan || e_nan, both = a_nan && e_nan;
      // Ordered integers: -0 and +0 both map to 0, so equal values (NaN aside) have equal ordered integers. Signs
      // are random in real data: everything here is branch-free arithmetic, a mispredicted branch costs more than
      // the whole element.
      const int64_t oa = negate_if(static_cast<int64_t>(am), ab >> (kWidth - 1));
      const int64_t oe = negate_if(static_cast<int64_t>(em), eb >> (kWidth - 1));
      const bool differs = (any_nan || oa != oe) && !both;
      const bool nan_mis = allow_nan ? a_nan != e_nan : any_nan;
      const bool inf_mis = (am == kInfBits || em == kInfBits) && differs && !any_nan;
      const bool comp = !any_nan && !inf_mis;
      uint64_t ulp;
      if constexpr (sizeof(TU) < 8) {
        const int64_t d = oa - oe;
        ulp = static_cast<uint64_t>(negate_if(d, static_cast<uint64_t>(d) >> 63));
      } else {
        // Opposite-sign fp64 distances exceed int64: saturate as ulp_distance() does.
        const auto ua = static_cast<uint64_t>(oa), ue = static_cast<uint64_t>(oe);
        ulp = (oa >= 0) == (oe >= 0) ? (oa > oe ? ua - ue : ue - ua) : std::min<uint64_t>(am + em, kMaxUlp);
      }
      const double abs_err = a64 == e64 ? 0.0 : std::fabs(a64 - e64);  // Inf - Inf is no error

      bitwise_diff += differs;
      nan_mismatch += nan_mis;
      inf_mismatch += inf_mis;
      nan_expected += e_nan;
      both_nan += both;
      comparable += comp;
      const double e_abs = std::fabs(e64);
      if (e_abs < kInfinity && e_abs > max_abs_expected) max_abs_expected = e_abs;
      if (comp) {
        sum_abs += abs_err;
        if (comparable_errors) comparable_errors->push_back(abs_err);
        sum_ulp += static_cast<UlpSum>(ulp);
        if (abs_err > max_abs) max_abs = abs_err, max_abs_at = i;
        if (static_cast<int64_t>(ulp) > max_ulp) max_ulp = static_cast<int64_t>(ulp), max_ulp_at = i;
        ++ulp_hist[ulp_bucket(ulp)];
        ++err_hist[std::bit_cast<uint64_t>(abs_err) >> kErrShift];
        if (abs_err > cell_max) cell_max = abs_err;
        if (std::fabs(a64) < kInfinity && e_abs < kInfinity) {
          sum_aa += a64 * a64;
          sum_ee += e64 * e64;
          sum_dd += (a64 - e64) * (a64 - e64);
          sum_ae += a64 * e64;
          if (e64 != 0) {
            const double rel = abs_err / e_abs;
            ++rel_defined;
            sum_rel += rel;
            if (rel > max_rel) max_rel = rel, max_rel_at = i;
          }
        }
      } else if (nan_mis || inf_mis) {
        cell_max = kInfinity;  // a matching NaN is no error
      }
      // The count first: whether an element differs is as random as the data.
      if (p.first.size() < first_n && (differs || nan_mis)) [[unlikely]] p.first.push_back(i);
    }
    double& cell = p.grid[cell_row * g.cell_cols + cell_col];
    cell = std::max(cell, cell_max);
    col += run_end - pos;
    pos = run_end;
    if (col == g.cols) col = 0, ++row;
  }
  p.bitwise_diff = bitwise_diff, p.nan_mismatch = nan_mismatch, p.inf_mismatch = inf_mismatch;
  p.nan_expected = nan_expected, p.both_nan = both_nan, p.comparable = comparable, p.rel_defined = rel_defined;
  p.sum_abs = sum_abs, p.sum_rel = sum_rel, p.sum_ulp = static_cast<double>(sum_ulp);
  p.sum_aa = sum_aa, p.sum_ee = sum_ee, p.sum_dd = sum_dd, p.sum_ae = sum_ae;
  p.max_abs = max_abs, p.max_rel = max_rel, p.max_abs_expected = max_abs_expected, p.max_ulp = max_ulp;
  p.max_abs_at = max_abs_at, p.max_rel_at = max_rel_at, p.max_ulp_at = max_ulp_at;
  p.ulp_hist = ulp_hist;
}

std::vector<int64_t> unravel(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return index;
}

constexpr std::array<double, 4> kRanks = {0.50, 0.90, 0.99, 0.999};

// 1-based nearest rank of quantile q among n values.
int64_t nearest_rank(double q, int64_t n) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q * static_cast<double>(n))), 1, n);
}

// Exact nearest-rank percentiles, for tensors small enough that sorting their errors costs nothing.
std::array<double, 4> exact_percentiles(std::vector<double> errors) {
  std::array<double, 4> out{};
  if (errors.empty()) return out;
  std::sort(errors.begin(), errors.end());
  for (size_t i = 0; i < kRanks.size(); ++i)
    out[i] = errors[nearest_rank(kRanks[i], static_cast<int64_t>(errors.size())) - 1];
  return out;
}

// Nearest-rank percentiles read off the |err| histogram, interpolated linearly inside the bucket holding the rank:
// approximate to one bucket width (a factor of 2^(1/4)), never above the true maximum. Bucket 0 (zero and errors
// below 2^-1022) reads as 0.
std::array<double, 4> histogram_percentiles(const std::vector<uint64_t>& hist, int64_t n, double max_abs) {
  std::array<double, 4> out{};
  if (n == 0) return out;
  for (size_t i = 0; i < kRanks.size(); ++i) {
    const int64_t rank = nearest_rank(kRanks[i], n);
    int64_t below = 0;
    size_t b = 0;
    while (below + static_cast<int64_t>(hist[b]) < rank) below += static_cast<int64_t>(hist[b++]);
    if (b == 0) continue;
    const double lower = std::bit_cast<double>(uint64_t{b} << kErrShift);
    const double upper = std::bit_cast<double>(uint64_t{b + 1} << kErrShift);
    const double within = (static_cast<double>(rank - below) - 0.5) / static_cast<double>(hist[b]);
    out[i] = std::isinf(lower) ? lower : std::min(lower + within * (upper - lower), max_abs);
  }
  return out;
}

// The Mismatch record of one element, recomputed from the inputs (only first_n of them are asked for).
template <typename TA, typename TE, typename TU>
Mismatch describe_mismatch(const TA* act, const TE* exp, int64_t flat, at::IntArrayRef sizes, at::ScalarType ulp_type) {
  const double a = static_cast<double>(act[flat]), e = static_cast<double>(exp[flat]);
  return {.index = unravel(flat, sizes),
          .actual = a,
          .expected = e,
          .abs_diff = a == e ? 0.0 : std::fabs(a - e),
          .ulp = ulp_distance(static_cast<double>(static_cast<TU>(act[flat])),
                              static_cast<double>(static_cast<TU>(exp[flat])), ulp_type)};
}

// Calls f with a value of the C++ type that stores dtype t (float_format has rejected every other dtype).
template <typename F>
void with_storage_type(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kDouble:
      return f(double{});
    case at::kFloat:
      return f(float{});
    case at::kHalf:
      return f(c10::Half{});
    default:
      return f(c10::BFloat16{});
  }
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
  const at::Tensor a = actual.cpu().contiguous(), e = expected.cpu().contiguous();

  Metrics m;
  m.dtype = dtype_name(ulp_type);
  m.numel = actual.numel();
  if (m.numel == 0) return m;
  ErrorGrid& grid = m.error_grid;
  grid.tensor_cols = a.dim() == 0 ? 1 : a.size(-1);
  grid.tensor_rows = m.numel / grid.tensor_cols;
  grid.rows = std::min(grid.tensor_rows, kErrorGridSide);
  grid.cols = std::min(grid.tensor_cols, kErrorGridSide);
  const Grid g{grid.tensor_rows, grid.tensor_cols, grid.rows, grid.cols};

  const int64_t chunks = (m.numel + kChunk - 1) / kChunk;
  std::vector<Partial> parts(chunks);
  std::vector<double> small_errors;  // every comparable |err|, for exact percentiles of a small tensor
  with_storage_type(a.scalar_type(), [&]<typename TA>(TA) {
    with_storage_type(e.scalar_type(), [&]<typename TE>(TE) {
      using TU = std::conditional_t<(sizeof(TE) < sizeof(TA)), TE, TA>;  // narrower(): a tie goes to actual
      const auto* act = static_cast<const TA*>(a.const_data_ptr());
      const auto* exp = static_cast<const TE*>(e.const_data_ptr());
      at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c)
          scan_chunk<TA, TE, TU>(act, exp, c * kChunk, std::min(m.numel, (c + 1) * kChunk), g, opts, parts[c],
                                 m.numel <= kExactPercentileLimit ? &small_errors : nullptr);
      });
      for (const Partial& p : parts)
        for (const int64_t i : p.first)
          if (static_cast<int>(m.first.size()) < opts.first_n)
            m.first.push_back(describe_mismatch<TA, TE, TU>(act, exp, i, a.sizes(), ulp_type));
    });
  });

  // Merged in chunk order: the floating sums, and which of equal maxima is reported (the first), are fixed.
  Partial t;
  std::vector<uint64_t> err_hist(kErrBuckets);
  grid.cells.assign(g.cell_rows * g.cell_cols, 0.0);
  for (const Partial& p : parts) {
    t.bitwise_diff += p.bitwise_diff;
    t.nan_mismatch += p.nan_mismatch;
    t.inf_mismatch += p.inf_mismatch;
    t.nan_expected += p.nan_expected;
    t.both_nan += p.both_nan;
    t.comparable += p.comparable;
    t.rel_defined += p.rel_defined;
    t.sum_abs += p.sum_abs;
    t.sum_rel += p.sum_rel;
    t.sum_ulp += p.sum_ulp;
    t.sum_aa += p.sum_aa;
    t.sum_ee += p.sum_ee;
    t.sum_dd += p.sum_dd;
    t.sum_ae += p.sum_ae;
    t.max_abs_expected = std::max(t.max_abs_expected, p.max_abs_expected);
    if (p.max_abs > t.max_abs) t.max_abs = p.max_abs, t.max_abs_at = p.max_abs_at;
    if (p.max_rel > t.max_rel) t.max_rel = p.max_rel, t.max_rel_at = p.max_rel_at;
    if (p.max_ulp > t.max_ulp) t.max_ulp = p.max_ulp, t.max_ulp_at = p.max_ulp_at;
    for (int b = 0; b < kUlpBuckets; ++b) t.ulp_hist[b] += p.ulp_hist[b];
    for (int b = 0; b < kErrBuckets; ++b) err_hist[b] += p.err_hist[b];
    for (size_t c = 0; c < grid.cells.size(); ++c) grid.cells[c] = std::max(grid.cells[c], p.grid[c]);
  }

  m.bitwise_diff = t.bitwise_diff;
  m.nan_mismatch = t.nan_mismatch;
  m.inf_mismatch = t.inf_mismatch;
  m.nan_expected = t.nan_expected;
  m.max_abs_expected_value = t.max_abs_expected;
  // No comparable elements: nothing was off.
  const auto mean = [](double sum, int64_t count) { return count == 0 ? 0.0 : sum / static_cast<double>(count); };
  m.max_abs = std::max(t.max_abs, 0.0);
  m.mean_abs = mean(t.sum_abs, t.comparable);
  m.max_rel = std::max(t.max_rel, 0.0);
  m.mean_rel = mean(t.sum_rel, t.rel_defined);
  m.abs_pct = m.numel <= kExactPercentileLimit ? exact_percentiles(std::move(small_errors))
                                                : histogram_percentiles(err_hist, t.comparable, m.max_abs);
  m.max_ulp = std::max<int64_t>(t.max_ulp, 0);
  m.mean_ulp = mean(t.sum_ulp, t.comparable);
  m.ulp_hist = t.ulp_hist;
  // Matching NaNs are matches: counting them in bucket 0 keeps the histogram summing to numel.
  if (opts.allow_nan) m.ulp_hist[0] += t.both_nan;
  m.ulp_hist[kUlpBuckets - 1] = m.nan_mismatch + m.inf_mismatch;
  const auto worst = [&](int64_t flat) { return flat < 0 ? std::vector<int64_t>{} : unravel(flat, a.sizes()); };
  m.worst_abs_index = worst(t.max_abs_at);
  m.worst_rel_index = worst(t.max_rel_at);
  m.worst_ulp_index = worst(t.max_ulp_at);

  // Whole-tensor agreement over the elements where both sides are finite.
  const double norm_a = std::sqrt(t.sum_aa), norm_e = std::sqrt(t.sum_ee), norm_diff = std::sqrt(t.sum_dd);
  m.rel_l2 = norm_e > 0 ? norm_diff / norm_e : (norm_diff > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  // Two zero vectors point the same way as far as a parity check cares; one zero vector does not.
  m.cosine = norm_a > 0 && norm_e > 0 ? t.sum_ae / (norm_a * norm_e) : (norm_a == norm_e ? 1.0 : 0.0);
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
