// compare() on CUDA tensors (the fused comparator, harness/cuda/compare.cu) against compare() of the same tensors on
// the CPU, field by field: every count, maximum and where it sits, both histograms, the percentiles, the heatmap and
// the listed mismatches must be the same; the fp64 sums (the means, rel_l2, cosine) are added in another order and
// may differ in their last bits. Tensors are larger than the CPU's exact-percentile limit (2^16 elements): smaller
// ones are compared on the CPU wherever they live.
#include <gtest/gtest.h>

#include "tests/harness/compare_test_data.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "harness/cuda/compare.cuh"

#include <cmath>
#include <limits>
#include <parity/compare.hpp>
#include <parity/op.hpp>
#include <parity/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

namespace parity {
namespace {

// Sign flips too: the GPU's ordered-bit distances across zero, saturation included, must be the CPU's.
std::pair<at::Tensor, at::Tensor> noisy_pair(int64_t n, at::ScalarType actual_type, at::ScalarType expected_type,
                                             uint64_t seed) {
  return test::noisy_pair(n, actual_type, expected_type, seed, true);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kLarge = 3 * (int64_t{1} << 18) + 1237;  // several blocks; a multiple of no vector or tile size

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the fused comparator is not exercised"

const at::ScalarType kDtypes[] = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16};

std::string pair_name(at::ScalarType a, at::ScalarType e) { return dtype_name(a) + " vs " + dtype_name(e); }

// The sums' relative tolerance: a few ulps of fp64 times the depth of either summation.
// Equal values (an infinite rel_l2 of a zero reference among them) need no tolerance.
void expect_near_rel(double gpu, double cpu, const char* field) {
  if (gpu == cpu) return;
  EXPECT_NEAR(gpu, cpu, 1e-12 * std::fabs(cpu)) << field;
}

// Every field of the GPU's metrics against the CPU's.
void expect_same_metrics(const Metrics& gpu, const Metrics& cpu) {
  EXPECT_EQ(gpu.dtype, cpu.dtype);
  EXPECT_EQ(gpu.numel, cpu.numel);
  EXPECT_EQ(gpu.bitwise_diff, cpu.bitwise_diff);
  EXPECT_EQ(gpu.nan_mismatch, cpu.nan_mismatch);
  EXPECT_EQ(gpu.inf_mismatch, cpu.inf_mismatch);
  EXPECT_EQ(gpu.nan_expected, cpu.nan_expected);
  EXPECT_EQ(gpu.max_abs, cpu.max_abs);
  EXPECT_EQ(gpu.max_rel, cpu.max_rel);
  EXPECT_EQ(gpu.max_ulp, cpu.max_ulp);
  EXPECT_EQ(gpu.worst_abs_index, cpu.worst_abs_index);
  EXPECT_EQ(gpu.worst_rel_index, cpu.worst_rel_index);
  EXPECT_EQ(gpu.worst_ulp_index, cpu.worst_ulp_index);
  EXPECT_EQ(gpu.max_abs_expected_value, cpu.max_abs_expected_value);
  EXPECT_EQ(gpu.ulp_hist, cpu.ulp_hist);
  EXPECT_EQ(gpu.abs_pct, cpu.abs_pct);
  // Integer sums below fp64: exact on both sides.
  if (gpu.dtype == "fp64") expect_near_rel(gpu.mean_ulp, cpu.mean_ulp, "mean_ulp");
  else EXPECT_EQ(gpu.mean_ulp, cpu.mean_ulp);
  expect_near_rel(gpu.mean_abs, cpu.mean_abs, "mean_abs");
  expect_near_rel(gpu.mean_rel, cpu.mean_rel, "mean_rel");
  expect_near_rel(gpu.rel_l2, cpu.rel_l2, "rel_l2");
  expect_near_rel(gpu.cosine, cpu.cosine, "cosine");
  EXPECT_EQ(gpu.error_grid.rows, cpu.error_grid.rows);
  EXPECT_EQ(gpu.error_grid.cols, cpu.error_grid.cols);
  EXPECT_EQ(gpu.error_grid.tensor_rows, cpu.error_grid.tensor_rows);
  EXPECT_EQ(gpu.error_grid.tensor_cols, cpu.error_grid.tensor_cols);
  ASSERT_EQ(gpu.error_grid.cells.size(), cpu.error_grid.cells.size());
  for (size_t c = 0; c < cpu.error_grid.cells.size(); ++c)
    EXPECT_EQ(gpu.error_grid.cells[c], cpu.error_grid.cells[c]) << "error_grid cell " << c;
  ASSERT_EQ(gpu.first.size(), cpu.first.size());
  for (size_t i = 0; i < cpu.first.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "first[" << i << "]");
    EXPECT_EQ(gpu.first[i].index, cpu.first[i].index);
    // NaN == NaN is false: compare the bits that print.
    EXPECT_EQ(std::isnan(gpu.first[i].actual), std::isnan(cpu.first[i].actual));
    if (!std::isnan(cpu.first[i].actual)) EXPECT_EQ(gpu.first[i].actual, cpu.first[i].actual);
    EXPECT_EQ(std::isnan(gpu.first[i].expected), std::isnan(cpu.first[i].expected));
    if (!std::isnan(cpu.first[i].expected)) EXPECT_EQ(gpu.first[i].expected, cpu.first[i].expected);
    EXPECT_EQ(gpu.first[i].ulp, cpu.first[i].ulp);
    if (!std::isnan(cpu.first[i].abs_diff)) EXPECT_EQ(gpu.first[i].abs_diff, cpu.first[i].abs_diff);
  }
}

// compare() of the tensors moved to the GPU against compare() of them on the CPU.
Metrics expect_gpu_matches_cpu(const at::Tensor& actual, const at::Tensor& expected, const CompareOptions& opts = {}) {
  const Metrics cpu = compare(actual.cpu(), expected.cpu(), opts);
  const Metrics gpu = compare(actual.to(at::kCUDA), expected.to(at::kCUDA), opts);
  EXPECT_EQ(gpu.kernel, "cuda");  // not the CPU's scan of the same tensors, which would match trivially
  expect_same_metrics(gpu, cpu);
  return gpu;
}

at::Tensor vec(const std::vector<double>& values, at::ScalarType type) {
  return at::tensor(values, at::TensorOptions(at::kDouble)).to(type);
}

TEST(CompareCuda, EveryDtypePairMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (const at::ScalarType a : kDtypes)
    for (const at::ScalarType e : kDtypes) {
      SCOPED_TRACE(pair_name(a, e));
      const auto [actual, expected] = noisy_pair(kLarge, a, e, seed++);
      expect_gpu_matches_cpu(actual, expected, {.first_n = 50});
    }
}

// NaN and Inf at known positions, alone and side by side with finite neighbours in the same unit of four: a NaN on
// either side or both, Inf against finite, against -Inf and against itself, and an fp32 that rounds to Inf in bf16.
TEST(CompareCuda, NaNAndInfAtKnownPositions) {
  SKIP_WITHOUT_CUDA();
  const std::pair<at::ScalarType, at::ScalarType> pairs[] = {{at::kBFloat16, at::kFloat},
                                                             {at::kFloat, at::kFloat},
                                                             {at::kHalf, at::kHalf},
                                                             {at::kBFloat16, at::kBFloat16},
                                                             {at::kDouble, at::kDouble},
                                                             {at::kFloat, at::kDouble}};
  const struct {
    int64_t at;
    double actual, expected;
  } planted[] = {{3, kNaN, 1.0},          {4, 2.0, kNaN},       {5, kNaN, kNaN},     {70001, kInf, 1.0},
                 {70002, kInf, -kInf},    {70003, -kInf, -kInf}, {70004, 1.0, kInf}, {200000, kNaN, kNaN},
                 {300001, 3.3e38, 3.39e38}, {kLarge - 1, kNaN, 0.0}};
  for (const auto& [a_type, e_type] : pairs) {
    auto [actual, expected] = noisy_pair(kLarge, at::kDouble, at::kDouble, 7);
    for (const auto& p : planted) actual[p.at] = p.actual, expected[p.at] = p.expected;
    for (const bool allow_nan : {false, true}) {
      SCOPED_TRACE(pair_name(a_type, e_type) + (allow_nan ? ", nan allowed" : ""));
      const Metrics m = expect_gpu_matches_cpu(actual.to(a_type), expected.to(e_type),
                                               {.first_n = 20, .allow_nan = allow_nan});
      EXPECT_GT(m.nan_mismatch, 0);
      EXPECT_GT(m.inf_mismatch, 0);
    }
  }
}

// +0 against -0 is no difference, in whole units and mixed with nonzero elements; 0 against a subnormal is one ULP.
TEST(CompareCuda, SignedZerosAndSubnormals) {
  SKIP_WITHOUT_CUDA();
  for (const at::ScalarType type : {at::kBFloat16, at::kHalf, at::kFloat, at::kDouble}) {
    SCOPED_TRACE(dtype_name(type));
    const double tiny = type == at::kHalf       ? std::ldexp(1.0, -24)  // the dtype's smallest subnormal
                        : type == at::kBFloat16 ? std::ldexp(1.0, -133)
                        : type == at::kFloat    ? std::ldexp(1.0, -149)
                                                : std::ldexp(1.0, -1074);
    at::Tensor actual = at::zeros({kLarge}, at::kDouble), expected = at::zeros({kLarge}, at::kDouble);
    expected.slice(0, 0, kLarge, 2).fill_(-0.0);                      // +0 against -0 everywhere else
    actual.slice(0, 1000, 2000).fill_(tiny);                          // subnormal against zero
    expected.slice(0, 1500, 2500).fill_(-3 * tiny);                   // subnormals of both signs
    actual.slice(0, 5000, 5003).fill_(1.0);                           // a few normal values among zeros
    const Metrics m = expect_gpu_matches_cpu(actual.to(type), expected.to(type), {.first_n = 30});
    EXPECT_GT(m.bitwise_diff, 0);
  }
}

// Lengths that fill no vector, unit or tile, from one element past the CPU-only limit; and a start that is not
// 16-byte aligned (the element-wise loads).
TEST(CompareCuda, OddSizesAndUnalignedStarts) {
  SKIP_WITHOUT_CUDA();
  for (const int64_t n : {(int64_t{1} << 16) + 1, (int64_t{1} << 17) + 3, int64_t{2048} * 37 + 5}) {
    SCOPED_TRACE(n);
    const auto [actual, expected] = noisy_pair(n, at::kBFloat16, at::kFloat, n);
    expect_gpu_matches_cpu(actual, expected, {.first_n = 10});
  }
  const auto [actual, expected] = noisy_pair(kLarge + 1, at::kBFloat16, at::kBFloat16, 3);
  SCOPED_TRACE("unaligned");
  const at::Tensor a = actual.to(at::kCUDA).slice(0, 1), e = expected.to(at::kCUDA).slice(0, 1);
  expect_same_metrics(compare(a, e), compare(a.cpu(), e.cpu()));
}

// Equal largest errors at several places (in one unit, in one thread's later tiles, in other blocks): the first is
// reported for each measure.
TEST(CompareCuda, TiesGoToTheFirst) {
  SKIP_WITHOUT_CUDA();
  at::Tensor expected = at::ones({kLarge}, at::kFloat), actual = expected.clone();
  const int64_t places[] = {70000, 70001, 70003, 70000 + 2048, 70000 + 4096, 300000, kLarge - 1};
  for (const int64_t i : places) actual[i] = 1.5;
  const Metrics m = expect_gpu_matches_cpu(actual, expected);
  EXPECT_EQ(m.worst_abs_index, std::vector<int64_t>{70000});
  EXPECT_EQ(m.worst_rel_index, std::vector<int64_t>{70000});
  EXPECT_EQ(m.worst_ulp_index, std::vector<int64_t>{70000});
}

// The first mismatches in index order, sparse (across blocks) and dense, fewer than asked for and more.
TEST(CompareCuda, FirstMismatchesInIndexOrder) {
  SKIP_WITHOUT_CUDA();
  at::Tensor expected = at::ones({kLarge}, at::kBFloat16), actual = expected.clone();
  std::vector<int64_t> planted;
  for (int64_t i = 17; i < kLarge; i += 4099) planted.push_back(i);
  for (const int64_t i : planted) actual[i] = 2.0;
  actual[planted[3]] = kNaN;
  for (const int first_n : {1, 5, 150, 100000}) {
    SCOPED_TRACE(first_n);
    const Metrics m = expect_gpu_matches_cpu(actual, expected, {.first_n = first_n});
    ASSERT_EQ(m.first.size(), std::min<size_t>(first_n, planted.size()));
    for (size_t i = 0; i < m.first.size(); ++i) EXPECT_EQ(m.first[i].index, std::vector<int64_t>{planted[i]});
  }
  const auto [dense_actual, dense_expected] = noisy_pair(kLarge, at::kBFloat16, at::kFloat, 9);
  expect_gpu_matches_cpu(dense_actual, dense_expected, {.first_n = 3000});
}

// Heatmap cells against the GPU's units and tiles: a single column, columns fewer than a unit, a row that ends inside
// a unit, rows of a tile and more, three dimensions. Both dtype pairs that take different scans: bf16 against fp32
// loads its vectors, bf16 against bf16 stages them through the ring and counts its distances in pairs.
void expect_grids_match_cpu() {
  const std::vector<int64_t> shapes[] = {{kLarge, 1}, {kLarge / 3, 3}, {1, kLarge}, {40000, 7}, {37, 7168},
                                         {9, 40, 1001},  {2, 3, 4, 5000}};
  for (const at::ScalarType expected_type : {at::kFloat, at::kBFloat16}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(::testing::Message() << at::IntArrayRef(shape) << " bf16 vs " << dtype_name(expected_type));
      int64_t n = 1;
      for (const int64_t d : shape) n *= d;
      const auto [actual, expected] = noisy_pair(n, at::kBFloat16, expected_type, n);
      expect_gpu_matches_cpu(actual.view(shape), expected.view(shape));
    }
  }
}

