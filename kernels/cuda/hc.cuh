// Hyper-connection (mHC) CUDA kernels: launchers over raw device pointers (math and names: references/hc.hpp).
// No LibTorch here, so the nvcc translation unit stays light; kernels/cuda/hc.cpp is the LibTorch bridge.
//
// Every launcher starts exactly ONE kernel on `stream` (none when there is no work), so the bridge can check
// cudaGetLastError after each one and name the kernel that failed. Layouts are contiguous row-major:
//   streams x / residual / grads [T, H, D]; hc_post x [T, D]; post / pre [T, H]; comb [T, H, H] (comb[t][j][k]);
//   mixes [T, M] with M = (2+H)H for hc_pre and H for hc_head; fn [M, H*D]; base [M]; scale [3] or [1].
// Streams are bf16 or fp32; everything else is fp32. 1 <= hc <= kMaxHc; any hidden (16-byte vector paths when
// hidden % 8 == 0 and the pointers are 16-byte aligned, an element-wise path otherwise).
// Nothing here uses atomics: every sum is taken in a fixed order, so every launcher is bitwise deterministic for a
// given device and shape.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace parity::hc::cuda {

inline constexpr int kMaxHc = 4;        // register arrays are sized for H <= 4 (V4 uses 4)
inline constexpr int kMaxSinkhornIters = 1 << 12;

enum class Dtype : int { bf16, fp32 };  // the streams' dtype
enum class MixKind : int { pre, head };

struct MixConsts {
  float hc_eps, rms_eps, post_mult;
  int sinkhorn_iters;  // hc_pre only
};

// ---- shapes of the workspaces the mix backward needs (the bridge allocates them) ----------------------------------
int mix_rows(MixKind kind, int hc);          // M: rows of fn, columns of mixes
int mix_scale_count(MixKind kind);           // entries of scale: 3 (pre) or 1 (head)
// floats of `coef`: a row per token (r g_mixes, c, pre_h), then, for hc_pre, the same mixes' coefficients split into
// bf16 terms in the tensor-core kernel's fragment order (launch_mix_bwd_token writes both)
int64_t mix_coef_floats(MixKind kind, int64_t tokens);
int mix_gate_width(MixKind kind);            // doubles per token in `gate_grads` (gate logit grads, then scale terms)
int64_t sinkhorn_hist_floats(int64_t tokens, int hc, int iters);  // hc_pre backward's Sinkhorn workspace
// Token splits of the grad_fn partials (depends on which dx_dfn kernel takes the shape).
int mix_bwd_splits(MixKind kind, Dtype dt, int64_t tokens, int hc, int64_t hidden, int sm_count);

// ---- hc_post -------------------------------------------------------------------------------------------------------
// out[t,k,:] = post[t,k] x[t,:] + sum_j comb[t,j,k] residual[t,j,:]
//   hf = false (cuda:v1): fp32 multiply-adds, one rounding to the stream dtype.
//   hf = true  (cuda:hf): rounds where HF rounds: bf16(post), bf16(comb), bf16(post*x), bf16(fp32 sum_j), bf16(add).
void launch_hc_post_fwd(Dtype dt, bool hf, const void* x, const void* residual, const float* post, const float* comb,
                        void* out, int64_t tokens, int hc, int64_t hidden, cudaStream_t stream);
// grad_x = sum_k post_k g_k; grad_residual_j = sum_k comb[j,k] g_k (one rounding each);
// grad_post_k = <x, g_k>, grad_comb[j,k] = <residual_j, g_k> (fp32).
void launch_hc_post_bwd(Dtype dt, const void* grad_out, const void* x, const void* residual, const float* post,
                        const float* comb, void* grad_x, void* grad_residual, float* grad_post, float* grad_comb,
                        int64_t tokens, int hc, int64_t hidden, cudaStream_t stream);

