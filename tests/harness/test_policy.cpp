#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <parity/error.hpp>
#include <parity/policy.hpp>
#include <parity/tensor.hpp>
#include <string>
#include <vector>

namespace parity {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::string kWhere = "cases/hc.toml: case 'hc_post/tiny' policy 'out'";

at::Tensor vec(std::vector<double> values, at::ScalarType type = at::kFloat) {
  return at::tensor(values, at::TensorOptions(at::kDouble)).to(type);
}

// `t` with element i moved by `ulps` steps in its dtype.
at::Tensor nudge(const at::Tensor& t, int64_t i, int64_t ulps) {
  at::Tensor out = t.clone();
  const at::Tensor bits = out.view({-1}).view(at::kInt);
  bits[i] = bits[i].item<int32_t>() + static_cast<int32_t>(ulps);
  return out;
}

Policy parse(const std::string& text) { return parse_policy(text, kWhere); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- Parsing -------------------------------------------------------------------------------------------------

TEST(ParsePolicy, Bitwise) {
  const Policy p = parse("bitwise");
  EXPECT_TRUE(std::holds_alternative<Bitwise>(p.kind));
  EXPECT_FALSE(p.nan_expected);
  EXPECT_EQ(p.text, "bitwise");
}

TEST(ParsePolicy, UlpWithAndWithoutSpaces) {
  EXPECT_EQ(std::get<Ulp>(parse("ulp<=4").kind).max_ulp, 4);
  EXPECT_EQ(std::get<Ulp>(parse("ulp <= 4").kind).max_ulp, 4);
  EXPECT_EQ(std::get<Ulp>(parse("  ulp<= 0 ").kind).max_ulp, 0);
}

TEST(ParsePolicy, AllClose) {
  const auto p = std::get<AllClose>(parse("allclose(atol=1e-5, rtol=1.3e-6)").kind);
  EXPECT_EQ(p.atol, 1e-5);
  EXPECT_EQ(p.rtol, 1.3e-6);
  const auto q = std::get<AllClose>(parse("allclose( rtol = 0 , atol = 0.5 )").kind);
  EXPECT_EQ(q.atol, 0.5);
  EXPECT_EQ(q.rtol, 0);
}

TEST(ParsePolicy, NaiveRelativeFloorDefaultsToOne) {
  const auto p = std::get<NaiveRelative>(parse("naive_relative(k=2, floor=3)").kind);
  EXPECT_EQ(p.k, 2);
  EXPECT_EQ(p.floor_ulps, 3);
  const auto q = std::get<NaiveRelative>(parse("naive_relative(k=1.5)").kind);
  EXPECT_EQ(q.k, 1.5);
  EXPECT_EQ(q.floor_ulps, 1);
}

TEST(ParsePolicy, NanExpectedOption) {
  EXPECT_TRUE(parse("ulp<=2; nan=expected").nan_expected);
  EXPECT_TRUE(parse("allclose(atol=0, rtol=0) ;nan = expected").nan_expected);
  EXPECT_FALSE(parse("ulp<=2").nan_expected);
}

TEST(ParsePolicy, UnknownPolicyNamesWhereAndTheForms) {
  try {
    parse("ulps<=2");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "cases/hc.toml: case 'hc_post/tiny' policy 'out': unknown policy 'ulps<=2' (expected bitwise, "
                 "ulp<=N, allclose(atol=, rtol=), naive_relative(k=, floor=))");
  }
}

TEST(ParsePolicy, MalformedPoliciesAreRejectedWithTheReason) {
  const struct {
    const char* text;
    const char* reason;
  } table[] = {
      {"", "unknown policy"},
      {"bitwise!", "unknown policy"},
      {"Bitwise", "unknown policy"},
      {"ulp<4", "unknown policy"},
      {"ulp<=", "whole number N >= 0"},
      {"ulp<=-1", "whole number N >= 0"},
      {"ulp<=2.5", "whole number N >= 0"},
      {"ulp<=x", "whole number N >= 0"},
      {"allclose(atol=1e-5)", "needs both atol and rtol"},
      {"allclose(rtol=1e-5)", "needs both atol and rtol"},
      {"allclose()", "needs both atol and rtol"},
      {"allclose(atol=1e-5, rtol=1e-5, equal_nan=1)", "not 'equal_nan'"},
      {"allclose(atol=1e-5, atol=1e-5, rtol=0)", "atol given twice"},
      {"allclose(atol=-1, rtol=0)", "atol must be a finite number >= 0, got '-1'"},
      {"allclose(atol=inf, rtol=0)", "atol must be a finite number >= 0"},
      {"allclose(atol=1e-5 rtol=0)", "atol must be a finite number >= 0"},
      {"allclose(atol, rtol=0)", "expected name=value"},
      {"allclose(atol=1e-5, rtol=0", "unknown policy"},
      {"naive_relative(floor=1)", "needs k"},
      {"naive_relative(k=2, atol=1)", "not 'atol'"},
      {"naive_relative(k=two)", "k must be a finite number >= 0"},
      {"closeish(atol=1, rtol=1)", "unknown policy"},
      {"ulp<=2; nan=maybe", "unknown option 'nan=maybe'"},
      {"ulp<=2;", "unknown option ''"},
      {"ulp<=2; inf=expected", "unknown option"},
  };
  for (const auto& row : table) {
    SCOPED_TRACE(row.text);
    try {
      parse(row.text);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), kWhere + ": ")) << e.what();
      EXPECT_TRUE(contains(e.what(), fmt::format("'{}'", row.text))) << e.what();
      EXPECT_TRUE(contains(e.what(), row.reason)) << e.what();
    }
  }
}

