#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/tensor.hpp>
#include <vector>

namespace parity {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The representable values at the edges of one dtype, written out independently of the code under test.
struct Edges {
  at::ScalarType type;
  double min_subnormal;
  double min_normal;
  double max_finite;
  double below_one;        // the predecessor of 1.0
  double ulp_one;          // the spacing just above 1.0
  double top_spacing;      // spacing of the largest binade
  int64_t inf_ordered;     // ordered integer of +Inf: its bit pattern
  int64_t neg_inf_to_inf;  // ULP distance from -Inf to +Inf (saturated where it exceeds int64)
};

const Edges kEdges[] = {
    {at::kDouble, std::ldexp(1.0, -1074), std::ldexp(1.0, -1022), std::numeric_limits<double>::max(),
     1 - std::ldexp(1.0, -53), std::ldexp(1.0, -52), std::ldexp(1.0, 971), 0x7FF0000000000000,
     std::numeric_limits<int64_t>::max()},
    {at::kFloat, std::ldexp(1.0, -149), std::ldexp(1.0, -126), std::numeric_limits<float>::max(),
     1 - std::ldexp(1.0, -24), std::ldexp(1.0, -23), std::ldexp(1.0, 104), 0x7F800000, 2 * int64_t{0x7F800000}},
    {at::kHalf, std::ldexp(1.0, -24), std::ldexp(1.0, -14), 65504.0, 1 - std::ldexp(1.0, -11), std::ldexp(1.0, -10),
     32.0, 0x7C00, 2 * 0x7C00},
    {at::kBFloat16, std::ldexp(1.0, -133), std::ldexp(1.0, -126), std::ldexp(255.0, 120), 0.99609375,
     std::ldexp(1.0, -7), std::ldexp(1.0, 120), 0x7F80, 2 * 0x7F80},
};

// Names the parameter in gtest's messages instead of dumping its bytes.
void PrintTo(const Edges& edges, std::ostream* os) { *os << dtype_name(edges.type); }

at::Tensor vec(std::vector<double> values, at::ScalarType type) {
  return at::tensor(values, at::TensorOptions(at::kDouble)).to(type);
}

// The ULP distance of one pair measured by compare() on one-element tensors: the tensor path must agree with
// the scalar one.
int64_t tensor_ulp(double a, double b, at::ScalarType type) {
  const Metrics m = compare(vec({a}, type), vec({b}, type));
  if (m.first.empty()) return m.max_ulp;
  return m.first[0].ulp;
}

class UlpEdges : public ::testing::TestWithParam<Edges> {};

TEST_P(UlpEdges, DistanceTable) {
  const Edges& d = GetParam();
  const struct {
    double a, b;
    int64_t ulps;
  } table[] = {
      {0.0, -0.0, 0},
      {d.min_subnormal, 0.0, 1},
      {-d.min_subnormal, 0.0, 1},
      {-d.min_subnormal, d.min_subnormal, 2},
      {d.min_normal, d.min_normal - d.min_subnormal, 1},  // largest subnormal to smallest normal
      {1.0, d.below_one, 1},                              // across a binade
      {1.0, 1.0 + d.ulp_one, 1},
      {d.below_one, 1.0 + d.ulp_one, 2},
      {-1.0, -d.below_one, 1},
      {1.0, 1.0 + 4 * d.ulp_one, 4},
      {d.max_finite, kInf, 1},
      {-d.max_finite, -kInf, 1},
      {kInf, kInf, 0},
      {-kInf, -kInf, 0},
      {-kInf, kInf, d.neg_inf_to_inf},
      {kNaN, 1.0, -1},
      {0.0, kNaN, -1},
      {kNaN, kNaN, -1},
      {kNaN, kInf, -1},
  };
  for (const auto& row : table) {
    SCOPED_TRACE(::testing::Message() << dtype_name(d.type) << ": " << row.a << " vs " << row.b);
    EXPECT_EQ(ulp_distance(row.a, row.b, d.type), row.ulps);
    EXPECT_EQ(ulp_distance(row.b, row.a, d.type), row.ulps);
    EXPECT_EQ(tensor_ulp(row.a, row.b, d.type), row.ulps);
  }
}

TEST_P(UlpEdges, OrderedBits) {
  const Edges& d = GetParam();
  EXPECT_EQ(ordered_bits(0.0, d.type), 0);
  EXPECT_EQ(ordered_bits(-0.0, d.type), 0);
  EXPECT_EQ(ordered_bits(d.min_subnormal, d.type), 1);
  EXPECT_EQ(ordered_bits(-d.min_subnormal, d.type), -1);
  EXPECT_EQ(ordered_bits(kInf, d.type), d.inf_ordered);
  EXPECT_EQ(ordered_bits(-kInf, d.type), -d.inf_ordered);
  EXPECT_EQ(ordered_bits(d.max_finite, d.type), d.inf_ordered - 1);
  EXPECT_LT(ordered_bits(-2.0, d.type), ordered_bits(-1.0, d.type));
  EXPECT_LT(ordered_bits(d.below_one, d.type), ordered_bits(1.0, d.type));
}

TEST_P(UlpEdges, SpacingAt) {
  const Edges& d = GetParam();
  EXPECT_EQ(ulp_at(1.0, d.type), d.ulp_one);
  EXPECT_EQ(ulp_at(-1.0, d.type), d.ulp_one);
  EXPECT_EQ(ulp_at(d.below_one, d.type), d.ulp_one / 2);
  EXPECT_EQ(ulp_at(1.5, d.type), d.ulp_one);
  EXPECT_EQ(ulp_at(2.0, d.type), 2 * d.ulp_one);
  EXPECT_EQ(ulp_at(0.0, d.type), d.min_subnormal);
  EXPECT_EQ(ulp_at(d.min_subnormal, d.type), d.min_subnormal);
  EXPECT_EQ(ulp_at(d.min_normal, d.type), d.min_subnormal);
  EXPECT_EQ(ulp_at(d.max_finite, d.type), d.top_spacing);
  EXPECT_EQ(ulp_at(kInf, d.type), kInf);
  EXPECT_TRUE(std::isnan(ulp_at(kNaN, d.type)));
  // The spacing is the distance to the next representable value: one ULP by the ordered mapping.
  EXPECT_EQ(ulp_distance(1.0, 1.0 + ulp_at(1.0, d.type), d.type), 1);
}

INSTANTIATE_TEST_SUITE_P(AllFloatDtypes, UlpEdges, ::testing::ValuesIn(kEdges),
                         [](const ::testing::TestParamInfo<Edges>& info) { return dtype_name(info.param.type); });

TEST(UlpAt, BeyondTheRangeStaysAtTheTopBinade) { EXPECT_EQ(ulp_at(1e6, at::kHalf), 32.0); }

TEST(UlpAt, Bf16OneIsTwoToTheMinusSeven) { EXPECT_EQ(ulp_at(1.0, at::kBFloat16), 0.0078125); }

TEST(UlpBucketLabel, NamesEveryBucket) {
  const char* expected[kUlpBuckets] = {"0",     "1",     "2",      "3-4",      "5-8",   "9-16",
                                       "17-32", "33-64", "65-256", "257-1024", ">1024", "NaN/Inf"};
  for (int b = 0; b < kUlpBuckets; ++b) EXPECT_EQ(ulp_bucket_label(b), expected[b]);
  EXPECT_THROW(ulp_bucket_label(kUlpBuckets), std::out_of_range);
  EXPECT_THROW(ulp_bucket_label(-1), std::out_of_range);
}

TEST(Compare, IdenticalTensorsHaveNoError) {
  const at::Tensor t = at::randn({64, 32});
  const Metrics m = compare(t, t.clone());
  EXPECT_EQ(m.dtype, "fp32");
  EXPECT_EQ(m.numel, 64 * 32);
  EXPECT_EQ(m.bitwise_diff, 0);
  EXPECT_EQ(m.nan_mismatch, 0);
  EXPECT_EQ(m.inf_mismatch, 0);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.max_ulp, 0);
  EXPECT_EQ(m.rel_l2, 0);
  EXPECT_NEAR(m.cosine, 1.0, 1e-12);
  EXPECT_EQ(m.ulp_hist[0], 64 * 32);
  EXPECT_TRUE(m.first.empty());
  EXPECT_EQ(m.max_abs_expected_value, t.abs().max().item<double>());
}

