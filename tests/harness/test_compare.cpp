#include <gtest/gtest.h>

#include "tests/harness/compare_test_data.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <ostream>
#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/results.hpp>
#include <parity/tensor.hpp>
#include <vector>

namespace parity {
namespace {

using test::noisy_pair;

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

// The cosine of a tensor with itself is 1, not a rounding step past it (1.0000000000000002 came out of a candidate
// compared with its own golden).
TEST(Compare, CosineOfATensorWithItselfIsOne) {
  int past_one = 0;
  for (int seed = 0; seed < 64; ++seed) {
    const at::Tensor t = at::randn({1000 + seed}, at::TensorOptions().dtype(at::kFloat)).mul_(seed + 1);
    const Metrics m = compare(t, t.clone());
    past_one += m.cosine > 1.0;
    EXPECT_GE(m.cosine, 1.0 - 1e-15);
  }
  EXPECT_EQ(past_one, 0);
}

// An error of a subnormal size (an fp64 reference that underflows where the path gives 0) is a heatmap cell like any
// other in the results document: rounding it to three digits threw std::out_of_range (stod), losing the document.
TEST(Compare, ASubnormalErrorCellIsWrittenToTheResults) {
  const Metrics m = compare(at::zeros({4, 4}, at::kDouble), at::full({4, 4}, 1e-310, at::kDouble));
  nlohmann::json j;
  ASSERT_NO_THROW(j = to_json(m));
  EXPECT_NEAR(j.at("heatmap").at("cells").at(0).get<double>(), 1e-310, 1e-312);
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

// ---- tensors large enough for compare()'s vector path ------------------------------------------------------------
// compare() takes blocks of finite values through a vector kernel and anything else through a scalar one, in chunks
// spread over threads. The metrics below are recomputed here with plain ATen ops, element by element.

// Every metric of `actual` against `expected` over the elements where `keep` is true, for finite inputs of the same
// sign, ULPs counted in the narrower dtype.
struct Reference {
  int64_t bitwise_diff = 0, max_ulp = 0, worst_ulp = -1, worst_abs = -1, worst_rel = -1;
  double max_abs = 0, mean_abs = 0, max_rel = 0, mean_rel = 0, mean_ulp = 0, rel_l2 = 0, cosine = 0;
  double max_abs_expected = 0;
  std::vector<int64_t> ulp_hist, differing;  // ulp_hist: the finite buckets; differing: flat indices, in order
};

// The ordered integer of each value rounded to `type`: the sign-magnitude bit pattern made two's complement.
at::Tensor ordered(const at::Tensor& t, at::ScalarType type) {
  const at::ScalarType bits = type == at::kDouble ? at::kLong : type == at::kFloat ? at::kInt : at::kShort;
  const at::Tensor b = t.to(type).view(bits).to(at::kLong);
  const int64_t magnitude_mask = type == at::kDouble ? std::numeric_limits<int64_t>::max()
                                                     : (int64_t{1} << (t.to(type).element_size() * 8 - 1)) - 1;
  const at::Tensor magnitude = b.bitwise_and(magnitude_mask);
  return at::where(b < 0, -magnitude, magnitude);
}

Reference reference(const at::Tensor& actual, const at::Tensor& expected, const at::Tensor& keep) {
  const at::ScalarType ulp_type =
      expected.element_size() < actual.element_size() ? expected.scalar_type() : actual.scalar_type();
  const at::Tensor index = at::arange(actual.numel(), at::kLong).masked_select(keep.reshape(-1));
  const at::Tensor a = actual.reshape(-1).index_select(0, index), e = expected.reshape(-1).index_select(0, index);
  const at::Tensor a64 = a.to(at::kDouble), e64 = e.to(at::kDouble);
  const at::Tensor ulp = (ordered(a, ulp_type) - ordered(e, ulp_type)).abs();
  const at::Tensor err = (a64 - e64).abs();
  const at::Tensor defined = e64 != 0;
  const at::Tensor rel = at::where(defined, err / e64.abs(), -1.0);
  const auto at_index = [&](const at::Tensor& t) { return index[t.argmax().item<int64_t>()].item<int64_t>(); };
  Reference r;
  r.bitwise_diff = (ulp != 0).sum().item<int64_t>();
  r.max_ulp = ulp.max().item<int64_t>();
  r.worst_ulp = at_index(ulp);
  r.mean_ulp = ulp.to(at::kDouble).mean().item<double>();
  r.max_abs = err.max().item<double>();
  r.worst_abs = at_index(err);
  r.mean_abs = err.mean().item<double>();
  r.max_rel = rel.max().item<double>();
  r.worst_rel = at_index(rel);
  r.mean_rel = err.masked_select(defined).div(e64.masked_select(defined).abs()).mean().item<double>();
  r.rel_l2 = ((a64 - e64).square().sum().sqrt() / e64.square().sum().sqrt()).item<double>();
  r.cosine = ((a64 * e64).sum() / (a64.square().sum().sqrt() * e64.square().sum().sqrt())).item<double>();
  r.max_abs_expected = e64.abs().max().item<double>();
  // Bucket b holds the distances in (edge[b-1], edge[b]]: bucketize counts the edges below a distance.
  const at::Tensor edges = at::tensor(std::vector<int64_t>{0, 1, 2, 4, 8, 16, 32, 64, 256, 1024}, at::kLong);
  const at::Tensor hist = at::bincount(at::bucketize(ulp, edges), {}, kUlpBuckets - 1);
  r.ulp_hist.assign(hist.data_ptr<int64_t>(), hist.data_ptr<int64_t>() + hist.numel());
  const at::Tensor differing = index.masked_select(ulp != 0);
  r.differing.assign(differing.data_ptr<int64_t>(), differing.data_ptr<int64_t>() + differing.numel());
  return r;
}

Reference reference(const at::Tensor& actual, const at::Tensor& expected) {
  return reference(actual, expected, at::ones(actual.sizes(), at::kBool));
}

// Relative agreement for the sums, which compare() adds up in another order.
void expect_close(double got, double want, const char* what) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(std::fabs(want), 1e-300)) << what;
}

// compare()'s metrics against the reference, which left out `uncomparable` elements that differ.
void expect_matches(const Metrics& m, const Reference& r, at::IntArrayRef sizes, int64_t uncomparable = 0) {
  const auto nd = [&](int64_t flat) {
    std::vector<int64_t> index(sizes.size());
    for (size_t d = sizes.size(); d-- > 0;) index[d] = flat % sizes[d], flat /= sizes[d];
    return index;
  };
  EXPECT_EQ(m.bitwise_diff, r.bitwise_diff + uncomparable);
  EXPECT_EQ(m.max_ulp, r.max_ulp);
  EXPECT_EQ(m.worst_ulp_index, nd(r.worst_ulp));
  EXPECT_EQ(m.max_abs, r.max_abs);
  EXPECT_EQ(m.worst_abs_index, nd(r.worst_abs));
  EXPECT_EQ(m.max_rel, r.max_rel);
  EXPECT_EQ(m.worst_rel_index, nd(r.worst_rel));
  EXPECT_EQ(m.max_abs_expected_value, r.max_abs_expected);
  EXPECT_EQ(std::vector<int64_t>(m.ulp_hist.begin(), m.ulp_hist.end() - 1), r.ulp_hist);
  expect_close(m.mean_abs, r.mean_abs, "mean_abs");
  expect_close(m.mean_rel, r.mean_rel, "mean_rel");
  expect_close(m.mean_ulp, r.mean_ulp, "mean_ulp");
  expect_close(m.rel_l2, r.rel_l2, "rel_l2");
  expect_close(m.cosine, r.cosine, "cosine");
}


// Every dtype pair, through the vector kernel (bf16 or fp32 ULPs) or not (fp16, fp64), over several chunks and a
// length that is a multiple of no block size.
TEST(CompareLarge, MatchesAnIndependentComputation) {
  const int64_t n = (int64_t{5} << 18) / 2 + 1000 + 7;
  const std::pair<at::ScalarType, at::ScalarType> pairs[] = {
      {at::kBFloat16, at::kFloat},   {at::kFloat, at::kFloat},     {at::kFloat, at::kDouble},
      {at::kBFloat16, at::kDouble},  {at::kBFloat16, at::kBFloat16}, {at::kFloat, at::kBFloat16},
      {at::kHalf, at::kFloat},       {at::kDouble, at::kDouble}};
  uint64_t seed = 1;
  for (const auto& [actual_type, expected_type] : pairs) {
    SCOPED_TRACE(dtype_name(actual_type) + " vs " + dtype_name(expected_type));
    const auto [actual, expected] = noisy_pair(n, actual_type, expected_type, seed++);
    const Metrics m = compare(actual, expected, {.first_n = 40});
    const Reference r = reference(actual, expected);
    expect_matches(m, r, actual.sizes());
    EXPECT_EQ(m.nan_mismatch + m.inf_mismatch, 0);
    ASSERT_EQ(m.first.size(), 40u);
    for (size_t i = 0; i < m.first.size(); ++i) EXPECT_EQ(m.first[i].index, std::vector<int64_t>{r.differing[i]});
  }
}

// One NaN in the middle of a clean 2^20-element tensor sends its block to the scalar path; the blocks around it stay
// vectorized, and the metrics are those of every other element.
TEST(CompareLarge, OneNaNInTheMiddle) {
  const int64_t n = int64_t{1} << 20, nan_at = n / 2 + 123;
  auto [actual, expected] = noisy_pair(n, at::kBFloat16, at::kFloat, 7);
  actual[nan_at] = std::numeric_limits<double>::quiet_NaN();
  const at::Tensor keep = at::arange(n) != nan_at;
  const Reference r = reference(actual, expected, keep);
  const Metrics m = compare(actual, expected, {.first_n = 1000000});
  expect_matches(m, r, actual.sizes(), 1);
  EXPECT_EQ(m.nan_mismatch, 1);
  EXPECT_EQ(m.ulp_hist[kUlpBuckets - 1], 1);
  // Listed in order, the NaN among the differing elements.
  std::vector<int64_t> want = r.differing;
  want.insert(std::upper_bound(want.begin(), want.end(), nan_at), nan_at);
  ASSERT_EQ(m.first.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(m.first[i].index, std::vector<int64_t>{want[i]}) << i;
}

// The finite rows of the edge table, each filling whole blocks of the vector kernel (where the dtype has one).
TEST(CompareLarge, EdgeDistancesInFullBlocks) {
  for (const Edges& d : kEdges) {
    const struct {
      double a, b;
      int64_t ulps;
    } table[] = {
        {0.0, -0.0, 0},
        {d.min_subnormal, 0.0, 1},
        {-d.min_subnormal, d.min_subnormal, 2},
        {d.min_normal, d.min_normal - d.min_subnormal, 1},
        {1.0, d.below_one, 1},
        {d.below_one, 1.0 + d.ulp_one, 2},
        {-1.0, -d.below_one, 1},
        {1.0, 1.0 + 4 * d.ulp_one, 4},
        {d.max_finite, d.max_finite - d.top_spacing, 1},
    };
    for (const auto& row : table) {
      SCOPED_TRACE(::testing::Message() << dtype_name(d.type) << ": " << row.a << " vs " << row.b);
      const Metrics m =
          compare(vec(std::vector<double>(96, row.a), d.type), vec(std::vector<double>(96, row.b), d.type));
      EXPECT_EQ(m.max_ulp, row.ulps);
      EXPECT_EQ(m.bitwise_diff, row.ulps == 0 ? 0 : 96);
      EXPECT_EQ(m.nan_mismatch + m.inf_mismatch, 0);
    }
  }
}

// A finite fp32 that rounds to Inf in bf16 is an Inf in ULP terms, wherever its block is scanned, on either side.
TEST(CompareLarge, Fp32RoundingToBf16InfIsAnInfMismatch) {
  std::vector<double> wide(512, 1.0);
  wide[300] = 3.4e38;  // rounds to bf16 Inf
  const at::Tensor ones = vec(std::vector<double>(512, 1.0), at::kBFloat16);
  const Metrics m = compare(ones, vec(wide, at::kFloat));
  EXPECT_EQ(m.inf_mismatch, 1);
  EXPECT_EQ(m.bitwise_diff, 1);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.max_abs_expected_value, static_cast<double>(static_cast<float>(3.4e38)));
  const Metrics swapped = compare(vec(wide, at::kFloat), ones);
  EXPECT_EQ(swapped.inf_mismatch, 1);
  EXPECT_EQ(swapped.bitwise_diff, 1);
  EXPECT_EQ(swapped.max_abs, 0);
}

// Equal maxima in one block, in different blocks and in different chunks: the first is reported, whichever thread
// scanned it. With a bf16 side the tie in 700's block is offered to the maxima again, in a run of its own.
TEST(CompareLarge, TiesGoToTheFirst) {
  const int64_t n = 3 * (int64_t{1} << 18);
  for (const at::ScalarType expected_dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(expected_dtype));
    at::Tensor expected = at::ones({n}, at::kFloat), actual = expected.clone();
    for (const int64_t i : {int64_t{700}, int64_t{900}, int64_t{1} << 18, (int64_t{1} << 19) + 5}) actual[i] = 1.5;
    const Metrics m = compare(actual, expected.to(expected_dtype));
    EXPECT_EQ(m.worst_abs_index, std::vector<int64_t>{700});
    EXPECT_EQ(m.worst_rel_index, std::vector<int64_t>{700});
    EXPECT_EQ(m.worst_ulp_index, std::vector<int64_t>{700});
    EXPECT_EQ(m.max_abs, 0.5);
  }
}

