// The CPU hyper-connection paths (kernels/cpu/hc.cpp) against the references (references/hc.cpp).
//
// cpu:v1 (and cpu:hf on fp32 streams) is checked against the reference fed fp32 inputs, its backward against the
// reference's autograd; cpu:hf on bf16 streams must be BITWISE the reference fed the bf16 streams as they are.
// The bound for v1: |got - want| <= half an ULP of the output's dtype (its one rounding) + kRtol * max|want|
// (fp32 evaluation, taken normwise so that cancellation near zero does not count). BrokenVariants shows the
// bound is tight enough to catch a transposition slip and a single extra bf16 rounding.
#include "references/hc.hpp"

#include <parity/error.hpp>

#include <ATen/Parallel.h>  // at::set_num_threads
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/hc/hc_variant_runs.hpp"
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace parity::hc {
namespace {

// fp32-evaluation budget relative to the output's largest |value|. Measured: most outputs stay below 5e-7; the
// worst is hc_head grad_scale at T=256, 3.9e-6 (a T*H-term sum with cancellation, mostly the reference's own fp32
// sum). One bf16 rounding (2^-9 = 2e-3 relative) is far above.
constexpr double kRtol = 1e-5;
constexpr uint64_t kSeed = 20250601;

struct Shape {
  int64_t hc, tokens, hidden;
  std::vector<int64_t> lead;  // leading dims the variant must flatten (empty: [tokens, ...])
  std::string covers;
  int64_t sinkhorn_iters = 20;
};

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

OpContext context(const Shape& s, at::ScalarType dtype) {
  OpContext ctx;
  ctx.dims = {{kTokens, s.tokens}, {kHc, s.hc}, {kHidden, s.hidden}};
  ctx.constants = {{kHcEps, 1e-6}, {kRmsEps, 1e-6}, {kSinkhornIters, double(s.sinkhorn_iters)}, {kPostMult, 2.0}};
  ctx.dtype = dtype;
  return ctx;
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

// Seeded inputs, with the token dim split into `lead` where a shape asks for it.
TensorMap make_inputs(const Op& op, const OpContext& ctx, const Shape& s, uint64_t seed = kSeed) {
  TensorMap in = op.make_inputs(ctx, seed, at::kCPU);
  if (s.lead.empty()) return in;
  for (auto& [name, t] : in) {
    // Every hc_post input is per token; hc_pre and hc_head have per-token x and shared parameters.
    if (name != "x" && op.name != "hc_post") continue;
    std::vector<int64_t> shape = s.lead;
    shape.insert(shape.end(), t.sizes().begin() + 1, t.sizes().end());
    t = t.view(shape);
  }
  return in;
}

using namespace parity::hc::runs;

struct Expected {
  TensorMap out, grads;
};

TensorMap upcast(const TensorMap& in) {
  TensorMap f;
  for (const auto& [name, t] : in) f[name] = t.to(at::kFloat);
  return f;
}

// The reference at fp32 (streams upcast); its autograd backward is the reference backward.
Expected reference_fp32(const Op& op, const OpContext& ctx, const TensorMap& in, const TensorMap& grad_out) {
  TensorMap leaf = upcast(in);
  for (auto& [name, t] : leaf) t = t.detach().requires_grad_(true);
  TensorMap out = op.reference(ctx, leaf);
  std::vector<at::Tensor> outs, gos, inputs;
  for (const std::string& name : op.grad_outputs) {
    outs.push_back(out.at(name));
    gos.push_back(grad_out.at(name).to(at::kFloat));
  }
  for (const std::string& name : op.grad_inputs) inputs.push_back(leaf.at(name));
  const std::vector<at::Tensor> g = torch::autograd::grad(outs, inputs, gos);
  Expected e;
  for (auto& [name, t] : out) e.out[name] = t.detach();
  for (size_t i = 0; i < op.grad_inputs.size(); ++i) e.grads[op.grad_inputs[i]] = g[i];
  return e;
}

// Half the spacing of `dtype` at |x| (bf16 keeps 8 significant bits, fp32 24).
double half_ulp(double x, at::ScalarType dtype) {
  if (x == 0) return 0;
  const int bits = dtype == at::kBFloat16 ? 8 : 24;
  int exp = 0;
  std::frexp(x, &exp);
  return std::ldexp(1.0, exp - bits - 1);
}

struct Error {
  int64_t bad = 0, numel = 0, worst = -1;  // worst: flat index of the largest excess over the bound
  double max_abs = 0, worst_got = 0, worst_want = 0, worst_allowed = 0;
};

// Elementwise |got - want| against the one-rounding bound; NaN (poison left behind) always counts as bad.
Error measure(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor a = got.to(at::kDouble).contiguous().flatten(), e = want.to(at::kDouble).contiguous().flatten();
  const double* pa = a.data_ptr<double>();
  const double* pe = e.data_ptr<double>();
  const double scale = e.abs().max().item<double>();
  Error err;
  err.numel = a.numel();
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::abs(pa[i] - pe[i]);
    const double allowed = half_ulp(std::max(std::abs(pa[i]), std::abs(pe[i])), got.scalar_type()) + kRtol * scale;
    const double excess = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff - allowed;
    err.max_abs = std::max(err.max_abs, std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff);
    if (excess > 0) ++err.bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      err.worst = i;
      err.worst_got = pa[i];
      err.worst_want = pe[i];
      err.worst_allowed = allowed;
    }
  }
  return err;
}

::testing::AssertionResult close(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << what << ": shape " << describe(got) << " vs " << describe(want);
  const Error e = measure(got, want);
  if (e.bad == 0) return ::testing::AssertionSuccess() << what << ": max abs " << e.max_abs;
  return ::testing::AssertionFailure() << what << " " << describe(got) << ": " << e.bad << " / " << e.numel
                                       << " elements out of bound; worst at flat index " << e.worst << ": got "
                                       << e.worst_got << ", want " << e.worst_want << " (up to "
                                       << e.worst_allowed << " allowed)";
}

::testing::AssertionResult bitwise(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure() << what << ": " << describe(got) << " vs " << describe(want);
  const int64_t n = bitwise_diff_count(got, want);
  if (n == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << n << " / " << got.numel() << " elements differ bitwise";
}

void expect_unchanged(const TensorMap& before, const TensorMap& after) {
  for (const auto& [name, t] : before) EXPECT_TRUE(bitwise("input " + name, after.at(name), t));
}

// ---------------------------------------------------------------------------------------------------------------
// Every cpu variant, every shape, bf16 and fp32 streams
// ---------------------------------------------------------------------------------------------------------------

struct Case {
  std::string op, variant;
  at::ScalarType dtype;
  Shape shape;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.op << " " << c.variant << " " << dtype_name(c.dtype) << " hc=" << c.shape.hc << " tokens=" << c.shape.tokens
      << " hidden=" << c.shape.hidden << " iters=" << c.shape.sinkhorn_iters << " (" << c.shape.covers << ")";
}

std::vector<Case> cases() {
  std::vector<Case> c;
  for (const std::string& op : registry().op_names())
    for (const Variant* v : registry().variants(op))
      if (v->device == at::kCPU)
        for (at::ScalarType dtype : {at::kBFloat16, at::kFloat})
          for (const Shape& s : shapes()) c.push_back({op, v->id, dtype, s});
  return c;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string id = c.variant.substr(c.variant.find(':') + 1);
  return fmt::format("{}_{}_{}_h{}_t{}_d{}_i{}{}", c.op, id, dtype_name(c.dtype), c.shape.hc, c.shape.tokens,
                     c.shape.hidden, c.shape.sinkhorn_iters, c.shape.lead.empty() ? "" : "_lead");
}

class CpuVariant : public ::testing::TestWithParam<Case> {
 protected:
  const Case& c() const { return GetParam(); }
  const Op& op() const { return registry().op(c().op); }
  const Variant& variant() const { return registry().variant(c().op, c().variant); }
  OpContext ctx() const { return context(c().shape, c().dtype); }
  // cpu:hf on bf16 streams rounds where HF rounds: its forward contract is bitwise, not the fp32 bound.
  bool hf_rounding() const { return c().variant == "cpu:hf" && c().dtype == at::kBFloat16; }
};

TEST_P(CpuVariant, ForwardMatchesReference) {
  SCOPED_TRACE(c().shape.covers);
  const OpContext ctx = this->ctx();
  const TensorMap in = make_inputs(op(), ctx, c().shape);
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
  const TensorMap in = make_inputs(op(), ctx, c().shape);
  const TensorMap before = clone(in);
  const TensorMap out = run_forward(op(), variant(), ctx, in);
  const TensorMap grad_out = make_grad_out(op(), out, kSeed + 1);
  const TensorMap grads = run_backward(op(), variant(), ctx, in, out, grad_out);
  expect_unchanged(before, in);
  const Expected want = reference_fp32(op(), ctx, in, grad_out);
  for (const std::string& name : op().grad_inputs) {
    EXPECT_EQ(grads.at(name).scalar_type(), in.at(name).scalar_type()) << "grad " << name;
    EXPECT_TRUE(close("grad " + name, grads.at(name), want.grads.at(name)));
  }
}

// Same bits with 1 and 2 threads, and run to run: each element is summed by one thread in a fixed order.
TEST_P(CpuVariant, Deterministic) {
  const OpContext ctx = this->ctx();
  const TensorMap in = make_inputs(op(), ctx, c().shape);
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

INSTANTIATE_TEST_SUITE_P(Hc, CpuVariant, ::testing::ValuesIn(cases()), case_name);

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
    const TensorMap in = make_inputs(op, ctx, s);
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
    in = make_inputs(op, ctx, shape);
    out = run_forward(op, registry().variant("hc_post", "cpu:v1"), ctx, in);
    grad_out = make_grad_out(op, out, kSeed + 1);
    want = reference_fp32(op, ctx, in, grad_out);
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

TEST(HcCpuInputs, Fp16StreamsAreRejectedByName) {
  const Shape s = shapes()[1];
  for (const std::string& name : registry().op_names())
    for (const Variant* v : registry().variants(name)) {
      if (v->device != at::kCPU) continue;
      const Op& op = registry().op(name);
      const OpContext ctx = context(s, at::kHalf);
      TensorMap in = make_inputs(op, ctx, s);
      TensorMap out;
      for (const TensorSpec& spec : op.output_specs(ctx, in)) out[spec.name] = poisoned(spec.shape, spec.dtype, at::kCPU);
      try {
        v->forward(ctx, in, out);
        ADD_FAILURE() << name << " " << v->id << " accepted fp16 streams";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
      }
    }
}

}  // namespace
}  // namespace parity::hc