TEST(Compare, UlpHistogramAndUlpStatistics) {
  const std::vector<int> steps = {0, 1, 2, 3, 5, 9, 17, 100, 2000};
  const at::Tensor expected = at::ones({static_cast<int64_t>(steps.size())});
  const at::Tensor actual = expected.view(at::kInt).add(at::tensor(steps, at::kInt)).view(at::kFloat);
  const Metrics m = compare(actual, expected);
  const std::array<int64_t, kUlpBuckets> hist = {1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0};
  EXPECT_EQ(m.ulp_hist, hist);
  EXPECT_EQ(m.max_ulp, 2000);
  EXPECT_DOUBLE_EQ(m.mean_ulp, 2137.0 / 9);
  EXPECT_EQ(m.worst_ulp_index, std::vector<int64_t>{8});
  EXPECT_DOUBLE_EQ(m.max_abs, 2000 * std::ldexp(1.0, -23));
  EXPECT_EQ(m.bitwise_diff, 8);
}

TEST(Compare, AbsPercentilesAreNearestRank) {
  const at::Tensor expected = at::zeros({1000}, at::kDouble);
  const at::Tensor actual = at::arange(1, 1001, at::kDouble).flip(0);
  const Metrics m = compare(actual, expected);
  EXPECT_EQ(m.abs_pct, (std::array<double, 4>{500, 900, 990, 999}));
  EXPECT_DOUBLE_EQ(m.mean_abs, 500.5);
  EXPECT_EQ(m.max_abs, 1000);
  EXPECT_EQ(m.worst_abs_index, std::vector<int64_t>{0});
  // Relative error is undefined against zeros; the L2 ratio is unbounded.
  EXPECT_EQ(m.max_rel, 0);
  EXPECT_TRUE(m.worst_rel_index.empty());
  EXPECT_EQ(m.rel_l2, kInf);
  EXPECT_EQ(m.cosine, 0);
}

