// Case files: every malformed input is an InputError naming the file and field; a good file resolves fully.
#include <parity/case.hpp>
#include <parity/error.hpp>

#include <gtest/gtest.h>

#include "tests/harness/hc_post_case_text.hpp"

namespace parity {
namespace {

using test::kHcConstants;
using test::kHcPostPolicies;

std::string post_case(const std::string& extra, const std::string& policies = kHcPostPolicies) {
  return test::hc_post_case_text("id = \"hc_post/t\"\ncovers = \"test\"\ndims = { tokens = 8, hc = 4, hidden = 16 }\n"
                                 "dtype = \"bf16\"\nsuites = [\"x\"]\n" +
                                     extra,
                                 policies);
}

std::string error_of(const std::string& text) {
  try {
    parse_cases(text, "cases/t.toml", Registry::global());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CaseFile, GoodCaseResolves) {
  auto cases = parse_cases(post_case("seed = 3"), "cases/t.toml", Registry::global());
  ASSERT_EQ(cases.size(), 1u);
  const Case& c = cases[0];
  EXPECT_EQ(c.op, "hc_post");
  EXPECT_EQ(c.ctx.dim("hidden"), 16);
  EXPECT_EQ(c.ctx.constant("sinkhorn_iters"), 20);
  EXPECT_EQ(c.ctx.dtype, at::kBFloat16);
  EXPECT_EQ(*c.seed, 3u);
  EXPECT_TRUE(c.backward);
  EXPECT_EQ(c.policy.size(), 5u);
  // Default variants: every registered one except planted faults.
  EXPECT_FALSE(c.variants.empty());
  for (const auto& v : c.variants) EXPECT_EQ(v.rfind("planted:", 0), std::string::npos) << v;
}

TEST(CaseFile, UnknownKernel) {
  std::string text = post_case("seed = 1");
  text.replace(text.find("hc_post/t"), 9, "hc_nope/t");
  EXPECT_NE(error_of(text).find("cases/t.toml: case 'hc_nope/t' field 'id': unknown kernel 'hc_nope'"), std::string::npos)
      << error_of(text);
}

TEST(CaseFile, MissingSeedAndGolden) {
  EXPECT_NE(error_of(post_case("")).find("field 'seed': a case needs a seed or a golden file"), std::string::npos);
}

TEST(CaseFile, MissingDims) {
  std::string text = post_case("seed = 1");
  text.erase(text.find("dims ="), text.find('\n', text.find("dims =")) - text.find("dims =") + 1);
  EXPECT_NE(error_of(text).find("case 'hc_post/t' field 'dims': missing required table"), std::string::npos);
}

// The op declares its dims: a misspelt or extra one is an error, not a dim nobody reads.
TEST(CaseFile, UnknownAndMissingDim) {
  std::string text = post_case("seed = 1");
  text.replace(text.find("hidden = 16"), 11, "hiden = 16");
  const std::string unknown = error_of(text);
  EXPECT_NE(unknown.find("case 'hc_post/t' field 'dims.hiden': not a dim of hc_post (its dims: tokens, hc, hidden)"),
            std::string::npos)
      << unknown;
  text = post_case("seed = 1");
  text.replace(text.find(", hidden = 16"), 13, "");
  EXPECT_NE(error_of(text).find("case 'hc_post/t' field 'dims.hidden': missing"), std::string::npos) << error_of(text);
  text = post_case("seed = 1");
  text.replace(text.find("hidden = 16"), 11, "hidden = 16, heads = 2");
  EXPECT_NE(error_of(text).find("field 'dims.heads': not a dim of hc_post"), std::string::npos) << error_of(text);
}

// A misspelt override would leave the case on the file's value; a misspelt file constant, unread, on none.
TEST(CaseFile, UnknownConstant) {
  const std::string bad_override = error_of(post_case("seed = 1\n[case.constants]\nsinkhorn_iter = 2"));
  EXPECT_NE(bad_override.find("case 'hc_post/t' field 'constants.sinkhorn_iter': read by neither hc_post nor the "
                              "case's variants (they read: hc_eps, post_mult, rms_eps, sinkhorn_iters)"),
            std::string::npos)
      << bad_override;
  EXPECT_EQ(error_of(post_case("seed = 1\n[case.constants]\nsinkhorn_iters = 2")), "");
  // A variant's own constant counts where the case runs that variant (planted:slow reads planted_repeats).
  EXPECT_NE(error_of(post_case("seed = 1\n[case.constants]\nplanted_repeats = 3")).find("constants.planted_repeats"),
            std::string::npos);
  EXPECT_EQ(error_of(post_case("seed = 1\nvariants = [\"planted:slow\"]\n[case.constants]\nplanted_repeats = 3")), "");
  std::string text = post_case("seed = 1");
  text.insert(text.find("post_mult"), "sinkhorn_iter = 3\n");
  EXPECT_NE(error_of(text).find("cases/t.toml: constants.sinkhorn_iter: read by none of this file's cases"),
            std::string::npos)
      << error_of(text);
}

// A constant no path could mean is bad input, refused at load (exit 2), not a run whose outputs are all NaN (exit 1).
TEST(CaseFile, ConstantsNoPathCouldMean) {
  const auto with = [](const std::string& constant) {
    return error_of(post_case("seed = 1\n[case.constants]\n" + constant));
  };
  const std::string where = "cases/t.toml: case 'hc_post/t' field 'dims/constants': ";
  EXPECT_NE(with("sinkhorn_iters = 2.5").find(where + "constants.sinkhorn_iters = 2.5: must be a whole number >= 1"),
            std::string::npos)
      << with("sinkhorn_iters = 2.5");
  EXPECT_NE(with("sinkhorn_iters = 0").find("constants.sinkhorn_iters = 0: must be a whole number >= 1"),
            std::string::npos);
  EXPECT_NE(with("hc_eps = nan").find(where + "constants.hc_eps = nan: must be finite and >= 0"), std::string::npos)
      << with("hc_eps = nan");
  EXPECT_NE(with("rms_eps = -1e-6").find("constants.rms_eps = -1e-06: must be finite and >= 0"), std::string::npos)
      << with("rms_eps = -1e-6");
  EXPECT_NE(with("post_mult = inf").find("constants.post_mult = inf: must be finite"), std::string::npos)
      << with("post_mult = inf");
  EXPECT_EQ(with("hc_eps = 0.0"), "");
  EXPECT_EQ(with("sinkhorn_iters = 1"), "");
}

TEST(CaseFile, CopyTargets) {
  const auto parsed =
      parse_cases(post_case("seed = 1\n[case.copy_target]\n\"cpu:v1/fwd\" = 85\n\"cpu:v1/bwd\" = 75.5"),
                  "cases/t.toml", Registry::global());
  EXPECT_EQ(parsed.at(0).copy_targets, (std::map<std::string, double>{{"cpu:v1/bwd", 75.5}, {"cpu:v1/fwd", 85}}));
  const auto error = [](const std::string& table) { return error_of(post_case("seed = 1\n[case.copy_target]\n" + table)); };
  EXPECT_NE(error("\"cpu:v1\" = 85").find("field 'copy_target.cpu:v1': must be '<variant>/fwd' or '<variant>/bwd'"),
            std::string::npos);
  EXPECT_NE(error("\"cpu:nope/fwd\" = 85").find("'cpu:nope' is not one of the case's variants"), std::string::npos);
  EXPECT_NE(error("\"cpu:v1/fwd\" = 0").find("must be a percentage in (0, 100]"), std::string::npos);
  EXPECT_NE(error("\"cpu:v1/fwd\" = 120").find("must be a percentage in (0, 100]"), std::string::npos);
  EXPECT_NE(error("\"cpu:v1/fwd\" = \"85%\"").find("field 'copy_target.cpu:v1/fwd': must be a number"),
            std::string::npos);
  // Not a table: an error, not a case without targets (likewise notes, skip and constants).
  EXPECT_NE(error_of(post_case("seed = 1\ncopy_target = 85")).find("field 'copy_target': must be a table"),
            std::string::npos);
  EXPECT_NE(error_of(post_case("seed = 1\nskip = \"later\"")).find("field 'skip': must be a table"), std::string::npos);
  EXPECT_NE(error_of(post_case("seed = 1\nbackward = false\n[case.copy_target]\n\"cpu:v1/bwd\" = 75",
                               "[case.policy]\nout = \"ulp<=1\"\n"))
                .find("field 'copy_target.cpu:v1/bwd': the case runs no backward"),
            std::string::npos);
}

TEST(CaseFile, PerfThreshold) {
  EXPECT_EQ(parse_cases(post_case("seed = 1"), "cases/t.toml", Registry::global()).at(0).perf_threshold, 0);
  EXPECT_EQ(parse_cases(post_case("seed = 1\nperf_threshold = 0.1"), "cases/t.toml", Registry::global()).at(0).perf_threshold,
            0.1);
  for (const char* bad : {"0", "1", "-0.1", "nan"})
    EXPECT_NE(error_of(post_case(std::string("seed = 1\nperf_threshold = ") + bad))
                  .find("field 'perf_threshold': must be a fraction in (0, 1)"),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of(post_case("seed = 1\nperf_threshold = \"10%\"")).find("field 'perf_threshold': must be a number"),
            std::string::npos);
}

TEST(CaseFile, BadTolerance) {
  std::string pol = kHcPostPolicies;
  pol.replace(pol.find("ulp<=1"), 6, "ulp<=-1");
  EXPECT_NE(error_of(post_case("seed = 1", pol)).find("field 'policy.out'"), std::string::npos);
  pol = kHcPostPolicies;
  pol.replace(pol.find("naive_relative(k=2, floor=1)"), 28, "allclose(atol=1e-3)");
  EXPECT_NE(error_of(post_case("seed = 1", pol)).find("field 'policy.grad/x'"), std::string::npos);
}

TEST(CaseFile, PolicyForUnknownTensorAndMissingPolicy) {
  std::string pol = std::string(kHcPostPolicies) + "outt = \"bitwise\"\n";
  EXPECT_NE(error_of(post_case("seed = 1", pol)).find("'outt' is not an output of hc_post"), std::string::npos);
  pol = kHcPostPolicies;
  pol.erase(pol.find("\"grad/comb\""));
  EXPECT_NE(error_of(post_case("seed = 1", pol)).find("field 'policy.grad/comb': missing policy"), std::string::npos);
  // Without backward the grads need no policy.
  EXPECT_EQ(error_of(post_case("seed = 1\nbackward = false", "[case.policy]\nout = \"ulp<=1\"\n")), "");
}

TEST(CaseFile, UnknownFieldAndBadTypes) {
  EXPECT_NE(error_of(post_case("seed = 1\ntolerance = 3")).find("field 'tolerance': unknown field"), std::string::npos);
  EXPECT_NE(error_of(post_case("seed = \"one\"")).find("field 'seed': must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(post_case("seed = 1\nreference = \"fp16\"")).find("unknown reference numerics 'fp16'"),
            std::string::npos);
}

TEST(CaseFile, SkipNeedsReason) {
  EXPECT_NE(error_of(post_case("seed = 1\n[case.skip]\n\"cuda:v1\" = \"\"")).find("must give a reason"),
            std::string::npos);
}

TEST(CaseFile, TomlSyntaxErrorHasLine) {
  EXPECT_NE(error_of(std::string(kHcConstants) + "[[case]\n").find("cases/t.toml:7:"), std::string::npos);
}

}  // namespace
}  // namespace parity