TEST(NeedsNaive, OnlyNaiveRelative) {
  EXPECT_TRUE(needs_naive(parse("naive_relative(k=2)")));
  EXPECT_FALSE(needs_naive(parse("bitwise")));
  EXPECT_FALSE(needs_naive(parse("ulp<=1")));
  EXPECT_FALSE(needs_naive(parse("allclose(atol=0, rtol=0)")));
}

// ---- Evaluation ----------------------------------------------------------------------------------------------

TEST(Evaluate, IdenticalTensorsPassEveryPolicy) {
  const at::Tensor t = at::randn({8, 16});
  for (const char* text : {"bitwise", "ulp<=0", "allclose(atol=0, rtol=0)", "naive_relative(k=1, floor=0)"}) {
    const CheckResult r = evaluate(parse(text), t, t.clone(), &t);
    EXPECT_TRUE(r.pass) << text << ": " << r.summary;
    EXPECT_TRUE(r.detail.empty()) << text;
  }
}

TEST(Evaluate, OneUlpOffFailsBitwisePassesUlpOne) {
  const at::Tensor expected = at::randn({4, 4}).add(3);  // away from zero, so neighbours are plain
  const at::Tensor actual = nudge(expected, 5, 1);
  const CheckResult bitwise = evaluate(parse("bitwise"), actual, expected);
  EXPECT_FALSE(bitwise.pass);
  EXPECT_EQ(bitwise.summary, "1 / 16 elements differ bitwise in fp32 (0 allowed)");
  EXPECT_FALSE(evaluate(parse("ulp<=0"), actual, expected).pass);
  const CheckResult ulp1 = evaluate(parse("ulp<=1"), actual, expected);
  EXPECT_TRUE(ulp1.pass);
  EXPECT_EQ(ulp1.summary, "max ulp 1 in fp32 (<= 1 allowed)");
  EXPECT_TRUE(ulp1.detail.empty());
}

TEST(Evaluate, SignedZeroFailsOnlyBitwise) {
  const at::Tensor pos = vec({0, 1}), neg = vec({-0.0, 1});
  const CheckResult bitwise = evaluate(parse("bitwise"), neg, pos);
  EXPECT_FALSE(bitwise.pass);
  EXPECT_TRUE(contains(bitwise.detail, "Signed-zero differences (+0 vs -0): 1")) << bitwise.detail;
  EXPECT_TRUE(contains(bitwise.detail, "Mismatched elements: 1 / 2 (50.0%)")) << bitwise.detail;
  EXPECT_TRUE(evaluate(parse("ulp<=0"), neg, pos).pass);
  EXPECT_TRUE(evaluate(parse("allclose(atol=0, rtol=0)"), neg, pos).pass);
}

