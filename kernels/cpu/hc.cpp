// Hyper-connections (mHC) on the CPU: plain loops over raw pointers, forward and backward, so CPU-only CI runs
// the same numerics contract as the CUDA paths. Math and names: references/hc.hpp.
//
//   cpu:v1  hc_pre, hc_post, hc_head   fp32 arithmetic, ONE rounding to the streams' dtype per stream output
//                                      (collapsed, out, grad_x, grad_residual). Sums over D, H*D or T accumulate
//                                      in fp64 (they are the only long ones; fp64 keeps this path's own error far
//                                      below the reference's, so a comparison measures the reference); the short
//                                      sums over H or over the (2+H)H mixes run in fp32.
//   cpu:hf  hc_post                    rounds exactly where HF does (post, comb, post*x, the mix, the sum), bitwise
//                                      with the reference fed bf16 streams; fp32 streams take the v1 path.
//                                      Backward = v1 backward.
//
// Streams are bf16 or fp32; params, gates and mixes are fp32; leading dims are flattened to T tokens.
// Every path is deterministic and independent of the thread count: tokens (or columns of grad_fn) are split
// across threads, and each output element is summed by one thread in a fixed order.
#include "references/hc.hpp"

#include <parity/error.hpp>
#include <parity/kernel_args.hpp>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <fmt/format.h>

#include <algorithm>  // std::max, std::min, std::copy_n
#include <cmath>      // std::exp, std::sqrt
#include <type_traits>  // std::is_same_v
#include <vector>

namespace parity::hc {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Tensors to raw pointers, with the contract's checks
// ---------------------------------------------------------------------------------------------------------------

// The contract's checks (parity/kernel_args.hpp), bound to the CPU. Streams are read through a contiguous view (no
// copy when they already are one); inputs are never written.
const at::Tensor& need(const TensorMap& m, const std::string& name, const std::string& where) {
  return args::need(m, name, at::kCPU, where);
}
at::Tensor stream(const TensorMap& in, const std::string& name, at::ScalarType dtype, const std::string& where) {
  return args::input(in, name, dtype, -1, at::kCPU, where);
}
at::Tensor fp32(const TensorMap& in, const std::string& name, int64_t numel, const std::string& where) {
  return args::input(in, name, at::kFloat, numel, at::kCPU, where);
}
template <typename T>
T* writable(TensorMap& out, const std::string& name, int64_t numel, const std::string& where) {
  return args::output(out, name, c10::CppTypeToScalarType<T>::value, numel, at::kCPU, where).template data_ptr<T>();
}

// The stream dtype picks the instantiation; fp16 (and anything else) is outside the contract.
template <typename F>
void with_stream_type(at::ScalarType dtype, const std::string& where, F&& f) {
  switch (dtype) {
    case at::kFloat: return f(float{});
    case at::kBFloat16: return f(c10::BFloat16{});
    default:
      throw InputError(fmt::format("{}: streams must be bf16 or fp32, got {}", where, dtype_name(dtype)));
  }
}

// Threads take whole tokens; a chunk is at least ~64k multiply-adds so that tiny shapes stay on one thread.
int64_t grain(int64_t work_per_token) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, work_per_token));
}

// ---------------------------------------------------------------------------------------------------------------
// Small per-token math shared by hc_pre and hc_head
// ---------------------------------------------------------------------------------------------------------------

float sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

// d sigmoid(z) / dz, from z itself rather than from the saved gate (pre carries +hc_eps).
float sigmoid_grad(float z) {
  const float s = sigmoid(z);
  return s * (1.f - s);
}

template <typename S>
void load_row(const S* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// r = rsqrt(mean(x^2) + rms_eps) over one token's H*D flattened streams.
float rms_scale(const float* x, int64_t n, double rms_eps) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(sum_sq / double(n) + rms_eps));
}

// mixes[m] = <flat, fn[m]> with flat = x r; r is a per-token scalar, so it is applied after the dot product.
void project(const float* x, float r, const float* fn, int64_t rows, int64_t n, float* mixes) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* w = fn + m * n;
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * w[i];
    mixes[m] = static_cast<float>(acc * r);
  }
}

// collapsed[d] = sum_h pre_h x_h[d] in fp32, rounded once to the streams' dtype.
template <typename S>
void collapse(const float* pre, const float* x, int64_t h, int64_t d, S* out) {
  for (int64_t j = 0; j < d; ++j) {
    float acc = 0;
    for (int64_t s = 0; s < h; ++s) acc += pre[s] * x[s * d + j];
    out[j] = S(acc);
  }
}