TEST(Compare, RelL2AndCosine) {
  const at::Tensor expected = vec({3, 4}, at::kDouble);
  Metrics m = compare(vec({6, 8}, at::kDouble), expected);
  EXPECT_DOUBLE_EQ(m.rel_l2, 1.0);
  EXPECT_DOUBLE_EQ(m.cosine, 1.0);
  EXPECT_DOUBLE_EQ(m.max_rel, 1.0);
  EXPECT_DOUBLE_EQ(m.mean_rel, 1.0);
  m = compare(vec({4, -3}, at::kDouble), expected);
  EXPECT_DOUBLE_EQ(m.rel_l2, std::sqrt(50.0) / 5);
  EXPECT_NEAR(m.cosine, 0.0, 1e-15);
}

TEST(Compare, WorstIndicesPerMeasure) {
  const Metrics m = compare(vec({101, 1.5, 1}, at::kDouble), vec({100, 1, 1}, at::kDouble));
  EXPECT_EQ(m.worst_abs_index, std::vector<int64_t>{0});
  EXPECT_EQ(m.worst_rel_index, std::vector<int64_t>{1});
  EXPECT_EQ(m.worst_ulp_index, std::vector<int64_t>{1});  // 2^51 ulps against 2^46
  EXPECT_DOUBLE_EQ(m.max_rel, 0.5);
}

