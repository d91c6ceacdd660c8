// What compare() computes per element and per stretch of elements, shared by its CPU path (harness/src/compare.cpp)
// and its CUDA path (harness/cuda/compare.cu) so that the two cannot drift apart: the ordered-integer ULP distance
// and the classification of a pair, the buckets of the ULP and |err| histograms, the heatmap's cells, and the totals of
// a stretch of elements with the rule that merges two of them. Plain C++17 without LibTorch: nvcc compiles it too.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PARITY_HD __host__ __device__ __forceinline__
#else
#define PARITY_HD inline
#endif

namespace parity::cmp {

// compare.hpp's kUlpBuckets and kErrorGridSide (compare.cpp checks that they agree; compare.hpp needs ATen).
inline constexpr int kUlpBuckets = 12;
inline constexpr int kGridSide = 32;

// The ULP histogram's finite buckets: bucket b > 0 holds the distances in (kUlpEdges[b-1], kUlpEdges[b]], the last
// finite bucket everything above 1024; the last bucket counts NaN and Inf mismatches.
inline constexpr uint32_t kUlpEdges[kUlpBuckets - 2] = {0, 1, 2, 4, 8, 16, 32, 64, 256, 1024};

// The |err| histogram of the percentiles: a non-negative double's bits shifted right by kErrShift keep its exponent
// and two leading significand bits, so bucket b spans [bits b << 50, bits (b+1) << 50): four buckets per octave over
// the whole fp64 range, +Inf in its own bucket and 0 in bucket 0.
inline constexpr int kErrShift = 50;
inline constexpr int kErrBuckets = 1 << (64 - kErrShift - 1);  // the sign bit is always clear

PARITY_HD int bit_width(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(x));
#else
  return x == 0 ? 0 : 64 - __builtin_clzll(x);
#endif
}

// Past 0 the edges are powers of two, 2^j < u exactly where j < bit_width(u - 1): a nonzero distance's bucket depends
// on that width alone. Widths from 11 up all mean "above 1024"; one nibble per width 0..15 holds the table.
constexpr uint64_t bucket_by_width_table() {
  uint64_t table = 0;
  for (int width = 0; width < 16; ++width) {
    uint64_t bucket = 1;
    for (const uint32_t edge : kUlpEdges) {
      int edge_width = 0;
      for (uint32_t e = edge; e != 0; e >>= 1) ++edge_width;
      bucket += edge != 0 && edge_width <= width;
    }
    table |= bucket << (4 * width);
  }
  return table;
}
inline constexpr uint64_t kBucketByWidth = bucket_by_width_table();

// The bucket of a nonzero ULP distance u from bit_width(u - 1).
PARITY_HD int ulp_bucket_of_width(int width) {
  return static_cast<int>((kBucketByWidth >> (4 * (width < 15 ? width : 15))) & 0xF);
}
PARITY_HD int ulp_bucket(uint64_t u) { return u == 0 ? 0 : ulp_bucket_of_width(bit_width(u - 1)); }

PARITY_HD int err_bucket(uint64_t err_bits) { return static_cast<int>(err_bits >> kErrShift); }

// -x where sign is 1, x where it is 0, without a branch.
PARITY_HD int64_t negate_if(int64_t x, uint64_t sign) {
  const int64_t mask = -static_cast<int64_t>(sign);
  return (x ^ mask) - mask;
}

// Bit layout of a floating dtype of kWidth bits with kDigits significand bits (the implicit one included).
template <int kWidth_, int kDigits>
struct BitFormat {
  static constexpr int kWidth = kWidth_;
  static constexpr uint64_t kMagnitude = (uint64_t{1} << (kWidth - 1)) - 1;
  // +Inf: every exponent bit set, no significand bit; larger magnitudes are NaN.
  static constexpr uint64_t kInfBits = kMagnitude & ~((uint64_t{1} << (kDigits - 1)) - 1);
};
using Fp64Format = BitFormat<64, 53>;
using Fp32Format = BitFormat<32, 24>;
using Fp16Format = BitFormat<16, 11>;
using Bf16Format = BitFormat<16, 8>;

// One pair classified in the ULP dtype F from the bit patterns of both values rounded to F.
struct UlpClass {
  uint64_t ulp;  // ordered-integer distance; meaningless where a NaN is involved
  bool e_nan, both_nan, differs, nan_mismatch, inf_mismatch, comparable;
};