// d loss / d pre_h = <g_collapsed, x_h>.
template <typename S>
void collapse_grad_pre(const S* g, const float* x, int64_t h, int64_t d, float* g_pre) {
  for (int64_t s = 0; s < h; ++s) {
    double acc = 0;
    for (int64_t j = 0; j < d; ++j) acc += double(static_cast<float>(g[j])) * x[s * d + j];
    g_pre[s] = static_cast<float>(acc);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Sinkhorn-Knopp on one token's H x H comb logits (row-major: comb[i][j] = c[i*H + j])
// ---------------------------------------------------------------------------------------------------------------

// Runs the forward while keeping every stage, so the backward walks the same values back. The forward alone
// uses it too: one code path means the backward's recompute is bitwise the forward.
class Sinkhorn {
 public:
  Sinkhorn(int64_t h, int64_t iters, double eps)
      : h_(h), norms_(2 * iters - 1), eps_(static_cast<float>(eps)), softmax_(h * h),
        stages_((norms_ + 1) * h * h), denom_(norms_ * h), g_(h * h) {}

  void forward(const float* logits) {
    // P = softmax over each row (max-subtracted); stage 0 = P + hc_eps.
    float* c0 = stage(0);
    for (int64_t i = 0; i < h_; ++i) {
      const float* l = logits + i * h_;
      float mx = l[0];
      for (int64_t j = 1; j < h_; ++j) mx = std::max(mx, l[j]);
      float sum = 0;
      for (int64_t j = 0; j < h_; ++j) {
        softmax_[i * h_ + j] = std::exp(l[j] - mx);
        sum += softmax_[i * h_ + j];
      }
      for (int64_t j = 0; j < h_; ++j) {
        softmax_[i * h_ + j] /= sum;
        c0[i * h_ + j] = softmax_[i * h_ + j] + eps_;
      }
    }
    // Normalisation n (1-based) divides by column sums when n is odd, by row sums when even: one column pass,
    // then (iters-1) x (rows, columns), each with +hc_eps in the denominator.
    for (int64_t n = 1; n <= norms_; ++n) normalise(stage(n - 1), stage(n), denom_.data() + (n - 1) * h_, n % 2);
  }

  const float* result() const { return stages_.data() + norms_ * h_ * h_; }

  // g_logits = d loss / d logits, given g_comb = d loss / d result().
  void backward(const float* g_comb, float* g_logits) {
    std::copy_n(g_comb, h_ * h_, g_.begin());
    // y = c / (sum c + eps) along a line: dc_i = (dy_i - sum_k dy_k y_k) / (sum c + eps).
    for (int64_t n = norms_; n >= 1; --n) normalise_backward(stage(n), denom_.data() + (n - 1) * h_, n % 2);
    // +hc_eps passes the gradient through; softmax: dl_j = P_j (dP_j - sum_k dP_k P_k) per row.
    for (int64_t i = 0; i < h_; ++i) {
      const float* p = softmax_.data() + i * h_;
      const float* g = g_.data() + i * h_;
      float dot = 0;
      for (int64_t j = 0; j < h_; ++j) dot += g[j] * p[j];
      for (int64_t j = 0; j < h_; ++j) g_logits[i * h_ + j] = p[j] * (g[j] - dot);
    }
  }

 private:
  float* stage(int64_t n) { return stages_.data() + n * h_ * h_; }

  // Element p of line l: column l (walking rows) or row l (walking columns).
  int64_t index(int64_t line, int64_t p, bool by_column) const { return by_column ? p * h_ + line : line * h_ + p; }

  void normalise(const float* in, float* out, float* denom, bool by_column) {
    for (int64_t l = 0; l < h_; ++l) {
      float sum = 0;
      for (int64_t p = 0; p < h_; ++p) sum += in[index(l, p, by_column)];
      denom[l] = sum + eps_;
      for (int64_t p = 0; p < h_; ++p) out[index(l, p, by_column)] = in[index(l, p, by_column)] / denom[l];
    }
  }

  void normalise_backward(const float* y, const float* denom, bool by_column) {
    for (int64_t l = 0; l < h_; ++l) {
      float dot = 0;
      for (int64_t p = 0; p < h_; ++p) dot += g_[index(l, p, by_column)] * y[index(l, p, by_column)];
      for (int64_t p = 0; p < h_; ++p) g_[index(l, p, by_column)] = (g_[index(l, p, by_column)] - dot) / denom[l];
    }
  }

  int64_t h_, norms_;
  float eps_;
  std::vector<float> softmax_;  // P, before +hc_eps
  std::vector<float> stages_;   // stage 0 = P + hc_eps, stage n = after normalisation n
  std::vector<float> denom_;    // per normalisation: line sums + hc_eps
  std::vector<float> g_;        // running gradient of the backward
};

// ---------------------------------------------------------------------------------------------------------------
// The RMS-normed projection that hc_pre and hc_head share: flat = rms_norm(x), mixes = flat @ fn^T, gates from
// mixes * scale + base, collapse sum_h pre_h x_h.
// ---------------------------------------------------------------------------------------------------------------

template <typename S>
struct Projection {
  int64_t t, h, d, rows;  // tokens, streams, hidden, rows of fn (= number of mixes)
  const S* x;             // [T, H*D]
  const float* fn;        // [rows, H*D]
  const float* base;      // [rows]
  const float* scale;     // [number of gate groups]
  std::vector<int64_t> scale_of;  // gate group (index into scale) of each mix
  double rms_eps;
  int64_t n() const { return h * d; }
};

struct ProjectionGrads {
  float* fn;     // [rows, H*D]
  float* base;   // [rows]
  float* scale;  // [groups]
  int64_t groups;
};

// Backward of the shared part. g_logits[t, m] = d loss / d(mixes[t,m] * scale + base), the gate-specific part
// that the caller derived; g_collapsed is the upstream grad of the collapse and pre the saved gate.
template <typename S>
void projection_backward(const Projection<S>& p, const float* mixes, const float* pre, const S* g_collapsed,
                         std::vector<float> g_logits, S* grad_x, const ProjectionGrads& grads) {
  const int64_t n = p.n(), rows = p.rows;
  // grad_base = sum_t g_logits; grad_scale[g] = sum_t sum_{m in g} g_logits * mixes: serial over t, fixed order.
  std::vector<double> g_base(rows, 0.0), g_scale(grads.groups, 0.0);
  for (int64_t t = 0; t < p.t; ++t)
    for (int64_t m = 0; m < rows; ++m) {
      const float g = g_logits[t * rows + m];
      g_base[m] += g;
      g_scale[p.scale_of[m]] += double(g) * mixes[t * rows + m];
    }
  for (int64_t m = 0; m < rows; ++m) grads.base[m] = static_cast<float>(g_base[m]);
  for (int64_t g = 0; g < grads.groups; ++g) grads.scale[g] = static_cast<float>(g_scale[g]);
  // g_mixes = g_logits * scale (in place: g_logits is ours).
  std::vector<float>& g_mixes = g_logits;
  for (int64_t t = 0; t < p.t; ++t)
    for (int64_t m = 0; m < rows; ++m) g_mixes[t * rows + m] *= p.scale[p.scale_of[m]];

  std::vector<float> r(p.t);
  at::parallel_for(0, p.t, grain(2 * rows * n), [&](int64_t t0, int64_t t1) {
    std::vector<float> x(n), g_flat(n);
    for (int64_t t = t0; t < t1; ++t) {
      load_row(p.x + t * n, n, x.data());
      r[t] = rms_scale(x.data(), n, p.rms_eps);
      // g_flat = g_mixes @ fn.
      const float* gm = g_mixes.data() + t * rows;
      std::fill(g_flat.begin(), g_flat.end(), 0.f);
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t i = 0; i < n; ++i) g_flat[i] += gm[m] * p.fn[m * n + i];
      // RMS-norm backward: dx = r (g_flat - x r^2 <g_flat, x> / n).
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += double(g_flat[i]) * x[i];
      const float c = static_cast<float>(double(r[t]) * r[t] * dot / double(n));
      // + the collapse's pre_h g_collapsed, and the single rounding to the streams' dtype.
      const float* pr = pre + t * p.h;
      const S* gc = g_collapsed + t * p.d;
      S* gx = grad_x + t * n;
      for (int64_t s = 0; s < p.h; ++s)
        for (int64_t j = 0; j < p.d; ++j) {
          const int64_t i = s * p.d + j;
          gx[i] = S(r[t] * (g_flat[i] - x[i] * c) + pr[s] * static_cast<float>(gc[j]));
        }
    }
  });

  // grad_fn = g_mixes^T @ flat, flat = x r: threads split the H*D columns, each sums its columns over t in
  // order, so the result does not depend on the thread count.
  constexpr int64_t kColumns = 256;
  const int64_t blocks = (n + kColumns - 1) / kColumns;
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<double> acc(rows * kColumns);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kColumns, width = std::min(kColumns, n - i0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t t = 0; t < p.t; ++t) {
        const S* xt = p.x + t * n + i0;
        for (int64_t m = 0; m < rows; ++m) {
          const double coef = double(g_mixes[t * rows + m]) * r[t];
          double* a = acc.data() + m * kColumns;
          for (int64_t i = 0; i < width; ++i) a[i] += coef * static_cast<float>(xt[i]);
        }
      }
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t i = 0; i < width; ++i) grads.fn[m * n + i0 + i] = static_cast<float>(acc[m * kColumns + i]);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// hc_pre
// ---------------------------------------------------------------------------------------------------------------

// Gate groups of the (2+H)H mixes: pre_w -> scale[0], post_w -> scale[1], comb_w -> scale[2].
std::vector<int64_t> pre_groups(int64_t h) {
  std::vector<int64_t> g((2 + h) * h, 2);
  std::fill_n(g.begin(), 2 * h, 1);
  std::fill_n(g.begin(), h, 0);
  return g;
}

// Gate logit z = mix * scale + base, in the reference's order (multiply, then add).
template <typename S>
float logit(const Projection<S>& p, const float* mix, int64_t m) {
  return mix[m] * p.scale[p.scale_of[m]] + p.base[m];
}

struct PreOut {
  float *mixes, *pre, *post, *comb;
};

template <typename S>
void hc_pre_forward(const Constants& k, const Projection<S>& p, const PreOut& o, S* collapsed) {
  const int64_t h = p.h, n = p.n(), rows = p.rows;
  at::parallel_for(0, p.t, grain(rows * n), [&](int64_t t0, int64_t t1) {
    std::vector<float> x(n), logits(h * h);
    Sinkhorn sinkhorn(h, k.sinkhorn_iters, k.hc_eps);
    for (int64_t t = t0; t < t1; ++t) {
      load_row(p.x + t * n, n, x.data());
      // mixes = rms_norm(x) @ fn^T.
      float* mix = o.mixes + t * rows;
      project(x.data(), rms_scale(x.data(), n, p.rms_eps), p.fn, rows, n, mix);
      // pre = sigmoid(z) + hc_eps;  post = post_mult * sigmoid(z) (no eps).
      for (int64_t s = 0; s < h; ++s) {
        o.pre[t * h + s] = sigmoid(logit(p, mix, s)) + static_cast<float>(k.hc_eps);
        o.post[t * h + s] = static_cast<float>(k.post_mult) * sigmoid(logit(p, mix, h + s));
      }
      // comb = Sinkhorn(comb logits), logits row-major [i][j] = mixes[2H + i*H + j].
      for (int64_t m = 0; m < h * h; ++m) logits[m] = logit(p, mix, 2 * h + m);
      sinkhorn.forward(logits.data());
      std::copy_n(sinkhorn.result(), h * h, o.comb + t * h * h);
      // collapsed = sum_h pre_h x_h, one rounding.
      collapse(o.pre + t * h, x.data(), h, p.d, collapsed + t * p.d);
    }
  });
}

struct PreUpstream {
  const float *post, *comb;  // grads of post [T,H] and comb [T,H,H]
};

// The gate-specific part of the hc_pre backward: d loss / d logit for every mix of every token.
template <typename S>
std::vector<float> hc_pre_logit_grads(const Constants& k, const Projection<S>& p, const float* mixes,
                                      const PreUpstream& g, const S* g_collapsed) {
  const int64_t h = p.h, n = p.n(), rows = p.rows;
  std::vector<float> g_logits(p.t * rows);
  at::parallel_for(0, p.t, grain(h * n), [&](int64_t t0, int64_t t1) {
    std::vector<float> x(n), g_pre(h), logits(h * h);
    Sinkhorn sinkhorn(h, k.sinkhorn_iters, k.hc_eps);
    for (int64_t t = t0; t < t1; ++t) {
      const float* mix = mixes + t * rows;
      float* gl = g_logits.data() + t * rows;
      load_row(p.x + t * n, n, x.data());
      // pre: g_pre = <g_collapsed, x_h>, through the sigmoid.
      collapse_grad_pre(g_collapsed + t * p.d, x.data(), h, p.d, g_pre.data());
      for (int64_t s = 0; s < h; ++s) gl[s] = g_pre[s] * sigmoid_grad(logit(p, mix, s));
      // post = post_mult * sigmoid(z).
      for (int64_t s = 0; s < h; ++s)
        gl[h + s] = g.post[t * h + s] * static_cast<float>(k.post_mult) * sigmoid_grad(logit(p, mix, h + s));
      // comb: recompute the Sinkhorn from the saved mixes and walk it back.
      for (int64_t m = 0; m < h * h; ++m) logits[m] = logit(p, mix, 2 * h + m);
      sinkhorn.forward(logits.data());
      sinkhorn.backward(g.comb + t * h * h, gl + 2 * h);
    }
  });
  return g_logits;
}

// Inputs common to hc_pre and hc_head: streams and the projection parameters, checked and made contiguous.
struct ProjectionInputs {
  at::Tensor x, fn, base, scale;
  int64_t t;
};

ProjectionInputs projection_inputs(const Constants& k, const TensorMap& in, int64_t rows, int64_t groups,
                                   const std::string& where) {
  const at::Tensor x = need(in, "x", where);
  return {stream(in, "x", x.scalar_type(), where), fp32(in, "fn", rows * k.hc * k.hidden, where),
          fp32(in, "base", rows, where), fp32(in, "scale", groups, where),
          args::tokens(x, {k.hc, k.hidden}, "x", where)};
}

template <typename S>
Projection<S> projection(const Constants& k, const ProjectionInputs& pi, std::vector<int64_t> scale_of) {
  const int64_t rows = static_cast<int64_t>(scale_of.size());
  return {pi.t, k.hc, k.hidden, rows, pi.x.data_ptr<S>(), pi.fn.data_ptr<float>(), pi.base.data_ptr<float>(),
          pi.scale.data_ptr<float>(), std::move(scale_of), k.rms_eps};
}

void hc_pre_v1_forward(const OpContext& ctx, const TensorMap& in, TensorMap& out) {
  const std::string where = "hc_pre cpu:v1";
  const Constants k = constants(ctx);
  const int64_t h = k.hc, rows = (2 + h) * h;
  const ProjectionInputs pi = projection_inputs(k, in, rows, 3, where);
  with_stream_type(pi.x.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    const auto p = projection<S>(k, pi, pre_groups(h));
    const PreOut o{writable<float>(out, "mixes", p.t * rows, where), writable<float>(out, "pre", p.t * h, where),
                   writable<float>(out, "post", p.t * h, where), writable<float>(out, "comb", p.t * h * h, where)};
    hc_pre_forward(k, p, o, writable<S>(out, "collapsed", p.t * k.hidden, where));
  });
}