TEST(Compare, FirstMismatchesInOrderWithNdIndex) {
  const at::Tensor expected = at::zeros({2, 3, 4});
  at::Tensor actual = expected.clone();
  actual.view({-1})[5] = 1;
  actual.view({-1})[13] = -2;
  actual.view({-1})[22] = 3;
  actual.view({-1})[23] = 4;
  const Metrics m = compare(actual, expected, {.first_n = 3});
  EXPECT_EQ(m.bitwise_diff, 4);
  ASSERT_EQ(m.first.size(), 3u);
  EXPECT_EQ(m.first[0].index, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(m.first[1].index, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(m.first[2].index, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(m.first[1].actual, -2);
  EXPECT_EQ(m.first[1].expected, 0);
  EXPECT_EQ(m.first[1].abs_diff, 2);
  EXPECT_EQ(m.first[1].ulp, ordered_bits(2.0, at::kFloat));
}

TEST(Compare, SignedZerosAreEqualValues) {
  const Metrics m = compare(vec({0.0, -0.0}, at::kBFloat16), vec({-0.0, 0.0}, at::kBFloat16));
  EXPECT_EQ(m.bitwise_diff, 0);
  EXPECT_EQ(m.max_ulp, 0);
  EXPECT_TRUE(m.first.empty());
}

TEST(Compare, NaNAndInfMismatches) {
  const at::Tensor expected = vec({1, kNaN, 3, kInf, 5, -kInf}, at::kFloat);
  const at::Tensor actual = vec({kNaN, kNaN, 3, kInf, kInf, kInf}, at::kFloat);

  const Metrics strict = compare(actual, expected);
  EXPECT_EQ(strict.nan_mismatch, 2);  // one-sided NaN, and NaN where NaN is not allowed
  EXPECT_EQ(strict.inf_mismatch, 2);  // Inf against finite, and Inf against -Inf
  EXPECT_EQ(strict.nan_expected, 1);
  EXPECT_EQ(strict.bitwise_diff, 3);  // NaN vs NaN is not a value difference
  EXPECT_EQ(strict.ulp_hist[kUlpBuckets - 1], 4);
  EXPECT_EQ(strict.ulp_hist[0], 2);
  EXPECT_EQ(strict.max_abs, 0);  // only the matching elements have a measurable error
  ASSERT_EQ(strict.first.size(), 4u);
  EXPECT_EQ(strict.first[0].index, std::vector<int64_t>{0});
  EXPECT_EQ(strict.first[0].ulp, -1);
  EXPECT_EQ(strict.first[1].index, std::vector<int64_t>{1});
  EXPECT_EQ(strict.first[1].ulp, -1);
  EXPECT_EQ(strict.first[2].index, std::vector<int64_t>{4});
  EXPECT_EQ(strict.first[2].abs_diff, kInf);
  EXPECT_EQ(strict.first[3].ulp, 2 * int64_t{0x7F800000});

  const Metrics lenient = compare(actual, expected, {.allow_nan = true});
  EXPECT_EQ(lenient.nan_mismatch, 1);
  EXPECT_EQ(lenient.ulp_hist[0], 3);
  EXPECT_EQ(lenient.ulp_hist[kUlpBuckets - 1], 3);
  ASSERT_EQ(lenient.first.size(), 3u);
  EXPECT_EQ(lenient.first[1].index, std::vector<int64_t>{4});
}

TEST(Compare, AllowNanStillNeedsNaNInActual) {
  const Metrics m = compare(vec({1, 2}, at::kFloat), vec({kNaN, 2}, at::kFloat), {.allow_nan = true});
  EXPECT_EQ(m.nan_mismatch, 1);
}

TEST(Compare, MixedDtypesCountUlpsInTheNarrowerAndErrorsInFp64) {
  const at::Tensor actual = vec({1, 1}, at::kBFloat16);
  const at::Tensor expected = vec({1 + std::ldexp(1.0, -9), 1 + std::ldexp(1.0, -7)}, at::kFloat);
  const Metrics m = compare(actual, expected);
  EXPECT_EQ(m.dtype, "bf16");
  EXPECT_EQ(m.bitwise_diff, 1);  // 1 + 2^-9 rounds to 1 in bf16
  EXPECT_EQ(m.max_ulp, 1);
  EXPECT_EQ(m.max_abs, std::ldexp(1.0, -7));
  EXPECT_DOUBLE_EQ(m.mean_abs, (std::ldexp(1.0, -9) + std::ldexp(1.0, -7)) / 2);
  ASSERT_EQ(m.first.size(), 1u);
  EXPECT_EQ(m.first[0].index, std::vector<int64_t>{1});

  EXPECT_EQ(compare(expected, actual).dtype, "bf16");                              // the narrower side wins either way
  EXPECT_EQ(compare(vec({1}, at::kHalf), vec({1}, at::kBFloat16)).dtype, "fp16");  // a tie: the output's own
}

TEST(Compare, ShapeMismatchThrowsWithBothShapes) {
  try {
    compare(at::zeros({2, 3}), at::zeros({3, 2}));
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "shape mismatch: got [2, 3] fp32 want [3, 2] fp32");
  }
}

TEST(Compare, UnsupportedDtypeThrowsNamingIt) {
  try {
    compare(at::zeros({2}, at::kInt), at::zeros({2}, at::kInt));
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ulp_at(1.0, at::kLong), InputError);
  EXPECT_THROW(ordered_bits(1.0, at::kFloat8_e4m3fn), InputError);
}

TEST(Compare, EmptyTensors) {
  const Metrics m = compare(at::zeros({0, 4}), at::zeros({0, 4}));
  EXPECT_EQ(m.numel, 0);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_TRUE(m.first.empty());
  EXPECT_TRUE(m.worst_abs_index.empty());
}

// The heatmap grid: one planted error lands in the one cell whose block holds it, at its value.
TEST(Compare, ErrorGridPutsAnErrorInItsCell) {
  const at::Tensor expected = at::zeros({2, 32, 40}, at::kDouble);
  at::Tensor actual = expected.clone();
  actual[1][18][37] = 0.25;  // row 1 * 32 + 18 = 50 of the [64, 40] view
  const ErrorGrid g = compare(actual, expected).error_grid;
  EXPECT_EQ(g.tensor_rows, 64);
  EXPECT_EQ(g.tensor_cols, 40);
  ASSERT_EQ(g.rows, kErrorGridSide);
  ASSERT_EQ(g.cols, kErrorGridSide);
  ASSERT_EQ(g.cells.size(), size_t(g.rows * g.cols));
  // Blocks span [i*n/bins, (i+1)*n/bins): row 50 of 64 is in block 25, column 37 of 40 in block 30 ([37, 38)).
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) EXPECT_EQ(g.cells[r * g.cols + c], r == 25 && c == 30 ? 0.25 : 0.0) << r << "," << c;
}

TEST(Compare, ErrorGridKeepsSmallTensorsElementwiseAndMarksNonFinite) {
  const at::Tensor expected = at::zeros({2, 3}, at::kFloat);
  const at::Tensor actual = vec({0, 0.5, 0, kNaN, 0, kInf}, at::kFloat).reshape({2, 3});
  const ErrorGrid g = compare(actual, expected).error_grid;
  EXPECT_EQ(g.rows, 2);
  EXPECT_EQ(g.cols, 3);
  EXPECT_EQ(g.cells, (std::vector<double>{0, 0.5, 0, kInf, 0, kInf}));

  const ErrorGrid allowed = compare(vec({kNaN}, at::kFloat), vec({kNaN}, at::kFloat), {.allow_nan = true}).error_grid;
  EXPECT_EQ(allowed.cells, std::vector<double>{0.0});
  const ErrorGrid scalar = compare(at::scalar_tensor(1.5), at::scalar_tensor(1.0)).error_grid;
  EXPECT_EQ(scalar.rows * scalar.cols, 1);
  EXPECT_EQ(scalar.cells, std::vector<double>{0.5});
  EXPECT_TRUE(compare(at::zeros({0, 4}), at::zeros({0, 4})).error_grid.cells.empty());
}

}  // namespace
}  // namespace parity
