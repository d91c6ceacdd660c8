// The CPU hyper-connection paths (kernels/cpu/hc.cpp) against the references (references/hc.cpp).
//
// cpu:v1 (and cpu:hf on fp32 streams) is checked against the reference fed fp32 inputs, its backward against the
// reference's autograd; cpu:hf on bf16 streams must be BITWISE the reference fed the bf16 streams as they are.
// The bound for v1: |got - want| <= half an ULP of the output's dtype (its one rounding) + kRtol * max|want|
// (fp32 evaluation, taken normwise so that cancellation near zero does not count). BrokenVariants shows the
// bound is tight enough to catch a transposition slip and a single extra bf16 rounding.
#include "tests/hc/hc_test_support.hpp"

#include <ATen/Parallel.h>  // at::set_num_threads

namespace parity::hc {
namespace {

using namespace parity::hc::test;

// fp32-evaluation budget relative to the output's largest |value|. Measured: most outputs stay below 5e-7; the
// worst is hc_head grad_scale at T=256, 3.9e-6 (a T*H-term sum with cancellation, mostly the reference's own fp32
// sum). One bf16 rounding (2^-9 = 2e-3 relative) is far above.
constexpr double kRtol = 1e-5;
constexpr uint64_t kSeed = 20250601;

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {4, 1, 8, {}, "single token"},
      {4, 7, 13, {}, "odd T, hidden not a multiple of 8"},
      {4, 15, 24, {3, 5}, "leading dims flattened to T"},
      {3, 9, 16, {}, "odd hc: Sinkhorn and the mix at H = 3"},
      // Near its fixed point the Sinkhorn makes the softmax backward's row term almost vanish; 2 iterations keep
      // every backward term visible.
      {4, 5, 16, {}, "Sinkhorn far from converged", 2},
      {4, 256, 512, {}, "medium: several thread chunks and grad_fn column blocks"},
  };
  return s;
}

const Registry& registry() {
  static const Registry reg = [] {
    Registry r;
    register_hc_reference(r);
    register_hc_cpu(r);
    return r;
  }();
  return reg;
}

TensorMap inputs(const Op& op, const OpContext& ctx, const Shape& s) { return make_inputs(op, ctx, s, at::kCPU, kSeed); }

::testing::AssertionResult close(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  return within_rounding_bound(what, got, want, kRtol);
}

// ---------------------------------------------------------------------------------------------------------------
// Every cpu variant, every shape, bf16 and fp32 streams
// ---------------------------------------------------------------------------------------------------------------

std::vector<Case> cpu_cases() { return cases(registry(), at::kCPU, shapes()); }

class CpuVariant : public VariantTest<registry> {};

TEST_P(CpuVariant, ForwardMatchesReference) {
  SCOPED_TRACE(c().shape.covers);
  const OpContext ctx = this->ctx();
  const TensorMap in = inputs(op(), ctx, c().shape);
  const TensorMap before = clone(in);
  const TensorMap out = run_forward(op(), variant(), ctx, in);
  expect_unchanged(before, in);
  if (hf_rounding()) {
    const TensorMap want = hc_post_ref(constants(ctx), in);
    EXPECT_TRUE(bitwise("out", out.at("out"), want.at("out")));
    return;
  }
  const TensorMap want = op().reference(ctx, upcast(in));
  for (const std::string& name : op().outputs) EXPECT_TRUE(close(name, out.at(name), want.at(name)));
}

TEST_P(CpuVariant, BackwardMatchesAutograd) {
  SCOPED_TRACE(c().shape.covers);
  const OpContext ctx = this->ctx();
  const TensorMap in = inputs(op(), ctx, c().shape);
  const TensorMap before = clone(in);
  const TensorMap out = run_forward(op(), variant(), ctx, in);
  const TensorMap grad_out = make_grad_out(op(), out, kSeed + 1);
  const TensorMap grads = run_backward(op(), variant(), ctx, in, out, grad_out);
  expect_unchanged(before, in);
  const Expected want = run_reference(op(), ctx, in, grad_out, /*fp32=*/true);
  for (const std::string& name : op().grad_inputs) {
    EXPECT_EQ(grads.at(name).scalar_type(), in.at(name).scalar_type()) << "grad " << name;
    EXPECT_TRUE(close("grad " + name, grads.at(name), want.grads.at(name)));
  }
}

// Same bits with 1 and 2 threads, and run to run: each element is summed by one thread in a fixed order.
TEST_P(CpuVariant, Deterministic) {
  const OpContext ctx = this->ctx();
  const TensorMap in = inputs(op(), ctx, c().shape);
  const int threads = at::get_num_threads();
  auto run = [&](int n) {
    at::set_num_threads(n);
    TensorMap out = run_forward(op(), variant(), ctx, in);
    TensorMap grads = run_backward(op(), variant(), ctx, in, out, make_grad_out(op(), out, kSeed + 1));
    for (auto& [name, t] : grads) out["grad " + name] = t;
    return out;
  };
  const TensorMap a = run(1), b = run(2), again = run(2);
  at::set_num_threads(threads);
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(bitwise(name + " (1 vs 2 threads)", b.at(name), t));
    EXPECT_TRUE(bitwise(name + " (run to run)", again.at(name), b.at(name)));
  }
}