// ---- hc_pre / hc_head forward: fn_transpose -> mix_fwd -> collapse ------------------------------------------------
// fnT [H*D, MP] = fn^T, zero-padded to the kind's register width MP (a workspace of mix_fnT_floats floats).
int64_t mix_fnT_floats(MixKind kind, int hc, int64_t hidden);
void launch_mix_fn_transpose(MixKind kind, const float* fn, float* fnT, int hc, int64_t hidden, cudaStream_t stream);
// mixes = rms_norm(x) @ fn^T (fp32, no tensor cores), then the gates: pre (both kinds), post and comb (pre only;
// pass nullptr for head).
void launch_mix_fwd(MixKind kind, Dtype dt, const void* x, const float* fnT, const float* base, const float* scale,
                    float* mixes, float* pre, float* post, float* comb, int64_t tokens, int hc, int64_t hidden,
                    MixConsts k, cudaStream_t stream);
// y[t,:] = sum_h pre[t,h] x[t,h,:]  (fp32, one rounding): hc_pre's collapsed and hc_head's out.
void launch_collapse(Dtype dt, const void* x, const float* pre, void* y, int64_t tokens, int hc, int64_t hidden,
                     cudaStream_t stream);

// ---- hc_pre / hc_head fused forward: mix_fused_fwd (-> mix_post_comb for hc_pre) -------------------------------
// x read once: mixes on the tensor cores (fn split exactly into three bf16 terms; fp64 sums across warps and CTAs),
// pre, and y = sum_h pre[t,h] x[t,h,:] as launch_collapse computes it. Fits bf16 streams, hc 4, hidden 2048 or
// 4096, 16-byte aligned x and y, 8-byte aligned fn, on a device that runs clusters of 16 CTAs (Hopper); elsewhere the caller runs
// fn_transpose -> mix_fwd -> collapse.
bool mix_fused_fwd_fits(MixKind kind, Dtype dt, const void* x, const float* fn, const void* y, int hc,
                        int64_t hidden);
// Clusters of 16 CTAs the fused forward keeps resident on the current device (its persistent grid; 0: none fit).
int mix_fused_fwd_clusters(MixKind kind, int64_t hidden);
void launch_mix_fused_fwd(MixKind kind, const void* x, const float* fn, const float* base, const float* scale,
                          float* mixes, float* pre, void* y, int64_t tokens, int hc, int64_t hidden, MixConsts k,
                          cudaStream_t stream);
// hc_pre's post and comb (the Sinkhorn) from its mixes: at hc 4 four threads per token, a line of the matrix each,
// unless one_thread_per_token (else, and below hc 4, always one). Both give the same bits (HcPostComb's test).
void launch_mix_post_comb(const float* mixes, const float* base, const float* scale, float* post, float* comb,
                          int64_t tokens, int hc, MixConsts k, cudaStream_t stream, bool one_thread_per_token = false);

// ---- hc_pre / hc_head backward in one pass over x: [comb_bwd ->] mix_fused_bwd -> mix_bwd_sums ----------------------
// What reduce -> token -> dx_dfn compute (gate_grads rows as theirs; grad_x by the same expressions), with x and
// grad_y read once: clusters of 8 (hc_head) or 16 (hc_pre) CTAs hold a tile of as many tokens. partial:
// [mix_fused_bwd_splits, M, H*D], for launch_mix_bwd_sums. Fits bf16 streams, hc 4, hidden 2048 or 4096 (hc_head) or
// 4096 (hc_pre), 16-byte aligned x, grad_y and grad_x, on a device that runs such clusters (Hopper); elsewhere the
// two-pass kernels below.
// hc_pre: launch_mix_comb_bwd first (the Sinkhorn backward into gate_grads' comb entries, which the fused kernel reads
// back), and grad_post; hc_head: grad_post null.
bool mix_fused_bwd_fits(MixKind kind, Dtype dt, const void* x, const void* grad_y, const void* grad_x, int hc,
                        int64_t hidden);
int mix_fused_bwd_splits(MixKind kind, int64_t tokens, int64_t hidden);
void launch_mix_comb_bwd(const float* mixes, const float* grad_comb, const float* base, const float* scale,
                         double* gate_grads, float* hist, int64_t tokens, int hc, MixConsts k, cudaStream_t stream);
void launch_mix_fused_bwd(MixKind kind, const void* x, const void* grad_y, const float* mixes, const float* grad_post,
                          const float* fn, const float* base, const float* scale, double* gate_grads, void* grad_x,
                          float* partial, int64_t tokens, int hc, int64_t hidden, MixConsts k, cudaStream_t stream);