TEST(Evaluate, NaNInActualFailsEveryPolicy) {
  const at::Tensor expected = vec({1, 2, 3, 4});
  const at::Tensor actual = vec({1, kNaN, 3, 4});
  for (const char* text :
       {"bitwise", "ulp<=1000000", "allclose(atol=1e30, rtol=1e30)", "naive_relative(k=1000, floor=1000)",
        "ulp<=1000000; nan=expected", "allclose(atol=1e30, rtol=1e30); nan=expected"}) {
    const CheckResult r = evaluate(parse(text), actual, expected, &expected);
    EXPECT_FALSE(r.pass) << text;
    EXPECT_TRUE(contains(r.summary, "1 NaN mismatch;")) << r.summary;
    EXPECT_TRUE(contains(r.detail, "  [1]: got nan, want 2 (NaN mismatch)")) << r.detail;
  }
}

TEST(Evaluate, ExpectedNaNPassesOnlyWhenDeclaredAndOnlyAtThoseElements) {
  const at::Tensor expected = vec({1, kNaN, 3});
  const at::Tensor matching = vec({1, kNaN, 3});
  EXPECT_FALSE(evaluate(parse("ulp<=0"), matching, expected).pass);
  const CheckResult declared = evaluate(parse("ulp<=0; nan=expected"), matching, expected);
  EXPECT_TRUE(declared.pass) << declared.summary;
  EXPECT_TRUE(evaluate(parse("bitwise; nan=expected"), matching, expected).pass);
  // NaN where the expected tensor has a number is never allowed ...
  EXPECT_FALSE(evaluate(parse("ulp<=0; nan=expected"), vec({kNaN, kNaN, 3}), expected).pass);
  // ... and a number where NaN is expected is a mismatch too.
  EXPECT_FALSE(evaluate(parse("ulp<=0; nan=expected"), vec({1, 2, 3}), expected).pass);
}

TEST(Evaluate, InfMismatchFailsEvenWithinUlps) {
  const double max = std::numeric_limits<float>::max();
  const CheckResult r = evaluate(parse("ulp<=1"), vec({kInf, 1}), vec({max, 1}));
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(contains(r.summary, "1 Inf mismatch; ")) << r.summary;
  EXPECT_TRUE(contains(r.detail, "Inf mismatches: 1")) << r.detail;
  EXPECT_FALSE(evaluate(parse("allclose(atol=1e38, rtol=1)"), vec({kInf, 1}), vec({max, 1})).pass);
  EXPECT_TRUE(evaluate(parse("ulp<=0"), vec({kInf, -kInf}), vec({kInf, -kInf})).pass);
}

TEST(Evaluate, AllCloseBoundaryIsInclusive) {
  // atol + rtol*|e| = 0.5 + 0.25*2 = 1 exactly.
  const Policy p = parse("allclose(atol=0.5, rtol=0.25)");
  const at::Tensor expected = vec({2, -2}, at::kDouble);
  EXPECT_TRUE(evaluate(p, vec({3, -1}, at::kDouble), expected).pass);
  const double just_over = std::nextafter(3.0, 4.0);
  const CheckResult r = evaluate(p, vec({just_over, -2}, at::kDouble), expected);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(contains(r.summary, "1 / 2 outside |a-e| <= 0.5 + 0.25|e|")) << r.summary;
  EXPECT_TRUE(contains(r.detail, "Greatest absolute difference: 1.00e+00 at index [0] (up to 1.00e+00 allowed)"))
      << r.detail;
}

// The same infinity on both sides is no error, even where the tolerance atol + 0 * Inf is NaN.
TEST(Evaluate, AllCloseWithoutRtolPassesTheSameInfinity) {
  for (const char* text : {"allclose(atol=1e-5, rtol=0)", "allclose(atol=0, rtol=0)"}) {
    const CheckResult r = evaluate(parse(text), vec({kInf, -kInf, 1}), vec({kInf, -kInf, 1}));
    EXPECT_TRUE(r.pass) << text << ": " << r.summary;
  }
  EXPECT_FALSE(evaluate(parse("allclose(atol=1e-5, rtol=0)"), vec({1, -kInf, 1}), vec({kInf, -kInf, 1})).pass);
}

TEST(Evaluate, AllCloseRtolAloneStillBoundsTheError) {
  const Policy p = parse("allclose(atol=0, rtol=0.01)");
  EXPECT_TRUE(evaluate(p, vec({101}, at::kDouble), vec({100}, at::kDouble)).pass);
  EXPECT_FALSE(evaluate(p, vec({1e-3}, at::kDouble), vec({0}, at::kDouble)).pass);
}