INSTANTIATE_TEST_SUITE_P(Hc, CpuVariant, ::testing::ValuesIn(cpu_cases()), case_name);

// ---------------------------------------------------------------------------------------------------------------
// cpu:hf is the v1 computation on fp32 streams, and its backward is v1's
// ---------------------------------------------------------------------------------------------------------------

TEST(HcPostHf, Fp32StreamsAndBackwardAreV1) {
  const Shape s = shapes()[1];
  const Op& op = registry().op("hc_post");
  const Variant& v1 = registry().variant("hc_post", "cpu:v1");
  const Variant& hf = registry().variant("hc_post", "cpu:hf");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const OpContext ctx = context(s, dtype);
    const TensorMap in = inputs(op, ctx, s);
    const TensorMap out_v1 = run_forward(op, v1, ctx, in), out_hf = run_forward(op, hf, ctx, in);
    if (dtype == at::kFloat) {
      EXPECT_TRUE(bitwise("out fp32", out_hf.at("out"), out_v1.at("out")));
    }
    const TensorMap g = make_grad_out(op, out_v1, kSeed + 1);
    const TensorMap gv1 = run_backward(op, v1, ctx, in, out_v1, g), ghf = run_backward(op, hf, ctx, in, out_hf, g);
    for (const auto& [name, t] : gv1) EXPECT_TRUE(bitwise("grad " + name, ghf.at(name), t));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The bound catches what it must: each broken computation below fails where cpu:v1 passes, on the same inputs
// ---------------------------------------------------------------------------------------------------------------

class BrokenVariants : public ::testing::Test {
 protected:
  static at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat); }

  void SetUp() override {
    ctx = context(shape, at::kBFloat16);
    in = inputs(op, ctx, shape);
    out = run_forward(op, registry().variant("hc_post", "cpu:v1"), ctx, in);
    grad_out = make_grad_out(op, out, kSeed + 1);
    want = run_reference(op, ctx, in, grad_out, /*fp32=*/true);
  }

  const Shape shape{4, 64, 72, {}, "broken variants"};
  const Op& op = registry().op("hc_post");
  OpContext ctx;
  TensorMap in, out, grad_out;
  Expected want;
};

TEST_F(BrokenVariants, CombNotTransposed) {
  auto broken = [](const TensorMap& in) {
    return (f32(in.at("post")).unsqueeze(-1) * f32(in.at("x")).unsqueeze(-2) +
            at::matmul(f32(in.at("comb")), f32(in.at("residual"))))
        .to(at::kBFloat16);
  };
  EXPECT_TRUE(close("cpu:v1 out", out.at("out"), want.out.at("out")));
  EXPECT_FALSE(close("comb not transposed", broken(in), want.out.at("out")));
}

TEST_F(BrokenVariants, ExtraBf16RoundingOfPostTimesX) {
  auto broken = [](const TensorMap& in) {
    const at::Tensor a = (f32(in.at("post")).unsqueeze(-1) * f32(in.at("x")).unsqueeze(-2)).to(at::kBFloat16);
    return (f32(a) + at::matmul(f32(in.at("comb")).transpose(-1, -2), f32(in.at("residual")))).to(at::kBFloat16);
  };
  EXPECT_TRUE(close("cpu:v1 out", out.at("out"), want.out.at("out")));
  EXPECT_FALSE(close("post*x rounded to bf16", broken(in), want.out.at("out")));
}

TEST_F(BrokenVariants, GradResidualWithTransposedComb) {
  const TensorMap grads = run_backward(op, registry().variant("hc_post", "cpu:v1"), ctx, in, out, grad_out);
  // grad_residual_j = sum_k comb[j,k] g_k is comb @ g; the slip applies comb^T as in the forward.
  const at::Tensor broken =
      at::matmul(f32(in.at("comb")).transpose(-1, -2), f32(grad_out.at("out"))).to(at::kBFloat16);
  EXPECT_TRUE(close("cpu:v1 grad residual", grads.at("residual"), want.grads.at("residual")));
  EXPECT_FALSE(close("grad residual with comb^T", broken, want.grads.at("residual")));
}

// ---------------------------------------------------------------------------------------------------------------
// Inputs outside the contract
// ---------------------------------------------------------------------------------------------------------------

TEST(HcCpuInputs, Fp16StreamsAreRejectedByName) { expect_fp16_rejected(registry(), at::kCPU, shapes()[1], kSeed); }

}  // namespace
}  // namespace parity::hc
