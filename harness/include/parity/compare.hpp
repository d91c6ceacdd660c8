// Comparators: every metric of `actual` against `expected`, measured in the output's own dtype.
//
// ULP distance uses the ordered-integer mapping of the dtype's bit pattern: +0 and -0 are 0 ULP apart,
// subnormals count as representable values, an infinity is only equal to the same infinity (the distance
// from the largest finite value to Inf is 1, as in googletest). NaN has no ULP distance: a position where
// exactly one side is NaN, or both are NaN when NaN is not expected there, is a NaN mismatch.
//
// Example:
//   Metrics m = compare(out, ref, {.first_n = 8});
//   m.max_ulp, m.max_abs, m.mismatches (with the dtype's neighbour rule of the policy, see policy.hpp)
#pragma once
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parity {

// One element that differs bitwise, reported PyTorch assert_close style.
struct Mismatch {
  std::vector<int64_t> index;  // N-d index
  double actual = 0, expected = 0;
  double abs_diff = 0;
  int64_t ulp = -1;  // -1: not defined (NaN involved)
};

// ULP histogram buckets: 0, 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-256, 257-1024, >1024, NaN/Inf mismatch.
inline constexpr int kUlpBuckets = 12;
std::string ulp_bucket_label(int bucket);

// Where in a tensor the error sits, for the report's heatmap: the tensor viewed as [rows, last dim] (rows = the
// product of the leading dims) cut into at most kErrorGridSide x kErrorGridSide cells of near-equal size, each
// holding the max |actual - expected| of its elements; a cell holding a NaN or Inf mismatch is +Inf.
inline constexpr int64_t kErrorGridSide = 32;
struct ErrorGrid {
  int64_t rows = 0, cols = 0;                // cells
  int64_t tensor_rows = 0, tensor_cols = 0;  // the 2-D view the cells cover
  std::vector<double> cells;                 // row-major, rows * cols
};

struct Metrics {
  std::string dtype;  // dtype in which ULPs were counted (the expected tensor's dtype after alignment)
  int64_t numel = 0;
  int64_t bitwise_diff = 0;     // elements whose value differs (+0/-0 counted equal, NaN vs NaN equal)
  int64_t nan_mismatch = 0;     // exactly one side NaN, or both NaN where NaN is not allowed (see allow_nan)
  int64_t inf_mismatch = 0;     // exactly one side +-Inf, or Inf of opposite sign
  int64_t nan_expected = 0;     // positions where `expected` is NaN
  double max_abs = 0, mean_abs = 0;
  double max_rel = 0, mean_rel = 0;  // |a-e| / |e|, elements with e == 0 skipped for rel
  std::array<double, 4> abs_pct{};   // p50, p90, p99, p99.9 of |a-e|
  double rel_l2 = 0;                 // ||a-e||_2 / ||e||_2
  double cosine = 1;                 // <a,e> / (||a|| ||e||)
  int64_t max_ulp = 0;
  double mean_ulp = 0;
  std::array<int64_t, kUlpBuckets> ulp_hist{};
  std::vector<int64_t> worst_abs_index, worst_rel_index, worst_ulp_index;
  double max_abs_expected_value = 0;  // max |e| over finite elements (the reference's magnitude)
  std::vector<Mismatch> first;        // first N elements that differ
  ErrorGrid error_grid;
  std::string kernel;  // what scanned the elements: "cpu:" and a cpu_kernel_name(), or "cuda"
};

struct CompareOptions {
  int first_n = 8;
  // Positions where `expected` is NaN count as matching when `actual` is NaN there too (a case must declare it).
  bool allow_nan = false;
};

// `actual` and `expected` must have the same shape; they may differ in dtype and device (expected is cast to
// actual's dtype for ULP counting when it has a wider type; abs/rel errors are computed in fp64).
Metrics compare(const at::Tensor& actual, const at::Tensor& expected, const CompareOptions& opts = {});

// The CPU path's vector kernel: the same code compiled for AVX-512 (64-byte vectors), AVX2 and the baseline ISA
// (32-byte vectors; SSE2 halves on x86-64, and the only kernel elsewhere). compare() takes the widest this CPU runs.
// Every kernel gives the same bits: tests force each one to check that, and the bench times each.
enum class CpuKernel { avx512, avx2, baseline };
std::string cpu_kernel_name(CpuKernel kernel);
std::vector<CpuKernel> cpu_kernels();  // those this CPU runs, widest first
// One of cpu_kernels() from now on, or the widest again (nullopt); another throws std::invalid_argument.
void force_cpu_kernel(std::optional<CpuKernel> kernel);

// Scalar helpers (tested against an edge-value table).
// Ordered integer of a value's bit pattern in dtype `t` (fp64, fp32, fp16, bf16).
int64_t ordered_bits(double value, at::ScalarType t);
// ULP distance of a and b in dtype t (values already representable in t); -1 if either is NaN.
int64_t ulp_distance(double a, double b, at::ScalarType t);
// Spacing of the dtype at |x|: the distance from |x| to the next representable value above it.
double ulp_at(double x, at::ScalarType t);

}  // namespace parity