// The relative error is not defined where expected is 0, however large the error there: in fp32 pairs, and where
// quotients sum as fractions (a bf16 side), whose run of 32 holding the 0 is summed again without it.
TEST(CompareLarge, RelativeErrorSkipsZerosInAVectorBlock) {
  std::vector<double> expected(512, 2.0), actual(512, 2.0);
  expected[10] = 0, actual[10] = 5;  // the largest abs error, no relative error
  actual[400] = 2.5;                 // the largest relative error
  actual[20] = 2.25;                 // in the run of the 0
  for (const at::ScalarType expected_dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(expected_dtype));
    const Metrics m = compare(vec(actual, at::kFloat), vec(expected, expected_dtype));
    EXPECT_EQ(m.worst_abs_index, std::vector<int64_t>{10});
    EXPECT_EQ(m.worst_rel_index, std::vector<int64_t>{400});
    EXPECT_EQ(m.max_rel, 0.25);
    EXPECT_DOUBLE_EQ(m.mean_rel, 0.375 / 511);
  }
}

// A relative error above the largest one before it by as little as the dtypes allow (x1 / e1 - x2 / e2 = 1 / (e1 e2))
// is the largest: fp32 pairs divide every element out; where a side is bf16 the vector kernel divides a quotient out
// only where its products say it may beat the largest so far. e below 2^8 is exact in bf16, e + x below 2^24 in fp32.
TEST(CompareLarge, LargestRelativeErrorByTheNarrowestMargin) {
  struct Margin {
    int64_t e1, x1, e2, x2;  // x1 = e2^-1 mod e1, shifted by multiples of e1 (x2 by as many of e2)
    at::ScalarType expected_dtype;
  };
  for (const Margin& c : {Margin{8388593, 6990494, 8388587, 6990489, at::kFloat},  // a relative 2^-45.7
                          Margin{251, 8388445, 241, 8054244, at::kBFloat16}}) {  // a relative 2^-30.9
    SCOPED_TRACE(c10::toString(c.expected_dtype));
    ASSERT_EQ(c.x1 * c.e2 - c.x2 * c.e1, 1);
    at::Tensor expected = at::ones({2048}, at::kFloat), actual = expected.clone();
    expected[100] = static_cast<float>(c.e2), actual[100] = static_cast<float>(c.e2 + c.x2);
    expected[1500] = static_cast<float>(c.e1), actual[1500] = static_cast<float>(c.e1 + c.x1);
    const Metrics m = compare(actual, expected.to(c.expected_dtype));
    const double q1 = static_cast<double>(c.x1) / static_cast<double>(c.e1);
    const double q2 = static_cast<double>(c.x2) / static_cast<double>(c.e2);
    EXPECT_EQ(m.max_rel, q1);
    EXPECT_EQ(m.worst_rel_index, std::vector<int64_t>{1500});
    EXPECT_NEAR(m.mean_rel, (q1 + q2) / 2048, 1e-12 * m.mean_rel);
  }
}