TEST(CompareCuda, ErrorGridOfManyShapes) {
  SKIP_WITHOUT_CUDA();
  expect_grids_match_cpu();
}

// The scan keeps a thread's place in the heatmap in 32 bits, and in 64 only for views with more than 2^30 rows or
// columns (2 GiB of bf16 a side, and the CPU's comparison of them: too large to test): forced on small views, the 64-bit scan gives the same results.
TEST(CompareCuda, WideCoordinatesGiveTheSameResults) {
  SKIP_WITHOUT_CUDA();
  struct Forced {
    Forced() { compare_cuda::force_wide_coordinates(true); }
    ~Forced() { compare_cuda::force_wide_coordinates(false); }
  } forced;
  expect_grids_match_cpu();
}

// Expected may live elsewhere: it is moved to actual's device.
TEST(CompareCuda, ExpectedOnTheCpu) {
  SKIP_WITHOUT_CUDA();
  const auto [actual, expected] = noisy_pair(kLarge, at::kBFloat16, at::kDouble, 13);
  expect_same_metrics(compare(actual.to(at::kCUDA), expected), compare(actual, expected));
}

// The fp64 sums are added in a fixed order: two runs agree in every bit.
TEST(CompareCuda, TwoRunsAreBitwiseEqual) {
  SKIP_WITHOUT_CUDA();
  const auto [actual, expected] = noisy_pair(kLarge, at::kBFloat16, at::kFloat, 17);
  const at::Tensor a = actual.to(at::kCUDA), e = expected.to(at::kCUDA);
  const Metrics one = compare(a, e), two = compare(a, e);
  EXPECT_EQ(one.mean_abs, two.mean_abs);
  EXPECT_EQ(one.mean_rel, two.mean_rel);
  EXPECT_EQ(one.mean_ulp, two.mean_ulp);
  EXPECT_EQ(one.rel_l2, two.rel_l2);
  EXPECT_EQ(one.cosine, two.cosine);
  expect_same_metrics(two, one);
}

// Large CUDA tensors are compared where they are (the scan's workspace is allocated on the device), small ones on the
// CPU (nothing is).
TEST(CompareCuda, LargeTensorsAreComparedOnTheDevice) {
  SKIP_WITHOUT_CUDA();
  const auto allocations = [] {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    return stats.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].allocated;
  };
  for (const int64_t n : {int64_t{1} << 16, (int64_t{1} << 16) + 1}) {
    const auto [actual, expected] = noisy_pair(n, at::kFloat, at::kFloat, 19);
    const at::Tensor a = actual.to(at::kCUDA), e = expected.to(at::kCUDA);
    const int64_t before = allocations();
    compare(a, e);
    EXPECT_EQ(allocations() > before, n > (int64_t{1} << 16)) << n << " elements";
  }
}

}  // namespace
}  // namespace parity