TEST(Evaluate, NaiveRelativePassesAndFailsAgainstTheNaiveError) {
  const Policy p = parse("naive_relative(k=2, floor=0)");
  const at::Tensor expected = vec({1, 2, 3, 4}, at::kDouble);
  const at::Tensor naive = vec({1.1, 2, 3, 4}, at::kDouble);     // max 0.1, mean 0.025
  const at::Tensor good = vec({1, 2.15, 3, 4.04}, at::kDouble);  // max 0.15, mean 0.0475
  const at::Tensor bad = vec({1, 2.25, 3, 4}, at::kDouble);      // max 0.25 > 0.2
  const CheckResult pass = evaluate(p, good, expected, &naive);
  EXPECT_TRUE(pass.pass) << pass.summary;
  EXPECT_NEAR(pass.bound_max, 0.2, 1e-12);
  EXPECT_NEAR(pass.bound_mean, 0.05, 1e-12);
  ASSERT_TRUE(pass.naive_metrics.has_value());
  EXPECT_NEAR(pass.naive_metrics->max_abs, 0.1, 1e-12);
  EXPECT_TRUE(contains(pass.summary, "max abs 1.50e-01 (<= 2.00e-01 allowed = 2 x naive 1.00e-01 + 0 x ulp"))
      << pass.summary;
  EXPECT_TRUE(contains(pass.summary, ", mean abs 4.75e-02 (<= 5.00e-02 allowed")) << pass.summary;

  const CheckResult fail = evaluate(p, bad, expected, &naive);
  EXPECT_FALSE(fail.pass);
  EXPECT_TRUE(contains(fail.detail, "(up to 2.00e-01 allowed)")) << fail.detail;
  EXPECT_TRUE(contains(fail.detail, "Naive composition: max abs 1.00e-01")) << fail.detail;

  // Within the max bound everywhere but over the mean bound: many small errors fail too.
  const at::Tensor spread = vec({1.06, 2.06, 3.06, 4.06}, at::kDouble);  // max 0.06 <= 0.2, mean 0.06 > 0.05
  EXPECT_FALSE(evaluate(p, spread, expected, &naive).pass);
}

TEST(Evaluate, NaiveRelativeFloorSavesAnExactNaiveComposition) {
  const at::Tensor expected = vec({1, 2, 3, 4});
  const at::Tensor one_ulp = nudge(expected, 3, 1);  // 1 ulp at max|e| = 4: 2^-21
  EXPECT_FALSE(evaluate(parse("naive_relative(k=2, floor=0)"), one_ulp, expected, &expected).pass);
  const CheckResult floor1 = evaluate(parse("naive_relative(k=2, floor=1)"), one_ulp, expected, &expected);
  EXPECT_TRUE(floor1.pass) << floor1.summary;
  EXPECT_EQ(floor1.bound_max, std::ldexp(1.0, -21));
  EXPECT_EQ(floor1.bound_mean, std::ldexp(1.0, -22));  // ulp at mean|e| = 2.5
  const at::Tensor two_ulps = nudge(expected, 3, 2);
  EXPECT_FALSE(evaluate(parse("naive_relative(k=2, floor=1)"), two_ulps, expected, &expected).pass);
}

TEST(Evaluate, NaiveRelativeWithoutNaiveIsAnInputError) {
  const at::Tensor t = vec({1});
  EXPECT_THROW(evaluate(parse("naive_relative(k=2)"), t, t), InputError);
}

TEST(Evaluate, ShapeMismatchIsAFailedCheckNotACrash) {
  const CheckResult r = evaluate(parse("ulp<=4"), at::zeros({2, 3}), at::zeros({3, 2}));
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.summary, "shape mismatch: got [2, 3] fp32 want [3, 2] fp32");
  const at::Tensor naive = at::zeros({6});
  const CheckResult n = evaluate(parse("naive_relative(k=2)"), at::zeros({2, 3}), at::zeros({2, 3}), &naive);
  EXPECT_FALSE(n.pass);
  EXPECT_EQ(n.summary, "naive: shape mismatch: got [6] fp32 want [2, 3] fp32");
}

TEST(Evaluate, UnsupportedDtypeIsAFailedCheckNamingIt) {
  const at::Tensor i = at::arange(4, at::kInt);
  const CheckResult r = evaluate(parse("bitwise"), i, i.clone());
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(contains(r.summary, "int32")) << r.summary;
}