template <typename F>
PARITY_HD UlpClass classify_bits(uint64_t ab, uint64_t eb, bool allow_nan) {
  const uint64_t am = ab & F::kMagnitude, em = eb & F::kMagnitude;
  const bool a_nan = am > F::kInfBits, e_nan = em > F::kInfBits;
  const bool any_nan = a_nan || e_nan;
  // Ordered integers: -0 and +0 both map to 0, so equal values (NaN aside) have equal ordered integers.
  const int64_t oa = negate_if(static_cast<int64_t>(am), ab >> (F::kWidth - 1));
  const int64_t oe = negate_if(static_cast<int64_t>(em), eb >> (F::kWidth - 1));
  UlpClass c;
  c.e_nan = e_nan;
  c.both_nan = a_nan && e_nan;
  c.differs = (any_nan || oa != oe) && !c.both_nan;
  c.nan_mismatch = allow_nan ? a_nan != e_nan : any_nan;
  c.inf_mismatch = (am == F::kInfBits || em == F::kInfBits) && c.differs && !any_nan;
  c.comparable = !any_nan && !c.inf_mismatch;
  if constexpr (F::kWidth < 64) {
    const int64_t d = oa - oe;
    c.ulp = static_cast<uint64_t>(negate_if(d, static_cast<uint64_t>(d) >> 63));
  } else {
    // Opposite-sign fp64 distances exceed int64: saturated, as ulp_distance() saturates them.
    const auto ua = static_cast<uint64_t>(oa), ue = static_cast<uint64_t>(oe);
    const uint64_t across = am + em;
    c.ulp = (oa >= 0) == (oe >= 0) ? (oa > oe ? ua - ue : ue - ua) : (across < uint64_t{INT64_MAX} ? across : INT64_MAX);
  }
  return c;
}

// |a - e| of the stored values in fp64; an infinity against the same infinity is no error.
PARITY_HD double abs_error(double a, double e) { return a == e ? 0.0 : fabs(a - e); }

// float -> bfloat16 bits, rounded to nearest even as c10::BFloat16(float) rounds (a NaN stays a NaN).
PARITY_HD uint32_t bf16_bits_of_float_bits(uint32_t f) {
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  return (f + 0x7FFFu + ((f >> 16) & 1u)) >> 16;
}

// ---- the heatmap ------------------------------------------------------------------------------------------------
// n elements cut into `bins` spans [i*n/bins, (i+1)*n/bins); the span holding element r.
PARITY_HD int64_t block_of(int64_t r, int64_t n, int64_t bins) { return ((r + 1) * bins - 1) / n; }
PARITY_HD int64_t block_start(int64_t i, int64_t n, int64_t bins) { return i * n / bins; }

struct GridShape {
  int64_t rows, cols;            // the tensor viewed as [rows, cols]
  int64_t cell_rows, cell_cols;  // cells, at most kGridSide each
};

// ---- totals of a stretch of elements ------------------------------------------------------------------------------
// Maxima start below every value (-1) at no index; of equal maxima the first element's is kept.
struct ScanTotals {
  int64_t bitwise_diff = 0, nan_mismatch = 0, inf_mismatch = 0, nan_expected = 0, both_nan = 0;
  int64_t comparable = 0, rel_defined = 0;
  double sum_abs = 0, sum_rel = 0, sum_ulp = 0;
  double sum_aa = 0, sum_ee = 0, sum_dd = 0, sum_ae = 0;
  double max_abs = -1, max_rel = -1, max_abs_expected = 0;
  int64_t max_ulp = -1;
  int64_t max_abs_at = -1, max_rel_at = -1, max_ulp_at = -1;
  int64_t ulp_hist[kUlpBuckets] = {};  // the last bucket is filled in at the end, from the mismatch counts
};

// Adds the totals of a later stretch: floating sums in the order of the calls, and of equal maxima the earlier. The
// CUDA path merges its blocks' totals with it too, on the device.
PARITY_HD void merge_in_order(ScanTotals& t, const ScanTotals& p) {
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
  if (p.max_abs_expected > t.max_abs_expected) t.max_abs_expected = p.max_abs_expected;
  if (p.max_abs > t.max_abs) t.max_abs = p.max_abs, t.max_abs_at = p.max_abs_at;
  if (p.max_rel > t.max_rel) t.max_rel = p.max_rel, t.max_rel_at = p.max_rel_at;
  if (p.max_ulp > t.max_ulp) t.max_ulp = p.max_ulp, t.max_ulp_at = p.max_ulp_at;
  for (int b = 0; b < kUlpBuckets; ++b) t.ulp_hist[b] += p.ulp_hist[b];
}

}  // namespace parity::cmp
