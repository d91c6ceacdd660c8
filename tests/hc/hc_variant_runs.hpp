// Running a variant by hand in the kernel-level tests (test_hc_cpu.cpp, test_hc_cuda.cpp): outputs and grads
// preallocated and NaN-poisoned on the variant's device, as the runner does for cases, and random upstream
// gradients (never ones: a ones grad hides a transposed or mis-summed backward).
#pragma once
#include <parity/op.hpp>
#include <parity/tensor.hpp>

namespace parity::hc::runs {

inline at::Tensor poisoned(at::IntArrayRef shape, at::ScalarType dtype, at::Device device) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
  poison(t);
  return t;
}

inline TensorMap clone(const TensorMap& m) {
  TensorMap c;
  for (const auto& [name, t] : m) c[name] = t.clone();
  return c;
}

inline TensorMap run_forward(const Op& op, const Variant& v, const OpContext& ctx, const TensorMap& in) {
  TensorMap out;
  for (const TensorSpec& spec : op.output_specs(ctx, in)) out[spec.name] = poisoned(spec.shape, spec.dtype, v.device);
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

}  // namespace parity::hc::runs