// Every field, the floating sums included, is the same on one thread and on several (compare.cpp is built with OpenMP,
// so that at::set_num_threads takes effect there: it does not compile without).
TEST(CompareLarge, IndependentOfTheThreadCount) {
  const int64_t n = 7 * 187295;  // five chunks and a bit, seven columns
  auto [actual, expected] = noisy_pair(n, at::kBFloat16, at::kFloat, 11);
  actual[12345] = std::numeric_limits<double>::quiet_NaN();
  expected[700000] = std::numeric_limits<double>::infinity();
  actual[1000001] = -std::numeric_limits<double>::infinity();
  const int threads = at::get_num_threads();
  std::vector<Metrics> runs;
  for (const int t : {1, 2, 3}) {
    at::set_num_threads(t);
    runs.push_back(compare(actual.view({-1, 7}), expected.view({-1, 7}), {.first_n = 20}));
  }
  at::set_num_threads(threads);
  for (const Metrics& m : runs) {
    const Metrics& one = runs.front();
    EXPECT_EQ(m.bitwise_diff, one.bitwise_diff);
    EXPECT_EQ(m.nan_mismatch, one.nan_mismatch);
    EXPECT_EQ(m.inf_mismatch, one.inf_mismatch);
    EXPECT_EQ(m.mean_abs, one.mean_abs);
    EXPECT_EQ(m.mean_rel, one.mean_rel);
    EXPECT_EQ(m.mean_ulp, one.mean_ulp);
    EXPECT_EQ(m.rel_l2, one.rel_l2);
    EXPECT_EQ(m.cosine, one.cosine);
    EXPECT_EQ(m.abs_pct, one.abs_pct);
    EXPECT_EQ(m.ulp_hist, one.ulp_hist);
    EXPECT_EQ(m.worst_abs_index, one.worst_abs_index);
    EXPECT_EQ(m.worst_rel_index, one.worst_rel_index);
    EXPECT_EQ(m.worst_ulp_index, one.worst_ulp_index);
    EXPECT_EQ(m.error_grid.cells, one.error_grid.cells);
    ASSERT_EQ(m.first.size(), one.first.size());
    for (size_t i = 0; i < m.first.size(); ++i) EXPECT_EQ(m.first[i].index, one.first[i].index);
  }
}