TEST(Evaluate, DetailListsFirstMismatchesThenTheRest) {
  // bf16 steps by 2^-6 in [2, 4): 2 + 26/64 and 2 + 31/64 are 5 ulps apart.
  const at::Tensor expected = at::full({2, 3, 4}, 2.40625, at::kBFloat16);
  at::Tensor actual = expected.clone();
  actual.view({-1}).slice(0, 10, 20).fill_(2.484375);
  const CheckResult r = evaluate(parse("ulp<=4"), actual, expected, nullptr, 3);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.summary, "max ulp 5 in bf16 (<= 4 allowed)");
  const std::string expected_detail =
      "Mismatched elements: 10 / 24 (41.7%) past the tolerance (10 differ bitwise)\n"
      "Greatest absolute difference: 7.81e-02 at index [0,2,2]\n"
      "Greatest relative difference: 3.25e-02 at index [0,2,2]\n"
      "Greatest ULP difference: 5 at index [0,2,2] (in bf16)\n"
      "ULP histogram (bf16): 0: 14, 5-8: 10\n"
      "  [0,2,2]: got 2.484, want 2.406 (diff 7.8e-02, 5 ulp)\n"
      "  [0,2,3]: got 2.484, want 2.406 (diff 7.8e-02, 5 ulp)\n"
      "  [1,0,0]: got 2.484, want 2.406 (diff 7.8e-02, 5 ulp)\n"
      "  ... and 7 more";
  EXPECT_EQ(r.detail, expected_detail);
}

// Where a policy bounds each element, the report counts and lists the elements past their bound, as assert_close
// does, not those that merely differ: here every element is 1 ULP off and one is far off.
TEST(Evaluate, DetailListsTheElementsPastTheirBound) {
  const at::Tensor expected = at::full({4, 8}, 2.40625, at::kBFloat16);
  at::Tensor actual = expected.clone();
  actual.view(at::kShort).add_(1);               // every element 1 ulp off
  actual.view({-1}).narrow(0, 21, 1).fill_(3.0);  // [2,5]: far off
  for (const char* text : {"ulp<=2", "allclose(atol=0.05, rtol=0)"}) {  // 1 ulp here is 2^-6
    const CheckResult r = evaluate(parse(text), actual, expected, nullptr, 4);
    EXPECT_FALSE(r.pass) << text;
    EXPECT_TRUE(contains(r.detail, "Mismatched elements: 1 / 32 (3.1%) past the tolerance (32 differ bitwise)"))
        << text << "\n" << r.detail;
    EXPECT_TRUE(contains(r.detail, "  [2,5]: got 3, want 2.406 (diff 5.9e-01, 38 ulp)")) << text << "\n" << r.detail;
    EXPECT_FALSE(contains(r.detail, "[0,0]:")) << text << "\n" << r.detail;
    EXPECT_FALSE(contains(r.detail, "more")) << text << "\n" << r.detail;
  }
}

}  // namespace
}  // namespace parity

namespace parity {
namespace {

// The mismatch budget: bitwise elsewhere, at most max_fraction * numel elements may differ, by any amount.
TEST(BitwiseBudget, AllowsExactlyTheBudget) {
  const at::Tensor want = at::arange(1000, at::kFloat).div(7).to(at::kBFloat16);
  at::Tensor got = want.clone();
  got.view(at::kShort).narrow(0, 0, 2).add_(5);  // two elements, several ULPs off
  const Policy one = parse_policy("bitwise(max_fraction=1e-3)", "test");   // 1 of 1000 allowed
  const Policy two = parse_policy("bitwise(max_fraction=2e-3)", "test");   // 2 of 1000 allowed
  EXPECT_FALSE(evaluate(one, got, want).pass);
  EXPECT_TRUE(evaluate(two, got, want).pass);
  EXPECT_NE(evaluate(one, got, want).summary.find("2 / 1000 elements differ bitwise in bf16 (1 allowed)"),
            std::string::npos);
  got.view(at::kShort).narrow(0, 10, 1).fill_(0x7fc0);  // a NaN is never within budget
  EXPECT_FALSE(evaluate(parse_policy("bitwise(max_fraction=0.5)", "test"), got, want).pass);
}

TEST(BitwiseBudget, RejectsBadFractions) {
  for (const char* bad : {"bitwise(max_fraction=1)", "bitwise(max_fraction=-1e-6)", "bitwise()", "bitwise(k=1)"})
    EXPECT_THROW(parse_policy(bad, "cases/x.toml: field 'policy.out'"), InputError) << bad;
}

}  // namespace
}  // namespace parity
