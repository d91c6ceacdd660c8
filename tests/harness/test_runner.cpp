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

// A tiny seeded hc_post case (forward and backward) whose variants are cpu:v1 and `wrapped`, a variant built on it.
struct Wrapped {
  std::function<void(const Variant& base, const OpContext&, const TensorMap& in, TensorMap& out)> forward;
  std::function<void(const Variant& base, const OpContext&, const TensorMap& in, const TensorMap& fwd_out,
                     const TensorMap& grad_out, TensorMap& grads)>
      backward;
};

CaseResult run_wrapped(const Wrapped& w, const std::string& variants, bool deterministic = true) {
  Registry reg;
  hc::register_hc_reference(reg);
  hc::register_hc_cpu(reg);
  Variant v = reg.variant("hc_post", "cpu:v1");
  const Variant base = v;
  v.id = "cpu:wrapped";
  if (w.forward) v.forward = [w, base](const OpContext& c, const TensorMap& in, TensorMap& out) { w.forward(base, c, in, out); };
  if (w.backward)
    v.backward = [w, base](const OpContext& c, const TensorMap& in, const TensorMap& f, const TensorMap& g, TensorMap& out) {
      w.backward(base, c, in, f, g, out);
    };
  reg.add(v);
  const std::string text = test::hc_post_case_text(
      "id = \"hc_post/wrapped\"\ncovers = \"runner test\"\ndims = { tokens = 5, hc = 4, hidden = 16 }\n"
      "dtype = \"bf16\"\nseed = 3\nsuites = [\"x\"]\nvariants = " + variants +
      "\ndeterministic = " + (deterministic ? "true" : "false") + "\n");
  const std::vector<Case> cases = parse_cases(text, "cases/runner_test.toml", reg);
  RunOptions opts;
  opts.force_cpu = true;
  return run_case(cases.at(0), reg, opts);
}

const Guard* guard(const CaseResult& r, const std::string& variant, const std::string& name) {
  for (const auto& g : r.guards)
    if (g.variant == variant && g.name == name) return &g;
  return nullptr;
}

const VariantRun& variant_run(const CaseResult& r, const std::string& id) {
  for (const auto& v : r.variants)
    if (v.variant == id) return v;
  throw std::logic_error("no variant " + id);
}

// The snapshot is compared after each run: a backward that negates a tensor saved for it, and so restores it on the
// second run, changed it all the same.
TEST(Runner, AChangeTheSecondRunUndoesIsStillAChange) {
  Wrapped w;
  w.backward = [](const Variant& b, const OpContext& c, const TensorMap& in, const TensorMap& f, const TensorMap& g,
                  TensorMap& out) {
    b.backward(c, in, f, g, out);
    f.at("out").neg_();
  };
  const CaseResult r = run_wrapped(w, R"(["cpu:wrapped"])");
  const Guard* g = guard(r, "cpu:wrapped", "backward: inputs unchanged");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(g->pass);
  EXPECT_NE(g->message.find("'saved:out'"), std::string::npos) << g->message;
  EXPECT_NE(g->message.find("after run 1"), std::string::npos) << g->message;
  EXPECT_EQ(r.status, Status::fail);
}

// A variant declared nondeterministic is still held to writing every element in both runs.
TEST(Runner, ANondeterministicRunMustStillWriteEveryElement) {
  auto calls = std::make_shared<int>(0);
  Wrapped w;
  w.forward = [calls](const Variant& b, const OpContext& c, const TensorMap& in, TensorMap& out) {
    const at::Tensor before = out.at("out").view({-1}).narrow(0, 0, 1).clone();
    b.forward(c, in, out);
    if ((*calls)++ % 2) out.at("out").view({-1}).narrow(0, 0, 1).copy_(before);  // the second run leaves one
  };
  const CaseResult r = run_wrapped(w, R"(["cpu:wrapped"])", /*deterministic=*/false);
  const Guard* g = guard(r, "cpu:wrapped", "forward: every output element written");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(g->pass);
  EXPECT_NE(g->message.find("'out' 1 of"), std::string::npos) << g->message;
}

// Outputs are written into the buffers the runner gave: one replaced or dropped is not written, and the checks read
// the given (still poisoned) buffer, not the variant's tensor.
TEST(Runner, AnOutputBufferReplacedOrDroppedIsNotWritten) {
  for (const bool drop : {false, true}) {
    Wrapped w;
    w.forward = [drop](const Variant& b, const OpContext& c, const TensorMap& in, TensorMap& out) {
      TensorMap own;
      for (const auto& [k, t] : out) own[k] = at::empty_like(t);
      b.forward(c, in, own);
      if (drop) out.clear();
      else out = own;
    };
    const CaseResult r = run_wrapped(w, R"(["cpu:wrapped"])");
    const Guard* g = guard(r, "cpu:wrapped", "forward: every output element written");
    ASSERT_NE(g, nullptr);
    EXPECT_FALSE(g->pass) << drop;
    EXPECT_NE(g->message.find(drop ? "'out' removed from the outputs (run 1)" : "'out' replaced by another tensor (run 1)"),
              std::string::npos)
        << g->message;
    EXPECT_EQ(r.status, Status::fail);
    bool out_checked = false;
    for (const auto& k : r.checks)
      if (k.variant == "cpu:wrapped" && k.tensor == "out") out_checked = !k.result.pass;
    EXPECT_TRUE(out_checked) << "the poisoned buffer fails its check";
  }
}

// Each variant runs on its own copy of the inputs: one that writes into them fails alone.
TEST(Runner, AVariantThatWritesItsInputsLeavesTheNextOnesAlone) {
  Wrapped w;
  w.forward = [](const Variant& b, const OpContext& c, const TensorMap& in, TensorMap& out) {
    b.forward(c, in, out);
    in.at("x").mul_(3.0);
  };
  const CaseResult r = run_wrapped(w, R"(["cpu:wrapped", "cpu:v1"])");
  EXPECT_EQ(variant_run(r, "cpu:wrapped").status, Status::fail);
  EXPECT_EQ(variant_run(r, "cpu:v1").status, Status::pass);
  for (const auto& k : r.checks)
    if (k.variant == "cpu:v1" && !k.result.pass) ADD_FAILURE() << k.tensor << ": " << k.result.summary;
  for (const auto& g : r.guards)
    if (g.variant == "cpu:v1" && !g.pass) ADD_FAILURE() << g.name << ": " << g.message;
  const Guard* g = guard(r, "cpu:v1", "forward: inputs unchanged");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->pass);
}

}  // namespace
}  // namespace parity
