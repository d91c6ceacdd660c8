// Hyper-connections (mHC), DeepSeek-V4: names shared by the reference, both fast paths, case files and goldens.
//
// Streams X [T, H, D] (T tokens, H = hc_mult streams, D = hidden); any leading dims are accepted where T is.
//   hc_pre(x, fn[(2+H)H, HD], base[(2+H)H], scale[3])
//     flat  = x.flatten * rsqrt(mean(x^2) + rms_eps)                          (fp32)
//     mixes = flat @ fn^T                                       -> pre_w [H] | post_w [H] | comb_w [H*H]
//     pre   = sigmoid(pre_w*s0 + base[:H]) + hc_eps
//     post  = post_mult * sigmoid(post_w*s1 + base[H:2H])                    (post_mult = 2, no eps)
//     comb  = softmax_row(comb_w*s2 + base[2H:]) + hc_eps; comb /= colsum + hc_eps;
//             (iters-1) x { comb /= rowsum + hc_eps; comb /= colsum + hc_eps }
//     collapsed = sum_h pre_h x_h                                            (fp32, one rounding to x's dtype)
//   hc_post(x [T,D], residual [T,H,D], post [T,H], comb [T,H,H])
//     out[k] = post_k x + sum_j comb[j,k] residual[j]          (comb^T @ residual: the sum runs over the FIRST index)
//   hc_head(x, fn [H, HD], base [H], scale [1])
//     pre = sigmoid((flat @ fn^T) * scale + base) + hc_eps;  out = sum_h pre_h x_h
// Source: transformers 5.17.0 modeling_deepseek_v4.py, DeepseekV4HyperConnection (M:867-943), DeepseekV4HyperHead
// (M:946-962), DeepseekV4DecoderLayer.forward (M:1133-1144); spec hf-deepseek-v4.md section 8.
#pragma once
#include <parity/op.hpp>

namespace parity::hc {

// Case constants (cases/hc.toml [constants]).
inline constexpr const char* kHcEps = "hc_eps";
inline constexpr const char* kRmsEps = "rms_eps";
inline constexpr const char* kSinkhornIters = "sinkhorn_iters";
inline constexpr const char* kPostMult = "post_mult";
// Case dims.
inline constexpr const char* kTokens = "tokens";
inline constexpr const char* kHc = "hc";
inline constexpr const char* kHidden = "hidden";

struct Constants {
  int64_t hc, hidden, sinkhorn_iters;
  double hc_eps, rms_eps, post_mult;
};
Constants constants(const OpContext& ctx);

// The reference compositions (differentiable, LibTorch), exposed for tests and benchmarks.
TensorMap hc_pre_ref(const Constants& k, const TensorMap& in);
TensorMap hc_post_ref(const Constants& k, const TensorMap& in);
TensorMap hc_head_ref(const Constants& k, const TensorMap& in);

}  // namespace parity::hc

namespace parity::hc {
// Registration (harness/src/families.cpp calls these): the Ops, then the CPU and CUDA variants.
void register_hc_reference(Registry& reg);
void register_hc_cpu(Registry& reg);
void register_hc_cuda(Registry& reg);
}  // namespace parity::hc