void hc_pre_v1_backward(const OpContext& ctx, const TensorMap& in, const TensorMap& fwd_out,
                        const TensorMap& grad_out, TensorMap& grads) {
  const std::string where = "hc_pre cpu:v1 backward";
  const Constants k = constants(ctx);
  const int64_t h = k.hc, rows = (2 + h) * h;
  const ProjectionInputs pi = projection_inputs(k, in, rows, 3, where);
  with_stream_type(pi.x.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    const auto p = projection<S>(k, pi, pre_groups(h));
    const at::Tensor mixes = fp32(fwd_out, "mixes", p.t * rows, where), pre = fp32(fwd_out, "pre", p.t * h, where);
    const at::Tensor g_post = fp32(grad_out, "post", p.t * h, where);
    const at::Tensor g_comb = fp32(grad_out, "comb", p.t * h * h, where);
    const at::Tensor g_collapsed = stream(grad_out, "collapsed", pi.x.scalar_type(), where);
    std::vector<float> g_logits = hc_pre_logit_grads(k, p, mixes.data_ptr<float>(),
                                                     {g_post.data_ptr<float>(), g_comb.data_ptr<float>()},
                                                     g_collapsed.data_ptr<S>());
    const ProjectionGrads pg{writable<float>(grads, "fn", rows * p.n(), where),
                             writable<float>(grads, "base", rows, where), writable<float>(grads, "scale", 3, where),
                             3};
    projection_backward(p, mixes.data_ptr<float>(), pre.data_ptr<float>(), g_collapsed.data_ptr<S>(),
                        std::move(g_logits), writable<S>(grads, "x", p.t * p.n(), where), pg);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// hc_head: hc_pre without post, comb and Sinkhorn (fn [H, H*D], one scale)
// ---------------------------------------------------------------------------------------------------------------

template <typename S>
void hc_head_forward(const Constants& k, const Projection<S>& p, float* mixes, float* pre, S* out) {
  const int64_t h = p.h, n = p.n();
  at::parallel_for(0, p.t, grain(h * n), [&](int64_t t0, int64_t t1) {
    std::vector<float> x(n);
    for (int64_t t = t0; t < t1; ++t) {
      load_row(p.x + t * n, n, x.data());
      // mixes = rms_norm(x) @ fn^T.
      float* mix = mixes + t * h;
      project(x.data(), rms_scale(x.data(), n, p.rms_eps), p.fn, h, n, mix);
      // pre = sigmoid(mixes * scale + base) + hc_eps.
      for (int64_t s = 0; s < h; ++s) pre[t * h + s] = sigmoid(logit(p, mix, s)) + static_cast<float>(k.hc_eps);
      // out = sum_h pre_h x_h, one rounding.
      collapse(pre + t * h, x.data(), h, p.d, out + t * p.d);
    }
  });
}

// d loss / d logit: g_pre = <g_out, x_h> through the sigmoid.
template <typename S>
std::vector<float> hc_head_logit_grads(const Projection<S>& p, const float* mixes, const S* g_out) {
  const int64_t h = p.h, n = p.n();
  std::vector<float> g_logits(p.t * h);
  at::parallel_for(0, p.t, grain(n), [&](int64_t t0, int64_t t1) {
    std::vector<float> x(n), g_pre(h);
    for (int64_t t = t0; t < t1; ++t) {
      load_row(p.x + t * n, n, x.data());
      collapse_grad_pre(g_out + t * p.d, x.data(), h, p.d, g_pre.data());
      for (int64_t s = 0; s < h; ++s) g_logits[t * h + s] = g_pre[s] * sigmoid_grad(logit(p, mixes + t * h, s));
    }
  });
  return g_logits;
}

void hc_head_v1_forward(const OpContext& ctx, const TensorMap& in, TensorMap& out) {
  const std::string where = "hc_head cpu:v1";
  const Constants k = constants(ctx);
  const int64_t h = k.hc;
  const ProjectionInputs pi = projection_inputs(k, in, h, 1, where);
  with_stream_type(pi.x.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    const auto p = projection<S>(k, pi, std::vector<int64_t>(h, 0));
    hc_head_forward(k, p, writable<float>(out, "mixes", p.t * h, where), writable<float>(out, "pre", p.t * h, where),
                    writable<S>(out, "out", p.t * k.hidden, where));
  });
}

void hc_head_v1_backward(const OpContext& ctx, const TensorMap& in, const TensorMap& fwd_out,
                         const TensorMap& grad_out, TensorMap& grads) {
  const std::string where = "hc_head cpu:v1 backward";
  const Constants k = constants(ctx);
  const int64_t h = k.hc;
  const ProjectionInputs pi = projection_inputs(k, in, h, 1, where);
  with_stream_type(pi.x.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    const auto p = projection<S>(k, pi, std::vector<int64_t>(h, 0));
    const at::Tensor mixes = fp32(fwd_out, "mixes", p.t * h, where), pre = fp32(fwd_out, "pre", p.t * h, where);
    const at::Tensor g_out = stream(grad_out, "out", pi.x.scalar_type(), where);
    const ProjectionGrads pg{writable<float>(grads, "fn", h * p.n(), where), writable<float>(grads, "base", h, where),
                             writable<float>(grads, "scale", 1, where), 1};
    projection_backward(p, mixes.data_ptr<float>(), pre.data_ptr<float>(), g_out.data_ptr<S>(),
                        hc_head_logit_grads(p, mixes.data_ptr<float>(), g_out.data_ptr<S>()),
                        writable<S>(grads, "x", p.t * p.n(), where), pg);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// hc_post: out[k] = post_k x + sum_j comb[j,k] residual[j]  (comb TRANSPOSED: the sum runs over its first index)
// ---------------------------------------------------------------------------------------------------------------

template <typename S>
struct PostProblem {
  int64_t t, h, d;
  const S* x;         // [T, D]
  const S* residual;  // [T, H, D]
  const float* post;  // [T, H]
  const float* comb;  // [T, H, H]
};

struct PostInputs {
  at::Tensor x, residual, post, comb;
  int64_t t;
};

PostInputs post_inputs(const Constants& k, const TensorMap& in, const std::string& where) {
  const at::Tensor residual = need(in, "residual", where);
  const int64_t t = args::tokens(residual, {k.hc, k.hidden}, "residual", where);
  const at::Tensor x = need(in, "x", where);
  if (args::tokens(x, {k.hidden}, "x", where) != t)
    throw InputError(
        fmt::format("{}: x {} and residual {} disagree on tokens", where, describe(x), describe(residual)));
  const at::ScalarType dtype = residual.scalar_type();
  return {stream(in, "x", dtype, where), stream(in, "residual", dtype, where), fp32(in, "post", t * k.hc, where),
          fp32(in, "comb", t * k.hc * k.hc, where), t};
}

template <typename S>
PostProblem<S> post_problem(const Constants& k, const PostInputs& pi) {
  return {pi.t, k.hc, k.hidden, pi.x.data_ptr<S>(), pi.residual.data_ptr<S>(), pi.post.data_ptr<float>(),
          pi.comb.data_ptr<float>()};
}

template <typename S>
void hc_post_forward(const PostProblem<S>& p, S* out) {
  const int64_t h = p.h, d = p.d;
  at::parallel_for(0, p.t, grain(h * h * d), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const S* x = p.x + t * d;
      const S* res = p.residual + t * h * d;
      const float* comb = p.comb + t * h * h;
      for (int64_t k = 0; k < h; ++k) {
        const float post = p.post[t * h + k];
        S* o = out + (t * h + k) * d;
        for (int64_t j = 0; j < d; ++j) {
          // post_k x + sum_j comb[j,k] residual_j, fp32, then the one rounding.
          float acc = post * static_cast<float>(x[j]);
          for (int64_t i = 0; i < h; ++i) acc += comb[i * h + k] * static_cast<float>(res[i * d + j]);
          o[j] = S(acc);
        }
      }
    }
  });
}

// HF's eager hc_post rounds post, comb, post*x, the mix and the sum to bf16. The mix is LibTorch's CPU bf16
// matmul: oneDNN's bf16 GEMM on x86 with AVX-512 (native or emulated), whose dot-product step (VDPBF16PS) adds
// each PAIR of K terms odd-then-even into an fp32 accumulator: acc += p1; acc += p0; acc += p3; acc += p2 ...
// Products of two bf16 are exact in fp32, so that order is the only freedom and is reproduced here. Where
// LibTorch instead runs its own fp32 loop in index order (x86 without AVX-512, oneDNN disabled), about one
// element in a million differs by 1 bf16 ULP. (VDPBF16PS also flushes denormals, which is not reproduced: the
// products would have to be below 1e-38.)
void hc_post_hf_bf16(const PostProblem<c10::BFloat16>& p, c10::BFloat16* out) {
  using bf16 = c10::BFloat16;
  const int64_t h = p.h, d = p.d;
  at::parallel_for(0, p.t, grain(h * h * d), [&](int64_t t0, int64_t t1) {
    std::vector<float> post(h), comb(h * h);
    for (int64_t t = t0; t < t1; ++t) {
      // post.to(bf16), comb.to(bf16).
      for (int64_t k = 0; k < h; ++k) post[k] = static_cast<float>(bf16(p.post[t * h + k]));
      for (int64_t i = 0; i < h * h; ++i) comb[i] = static_cast<float>(bf16(p.comb[t * h * h + i]));
      const bf16* x = p.x + t * d;
      const bf16* res = p.residual + t * h * d;
      for (int64_t k = 0; k < h; ++k) {
        bf16* o = out + (t * h + k) * d;
        for (int64_t j = 0; j < d; ++j) {
          // a = bf16(post_k * x): the product is exact in fp32, one rounding.
          const float a = static_cast<float>(bf16(post[k] * static_cast<float>(x[j])));
          // m = bf16(sum_i comb[i,k] residual_i), pairs odd-then-even as oneDNN does.
          float acc = 0;
          for (int64_t i = 0; i < h; i += 2) {
            if (i + 1 < h) acc += comb[(i + 1) * h + k] * static_cast<float>(res[(i + 1) * d + j]);
            acc += comb[i * h + k] * static_cast<float>(res[i * d + j]);
          }
          const float m = static_cast<float>(bf16(acc));
          // out = bf16(a + m).
          o[j] = bf16(a + m);
        }
      }
    }
  });
}

template <typename S>
void hc_post_backward(const PostProblem<S>& p, const S* g_out, S* grad_x, S* grad_res, float* grad_post,
                      float* grad_comb) {
  const int64_t h = p.h, d = p.d;
  at::parallel_for(0, p.t, grain(4 * h * h * d), [&](int64_t t0, int64_t t1) {
    std::vector<double> g_post(h), g_comb(h * h);
    for (int64_t t = t0; t < t1; ++t) {
      const S* x = p.x + t * d;
      const S* res = p.residual + t * h * d;
      const S* g = g_out + t * h * d;
      const float* post = p.post + t * h;
      const float* comb = p.comb + t * h * h;
      std::fill(g_post.begin(), g_post.end(), 0.0);
      std::fill(g_comb.begin(), g_comb.end(), 0.0);
      for (int64_t j = 0; j < d; ++j) {
        // grad_x = sum_k post_k g_k, one rounding.
        float gx = 0;
        for (int64_t k = 0; k < h; ++k) gx += post[k] * static_cast<float>(g[k * d + j]);
        grad_x[t * d + j] = S(gx);
        for (int64_t i = 0; i < h; ++i) {
          // grad_residual_i = sum_k comb[i,k] g_k (comb untransposed here), one rounding.
          float gr = 0;
          for (int64_t k = 0; k < h; ++k) gr += comb[i * h + k] * static_cast<float>(g[k * d + j]);
          grad_res[(t * h + i) * d + j] = S(gr);
        }
        // grad_post_k = sum_d x g_k;  grad_comb[i,k] = sum_d residual_i g_k.
        for (int64_t k = 0; k < h; ++k) {
          const double gk = static_cast<float>(g[k * d + j]);
          g_post[k] += gk * static_cast<float>(x[j]);
          for (int64_t i = 0; i < h; ++i) g_comb[i * h + k] += gk * static_cast<float>(res[i * d + j]);
        }
      }
      for (int64_t k = 0; k < h; ++k) grad_post[t * h + k] = static_cast<float>(g_post[k]);
      for (int64_t i = 0; i < h * h; ++i) grad_comb[t * h * h + i] = static_cast<float>(g_comb[i]);
    }
  });
}

void hc_post_v1_forward(const OpContext& ctx, const TensorMap& in, TensorMap& out) {
  const std::string where = "hc_post cpu:v1";
  const Constants k = constants(ctx);
  const PostInputs pi = post_inputs(k, in, where);
  with_stream_type(pi.residual.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    hc_post_forward(post_problem<S>(k, pi), writable<S>(out, "out", pi.residual.numel(), where));
  });
}

