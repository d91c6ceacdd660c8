// Hyper-connections (mHC) on CUDA: the LibTorch bridge to kernels/cuda/hc.cu (math and names: references/hc.hpp).
//
//   cuda:v1  hc_pre, hc_post, hc_head   fp32 arithmetic (no TF32, no tensor cores), ONE rounding to the streams'
//                                       dtype per stream output (collapsed, out, grad_x, grad_residual). Every sum
//                                       runs in a fixed order without atomics: bitwise deterministic per device.
//   cuda:hf  hc_post                    rounds exactly where HF does: bf16(post), bf16(comb), bf16(post*x),
//                                       bf16(fp32 sum_j comb[j,k] residual_j), bf16(add). Backward = v1 backward.
//
// Inputs arrive on the GPU in their native dtypes: streams bf16 or fp32 (anything else is an InputError naming the
// dtype), parameters, gates and mixes fp32; leading dims are flattened to T tokens; inputs are read through
// contiguous views (no copy when they already are one) and never written. Outputs and grads arrive preallocated:
// they must be contiguous, on the inputs' device, of the agreed dtype and size, and every element is written.
// Kernels run on the current CUDA stream; each launch is followed by a cudaGetLastError check naming the kernel.
#include "kernels/cuda/hc.cuh"
#include "references/hc.hpp"