// ---- hc_pre / hc_head backward: reduce -> token -> dx_dfn (with sum_splits + colsum) -----------------------------
// red[t] = { sum x^2, <grad_y, x_h> for h < H }   (red: [T, 1+H], fp64); hc_pre also the Sinkhorn backward, which
// needs no x: d loss / d comb logits into gate_grads[t]'s comb entries (the forward recomputed, its history in
// `hist`). mixes, grad_comb, base, scale, gate_grads, hist and k: hc_pre only (head: null).
void launch_mix_bwd_reduce(MixKind kind, Dtype dt, const void* x, const void* grad_y, double* red, const float* mixes,
                           const float* grad_comb, const float* base, const float* scale, double* gate_grads,
                           float* hist, int64_t tokens, int hc, int64_t hidden, MixConsts k, cudaStream_t stream);
// Per token (one thread each), after launch_mix_bwd_reduce: the gate backward (sigmoids), giving coef row t = {
// r*g_mixes (padded), c = r^2/(HD) <g_mixes, mixes>, pre_h } (and hc_pre's terms of it, see mix_coef_floats) and
// gate_grads[t] = { d loss/d logit (padded), per-scale terms }.
// grad_post: hc_pre only (whose coef is 16-byte aligned). Also zeroes arrivals[0, mix_bwd_arrivals(hidden)) for
// launch_mix_bwd_dx_dfn (null: none).
void launch_mix_bwd_token(MixKind kind, const float* mixes, const double* red, const float* grad_post,
                          const float* base, const float* scale, float* coef, double* gate_grads, unsigned* arrivals,
                          int64_t tokens, int hc, int64_t hidden, MixConsts k, cudaStream_t stream);
// The counters launch_mix_bwd_dx_dfn's tensor-core kernel needs (one per 64 hidden positions).
int64_t mix_bwd_arrivals(int64_t hidden);
// What follows dx_dfn: grad_fn = the splits' partials summed, grad_base and grad_scale = gate_grads' column sums
// (launch_mix_bwd_sums). arrivals: mix_bwd_arrivals counters, zero on entry
// (launch_mix_bwd_token) and left zero; null: the sums run in a launch of their own (launch_mix_bwd_sums).
struct MixBwdSums {
  float* grad_fn;
  const double* gate_grads;
  float* grad_base;
  float* grad_scale;
  unsigned* arrivals;
};
// grad_x = r (g_mixes @ fn) - c x + pre_h grad_y (one rounding); partial[s] = sum over split s of (r g_mixes)^T x.
// coef: as launch_mix_bwd_token wrote it (mix_coef_floats: hc_pre's tensor-core kernel reads the terms after the rows).
// partial: [splits, M, H*D]. Launches even when tokens == 0 (the partials are then zeros). Then `sums`, in the same
// launch where the tensor-core kernel runs (hc_pre, bf16, hidden a multiple of 64), else in launches of their own.
void launch_mix_bwd_dx_dfn(MixKind kind, Dtype dt, const void* x, const void* grad_y, const float* coef,
                           const float* fn, void* grad_x, float* partial, int64_t tokens, int hc, int64_t hidden,
                           int splits, const MixBwdSums& sums, cudaStream_t stream);
// The sums of a backward whose kernels leave them to a launch of their own (after launch_mix_fused_bwd;
// launch_mix_bwd_dx_dfn calls it itself where its kernel does not fold them in), in one launch:
// grad_fn[i] = sum_{s < splits} partial[s * n + i], s in order (n = M * hc * hidden); grad_base[m] = gate_grads'
// column m (m < M) and grad_scale[g] = its column gate_scale_col + g (g < scale count), each summed in a fixed order.
// arrivals: unused.
void launch_mix_bwd_sums(MixKind kind, const float* partial, int splits, const MixBwdSums& sums, int64_t tokens, int hc,
                         int64_t hidden, cudaStream_t stream);

// The Sinkhorn's division of lines by their sums (divide_lines() in hc.cu), exposed for its test:
// quotients[4 i + k] = numerators[4 i + k] / denominators[i], k < 4, i < lines (a multiple of 4: a thread divides
// 4 lines under one range check, as a normalisation of the 4 x 4 matrix does).
void launch_sinkhorn_divide(const float* numerators, const float* denominators, float* quotients, int64_t lines,
                            cudaStream_t stream);

}  // namespace parity::hc::cuda
