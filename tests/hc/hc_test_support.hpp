// What the kernel-level tests of the CPU and CUDA paths (test_hc_cpu.cpp, test_hc_cuda.cpp) share: shapes and
// contexts, seeded inputs on a device, running a variant by hand (outputs and grads preallocated and NaN-poisoned
// on the variant's device, as the runner does for cases; random upstream gradients, never ones: a ones grad hides a
// transposed or mis-summed backward), the reference with autograd, and the one-rounding bound.
#pragma once
#include "references/hc.hpp"

#include <parity/error.hpp>
#include <parity/op.hpp>
#include <parity/tensor.hpp>

#include <ATen/Context.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace parity::hc::test {

struct Shape {
  int64_t hc, tokens, hidden;
  std::vector<int64_t> lead;  // leading dims the variant must flatten (empty: [tokens, ...])
  std::string covers;
  int64_t sinkhorn_iters = 20;
};

inline OpContext context(const Shape& s, at::ScalarType dtype) {
  OpContext ctx;
  ctx.dims = {{kTokens, s.tokens}, {kHc, s.hc}, {kHidden, s.hidden}};
  ctx.constants = {{kHcEps, 1e-6}, {kRmsEps, 1e-6}, {kSinkhornIters, double(s.sinkhorn_iters)}, {kPostMult, 2.0}};
  ctx.dtype = dtype;
  return ctx;
}

// Seeded inputs on `device`, with the token dim split into `lead` where a shape asks for it.
inline TensorMap make_inputs(const Op& op, const OpContext& ctx, const Shape& s, at::Device device, uint64_t seed) {
  TensorMap in = op.make_inputs(ctx, seed, device);
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

inline at::Tensor poisoned(at::IntArrayRef shape, at::ScalarType dtype, at::Device device) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
  poison(t);
  return t;
}

inline TensorMap poisoned_outputs(const Op& op, const OpContext& ctx, const TensorMap& in, at::Device device) {
  TensorMap out;
  for (const TensorSpec& spec : op.output_specs(ctx, in)) out[spec.name] = poisoned(spec.shape, spec.dtype, device);
  return out;
}

inline TensorMap clone(const TensorMap& m) {
  TensorMap c;
  for (const auto& [name, t] : m) c[name] = t.clone();
  return c;
}

inline TensorMap run_forward(const Op& op, const Variant& v, const OpContext& ctx, const TensorMap& in) {
  TensorMap out = poisoned_outputs(op, ctx, in, v.device);
  v.forward(ctx, in, out);
  return out;
}

inline TensorMap run_backward(const Op& op, const Variant& v, const OpContext& ctx, const TensorMap& in,
                              const TensorMap& fwd_out, const TensorMap& grad_out) {
  TensorMap grads;
  for (const std::string& name : op.grad_inputs)
    grads[name] = poisoned(in.at(name).sizes(), in.at(name).scalar_type(), v.device);
  v.backward(ctx, in, fwd_out, grad_out, grads);
  return grads;
}

// In each output's dtype and on its device; drawn on the CPU so both tests see the same numbers for a seed.
inline TensorMap make_grad_out(const Op& op, const TensorMap& out, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  TensorMap g;
  for (const std::string& name : op.grad_outputs) {
    const at::Tensor& o = out.at(name);
    g[name] = at::normal(0.0, 1.0, o.sizes(), gen, at::TensorOptions().dtype(at::kFloat))
                  .to(o.scalar_type())
                  .to(o.device());
  }
  return g;
}

inline TensorMap upcast(const TensorMap& in) {
  TensorMap f;
  for (const auto& [name, t] : in) f[name] = t.to(at::kFloat);
  return f;
}

struct Expected {
  TensorMap out, grads;
};

// The reference composition with autograd. fp32 = true: inputs and upstream grads upcast (the reference);
// fp32 = false: as they are (the naive low-precision composition, HF's roundings). On the GPU the fp32 matmuls
// are true fp32: the contract's naive composition computes mixes without TF32.
inline Expected run_reference(const Op& op, const OpContext& ctx, const TensorMap& in, const TensorMap& grad_out,
                              bool fp32) {
  at::globalContext().setAllowTF32CuBLAS(false);
  TensorMap leaf;
  for (const auto& [name, t] : in) leaf[name] = (fp32 ? t.to(at::kFloat) : t).detach().clone().requires_grad_(true);
  TensorMap out = op.reference(ctx, leaf);
  std::vector<at::Tensor> outs, gos, inputs;
  for (const std::string& name : op.grad_outputs) {
    outs.push_back(out.at(name));
    gos.push_back(fp32 ? grad_out.at(name).to(at::kFloat) : grad_out.at(name).to(out.at(name).scalar_type()));
  }
  for (const std::string& name : op.grad_inputs) inputs.push_back(leaf.at(name));
  const std::vector<at::Tensor> g = torch::autograd::grad(outs, inputs, gos);
  Expected e;
  for (auto& [name, t] : out) e.out[name] = t.detach();
  for (size_t i = 0; i < op.grad_inputs.size(); ++i) e.grads[op.grad_inputs[i]] = g[i];
  return e;
}