#include <parity/error.hpp>
#include <parity/kernel_args.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace parity::hc {
namespace {

namespace kc = parity::hc::cuda;

// ---------------------------------------------------------------------------------------------------------------
// Tensors to raw device pointers, with the contract's checks
// ---------------------------------------------------------------------------------------------------------------

void check_launch(const std::string& where, const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(
        fmt::format("{}: CUDA kernel {} failed: {} ({})", where, kernel, cudaGetErrorName(e), cudaGetErrorString(e)));
}

// The contract's checks (parity/kernel_args.hpp), bound to the CUDA device.
const at::Tensor& need(const TensorMap& m, const std::string& name, const std::string& where) {
  return args::need(m, name, at::kCUDA, where);
}

kc::Dtype stream_dtype(at::ScalarType t, const std::string& where) {
  switch (t) {
    case at::kBFloat16: return kc::Dtype::bf16;
    case at::kFloat: return kc::Dtype::fp32;
    default: throw InputError(fmt::format("{}: streams must be bf16 or fp32, got {}", where, dtype_name(t)));
  }
}

at::Tensor stream(const TensorMap& in, const std::string& name, at::ScalarType dtype, int64_t numel,
                  const std::string& where) {
  return args::input(in, name, dtype, numel, at::kCUDA, where);
}

at::Tensor fp32(const TensorMap& in, const std::string& name, int64_t numel, const std::string& where) {
  return args::input(in, name, at::kFloat, numel, at::kCUDA, where);
}

void* writable(TensorMap& out, const std::string& name, at::ScalarType dtype, int64_t numel, const at::Device& dev,
               const std::string& where) {
  return args::output(out, name, dtype, numel, dev, where).data_ptr();
}

float* writable_f32(TensorMap& out, const std::string& name, int64_t numel, const at::Device& dev,
                    const std::string& where) {
  return static_cast<float*>(writable(out, name, at::kFloat, numel, dev, where));
}

void check_hc(const Constants& k, const std::string& where) {
  if (k.hc < 1 || k.hc > kc::kMaxHc)
    throw InputError(fmt::format("{}: hc = {} is outside what the CUDA kernels take (1..{})", where, k.hc,
                                 kc::kMaxHc));
  if (k.hidden < 1 || k.hc * k.hidden > (int64_t{1} << 30))
    throw InputError(fmt::format("{}: hidden = {} is outside what the CUDA kernels take", where, k.hidden));
}

kc::MixConsts mix_consts(const Constants& k) {
  return {float(k.hc_eps), float(k.rms_eps), float(k.post_mult), int(k.sinkhorn_iters)};
}

// ---------------------------------------------------------------------------------------------------------------
// hc_post
// ---------------------------------------------------------------------------------------------------------------

struct PostInputs {
  int64_t t;
  kc::Dtype dt;
  at::Tensor x, residual, post, comb;
};

PostInputs post_inputs(const Constants& k, const TensorMap& in, const std::string& where) {
  check_hc(k, where);
  const at::Tensor x = need(in, "x", where);
  const at::ScalarType st = x.scalar_type();
  const kc::Dtype dt = stream_dtype(st, where);
  const int64_t t = args::tokens(x, {k.hidden}, "x", where);
  const int64_t tr = args::tokens(need(in, "residual", where), {k.hc, k.hidden}, "residual", where);
  if (tr != t)
    throw InputError(fmt::format("{}: 'residual' holds {} tokens, 'x' holds {}", where, tr, t));
  return {t,
          dt,
          stream(in, "x", st, t * k.hidden, where),
          stream(in, "residual", st, t * k.hc * k.hidden, where),
          fp32(in, "post", t * k.hc, where),
          fp32(in, "comb", t * k.hc * k.hc, where)};
}

void hc_post_forward(bool hf, const OpContext& ctx, const TensorMap& in, TensorMap& out) {
  const std::string where = hf ? "hc_post cuda:hf" : "hc_post cuda:v1";
  const Constants k = constants(ctx);
  const PostInputs p = post_inputs(k, in, where);
  const c10::cuda::CUDAGuard guard(p.x.device());
  void* o = writable(out, "out", p.x.scalar_type(), p.t * k.hc * k.hidden, p.x.device(), where);
  kc::launch_hc_post_fwd(p.dt, hf, p.x.data_ptr(), p.residual.data_ptr(), p.post.data_ptr<float>(),
                         p.comb.data_ptr<float>(), o, p.t, int(k.hc), k.hidden, at::cuda::getCurrentCUDAStream());
  check_launch(where, hf ? "hc_post_fwd<hf>" : "hc_post_fwd<v1>");
}

void hc_post_backward(const OpContext& ctx, const TensorMap& in, const TensorMap& /*fwd_out*/,
                      const TensorMap& grad_out, TensorMap& grads) {
  const std::string where = "hc_post cuda backward";
  const Constants k = constants(ctx);
  const PostInputs p = post_inputs(k, in, where);
  const c10::cuda::CUDAGuard guard(p.x.device());
  const at::ScalarType st = p.x.scalar_type();
  const at::Device dev = p.x.device();
  const at::Tensor g = stream(grad_out, "out", st, p.t * k.hc * k.hidden, where);
  void* gx = writable(grads, "x", st, p.t * k.hidden, dev, where);
  void* gres = writable(grads, "residual", st, p.t * k.hc * k.hidden, dev, where);
  float* gpost = writable_f32(grads, "post", p.t * k.hc, dev, where);
  float* gcomb = writable_f32(grads, "comb", p.t * k.hc * k.hc, dev, where);
  kc::launch_hc_post_bwd(p.dt, g.data_ptr(), p.x.data_ptr(), p.residual.data_ptr(), p.post.data_ptr<float>(),
                         p.comb.data_ptr<float>(), gx, gres, gpost, gcomb, p.t, int(k.hc), k.hidden,
                         at::cuda::getCurrentCUDAStream());
  check_launch(where, "hc_post_bwd");
}

// ---------------------------------------------------------------------------------------------------------------
// hc_pre and hc_head: one projection path, the kinds differ only in the per-token gate math
// ---------------------------------------------------------------------------------------------------------------

struct MixInputs {
  int64_t t, m, ns;  // tokens, rows of fn (mixes per token), entries of scale
  kc::Dtype dt;
  at::Tensor x, fn, base, scale;
};

MixInputs mix_inputs(kc::MixKind kind, const Constants& k, const TensorMap& in, const std::string& where) {
  check_hc(k, where);
  if (kind == kc::MixKind::pre && k.sinkhorn_iters > kc::kMaxSinkhornIters)  // at least 1: constants() checks
    throw InputError(fmt::format("{}: sinkhorn_iters = {} is outside 1..{}", where, k.sinkhorn_iters,
                                 kc::kMaxSinkhornIters));
  const at::Tensor x = need(in, "x", where);
  const at::ScalarType st = x.scalar_type();
  const kc::Dtype dt = stream_dtype(st, where);
  const int64_t t = args::tokens(x, {k.hc, k.hidden}, "x", where);
  const int64_t m = kc::mix_rows(kind, int(k.hc)), ns = kc::mix_scale_count(kind);
  return {t,
          m,
          ns,
          dt,
          stream(in, "x", st, t * k.hc * k.hidden, where),
          fp32(in, "fn", m * k.hc * k.hidden, where),
          fp32(in, "base", m, where),
          fp32(in, "scale", ns, where)};
}

// The streams' output of the collapse: hc_pre's "collapsed", hc_head's "out".
const char* collapse_name(kc::MixKind kind) { return kind == kc::MixKind::pre ? "collapsed" : "out"; }

// The fused forward where it fits (x read once; hc_pre then mix_post_comb), else fn_transpose (fn^T zero-padded to
// the kernel's width: a 24 x H*D fp32 workspace) -> mix_fwd -> collapse.
void mix_forward(kc::MixKind kind, const std::string& where, const OpContext& ctx, const TensorMap& in,
                 TensorMap& out) {
  const Constants k = constants(ctx);
  const MixInputs p = mix_inputs(kind, k, in, where);
  const c10::cuda::CUDAGuard guard(p.x.device());
  const at::Device dev = p.x.device();
  const bool pre_kind = kind == kc::MixKind::pre;
  float* mixes = writable_f32(out, "mixes", p.t * p.m, dev, where);
  float* pre = writable_f32(out, "pre", p.t * k.hc, dev, where);
  float* post = pre_kind ? writable_f32(out, "post", p.t * k.hc, dev, where) : nullptr;
  float* comb = pre_kind ? writable_f32(out, "comb", p.t * k.hc * k.hc, dev, where) : nullptr;
  void* y = writable(out, collapse_name(kind), p.x.scalar_type(), p.t * k.hidden, dev, where);
  const cudaStream_t s = at::cuda::getCurrentCUDAStream();
  if (kc::mix_fused_fwd_fits(kind, p.dt, p.x.data_ptr(), p.fn.data_ptr<float>(), y, int(k.hc), k.hidden)) {
    kc::launch_mix_fused_fwd(kind, p.x.data_ptr(), p.fn.data_ptr<float>(), p.base.data_ptr<float>(),
                             p.scale.data_ptr<float>(), mixes, pre, y, p.t, int(k.hc), k.hidden, mix_consts(k), s);
    check_launch(where, pre_kind ? "mix_fused_fwd<pre>" : "mix_fused_fwd<head>");
    if (pre_kind) {
      kc::launch_mix_post_comb(mixes, p.base.data_ptr<float>(), p.scale.data_ptr<float>(), post, comb, p.t,
                               int(k.hc), mix_consts(k), s);
      check_launch(where, "mix_post_comb");
    }
    return;
  }
  at::Tensor fnT = at::empty({kc::mix_fnT_floats(kind, int(k.hc), k.hidden)}, p.fn.options());
  kc::launch_mix_fn_transpose(kind, p.fn.data_ptr<float>(), fnT.data_ptr<float>(), int(k.hc), k.hidden, s);
  check_launch(where, "mix_fn_transpose");
  kc::launch_mix_fwd(kind, p.dt, p.x.data_ptr(), fnT.data_ptr<float>(), p.base.data_ptr<float>(),
                     p.scale.data_ptr<float>(), mixes, pre, post, comb, p.t, int(k.hc), k.hidden, mix_consts(k), s);
  check_launch(where, pre_kind ? "mix_fwd<pre>" : "mix_fwd<head>");
  kc::launch_collapse(p.dt, p.x.data_ptr(), pre, y, p.t, int(k.hc), k.hidden, s);
  check_launch(where, "collapse");
}

// reduce (sum x^2, <g_y, x_h>) -> token (gate backward, per-token coefficients) -> dx_dfn (grad_x, grad_fn
// partials), or the three in one pass where mix_fused_bwd fits (hc_head); then sum_splits (grad_fn) and colsum
// (grad_base, grad_scale). Workspaces come from the caching allocator on the current stream.
void mix_backward(kc::MixKind kind, const std::string& where, const OpContext& ctx, const TensorMap& in,
                  const TensorMap& fwd_out, const TensorMap& grad_out, TensorMap& grads) {
  const Constants k = constants(ctx);
  const MixInputs p = mix_inputs(kind, k, in, where);
  const c10::cuda::CUDAGuard guard(p.x.device());
  const at::Device dev = p.x.device();
  const at::ScalarType st = p.x.scalar_type();
  const bool pre_kind = kind == kc::MixKind::pre;
  const int hc = int(k.hc);
  const int64_t n = k.hc * k.hidden;

  const at::Tensor mixes = fp32(fwd_out, "mixes", p.t * p.m, where);
  const at::Tensor g_y = stream(grad_out, collapse_name(kind), st, p.t * k.hidden, where);
  at::Tensor g_post, g_comb;
  if (pre_kind) {
    g_post = fp32(grad_out, "post", p.t * k.hc, where);
    g_comb = fp32(grad_out, "comb", p.t * k.hc * k.hc, where);
  }
  void* grad_x = writable(grads, "x", st, p.t * n, dev, where);
  float* grad_fn = writable_f32(grads, "fn", p.m * n, dev, where);
  float* grad_base = writable_f32(grads, "base", p.m, dev, where);
  float* grad_scale = writable_f32(grads, "scale", p.ns, dev, where);
  if (p.t == 0) {  // sums over no token: zeros, without the kernels (the backward's tensor maps need a row of data)
    for (const char* name : {"fn", "base", "scale"}) grads.at(name).zero_();
    return;
  }

  const at::TensorOptions f32 = p.x.options().dtype(at::kFloat);
  const at::TensorOptions f64 = p.x.options().dtype(at::kDouble);  // the per-token reductions and gate gradients
  at::Tensor gate = at::empty({p.t, kc::mix_gate_width(kind)}, f64);
  const cudaStream_t s = at::cuda::getCurrentCUDAStream();
  // hc_pre keeps the two passes: its one-pass kernel (mix_fused_bwd_mma) is correct but slower (V4 dims: 0.806 vs
  // 0.756 ms on an H100; 0.771 vs 0.589 on an H200 at 9f7d04e; see kernels/cuda/hc.cu); its GPU test holds it to the
  // two-pass results.
  const bool fused = !pre_kind && kc::mix_fused_bwd_fits(kind, p.dt, p.x.data_ptr(), g_y.data_ptr(), grad_x, hc,
                                                         k.hidden);
  const int splits = fused ? kc::mix_fused_bwd_splits(kind, p.t, k.hidden)
                           : kc::mix_bwd_splits(kind, p.dt, p.t, hc, k.hidden,
                                                at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  at::Tensor part = at::empty({splits, p.m, n}, f32);
  if (fused) {
    kc::launch_mix_fused_bwd(kind, p.x.data_ptr(), g_y.data_ptr(), mixes.data_ptr<float>(), nullptr,
                             p.fn.data_ptr<float>(), p.base.data_ptr<float>(), p.scale.data_ptr<float>(),
                             gate.data_ptr<double>(), grad_x, part.data_ptr<float>(), p.t, hc, k.hidden, mix_consts(k),
                             s);
    check_launch(where, "mix_fused_bwd");
    kc::launch_mix_bwd_sums(kind, part.data_ptr<float>(), splits,
                            {grad_fn, gate.data_ptr<double>(), grad_base, grad_scale, nullptr}, p.t, hc, k.hidden, s);
    check_launch(where, "mix_bwd_sums");
  } else {
    at::Tensor red = at::empty({p.t, 1 + k.hc}, f64);
    at::Tensor coef = at::empty({kc::mix_coef_floats(kind, p.t)}, f32);
    at::Tensor hist = pre_kind ? at::empty({kc::sinkhorn_hist_floats(p.t, hc, int(k.sinkhorn_iters))}, f32)
                               : at::Tensor();
    kc::launch_mix_bwd_reduce(kind, p.dt, p.x.data_ptr(), g_y.data_ptr(), red.data_ptr<double>(),
                              mixes.data_ptr<float>(), pre_kind ? g_comb.data_ptr<float>() : nullptr,
                              p.base.data_ptr<float>(), p.scale.data_ptr<float>(), gate.data_ptr<double>(),
                              pre_kind ? hist.data_ptr<float>() : nullptr, p.t, hc, k.hidden, mix_consts(k), s);
    check_launch(where, "mix_bwd_reduce");
    at::Tensor arrivals = at::empty({kc::mix_bwd_arrivals(k.hidden)}, p.x.options().dtype(at::kInt));
    unsigned* arrive = reinterpret_cast<unsigned*>(arrivals.data_ptr<int32_t>());
    kc::launch_mix_bwd_token(kind, mixes.data_ptr<float>(), red.data_ptr<double>(),
                             pre_kind ? g_post.data_ptr<float>() : nullptr, p.base.data_ptr<float>(),
                             p.scale.data_ptr<float>(), coef.data_ptr<float>(), gate.data_ptr<double>(), arrive, p.t,
                             hc, k.hidden, mix_consts(k), s);
    check_launch(where, pre_kind ? "mix_bwd_token<pre>" : "mix_bwd_token<head>");
    kc::launch_mix_bwd_dx_dfn(kind, p.dt, p.x.data_ptr(), g_y.data_ptr(), coef.data_ptr<float>(),
                              p.fn.data_ptr<float>(), grad_x, part.data_ptr<float>(), p.t, hc, k.hidden, splits,
                              {grad_fn, gate.data_ptr<double>(), grad_base, grad_scale, arrive}, s);
    check_launch(where, "mix_bwd_dx_dfn");
  }
}

// The kernels run on the device of the guard each bridge takes (x's): a tensor on another GPU would be dereferenced
// there (an illegal address, or peer reads).
void one_device(std::initializer_list<const TensorMap*> maps, const std::string& where) {
  const at::Tensor* first = nullptr;
  std::string first_name;
  for (const TensorMap* m : maps)
    for (const auto& [name, t] : *m) {
      if (!t.defined() || !t.is_cuda()) continue;
      if (!first) first = &t, first_name = name;
      else if (t.device() != first->device())
        throw InputError(fmt::format("{}: '{}' is on {} and '{}' on {}: the kernels take every tensor on one device",
                                     where, first_name, first->device().str(), name, t.device().str()));
    }
}

Variant variant(std::string op, std::string id, std::string description,
                std::function<void(const OpContext&, const TensorMap&, TensorMap&)> forward,
                decltype(Variant::backward) backward) {
  Variant v;
  v.id = std::move(id);
  v.op = std::move(op);
  v.device = at::kCUDA;
  v.description = std::move(description);
  v.deterministic = true;
  const std::string where = v.op + " " + v.id;
  v.forward = [forward, where](const OpContext& c, const TensorMap& in, TensorMap& out) {
    one_device({&in, &out}, where);
    forward(c, in, out);
  };
  v.backward = [backward, where](const OpContext& c, const TensorMap& in, const TensorMap& fwd, const TensorMap& g,
                                 TensorMap& grads) {
    one_device({&in, &fwd, &g, &grads}, where + " backward");
    backward(c, in, fwd, g, grads);
  };
  return v;
}

}  // namespace

void register_hc_cuda(Registry& reg) {
  using kc::MixKind;
  reg.add(variant(
      "hc_pre", "cuda:v1",
      "fp32 projection (FFMA, no TF32) over 128-token tiles + per-token Sinkhorn; collapse with one rounding; "
      "backward recomputes the Sinkhorn per token, grad_fn from fixed-order per-split partials",
      [](const OpContext& c, const TensorMap& in, TensorMap& out) {
        mix_forward(MixKind::pre, "hc_pre cuda:v1", c, in, out);
      },
      [](const OpContext& c, const TensorMap& in, const TensorMap& fwd, const TensorMap& g, TensorMap& grads) {
        mix_backward(MixKind::pre, "hc_pre cuda:v1 backward", c, in, fwd, g, grads);
      }));
  reg.add(variant(
      "hc_head", "cuda:v1", "hc_pre's projection and collapse without post/comb/Sinkhorn (shared kernels)",
      [](const OpContext& c, const TensorMap& in, TensorMap& out) {
        mix_forward(MixKind::head, "hc_head cuda:v1", c, in, out);
      },
      [](const OpContext& c, const TensorMap& in, const TensorMap& fwd, const TensorMap& g, TensorMap& grads) {
        mix_backward(MixKind::head, "hc_head cuda:v1 backward", c, in, fwd, g, grads);
      }));
  reg.add(variant(
      "hc_post", "cuda:v1", "warp per token, 16-byte vectors, fp32 FMA chain, one rounding; fused backward",
      [](const OpContext& c, const TensorMap& in, TensorMap& out) { hc_post_forward(false, c, in, out); },
      hc_post_backward));
  reg.add(variant(
      "hc_post", "cuda:hf", "rounds where HF rounds (bf16 post, comb, post*x, mix, add); backward = cuda:v1's",
      [](const OpContext& c, const TensorMap& in, TensorMap& out) { hc_post_forward(true, c, in, out); },
      hc_post_backward));
}

}  // namespace parity::hc