// Past 2^16 elements the percentiles come from the |err| histogram (compare.hpp: buckets of a double's bits >> 50,
// the nearest rank interpolated linearly inside its bucket): the same numbers from every error counted once.
TEST(CompareLarge, HistogramPercentilesCountEveryError) {
  const int64_t n = 3 * (int64_t{1} << 18) + 77;
  for (const at::ScalarType actual_type : {at::kBFloat16, at::kFloat, at::kDouble}) {
    SCOPED_TRACE(dtype_name(actual_type));
    const auto [actual, expected] = noisy_pair(n, actual_type, at::kFloat, 5);
    const Metrics m = compare(actual, expected);
    const at::Tensor err = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs();
    const at::Tensor counts = at::bincount(err.view(at::kLong).bitwise_right_shift(50));
    const at::Tensor below = counts.cumsum(0) - counts;
    const double ranks[] = {0.50, 0.90, 0.99, 0.999};
    for (int i = 0; i < 4; ++i) {
      const auto rank = static_cast<int64_t>(std::ceil(ranks[i] * static_cast<double>(n)));
      const int64_t bucket = (counts.cumsum(0) < rank).sum().item<int64_t>();
      const double lower = std::bit_cast<double>(bucket << 50), upper = std::bit_cast<double>((bucket + 1) << 50);
      const double within = (static_cast<double>(rank - below[bucket].item<int64_t>()) - 0.5) /
                            static_cast<double>(counts[bucket].item<int64_t>());
      EXPECT_EQ(m.abs_pct[i], std::min(lower + within * (upper - lower), m.max_abs)) << ranks[i];
    }
  }
}