void hc_post_hf_forward(const OpContext& ctx, const TensorMap& in, TensorMap& out) {
  const std::string where = "hc_post cpu:hf";
  const Constants k = constants(ctx);
  const PostInputs pi = post_inputs(k, in, where);
  with_stream_type(pi.residual.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    S* o = writable<S>(out, "out", pi.residual.numel(), where);
    // fp32 streams: HF's casts are no-ops, so its roundings are fp32 ones; v1's FMA chain, which sums post*x and the
    // mix in one order where HF adds the mix's own sum last, is within a few fp32 roundings of it (no case claims
    // fp32 bitwise parity with HF for hc_post: hc_post/hf_tiny_fp32 holds cpu:hf to naive_relative).
    if constexpr (std::is_same_v<S, float>)
      hc_post_forward(post_problem<S>(k, pi), o);
    else
      hc_post_hf_bf16(post_problem<S>(k, pi), o);
  });
}

void hc_post_v1_backward(const OpContext& ctx, const TensorMap& in, const TensorMap& fwd_out,
                         const TensorMap& grad_out, TensorMap& grads) {
  const std::string where = "hc_post backward";
  const Constants k = constants(ctx);
  const PostInputs pi = post_inputs(k, in, where);
  with_stream_type(pi.residual.scalar_type(), where, [&](auto s) {
    using S = decltype(s);
    const auto p = post_problem<S>(k, pi);
    const at::Tensor g = stream(grad_out, "out", pi.residual.scalar_type(), where);
    if (g.numel() != pi.residual.numel())
      throw InputError(fmt::format("{}: grad of 'out' is {}, expected residual's shape", where, describe(g)));
    hc_post_backward(p, g.data_ptr<S>(), writable<S>(grads, "x", pi.x.numel(), where),
                     writable<S>(grads, "residual", pi.residual.numel(), where),
                     writable<float>(grads, "post", p.t * p.h, where),
                     writable<float>(grads, "comb", p.t * p.h * p.h, where));
  });
}

