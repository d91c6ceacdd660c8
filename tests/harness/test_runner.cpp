// run_case on a tiny seeded hc_post case whose only variant throws: the case is an error (never a pass), and its
// message is what the variant said, without the C++ stack trace LibTorch's errors carry in what().
#include "references/hc.hpp"
#include "tests/harness/hc_post_case_text.hpp"

#include <parity/error.hpp>
#include <parity/runner.hpp>

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

namespace parity {
namespace {

CaseResult run_failing(std::function<void()> fail) {
  Registry reg;
  hc::register_hc_reference(reg);
  Variant v;
  v.id = "cpu:throws";
  v.op = "hc_post";
  v.forward = [fail](const OpContext&, const TensorMap&, TensorMap&) { fail(); };
  reg.add(v);
  const std::string text = test::hc_post_case_text(
      "id = \"hc_post/throws\"\ncovers = \"runner test\"\ndims = { tokens = 4, hc = 4, hidden = 8 }\n"
      "dtype = \"bf16\"\nseed = 1\nsuites = [\"x\"]\nbackward = false\nvariants = [\"cpu:throws\"]\n",
      "[case.policy]\nout = \"ulp<=1\"\n");
  const std::vector<Case> cases = parse_cases(text, "cases/runner_test.toml", reg);
  RunOptions opts;
  opts.force_cpu = true;
  return run_case(cases.at(0), reg, opts);
}

TEST(Runner, LibTorchErrorIsTheCasesErrorWithoutItsBacktrace) {
  const c10::Error thrown = [] {
    try {
      TORCH_CHECK(false, "planted check: x has 3 dims");
    } catch (const c10::Error& e) {
      return e;
    }
    throw std::logic_error("TORCH_CHECK(false) did not throw");
  }();
  ASSERT_NE(std::string(thrown.what()), thrown.what_without_backtrace()) << "nothing to strip: the test proves nothing";

  const CaseResult r = run_failing([thrown] { throw thrown; });
  EXPECT_EQ(r.status, Status::error);
  ASSERT_EQ(r.variants.size(), 1u);
  EXPECT_EQ(r.variants[0].status, Status::error);
  EXPECT_EQ(r.variants[0].skip_reason, thrown.what_without_backtrace());
  EXPECT_EQ(r.error, "cpu:throws: " + std::string(thrown.what_without_backtrace()));
  EXPECT_NE(r.error.find("planted check: x has 3 dims"), std::string::npos) << r.error;
}

TEST(Runner, InputErrorKeepsItsMessage) {
  const CaseResult r = run_failing([] { throw InputError("golden.h5: dataset 'inputs/x': planted"); });
  EXPECT_EQ(r.status, Status::error);
  EXPECT_EQ(r.error, "cpu:throws: golden.h5: dataset 'inputs/x': planted");
}

}  // namespace
}  // namespace parity