// Heatmap cells against blocks of elements: cells narrower than a block, cells whose edges fall one element either
// side of a block's, a single column. The error grows with the flat index, so each cell holds the error of its last
// element, and an element counted in the cell next door shows.
TEST(CompareLarge, ErrorGridCellsWhereverBlocksEnd) {
  const std::vector<int64_t> shapes[] = {{3000, 40}, {1, 32 * 1023}, {1, 32 * 1025}, {70, 1023}, {40000, 1}};
  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], cols = shape[1];
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const at::Tensor expected = at::ones({rows, cols}, at::kFloat);
    const at::Tensor actual = expected + at::arange(rows * cols, at::kFloat).view({rows, cols}) * std::ldexp(1.0, -23);
    const ErrorGrid g = compare(actual, expected).error_grid;
    const at::Tensor err = (actual.to(at::kDouble) - 1).abs();
    ASSERT_EQ(g.rows, std::min(rows, kErrorGridSide));
    ASSERT_EQ(g.cols, std::min(cols, kErrorGridSide));
    // Cells span [i*n/bins, (i+1)*n/bins) of each dimension.
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const double want = err.slice(0, r * rows / g.rows, (r + 1) * rows / g.rows)
                                .slice(1, c * cols / g.cols, (c + 1) * cols / g.cols)
                                .max()
                                .item<double>();
        EXPECT_EQ(g.cells[r * g.cols + c], want) << r << "," << c;
      }
  }
}