Variant cpu_variant(std::string id, std::string op, std::string description,
                    decltype(Variant::forward) forward, decltype(Variant::backward) backward) {
  return Variant{.id = std::move(id),
                 .op = std::move(op),
                 .device = at::kCPU,
                 .description = std::move(description),
                 .deterministic = true,
                 .constants = {},
                 .forward = std::move(forward),
                 .backward = std::move(backward)};
}

}  // namespace

void register_hc_cpu(Registry& reg) {
  const std::string v1 = "fp32 loops (fp64 sums over D, H*D, T), one rounding to the streams' dtype";
  reg.add(cpu_variant("cpu:v1", "hc_pre", v1 + "; Sinkhorn backward by per-token recompute", hc_pre_v1_forward,
                      hc_pre_v1_backward));
  reg.add(cpu_variant("cpu:v1", "hc_post", v1, hc_post_v1_forward, hc_post_v1_backward));
  reg.add(cpu_variant("cpu:v1", "hc_head", v1, hc_head_v1_forward, hc_head_v1_backward));
  reg.add(cpu_variant("cpu:hf", "hc_post",
                      "HF's roundings (post, comb, post*x, mix, sum in bf16), oneDNN's pairwise mix order; "
                      "backward = cpu:v1",
                      hc_post_hf_forward, hc_post_v1_backward));
}

}  // namespace parity::hc