// Half the spacing of `dtype` at |x| (bf16 keeps 8 significant bits, fp32 24).
inline double half_ulp(double x, at::ScalarType dtype) {
  if (x == 0) return 0;
  const int bits = dtype == at::kBFloat16 ? 8 : 24;
  int exp = 0;
  std::frexp(x, &exp);
  return std::ldexp(1.0, exp - bits - 1);
}

// The one-rounding bound, elementwise: |got - want| <= half an ULP of got's dtype + rtol * max|want| (fp32
// evaluation, taken normwise so that cancellation near zero does not count). NaN (poison left behind) always fails.
inline ::testing::AssertionResult within_rounding_bound(const std::string& what, const at::Tensor& got,
                                                        const at::Tensor& want, double rtol) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << what << ": shape " << describe(got) << " vs " << describe(want);
  const at::Tensor a = got.to(at::kDouble).cpu().contiguous().flatten();
  const at::Tensor e = want.to(at::kDouble).cpu().contiguous().flatten();
  const double* pa = a.data_ptr<double>();
  const double* pe = e.data_ptr<double>();
  const double scale = e.numel() == 0 ? 0 : e.abs().max().item<double>();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  int64_t bad = 0, worst = -1;
  double max_abs = 0, worst_excess = -kInf, worst_allowed = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::abs(pa[i] - pe[i]);
    const double allowed = half_ulp(std::max(std::abs(pa[i]), std::abs(pe[i])), got.scalar_type()) + rtol * scale;
    const double excess = std::isnan(diff) ? kInf : diff - allowed;
    max_abs = std::max(max_abs, std::isnan(diff) ? kInf : diff);
    if (excess > 0) ++bad;
    if (excess > worst_excess) worst_excess = excess, worst = i, worst_allowed = allowed;
  }
  if (bad == 0) return ::testing::AssertionSuccess() << what << ": max abs " << max_abs;
  return ::testing::AssertionFailure() << what << " " << describe(got) << ": " << bad << " / " << a.numel()
                                       << " elements out of the one-rounding bound; worst at flat index " << worst
                                       << ": got " << pa[worst] << ", want " << pe[worst] << " (up to "
                                       << worst_allowed << " allowed)";
}

inline ::testing::AssertionResult bitwise(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type())
    return ::testing::AssertionFailure() << what << ": " << describe(got) << " vs " << describe(want);
  const int64_t n = bitwise_diff_count(got, want);
  if (n == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << n << " / " << got.numel() << " elements differ bitwise";
}

inline void expect_unchanged(const TensorMap& before, const TensorMap& after) {
  for (const auto& [name, t] : before) EXPECT_TRUE(bitwise("input " + name, after.at(name), t));
}

// One parameterised run: a variant of an op, a stream dtype, a shape.
struct Case {
  std::string op, variant;
  at::ScalarType dtype;
  Shape shape;
};

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.op << " " << c.variant << " " << dtype_name(c.dtype) << " hc=" << c.shape.hc << " tokens=" << c.shape.tokens
      << " hidden=" << c.shape.hidden << " iters=" << c.shape.sinkhorn_iters << " (" << c.shape.covers << ")";
}

// Every variant of `device` in `reg`, bf16 and fp32 streams, every shape.
inline std::vector<Case> cases(const Registry& reg, at::DeviceType device, const std::vector<Shape>& shapes) {
  std::vector<Case> c;
  for (const std::string& op : reg.op_names())
    for (const Variant* v : reg.variants(op))
      if (v->device == device)
        for (at::ScalarType dtype : {at::kBFloat16, at::kFloat})
          for (const Shape& s : shapes) c.push_back({op, v->id, dtype, s});
  return c;
}

// A parameterised run's fixture: the case's op and variant in the test file's registry, and its context.
template <const Registry& (*kRegistry)()>
class VariantTest : public ::testing::TestWithParam<Case> {
 protected:
  const Case& c() const { return GetParam(); }
  const Op& op() const { return kRegistry().op(c().op); }
  const Variant& variant() const { return kRegistry().variant(c().op, c().variant); }
  OpContext ctx() const { return context(c().shape, c().dtype); }
  // An hf variant on bf16 streams rounds where HF rounds: its forward contract is bitwise, not the fp32 bound.
  bool hf_rounding() const { return c().variant.ends_with(":hf") && c().dtype == at::kBFloat16; }
};

inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const std::string id = c.variant.substr(c.variant.find(':') + 1);
  return fmt::format("{}_{}_{}_h{}_t{}_d{}_i{}{}", c.op, id, dtype_name(c.dtype), c.shape.hc, c.shape.tokens,
                     c.shape.hidden, c.shape.sinkhorn_iters, c.shape.lead.empty() ? "" : "_lead");
}

// fp16 streams are outside every variant's contract: each must refuse them with an InputError that says fp16.
inline void expect_fp16_rejected(const Registry& reg, at::Device device, const Shape& s, uint64_t seed) {
  for (const std::string& name : reg.op_names())
    for (const Variant* v : reg.variants(name)) {
      if (v->device != device.type()) continue;
      const Op& op = reg.op(name);
      const OpContext ctx = context(s, at::kHalf);
      const TensorMap in = make_inputs(op, ctx, s, device, seed);
      TensorMap out = poisoned_outputs(op, ctx, in, device);
      try {
        v->forward(ctx, in, out);
        ADD_FAILURE() << name << " " << v->id << " accepted fp16 streams";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
      }
    }
}

}  // namespace parity::hc::test