// The CPU path's kernels (AVX-512, AVX2, the baseline ISA) against the widest, every field bit for bit, the floating
// sums included: CI's CPU runs AVX-512, so the narrower kernels run nowhere else. Every dtype pair, NaN and Inf among
// the elements (blocks the kernels hand to the scalar path), several chunks and a tail no vector divides.
class CompareCpuKernels : public ::testing::Test {
 protected:
  void TearDown() override { force_cpu_kernel(std::nullopt); }
};

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

void expect_identical(const Metrics& m, const Metrics& ref) {
  const struct {
    const char* name;
    double got, want;
  } reals[] = {{"max_abs", m.max_abs, ref.max_abs},
               {"mean_abs", m.mean_abs, ref.mean_abs},
               {"max_rel", m.max_rel, ref.max_rel},
               {"mean_rel", m.mean_rel, ref.mean_rel},
               {"rel_l2", m.rel_l2, ref.rel_l2},
               {"cosine", m.cosine, ref.cosine},
               {"mean_ulp", m.mean_ulp, ref.mean_ulp},
               {"max_abs_expected_value", m.max_abs_expected_value, ref.max_abs_expected_value}};
  for (const auto& r : reals)
    EXPECT_TRUE(same_bits(r.got, r.want)) << r.name << ": " << r.got << " against " << r.want;
  EXPECT_EQ(m.bitwise_diff, ref.bitwise_diff);
  EXPECT_EQ(m.nan_mismatch, ref.nan_mismatch);
  EXPECT_EQ(m.inf_mismatch, ref.inf_mismatch);
  EXPECT_EQ(m.nan_expected, ref.nan_expected);
  EXPECT_EQ(m.max_ulp, ref.max_ulp);
  EXPECT_EQ(m.ulp_hist, ref.ulp_hist);
  EXPECT_EQ(m.abs_pct, ref.abs_pct);
  EXPECT_EQ(m.worst_abs_index, ref.worst_abs_index);
  EXPECT_EQ(m.worst_rel_index, ref.worst_rel_index);
  EXPECT_EQ(m.worst_ulp_index, ref.worst_ulp_index);
  ASSERT_EQ(m.error_grid.cells.size(), ref.error_grid.cells.size());
  for (size_t c = 0; c < m.error_grid.cells.size(); ++c)
    EXPECT_TRUE(same_bits(m.error_grid.cells[c], ref.error_grid.cells[c])) << "error_grid cell " << c;
  ASSERT_EQ(m.first.size(), ref.first.size());
  for (size_t i = 0; i < m.first.size(); ++i) {
    EXPECT_EQ(m.first[i].index, ref.first[i].index);
    EXPECT_TRUE(same_bits(m.first[i].actual, ref.first[i].actual));
    EXPECT_TRUE(same_bits(m.first[i].expected, ref.first[i].expected));
  }
}

TEST_F(CompareCpuKernels, EveryKernelMatchesTheWidestBitForBit) {
  const std::vector<CpuKernel> kernels = cpu_kernels();
  ASSERT_FALSE(kernels.empty());
  EXPECT_EQ(kernels.back(), CpuKernel::baseline);  // every CPU runs the baseline
  const at::ScalarType dtypes[] = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16};
  const int64_t n = 7 * 112525;  // four chunks, the last short; seven columns
  uint64_t seed = 100;
  for (const at::ScalarType a : dtypes)
    for (const at::ScalarType e : dtypes) {
      SCOPED_TRACE(dtype_name(a) + " vs " + dtype_name(e));
      auto [actual, expected] = noisy_pair(n, a, e, seed++, true);
      actual[4321] = kNaN;
      expected[500000] = kInf;
      actual[700001] = -kInf;
      std::vector<Metrics> runs;
      for (const CpuKernel k : kernels) {
        force_cpu_kernel(k);
        runs.push_back(compare(actual.view({-1, 7}), expected.view({-1, 7}), {.first_n = 30}));
        EXPECT_EQ(runs.back().kernel, "cpu:" + cpu_kernel_name(k));  // the forced kernel, not the widest, ran
      }
      for (size_t i = 1; i < runs.size(); ++i) {
        SCOPED_TRACE(cpu_kernel_name(kernels[i]) + " against " + cpu_kernel_name(kernels[0]));
        expect_identical(runs[i], runs[0]);
      }
    }
}

// Every kernel sums (a - e)^2 with one rounding per element (fused, as the CUDA comparator does): elements 0 and 8
// share a lane of every kernel's sums, and these two squares sum to different bits rounded once or twice. The noisy
// pairs above did not tell the two apart: an AVX2 kernel that summed its squares unfused passed that test.
TEST_F(CompareCpuKernels, SquaredDifferencesSumFused) {
  std::vector<double> values(32, 1.0);
  values[0] = 1.3, values[8] = 1.211858;
  const double d0 = values[0] - 1.0, d8 = values[8] - 1.0;
  const double fused = std::fma(d8, d8, d0 * d0);
  const double apart = d8 * d8;
  ASSERT_NE(fused, apart + d0 * d0);
  const at::Tensor actual = at::tensor(values, at::kDouble), expected = at::ones({32}, at::kFloat);
  for (const CpuKernel k : cpu_kernels()) {
    force_cpu_kernel(k);
    const double rel_l2 = compare(actual, expected).rel_l2;
    EXPECT_TRUE(same_bits(rel_l2, std::sqrt(fused) / std::sqrt(32.0))) << cpu_kernel_name(k) << ": " << rel_l2;
  }
}

TEST_F(CompareCpuKernels, TheWidestRunsUnlessANarrowerIsForced) {
  const std::vector<CpuKernel> kernels = cpu_kernels();
  const at::Tensor x = at::ones({5});
  EXPECT_EQ(compare(x, x).kernel, "cpu:" + cpu_kernel_name(kernels.front()));
  force_cpu_kernel(kernels.back());
  EXPECT_EQ(compare(x, x).kernel, "cpu:" + cpu_kernel_name(kernels.back()));
  force_cpu_kernel(std::nullopt);
  EXPECT_EQ(compare(x, x).kernel, "cpu:" + cpu_kernel_name(kernels.front()));
  for (const CpuKernel k : {CpuKernel::avx512, CpuKernel::avx2})
    if (std::find(kernels.begin(), kernels.end(), k) == kernels.end())
      EXPECT_THROW(force_cpu_kernel(k), std::invalid_argument) << cpu_kernel_name(k);
}

}  // namespace
}  // namespace parity
