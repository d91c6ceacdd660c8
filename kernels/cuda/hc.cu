/*
Hyper-connection (mHC) kernels of DeepSeek-V4: hc_post, hc_pre, hc_head, forward and backward (math: references/hc.hpp).

Kernels (each launched by exactly one launcher of hc.cuh); registers / shared memory for the bf16, 16-byte-vector,
H = 4 instantiation (ptxas, sm_90a):
  hc_post_fwd<HF=0>   cuda:v1  out = post*x + comb^T residual: fp32 FMA chain, one rounding.   warp/token   94 reg
  hc_post_fwd<HF=1>   cuda:hf  rounds where HF rounds: bf16(post), bf16(comb), bf16(post*x),
                               bf16(fp32 sum_j c r, j in order), bf16(add).                    warp/token  100 reg
  hc_post_bwd                  grad_x, grad_residual (one rounding), grad_post, grad_comb
                               (fp32 per-lane partials + butterfly).                           warp/token  128 reg*
  mix_fn_transpose             fnT = fn^T zero-padded to the register width MP (24 pre, 4 head)             20 reg
  mix_fwd<Pre|Head>            x @ fn^T for a CTA tile of 128 tokens: fp32 FFMA from shared memory (no
                               tensor cores: HF computes mixes in true fp32), 3-stage cp.async pipeline,
                               split-K over warps, sum of squares on the way; then per token: rms scale,
                               sigmoids, Sinkhorn (hc_pre).                          163 / 72 reg, 102 / 54 KB dyn smem
  collapse                     y = sum_h pre_h x_h in fp32, one rounding                       warp/token   44 reg
  mix_fused_fwd<Pre|Head>      forward in one pass over x (bf16, hc 4, hidden 2048/4096, Hopper): mixes
                               on the tensor cores (fn split exactly into 3 bf16 terms), pre, collapse; a
                               cluster of 16 CTAs per tile of 16 tokens, x by TMA, fp64 cross-warp/CTA
                               sums, st.async between CTAs                               128 / 88 reg, 225 KB smem
  mix_post_comb<H>             post and comb (Sinkhorn) from the mixes, after mix_fused_fwd    thread/token 47 reg
  mix_post_comb_quad           the same at hc 4, a thread per line, shuffles transposing    4 threads/token 30 reg
  mix_bwd_reduce<H>            per token: sum x^2 and g_pre_h = <g_y, x_h> (fp64 sums); hc_pre: its first
                               blocks run the Sinkhorn backward meanwhile (forward recomputed; its divisions
                               share a reciprocal per line: divide_lines; at hc 4 by quads from checkpoints,
                               comb_backward_quad)           warp/token, Sinkhorn 4 threads/token 76 reg
  mix_bwd_token<Pre|Head, H>   per token: sigmoid backward -> coefficients of the linear+norm backward;
                               hc_pre: and their bf16 terms in dx_dfn_mma's fragment order
                                                                         thread/token 44 reg, 18 KB smem
  mix_bwd_dx_dfn               grad_x = r g_mix @ fn - c x + pre_h g_y (one rounding) and per-split
                               grad_fn partials (r g_mix)^T x; a thread owns 2 columns of fn
                                                                 pre 168 reg (80-byte spill) / head 146, 2 KB smem
  mix_bwd_dx_dfn_mma           the same for hc_pre with bf16 streams and hidden % 64 == 0, both products on
                               mma.sync (coef, split by the token kernel, and fn in bf16 terms); a CTA owns
                               64 hidden positions of all streams, tiles of 16 tokens (and their coefficient
                               terms) through a 4-stage ring filled by TMA         128 reg, 64 KB dyn smem
  mix_comb_bwd<H>              hc_pre's Sinkhorn backward alone (PreKind::comb_backward; at hc 4
                               comb_backward_quad), before mix_fused_bwd_mma         4 threads/token 66 reg
  mix_fused_bwd_mma            hc_pre's backward in one pass (hidden 4096): mix_fused_bwd's cluster with
                               dx_dfn_mma's products; 16 compute warps at 104 registers and a fifth warpgroup
                               (the finisher) at 64 (setmaxnreg); correct but slower than the two passes, so
                               the bridge does not take it yet                          96 reg at launch, 225 KB smem
  mix_fused_bwd<Head>          hc_head's backward in one pass over x (bf16, hc 4, hidden 2048/4096, Hopper):
                               a cluster of 8 CTAs per tile of 8 tokens, x and g_y by TMA; each row's
                               sums (fp64) by st.async to the token's CTA, whose finisher warp runs the gate
                               backward (a lane per stream) and sends the coefficient row to every CTA;
                               grad_x and the grad_fn sums as mix_bwd_dx_dfn                 168 reg, 204 KB smem
  mix_bwd_sums                 fixed-order second reductions (grad_fn's splits; grad_base, grad_scale)
  (* hc_post_bwd is capped at 128 registers and spills 28 bytes: faster, see the kernel.)

Numerics: every sum is fp32 in a fixed order, with no atomics, so each launch is bitwise deterministic for a given
device and shape. Streams are bf16 or fp32; H (hc) is a run-time value <= kMaxHc: register arrays are sized for
kMaxHc and loops over them are unrolled with a run-time guard, so no array is indexed at run time.
cuda:hf vs LibTorch: its bf16 matmul (cuBLAS) does not sum the H products of the mix in sequential fp32, so the
output differs from the LibTorch CUDA composition in ~1 element per million by 1 bf16 ULP (H100, measured: 2 of
1.2M, 5 of 4.2M, 22 of 33.5M elements). Probing cuBLAS on random inputs, "exact sum, then fp32 round-toward-zero"
came closest (8-9 of 33-67M) but not exact, so cuda:hf keeps the contract's sequential fp32 sum.

Speed, H100 80GB HBM3, T = 16384, H = 4, D = 4096, bf16 (bench/hc_cuda_timing.cu; copy = 2.99 TB/s read+write;
percentages are one-pass bytes over time, against the copy rate):
  hc_post fwd v1 0.425 ms (95%), hf 0.434 ms (93%), bwd 0.729 ms (87%)
  hc_pre  fwd 0.658 ms (34%: mix_fused_fwd, x read once; it was 0.712 ms = mix_fwd 0.486 FFMA-bound + collapse 0.232);
          0.556 ms (40%) with the Sinkhorn of mix_post_comb on divide_lines (0.579 before, A/B as below); 0.456 ms
          (49.5%) with x by TMA and A fragments by ldmatrix (bench/hc_ab.sh, 3 runs each); 0.348 ms (65%) with the
          cluster's data by st.async and no barrier at the top of a tile (`parity run --perf`: 0.339 ms, 66%); the
          cross-warp sums unrolled 0.327 ms (69%); mix_post_comb's range check as a tree 0.0193 -> 0.0163 ms and the
          collapse on 256 threads: 0.314 ms (72%; bench/hc_ab.sh, 3 runs each, same bits; `parity run --perf`
          0.311 ms, 72.5%); mix_post_comb on four threads a token 0.0174 -> 0.0145 ms: 0.313 ms (`parity run
          --perf` 0.308 ms, 72.9%); mix_post_comb as a programmatic dependent launch and the first x tiles issued
          before fn loads: 0.3143 -> 0.3067 ms (`parity run --perf` 0.3096 ms, 72.6%, against 0.311 in run24);
          hc_pre's collapse a tile later 0.3081 -> 0.3058 ms (`parity run --perf` 0.3029 ms, 74.2%); mix_post_comb's
          range check on raw bits and blocks of 512 threads, post_comb 0.0138 -> 0.0123 ms (`parity run --perf`
          0.2997 ms, 75.1%, in one run: run27; the same code 0.3029 ms in run28 and 0.3071, 0.3028, 0.3059, 0.3033
          ms in run29 and its repeats: 73.2-74.2%, so 75% is not held); fn's loads before the ring's tiles and a
          relaxed start barrier (the loop began at 14 us, now 4.3): 0.3224 -> 0.3127 ms hot (3 alternating runs, the
          same bits; `parity run --perf`, cold, 0.3018 ms, 74.4%: run30); the last collapses but one on every warp
          but the finisher (480 threads, 256 before): 0.3026 -> 0.3011 ms hot (medians of 6 alternating runs, the
          same bits; `parity run --perf` 0.2994 ms, 75.1%: run31, and 74.5-75.6% in three repeats); mix_post_comb's
          range check once after the Sinkhorn, post_comb 0.0121 -> 0.0114 ms (`parity run --perf` 0.2952-0.2979 ms,
          75.1-75.8%, three runs on one machine); the summing and finisher warps' fp64 sums by fours
          (sum_by_fours) 0.2985 -> 0.2942 ms (3 alternating runs, the same bits; `parity run --perf` 0.2966 ms,
          75.8%: run47)
  hc_pre  bwd 1.498 ms (27%: reduce 0.227 = 99%, token 0.108, dx_dfn 1.151, sums 0.020); with dx_dfn on the tensor
          cores (mix_bwd_dx_dfn_mma) 0.839 ms (48%: dx_dfn 1.094 -> 0.488 ms, 84% of the copy rate on its own bytes;
          A/B in one process, bench/hc_ab.sh, 3 runs each); with divide_lines and hc a template parameter of the
          token kernel 0.795 ms (51%: token 0.113 -> 0.067 ms; 0.099 -> 0.043 at 257 tokens, a single thread's chain);
          with the Sinkhorn backward beside the reduce 0.780 ms (52%); that Sinkhorn by quads from register
          checkpoints (comb_backward_quad) 0.7746 -> 0.7668 ms (reduce 0.2641 -> 0.2560; bench/hc_ab.sh, the
          same bits; reports/gpu/2026-11-28-h100-comb-bwd-quad-ab.log and -small-t-ab.log); those blocks
          interleaved with the reduce's 0.7686 -> 0.7542 ms (reduce 0.2570 -> 0.2407); grad_fn's and the gates'
          sums inside dx_dfn_mma's launch 0.7607 -> 0.7561 ms (`parity run --perf` 0.7540 ms, 53.8%: run53);
          dx_dfn_mma a programmatic dependent launch of the token kernel, its fn fragments and first x and g_y tiles
          loaded while that runs: 0.7023 -> 0.6969 ms on an H200 (41.2 -> 41.5%; 3 alternating runs of
          bench/hc_ab.sh, each faster, the same bits; reports/gpu/2026-11-28-h200-dx-dfn-pdl-ab.log); the
          coefficients split into bf16 terms once, by the token kernel, not by every warp of dx_dfn_mma (a tile's
          SASS 393 -> 270 instructions): dx_dfn_mma+sums 0.5049 -> 0.4545 ms, token 0.0203 -> 0.0173, the whole
          0.7003 -> 0.6653 ms on an H200 (41.2 -> 43.7%; 3 alternating runs, each faster; grad_x the same bits,
          grad_fn too where the token splits were whole tiles already; `parity run --perf` 0.6608 ms, 43.6%;
          reports/gpu/2026-11-28-h200-coef-terms-ab.log); dx_dfn_mma's ring filled by one thread's TMA copies, where
          every thread's cp.async had cost ~150 of a warp's ~470 instructions a tile: dx_dfn_mma+sums 0.4542 ->
          0.3926 ms (74% of the copy rate on its bytes), the whole 0.6648 -> 0.5994 ms on an H200 (43.5 -> 48.2%; 3
          alternating runs, each faster; the same hashes at 37, 1001, 4096 and 16384 tokens; `parity run --perf`
          0.5976 ms, 48.2%; reports/gpu/2026-11-28-h200-dx-dfn-tma-ab.log); each stage refilled by the last warp
          done with it instead of after a barrier of all eight: dx_dfn_mma+sums 0.3955 -> 0.3819 ms (73 -> 76%), the
          whole 0.6037 -> 0.5904 ms (47.7 -> 48.8%; 3 alternating runs, each faster, the same hashes; `parity run
          --perf` 0.5868 ms, 48.8%; reports/gpu/2026-11-29-h200-dx-dfn-last-warp-refill-ab.log). Tried and dropped
          since: a thread's stage offsets formed once before the tile loop, as mix_fused_bwd<Head>'s (the tile's main
          block 240 -> 224 instructions, yet dx_dfn_mma+sums 0.3800 -> 0.4119 ms;
          reports/gpu/2026-11-29-h200-dx-dfn-offsets-tried-ab.log); grad_x out by one tensor copy of the stage
          from that warp (x1.074: its wait for the copy's reads holds the refill back, and ptxas recomputes more
          offsets in the loop) and a 5-stage ring (x1.014;
          reports/gpu/2026-11-29-h200-dx-dfn-tma-store-ab.log); grad_x staged apart from the ring so that the stage
          is released before the tile's stores (x1.009: the fences did not wait on them;
          reports/gpu/2026-11-29-h200-dx-dfn-gx-staging-ab.log). Ablations then (timing only): without the MMAs
          x1.19 (slower), without grad_fn's x1.00, without the coefficient copies (6 KB a tile from L2) x0.923; but
          both ways tried to carry fewer of them were slower, with the same bits: CTAs of 16 warps over 128 hidden
          positions x1.19, c and pre_h inside the block of terms (4352 bytes a tile, no box of rows) x1.06, ncu
          showing longer waits for the tiles at a lower DRAM throughput; tiles walked last to first (the reduce's
          last tokens still in L2) x0.98-0.99, not worth grad_fn's changed bits
          (reports/gpu/2026-11-29-h200-dx-dfn-ablations-width-terms-ab.log, the patches beside it); L2 hints on its
          copies (x and g_y evict_first, the coefficients evict_last): the same bits, dx_dfn_mma+sums x1.024 and the
          whole backward x1.061 (reports/gpu/2026-11-29-h200-l2-hints-ab.log, the patch beside it). Its inputs
          do not bound it: with no tile loads after the first four (stale stages, timing only) x0.980, and with x
          and g_y in L2 (read by the reduce just before, chunks of 256 to 16384 tokens) no faster, so a chunked two-pass
          backward would gain nothing (ncu: fixed-latency waits between the HMMAs the largest stall;
          reports/gpu/2026-11-29-h200-dx-dfn-compute-bound-probe.log). grad_x's four n-tile chains issued together,
          then their epilogues, and grad_fn's MMAs after them (before, a chain and its epilogue at a time): the same
          bits, dx_dfn_mma+sums 0.3813 -> 0.3542 ms, the whole 0.5895 -> 0.5656 ms on an H200 (49.0 -> 51.4%; 3
          alternating runs, each faster, and again in a second call, x0.963; the same hashes at 37, 1001, 4096 and
          16384 tokens; `parity run --perf` 0.5684 ms, 50.3%: run66;
          reports/gpu/2026-11-29-h200-dx-dfn-chains-together-ab.log, the variants tried beside it). Not faster
          since: the refill's two block fences as one acq_rel atomic (x1.000, the same bits;
          reports/gpu/2026-11-29-h200-dx-dfn-acqrel-ab.log); grad_fn's terms loaded before grad_x's MMAs so that its
          MMAs could move up (8 bytes spilled: x1.036, and x1.045 with them before the epilogues;
          reports/gpu/2026-11-29-h200-dx-dfn-terms-early-ab.log). The reduce's loop unrolled by four (three
          blocks an SM, see mix_bwd_reduce): reduce 0.1899 -> 0.1764 ms, the whole 0.5706 -> 0.5512 ms on an H200
          (51.4 -> 52.8%; 3 alternating runs, each faster, the same hashes;
          reports/gpu/2026-11-29-h200-reduce-unroll-ab.log)
  hc_head fwd 0.453 ms (50%), fused with TMA + ldmatrix 0.358 ms (62%), st.async 0.258 ms (87%; `parity run
          --perf` 0.243 ms, 92%), two slots of warp partials 0.241 -> 0.237 (`parity run --perf` 0.238 ms, 94%), fn
          before the ring (see hc_pre) 0.2370 -> 0.2336 (`parity run --perf` 0.2351 ms, 95%);
          bwd 0.782 ms (52%: dx_dfn 0.539 = 75%), in one pass (mix_fused_bwd) 0.464 ms
          (87%; the two-pass 0.726 ms in the same run; 0.776 ms with the gate backward serial on the finisher's
          lane 0, where ncu put 35% of the compute warps' stall samples on the wait for the coefficient rows)
  PyTorch eager (HF composition, same run kind): hc_post fwd 6.13 ms, fwd+bwd 13.2; hc_pre fwd 5.40, fwd+bwd 18.2;
  hc_head fwd 5.01, fwd+bwd 16.6.
H200 (copy 4.24 TB/s), same shape, at aa40574 (standalone): hc_post fwd 0.313 ms (91%), bwd 0.570 (78%); hc_pre fwd
0.540 (30%), bwd 1.363 (21%: reduce 0.166, token 0.102, dx_dfn 1.076, sums 0.020); hc_head fwd 0.406 (39%), bwd
0.574 (50%: dx_dfn 0.388 = 74%). At 4d12bda (`parity run --perf`, run46, copy 4.25 TB/s): hc_post fwd 0.313 ms
(91%), bwd 0.570 (78%); hc_pre fwd 0.299 (53%), bwd 0.712 (40%); hc_head fwd 0.228 (69%), bwd 0.456 (62%). hc_pre's
forward and hc_head's backward take the H100's time (0.301 and 0.453 ms in run45), hc_head's forward nearly (0.235):
with 41% more copy rate than the H100, the H200 leaves them bound by their instructions. At 51f6eed and 887254a
(run54, run55, copy 4.23 TB/s): hc_pre fwd 0.296 / 0.294 ms (54%), bwd 0.706 / 0.700 (41%); hc_head bwd 0.452 (63%).
hc_pre's backward in parts (standalone, reports/gpu/2026-11-28-h200-hc-timing.log): reduce 0.187 ms (85%), token
0.020, dx_dfn_mma with its sums 0.50 (58%: the H100's 0.486 ms), so on both cards dx_dfn_mma's own instructions and
latency set the two passes' pace. Since (its ring by TMA, each stage refilled by its last warp): at fbdecd0 (run58)
hc_pre bwd 0.5911 ms (48.4%), in parts reduce 0.190 ms (83%), token 0.018, dx_dfn_mma with its sums 0.382 (76%;
reports/gpu/2026-11-29-h200-dx-dfn-last-warp-refill-ab.log): two passes, even each at the copy rate, take 64%.
The fused kernels' clusters of 16 run on 112 of the H200's 132 SMs (7 fit its GPCs); hc_head's backward on clusters of
8 (15 fit: 120 SMs) 0.4514-0.4562 -> 0.4308-0.4396 ms (`parity run --perf` 0.4308 ms, 66.0%; see mix_fused_bwd),
then with less work a row in its grad_x step 0.4086 ms (`parity run --perf` 0.4090 ms, 69.9%), and with fewer
instructions on its compute warps' path 0.3711 ms (`parity run --perf` 0.3673 ms, 77.4%: run63, see mix_fused_bwd).
*/
#include "kernels/cuda/hc.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>  // CUtensorMap, PFN_cuTensorMapEncodeTiled: the driver's entry point, fetched through the runtime

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <type_traits>

namespace parity::hc::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int H4 = kMaxHc;

// -------------------------------------------------------------------------------------------------------------------
// Element access: streams are read as fp32 and written with one round-to-nearest-even
// -------------------------------------------------------------------------------------------------------------------

// A 32-bit word holds two bf16 (the lower address in the low half): widening is a shift or a mask.
__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
// The bf16 in half `half` of w, in fp64: one conversion from the register's half (F2F.F64.BF16), where
// double(bf_lo(w)) takes a shift or a mask before its F2F.
__device__ __forceinline__ double bf_f64(uint32_t w, int half) {
  double d;
  asm("cvt.f64.bf16 %0, %1;" : "=d"(d) : "h"(static_cast<unsigned short>(w >> (16 * half))));
  return d;
}
__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi) {
  uint32_t w;  // one cvt: the first source goes to the upper half (PTX ISA, cvt.rn.bf16x2.f32)
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}

template <typename T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f<bf16>(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float v) { return __float2bfloat16_rn(v); }

// Where HF's composition materialises an intermediate tensor in the streams' dtype (identity for fp32).
template <typename T>
__device__ __forceinline__ float round_to(float v) { return to_f<T>(from_f<T>(v)); }

// v, which the compiler can no longer rematerialise from what it was computed from: held in a register, where
// recomputing it at every use cost several instructions.
__device__ __forceinline__ unsigned opaque(unsigned v) {
  asm("mov.b32 %0, %0;" : "+r"(v));
  return v;
}

// V consecutive elements as fp32: V = 8 is one 16-byte access for bf16 (two for fp32); V = 1 is the element-wise
// path for a hidden that is not a multiple of 8 or an unaligned view.
template <typename T, int V>
struct Vec;

template <>
struct Vec<bf16, 8> {
  static __device__ __forceinline__ void load(const bf16* p, float (&v)[8]) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    v[0] = bf_lo(u.x), v[1] = bf_hi(u.x), v[2] = bf_lo(u.y), v[3] = bf_hi(u.y);
    v[4] = bf_lo(u.z), v[5] = bf_hi(u.z), v[6] = bf_lo(u.w), v[7] = bf_hi(u.w);
  }
  static __device__ __forceinline__ void store(bf16* p, const float (&v)[8]) {
    uint4 u;
    u.x = pack_bf2(v[0], v[1]), u.y = pack_bf2(v[2], v[3]), u.z = pack_bf2(v[4], v[5]), u.w = pack_bf2(v[6], v[7]);
    *reinterpret_cast<uint4*>(p) = u;
  }
  // The same as one 16-byte store by name: in mix_fused_fwd's collapse the compiler split the store above into four
  // 4-byte ones (nvcc 13.0); elsewhere the name costs instructions (hc_post_fwd: 1024 -> 1072).
  // live: the store is predicated, where an `if` around the call made a branch around the packing too (3 instructions
  // a row in mix_fused_bwd's step c; the collapse of mix_fused_fwd<Head> 0.2279 -> 0.2224 ms on an H200).
  static __device__ __forceinline__ void store16(bf16* p, const float (&v)[8], bool live = true) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(p),
        "r"(pack_bf2(v[0], v[1])), "r"(pack_bf2(v[2], v[3])), "r"(pack_bf2(v[4], v[5])), "r"(pack_bf2(v[6], v[7])),
        "r"(int(live))
        : "memory");
  }
};

template <>
struct Vec<float, 8> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[8]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
};

template <>
struct Vec<bf16, 2> {
  static __device__ __forceinline__ void load(const bf16* p, float (&v)[2]) {
    const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(p));
    v[0] = bf_lo(w), v[1] = bf_hi(w);
  }
  static __device__ __forceinline__ void store(bf16* p, const float (&v)[2]) {
    *reinterpret_cast<uint32_t*>(p) = pack_bf2(v[0], v[1]);
  }
};

template <>
struct Vec<float, 2> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[2]) {
    const float2 a = __ldg(reinterpret_cast<const float2*>(p));
    v[0] = a.x, v[1] = a.y;
  }
  static __device__ __forceinline__ void store(float* p, const float (&v)[2]) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  }
};

template <typename T>
struct Vec<T, 1> {
  static __device__ __forceinline__ void load(const T* p, float (&v)[1]) { v[0] = to_f<T>(__ldg(p)); }
  static __device__ __forceinline__ void store(T* p, const float (&v)[1]) { *p = from_f<T>(v[0]); }
};

template <int V>
__device__ __forceinline__ void zero(float (&v)[V]) {
#pragma unroll
  for (int e = 0; e < V; ++e) v[e] = 0.f;
}

// Elements [d, d + V) of each of a token's H streams (stride D) in fp32; streams past H read as zero, so loops over
// H4 need no bound.
template <typename T, int V>
__device__ __forceinline__ void load_streams(const T* p, int H, int D, int d, float (&v)[H4][V]) {
#pragma unroll
  for (int h = 0; h < H4; ++h) {
    if (h < H) Vec<T, V>::load(p + h * D + d, v[h]);
    else zero(v[h]);
  }
}

// Butterfly sum: every lane ends with the same bits (each level adds the same two values, in either order).
template <typename F>
__device__ __forceinline__ F warp_sum(F v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kWarpTokensPerBlock = 8;  // warp-per-token kernels: 256 threads, 8 tokens per CTA ...
constexpr int kPostBwdTokensPerBlock = 4;  // ... except hc_post_bwd: 128 threads, 4 CTAs per SM (see there)

// -------------------------------------------------------------------------------------------------------------------
// hc_post forward: out[t,k,:] = post_k x + sum_j comb[j,k] residual_j
// -------------------------------------------------------------------------------------------------------------------

// One warp per token; each lane takes V = 8 consecutive elements of all H streams per step, so x and every residual
// row are read once with 16-byte loads and each output row is written once. post and comb (H + H^2 floats) sit in
// registers for the whole token.
template <typename T, int V, bool HF>
__global__ void __launch_bounds__(256) hc_post_fwd_kernel(const T* __restrict__ x, const T* __restrict__ res,
                                                          const float* __restrict__ post,
                                                          const float* __restrict__ comb, T* __restrict__ out,
                                                          int64_t tokens, int H, int D) {
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= tokens) return;
  float p[H4], c[H4][H4];
#pragma unroll
  for (int j = 0; j < H4; ++j) {
    p[j] = j < H ? __ldg(post + t * H + j) : 0.f;
    if (HF) p[j] = round_to<T>(p[j]);  // post.to(bf16)
#pragma unroll
    for (int k = 0; k < H4; ++k) {
      c[j][k] = (j < H && k < H) ? __ldg(comb + (t * H + j) * H + k) : 0.f;
      if (HF) c[j][k] = round_to<T>(c[j][k]);  // comb.to(bf16)
    }
  }
  const T* xr = x + t * D;
  const T* rr = res + t * H * D;
  T* orow = out + t * H * D;
#pragma unroll 2
  for (int d = lane * V; d < D; d += 32 * V) {
    float xv[V], rv[H4][V];
    Vec<T, V>::load(xr + d, xv);
    load_streams<T, V>(rr, H, D, d, rv);
#pragma unroll
    for (int k = 0; k < H4; ++k) {
      if (k >= H) break;
      float o[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (HF) {
          // bf16 products of bf16 values are exact in fp32, so the FMA chain is HF's fp32-accumulated matmul
          // (j = 0..H-1 in order); __fmul_rn keeps post*x its own rounded product.
          const float a = round_to<T>(__fmul_rn(p[k], xv[e]));
          float m = __fmul_rn(c[0][k], rv[0][e]);
#pragma unroll
          for (int j = 1; j < H4; ++j)
            if (j < H) m = fmaf(c[j][k], rv[j][e], m);
          o[e] = __fadd_rn(a, round_to<T>(m));  // the bf16 add: fp32 sum, rounded by the store
        } else {
          float acc = p[k] * xv[e];
#pragma unroll
          for (int j = 0; j < H4; ++j)
            if (j < H) acc = fmaf(c[j][k], rv[j][e], acc);
          o[e] = acc;
        }
      }
      Vec<T, V>::store(orow + k * D + d, o);
    }
  }
}

// -------------------------------------------------------------------------------------------------------------------
// hc_post backward
// -------------------------------------------------------------------------------------------------------------------

// One warp per token. The D-parallel grads (grad_x, grad_residual) are written as they are formed; the per-token
// reductions (grad_post: H dots, grad_comb: H^2 dots over D) are fp32 per-lane partials, then a butterfly.
// Register cap 128 (4 CTAs = 16 warps per SM): the bf16 V=8 path then spills 28 bytes, yet ran 0.729 ms against
// 0.788 ms uncapped (167 registers, 12 warps per SM) on H100 at V4 dims: more loads in flight matter more.
template <typename T, int V>
__global__ void __launch_bounds__(32 * kPostBwdTokensPerBlock, 4)
    hc_post_bwd_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ res,
                       const float* __restrict__ post, const float* __restrict__ comb, T* __restrict__ gx,
                       T* __restrict__ gres, float* __restrict__ gpost, float* __restrict__ gcomb, int64_t tokens,
                       int H, int D) {
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= tokens) return;
  float p[H4], c[H4][H4], ap[H4], ac[H4][H4];
#pragma unroll
  for (int j = 0; j < H4; ++j) {
    p[j] = j < H ? __ldg(post + t * H + j) : 0.f;
    ap[j] = 0.f;
#pragma unroll
    for (int k = 0; k < H4; ++k) {
      c[j][k] = (j < H && k < H) ? __ldg(comb + (t * H + j) * H + k) : 0.f;
      ac[j][k] = 0.f;
    }
  }
  const T* gr = g + t * H * D;
  const T* xr = x + t * D;
  const T* rr = res + t * H * D;
  for (int d = lane * V; d < D; d += 32 * V) {
    float gv[H4][V], rv[H4][V], xv[V], o[V];
    Vec<T, V>::load(xr + d, xv);
    // Not two load_streams calls: that order changes ptxas' register allocation and spills here, unmeasured.
#pragma unroll
    for (int j = 0; j < H4; ++j) {
      if (j < H) {
        Vec<T, V>::load(gr + j * D + d, gv[j]);
        Vec<T, V>::load(rr + j * D + d, rv[j]);
      } else {
        zero(gv[j]);
        zero(rv[j]);
      }
    }
    // grad_x = sum_k post_k g_k
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float s = p[0] * gv[0][e];
#pragma unroll
      for (int k = 1; k < H4; ++k)
        if (k < H) s = fmaf(p[k], gv[k][e], s);
      o[e] = s;
    }
    Vec<T, V>::store(gx + t * D + d, o);
    // grad_residual_j = sum_k comb[j,k] g_k  (comb, not comb^T: the forward applied comb^T)
#pragma unroll
    for (int j = 0; j < H4; ++j) {
      if (j >= H) break;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float s = c[j][0] * gv[0][e];
#pragma unroll
        for (int k = 1; k < H4; ++k)
          if (k < H) s = fmaf(c[j][k], gv[k][e], s);
        o[e] = s;
      }
      Vec<T, V>::store(gres + (t * H + j) * D + d, o);
    }
    // grad_post_k += x . g_k ; grad_comb[j,k] += residual_j . g_k
#pragma unroll
    for (int e = 0; e < V; ++e)
#pragma unroll
      for (int k = 0; k < H4; ++k) {
        ap[k] = fmaf(xv[e], gv[k][e], ap[k]);
#pragma unroll
        for (int j = 0; j < H4; ++j) ac[j][k] = fmaf(rv[j][e], gv[k][e], ac[j][k]);
      }
  }
#pragma unroll
  for (int k = 0; k < H4; ++k) {
    if (k >= H) break;
    ap[k] = warp_sum(ap[k]);
#pragma unroll
    for (int j = 0; j < H4; ++j)
      if (j < H) ac[j][k] = warp_sum(ac[j][k]);
  }
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < H4; ++k) {
      if (k >= H) break;
      gpost[t * H + k] = ap[k];
#pragma unroll
      for (int j = 0; j < H4; ++j)
        if (j < H) gcomb[(t * H + j) * H + k] = ac[j][k];
    }
  }
}

// -------------------------------------------------------------------------------------------------------------------
// Per-token gate math shared by the mix forward epilogue and the mix backward: sigmoid and Sinkhorn
// -------------------------------------------------------------------------------------------------------------------

// The reference's order: z = mix * scale, then + base (two roundings, never contracted into an FMA).
__device__ __forceinline__ float logit(float mix, float scale, float base) {
  return __fadd_rn(__fmul_rn(mix, scale), base);
}
__device__ __forceinline__ float sigmoid(float z) { return 1.f / (1.f + expf(-z)); }

using Mat = float[H4][H4];

// Element k of line `line` of c: a column when ByColumn (k walks its rows), else a row. After unrolling every index
// is a constant, so the matrix stays in registers either way.
template <bool ByColumn, typename M>
__device__ __forceinline__ auto& elem(M& c, int line, int k) {
  if constexpr (ByColumn) return c[k][line];
  else return c[line][k];
}

// Division of the lines of a matrix by one denominator each, bit for bit as `/` (div.rn.f32) divides. nvcc expands
// each `/` into MUFU.RCP, a Newton step for the reciprocal, q = a r and one correction, under a range check (FCHK)
// that sends operands near the ends of the exponent range to a slow path: every division becomes a branch of its own,
// and a thread's divisions run one after another. Here each line's reciprocal is formed once, every quotient and
// correction is an independent instruction, and one check covers the matrix: with every operand's magnitude within
// [2^-60, 2^60], no reciprocal, quotient or remainder leaves the normal range, where that expansion is exact;
// otherwise (zeros, NaN, the extremes) every element goes through `/`. Checked against `/` on an H100 (35e9 random
// quotients, 0 differ); the GPU test HcSinkhornDivide checks it against the CPU's IEEE division on every run.
constexpr uint32_t kDivideLo = (127u - 60) << 23, kDivideHi = (127u + 60) << 23;  // the bits of 2^-60 and 2^60
__device__ __forceinline__ uint32_t magnitude_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// v[0] = min (Max: max) of v[0, N), pairwise: the range check below is on the chain of every normalisation, where a
// running min over the matrix (nvcc: ten chained VIMNMX3) outlasted the quotients it guards.
template <bool Max, int N>
__device__ __forceinline__ uint32_t fold_tree(uint32_t (&v)[N]) {
#pragma unroll
  for (int s = 1; s < N; s *= 2)
#pragma unroll
    for (int i = 0; i + s < N; i += 2 * s) v[i] = Max ? max(v[i], v[i + s]) : min(v[i], v[i + s]);
  return v[0];
}

// 1 / den refined once from MUFU.RCP, and a / den from it with one correction: `/`'s expansion without its range check.
__device__ __forceinline__ float line_reciprocal(float den) {
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(den));
  return fmaf(r0, fmaf(-den, r0, 1.f), r0);
}
__device__ __forceinline__ float quotient_in_range(float a, float den, float r) {
  const float q0 = __fmul_rn(a, r);
  return fmaf(r, fmaf(-den, q0, a), q0);
}

// elem<ByColumn>(c, l, k) /= den[l] for l, k < H. The elements' range is folded while the line sums are still being
// formed; the denominators join it last.
template <bool ByColumn>
__device__ __forceinline__ void divide_lines(Mat& c, const float (&den)[H4], int H) {
  uint32_t lo[H4 * H4 + H4], hi[H4 * H4 + H4];  // unused entries neutral
#pragma unroll
  for (int l = 0; l < H4; ++l)
#pragma unroll
    for (int k = 0; k < H4; ++k) {
      const bool in = l < H && k < H;
      lo[l * H4 + k] = in ? magnitude_bits(elem<ByColumn>(c, l, k)) : ~0u;
      hi[l * H4 + k] = in ? magnitude_bits(elem<ByColumn>(c, l, k)) : 0u;
    }
  uint32_t* lo_den = lo + H4 * H4;
  uint32_t* hi_den = hi + H4 * H4;
  float r[H4];
#pragma unroll
  for (int l = 0; l < H4; ++l) {
    lo_den[l] = l < H ? magnitude_bits(den[l]) : ~0u;
    hi_den[l] = l < H ? magnitude_bits(den[l]) : 0u;
    if (l < H) r[l] = line_reciprocal(den[l]);
  }
  Mat q;
#pragma unroll
  for (int l = 0; l < H4; ++l)
#pragma unroll
    for (int k = 0; k < H4; ++k)
      if (l < H && k < H) elem<ByColumn>(q, l, k) = quotient_in_range(elem<ByColumn>(c, l, k), den[l], r[l]);
  // One branch: with && nvcc branched on the min before folding the max.
  if ((fold_tree<false>(lo) >= kDivideLo) & (fold_tree<true>(hi) <= kDivideHi)) {
#pragma unroll
    for (int l = 0; l < H4; ++l)
#pragma unroll
      for (int k = 0; k < H4; ++k)
        if (l < H && k < H) elem<ByColumn>(c, l, k) = elem<ByColumn>(q, l, k);
  } else {
#pragma unroll
    for (int l = 0; l < H4; ++l)
#pragma unroll
      for (int k = 0; k < H4; ++k)
        if (l < H && k < H) elem<ByColumn>(c, l, k) = elem<ByColumn>(c, l, k) / den[l];
  }
}

// Row softmax (max-subtracted, sums left to right), in place.
__device__ __forceinline__ void softmax_rows(Mat& c, int H) {
  float s[H4];
#pragma unroll
  for (int i = 0; i < H4; ++i) {
    if (i >= H) break;
    float mx = c[i][0];
#pragma unroll
    for (int j = 1; j < H4; ++j)
      if (j < H) mx = fmaxf(mx, c[i][j]);
    s[i] = 0.f;
#pragma unroll
    for (int j = 0; j < H4; ++j)
      if (j < H) {
        c[i][j] = expf(c[i][j] - mx);
        s[i] += c[i][j];
      }
  }
  divide_lines<false>(c, s, H);
}

// The line sums of c (plus eps), in order along each line.
template <bool ByColumn>
__device__ __forceinline__ void line_sums(const Mat& c, int H, float eps, float (&den)[H4]) {
#pragma unroll
  for (int l = 0; l < H4; ++l) {
    if (l >= H) break;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < H4; ++k)
      if (k < H) s += elem<ByColumn>(c, l, k);
    den[l] = s + eps;
  }
}

// One Sinkhorn normalisation, in place: divide each column (ByColumn) or row by its sum + eps.
template <bool ByColumn>
__device__ __forceinline__ void normalise_lines(Mat& c, int H, float eps) {
  float den[H4];
  line_sums<ByColumn>(c, H, eps, den);
  divide_lines<ByColumn>(c, den, H);
}

__device__ __forceinline__ void normalise(Mat& c, int H, float eps, bool by_column) {
  if (by_column) normalise_lines<true>(c, H, eps);
  else normalise_lines<false>(c, H, eps);
}

// The backward of normalise_lines: each line's y = u / (sum u + eps) takes dy to du = (dy - <dy, y>) / (sum u + eps).
// y is the forward's own output (the next stage), so only the sums are formed again. g holds dy on entry, du on return.
template <bool ByColumn>
__device__ __forceinline__ void normalise_lines_backward(const Mat& u, const Mat& y, Mat& g, int H, float eps) {
  float den[H4];
  line_sums<ByColumn>(u, H, eps, den);
#pragma unroll
  for (int l = 0; l < H4; ++l) {
    if (l >= H) break;
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < H4; ++k)
      if (k < H) dot = fmaf(elem<ByColumn>(g, l, k), elem<ByColumn>(y, l, k), dot);
#pragma unroll
    for (int k = 0; k < H4; ++k)
      if (k < H) elem<ByColumn>(g, l, k) -= dot;
  }
  divide_lines<ByColumn>(g, den, H);
}

// Normalisation n (1-based) divides by column sums when n is odd: one column pass, then (iters-1) x (row, column).
__host__ __device__ __forceinline__ int sinkhorn_norms(int iters) { return 2 * iters - 1; }

// Stage s (the input of normalisation s+1) of token t is the H4 x H4 floats at hist[(s * tokens + t) * H4 * H4]: a
// thread's stage is four 16-byte vectors, and a warp's are one contiguous 2 KB.
__device__ __forceinline__ float4* sinkhorn_stage(float* hist, int s, int64_t t, int64_t tokens) {
  return reinterpret_cast<float4*>(hist + (int64_t(s) * tokens + t) * H4 * H4);
}

__device__ __forceinline__ void sinkhorn_forward(Mat& c, int H, float eps, int iters, float* hist, int64_t t,
                                                 int64_t tokens) {
  softmax_rows(c, H);
#pragma unroll
  for (int i = 0; i < H4; ++i)
#pragma unroll
    for (int j = 0; j < H4; ++j) c[i][j] += eps;
  const int norms = sinkhorn_norms(iters);
  for (int n = 1; n <= norms; ++n) {
    if (hist) {
      float4* h = sinkhorn_stage(hist, n - 1, t, tokens);
#pragma unroll
      for (int i = 0; i < H4; ++i) h[i] = make_float4(c[i][0], c[i][1], c[i][2], c[i][3]);
    }
    normalise(c, H, eps, n & 1);
  }
}

// g (d loss / d comb) -> d loss / d logits. The forward is recomputed from the logits with every stage kept in
// `hist`; +eps passes through; softmax: dz = P (dP - <dP, P>) per row.
__device__ __forceinline__ void sinkhorn_backward(const Mat& logits, Mat& g, int H, float eps, int iters, float* hist,
                                                  int64_t t, int64_t tokens) {
  Mat p, c;
#pragma unroll
  for (int i = 0; i < H4; ++i)
#pragma unroll
    for (int j = 0; j < H4; ++j) p[i][j] = c[i][j] = logits[i][j];
  softmax_rows(p, H);
  sinkhorn_forward(c, H, eps, iters, hist, t, tokens);
  // Stage n-1 is loaded while stage n is walked back: one memory latency in flight instead of one per stage.
  auto load_stage = [&](int n, Mat& u) {
    const float4* h = sinkhorn_stage(hist, n - 1, t, tokens);
#pragma unroll
    for (int i = 0; i < H4; ++i) {
      const float4 v = h[i];
      u[i][0] = v.x, u[i][1] = v.y, u[i][2] = v.z, u[i][3] = v.w;
    }
  };
  // c is normalisation n's output y as the loop comes to n: the forward's result first, then each stage.
  Mat un;
  load_stage(sinkhorn_norms(iters), un);
  for (int n = sinkhorn_norms(iters); n >= 1; --n) {
    Mat u;
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j) u[i][j] = un[i][j];
    if (n > 1) load_stage(n - 1, un);
    if (n & 1) normalise_lines_backward<true>(u, c, g, H, eps);
    else normalise_lines_backward<false>(u, c, g, H, eps);
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j) c[i][j] = u[i][j];
  }
#pragma unroll
  for (int i = 0; i < H4; ++i) {
    if (i >= H) break;
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < H4; ++j)
      if (j < H) dot += g[i][j] * p[i][j];
#pragma unroll
    for (int j = 0; j < H4; ++j)
      if (j < H) g[i][j] = p[i][j] * (g[i][j] - dot);
  }
}

// H4 lines of H4 numerators per thread (divide_lines' test).
__global__ void __launch_bounds__(256) sinkhorn_divide_kernel(const float4* __restrict__ num,
                                                              const float4* __restrict__ den,
                                                              float4* __restrict__ out, int64_t groups) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    Mat c;
#pragma unroll
    for (int l = 0; l < H4; ++l) {
      const float4 v = num[i * H4 + l];
      c[l][0] = v.x, c[l][1] = v.y, c[l][2] = v.z, c[l][3] = v.w;
    }
    const float4 d4 = den[i];
    const float d[H4] = {d4.x, d4.y, d4.z, d4.w};
    divide_lines<false>(c, d, H4);
#pragma unroll
    for (int l = 0; l < H4; ++l) out[i * H4 + l] = make_float4(c[l][0], c[l][1], c[l][2], c[l][3]);
  }
}

// -------------------------------------------------------------------------------------------------------------------
// The two mix kinds: what differs between hc_pre and hc_head is only the per-token gate math
// -------------------------------------------------------------------------------------------------------------------

struct MixFwdArgs {
  const float* base;
  const float* scale;
  float *mixes, *pre, *post, *comb;
  int64_t tokens;
  int K, H, M;  // K = H*D, M = rows of fn (<= the kind's MP)
  float hc_eps, rms_eps, post_mult;
  int iters;
};

struct MixBwdTokenArgs {
  const float* mixes;
  const double* red;
  const float *g_post, *g_comb, *base, *scale;
  float* coef;
  double* gate;
  float* hist;
  int64_t tokens;
  int K, H, M;
  float hc_eps, rms_eps, post_mult;
  int iters;
};

// rms scale r = rsqrt(mean(x^2) + eps) from the sum of squares over the K = H*D flattened streams, in fp64 and
// rounded once to fp32: r scales every mix of a token alike, so its error does not cancel in sums over a token's mixes
// (grad/scale), where rsqrtf's (and three fp32 roundings before it) showed. fp64 rsqrt is within an fp64 ULP, so r
// equals the CPU path's fp32(1 / sqrt(.)) but where that lies within 2^-52 of an fp32 rounding boundary; sqrt and a
// division instead made the fused hc_head forward 2.5% slower (0.417 vs 0.406 ms, H200; the finisher warp is on the
// per-tile chain), with the same bits out on the timing's data.
__device__ __forceinline__ float rms_scale(double sum_sq, int K, float eps) {
  return float(rsqrt(sum_sq / K + double(eps)));
}

// coef row (per token, fp32): [0, MP) r * g_mixes (zero past M), MP: c = r^2/K <g_mixes, mixes>, MP+1+h: pre_h.
// gate row: [0, MP) d loss / d logit (zero past M), then the per-scale terms sum_m dlogit_m * mixes_m.
template <int MP_, int NS_>
struct MixLayout {
  static constexpr int MP = MP_, NS = NS_;
  static constexpr int CW = (MP + 1 + H4 + 3) / 4 * 4;
  static constexpr int GW = (MP + NS + 3) / 4 * 4;
};

// The gates' backward runs in fp64 from here to grad_base / grad_scale: those sum per-token terms over tokens with
// heavy cancellation (grad_scale at 37 tokens, V4 width: |terms| sum to ~360x the result), so a term's fp32 rounding
// alone showed as tens of ULP there. sigmoid'(z) = s (1 - s) is evaluated in fp64 from the fp32 mix.
__device__ __forceinline__ double sigmoid64(double z) { return 1.0 / (1.0 + exp(-z)); }

// One stream's share: pre_gate_backward's loop body, and a lane's in mix_fused_bwd (HeadKind::bwd_token_warp).
struct PreGateGrad {
  double m, gz, gm;  // the mix, d loss / d logit, d loss / d mix
  float cf, pre;     // r * d loss / d mix; the forward's pre, bit for bit
};
__device__ __forceinline__ PreGateGrad pre_gate_grad(float mix, double g_pre, float base_h, float s, float r,
                                                     float hc_eps) {
  PreGateGrad o;
  o.m = mix;
  const double sg = sigmoid64(o.m * s + base_h);
  o.gz = g_pre * (sg * (1 - sg));
  o.gm = o.gz * s;
  o.cf = float(r * o.gm);
  o.pre = sigmoid(logit(mix, s, base_h)) + hc_eps;
  return o;
}
// The scale's term and the norm's dot, summed over streams in order (both callers: the same expressions, the same
// contractions).
__device__ __forceinline__ void pre_gate_sums(double gz, double m, double gm, double& sc, double& dot) {
  sc += gz * m;
  dot += gm * m;
}

// The pre gate's backward, the same in both kinds: pre_h = sigmoid(mix_h * s + base_h) + eps, with d loss / d pre_h =
// rd[1 + h] = <g_y, x_h> (from mix_bwd_reduce). Writes d loss / d logit_h to gg[h], r * d loss / d mix_h to cf[h] and
// pre_h to cf[MP + 1 + h] (zero for h >= H, and with ZeroPast also cf[h] and gg[h]); adds g_mix_h * mix_h to `dot`
// and returns the scale's term sum_h gz_h * mix_h.
template <int MP, bool ZeroPast>
__device__ __forceinline__ double pre_gate_backward(const float* mix, const double* rd, const float* base, float s,
                                                    float r, float hc_eps, int H, float* cf, double* gg, double& dot) {
  double sc = 0;
#pragma unroll
  for (int h = 0; h < H4; ++h) {
    if (h < H) {
      const PreGateGrad g = pre_gate_grad(mix[h], rd[1 + h], __ldg(base + h), s, r, hc_eps);
      gg[h] = g.gz;
      cf[h] = g.cf;
      cf[MP + 1 + h] = g.pre;
      pre_gate_sums(g.gz, g.m, g.gm, sc, dot);
    } else {
      if constexpr (ZeroPast) cf[h] = 0.f, gg[h] = 0;
      cf[MP + 1 + h] = 0.f;
    }
  }
  return sc;
}

// pre_h = sigmoid(mix_h * scale[0] + base_h) + eps: the gate both kinds share (and the one the collapse needs).
__device__ __forceinline__ float pre_gate(float mix, float scale, float base_h, float hc_eps) {
  return sigmoid(logit(mix, scale, base_h)) + hc_eps;
}
__device__ __forceinline__ float pre_gate(float mix, int h, const MixFwdArgs& a) {
  return pre_gate(mix, __ldg(a.scale), __ldg(a.base + h), a.hc_eps);
}

// c = r^2 / K <g_mixes, mixes>: the coefficient of x in grad_x (the norm's backward).
__device__ __forceinline__ float norm_coef(float r, int K, double dot) { return float(double(r) * r / K * dot); }

struct PreKind : MixLayout<(2 + H4) * H4, 3> {
  // mixes, pre = sigmoid(.) + eps, post = post_mult * sigmoid(.), comb = Sinkhorn(.)
  // dots -> mixes in place (dots is the token's row of shared memory).
  static __device__ void fwd_epilogue(float* dots, float r, int64_t t, const MixFwdArgs& a) {
    for (int m = 0; m < a.M; ++m) dots[m] = a.mixes[t * a.M + m] = dots[m] * r;
    for (int h = 0; h < a.H; ++h) a.pre[t * a.H + h] = pre_gate(dots[h], h, a);
    post_comb(dots, t, a, a.H);
  }

  // comb's logits (zero past H), the Sinkhorn's input, from a token's mixes.
  static __device__ __forceinline__ void comb_logits(const float* mix, const float* base, const float* scale, int H,
                                                     Mat& c) {
    const float s2 = __ldg(scale + 2);
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j) {
        const int m = 2 * H + i * H + j;
        c[i][j] = (i < H && j < H) ? logit(mix[m], s2, __ldg(base + m)) : 0.f;
      }
  }

  // The gates after pre, from a token's mixes: run by fwd_epilogue, and by mix_post_comb after the fused forward (with
  // H a constant there, so that no loop over the matrix keeps a run-time guard).
  static __device__ __forceinline__ void post_comb(const float* mix, int64_t t, const MixFwdArgs& a, int H) {
    const float s1 = __ldg(a.scale + 1);
    for (int h = 0; h < H; ++h) a.post[t * H + h] = a.post_mult * sigmoid(logit(mix[H + h], s1, __ldg(a.base + H + h)));
    Mat c;
    comb_logits(mix, a.base, a.scale, H, c);
    sinkhorn_forward(c, H, a.hc_eps, a.iters, nullptr, t, a.tokens);
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j)
        if (i < H && j < H) a.comb[(t * H + i) * H + j] = c[i][j];
  }

  // d loss / d comb logits (the Sinkhorn backward) into the gate row's comb entries. It needs no x: the first blocks
  // of mix_bwd_reduce run it, beside the read. H: a constant (compiled per hc).
  static __device__ __forceinline__ void comb_backward(int64_t t, const MixBwdTokenArgs& a, int H) {
    Mat lg, g;
    comb_logits(a.mixes + t * a.M, a.base, a.scale, H, lg);
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j) g[i][j] = i < H && j < H ? a.g_comb[(t * H + i) * H + j] : 0.f;
    sinkhorn_backward(lg, g, H, a.hc_eps, a.iters, a.hist, t, a.tokens);
    double* gg = a.gate + t * GW;
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j)
        if (i < H && j < H) gg[2 * H + i * H + j] = g[i][j];  // the Sinkhorn backward itself stays fp32
  }

  // After comb_backward. H: a constant (mix_bwd_token is compiled per hc). cf: where the coefficient row goes.
  static __device__ __forceinline__ void bwd_token(int64_t t, const MixBwdTokenArgs& a, int H, float* cf) {
    const int M = a.M;
    const float* mix = a.mixes + t * M;
    const double* rd = a.red + t * (1 + H);
    const float r = rms_scale(rd[0], a.K, a.rms_eps);
    const float s0 = __ldg(a.scale), s1 = __ldg(a.scale + 1), s2 = __ldg(a.scale + 2);
    double* gg = a.gate + t * GW;
    double dot = 0, sc1 = 0, sc2 = 0;
    const double sc0 = pre_gate_backward<MP, false>(mix, rd, a.base, s0, r, a.hc_eps, H, cf, gg, dot);
    for (int h = 0; h < H; ++h) {
      // post = post_mult * sigmoid(z)
      const double m = mix[H + h], sg = sigmoid64(m * s1 + __ldg(a.base + H + h));
      const double gz = double(a.g_post[t * H + h]) * a.post_mult * (sg * (1 - sg));
      gg[H + h] = gz;
      sc1 += gz * m;
      const double gm = gz * s1;
      cf[H + h] = float(r * gm);
      dot += gm * m;
    }
#pragma unroll
    for (int i = 0; i < H4; ++i)
#pragma unroll
      for (int j = 0; j < H4; ++j)
        if (i < H && j < H) {
          const int m = 2 * H + i * H + j;
          const double gz = gg[m];  // comb_backward's
          sc2 += gz * mix[m];
          const double gm = gz * s2;
          cf[m] = float(r * gm);
          dot += gm * mix[m];
        }
    for (int m = M; m < MP; ++m) cf[m] = 0.f, gg[m] = 0;
    cf[MP] = norm_coef(r, a.K, dot);
    for (int m = MP + 1 + H4; m < CW; ++m) cf[m] = 0.f;
    gg[MP] = sc0, gg[MP + 1] = sc1, gg[MP + 2] = sc2;
    for (int m = MP + NS; m < GW; ++m) gg[m] = 0;
  }

  // bwd_token by a warp (mix_fused_bwd_mma's finisher), a lane per mix: lane m < M holds mix m and base m, lanes
  // H .. 2H-1 grad_post, lanes 2H .. M-1 comb_backward's d loss / d comb logit (read back from the gate row); `red` in
  // lane i < 1 + H is red row entry i. The sums over mixes then run in every lane in mix order, with bwd_token's
  // expressions, so the rows are bwd_token's. Returns coefficient row entry `lane` in cf, gate row entry `lane` in gg.
  static __device__ __forceinline__ void bwd_token_warp(double red, float mix, float base_m, float s0, float s1,
                                                        float s2, float g_post, double g_comb, const MixBwdTokenArgs& a,
                                                        float& cf, double& gg) {
    const int lane = threadIdx.x & 31, H = a.H;
    const float r = rms_scale(__shfl_sync(~0u, red, 0), a.K, a.rms_eps);
    const double g_pre = __shfl_sync(~0u, red, (lane + 1) & 31);
    const double m = mix;
    double gz = 0, gm = 0;
    float c = 0.f, pre = 0.f;
    if (lane < H) {
      const PreGateGrad g = pre_gate_grad(mix, g_pre, base_m, s0, r, a.hc_eps);
      gz = g.gz, gm = g.gm, c = g.cf, pre = g.pre;
    } else if (lane < 2 * H) {
      const double sg = sigmoid64(m * s1 + base_m);
      gz = double(g_post) * a.post_mult * (sg * (1 - sg));
      gm = gz * s1;
      c = float(r * gm);
    } else if (lane < a.M) {
      gz = g_comb;
      gm = gz * s2;
      c = float(r * gm);
    }
    double sc0 = 0, sc1 = 0, sc2 = 0, dot = 0;
#pragma unroll
    for (int k = 0; k < MP; ++k) {
      const double gzk = __shfl_sync(~0u, gz, k), mk = __shfl_sync(~0u, m, k), gmk = __shfl_sync(~0u, gm, k);
      if (k < a.M) {
        if (k < H) sc0 += gzk * mk;
        else if (k < 2 * H) sc1 += gzk * mk;
        else sc2 += gzk * mk;
        dot += gmk * mk;
      }
    }
    const float p = __shfl_sync(~0u, pre, (lane - MP - 1) & 31);
    cf = lane < a.M ? c : lane == MP ? norm_coef(r, a.K, dot) : lane > MP && lane < MP + 1 + H ? p : 0.f;
    gg = lane < a.M ? gz : lane == MP ? sc0 : lane == MP + 1 ? sc1 : lane == MP + 2 ? sc2 : 0.0;
  }
};

struct HeadKind : MixLayout<H4, 1> {
  // mixes, pre = sigmoid(mixes * scale + base) + eps
  static __device__ void fwd_epilogue(float* dots, float r, int64_t t, const MixFwdArgs& a) {
    for (int h = 0; h < a.H; ++h) {
      const float m = dots[h] * r;
      a.mixes[t * a.H + h] = m;
      a.pre[t * a.H + h] = pre_gate(m, h, a);
    }
  }

  static __device__ __forceinline__ void bwd_token(int64_t t, const MixBwdTokenArgs& a, int H, float* cf) {
    const float* mix = a.mixes + t * H;
    const double* rd = a.red + t * (1 + H);
    const float r = rms_scale(rd[0], a.K, a.rms_eps);
    const float s = __ldg(a.scale);
    double* gg = a.gate + t * GW;
    double dot = 0;
    const double sc = pre_gate_backward<MP, true>(mix, rd, a.base, s, r, a.hc_eps, H, cf, gg, dot);
    cf[MP] = norm_coef(r, a.K, dot);
    for (int m = MP + 1 + H4; m < CW; ++m) cf[m] = 0.f;
    gg[MP] = sc;
    for (int m = MP + NS; m < GW; ++m) gg[m] = 0;
  }

  // bwd_token by a warp, from sums in registers (mix_fused_bwd's finisher): `red` in lane i < 1 + H is red row entry
  // i, mix and base_h in lane h < H are stream h's. Lane h runs stream h's gate (the serial loop's fp64 sigmoids
  // were the finisher's chain); the sums over streams then run in every lane in stream order, so the rows are
  // bwd_token's bit for bit. Returns coefficient row entry `lane` (lane < CW) in cf and gate row entry `lane`
  // (lane < GW) in gg.
  static __device__ __forceinline__ void bwd_token_warp(double red, float mix, float base_h, float s, int K,
                                                        float rms_eps, float hc_eps, int H, float& cf, double& gg) {
    const int lane = threadIdx.x & 31;
    const float r = rms_scale(__shfl_sync(~0u, red, 0), K, rms_eps);
    const PreGateGrad g = pre_gate_grad(mix, __shfl_sync(~0u, red, (lane + 1) & 31), base_h, s, r, hc_eps);
    double sc = 0, dot = 0;
#pragma unroll
    for (int h = 0; h < H4; ++h) {
      const double gz = __shfl_sync(~0u, g.gz, h), m = __shfl_sync(~0u, g.m, h), gm = __shfl_sync(~0u, g.gm, h);
      if (h < H) pre_gate_sums(gz, m, gm, sc, dot);
    }
    const float pre = __shfl_sync(~0u, g.pre, (lane - MP - 1) & 31);
    cf = lane < H ? g.cf : lane == MP ? norm_coef(r, K, dot) : lane > MP && lane < MP + 1 + H ? pre : 0.f;
    gg = lane < H ? g.gz : lane == MP ? sc : 0.0;
  }
};

// -------------------------------------------------------------------------------------------------------------------
// mix forward: [128 tokens x K] @ [K x MP] in fp32 FFMA, then the per-token epilogue
// -------------------------------------------------------------------------------------------------------------------
//
// The projection is a skinny GEMM (N = 24, K = 16384 at V4 dims). fn (1.5 MB) is re-read from L2 once per CTA
// tile of kTM tokens, so the tile is large; K is cut into chunks of kKC staged through shared memory by a
// kStages-deep pipeline of 16-byte cp.async (two chunks in flight while one is multiplied; no staging registers).
// fn is read through fnT [K][MP] (transposed and zero-padded by mix_fn_transpose): a chunk of it is one block.
// Threads: lane & 15 = token group tg (tokens tg + 16 i, i < 8), the two half-warps split the MP columns (NCG = 2)
// or are two k-splits (NCG = 1); k-split s owns WS consecutive words of every chunk. Every thread keeps an 8 x RN
// accumulator tile; the NKS partial tiles are summed in shared memory in a fixed order after the K loop.
// x sits in shared memory as 32-bit words (2 bf16 / 1 fp32), rows unpadded, each 16-byte group of a row stored at
// group ^ (row & 7). A warp instruction reads one word of 8 rows per lane group; lanes tg >= 8 (and the second
// k-split) walk their words in xor-permuted order (j ^ mask), so the groups differ in the word's low 2 bits and the
// 32 lanes hit 32 banks. fnT rows are read as float4 broadcasts. The sum of squares for the rms scale rides along
// (r multiplies the dot products afterwards: a per-token scalar, mathematically the reference's (x r) @ fn^T).
// History (H100, V4 dims, hc_pre): register-staged double buffer with padded rows 0.602 ms; 4-byte cp.async into
// padded rows 0.72 ms (H200; the copy instructions cost more than they hid); 16-byte cp.async + swizzle 0.486 ms.
// The FFMA floor is ~0.22 ms; one CTA (8 warps) per SM at 163 registers leaves latency exposed.

constexpr int kTM = 128, kKC = 64, kMixThreads = 256, kRM = 8, kStages = 3;

template <int MP>
struct MixTile {
  static constexpr int NCG = MP >= 8 ? 2 : 1;             // column groups (half-warps)
  static constexpr int RN = MP / NCG;                     // columns per thread
  static constexpr int NKS = kMixThreads / (16 * NCG);   // partial tiles (k-splits)
  static_assert(RN % 4 == 0, "fn is read from shared memory as float4");
};

template <typename T>
struct MixWords {
  static constexpr int EPW = 4 / int(sizeof(T));   // elements per 32-bit word
  static constexpr int W = kKC / EPW;              // words per row per chunk (row stride in shared memory)
  static constexpr int VE = 16 / int(sizeof(T));   // elements per 16-byte copy
};

// Word w of row `row` in the swizzled shared-memory tile.
template <typename T>
__device__ __forceinline__ int swz(int row, int w) {
  return row * MixWords<T>::W + ((((w >> 2) ^ (row & 7)) << 2) | (w & 3));
}

template <typename T, int MP>
constexpr size_t mix_fwd_smem_bytes() {
  using Wd = MixWords<T>;
  using Tl = MixTile<MP>;
  const size_t stage = kStages * (size_t(kTM) * Wd::W * 4 + size_t(kKC) * MP * 4);
  const size_t red = size_t(Tl::NKS) * kTM * (MP + 1) * 4;
  return stage > red ? stage : red;
}

template <typename T>
__device__ __forceinline__ uint32_t elem_bits(const T* p);
template <>
__device__ __forceinline__ uint32_t elem_bits<float>(const float* p) { return __float_as_uint(__ldg(p)); }
template <>
__device__ __forceinline__ uint32_t elem_bits<bf16>(const bf16* p) { return __bfloat16_as_ushort(__ldg(p)); }

// A generic pointer into shared memory as the 32-bit shared-window address that PTX's .shared operands take.
__device__ __forceinline__ unsigned smem_addr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

// cp.async with a source size: 0 bytes read = the destination is zero-filled (tails of K and of the token tile).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(full ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Programmatic dependent launches: a kernel launched by launch_dependent may start while the one before it runs
// (once that one's blocks have all called griddep_launch_dependents, or exited); until griddep_wait it may read only
// what was there before that kernel began. griddep_wait returns once that kernel has completed and its writes are
// seen (at once in a kernel launched the ordinary way).
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }

// TMA: one thread's cp.async.bulk.tensor moves a box of a tensor (described by a CUtensorMap, built on the host) into
// shared memory and counts its bytes against an mbarrier (complete_tx), which the consumers wait on.
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// The initialised barriers visible to the async proxy (the tensor copies) and to the cluster.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also raises the phase's expected bytes: the phase completes when the bytes have landed.
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// `n` mbarriers that st.async fills, each armed for its first tile (its bytes may come before the arrive: the phase
// waits for both).
__device__ __forceinline__ void arm_slots(uint64_t* bars, int n, unsigned bytes) {
  for (int s = 0; s < n; ++s) mbar_init(bars + s, 1), mbar_expect_bytes(bars + s, bytes);
}
// Until the phase of the given parity has completed. Cluster: the bytes came from other CTAs (st.async), whose writes
// the wait acquires at cluster scope; the tensor copies' need only the CTA's.
#define PARITY_MBAR_WAIT(sem)                                                                                   \
  asm volatile("{\n .reg .pred done;\nWAIT_%=:\n mbarrier.try_wait.parity" sem ".shared::cta.b64 done, [%0], %1;\n" \
               " @!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),                                                  \
               "r"(parity)                                                                                       \
               : "memory")
template <bool Cluster = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  if constexpr (Cluster)
    PARITY_MBAR_WAIT(".acquire.cluster");
  else
    PARITY_MBAR_WAIT("");
}
#undef PARITY_MBAR_WAIT
// Box at coordinates (c0 innermost .. c3) of a 4-D tensor map; coordinates past the tensor's end read zeros.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}
// Box at coordinates (c0 innermost, c1) of a 2-D tensor map.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
// `bytes` (a multiple of 16) from src (16-byte aligned) into shared memory, counted on bar as the tensor copies are.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// This thread's writes to shared memory ordered before later accesses by the async proxy (the next tensor copy into
// the same bytes, issued after a barrier).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// fnT[k][m] = fn[m][k] for m < M, 0 for M <= m < MP.
__global__ void __launch_bounds__(256) mix_fn_transpose_kernel(const float* __restrict__ fn, float* __restrict__ fnT,
                                                               int M, int MP, int K) {
  const int64_t n = int64_t(K) * MP;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(i / MP), m = int(i % MP);
    fnT[i] = m < M ? __ldg(fn + int64_t(m) * K + k) : 0.f;
  }
}

// AS: x rows can be copied as aligned 16-byte vectors (K a multiple of 16 bytes, 16-byte aligned base); otherwise x
// is loaded element by element, synchronously (odd shapes only).
template <typename T, class Kind, bool AS>
__global__ void __launch_bounds__(kMixThreads, 1) mix_fwd_kernel(const T* __restrict__ x, const float* __restrict__ fnT,
                                                                 MixFwdArgs a) {
  constexpr int MP = Kind::MP;
  using Tl = MixTile<MP>;
  using Wd = MixWords<T>;
  constexpr int RN = Tl::RN;
  constexpr int XW = kTM * Wd::W;                         // x words per chunk
  static_assert(XW % (4 * kMixThreads) == 0, "x vectors split evenly");
  constexpr int FV = MP * kKC / 4;                        // fnT float4s per chunk
  constexpr int WS = Wd::W / Tl::NKS;                     // words per k-split per chunk
  static_assert(WS >= 2 && (WS & (WS - 1)) == 0, "k-split words: a power of two");
  constexpr int XS = kTM * Wd::W, FS = kKC * MP;          // words / floats per stage

  extern __shared__ __align__(16) unsigned char smem[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem);                                   // [kStages][kTM][W]
  float* fs = reinterpret_cast<float*>(smem + size_t(kStages) * XS * 4);              // [kStages][kKC][MP]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t t0 = int64_t(blockIdx.x) * kTM;
  const int K = a.K;
  const int tg = lane & 15;
  const int cg = Tl::NCG == 2 ? lane >> 4 : 0;
  const int kh = Tl::NCG == 1 ? lane >> 4 : 0;
  const int ks = Tl::NCG == 2 ? warp : warp * 2 + kh;  // this thread's k-split
  // Word order of this lane: j ^ mask. With WS = 2 (bf16 head) the two k-splits of a warp already differ in bit 1.
  const int mask = WS >= 4 ? (tg >> 3) | (kh << 1) : (tg >> 3);
  const int chunks = (K + kKC - 1) / kKC;

  auto issue_chunk = [&](int chunk) {
    const int stage = chunk % kStages;
    uint32_t* xb = xs + stage * XS;
    float* fb = fs + stage * FS;
    const int k0 = chunk * kKC;
    // Not unrolled: unrolled, the compiler keeps one 64-bit source pointer per copy live across the K loop.
    if (AS) {
#pragma unroll 1
      for (int i = 0; i < XW / 4 / kMixThreads; ++i) {
        const int v = tid + i * kMixThreads, row = v / (Wd::W / 4), g = v % (Wd::W / 4);  // 16-byte group g
        const int64_t t = t0 + row;
        const int k = k0 + g * Wd::VE;
        const bool full = t < a.tokens && k < K;  // K % VE == 0: a group is wholly inside K or wholly outside
        cp_async16(xb + swz<T>(row, 4 * g), full ? x + t * K + k : x, full);
      }
    } else {
#pragma unroll 1
      for (int i = 0; i < XW / kMixThreads; ++i) {
        const int v = tid + i * kMixThreads, row = v / Wd::W, col = v % Wd::W;
        const int64_t t = t0 + row;
        const int k = k0 + col * Wd::EPW;
        const bool tok = t < a.tokens;
        const T* src = x + t * K + k;
        uint32_t w = 0;
        if (Wd::EPW == 2) {
          if (tok && k < K) w = elem_bits(src);
          if (tok && k + 1 < K) w |= elem_bits(src + 1) << 16;
        } else if (tok && k < K) {
          w = elem_bits(src);
        }
        xb[swz<T>(row, col)] = w;
      }
    }
#pragma unroll
    for (int i = 0; i < (FV + kMixThreads - 1) / kMixThreads; ++i) {
      const int v = tid + i * kMixThreads;  // float4 v of the chunk: row k0 + v / (MP/4), columns 4 (v % (MP/4))
      if (v < FV) {
        const int k = k0 + v / (MP / 4);
        cp_async16(fb + 4 * v, k < K ? fnT + int64_t(k0) * MP + 4 * v : fnT, k < K);
      }
    }
  };

  float acc[kRM][RN], ss[kRM];
#pragma unroll
  for (int i = 0; i < kRM; ++i) {
    ss[i] = 0.f;
#pragma unroll
    for (int n = 0; n < RN; ++n) acc[i][n] = 0.f;
  }

#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) {
    if (c < chunks) issue_chunk(c);
    cp_async_commit();  // one group per chunk slot, empty or not, so the wait count below stays uniform
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait<kStages - 2>();  // this thread's copies of `chunk` have landed
    __syncthreads();               // everyone's have; everyone is done with chunk - 1, whose stage is refilled next
    if (chunk + kStages - 1 < chunks) issue_chunk(chunk + kStages - 1);
    cp_async_commit();
    const uint32_t* xb = xs + (chunk % kStages) * XS;
    const float* fb = fs + (chunk % kStages) * FS;
#pragma unroll
    for (int j = 0; j < WS; ++j) {
      const int w = ks * WS + (j ^ mask);
      const int col = (((w >> 2) ^ (tg & 7)) << 2) | (w & 3);  // swz(): rows tg + 16 i share row & 7 = tg & 7
      uint32_t xw[kRM];
#pragma unroll
      for (int i = 0; i < kRM; ++i) xw[i] = xb[(tg + 16 * i) * Wd::W + col];
#pragma unroll
      for (int e = 0; e < Wd::EPW; ++e) {
        const int k = w * Wd::EPW + e;
        float f[RN];
#pragma unroll
        for (int n4 = 0; n4 < RN / 4; ++n4) {
          const float4 q4 = *reinterpret_cast<const float4*>(fb + k * MP + cg * RN + 4 * n4);
          f[4 * n4] = q4.x, f[4 * n4 + 1] = q4.y, f[4 * n4 + 2] = q4.z, f[4 * n4 + 3] = q4.w;
        }
#pragma unroll
        for (int i = 0; i < kRM; ++i) {
          const float xv = Wd::EPW == 2 ? (e == 0 ? bf_lo(xw[i]) : bf_hi(xw[i])) : __uint_as_float(xw[i]);
          ss[i] = fmaf(xv, xv, ss[i]);
#pragma unroll
          for (int n = 0; n < RN; ++n) acc[i][n] = fmaf(xv, f[n], acc[i][n]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Partial tiles -> shared memory (the staging buffers are dead), summed per token over ks = 0..NKS-1 in order.
  float* red = reinterpret_cast<float*>(smem);  // [NKS][kTM][MP + 1]
#pragma unroll
  for (int i = 0; i < kRM; ++i) {
    float* row = red + (size_t(ks) * kTM + tg + 16 * i) * (MP + 1);
#pragma unroll
    for (int n = 0; n < RN; ++n) row[cg * RN + n] = acc[i][n];
    if (cg == 0) row[MP] = ss[i];
  }
  __syncthreads();
  if (tid < kTM) {
    float* fin = red + size_t(tid) * (MP + 1);  // ks = 0's row: only this thread touches row tid of any ks
    for (int m = 0; m <= MP; ++m) {
      float s = 0.f;
#pragma unroll
      for (int p = 0; p < Tl::NKS; ++p) s += red[(size_t(p) * kTM + tid) * (MP + 1) + m];
      fin[m] = s;
    }
    const int64_t t = t0 + tid;
    if (t < a.tokens) Kind::fwd_epilogue(fin, rms_scale(fin[MP], K, a.rms_eps), t, a);
  }
}

// -------------------------------------------------------------------------------------------------------------------
// collapse: y = sum_h pre_h x_h (hc_pre's collapsed, hc_head's out)
// -------------------------------------------------------------------------------------------------------------------

// The reference's (pre[..., None] * x).sum(-2): each product rounded to fp32, summed over h in order, one rounding.
template <typename T, int V>
__global__ void __launch_bounds__(256) collapse_kernel(const T* __restrict__ x, const float* __restrict__ pre,
                                                       T* __restrict__ y, int64_t tokens, int H, int D) {
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= tokens) return;
  float p[H4];
#pragma unroll
  for (int h = 0; h < H4; ++h) p[h] = h < H ? __ldg(pre + t * H + h) : 0.f;
  const T* xr = x + t * H * D;
#pragma unroll 1
  for (int d = lane * V; d < D; d += 32 * V) {
    float xv[H4][V], o[V];
    load_streams<T, V>(xr, H, D, d, xv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float s = __fmul_rn(p[0], xv[0][e]);
#pragma unroll
      for (int h = 1; h < H4; ++h)
        if (h < H) s = __fadd_rn(s, __fmul_rn(p[h], xv[h][e]));
      o[e] = s;
    }
    Vec<T, V>::store(y + t * D + d, o);
  }
}

// -------------------------------------------------------------------------------------------------------------------
// fused mix forward: x read once; mixes on the tensor cores; pre and the collapse in the same pass (bf16, H = 4)
// -------------------------------------------------------------------------------------------------------------------
//
// mix_fwd + collapse read x twice and the FFMA projection alone is 0.49 ms at V4 dims (the FFMA floor is 0.22 ms),
// so hc_pre stays far below the copy rate. Here a cluster of kFusedCluster CTAs shares each tile of kFusedTM tokens:
// CTA c owns the hidden slice [c Dc, (c+1) Dc) of all H streams (Kc = H Dc elements of each token), keeps its slice of
// fn in registers for the whole launch, and streams its slice of x through a kFusedStages-deep cp.async ring. Per tile:
//   1. mma.sync m16n8k16 bf16 -> fp32: x is bf16 (exact as an operand) and fn is split exactly into three bf16
//      terms (hi + mid + lo = the fp32 value), so every product is exact and only the sums round. Each warp sums
//      BPW blocks of 32 k (a 12-MMA fp32 chain), then warps, then the cluster's CTAs are summed in fp64 in a fixed
//      order; the sum of squares for the rms scale likewise (fp32 FFMA over 16 exact squares, then fp64).
//   2. CTA r finishes token r of the tile (fp64 sums over the cluster, the partial rows sent to it by st.async):
//      mixes, pre, and pre sent into every CTA's shared memory (st.async).
//   3. Every CTA collapses its slice of the tile from shared memory: y = sum_h pre_h x_h, as collapse_kernel does.
// post and comb (hc_pre: the Sinkhorn) need no x and run after it, one thread per token (mix_post_comb).
// Measured (H100, V4 dims, `parity run --perf`): 0.658 ms = 34% of the copy rate, 7 resident clusters (112 SMs),
// with the cluster barrier waited for in the iteration that arrived at it. It is bound by synchronisation, not bytes
// or math (ncu: DRAM 26%, SM 37%; issue stalls mostly barrier and fixed-latency waits, then membar from the release
// of the cluster barrier): the per-tile chain multiply -> cross-warp sums -> cluster barrier -> one warp's epilogue
// runs at 4 warps per scheduler. Waiting one tile late (the barrier completes behind the next multiply) and the
// epilogue on a warp of its own: H200, bench/hc_cuda_timing.cu, hc_pre 0.622 -> 0.571 ms, hc_head 0.434 -> 0.401 ms,
// the same bits out (ncu: issue slots 49% busy, ~930 instructions per warp and tile, a sixth of them the fp32 adds
// behind the MMAs; stalls: waits, barrier, math, membar). TMA loads and ldmatrix fragments (below): 212M -> 131M
// instructions (ncu), H100 hc_pre 0.555 -> 0.456 ms (49.5% of copy, with mix_post_comb), hc_head 0.433 -> 0.358 ms
// (62%). Then (ncu, hc_pre): issue slots 31% busy; stalls: the tile's first __syncthreads and the multiply's tensor
// pipe, a fifth each, then the cross-warp sums, membar (fence.release.cluster compiles to MEMBAR.ALL.GPU). Data by
// st.async onto mbarriers instead of fenced remote stores: hc_pre 0.459 -> 0.376 ms, hc_head 0.361 -> 0.281 (H100,
// bench/hc_ab.sh, same bits); no barrier at the top of a tile (see the loop): 0.382 -> 0.348, 0.286 -> 0.258
// (`parity run --perf`: hc_pre 0.339 ms = 66% of copy, hc_head 0.243 = 92%). Tried and dropped, each slower: the
// lower half taking part of the collapse after its sums (x1.03 before; x1.09 now, also without a fence), a thread
// per cross-warp sum over both halves (x1.12), the finisher warp collapsing too (x1.13), FFMA in the collapse (the
// same time): neither half has slack for the other's work. clock64 per phase (H100, hc_head, ~2770 clock cycles a
// tile): the lower half's sums ~1000 a round, the finisher's token ~1800, the collapse ~1750; the cross-warp sums'
// loads all ahead of their adds (full unroll): hc_pre 0.352 -> 0.327 ms. The collapse on the upper half's 256 threads
// (see the loop): 0.323 -> 0.314 ms with mix_post_comb. Then (ncu, hc_pre, before that): the multiply's section holds
// 53% of the warps' stall samples (fixed-latency waits between the chained HMMAs, which 128 registers with fn's 72
// leave the compiler no room to interleave, and the tile's one __syncthreads), the collapse 12%, the cross-warp sums
// 13%, the finisher ~2%. Tried and dropped (bench/hc_ab.sh, no faster, same bits on the timing's data): the
// finisher's CTA sums pairwise (4 DADDs deep, not 16: x0.998) and its global stores after its arrive (x1.009). A
// summing warp spinning 400 / 900 clock cycles a tile slowed hc_pre x1.033 / x1.047: no warp has slack left for
// mix_post_comb's Sinkhorn (~3000 instructions a token), so it stays a kernel of its own (and a plain launch: as a
// programmatic dependent launch, its blocks waiting beside this kernel, hc_pre took x1.09). Next: the multiply itself
// (wgmma on 64-token tiles, fn's terms in shared memory), which this layout has no room for.
// ncu at affa070 (H100, V4 dims): cudaOccupancyMaxActiveClusters gives 7: clusters of 16 fit 7 of the H100's GPCs, so
// the kernel runs on 112 of its 132 SMs (SM active 76% of the elapsed cycles, DRAM 68%, issue 46.5% busy). Tried and
// dropped since: mix_post_comb on the 20 SMs left over, launched programmatically dependent (this kernel's CTAs trigger
// at their start) and reading each mix as it lands (mixes set to an 0xFF NaN beforehand, which the finisher never
// writes; one lane a warp polling, 0.1-8 us sleeps): the same bits, but the pair no faster (0.3134 / 0.3133 ms
// against 0.3151 / 0.3119 ms in two A/Bs; reports/gpu/2026-11-26-h100-post-comb-overlap-ab.log); again with a
// per-token flag instead of the poison: its st.release.gpu on the finisher's path alone made the pair x1.18, relaxed
// flags x1.04 (reports/gpu/2026-11-27-h100-post-comb-flags-probe.log). Also dropped: no
// clusters, 8 groups of 16 CTAs on 128 SMs (a cooperative launch) exchanging rows and pre through global memory in
// tagged 8-byte words (NCCL's LL protocol; finisher 2 and collapse 4 tiles behind): the same bits, but hc_pre no
// faster (0.3114-0.3147 against 0.3088-0.3129 ms) and hc_head slower (0.245 against 0.235): the exchange adds ~250 KB
// of L2 traffic to a tile's 640 KB (ncu: L2 79.5% busy against 70.4%) and its latency couples the group's CTAs
// (reports/gpu/2026-11-26-h100-fused-fwd-group-exchange-ab.log, the patch beside it). Also dropped: hc_pre's post
// and comb in this kernel's tail (post_comb_quad by the summing warps while the upper half collapses the last tiles,
// then by every quad): the same bits, but 0.3167 against 0.3033 ms. mix_post_comb after this kernel costs ~8 us of
// the pair (0.294 ms without it), about one Sinkhorn round, and a CTA's ~147 tokens take two rounds of its 128 quads
// (reports/gpu/2026-11-27-h100-post-comb-tail-ab.log, the patch beside it). Also dropped: tiles claimed from a counter
// as the clusters go (their fixed shares end up to 6 us apart): the same bits, but hc_pre x1.11 and hc_head x1.32;
// without the atomic, the tile looked up per stage still cost x1.06 / x1.03 on the finisher's and issuer's paths
// (reports/gpu/2026-11-27-h100-fused-fwd-claimed-tiles-ab.log, the patch beside it). Not written: "solo" CTAs on the
// 20 free SMs (a second stream), each a tile at a time through all 16 slices: a probe emulating their traffic slowed
// this kernel by 7% and ran 40% slower itself beside it (~83 GB/s an SM from L2 alone), for ~3% at best
// (reports/gpu/2026-11-27-h100-fused-fwd-free-sms-probe.log, the probe beside it). Ablations (H100, hot, with
// mix_post_comb; reports/gpu/2026-11-27-h100-hc-pre-fused-fwd-ablations.log): as is 0.2996 ms; without the MMAs 0.2464
// (92% of copy, hc_head's level), without the cross-warp sums 0.2885, with a one-stream collapse 0.2754, and with none
// of the three as without the MMAs alone: the multiply, which the 16 warps run as one burst between the tile's
// barriers (its tensor work, ~0.5 us of a ~2 us tile, is fixed by fn's three terms), keeps hc_pre below hc_head. Two
// terms (fn at 16 bits) would cut a third of it but fail the mixes' naive_relative(k=2) policy: fn's rounding alone
// errs 6-8x as much as HF's fp32 composition at V4 dims (reports/analysis/hc_pre_fn_terms.py).
// On the H200 the multiply weighs more: without the MMAs 0.2136 ms against 0.2925 (both with mix_post_comb; 75% of
// the copy rate), and a run-time test around each chain of three MMAs, which keeps ptxas from interleaving a block's
// n-tile chains, made it 0.38 even with half the warps not multiplying: the chains' latency as scheduled is the cost
// (reports/gpu/2026-11-29-h200-fused-fwd-ablations-slots-ab.log). Nor does shifting the upper half against the lower, so that a scheduler's four warps do not all multiply at once
// (H200, the same bits): its collapse at the top of the iteration, before its MMAs, hc_pre x1.003 and hc_head x1.037;
// its MMAs first and the collapse before the partial rows' barrier, hc_pre x1.119
// (reports/gpu/2026-11-29-h200-fused-fwd-collapse-order-ab.log, the patches beside it).
// Nor split roles, the lower half multiplying for both halves (setmaxnreg 216: two warps' fn fragments) and summing,
// the upper half only collapsing (setmaxnreg 40): the same bits, x1.151. A warp issues mma.sync no closer than ~16
// cycles apart, so 72 a warp take >= 1152 cycles a tile, where four warps a scheduler with 36 each are bound by the
// pipe at ~907: the multiply needs every warp (reports/gpu/2026-11-29-h200-fused-fwd-split-roles-ab.log, the patch).
// Nor a ring stage freed as soon as every warp has multiplied its tile, the collapse reading x again from L2 (so that
// hc_pre could take two slots of partials with five stages): the same bits, but hc_pre x1.67 and hc_head x1.45, the
// collapse warps' loads waiting on L2 under the DRAM stream (reports/gpu/2026-11-29-h200-fused-fwd-collapse-from-l2-
// ab.log, the patch beside it).
// Where a tile goes (H200, clock() brackets in four warps, a probe that slows the kernel ~12%): ~3770 cycles a tile,
// of which every role waits only ~300-400 (the ring ~105, the CTA barriers and the cluster's ~200, pre or the rows
// ~100); the multiply takes ~2000 of a warp's chain (1000-1300 as issued, then ~700 until its partials can be stored)
// and the role work 1400-1700 (sums, finisher, collapse). So neither the cluster's coupling nor the ring holds it, but
// each warp's multiply latency followed by its role work (reports/gpu/2026-11-29-h200-fused-fwd-phase-probe.log).
// Nor fn's terms multiplied unchained so that a warp has more MMAs in flight: 28-32 bytes of spills, hc_pre x1.29-1.32
// (reports/gpu/2026-11-29-h200-fused-fwd-split-terms-unchained-ab.log, the patch beside it).
// Nor the upper half let out of step (the slot's CTA barrier split so that it waits only for the sums' reads, not for
// the lower half's multiply): the same bits, x1.096 (reports/gpu/2026-11-29-h200-fused-fwd-upper-ahead-ab.log).
// Ablations of the cross-warp sums (timing only): summed in fp32 without the conversions x1.015, none at all x1.06
// (hc_head): they are not what a tile waits on (reports/gpu/2026-11-29-h200-fused-fwd-sums-ablations-ab.log).
// Nor wgmma in place of the mma.sync chains (m64n16k16 runs no faster: 13 cycles apart an SM at best; bench/
// mma_sync_rate.cu, reports/gpu/2026-11-29-h200-mma-sync-wgmma-rate.log): written, warpgroup wg taking stream wg's
// slice, fn's (mix, term) rows as A from registers (hi and mid of the 24 mixes and lo of 16: 64 rows; the other 8 lo
// rows by mma.sync), the ring stage as B through a 128-byte-swizzle descriptor, each k-step's D added with
// round-to-nearest, fn at 72 registers a thread as here. Right (the mixes as far from the two-kernel path as this
// kernel's), but hc_pre x1.60-1.64: the groups' uneven partial sums cost x1.28, and with even ones the multiply still
// cost the kernel what the mma.sync chains do, 0.093 ms (wgmma with and without its products 0.3048 / 0.2114 ms, this
// kernel with and without its MMAs 0.2908 / 0.1976), ~0.64 us a tile, about the tensor pipe's time for its products,
// in which no role work runs (reports/gpu/2026-11-29-h200-fused-fwd-wgmma-ab.log, the variants' patch beside it).
// So the multiply's issue rate and chains are not the cost; the pipe's time not overlapped is. Nor that wgmma issued
// a tile ahead, under tile n's sums, finisher and collapse (D live across the role work: 8 registers with the k-steps
// chained), with sums of equal length: right, but x1.35-1.37. The products then cost 0.041-0.064 ms, partly hidden;
// the 8 lo rows that do not fit the 64 (reloaded from fn each tile, through L2: held, they spilled) cost 0.078-0.101,
// and without them it was still x1.08 (reports/gpu/2026-11-29-h200-fused-fwd-wgmma-pipelined-ab.log, the patch beside
// it).
// Nor two kernels a chunk of tokens, a tensor-core GEMM for the mixes (fn's three terms as N = 72) and then the collapse
// reading the chunk again, from L2 where it fits (a probe with cuBLAS and a Triton collapse, timing only, H200): over
// all 16384 tokens the GEMM reads x in 0.144 ms and the collapse alone takes 0.163 (99% of the copy rate), 0.303 ms
// together, about this kernel's time; in chunks that L2 holds (1024 tokens, 32 MB of x) the GEMM takes 0.340 ms and
// the pair 0.457-0.496, the re-read from L2 saving ~0.04 ms (reports/gpu/2026-11-30-h200-hc-pre-two-kernel-probe.log,
// the script beside it). So reading x once pays only with the multiply hidden under the stream, as cuBLAS hides it.
// A stage is one TMA box as it lands: x viewed as [stream][hidden / 64][token][64] (4-D tensor map, strides in any
// order), box (64, 16 tokens, Dc / 64, H), 128-byte swizzle: the 16 tokens of a 64-element chunk are 16 lines of
// 128 bytes, unit u of line r at u ^ (r % 8) (FusedSlice::at). ldmatrix then reads the multiply's A fragments (8 rows
// of one unit: 8 distinct bank groups) straight into mma order, and the collapse's 16-byte loads (8 units of a row)
// are conflict-free too. Before: a cp.async loop (a sixth of the kernel's instructions, ncu H100) and A fragments
// assembled from 16-byte row loads by register moves (~140 moves per warp and tile at 128 registers).

constexpr int kFusedCluster = 16, kFusedWarps = 16, kFusedTM = 16, kFusedStages = 6;
constexpr int kFusedThreads = 32 * kFusedWarps;

// The tiles of `tm` tokens one cluster of `cluster` CTAs of a fused kernel takes: its n-th is tile(n) = id + n * stride
// of the launch, `count` of them.
struct ClusterTiles {
  int64_t id, stride, count;
  __device__ explicit ClusterTiles(int64_t tokens, int cluster = kFusedCluster, int tm = kFusedTM)
      : id(blockIdx.x / cluster), stride(gridDim.x / cluster) {
    const int64_t tiles = (tokens + tm - 1) / tm;
    count = id < tiles ? (tiles - id + stride - 1) / stride : 0;
  }
  __device__ int64_t tile(int64_t n) const { return id + n * stride; }
};
constexpr int kFusedHidden = 2048;  // hidden = BPW * kFusedHidden: each warp owns BPW blocks of 32 k

template <int MP>
struct FusedTile {
  static constexpr int NT = (MP + 7) / 8;  // n-tiles of 8 mixes
  static constexpr int NC = 8 * NT + 1;    // partial row: the mixes' dot products, then the sum of squares
  // Slots of warp partials: with two (tile n in slot n & 1) no barrier of the whole CTA opens a tile (see the loop).
  // hc_head's 8 KB a slot fit beside the ring; hc_pre's 24 KB would cost a ring stage, and with five stages and two
  // slots it was slower (H100, V4 dims, bench/hc_ab.sh: x1.031 / x1.038 in two calls; hc_head x0.980 / x0.981; H200
  // x1.030, and x1.018 with hc_pre's collapse lag at 2: reports/gpu/2026-11-29-h200-fused-fwd-ablations-slots-ab.log).
  static constexpr int Slots = NT > 1 ? 1 : 2;
  // The forward collapses tile n CollapseLag tiles after it multiplied it; its pre waits in one of PreSlots slots.
  // hc_pre's collapse a tile later than hc_head's (H100, V4 dims, 5 alternating runs, the same bits): hc_pre 0.3081
  // -> 0.3058 ms, but hc_head 0.2346 -> 0.2363, and four tiles later 0.309 and 0.255 (its x ring then holds only two
  // tiles ahead).
  static constexpr int CollapseLag = NT > 1 ? 3 : 2, PreSlots = CollapseLag + 1;
};

// A CTA's slice of a tile of TM tokens, in a cluster of C CTAs (CTA r finishes token r: C = TM).
template <int BPW, int C = kFusedCluster, int TM = kFusedTM>
struct FusedSlice {
  static constexpr int Dc = BPW * kFusedHidden / C;  // hidden slice per CTA
  static constexpr int Kc = H4 * Dc;                  // elements of a token per CTA
  static constexpr int Chunks = Dc / 64;  // 128-byte chunks of a stream's slice
  static constexpr int StageBytes = TM * Kc * 2;
  static_assert(C == TM, "CTA r finishes token r of the tile");
  static_assert(Dc % 64 == 0 && TM % 8 == 0, "a stage is whole 128-byte lines, whole swizzle rounds of 8 rows");
  // Byte offset in a stage of row r's line of chunk c of stream h, and of its 16-byte unit u (elements 8u .. 8u + 7
  // of the slice).
  static __device__ __forceinline__ unsigned line(unsigned h, unsigned r, unsigned c) {
    return ((h * Chunks + c) * TM + r) * 128;
  }
  static __device__ __forceinline__ unsigned at(unsigned h, unsigned r, unsigned u) {
    return line(h, r, u / 8) + ((u % 8) ^ (r % 8)) * 16;
  }
};

template <int MP, int BPW>
constexpr size_t mix_fused_smem_bytes() {
  using Tl = FusedTile<MP>;
  return size_t(kFusedStages) * FusedSlice<BPW>::StageBytes     // x ring
         + size_t(Tl::Slots) * kFusedWarps * kFusedTM * 8 * Tl::NT * 4  // warp partials of the dots (fp32)
         + size_t(Tl::Slots) * kFusedWarps * kFusedTM * 8               // warp partials of the sum of squares (fp64)
         + size_t(2) * kFusedCluster * Tl::NC * 8                // every CTA's partial row of token `rank` (fp64), x2
         + size_t(Tl::PreSlots) * kFusedTM * H4 * 4              // pre of the tile's tokens, PreSlots tiles
         + size_t(kFusedStages + 2 + Tl::PreSlots) * 8;          // mbarriers: ring stages, gpart and spre slots
}

// The cluster barrier in its two halves (cluster.sync() is both at once). Data between the CTAs travels by st.async
// (below), which carries its own completion; the barrier only orders the reuse of the buffers it lands in, so its
// arrive is relaxed (a release arrive, or a fence before it, compiles to MEMBAR.ALL.GPU: ncu H100, ~7% of the fused
// forward's stall samples, plus the top-of-tile barrier that waited for it). At a kernel's start too: what the other
// CTAs need of this one before they send is its mbarriers' initialisation, which fence.mbarrier_init orders (CUTLASS's
// pattern); a release arrive there also waited for the CTA's first TMA tiles to land (~9 us, globaltimer stamps).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// Named barriers 1..15 of the CTA (0 is __syncthreads'): `threads` (a multiple of 32) take part, those that arrive
// go on.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// p's counterpart in the shared memory of CTA `rank` of the cluster, as a shared::cluster address.
__device__ __forceinline__ unsigned cluster_addr(const void* p, unsigned rank) {
  unsigned r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
  return r;
}
// v stored at dst (a shared::cluster address) asynchronously; its bytes complete a transaction of the mbarrier bar in
// the destination CTA, whose waiters then see the value.
__device__ __forceinline__ void st_async(unsigned dst, double v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(dst),
               "l"(__double_as_longlong(v)), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async(unsigned dst, float v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(dst),
               "r"(__float_as_uint(v)), "r"(bar)
               : "memory");
}

// d += A B on the tensor cores (bf16 operands, fp32 accumulation).
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory, lane l giving the address of row l % 8 of matrix l / 8; register i of
// each lane gets matrix i in the mma fragment layout (Trans: transposed).
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// acc += A (B_lo + B_mid + B_hi), fn's three bf16 terms (split_terms<3>) chained on the tensor cores from zero, the
// small terms first, then added to acc with round-to-nearest. The tensor cores' fp32 accumulation rounds toward
// zero: run through acc itself (C = acc) it truncated the running sum at every step, a bias that does not average out
// (the mixes came out shrunk by a few 1e-7, and grad/scale, whose per-token terms cancel ~360x, inherited it as tens of
// ULP: hc_pre/v4_width on the H100). Chained from zero per 16-element k-step, the truncations are relative to that
// step's own sum: the lo and mid products (2^-16 and 2^-8 of it) lose bits of their own size only, and the hi
// product's truncation is the one a separate MMA had, with a third of the round-to-nearest adds.
// Not volatile: the compiler may interleave independent chains.
// first: acc = the chain's sum (the accumulator's first step, no add of a zero).
__device__ __forceinline__ void mma_bf16_split3(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[3][4],
                                                int half, bool first = false) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 3; ++i) mma16816(d, a, b[i][2 * half], b[i][2 * half + 1]);
#pragma unroll
  for (int e = 0; e < 4; ++e) acc[e] = first ? d[e] : __fadd_rn(acc[e], d[e]);
}

// (w0, w1) as N bf16 terms, the largest in out[N-1] (the chains add the small terms first): each step takes 8
// significant bits off the remainder (bf16 has fp32's exponent range), so three terms hold an fp32 value exactly and
// two hold 16 significant bits.
template <int N>
__device__ __forceinline__ void split_terms(float w0, float w1, uint32_t (&out)[N]) {
#pragma unroll
  for (int i = N - 1; i >= 0; --i) {
    const uint32_t p = pack_bf2(w0, w1);
    out[i] = p;
    w0 -= bf_lo(p), w1 -= bf_hi(p);
  }
}

// term(0) + ... + term(15) in fp64, in a fixed order with a chain of five dependent adds rather than sixteen: four runs
// of four terms in order, then (r0 + r1) + (r2 + r3). The fused forward's sums over warps and over CTAs are on the
// per-tile chain of the summing and finisher warps; in index order they cost hc_pre's forward 1.2-1.4% (H100, V4 dims:
// 0.2985 -> 0.2942 ms, 3 runs each; H200 0.3008 -> 0.2955), with the same output hashes on the timing's data (the
// partials are alike in magnitude, so their fp64 sums rarely round; reports/gpu/2026-11-28-h100-fused-fwd-sums-by-
// fours-ab.log). Each run starting from its first term rather than 0 + term was no faster, nor (for hc_pre) the
// summing threads taking the dots first and the sums of squares last (reports/gpu/2026-11-29-h200-fused-fwd-sums-tried-
// ab.log).
template <typename Term>
__device__ __forceinline__ double sum_by_fours(Term&& term) {
  double run[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    run[r] = 0;
#pragma unroll
    for (int i = 4 * r; i < 4 * r + 4; ++i) run[r] += term(i);
  }
  return (run[0] + run[1]) + (run[2] + run[3]);
}

struct FusedArgs {
  MixFwdArgs m;
  bf16* y;  // the collapse's output; hidden is the kernel's BPW * kFusedHidden
};

template <class Kind, int BPW>
__global__ void __launch_bounds__(kFusedThreads, 1) mix_fused_fwd_kernel(const __grid_constant__ CUtensorMap xmap,
                                                                         const float* __restrict__ fn, FusedArgs fa) {
  namespace cg = cooperative_groups;
  using Tl = FusedTile<Kind::MP>;
  using Sl = FusedSlice<BPW>;
  static_assert(Sl::Kc / 32 == kFusedWarps * BPW, "every warp owns BPW blocks of 32 k");
  constexpr int NT = Tl::NT, NC = Tl::NC, kCollapseLag = Tl::CollapseLag, kPreSlots = Tl::PreSlots;
  const MixFwdArgs& a = fa.m;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  constexpr int D = BPW * kFusedHidden, K = H4 * D;
  const ClusterTiles mine(a.tokens);

  extern __shared__ __align__(1024) unsigned char fused_smem[];  // 128-byte-swizzled TMA destinations: 1024-aligned
  unsigned char* ring = fused_smem;
  constexpr int Slots = Tl::Slots;
  float* wdot = reinterpret_cast<float*>(ring + size_t(kFusedStages) * Sl::StageBytes);  // [slot][warp][row][8 NT]
  double* wss = reinterpret_cast<double*>(wdot + Slots * kFusedWarps * kFusedTM * 8 * NT);  // [slot][warp][row]
  double* gpart = wss + Slots * kFusedWarps * kFusedTM;                                     // [2][CTA][NC]
  float* spre = reinterpret_cast<float*>(gpart + 2 * kFusedCluster * NC);                 // [slot][row][H4]
  uint64_t* landed = reinterpret_cast<uint64_t*>(spre + kPreSlots * kFusedTM * H4);       // [stage]
  uint64_t* rows_in = landed + kFusedStages;  // [2]: gpart's slot has every CTA's partial row (st.async bytes)
  uint64_t* pre_in = rows_in + 2;             // [kPreSlots]: spre's slot has every token's pre
  constexpr unsigned kRowBytes = kFusedCluster * NC * 8, kPreBytes = kFusedCluster * H4 * 4;  // a slot's bytes in

  // The gate's parameters, once: every acquire at cluster scope below invalidates L1 (CCTL.IVALL), so a load per tile
  // would go to L2 on the finisher's path.
  const float gate_scale = __ldg(a.scale), gate_base = lane < a.H ? __ldg(a.base + lane) : 0.f;

  // Block j of this warp: stream s, offset j0 in the slice; its k in fn's flattened [H][D] row.
  auto block_k = [&](int j) {
    const int b = warp * BPW + j, s = b / (Sl::Dc / 32), j0 = (b % (Sl::Dc / 32)) * 32;
    return s * D + rank * Sl::Dc + j0;
  };

  // One tile's slice of x into ring stage `st` by one thread: the box at (0, first token, rank Dc / 64, 0); rows past
  // the last token land as zeros and count in the bytes like the others.
  auto issue_tile = [&](int64_t tile, int st) {
    mbar_expect_bytes(landed + st, Sl::StageBytes);
    tma_load_4d(ring + size_t(st) * Sl::StageBytes, &xmap, 0, int(tile * kFusedTM), rank * Sl::Chunks, 0, landed + st);
  };

  // fn's slice first, every load in flight at once, and the ring only once it is in. globaltimer stamps per CTA
  // (H100, V4 dims) put the start of the loop at 14 us (hc_pre) and 11 us (hc_head) with the ring issued first: fn's
  // loads queued behind the first tiles of every CTA (6 stages x 112 CTAs = 21 MB), and the start barrier's release
  // arrive waited for this CTA's tiles to land. Now 4.3 and 1.9 us (reports/gpu/2026-11-27-h100-fused-fwd-start-ab.log).
  if (tid == 0) {
    for (int st = 0; st < kFusedStages; ++st) mbar_init(landed + st, 1);
    arm_slots(rows_in, 2, kRowBytes);
    arm_slots(pre_in, kPreSlots, kPreBytes);
    mbar_init_fence();
  }
  // Every pair p of block j and n-tile nt of this thread's share of fn, in one order for the loads and the split.
  const auto each_pair = [](auto&& f) {
#pragma unroll
    for (int j = 0; j < BPW; ++j)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int p = 0; p < 4; ++p) f(j, nt, p);
  };
  float2 w[BPW][NT][4];  // pair p: k = 8p + 2q, 8p + 2q + 1, the B fragment's b0, b1 of both k-steps
  each_pair([&](int j, int nt, int p) {
    const int m = nt * 8 + g;
    w[j][nt][p] = m < a.M ? __ldg(reinterpret_cast<const float2*>(fn + int64_t(m) * K + block_k(j) + 8 * p + 2 * q))
                          : make_float2(0.f, 0.f);
  });
  // fn's slice as B fragments, split once for the whole launch: fb[j][n-tile][term][4 words].
  uint32_t fb[BPW][NT][3][4];
  each_pair([&](int j, int nt, int p) {
    uint32_t t3[3];
    split_terms(w[j][nt][p].x, w[j][nt][p].y, t3);
#pragma unroll
    for (int i = 0; i < 3; ++i) fb[j][nt][i][p] = t3[i];
  });
  asm volatile("" ::"r"(fb[0][0][0][0]), "r"(fb[BPW - 1][NT - 1][0][3]));  // the ring after fn's first and last loads
  if (tid == 0)
    for (int p = 0; p < kFusedStages && p < mine.count; ++p) issue_tile(mine.tile(p), p);

  cluster_arrive_relaxed();  // see cluster_arrive_relaxed: the start needs no release either
  cluster_wait();  // every CTA of the cluster has started: its shared memory may be written from now on

  // 3. Collapse tile n's slice from its ring stage, with pre from spre[n % P] (P = kPreSlots), by `count` threads, this
  // one the `index`-th, once every token's pre is in; the slot is armed for its next tile, n + P, whose pre no CTA
  // sends before X(n + P): after these threads' reads.
  auto collapse = [&](int n, int index, int count) {
    mbar_wait<true>(pre_in + n % kPreSlots, unsigned(n / kPreSlots) & 1);
    if (index == 0) mbar_expect_bytes(pre_in + n % kPreSlots, kPreBytes);
    const unsigned char* xs = ring + size_t(n % kFusedStages) * Sl::StageBytes;
    const float* pre = spre + (n % kPreSlots) * kFusedTM * H4;
    constexpr int per_stream = Sl::Dc / 8;
#pragma unroll 1
    for (int v = index; v < kFusedTM * per_stream; v += count) {
      const int row = v / per_stream, cs = v % per_stream;
      const int64_t t = mine.tile(n) * kFusedTM + row;
      float o[8];
#pragma unroll
      for (int h = 0; h < H4; ++h) {
        const uint4 v4 = *reinterpret_cast<const uint4*>(xs + Sl::at(h, row, cs));
        const uint32_t w[4] = {v4.x, v4.y, v4.z, v4.w};
        const float p = pre[row * H4 + h];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float a0 = __fmul_rn(p, bf_lo(w[e])), a1 = __fmul_rn(p, bf_hi(w[e]));
          o[2 * e] = h == 0 ? a0 : __fadd_rn(o[2 * e], a0);
          o[2 * e + 1] = h == 0 ? a1 : __fadd_rn(o[2 * e + 1], a1);
        }
      }
      Vec<bf16, 8>::store16(fa.y + t * D + rank * Sl::Dc + cs * 8, o, t < a.tokens);
    }
  };

  // 2b. CTA `rank` finishes token `rank` of tile n (one warp), once every CTA's partial row is in: the rows summed
  // by fours in rank order (sum_by_fours), in fp64, then the mixes, pre, and pre into every CTA's
  // spre[n % kPreSlots]. The gpart slot is armed for its next tile, n + 2, whose rows no CTA sends before X(n + 1):
  // after these reads.
  auto finish_token = [&](int n) {
    mbar_wait<true>(rows_in + (n & 1), unsigned(n >> 1) & 1);
    if (lane == 0) mbar_expect_bytes(rows_in + (n & 1), kRowBytes);
    const int64_t t = mine.tile(n) * kFusedTM + rank;
    double sum = 0;
    float r = 0.f;
    static_assert(NC <= 32, "a lane per column");
    if (lane < NC) {
      static_assert(kFusedCluster == 16, "sum_by_fours");
      sum = sum_by_fours([&](int c) { return gpart[((n & 1) * kFusedCluster + c) * NC + lane]; });
      if (lane == NC - 1) r = rms_scale(sum, K, a.rms_eps);
    }
    r = __shfl_sync(~0u, r, NC - 1);
    const float mix = lane < NC - 1 ? float(sum * r) : 0.f;  // one rounding, as the CPU path
    const bool live = t < a.tokens;
    const float pre = lane < a.H ? pre_gate(mix, gate_scale, gate_base, a.hc_eps) : 0.f;
    // Lane l sends pre_h, h = l % 4, to CTAs l / 4 and l / 4 + 8; the global stores go after, off the cluster's path.
    const float ph = __shfl_sync(~0u, pre, lane & 3);
    const float* dst = spre + (n % kPreSlots) * kFusedTM * H4 + rank * H4 + (lane & 3);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const unsigned to = (lane >> 2) + 8 * half;
      st_async(cluster_addr(dst, to), live ? ph : 0.f, cluster_addr(pre_in + n % kPreSlots, to));
    }
    if (live && lane < a.M) a.mixes[t * a.M + lane] = mix;
    if (live && lane < a.H) a.pre[t * a.H + lane] = pre;
  };

  // One cluster barrier X(n) per tile, waited for one tile late: its arrive ends iteration n, its wait comes after
  // the multiply of tile n+1, so the barrier completes while the tensor cores work. After the wait of X(n-1) the
  // summing warps (0 .. kFinisher - 1) sum tile n's partial rows and send them; warp kFinisher finishes tile n-1's
  // token (once its partial rows are in) and sends its pre; the upper half collapses tile n - L (L = kCollapseLag,
  // once its pre is in). The data arrive by st.async, counted by the mbarriers rows_in and pre_in; X orders only the
  // reuse of their slots: gpart alternates (slot n & 1 was last read by the finisher of n-2, before X(n-1)); spre has
  // L + 1 slots (slot (n-1) % (L+1) was last read by the collapse of n-2-L, in iteration n-2, before X(n-1)); ring
  // stage n % S is refilled (with tile n + S) by the collapse warps once they have all collapsed n. No barrier opens
  // a tile: a warp multiplies as soon as the tile has landed (the upper half ahead, from its own work on the tile
  // before), and only hc_pre's single slot of partials makes every warp meet once per tile, before its stores
  // (FusedTile::Slots; barrier 1 or 3 then lets the summing warps wait for all stores while the others go on). The
  // finisher is the lower half's last warp so that the collapse has the upper half's 256 threads, two of a tile's 512
  // items each (with 224, a third round for 64 of them kept the rest at barrier 2; H100, V4 dims: ncu put 3.4% of
  // hc_pre's stall samples there); the 7 summing warps still take at most two of hc_pre's 400 sums each.
  constexpr int kFinisher = kFusedWarps / 2 - 1, kSumThreads = 32 * kFinisher, kCollapseFirst = 32 * (kFinisher + 1);
  constexpr int kCollapseCount = kFusedThreads - kCollapseFirst;
  // 32-bit tile numbers, as mix_fused_bwd's: hc_head 0.2219 -> 0.2117 ms, hc_pre 0.2976 -> 0.2942 (H200, 3 alternating
  // runs, each faster; reports/gpu/2026-11-29-h200-fused-fwd-int-tiles-ab.log; `parity run --perf` in run63: hc_head
  // 0.2101 ms, 75.2%, hc_pre 0.2898 ms, 54.9%).
  const int tiles = int(mine.count);
  for (int n = 0; n < tiles; ++n) {
    mbar_wait(landed + n % kFusedStages, unsigned(n / kFusedStages) & 1);  // tile n has landed
    const unsigned char* xs = ring + size_t(n % kFusedStages) * Sl::StageBytes;

    // 1. This warp's blocks: dots (tensor cores) and the sum of squares of rows g, g + 8.
    float acc[NT][4];  // set by the first k-step
    float ss_lo = 0.f, ss_hi = 0.f;
#pragma unroll
    for (int j = 0; j < BPW; ++j) {
      // Block b = warp BPW + j: stream b / (Dc / 32), units u0 .. u0 + 3; k-step t reads units u0 + 2t, u0 + 2t + 1.
      const int b = warp * BPW + j, u0 = (b % (Sl::Dc / 32)) * 4 + (lane >> 4);
      const unsigned char* row = xs + Sl::line(b / (Sl::Dc / 32), (lane & 7) + (lane & 8), u0 / 8);
      uint32_t lo[4], hi[4];  // u0 and u0 + 2 share a chunk
      ldmatrix_x4<false>(lo, row + ((u0 % 8) ^ (lane & 7)) * 16);
      ldmatrix_x4<false>(hi, row + (((u0 + 2) % 8) ^ (lane & 7)) * 16);
      // Each accumulator sums in the order (j, lo/hi k-half); the NT chains are independent.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_bf16_split3(acc[nt], lo, fb[j][nt], 0, j == 0);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_bf16_split3(acc[nt], hi, fb[j][nt], 1);
      // Squares on the FMA pipe: the tensor cores (X X^T's diagonal, two MMAs per k-step) are this loop's busy unit
      // (H100 V4 dims: hc_pre 0.456 ms this way, 0.485 on the tensor cores).
      const uint32_t w0[4] = {lo[0], lo[2], hi[0], hi[2]}, w8[4] = {lo[1], lo[3], hi[1], hi[3]};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ss_lo = fmaf(bf_lo(w0[e]), bf_lo(w0[e]), ss_lo), ss_lo = fmaf(bf_hi(w0[e]), bf_hi(w0[e]), ss_lo);
        ss_hi = fmaf(bf_lo(w8[e]), bf_lo(w8[e]), ss_hi), ss_hi = fmaf(bf_hi(w8[e]), bf_hi(w8[e]), ss_hi);
      }
    }
    // Tile n's partials go to slot n % Slots. With one slot, every warp waits until the sums of tile n-1 have read
    // it. With two, slot n & 1 was last read by the sums of tile n-2, and every warp here is past X(n-2), which every
    // summing thread arrived at after those reads; barrier 1 or 3 (by n & 1) gathers the partials, since a warp may
    // arrive for tile n+1 before a summing warp has met the barrier of tile n (not, past the same X, for tile n+2).
    const int slot = int(n % Slots), gathered = 1 + 2 * slot;
    if constexpr (Slots == 1) __syncthreads();
    float* const wd = wdot + slot * kFusedWarps * kFusedTM * 8 * NT;
    double* const ws = wss + slot * kFusedWarps * kFusedTM;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float* w = wd + (warp * kFusedTM) * 8 * NT + nt * 8 + 2 * q;
      w[g * 8 * NT] = acc[nt][0], w[g * 8 * NT + 1] = acc[nt][1];
      w[(g + 8) * 8 * NT] = acc[nt][2], w[(g + 8) * 8 * NT + 1] = acc[nt][3];
    }
    double sl = ss_lo, sh = ss_hi;
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) sl += __shfl_xor_sync(~0u, sl, o), sh += __shfl_xor_sync(~0u, sh, o);
    if (q == 0) ws[warp * kFusedTM + g] = sl, ws[warp * kFusedTM + g + 8] = sh;
    if (tid < kSumThreads)  // the summing warps wait for all; the others go on
      named_bar_sync(gathered, kFusedThreads);
    else
      named_bar_arrive(gathered, kFusedThreads);
    if (n > 0) cluster_wait();  // X(n-1): every CTA is past its reads of the slots written next
    // 2a. The warps' partials by fours (sum_by_fours), in fp64: this CTA's partial row of token `row`, sent to CTA
    // `row` (remote stores do not wait; remote loads the other way round cost latency and registers).
    static_assert(kFusedTM == kFusedCluster, "CTA r finishes token r of the tile");
    if (tid < kSumThreads) {
      // Both of a thread's sums at once (hc_pre: 400 over 224 threads), every load ahead of the adds.
      static_assert(kFusedWarps == 16, "sum_by_fours");
#pragma unroll
      for (int i = 0; i < (kFusedTM * NC + kSumThreads - 1) / kSumThreads; ++i) {
        const int v = tid + i * kSumThreads;
        if (v >= kFusedTM * NC) break;
        const int row = v / NC, col = v % NC;
        const double sum = sum_by_fours([&](int w) {
          return col < 8 * NT ? double(wd[(w * kFusedTM + row) * 8 * NT + col]) : ws[w * kFusedTM + row];
        });
        st_async(cluster_addr(gpart + ((n & 1) * kFusedCluster + rank) * NC + col, row), sum,
                 cluster_addr(rows_in + (n & 1), row));
      }
      cluster_arrive_relaxed();  // X(n)
    } else if (warp == kFinisher) {
      if (n > 0) finish_token(n - 1);
      cluster_arrive_relaxed();  // X(n)
    } else {
      cluster_arrive_relaxed();  // X(n)
      if (n >= kCollapseLag) {
        const int m = n - kCollapseLag;
        collapse(m, tid - kCollapseFirst, kCollapseCount);
        named_bar_sync(2, kCollapseCount);  // ring stage m % S is free: it takes tile m + S
        if (tid == kCollapseFirst && m + kFusedStages < tiles)
          issue_tile(mine.tile(m + kFusedStages), int(m % kFusedStages));
      }
    }
  }
  // The last token and the last kCollapseLag collapses, all but the last by every warp but the finisher (the summing
  // warps have no more rows to sum). X(last) frees the spre slot of the last pre; the last waits for the last bytes
  // sent to this CTA, and X(last + 1) keeps every CTA until all have sent theirs.
  if (tiles > 0) cluster_wait();
  if (warp == kFinisher) {
    if (tiles > 0) finish_token(tiles - 1);
    cluster_arrive_relaxed();
  } else {
    cluster_arrive_relaxed();
    static_assert(kCollapseFirst == 256, "tid - 32 (tid >> 8) numbers the threads around the finisher, warp 7");
#pragma unroll
    for (int k = kCollapseLag; k >= 2; --k)
      if (tiles >= k) collapse(tiles - k, tid - 32 * (tid >> 8), kFusedThreads - 32);
  }
  cluster_wait();
  if (tiles > 0) collapse(tiles - 1, tid, kFusedThreads);
}

// post and comb from the mixes, one thread per token (after mix_fused_fwd<pre>); compiled per hc, as mix_bwd_token.
template <int HC>
__global__ void __launch_bounds__(128) mix_post_comb_kernel(MixFwdArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < a.tokens) PreKind::post_comb(a.mixes + t * a.M, t, a, HC);
}

// Line i of a 4 x 4 matrix held by thread i of a quad (four neighbouring lanes), element i ^ s in slot s. Shuffling
// slot s by s (s = 1..3) transposes the matrix within the quad: thread i's slot s, element (i, i ^ s) of its row, goes
// to thread i ^ s, whose column i ^ s holds it at row i = (i ^ s) ^ s, again slot s. So every Sinkhorn normalisation
// is a transpose and then work along the lines held, in the one-thread order of sinkhorn_forward.
struct QuadLine {
  float v[H4];
  int i;  // lane % 4

  // Element k of the line: slot k ^ i, picked without indexing registers at run time.
  __device__ __forceinline__ float at(int k) const {
    const int s = k ^ i;
    return s & 2 ? (s & 1 ? v[3] : v[2]) : (s & 1 ? v[1] : v[0]);
  }
  __device__ __forceinline__ void transpose() {
#pragma unroll
    for (int s = 1; s < H4; ++s) v[s] = __shfl_xor_sync(~0u, v[s], s);
  }
  // Left to right, as line_sums adds.
  __device__ __forceinline__ float sum() const {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < H4; ++k) total += at(k);
    return total;
  }
  // divide_lines for one line, its range check left to the caller: each quotient is exact where its own operands are
  // in range, and their raw bits (not magnitudes: the forward's lines are positive, and a sign bit, like a value out of
  // range, fails the check) are folded into the running [lo, hi]. Exact: plain `/`, the check's other branch.
  template <bool Exact>
  __device__ __forceinline__ void divide(float den, uint32_t& lo, uint32_t& hi) {
    if constexpr (Exact) {
#pragma unroll
      for (int s = 0; s < H4; ++s) v[s] = v[s] / den;
    } else {
      const float r = line_reciprocal(den);
      uint32_t l[H4 + 2], h[H4 + 2];
#pragma unroll
      for (int s = 0; s < H4; ++s) {
        l[s] = h[s] = __float_as_uint(v[s]);
        v[s] = quotient_in_range(v[s], den, r);
      }
      l[H4] = h[H4] = __float_as_uint(den);
      l[H4 + 1] = lo, h[H4 + 1] = hi;
      lo = fold_tree<false>(l), hi = fold_tree<true>(h);
    }
  }
};

// Row i of comb's logits (PreKind::comb_logits) as thread i of a quad holds it.
__device__ __forceinline__ QuadLine comb_logits_quad(const float* mix, int i, const float* base, const float* scale) {
  const float s2 = __ldg(scale + 2);
  QuadLine l;
  l.i = i;
#pragma unroll
  for (int s = 0; s < H4; ++s) {
    const int m = 2 * H4 + i * H4 + (i ^ s);
    l.v[s] = logit(mix[m], s2, __ldg(base + m));
  }
  return l;
}

// The Sinkhorn forward by a quad from row i's logits (sinkhorn_forward's steps): softmax_rows' numerators and
// division, + eps, then the norms normalisations, line ending in the last one's direction. p, where given, takes the
// softmax's row; stage(n, line) sees normalisation n's input. Each division's operands are folded into [lo, hi]
// (QuadLine::divide) unless Exact.
template <bool Exact, typename Stage>
__device__ __forceinline__ void quad_sinkhorn_forward(QuadLine& line, const QuadLine& logits, int norms, float eps,
                                                      uint32_t& lo, uint32_t& hi, QuadLine* p, Stage&& stage) {
  line = logits;
  float mx = line.at(0);
#pragma unroll
  for (int k = 1; k < H4; ++k) mx = fmaxf(mx, line.at(k));
#pragma unroll
  for (int s = 0; s < H4; ++s) line.v[s] = expf(line.v[s] - mx);
  line.divide<Exact>(line.sum(), lo, hi);
  if (p) *p = line;
#pragma unroll
  for (int s = 0; s < H4; ++s) line.v[s] += eps;
  for (int n = 1; n <= norms; ++n) {
    line.transpose();
    stage(n, line);
    line.divide<Exact>(line.sum() + eps, lo, hi);
  }
}

// mix_post_comb for hc = 4 with four threads per token (QuadLine), the same bits. One thread per token left four warps
// on an SM, each thread's Sinkhorn (39 normalisations at V4 dims) a chain of dependent steps with nothing beside it:
// H100, V4 dims, bench/hc_ab.sh (3 runs each, every hash unchanged, also at 37, 257 and 1000 tokens): post_comb
// 0.0174 -> 0.0145 ms, the fused forward with it 0.3161 -> 0.3128 ms. Then the range check on raw bits (QuadLine::
// divide) and blocks of 512 threads, 128 before: 0.0138 -> 0.0130 -> 0.0123 ms (5 alternating runs, the same bits;
// 256 threads 0.0128). globaltimer stamps per block then put its body at ~7 us, ~5 of them the 39 normalisations
// (~250 clock cycles each, 16 warps an SM); the range check once at the end instead of a branch in each: 0.0121 ->
// 0.0114 ms (medians of 6 alternating runs; the pair with the fused forward 0.2980 -> 0.2976, within noise;
// reports/gpu/2026-11-27-h100-post-comb-range-once-ab.log).
__global__ void __launch_bounds__(512) mix_post_comb_quad_kernel(MixFwdArgs a) {
  static_assert(H4 == 4);
  griddep_wait();
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  // A quad past the last token runs on the last one's data, so that every lane takes part in the shuffles.
  const int64_t t = min(g / H4, a.tokens - 1);
  const bool store = g / H4 < a.tokens;
  const int i = int(g % H4);
  const float* mix = a.mixes + t * a.M;
  const float s1 = __ldg(a.scale + 1);
  const int m_post = H4 + i;
  if (store) a.post[t * H4 + i] = a.post_mult * sigmoid(logit(mix[m_post], s1, __ldg(a.base + m_post)));
  // The softmax's division and the Sinkhorn's: normalisation n divides columns when n is odd (held as rows now, the
  // lines alternate from the first transpose). The range of every division's operands is checked once at the end, off
  // the chain of dependent steps, and a warp with any of them out of range runs the whole sequence again with `/`.
  const QuadLine logits = comb_logits_quad(mix, i, a.base, a.scale);
  const int norms = sinkhorn_norms(a.iters);
  QuadLine line;
  uint32_t lo = ~0u, hi = 0;
  const auto no_stage = [](int, const QuadLine&) {};
  quad_sinkhorn_forward<false>(line, logits, norms, a.hc_eps, lo, hi, nullptr, no_stage);
  if (__any_sync(~0u, !((lo >= kDivideLo) & (hi <= kDivideHi))))
    quad_sinkhorn_forward<true>(line, logits, norms, a.hc_eps, lo, hi, nullptr, no_stage);
  const bool columns = norms > 0 && (norms & 1);
  if (store) {
#pragma unroll
    for (int s = 0; s < H4; ++s) {
      const int other = i ^ s;
      a.comb[(t * H4 + (columns ? other : i)) * H4 + (columns ? i : other)] = line.v[s];
    }
  }
}

// PreKind::comb_backward at hc 4 by a quad (QuadLine, thread i line i), the same bits: the forward recomputed with
// QuadLine's steps, every kQuadSegment-th stage kept as a checkpoint (a float4 a thread, in the workspace), and on
// the way back each segment's stages recomputed into registers from its checkpoint, so that no step waits on memory.
// A thread walked back through every stage from the workspace, one load ahead, and each of its 39 steps (V4 dims)
// waited on that load.
constexpr int kQuadSegment = 4;

// g /= den for a line of signed values: divide_lines' check on magnitudes, per line (the quotients are `/`'s
// either way).
__device__ __forceinline__ void divide_signed(QuadLine& g, float den) {
  const float r = line_reciprocal(den);
  uint32_t lo = magnitude_bits(den), hi = lo;
  float q[H4];
#pragma unroll
  for (int s = 0; s < H4; ++s) {
    lo = min(lo, magnitude_bits(g.v[s])), hi = max(hi, magnitude_bits(g.v[s]));
    q[s] = quotient_in_range(g.v[s], den, r);
  }
  const bool fast = (lo >= kDivideLo) & (hi <= kDivideHi);
#pragma unroll
  for (int s = 0; s < H4; ++s) g.v[s] = fast ? q[s] : g.v[s] / den;
}

// Thread g of the launch: token g / 4 (past the last, the last token's data, for the shuffles; nothing is stored),
// line g % 4.
__device__ void comb_backward_quad(int64_t g, const MixBwdTokenArgs& a) {
  static_assert(H4 == 4);
  const int64_t t = min(g / H4, a.tokens - 1);
  const bool store = g / H4 < a.tokens;
  const int i = int(g % H4), norms = sinkhorn_norms(a.iters);
  float4* ckpt = reinterpret_cast<float4*>(a.hist);
  const auto at_ckpt = [&](int c) { return ckpt + (int64_t(c) * a.tokens + t) * H4 + i; };
  const QuadLine logits = comb_logits_quad(a.mixes + t * a.M, i, a.base, a.scale);
  // The forward: p the softmax (row i), y the result (a line in the last normalisation's direction).
  QuadLine p, y;
  uint32_t lo = ~0u, hi = 0;
  const auto checkpoint = [&](int n, const QuadLine& u) {
    if (store && (n - 1) % kQuadSegment == 0)
      *at_ckpt((n - 1) / kQuadSegment) = make_float4(u.v[0], u.v[1], u.v[2], u.v[3]);
  };
  quad_sinkhorn_forward<false>(y, logits, norms, a.hc_eps, lo, hi, &p, checkpoint);
  const bool exact = __any_sync(~0u, !((lo >= kDivideLo) & (hi <= kDivideHi)));
  if (exact) quad_sinkhorn_forward<true>(y, logits, norms, a.hc_eps, lo, hi, &p, checkpoint);

  // d loss / d comb, as y holds the matrix.
  const bool columns = norms > 0 && (norms & 1);
  QuadLine d;
  d.i = i;
#pragma unroll
  for (int s = 0; s < H4; ++s) {
    const int k = i ^ s;
    d.v[s] = a.g_comb[(t * H4 + (columns ? k : i)) * H4 + (columns ? i : k)];
  }
  // Normalisation n backward (see normalise_lines_backward): u its input, y its output, both in its direction; then
  // d and y turn to normalisation n - 1's direction, where u is its output.
  const auto step = [&](const QuadLine& u) {
    const float den = u.sum() + a.hc_eps;
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < H4; ++k) dot = fmaf(d.at(k), y.at(k), dot);
#pragma unroll
    for (int s = 0; s < H4; ++s) d.v[s] -= dot;
    divide_signed(d, den);
    d.transpose();
    y = u;
    y.transpose();
  };
  // Segment c's stages (cur) are walked back while segment c - 1's (nxt) are recomputed beside them: two independent
  // chains, so the walk's latency is about its own. A quad past the last token has no checkpoints: it recomputes from
  // its y, whose lines are in range (any finite values do: nothing of it is stored).
  const auto backward = [&](auto exact_tag) {
    constexpr bool kExact = decltype(exact_tag)::value;
    const int segments = (norms + kQuadSegment - 1) / kQuadSegment;
    const auto load = [&](int c) { return store ? *at_ckpt(c) : make_float4(y.v[0], y.v[1], y.v[2], y.v[3]); };
    const auto line_of = [&](float4 v) {
      QuadLine l;
      l.i = i, l.v[0] = v.x, l.v[1] = v.y, l.v[2] = v.z, l.v[3] = v.w;
      return l;
    };
    const auto recompute = [&](QuadLine (&u)[kQuadSegment], int k) {
      u[k] = u[k - 1];
      u[k].divide<kExact>(u[k].sum() + a.hc_eps, lo, hi);
      u[k].transpose();
    };
    if (segments == 0) return;
    QuadLine cur[kQuadSegment], nxt[kQuadSegment];
    cur[0] = line_of(load(segments - 1));
    float4 ahead = segments > 1 ? load(segments - 2) : float4{};  // a segment ahead of its use
#pragma unroll
    for (int k = 1; k < kQuadSegment; ++k)
      if ((segments - 1) * kQuadSegment + k < norms) recompute(cur, k);
    for (int c = segments - 1; c >= 0; --c) {
      // Segment c - 1 is whole (only the last one can be short).
      if (c > 0) nxt[0] = line_of(ahead);
      if (c > 1) ahead = load(c - 2);
      const int s0 = c * kQuadSegment;
#pragma unroll
      for (int j = 0; j < kQuadSegment; ++j) {
        const int k = kQuadSegment - 1 - j;
        if (s0 + k < norms) step(cur[k]);
        if (c > 0 && j + 1 < kQuadSegment) recompute(nxt, j + 1);
      }
#pragma unroll
      for (int k = 0; k < kQuadSegment; ++k) cur[k] = nxt[k];
    }
  };
  if (exact) backward(std::true_type{});
  else backward(std::false_type{});
  // The softmax's backward, by rows: dz = P (dP - <dP, P>).
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < H4; ++k) dot += d.at(k) * p.at(k);
  if (store) {
#pragma unroll
    for (int s = 0; s < H4; ++s) a.gate[t * PreKind::GW + 2 * H4 + i * H4 + (i ^ s)] = p.v[s] * (d.v[s] - dot);
  }
}

// -------------------------------------------------------------------------------------------------------------------
// mix backward
// -------------------------------------------------------------------------------------------------------------------

// Per token: sum of squares (the rms scale) and g_pre_h = <g_y, x_h>, one warp per token. With HC > 0 (hc_pre, hc
// a constant) some blocks run PreKind::comb_backward instead, a thread per token on half their warps (so that they
// spread over the SMs): the Sinkhorn backward needs neither x nor g_y, and its ~40 us chain per thread runs under the
// read rather than after it. It takes issue slots from the read's DFMAs: H100, V4 dims, reduce 0.227 ->
// 0.263 ms and token 0.066 -> 0.020 ms, the backward 0.797 -> 0.780 ms (0.076 -> 0.067 at 257 tokens). Of those
// 0.036 ms the Sinkhorn stages' 82 MB through the workspace are ~0.009: with every stage aliased to one slot (wrong
// gradients, timing only) reduce 0.2636 -> 0.2547 ms; stored with L2 evict_last and read with evict_first hints, no
// change (0.2640; H100, reports/gpu/2026-11-28-h100-token-warp-stage-hints-ab.log). Nor are its instructions the
// rest: a fifth fewer in the thread's chain (the normalisation backward's y taken from the next stage) left the reduce
// as it was (0.2646 -> 0.2655 ms), each step waiting on its stage's load. At hc 4 the comb blocks run
// comb_backward_quad instead, no step waiting on memory: 0.2641 -> 0.2560 ms
// (reports/gpu/2026-11-28-h100-comb-bwd-quad-ab.log, 2026-11-28-h100-comb-bwd-quad-small-t-ab.log). They were
// then still the grid's first blocks: 256 of them at V4 dims, nearly every slot of an H100's (two blocks an SM, at 96
// registers), so that the read waited ~35 us for their chains. Every third of the first blocks instead, an SM runs one
// beside a reduce block: 0.2570 -> 0.2407 ms, the backward 0.7686 -> 0.7542 (H100, bench/hc_ab.sh, 2 runs each, the
// same hashes at 37, 1001, 4096 and 16384 tokens; reports/gpu/2026-11-28-h100-comb-interleave-ab.log). Three blocks an
// SM (80 registers, the loop not unrolled) gave 0.2354 ms for the reduce but the backward 0.7502 and 0.7750 in its two
// runs; with spills, 0.2453; four, 0.2544. On the H200 since, the loop unrolled by four instead of two, which ptxas
// builds in 76 registers (96 before; hc_head's 74), so that three blocks share an SM: the same bits, the reduce 0.1899
// -> 0.1764 ms, hc_head's 0.1672 -> 0.1628, hc_pre's backward 0.5706 -> 0.5512 ms (3 alternating runs, each faster;
// the same hashes at 37, 1001, 4096 and 16384 tokens). The steps' 16-byte words loaded four ahead by hand instead (165
// registers; 128 with spills under two blocks an SM) was slower, x1.030
// (reports/gpu/2026-11-29-h200-reduce-unroll-ab.log).
// The comb blocks: at hc 4 `wpb` warps of each run comb_backward_quad (8 where the tokens fill the SMs; where they
// would fill fewer blocks than there are SMs, fewer warps a block: a few chains are each their own latency, best on
// SMs of their own), else 128 threads of each run comb_backward.
__host__ __device__ inline int64_t comb_block_count(int hc, int64_t tokens, int wpb) {
  return hc == H4 ? ((tokens * H4 + 31) / 32 + wpb - 1) / wpb : (tokens + 127) / 128;
}

template <typename T, int V, int HC>
__global__ void __launch_bounds__(256) mix_bwd_reduce_kernel(const T* __restrict__ x, const T* __restrict__ gy,
                                                             double* __restrict__ red, int64_t tokens, int H, int D,
                                                             MixBwdTokenArgs a, int comb_wpb) {
  int64_t block = blockIdx.x;
  if constexpr (HC > 0) {
    // Blocks 3i are comb block i and 3i+1, 3i+2 reduce blocks 2i, 2i+1 while both last; then the comb blocks left,
    // then the reduce blocks left.
    const int64_t comb_blocks = comb_block_count(HC, tokens, comb_wpb), reduce_blocks = gridDim.x - comb_blocks;
    const int64_t mixed = comb_blocks < reduce_blocks / 2 ? comb_blocks : reduce_blocks / 2;
    int64_t comb = -1;
    if (block < 3 * mixed) {
      if (block % 3 == 0) comb = block / 3;
      else block = 2 * (block / 3) + block % 3 - 1;
    } else if (block - 3 * mixed < comb_blocks - mixed) {
      comb = block - 2 * mixed;
    } else {
      block -= comb_blocks;
    }
    if (comb >= 0) {
      if constexpr (HC == H4) {
        if (int(threadIdx.x >> 5) < comb_wpb) comb_backward_quad(comb * comb_wpb * 32 + threadIdx.x, a);
      } else {
        const int64_t t = comb * 128 + threadIdx.x;
        if (threadIdx.x < 128 && t < tokens) PreKind::comb_backward(t, a, HC);
      }
      return;
    }
  }
  const int64_t t = block * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= tokens) return;
  // fp64: products exact (fma of widened operands), sums in fp64. The scale gradients sum these per-token values
  // over tokens with cancellation (about 50x at 37 tokens, V4 width), so an fp32 chain's few-ULP error here showed
  // as 60 ULP in grad/scale; the DFMAs cost ~30 us at V4 dims under a 0.23 ms read.
  double ss = 0, gp[H4];
#pragma unroll
  for (int h = 0; h < H4; ++h) gp[h] = 0;
  const T* xr = x + t * H * D;
  const T* gr = gy + t * D;
#pragma unroll 4  // not 2: in fewer registers, three blocks an SM (see above)
  for (int d = lane * V; d < D; d += 32 * V) {
    float gv[V], xv[H4][V];
    Vec<T, V>::load(gr + d, gv);
    load_streams<T, V>(xr, H, D, d, xv);
#pragma unroll
    for (int h = 0; h < H4; ++h)
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const double xd = xv[h][e];
        ss = fma(xd, xd, ss);
        gp[h] = fma(double(gv[e]), xd, gp[h]);
      }
  }
  ss = warp_sum(ss);
#pragma unroll
  for (int h = 0; h < H4; ++h)
    if (h < H) gp[h] = warp_sum(gp[h]);
  if (lane == 0) {
    double* rd = red + t * (1 + H);
    rd[0] = ss;
#pragma unroll
    for (int h = 0; h < H4; ++h)
      if (h < H) rd[1 + h] = gp[h];
  }
}

// ---- hc_pre's coefficients as the tensor cores take them: written by mix_bwd_token, read by dx_dfn_mma -------------
// dx_dfn_mma's eight warps a CTA, and its 64 CTAs a tile, split the same coefficient rows into bf16 terms, each warp
// for its own 32 columns: with the moves that paired their registers for the MMAs, 123 of the 393 instructions of a
// warp's tile (SASS, sm_90a). The token kernel splits them once instead and writes each tile's fragments (16 tokens;
// past the last token, zero rows) in lane order, a block of kDxTermWords words after the rows in `coef`
// (mix_coef_floats). dx_dfn_mma copies a tile's block into its ring beside the tile, and a lane reads its fragments
// with 16-byte loads; so that every tile has a block, its token splits are whole tiles. mix_fused_bwd_mma splits its
// rows itself, with the same functions.
// grad_x's A fragments of coefficient rows g and g + 8 (lane (g, q)) in two terms: hi + lo holds 16 significant bits.
struct CoefFrag {
  uint32_t lo[4], hi[4], lo8[2], hi8[2];  // k16 a0..a3, k8 a0, a1
};
// grad_fn's B fragments: per n-tile nt, mix 8 nt + g of tokens (2q, 2q+1) and (2q+8, 2q+9) in three terms, the smallest
// first (split exactly: with x exact, every product is).
struct CoefTerms {
  uint32_t b[3][3][2];  // [n-tile][term][tokens from 2q, from 2q + 8]: each MMA's register pair, adjacent
  uint32_t pad[2];      // to 16 bytes a lane
};
// kTermRowStride: the token kernel's rows in shared memory, 36 floats apart so that the B fragments' reads (4 rows x 8
// mixes) hit distinct banks.
constexpr int kTermTileTokens = 16, kTermRowStride = 36;
constexpr int kFragWords = sizeof(CoefFrag) / 4, kTermsWords = sizeof(CoefTerms) / 4;
constexpr int kDxTermWords = 32 * (kFragWords + kTermsWords);  // a tile's block: [lane][CoefFrag], [lane][CoefTerms]
static_assert(sizeof(CoefFrag) % 16 == 0 && sizeof(CoefTerms) % 16 == 0 && kDxTermWords == 1024);

template <class F>  // float or const float
__device__ __forceinline__ auto coef_terms(F* coef, int64_t tokens) {
  using W = std::conditional_t<std::is_const_v<F>, const uint32_t, uint32_t>;
  return reinterpret_cast<W*>(coef + tokens * PreKind::CW);
}

// The A fragments of a tile's coefficient rows cs (`stride` floats apart).
__device__ __forceinline__ CoefFrag coef_fragment(const float* cs, int stride, int g, int q) {
  const float* r0 = cs + g * stride + 2 * q;
  const float* r8 = r0 + 8 * stride;
  const float2 v[6] = {*reinterpret_cast<const float2*>(r0), *reinterpret_cast<const float2*>(r8),
                       *reinterpret_cast<const float2*>(r0 + 8), *reinterpret_cast<const float2*>(r8 + 8),
                       *reinterpret_cast<const float2*>(r0 + 16), *reinterpret_cast<const float2*>(r8 + 16)};
  CoefFrag a;
#pragma unroll
  for (int j = 0; j < 6; ++j) {
    uint32_t t2[2];
    split_terms(v[j].x, v[j].y, t2);
    (j < 4 ? a.lo[j] : a.lo8[j - 4]) = t2[0], (j < 4 ? a.hi[j] : a.hi8[j - 4]) = t2[1];
  }
  return a;
}
// The B fragments of a tile's coefficient rows cs.
__device__ __forceinline__ CoefTerms coef_terms_of(const float* cs, int stride, int g, int q) {
  CoefTerms b{};
#pragma unroll
  for (int nt = 0; nt < 3; ++nt) {
    const int m = 8 * nt + g;
    uint32_t b0[3], b1[3];
    split_terms(cs[2 * q * stride + m], cs[(2 * q + 1) * stride + m], b0);
    split_terms(cs[(2 * q + 8) * stride + m], cs[(2 * q + 9) * stride + m], b1);
#pragma unroll
    for (int t = 0; t < 3; ++t) b.b[nt][t][0] = b0[t], b.b[nt][t][1] = b1[t];
  }
  return b;
}

// A lane's fragments of type F to or from its 16-byte-aligned words.
template <class F>
__device__ __forceinline__ F load_lane(const uint32_t* p) {
  F f;
#pragma unroll
  for (int i = 0; i < int(sizeof(F) / 16); ++i) reinterpret_cast<uint4*>(&f)[i] = reinterpret_cast<const uint4*>(p)[i];
  return f;
}
template <class F>
__device__ __forceinline__ void store_lane(uint32_t* p, const F& f) {
#pragma unroll
  for (int i = 0; i < int(sizeof(F) / 16); ++i) reinterpret_cast<uint4*>(p)[i] = reinterpret_cast<const uint4*>(&f)[i];
}

// The tail of hc_pre's token kernel: from its block's coefficient rows, in shared memory, each warp writes the
// blocks of its two tiles (32 tokens), every lane its own fragments in 16-byte stores.
__device__ void write_coef_terms(const MixBwdTokenArgs& a, int64_t t, const float (*rows)[kTermRowStride]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int first = 32 * warp + kTermTileTokens * k;
    const int64_t t0 = t - threadIdx.x + first;
    if (t0 >= a.tokens) break;
    uint32_t* block = coef_terms(a.coef, a.tokens) + t0 / kTermTileTokens * kDxTermWords;
    store_lane(block + lane * kFragWords, coef_fragment(rows[first], kTermRowStride, g, q));
    store_lane(block + 32 * kFragWords + lane * kTermsWords, coef_terms_of(rows[first], kTermRowStride, g, q));
  }
}

// Per token, one thread each. Compiled per hc: with H a constant, the loops over the Sinkhorn matrix have no run-time
// guard, which would make every division of a line a branch of its own (H100, V4 dims: 0.106 ms with them). A warp
// per token instead (bwd_token_warp, the finishers' version: the same rows bit for bit, one function fewer) was slower
// on an H100 at V4 dims: hc_pre 0.0203 -> 0.0230 ms, hc_head 0.0091 -> 0.0121 (3 runs of bench/hc_ab.sh;
// reports/gpu/2026-11-28-h100-token-warp-stage-hints-ab.log): 32x the warps, each with 72 fp64 shuffles a token.
// Block 0 also zeroes the n_arrivals counters that mix_bwd_dx_dfn_mma's finish counts on.
// Launched the ordinary way: as a programmatic dependent launch of the reduce, the backward took 0.5900 -> 0.6810 ms
// (H200, V4 dims), dx_dfn_mma's CTAs (which this kernel's trigger lets launch) coming up beside the reduce's last
// blocks (reports/gpu/2026-11-29-h200-token-pdl-of-reduce-ab.log).
template <class Kind, int HC>
__global__ void __launch_bounds__(128) mix_bwd_token_kernel(MixBwdTokenArgs a, unsigned* arrivals, int n_arrivals) {
  griddep_launch_dependents();  // dx_dfn_mma's CTAs load fn and their first x and g_y tiles meanwhile
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < n_arrivals; i += blockDim.x) arrivals[i] = 0;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (std::is_same_v<Kind, PreKind>) {
    // The row in shared memory first (past the last token: zeros), then to `coef` and its tile's terms.
    static_assert(kTermRowStride >= Kind::CW && Kind::CW % 4 == 0);
    __shared__ __align__(16) float rows[128][kTermRowStride];
    float* row = rows[threadIdx.x];
    if (t < a.tokens) {
      Kind::bwd_token(t, a, HC, row);
#pragma unroll
      for (int i = 0; i < Kind::CW / 4; ++i)
        reinterpret_cast<float4*>(a.coef + t * Kind::CW)[i] = reinterpret_cast<const float4*>(row)[i];
    } else {
      for (int m = 0; m < Kind::MP; ++m) row[m] = 0.f;
    }
    __syncthreads();
    write_coef_terms(a, t, rows);
  } else if (t < a.tokens) {
    Kind::bwd_token(t, a, HC, a.coef + t * Kind::CW);
  }
}

// ---- the backward's sums over splits and tokens: grad_fn, grad_base, grad_scale ------------------------------------
// Elements i .. i + V - 1 of grad_fn: their splits' partials (n apart) added in split order. Through L2 (ld.cg): the
// last CTA of a column block reads what the others wrote (mix_bwd_dx_dfn_mma), four splits' loads in flight at once.
template <int V>
__device__ __forceinline__ void split_sum(const float* part, int64_t n, int64_t i, int splits, float* out) {
  using Vec = std::conditional_t<V == 4, float4, float>;
  float s[V] = {};
#pragma unroll 4
  for (int p = 0; p < splits; ++p) {
    const Vec v = __ldcg(reinterpret_cast<const Vec*>(part + p * n + i));
#pragma unroll
    for (int e = 0; e < V; ++e) s[e] += reinterpret_cast<const float*>(&v)[e];
  }
  if constexpr (V == 4) *reinterpret_cast<float4*>(out + i) = make_float4(s[0], s[1], s[2], s[3]);
  else out[i] = s[0];
}

// Column sums of the gate rows: [0, n_lo) -> out_lo; then column hi_col + j -> out_hi[j].
struct ColsumArgs {
  const double* in;
  int64_t rows;
  int ld;
  float* out_lo;
  int n_lo, hi_col;
  float* out_hi;
  int cols;  // n_lo + the scale count
};

// Column col_index by a block of 256 threads: thread i sums rows i, i+256, ... in order, then a fixed shared-memory
// tree. In fp64: these are sums over every token of terms of both signs (grad_base, grad_scale), whose cancellation
// made fp32 partials 5-30x less accurate than the naive composition at pack 16384 (measured on an H100); the column
// is tiny, so fp64 is free here.
__device__ void colsum_column(const ColsumArgs& a, int col_index, double* sh) {
  const int col = col_index < a.n_lo ? col_index : a.hi_col + (col_index - a.n_lo);
  double s = 0.0;
#pragma unroll 8  // the loads of eight rows in flight at once; the sum keeps its order
  for (int64_t r = threadIdx.x; r < a.rows; r += 256) s += a.in[r * a.ld + col];
  __syncthreads();  // the previous column's sh[0] has been read
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (col_index < a.n_lo) a.out_lo[col_index] = float(sh[0]);
    else a.out_hi[col_index - a.n_lo] = float(sh[0]);
  }
}

// grad_x[t,k] = sum_m coef_m fn[m,k] - c x[t,k] + pre_h g_y[t,d]  (k = h*D + d; one rounding)
// partial[s,m,k] = sum_{t in split s} coef_m x[t,k]   (= grad_fn's share of split s, as (r g_mixes)^T x)
// Each thread owns KV adjacent columns k for the whole launch: fn[:, k] and the grad_fn accumulators stay in
// registers while the tokens of its split stream past. Each thread's loads per token are only 2 x KV elements, so
// tokens go in tiles of TT: the next tile's x / g_y (registers) and coefficient rows (one float4 per thread, then
// shared memory, read back as broadcasts) are in flight while this tile is computed; without that the loop waits a
// full memory latency per token. H100, hc_pre at V4 dims: 2.51 ms untiled, 1.15 ms tiled with one wave of CTAs (the
// FFMA floor is ~0.45 ms: 2 x 24 multiply-adds per element; what remains is latency, see the report).
constexpr int kDxThreads = 128;

// Element e of a thread's columns for one token: grad_x (returned, fp32, rounded once by the caller's store) and the
// grad_fn sums' step; cm: the token's coefficients r g_mix, c and ph its x and g_y coefficients. mix_bwd_dx_dfn and
// mix_fused_bwd both, so that hc_head's two paths give the same grad_x bits. OneChain: hc_head's bf16 paths (below).
template <bool OneChain, int MP, int V>
__device__ __forceinline__ float dx_element(const float (&cm)[MP], const float (&f)[MP][V], float (&acc)[MP][V], int e,
                                            float c, float ph, float xv, float gv) {
  float s;
  if constexpr (MP > 4 || !OneChain) {
    // Two interleaved partial sums over m halve the dependent FMA chain (it bounds the per-token latency).
    float s0 = cm[0] * f[0][e], s1 = cm[1] * f[1][e];
#pragma unroll
    for (int m = 2; m < MP; m += 2) s0 = fmaf(cm[m], f[m][e], s0), s1 = fmaf(cm[m + 1], f[m + 1][e], s1);
    s = s0 + s1;
  } else {
    // hc_head's four mixes in one chain: an add fewer, and its depth is covered by the row's other elements (the
    // fused backward, H200, V4 dims: 0.4203 -> 0.4086 ms, 3 alternating runs, each faster; grad_x rounds otherwise
    // at some elements, the two paths still alike). bf16 only: in fp32, where no fused path runs, the one chain
    // showed in grad_x (hc_head/hf_tiny_fp32 on the H200, run61 against run60: max ULP against fp64 1217 -> 3265,
    // mean ULP 1.68 -> 1.77), so fp32 keeps the two chains and run60's bits.
    s = cm[0] * f[0][e];
#pragma unroll
    for (int m = 1; m < MP; ++m) s = fmaf(cm[m], f[m][e], s);
  }
  const float o = fmaf(ph, gv, fmaf(-c, xv, s));
#pragma unroll
  for (int m = 0; m < MP; ++m) acc[m][e] = fmaf(cm[m], xv, acc[m][e]);
  return o;
}

// KV stream elements as loaded (packed), unpacked to fp32 when used.
template <typename T, int KV>
struct Raw;
template <>
struct Raw<bf16, 2> {
  using type = uint32_t;
  static __device__ __forceinline__ type load(const bf16* p) { return __ldg(reinterpret_cast<const unsigned*>(p)); }
  static __device__ __forceinline__ type zero() { return 0u; }
  static __device__ __forceinline__ void unpack(type w, float (&v)[2]) { v[0] = bf_lo(w), v[1] = bf_hi(w); }
};
template <>
struct Raw<bf16, 1> {
  using type = uint32_t;
  static __device__ __forceinline__ type load(const bf16* p) { return __bfloat16_as_ushort(__ldg(p)); }
  static __device__ __forceinline__ type zero() { return 0u; }
  static __device__ __forceinline__ void unpack(type w, float (&v)[1]) { v[0] = bf_lo(w); }
};
template <>
struct Raw<float, 2> {
  using type = float2;
  static __device__ __forceinline__ type load(const float* p) { return __ldg(reinterpret_cast<const float2*>(p)); }
  static __device__ __forceinline__ type zero() { return make_float2(0.f, 0.f); }
  static __device__ __forceinline__ void unpack(type w, float (&v)[2]) { v[0] = w.x, v[1] = w.y; }
};
template <>
struct Raw<float, 1> {
  using type = float;
  static __device__ __forceinline__ type load(const float* p) { return __ldg(p); }
  static __device__ __forceinline__ type zero() { return 0.f; }
  static __device__ __forceinline__ void unpack(type w, float (&v)[1]) { v[0] = w; }
};

// Tokens per tile: ~64 bytes of x and g_y in flight per thread, fewer for hc_pre (2 x 24 x KV fp32 registers already).
template <typename T, class Kind>
__host__ __device__ constexpr int dx_tile_tokens() {
  return Kind::MP >= 16 ? (sizeof(T) == 4 ? 4 : 8) : 16;
}

template <typename T, class Kind, int KV>
__global__ void __launch_bounds__(kDxThreads, 3)
    mix_bwd_dx_dfn_kernel(const T* __restrict__ x, const T* __restrict__ gy, const float* __restrict__ coef,
                          const float* __restrict__ fn, T* __restrict__ gx, float* __restrict__ part, int64_t tokens,
                          int K, int D, int M, int64_t per_split) {
  constexpr int MP = Kind::MP, CW = Kind::CW, TT = dx_tile_tokens<T, Kind>();
  constexpr int CV = TT * CW / 4;  // coefficient float4s per tile
  static_assert(CV <= kDxThreads, "one coefficient float4 per thread per tile");
  using R = Raw<T, KV>;
  __shared__ __align__(16) float cs[2][TT * CW];

  const int k0 = (blockIdx.x * kDxThreads + threadIdx.x) * KV;
  const bool active = k0 < K;  // inactive threads still take part in the barriers
  const int kk = active ? k0 : 0;
  const int h = kk / D, d0 = kk - h * D;
  const int64_t tb = int64_t(blockIdx.y) * per_split;
  const int64_t te = tb + per_split < tokens ? tb + per_split : tokens;
  const int tiles = te > tb ? int((te - tb + TT - 1) / TT) : 0;

  float f[MP][KV], acc[MP][KV];
#pragma unroll
  for (int m = 0; m < MP; ++m)
#pragma unroll
    for (int e = 0; e < KV; ++e) {
      f[m][e] = (active && m < M) ? __ldg(fn + int64_t(m) * K + kk + e) : 0.f;
      acc[m][e] = 0.f;
    }

  typename R::type xr[TT], gr[TT], xn[TT], gn[TT];
  float4 cn = make_float4(0.f, 0.f, 0.f, 0.f);
  // Tokens of tile i this thread takes: TT but in a split's last tile. A full tile (nearly all) is loaded and computed
  // without a bounds check per token; with one per token, hc_head's dx_dfn was issue-bound (ncu, H200: SM 66% busy,
  // DRAM 40%) at 0.512 ms; without, 0.388 ms (74% of the copy rate), and hc_pre's 1.144 -> 1.076 ms, same bits.
  const auto tile_tokens = [&](int i) {
    const int64_t left = te - (tb + int64_t(i) * TT);
    return active ? int(left < TT ? left : TT) : 0;
  };
  auto load_tile = [&](int i, typename R::type (&xo)[TT], typename R::type (&go)[TT]) {
    const int64_t t0 = tb + int64_t(i) * TT;
    const int n = tile_tokens(i);
    const T *xp = x + t0 * K + kk, *gp = gy + t0 * D + d0;
    if (n == TT) {
#pragma unroll
      for (int u = 0; u < TT; ++u) xo[u] = R::load(xp + int64_t(u) * K), go[u] = R::load(gp + int64_t(u) * D);
    } else {
#pragma unroll
      for (int u = 0; u < TT; ++u) {
        xo[u] = u < n ? R::load(xp + int64_t(u) * K) : R::zero();
        go[u] = u < n ? R::load(gp + int64_t(u) * D) : R::zero();
      }
    }
    if (threadIdx.x < CV) {
      const int64_t t = t0 + threadIdx.x / (CW / 4);
      cn = t < te ? __ldg(reinterpret_cast<const float4*>(coef + t * CW) + threadIdx.x % (CW / 4))
                  : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto store_coef = [&](int buf) {
    if (threadIdx.x < CV) reinterpret_cast<float4*>(cs[buf])[threadIdx.x] = cn;
  };

  if (tiles > 0) {
    load_tile(0, xr, gr);
    store_coef(0);
  }
  __syncthreads();
  for (int i = 0; i < tiles; ++i) {
    const int buf = i & 1;
    if (i + 1 < tiles) load_tile(i + 1, xn, gn);
    T* const gxp = gx + (tb + int64_t(i) * TT) * K + kk;
    // Token u of the tile: grad_x out, grad_fn sums in.
    const auto token = [&](int u) {
      const float* cf = cs[buf] + u * CW;
      float xv[KV], gv[KV], o[KV], cm[MP];
      R::unpack(xr[u], xv);
      R::unpack(gr[u], gv);
#pragma unroll
      for (int m4 = 0; m4 < MP / 4; ++m4) {
        const float4 q = reinterpret_cast<const float4*>(cf)[m4];
        cm[4 * m4] = q.x, cm[4 * m4 + 1] = q.y, cm[4 * m4 + 2] = q.z, cm[4 * m4 + 3] = q.w;
      }
      const float c = cf[MP], ph = cf[MP + 1 + h];
#pragma unroll
      for (int e = 0; e < KV; ++e) o[e] = dx_element<std::is_same_v<T, bf16>>(cm, f, acc, e, c, ph, xv[e], gv[e]);
      Vec<T, KV>::store(gxp + int64_t(u) * K, o);
    };
    const int n = tile_tokens(i);
    if (n == TT) {
#pragma unroll
      for (int u = 0; u < TT; ++u) token(u);
    } else {
#pragma unroll
      for (int u = 0; u < TT; ++u)
        if (u < n) token(u);
    }
    if (i + 1 < tiles) {
      store_coef(buf ^ 1);  // read last in tile i-1, before the barrier that ended it
#pragma unroll
      for (int u = 0; u < TT; ++u) xr[u] = xn[u], gr[u] = gn[u];
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int m = 0; m < MP; ++m)
    if (m < M)
#pragma unroll
      for (int e = 0; e < KV; ++e) part[(int64_t(blockIdx.y) * M + m) * K + kk + e] = acc[m][e];
}

// ---- hc_pre's dx_dfn on the tensor cores (bf16, hidden a multiple of 64) --------------------------------------------
// The CUDA-core kernel above does 2 x 24 FFMA per element (the H100's fp32 floor alone is ~0.45 ms at V4 dims) and
// holds fn and the grad_fn sums in registers, 168 of them: 1.09 ms on the H100, a third of the copy rate. Here both
// products run on mma.sync. A CTA of 8 warps owns 64 hidden positions d0 .. d0 + 63 of all H streams (warp w: stream
// w / 2, 32 columns), so that g_y, shared by the streams, is read once; it walks a token split in tiles of 16 tokens
// staged by a kDxStages-deep ring filled by TMA (x, g_y, the coefficient rows and their terms; the first tiles by
// thread 0, each later one by the last warp done with its stage):
//   grad_x tile [16 tokens x 8 columns] = coef [16 x 24 mixes] @ fn [24 x 8]: m16n8k16 + m16n8k8 (no padding of the
//     24 mixes), coef and fn each split into two bf16 terms (hi + lo holds 16 significant bits) and the three larger
//     products chained from zero: each product is within ~2^-16 of the fp32 one, far inside the bf16 rounding of
//     grad_x; then - c x + pre_h g_y in fp32 and one rounding, as the kernel above.
//   grad_fn^T [columns x mixes] += x^T [16 columns x 16 tokens] @ coef [16 tokens x 8 mixes]: x is bf16, exact as an
//     operand (loaded with ldmatrix.trans from the token-major tile), and coef is split exactly into three bf16 terms
//     (split_terms<3>), so every product is exact; per tile the three terms chain from zero and the result is added to
//     the fp32 sums with round-to-nearest (the tensor cores' accumulation truncates: see mma_bf16_split3).
// Tiles are token-major, a stream's 64 positions of a token in a 128-byte line, with the 16-byte chunk c of line r at
// c ^ (r & 7) (TMA's 128-byte swizzle): ldmatrix's 8 row addresses and the epilogue's reads of one word of 8 rows
// then hit distinct banks, as do the reads of c and pre_h of 8 coefficient rows. A warp reads only its own chunks of
// the x tile, so its grad_x goes back into them and leaves in 16-byte stores, 64 bytes of a row together (written
// from the MMA fragments directly, a 4-byte store per row and 8 columns, half of every 32-byte sector went to L2
// unused and L2 throughput bounded the kernel: ncu, H100). The coefficients' bf16 terms come split, a block of
// fragments a tile (write_coef_terms); of the rows, only c and pre_h are read. With every thread copying its chunks
// (cp.async), a tile took ~470 instructions a warp, ~150 of them the copies' addresses and bounds (SASS, sm_90a).
constexpr int kDxMmaThreads = 256, kDxMmaD = 64, kDxMmaTM = 16, kDxStages = 4, kDxMmaResident = 2;
// A stage: x's slice [stream][16 tokens][64 positions], g_y's [16 tokens][64] and the coefficient rows [16 tokens][32
// floats], each in 128-byte lines with TMA's 128-byte swizzle, then the tile's block of terms.
constexpr int kDxLine = 128, kDxStreamBytes = kDxMmaTM * kDxLine, kDxRowsBytes = kDxMmaTM * kDxLine;
constexpr int kDxGyAt = H4 * kDxStreamBytes, kDxRowsAt = kDxGyAt + kDxStreamBytes, kDxTermsAt = kDxRowsAt + kDxRowsBytes;
constexpr int kDxStageBytes = kDxTermsAt + kDxTermWords * 4;
static_assert(kDxMmaTM == kTermTileTokens && kDxMmaD * 2 == kDxLine && PreKind::CW * 4 == kDxLine &&
                  kDxStageBytes % 1024 == 0 && kDxRowsAt % 1024 == 0,
              "a line is 64 positions of bf16 or a coefficient row; swizzled boxes 1024-aligned");
constexpr size_t kDxMmaSmem = size_t(kDxStages) * kDxStageBytes + kDxStages * 12;  // the ring, mbarriers, counts

__device__ __forceinline__ void mma1688(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// Byte offset of the 16-byte chunk c of line r in a box of 128-byte lines swizzled as TMA's SWIZZLE_128B does.
__device__ __forceinline__ int dx_chunk(int r, int c) { return r * kDxLine + ((c ^ (r & 7)) << 4); }
// Entry i of coefficient row r in a stage's rows.
__device__ __forceinline__ float dx_row_at(const unsigned char* rows, int r, int i) {
  return *reinterpret_cast<const float*>(rows + dx_chunk(r, i >> 2) + 4 * (i & 3));
}

// The tensor-core pieces of hc_pre's dx_dfn, shared by mix_bwd_dx_dfn_mma and mix_fused_bwd_mma: the 24 mixes are
// one k16 step (0-15) and one k8 step (16-23); a coefficient row is `stride` floats (r g_mixes, c, pre_h).
//
// fn's B fragments of an n-tile (columns f .. f + 7, lane (g, q): column g) in two terms, as the register pairs the
// MMAs take: the k16 step's (b0, b1) of each term and the k8 step's b0 of both.
struct FnFrag {
  uint2 lo, hi, k8;  // k8 = {lo, hi}
};
__device__ __forceinline__ FnFrag fn_fragment(const float* f, int64_t K, int M, int q, bool live) {
  const auto w = [&](int m) { return live && m < M ? __ldg(f + int64_t(m) * K) : 0.f; };
  uint32_t t[3][2];  // k-step r: mixes 2q + 8r, 2q + 8r + 1
#pragma unroll
  for (int r = 0; r < 3; ++r) split_terms(w(2 * q + 8 * r), w(2 * q + 8 * r + 1), t[r]);
  return {make_uint2(t[0][0], t[1][0]), make_uint2(t[0][1], t[1][1]), make_uint2(t[2][0], t[2][1])};
}
// grad_x tiles [16 tokens x 8 columns] = coef @ fn of N n-tiles, each a chain from zero with the small products
// first: lo x hi and hi x lo of both k-steps, then hi x hi; the chains interleaved step by step (one chain alone left
// the tensor pipe idle between its dependent MMAs).
template <int N>
__device__ __forceinline__ void grad_x_mma(float (&d)[N][4], const CoefFrag& a, const FnFrag (&b)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) d[i][0] = d[i][1] = d[i][2] = d[i][3] = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) mma16816(d[i], a.lo, b[i].hi.x, b[i].hi.y);
#pragma unroll
  for (int i = 0; i < N; ++i) mma1688(d[i], a.lo8[0], a.lo8[1], b[i].k8.y);
#pragma unroll
  for (int i = 0; i < N; ++i) mma16816(d[i], a.hi, b[i].lo.x, b[i].lo.y);
#pragma unroll
  for (int i = 0; i < N; ++i) mma1688(d[i], a.hi8[0], a.hi8[1], b[i].k8.x);
#pragma unroll
  for (int i = 0; i < N; ++i) mma1688(d[i], a.hi8[0], a.hi8[1], b[i].k8.y);
#pragma unroll
  for (int i = 0; i < N; ++i) mma16816(d[i], a.hi, b[i].hi.x, b[i].hi.y);
}
// grad_fn^T [MT m-tiles of 16 columns x 24 mixes] += x^T [columns x 16 tokens] @ coef [16 tokens x 24 mixes]: xa the
// m-tiles' A fragments (ldmatrix.trans of the token-major x tile), coef split exactly into three bf16 terms, so every
// product is exact; per n-tile the three terms chain from zero and the result is added to the fp32 sums with
// round-to-nearest (the tensor cores' accumulation truncates: see mma_bf16_split3).
template <int MT>
__device__ __forceinline__ void grad_fn_mma(float (&acc)[MT][3][4], const uint32_t (&xa)[MT][4], const CoefTerms& b) {
#pragma unroll
  for (int nt = 0; nt < 3; ++nt)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int t = 0; t < 3; ++t) mma16816(d, xa[mt], b.b[nt][t][0], b.b[nt][t][1]);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = __fadd_rn(acc[mt][nt][e], d[e]);
    }
}
// A word of grad_x (two columns of a row, bf16) from the same word of x and of g_y: d - c x + p g_y, one rounding.
__device__ __forceinline__ uint32_t dx_word(float d0, float d1, float c, uint32_t x, float p, uint32_t gy) {
  return pack_bf2(fmaf(p, bf_lo(gy), fmaf(-c, bf_lo(x), d0)), fmaf(p, bf_hi(gy), fmaf(-c, bf_hi(x), d1)));
}

// After its tiles, the sums that follow the backward, in the same launch (unless arrivals is null): the last CTA of a
// column block to arrive (arrivals[blockIdx.x], zero on entry and on exit) adds its splits' partials of grad_fn in
// split order, and `colsum_blocks` blocks of the grid's last row (blockIdx.y == splits) sum the gate columns as
// colsum_column does, in the slots the tiles' CTAs leave free (an H100: 264, the tiles' 256), so neither waits for the
// other. Against the two launches after it (H100, bench/hc_ab.sh, 3 runs each, the same hashes at 37, 1001, 4096 and
// 16384 tokens; reports/gpu/2026-11-28-h100-dx-sums-fold-ab.log): hc_pre's backward 0.7607 -> 0.7561 ms at V4 dims,
// 0.0890 -> 0.0826 at 1001 tokens. The last CTAs' sums one load at a time had cost more than the launches (0.7586 ->
// 0.7638 ms). The colsum row was first as wide as the column blocks: at hidden 64 one block summed all 27 columns, and
// the history gate found hc_pre/hf_tiny_bf16's backward x1.089 slower (run52, H100); the grid is now as wide as
// either row needs (run53: x0.877 against run52).
struct DxFinish {
  float* grad_fn;
  unsigned* arrivals;
  ColsumArgs colsum;
  int colsum_blocks;
};

__global__ void __launch_bounds__(kDxMmaThreads, kDxMmaResident)
    mix_bwd_dx_dfn_mma_kernel(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap gmap,
                              const __grid_constant__ CUtensorMap cmap, const float* __restrict__ coef,
                              const float* __restrict__ fn, bf16* __restrict__ gx, float* __restrict__ part,
                              int64_t tokens, int H, int D, int M, int64_t per_split, DxFinish f) {
  constexpr int MP = PreKind::MP;
  static_assert(MP == 24, "the mixes are one k16 and one k8 step, three n-tiles of 8");
  static_assert(kDxMmaThreads == 32 * 2 * H4, "two warps per stream");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int K = H * D, d0 = blockIdx.x * kDxMmaD, h = warp >> 1;
  const bool live = h < H;                       // warps of streams past H only keep the barriers
  const int kw = h * D + d0 + (warp & 1) * 32;   // the warp's first column of x, fn and grad_x
  const int xc = (warp & 1) * 4;                 // its first 16-byte chunk in a line of its stream's tile and of g_y's
  const int64_t tb = int64_t(blockIdx.y) * per_split;
  const int64_t te = tb + per_split < tokens ? tb + per_split : tokens;
  const int tiles = te > tb ? int((te - tb + kDxMmaTM - 1) / kDxMmaTM) : 0;
  extern __shared__ __align__(1024) unsigned char fused_smem[];  // 128-byte-swizzled TMA destinations: 1024-aligned
  unsigned char* const smem = fused_smem;
  const int splits = int(gridDim.y) - (f.arrivals ? 1 : 0);
  if (int(blockIdx.y) == splits) {
    griddep_wait();  // the gate rows are the token kernel's
    for (int c = blockIdx.x; c < f.colsum.cols && int(blockIdx.x) < f.colsum_blocks; c += f.colsum_blocks)
      colsum_column(f.colsum, c, reinterpret_cast<double*>(smem));
    return;
  }
  if (d0 >= D) return;  // the grid is as wide as the larger of its two rows

  // Tile n lands in ring stage n % kDxStages by one thread's copies, counted on the stage's mbarrier: x's slice and
  // g_y's (issue_data; inputs, so the first stages' go out before the wait for the token kernel), then the
  // coefficient rows and the tile's block of terms (issue_coef). Past the last token the boxes read zeros.
  uint64_t* landed = reinterpret_cast<uint64_t*>(smem + kDxStages * kDxStageBytes);
  unsigned* done = reinterpret_cast<unsigned*>(landed + kDxStages);  // per stage: warps done with it, ever
  const unsigned stage_bytes = unsigned(H) * kDxStreamBytes + kDxStreamBytes + kDxRowsBytes + kDxTermWords * 4;
  const auto issue_data = [&](int n) {
    unsigned char* st = smem + (n % kDxStages) * kDxStageBytes;
    const int t0 = int(tb) + n * kDxMmaTM;
    mbar_expect_bytes(landed + n % kDxStages, stage_bytes);
    tma_load_4d(st, &xmap, 0, t0, blockIdx.x, 0, landed + n % kDxStages);
    tma_load_4d(st + kDxGyAt, &gmap, 0, t0, blockIdx.x, 0, landed + n % kDxStages);
  };
  const auto issue_coef = [&](int n) {
    unsigned char* st = smem + (n % kDxStages) * kDxStageBytes;
    const int64_t t0 = tb + int64_t(n) * kDxMmaTM;  // a multiple of 16: per_split is
    tma_load_2d(st + kDxRowsAt, &cmap, 0, int(t0), landed + n % kDxStages);
    bulk_load(st + kDxTermsAt, coef_terms(coef, tokens) + t0 / kTermTileTokens * kDxTermWords, kDxTermWords * 4,
              landed + n % kDxStages);
  };
  if (tid == 0) {
    for (int st = 0; st < kDxStages; ++st) mbar_init(landed + st, 1), done[st] = 0;
    mbar_init_fence();
    for (int p = 0; p < kDxStages && p < tiles; ++p) issue_data(p);
  }

  // fn's 4 n-tiles of this warp as B fragments in two terms, for the whole launch.
  FnFrag fb[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) fb[nt] = fn_fragment(fn + kw + 8 * nt + g, K, M, q, live);
  // grad_fn^T sums: [m-tile of 16 columns][n-tile of 8 mixes][4].
  float acc[2][3][4] = {};

  griddep_wait();
  if (tid == 0)
    for (int p = 0; p < kDxStages && p < tiles; ++p) issue_coef(p);
  __syncthreads();  // the mbarriers and counters initialised, before any use
  const unsigned warps = 2u * unsigned(H < H4 ? H : H4);  // the live ones
  const int gx_row = lane >> 2, gx_src = dx_chunk(gx_row, xc + (lane & 3));
  const int64_t gx_off = int64_t(gx_row) * K + kw + 8 * (lane & 3);
  for (int i = 0; i < tiles && live; ++i) {
    unsigned char* const st = smem + (i % kDxStages) * kDxStageBytes;
    mbar_wait(landed + i % kDxStages, (i / kDxStages) & 1);
    unsigned char* xs = st + h * kDxStreamBytes;  // the warp's stream
    const unsigned char* gs = st + kDxGyAt;
    const unsigned char* rows = st + kDxRowsAt;
    const uint32_t* terms_s = reinterpret_cast<const uint32_t*>(st + kDxTermsAt);

    // grad_fn: x^T of the warp's two m-tiles (ldmatrix.trans: matrices (columns +0/+8) x (tokens 0-7/8-15)).
    uint32_t xa[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int mi = lane >> 3, r = (lane & 7) + 8 * (mi >> 1), c = xc + 2 * mt + (mi & 1);
      ldmatrix_x4<true>(xa[mt], xs + dx_chunk(r, c));
    }

    // grad_x: coef rows g and g + 8 as A fragments in two terms; the four n-tiles' chains issued together, then their
    // epilogues (x and g_y words read before any is written back: the compiler cannot tell them apart). grad_fn's MMAs
    // follow, filling the chains' latency (the x fragments above were read before grad_x replaces the tile).
    const CoefFrag ca = load_lane<CoefFrag>(terms_s + lane * kFragWords);
    const float c_lo = dx_row_at(rows, g, MP), c_hi = dx_row_at(rows, g + 8, MP);
    const float p_lo = dx_row_at(rows, g, MP + 1 + h), p_hi = dx_row_at(rows, g + 8, MP + 1 + h);
    float d[4][4];
    grad_x_mma<4>(d, ca, fb);
    // This lane's word q (columns 2q, 2q+1) of chunk nt in rows g and g + 8: x in, grad_x back in its place.
    uint32_t x0[4], x8[4], g0[4], g8[4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      x0[nt] = *reinterpret_cast<const uint32_t*>(xs + dx_chunk(g, xc + nt) + 4 * q);
      x8[nt] = *reinterpret_cast<const uint32_t*>(xs + dx_chunk(g + 8, xc + nt) + 4 * q);
      g0[nt] = *reinterpret_cast<const uint32_t*>(gs + dx_chunk(g, xc + nt) + 4 * q);
      g8[nt] = *reinterpret_cast<const uint32_t*>(gs + dx_chunk(g + 8, xc + nt) + 4 * q);
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      *reinterpret_cast<uint32_t*>(xs + dx_chunk(g, xc + nt) + 4 * q) =
          dx_word(d[nt][0], d[nt][1], c_lo, x0[nt], p_lo, g0[nt]);
      *reinterpret_cast<uint32_t*>(xs + dx_chunk(g + 8, xc + nt) + 4 * q) =
          dx_word(d[nt][2], d[nt][3], c_hi, x8[nt], p_hi, g8[nt]);
    }
    grad_fn_mma(acc, xa, load_lane<CoefTerms>(terms_s + 32 * kFragWords + lane * kTermsWords));
    __syncwarp();
    // The warp's grad_x tile: 16 rows x 4 chunks, two 16-byte stores a lane (rows lane / 4 and lane / 4 + 8).
    const int64_t t0 = tb + int64_t(i) * kDxMmaTM, left = te - t0;
    bf16* gt = gx + t0 * K + gx_off;
    if (gx_row < left) *reinterpret_cast<uint4*>(gt) = *reinterpret_cast<const uint4*>(xs + gx_src);
    if (gx_row + 8 < left)
      *reinterpret_cast<uint4*>(gt + 8 * K) = *reinterpret_cast<const uint4*>(xs + gx_src + 8 * kDxLine);
    fence_proxy_async();  // grad_x written into the stage, before the tensor copy that refills it
    __syncwarp();
    // The last warp done with the stage refills it with tile i + kDxStages, so that no warp waits for the others.
    if (lane == 0) {
      __threadfence_block();
      if (atomicAdd(done + i % kDxStages, 1u) == (unsigned(i / kDxStages) + 1) * warps - 1 && i + kDxStages < tiles) {
        __threadfence_block();
        issue_data(i + kDxStages), issue_coef(i + kDxStages);
      }
    }
  }

  // acc[mt][nt]: columns 16 mt + g (+8 for e >= 2), mixes 8 nt + 2q (+1 for odd e).
  if (live)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 3; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = 8 * nt + 2 * q + (e & 1), col = kw + 16 * mt + g + 8 * (e >> 1);
          if (m < M) part[(int64_t(blockIdx.y) * M + m) * K + col] = acc[mt][nt][e];
        }
  if (!f.arrivals) return;
  __threadfence();  // this CTA's partials, before its arrival
  __syncthreads();
  if (!__syncthreads_or(tid == 0 && atomicAdd(f.arrivals + blockIdx.x, 1u) == unsigned(splits - 1))) return;
  __threadfence();  // the other splits' partials, after their arrivals
  // Four columns a thread and step (a 64-column run is 16 of them), two steps' loads in flight.
  constexpr int Q = kDxMmaD / 4;
#pragma unroll 2
  for (int e = tid; e < M * H * Q; e += kDxMmaThreads) {
    const int m = e / (H * Q), c = e % (H * Q);
    split_sum<4>(part, int64_t(M) * K, int64_t(m) * K + (c / Q) * D + d0 + 4 * (c % Q), splits, f.grad_fn);
  }
  if (tid == 0) f.arrivals[blockIdx.x] = 0;
}

// hc_pre's bf16 dx_dfn on the tensor cores: every CTA 64 hidden positions of all streams.
bool dx_dfn_mma_shape(MixKind kind, Dtype dt, int64_t hidden) {
  return kind == MixKind::pre && dt == Dtype::bf16 && hidden % kDxMmaD == 0;
}

// What `ask` answers for the current device and `key`, asked once (kernel attributes are set per device); 0 where no
// device is current. A refusal inside `ask` is an answer, not an error for the next launch.
template <typename Key, typename Ask>
int once_per_device(const Key& key, Ask&& ask) {
  static std::mutex mu;
  static std::map<std::pair<int, Key>, int> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  const std::lock_guard lock(mu);
  const auto at = std::make_pair(dev, key);
  if (const auto it = cache.find(at); it != cache.end()) return it->second;
  const int answer = ask();
  cudaGetLastError();
  return cache[at] = answer;
}

int sm_count() {
  return std::max(1, once_per_device(std::string("sm count"), [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
  }));
}

// Warps a block of comb_backward_quad, at most `most`: the quads' warps spread over the device's SMs.
int comb_warps_per_block(int64_t tokens, int most) {
  const int sms = sm_count();
  const int64_t warps = (tokens * H4 + 31) / 32;
  return int(std::clamp<int64_t>((warps + sms - 1) / sms, 1, most));
}

// Its shared memory is above the default 48 KB: allowed once per device (a refusal leaves the CUDA-core kernel).
bool dx_dfn_mma_ready() {
  return once_per_device(0, [] {
    return int(cudaFuncSetAttribute(mix_bwd_dx_dfn_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kDxMmaSmem)) == cudaSuccess);
  });
}

// ---- hc_head's backward in one pass over x: mix_fused_bwd ------------------------------------------------------------
// The two-pass backward (reduce, then dx_dfn) reads x and g_y twice: 1.56x the one-pass bytes, which caps it near 64%
// of the copy rate (hc_head, H100, V4 dims: 0.714 ms, 56%). A token's coefficients need sums over its whole row, so
// here a cluster of kFbCluster (8) CTAs holds a tile of as many tokens, each CTA a slice of Dc hidden positions of
// every stream (x by TMA, in mix_fused_fwd's layout) and of g_y, until the tile's grad_x has been written:
//   a. compute warps, tile n: per row, this slice's sum x^2 and <g_y, x_h> (fp64 from exact products, as
//      mix_bwd_reduce), a warp a row, sent to CTA `row` by st.async;
//   b. the finisher warp, tile n-1: CTA r sums token r's 8 partial rows in rank order, runs Kind::bwd_token (red,
//      coef and gate rows in global memory, as mix_bwd_token) and sends the coefficient row to every CTA;
//   c. compute warps, tile n-2: grad_x as mix_bwd_dx_dfn computes it (the same expression, one rounding), and the
//      grad_fn sums of the thread's 8 columns over its rows; the tile's ring stage then takes tile n+3.
// A thread keeps fn and the grad_fn sums of its columns for the whole launch; its partial row goes out at the end
// (split cluster * Groups + group, summed by launch_mix_bwd_sums). One cluster barrier per tile orders the reuse of the
// st.async slots: X(n) is waited for before the sends of iteration n + 1. The compute warps arrive at the end of
// iteration n; the finisher at its start, so that its token (fp64 sigmoids on one thread) is off the barrier's
// chain: its reads of a partial-row slot, in iteration m + 1, then still come before the slot's next sends (tile
// m + 3, after X(m + 2)), as the slots rotate three deep.
// Clusters of 8, not the forward's 16: Hopper's GPCs hold 7 clusters of 16 such CTAs (112 SMs of the H100's and H200's
// 132) but 15 of 8 (120 SMs; cudaOccupancyMaxActiveClusters, H200; 4 also gives 120, 2 would give 132 but a tile of 2
// tokens is no whole round of the 128-byte swizzle). A CTA's share of a tile is the same 16K elements (8 tokens of a
// slice twice as wide), so the per-tile work and exchange stay as they were, on 7% more SMs: H200, V4 dims, 0.4514-
// 0.4562 -> 0.4308-0.4396 ms (3 alternating runs of bench/hc_ab.sh, each faster; grad_x and the gate grads the same
// bits, grad_fn summed in other splits; `parity run --perf` 0.4308 ms, 66.0%, against 63.4% in run59;
// reports/gpu/2026-11-29-h200-head-bwd-cluster8-ab.log). Tried before it, slower or no faster (same log): the sum of
// squares in four chains, one a stream, not one (x1.008: the DFMA chain is not what the tile waits for; ncu then, 16
// CTAs: 2.25 warps a scheduler, issue 58% of active cycles, 0.94 eligible) and 16 compute warps of 4 columns a thread
// (the same bits, x1.21: 1.36x the instructions, a row's coefficients loaded for half the columns).
// Then step c (two thirds of the instructions, ncu): a row's store address and token check stepped from the group's
// first row, g_y's unit addressed from x's, and hc_head's dot over its four mixes in one chain (dx_element): 0.4310 ->
// 0.4203 -> 0.4086 ms (H200, 3 alternating runs, each faster; `parity run --perf` 0.4090 ms, 69.9%); the row loop
// unrolled four or eight deep was slower (x1.04; reports/gpu/2026-11-29-h200-head-bwd-step-c-ab.log).
// Slower at 734cf6f and dropped (reports/gpu/2026-11-29-h200-head-bwd-tried-ab.log, patches beside it): grad_fn on the
// tensor cores (x1.16: a warp's mma.sync issue no closer than ~16 cycles apart), step a on warps of its own (x1.035,
// x1.25 with the finisher among them), steps a and c interleaved in one loop (x1.02), the row loop not unrolled
// (x1.023); the stage released by the last warp through it, not a barrier, was within noise (x0.992). ncu: no pipe
// near its peak (fma 32%, xu 24%, fp64 12%), issue 58% at 2.25 warps a scheduler: the tile waits on latency. Yet 16
// compute warps, a thread keeping its 8 columns for half the rows (the same instructions; 128 registers, the finisher
// in the last warp), were slower (x1.060), and x1.221 with step a two warps a row: the tile's time is its exchange
// chain, not what more warps would hide (reports/gpu/2026-11-29-h200-head-bwd-16-warps-ab.log).
// Ablations, for the timing only, then showed what the tile waits for: without step a's sums 0.3285 ms, without step
// c's products 0.3231, without both 0.3168 (~91% of the copy rate: the loads, the exchange and the stores), against
// 0.4031 with both; the finisher's gate backward is ~2% (reports/gpu/2026-11-29-h200-head-bwd-ablations-ab.log). Either
// step fits under a tile's data movement, the two in series on the compute warps do not, so every instruction taken
// off their path counts: step c's addresses held from the group's first row, its rows unrolled (1000 -> 916
// instructions a thread and tile) and its stores predicated; step a's loads off one base register (259 -> 221);
// 32-bit tile numbers; the row sums reduced and scattered over the lanes (~125 -> ~72 a warp): 0.4038 -> 0.3711 ms
// (H200, bench/hc_ab.sh, 3 alternating runs, each faster; the same bits at 16384, 4096 and 1001 tokens, hidden 2048
// and 4096; reports/gpu/2026-11-29-h200-head-bwd-addressing-ab.log). `parity run --perf` 0.3673 ms, 77.4% (run63).
// The fused backwards' per-tile exchange (mix_fused_bwd, mix_fused_bwd_mma), in three pieces:
// a. Row `row`'s sums over a stage of this CTA's slice (x's streams, then g_y's one, in Sl's layout): sum x^2
//    and <g_y, x_h>, fp64 from exact products as mix_bwd_reduce, by RT lanes (an aligned group of the warp), lane j of
//    the group taking units j, j + RT, ... of g_y's slice and the same positions of every stream. `unit` points at the
//    first of them in stream 0 (stage + Sl::at(0, row, j)): RT being whole swizzle rounds, every other lies a constant
//    distance on, so that each load is one base register plus an immediate (hc_head's block 259 -> 221 instructions).
//    Returns partial row entry j / (RT / 8) (sum x^2, then <g_y, x_h>; past 1 + H4, zeros) in lane j of the group.
//    Each bf16 widens by bf_f64 (hc_head's block: 310 -> 230 instructions): hc_head's fused backward 0.4587-0.4640
//    -> 0.4531-0.4569 ms (H100, V4 dims, bench/hc_ab.sh, 3 runs each, the same hashes;
//    reports/gpu/2026-11-28-h100-bf16-widen-ab.log). The same widening in mix_bwd_reduce (its loop 389 -> 263
//    instructions) made that read slower, for a reason the A/B does not show: hc_head's 0.229 -> 0.243 ms (it runs at
//    98% of copy: bound by memory, not by its instructions), hc_pre's 0.266 -> 0.268. It keeps fp32 values there.
template <class Sl, int RT>
__device__ __forceinline__ double fused_row_sums(const unsigned char* unit, int j) {
  static_assert(RT % 8 == 0, "a lane's units share their swizzle");
  double ss = 0, gp[H4];
#pragma unroll
  for (int h = 0; h < H4; ++h) gp[h] = 0;
#pragma unroll
  for (int i = 0; i < Sl::Dc / 8 / RT; ++i) {
    const uint4 g4 = *reinterpret_cast<const uint4*>(unit + Sl::StageBytes + Sl::line(0, 0, i * RT / 8));
    const uint32_t gw[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
    for (int h = 0; h < H4; ++h) {
      const uint4 x4 = *reinterpret_cast<const uint4*>(unit + Sl::line(h, 0, i * RT / 8));
      const uint32_t xw[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const double x0 = bf_f64(xw[e], 0), x1 = bf_f64(xw[e], 1);
        ss = fma(x0, x0, ss), ss = fma(x1, x1, ss);
        gp[h] = fma(bf_f64(gw[e], 0), x0, gp[h]), gp[h] = fma(bf_f64(gw[e], 1), x1, gp[h]);
      }
    }
  }
  // Reduced and scattered over the group, entries in 8 slots (zeros past 1 + H4): at each of the first three halvings
  // a lane keeps the half of its slots that bit o of j selects and trades the other half with lane j ^ o. So 4 + 2 + 1
  // doubles cross lanes, then one a level, where a butterfly of all five entries took five a level (and ptxas ~2
  // register moves each, to pair the halves for the add).
  static_assert(1 + H4 <= 8 && RT >= 8, "three halvings of 8 slots");
  double v[8] = {ss};
#pragma unroll
  for (int h = 0; h < H4; ++h) v[1 + h] = gp[h];
  const auto halve = [&](auto half_, int o) {
    constexpr int half = decltype(half_)::value;
    const bool upper = j & o;
#pragma unroll
    for (int i = 0; i < half; ++i)
      v[i] = (upper ? v[i + half] : v[i]) + __shfl_xor_sync(~0u, upper ? v[i] : v[i + half], o);
  };
  halve(std::integral_constant<int, 4>{}, RT / 2);
  halve(std::integral_constant<int, 2>{}, RT / 4);
  halve(std::integral_constant<int, 1>{}, RT / 8);
#pragma unroll
  for (int o = RT / 16; o > 0; o >>= 1) v[0] += __shfl_xor_sync(~0u, v[0], o);
  return v[0];
}
// ...sent to CTA `row`, into its slot of every CTA's partial row of the token (slot: [CTA][1 + H4] fp64), each entry
// by the first of the RT / 8 lanes that hold it.
template <int RT>
__device__ __forceinline__ void send_row_entry(double* slot, uint64_t* rows_in, int rank, int row, int j, double v) {
  const int e = j / (RT / 8);
  if (j % (RT / 8) == 0 && e < 1 + H4)
    st_async(cluster_addr(slot + rank * (1 + H4) + e, row), v, cluster_addr(rows_in, row));
}
// b. The finisher: token `rank`'s partial rows summed in rank order (entry `lane` in lanes < 1 + H4), once they are
//    in; the slot is re-armed for its next tile. After the token's gate backward,
// c. its coefficient row (entry e in lane e < CW) goes into row `rank` of every CTA's slot (`row` points there).
//    C: the cluster's CTAs.
template <int C>
__device__ __forceinline__ double gather_rows(const double* slot, uint64_t* rows_in, unsigned parity) {
  const int lane = threadIdx.x & 31;
  mbar_wait<true>(rows_in, parity);
  if (lane == 0) mbar_expect_bytes(rows_in, C * (1 + H4) * 8);
  double red = 0;
  if (lane < 1 + H4)
    for (int c = 0; c < C; ++c) red += slot[c * (1 + H4) + lane];
  return red;
}
template <int CW, int C>
__device__ __forceinline__ void broadcast_coef(float* row, uint64_t* coef_in, float cf) {
#pragma unroll
  for (int i = threadIdx.x & 31; i < C * CW; i += 32) {  // CTA i / CW, entry i % CW (from lane i % CW)
    const float v = __shfl_sync(~0u, cf, i % CW);
    st_async(cluster_addr(row + i % CW, i / CW), v, cluster_addr(coef_in, i / CW));
  }
}

// d. The tiles themselves: a ring of Stages stages, x's slice (XBytes) then g_y's, both by TMA onto the stage's mbarrier
//    (landed), beside the mbarriers of three st.async slots of partial rows (rows_in) and of coefficient rows (coef_in).
//    Thread 0 starts it: barriers initialised and armed, the first tiles issued. S: the stage's layout (StageBytes,
//    XBytes) over a cluster of C CTAs and a tile of TM tokens.
template <int Stages, class S>
struct FusedBwdTiles {
  static constexpr int StageBytes = S::StageBytes, XBytes = S::XBytes, TM = S::TM, C = S::C;
  unsigned char* ring;
  uint64_t *landed, *rows_in, *coef_in;
  const CUtensorMap *xmap, *gmap;
  int chunk0;  // the CTA's first 64-position chunk of a stream

  __device__ void issue(int64_t tile, int st) const {
    unsigned char* dst = ring + size_t(st) * StageBytes;
    mbar_expect_bytes(landed + st, StageBytes);
    tma_load_4d(dst, xmap, 0, int(tile * TM), chunk0, 0, landed + st);
    tma_load_4d(dst + XBytes, gmap, 0, int(tile * TM), chunk0, 0, landed + st);
  }
  __device__ void start(const ClusterTiles& mine, unsigned coef_bytes) const {
    for (int st = 0; st < Stages; ++st) mbar_init(landed + st, 1);
    arm_slots(rows_in, 3, C * (1 + H4) * 8);
    arm_slots(coef_in, 3, coef_bytes);
    mbar_init_fence();
    for (int p = 0; p < Stages && p < mine.count; ++p) issue(mine.tile(p), p);
  }
  // Tile m's last reads done: once the `threads` compute threads are past theirs (barrier 1), thread 0 re-arms its
  // coefficient slot and refills its stage with tile m + Stages.
  __device__ void release(const ClusterTiles& mine, int m, int threads, unsigned coef_bytes) const {
    named_bar_sync(1, threads);
    if (threadIdx.x == 0) {
      mbar_expect_bytes(coef_in + m % 3, coef_bytes);
      if (m + Stages < mine.count) issue(mine.tile(m + Stages), int(m % Stages));
    }
  }
};

constexpr int kFbWarps = 8, kFbThreads = 32 * (kFbWarps + 1), kFbStages = 5, kFbCluster = 8;

template <int BPW>
struct FusedBwdSlice {
  // x's stage in the forward's layout, over a cluster of kFbCluster CTAs and a tile of as many tokens; g_y's follows
  // it, one stream of the same layout.
  static constexpr int TM = kFbCluster, C = kFbCluster;
  using Sl = FusedSlice<BPW, C, TM>;
  static constexpr int Dc = Sl::Dc, XBytes = Sl::StageBytes, StageBytes = XBytes + TM * Dc * 2;
  static constexpr int Units = H4 * Dc / 8;                // 16-byte units of a token's x slice
  static constexpr int Groups = 32 * kFbWarps / Units;     // c: row groups (a thread: one unit of Rows rows)
  static constexpr int Rows = TM / Groups;
  static constexpr int RowThreads = 32 * kFbWarps / TM;  // a: threads per row
  static_assert(Dc / 8 % RowThreads == 0 && StageBytes % 1024 == 0, "whole units per thread, 1024-byte stages");
};

template <class Kind, int BPW>
constexpr size_t mix_fused_bwd_smem_bytes() {
  using Sb = FusedBwdSlice<BPW>;
  return size_t(kFbStages) * Sb::StageBytes     // x and g_y ring
         + size_t(3) * Sb::C * (1 + H4) * 8     // every CTA's partial row of token `rank` (fp64), x3
         + size_t(3) * Sb::TM * Kind::CW * 4    // the tile's coefficient rows, three tiles
         + size_t(kFbStages + 3 + 3) * 8;      // mbarriers: ring stages, gpart and scoef slots
}

struct FusedBwdArgs {
  MixBwdTokenArgs t;  // mixes, base, scale, gate (rows as mix_bwd_token writes them) and the constants
  const float* fn;
  bf16* gx;
  float* part;  // [clusters * Groups][M][K]
};

template <class Kind, int BPW>
__global__ void __launch_bounds__(kFbThreads, 1) mix_fused_bwd_kernel(const __grid_constant__ CUtensorMap xmap,
                                                                      const __grid_constant__ CUtensorMap gmap,
                                                                      FusedBwdArgs fa) {
  static_assert(Kind::MP == H4 && Kind::CW <= 32 && Kind::GW <= 32, "grad_x on the CUDA cores: the head's 4 mixes");
  using Sb = FusedBwdSlice<BPW>;
  using Sl = typename Sb::Sl;
  constexpr int MP = Kind::MP, CW = Kind::CW, NC = 1 + H4, D = BPW * kFusedHidden, K = H4 * D;
  const MixBwdTokenArgs& a = fa.t;
  const int rank = int(cooperative_groups::this_cluster().block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const ClusterTiles mine(a.tokens, Sb::C, Sb::TM);

  extern __shared__ __align__(1024) unsigned char fused_smem[];
  unsigned char* ring = fused_smem;
  double* gpart = reinterpret_cast<double*>(ring + size_t(kFbStages) * Sb::StageBytes);  // [3][CTA][NC]
  float* scoef = reinterpret_cast<float*>(gpart + 3 * Sb::C * NC);                        // [3][row][CW]
  uint64_t* landed = reinterpret_cast<uint64_t*>(scoef + 3 * Sb::TM * CW);                // [stage]
  uint64_t* rows_in = landed + kFbStages;  // [3]
  uint64_t* coef_in = rows_in + 3;         // [3]
  constexpr unsigned kCoefBytes = Sb::C * CW * 4;

  // The gate's parameters, once (as the forward's finisher: each cluster-scope acquire invalidates L1).
  const float gate_scale = __ldg(a.scale), gate_base = lane < a.H ? __ldg(a.base + lane) : 0.f;

  const FusedBwdTiles<kFbStages, Sb> tiles{ring, landed, rows_in, coef_in, &xmap, &gmap, rank * Sl::Chunks};
  if (tid == 0) tiles.start(mine, kCoefBytes);
  cluster_arrive_relaxed();
  cluster_wait();

  // c's columns: unit `unit` of the slice (stream h, 8 hidden positions from d), rows group * Rows on.
  const int unit = tid % Sb::Units, group = tid / Sb::Units;
  const int uh = unit / (Sb::Dc / 8), uu = unit % (Sb::Dc / 8);
  const int kcol = uh * D + rank * Sb::Dc + uu * 8;
  // Its unit of row row0 + rr sits at x_at0 + 128 rr + (x_swz ^ 16 rr) in a stage: the group's rows are a whole
  // swizzle round or its half, so row % 8 is row0 % 8 + rr = (row0 % 8) ^ rr. g_y's unit is a fixed distance on.
  const int row0 = group * Sb::Rows;
  static_assert(Sb::Rows == 8 || (Sb::Rows == 4 && Sb::Groups == 2), "rows of a group within one swizzle round");
  const unsigned x_at0 = opaque(Sl::line(uh, row0, uu / 8)), x_swz = opaque(((uu ^ row0) & 7u) << 4);
  const int g_from_x = Sb::XBytes - uh * Sl::Chunks * Sb::TM * 128;
  const unsigned a_at = opaque(Sl::at(0, tid / Sb::RowThreads, tid % Sb::RowThreads));  // a's first unit
  float f[MP][8], acc[MP][8];
  if (warp < kFbWarps) {
#pragma unroll
    for (int m = 0; m < MP; ++m)
#pragma unroll
      for (int e = 0; e < 8; ++e) f[m][e] = m < a.M ? __ldg(fa.fn + int64_t(m) * K + kcol + e) : 0.f, acc[m][e] = 0.f;
  }

  // 32-bit tile numbers (a cluster takes far fewer than 2^31 tiles): their slots and stages cost fewer instructions.
  for (int n = 0; n < int(mine.count) + 2; ++n) {
    if (warp < kFbWarps) {
      bool waited = n == 0;  // X(n-1), before this iteration's sends
      if (n < mine.count) {
        // a. Row `row`: RowThreads lanes, each BPW units of g_y's slice and the same positions of every stream.
        mbar_wait(landed + n % kFbStages, unsigned(n / kFbStages) & 1);
        const int row = tid / Sb::RowThreads, j = tid % Sb::RowThreads;
        const double v = fused_row_sums<Sl, Sb::RowThreads>(ring + (n % kFbStages) * Sb::StageBytes + a_at, j);
        if (n > 0) cluster_wait(), waited = true;
        send_row_entry<Sb::RowThreads>(gpart + (n % 3) * Sb::C * NC, rows_in + n % 3, rank, row, j, v);
      }
      if (n >= 2) {
        // c. Tile m = n - 2 from its ring stage, once every token's coefficients are in.
        const int m = n - 2;
        mbar_wait<true>(coef_in + m % 3, unsigned(m / 3) & 1);
        const unsigned char* xs = ring + size_t(m % kFbStages) * Sb::StageBytes;
        // The group's first row: its grad_x row, and how many of its rows are tokens. Row by row the stores step by
        // K, and g_y's unit sits a fixed distance from x's (the same swizzle, another stream's lines).
        const int64_t first = mine.tile(m) * Sb::TM + row0;
        bf16* out = fa.gx + first * K + kcol;
        const int left = a.tokens - first < Sb::Rows ? int(a.tokens - first) : Sb::Rows;
        const unsigned char* xr = xs + x_at0;
        const unsigned c_row0 = opaque(unsigned((m % 3) * Sb::TM * CW + row0 * CW));
        const float *cr = scoef + c_row0, *pr = scoef + opaque(c_row0 + MP + 1 + uh);
#pragma unroll
        for (int rr = 0; rr < Sb::Rows; ++rr, out += K) {
          const unsigned char* xp = xr + rr * 128 + (x_swz ^ (rr << 4));
          const uint4 x4 = *reinterpret_cast<const uint4*>(xp);
          const uint4 g4 = *reinterpret_cast<const uint4*>(xp + g_from_x);
          const uint32_t xw[4] = {x4.x, x4.y, x4.z, x4.w}, gw[4] = {g4.x, g4.y, g4.z, g4.w};
          const float* cf = cr + rr * CW;
          float cm[MP];
#pragma unroll
          for (int q = 0; q < MP; ++q) cm[q] = cf[q];
          const float c = cf[MP], ph = pr[rr * CW];
          float o[8];
#pragma unroll
          for (int e = 0; e < 8; ++e)
            o[e] = dx_element<true>(cm, f, acc, e, c, ph, e & 1 ? bf_hi(xw[e / 2]) : bf_lo(xw[e / 2]),
                                    e & 1 ? bf_hi(gw[e / 2]) : bf_lo(gw[e / 2]));
          Vec<bf16, 8>::store16(out, o, rr < left);
        }
        tiles.release(mine, m, 32 * kFbWarps, kCoefBytes);
      }
      if (!waited) cluster_wait();
      cluster_arrive_relaxed();  // X(n)
    } else {
      if (n > 0) cluster_wait();
      cluster_arrive_relaxed();  // X(n), before the work below: see the note at the top
      if (n < 1 || n > mine.count) continue;
      // b. Token `rank` of tile m = n - 1: its mixes are loaded before the wait for its sums.
      const int m = n - 1;
      const int64_t t = mine.tile(m) * Sb::TM + rank;
      const bool live = t < a.tokens;
      const float mix = live && lane < a.H ? a.mixes[t * a.H + lane] : 0.f;
      const double red = gather_rows<Sb::C>(gpart + (m % 3) * Sb::C * NC, rows_in + m % 3, unsigned(m / 3) & 1);
      float cf;
      double gg;
      Kind::bwd_token_warp(red, mix, gate_base, gate_scale, K, a.rms_eps, a.hc_eps, a.H, cf, gg);
      if (!live) cf = 0.f;  // the tile's rows past the last token: zeros (x is zero there too)
      broadcast_coef<CW, Sb::C>(scoef + (m % 3) * Sb::TM * CW + rank * CW, coef_in + m % 3, cf);
      if (live && lane < Kind::GW) a.gate[t * Kind::GW + lane] = gg;
    }
  }
  cluster_wait();
  if (warp < kFbWarps) {
    float* p = fa.part + (int64_t(mine.id) * Sb::Groups + group) * a.M * K + kcol;
#pragma unroll
    for (int m = 0; m < MP; ++m)
      if (m < a.M) {
        *reinterpret_cast<float4*>(p + int64_t(m) * K) = make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
        *reinterpret_cast<float4*>(p + int64_t(m) * K + 4) = make_float4(acc[m][4], acc[m][5], acc[m][6], acc[m][7]);
      }
  }
}

// ---- hc_pre's backward in one pass over x: mix_fused_bwd_mma ------------------------------------------------------
// hc_pre's two-pass backward (reduce, then dx_dfn_mma) reads x and g_y twice: 1.56x the one-pass bytes, so even at the
// copy rate it would take 64% of it (H100, V4 dims: 0.780 ms = 52%). mix_fused_bwd's cluster cannot carry hc_pre as it
// is: 24 mixes put grad_x and grad_fn on the tensor cores (dx_dfn_mma's products), and fn's fragments with the grad_fn
// sums of a thread's columns do not fit its registers. Here the same cluster of 16 CTAs holds a tile of 16 tokens, a
// CTA a slice of Dc hidden positions of every stream (x and g_y by TMA), with 16 compute warps, warp w owning one
// 64-column chunk of the slice (stream w / Chunks): the grad_fn sums of its 64 columns x 24 mixes stay in registers
// (48 a lane), fn's fragments (two bf16 terms) sit in shared memory, written once. Per iteration n:
//   a. compute warps, tile n: warp w sums row w (sum x^2 and <g_y, x_h>, fp64 from exact products, a unit of 8
//      positions a lane) and sends it to CTA w by st.async;
//   b. the finisher warp, tile n: CTA r sums token r's 16 partial rows in rank order, runs PreKind::bwd_token_warp
//      (the Sinkhorn's part came from mix_comb_bwd, launched before) and sends the coefficient row to every CTA;
//   c. compute warps, tile n - 1: grad_fn^T += x^T coef (x exact, coef in three bf16 terms) and grad_x = coef @ fn
//      (two terms each) - c x + pre_h g_y, as mix_bwd_dx_dfn_mma computes them; grad_x goes back into the x tile and
//      leaves in 16-byte stores; the stage then takes tile n + 2.
// The ring has three stages (fn's 96 KB leave no room for a fourth), so c runs one tile behind a, not two: b's
// latency hides behind c(n - 1) and a(n + 1). The cluster barrier X(n) orders the reuse of the st.async slots as in
// mix_fused_bwd; here the finisher handles tile n in iteration n, after arriving at X(n).
// Measured (H200, V4 dims, bench/hc_cuda_timing.cu, every row in the same process): grad_x bit for bit the two-pass
// path's (hashes at 257 and 16384 tokens), grad_base and grad_scale too; but slower: comb_bwd + this + sum_splits +
// colsum 0.846 ms, then 0.812-0.826 ms with the fragments stored as the MMAs' register pairs, offsets computed once
// and two n-tiles' chains interleaved, against 0.711-0.722 ms for the two passes (comb_bwd alone 0.050 ms); on an H100
// 0.825-0.829 against 0.773-0.777 ms (comb_bwd 0.055). So the bridge keeps the two passes for hc_pre. ncu (H200 at
// 1.35 GHz, ncu's clocks): 17.1K warp instructions per tile and
// CTA (19.9K before those three steps), issue slots 38% busy; of the compute warps' stall samples, a 27% (F2F to fp64
// through the MIO queue, 50 shuffles a warp), c 50% (waits between dependent HMMAs: 52 NOPs a warp and tile), the
// coefficients' wait 12%, barrier 1 8%. Tried and dropped: a on the fifth warpgroup (four rows a warp, eight lanes a
// row, so 6.7x fewer shuffles, beside c): 1.16 ms, one warp a scheduler cannot hide the fp64 chains, and the
// finisher waited behind its own rows. To reach 75% of the copy rate this needs about half the instructions per tile
// (the steps and profiles: reports/gpu/2026-11-26-h200-hc-pre-fused-bwd-ab.json). Also tried and dropped: the two
// passes as producers and consumers of one cooperative launch, chained through L2 (reduce + bwd_token_warp per token;
// dx_dfn_mma's CTAs on interleaved tiles): the same grad_x bits, 0.819-0.829 against 0.78-0.79 ms (H100), bound by its
// consumers (alone, on the 192 CTAs the producers leave, 0.71 ms); nor did a dx_dfn_mma tile with its coefficients
// split once per CTA (0.513 against 0.489 ms) or a deeper ring (0.504-0.513) help: ncu finds dx_dfn_mma latency-bound
// at its 16 warps an SM (DRAM 75% of peak, issue 62%), yet a version with fn's fragments in shared memory and a third
// CTA an SM (80 registers, 6 splits) is slower: dx_dfn 0.521-0.529 against 0.477-0.483 ms, with a 3-stage ring too
// (reports/gpu/2026-11-27-h100-hc-pre-bwd-chain.log, 2026-11-27-h100-dx-dfn-mma-three-ctas-ab.log, the patches
// beside them). Ablations (H100, reports/gpu/2026-11-27-h100-hc-pre-fused-bwd-ablations.log; comb_bwd + this + sums
// 0.826 ms): without the row sums 0.801, without grad_fn's MMAs 0.759, without grad_x's 0.739, without the finisher's
// gate backward 0.752, and with none of them (the loads, exchange and stores alone) 0.500 ms, against the 0.54 that
// 75% of the copy rate allows (1.217 GB at 75% of 2975-3000 GB/s; `parity run --perf` counts 1.2174 GB, 0.540 ms at
// run48's 3007 GB/s): here the compute could add at most ~0.04 ms over the data movement, or ~0.1 ms with comb_bwd
// (0.055; 0.035 by quads since, comb_backward_quad, the whole path 0.8202 -> 0.7995 ms) hidden in the kernel and
// the sums (0.021) folded into it. Nor is the three-stage ring what keeps it from
// hiding: with fn's fragments made up in registers (no shared memory, no loads) and five stages in the 96 KB freed,
// 0.836 ms against 0.827 as is, and 0.831 with three
// (reports/gpu/2026-11-27-h100-hc-pre-fused-bwd-stages-ablation.log): the compute warps' own instructions and HMMA
// chains (~715 instructions and 84 MMAs a warp and tile, by count of the source) set the pace, not the lookahead.
// What those MMAs cost at best (bench/mma_sync_rate.cu, H100: a warp issues one no closer than ~16 cycles apart, a
// sub-partition one every ~6.3 cycles): 2117 cycles of a sub-partition's tensor pipe a tile, 34% of the 6280 cycles
// (1980 MHz) a tile has if the whole backward is to take 75% of the copy rate, beside ~46% for the other
// instructions; it takes ~10.2K now (reports/gpu/2026-11-28-h100-mma-sync-rate.log). So the target needs the two
// overlapped almost fully, across warps in different phases of different tiles (warp-specialised).
// Nor does grad_x's product on wgmma help (fn^T's terms and the tile's coefficients as shared-memory operands, five
// m64n16k16 a chunk, one chunk in flight beside the previous one's epilogue): x1.16 slower on an H200 (0.806 -> 0.933
// ms), each chunk waiting on its chain of small wgmma and the coefficients' operand costing a CTA barrier a tile
// (reports/gpu/2026-11-27-h200-hc-pre-fused-bwd-wgmma-grad-x-ab.log, the patch beside it).
// At 9f7d04e (H200): 0.7712 ms against the two passes' 0.5887. What sped dx_dfn_mma up since did not carry over (same
// bits, every run slower): the coefficients' fragments formed once a tile by a spare warp of the fifth warpgroup, not
// by every compute warp (step c 609 -> 489 instructions a warp and tile), x1.024; and with it each stage refilled by
// its last warp, x1.033 (reports/gpu/2026-11-29-h200-hc-pre-fused-bwd-terms-warp-ab.log, the patches beside it): the
// extra hop lands on the per-tile chain, which the compute warps' instructions do not set.
// Threads: four warpgroups of compute warps and a fifth whose first warp is the finisher (its other three only keep
// the cluster barrier). 20 warps launch at 96 registers a thread (5 warps a scheduler), where the grad_fn sums
// spilled 88 bytes; setmaxnreg then moves registers within the CTA's pool, which is what the launch allocated (an
// increase beyond it waits forever): the finisher's group down to kFmFinisherRegs, the compute warps up to
// kFmComputeRegs (ptxas: 4 bytes of a loop-invariant value spilled, one reload per tile).
constexpr int kFmWarps = 16, kFmThreads = 32 * (kFmWarps + 4), kFmStages = 3, kFmCoefStride = 36;
constexpr int kFmLaunchRegs = 65536 / 4 / (kFmThreads / 4) / 8 * 8;  // a scheduler: 16K registers, 5 warps
constexpr int kFmComputeRegs = 104, kFmFinisherRegs = 64;
static_assert(kFmLaunchRegs == 96 && kFmWarps * kFmComputeRegs + 4 * kFmFinisherRegs <= (kFmWarps + 4) * kFmLaunchRegs,
              "setmaxnreg stays within the CTA's register pool");

struct FusedMmaBwd {
  using Sl = FusedSlice<2>;  // hidden 4096: Dc = 256, four chunks of 64 positions a stream
  static constexpr int TM = kFusedTM, C = kFusedCluster;
  static constexpr int Dc = Sl::Dc, XBytes = Sl::StageBytes, StageBytes = XBytes + kFusedTM * Dc * 2;
  static constexpr int NT = 8;                                  // n-tiles of 8 columns in a warp's chunk
  static constexpr int FnBytes = kFmWarps * NT * 3 * 32 * 8;   // [warp][n-tile][k-step][lane] {lo, hi}
  static constexpr int CoefBytes = kFusedTM * kFmCoefStride * 4;
  static_assert(Sl::Chunks * H4 == kFmWarps && kFusedTM == kFmWarps, "a chunk and a row per warp");
  static_assert(StageBytes % 1024 == 0, "1024-byte stages (128-byte swizzle)");
};

constexpr size_t mix_fused_bwd_mma_smem_bytes() {
  using F = FusedMmaBwd;
  return size_t(kFmStages) * F::StageBytes + F::FnBytes  // x and g_y ring; fn's fragments
         + size_t(3) * kFusedCluster * (1 + H4) * 8     // every CTA's partial row of token `rank` (fp64), x3
         + size_t(3) * F::CoefBytes                      // the tile's coefficient rows, three tiles
         + size_t(kFmStages + 3 + 3) * 8;                // mbarriers: ring stages, gpart and scoef slots
}

__global__ void __launch_bounds__(kFmThreads, 1) mix_fused_bwd_mma_kernel(const __grid_constant__ CUtensorMap xmap,
                                                                          const __grid_constant__ CUtensorMap gmap,
                                                                          FusedBwdArgs fa) {
  using F = FusedMmaBwd;
  using Sl = F::Sl;
  constexpr int MP = PreKind::MP, CW = PreKind::CW, GW = PreKind::GW, NC = 1 + H4, D = 2 * kFusedHidden, K = H4 * D;
  constexpr int CS = kFmCoefStride;
  static_assert(MP == 24 && CW <= CS && GW <= 32, "the mixes are one k16 and one k8 step, three n-tiles of 8");
  const MixBwdTokenArgs& a = fa.t;
  const int rank = int(cooperative_groups::this_cluster().block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const ClusterTiles mine(a.tokens);

  extern __shared__ __align__(1024) unsigned char fused_smem[];
  unsigned char* ring = fused_smem;
  uint2* fnf = reinterpret_cast<uint2*>(ring + size_t(kFmStages) * F::StageBytes);
  double* gpart = reinterpret_cast<double*>(reinterpret_cast<unsigned char*>(fnf) + F::FnBytes);  // [3][CTA][NC]
  float* scoef = reinterpret_cast<float*>(gpart + 3 * kFusedCluster * NC);                         // [3][row][CS]
  uint64_t* landed = reinterpret_cast<uint64_t*>(scoef + 3 * kFusedTM * CS);                       // [stage]
  uint64_t* rows_in = landed + kFmStages;  // [3]
  uint64_t* coef_in = rows_in + 3;         // [3]
  constexpr unsigned kCoefBytes = kFusedCluster * CW * 4;

  const FusedBwdTiles<kFmStages, F> tiles{ring, landed, rows_in, coef_in, &xmap, &gmap, rank * Sl::Chunks};
  if (tid == 0) tiles.start(mine, kCoefBytes);

  // The warp's chunk: stream h, 64 positions of it, columns kw .. kw + 63 of x, fn and grad_x.
  const int h = warp / Sl::Chunks, chunk = warp % Sl::Chunks;
  const int kw = h * D + rank * F::Dc + chunk * 64;
  // Every warp arrives at X(n) once per iteration n < count + 1: the compute warps at its end, the finisher at its
  // start.
  if (warp < kFmWarps) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kFmComputeRegs));
    // The warp's fn fragments (fn_fragment) for its 8 n-tiles in shared memory: pair p of n-tile nt for lane l at
    // fnf[((warp * NT + nt) * 3 + p) * 32 + l], so that each is one conflict-free 8-byte load; a lane reads back only
    // what it wrote. (As {lo, hi} per k-step, the pairs were re-formed by register moves, 4 an n-tile.)
    uint2* myfn = fnf + warp * F::NT * 3 * 32 + lane;
#pragma unroll 1
    for (int nt = 0; nt < F::NT; ++nt) {
      const FnFrag b = fn_fragment(fa.fn + kw + 8 * nt + g, K, a.M, q, true);
      myfn[nt * 96] = b.lo, myfn[nt * 96 + 32] = b.hi, myfn[nt * 96 + 64] = b.k8;
    }
    // Byte offsets in a stage, computed once (Sl::at per use cost ~7 integer instructions an access): unit u of row r
    // sits at line(h, r, chunk) + ((u ^ (r & 7)) << 4), and row r + 8 one kilobyte on with the same swizzle.
    const unsigned a_off = Sl::at(0, warp, lane);                       // a: row `warp`, unit `lane`, stream 0
    const unsigned e_x = Sl::line(h, g, chunk) + 4 * q, e_g = F::XBytes + Sl::line(0, g, chunk) + 4 * q;
    const unsigned e_swz = (g & 7) << 4;                                 // epilogue: unit nt at e_swz ^ (nt << 4)
    const int lm_r = (lane & 7) + 8 * (lane >> 4);                       // grad_fn's ldmatrix rows and units
    const unsigned l_off = Sl::line(h, lm_r, chunk), l_swz = (((lane >> 3) & 1) ^ (lane & 7)) << 4;
    const int s_r = lane >> 3, s_u = lane & 7;                           // the stores: rows s_r + 4j, unit s_u
    const unsigned s_off0 = Sl::line(h, s_r, chunk) + ((s_u ^ s_r) << 4);
    const unsigned s_off1 = Sl::line(h, s_r + 4, chunk) + ((s_u ^ (s_r + 4)) << 4);
    cluster_arrive_relaxed();
    cluster_wait();
    // grad_fn^T sums: [m-tile of 16 columns][n-tile of 8 mixes][4] (columns 16 mt + g (+8 for e >= 2), mixes 8 nt +
    // 2q (+1 for odd e)).
    float acc[4][3][4] = {};
    for (int n = 0; n < int(mine.count) + 1; ++n) {
      bool waited = n == 0;  // X(n-1), before this iteration's sends
      if (n < mine.count) {
        // a. Row `warp` of tile n: lane j takes unit j of g_y's slice and the same positions of every stream.
        mbar_wait(landed + n % kFmStages, unsigned(n / kFmStages) & 1);
        const double v = fused_row_sums<F::Sl, 32>(ring + (n % kFmStages) * F::StageBytes + a_off, lane);
        if (n > 0) cluster_wait(), waited = true;
        send_row_entry<32>(gpart + (n % 3) * kFusedCluster * NC, rows_in + n % 3, rank, warp, lane, v);
      }
      if (n >= 1) {
        // c. Tile m = n - 1 from its ring stage, once every token's coefficients are in.
        const int m = n - 1;
        mbar_wait<true>(coef_in + m % 3, unsigned(m / 3) & 1);
        unsigned char* xs = ring + size_t(m % kFmStages) * F::StageBytes;
        const float* cs = scoef + (m % 3) * kFusedTM * CS;

        // grad_fn: x^T of the chunk's four m-tiles (ldmatrix.trans: matrices (columns +0/+8) x (tokens 0-7/8-15)).
        uint32_t xa[4][4];
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) ldmatrix_x4<true>(xa[mt], xs + l_off + (l_swz ^ (mt << 5)));
        grad_fn_mma(acc, xa, coef_terms_of(cs, CS, g, q));

        // grad_x: coef rows g and g + 8 as A fragments in two terms, then two n-tiles at a time.
        const CoefFrag ca = coef_fragment(cs, CS, g, q);
        const float c_lo = cs[g * CS + MP], c_hi = cs[(g + 8) * CS + MP];
        const float p_lo = cs[g * CS + MP + 1 + h], p_hi = cs[(g + 8) * CS + MP + 1 + h];
#pragma unroll
        for (int nt = 0; nt < F::NT; nt += 2) {
          FnFrag fb[2];
          float d[2][4];
#pragma unroll
          for (int i = 0; i < 2; ++i)
            fb[i] = {myfn[(nt + i) * 96], myfn[(nt + i) * 96 + 32], myfn[(nt + i) * 96 + 64]};
          grad_x_mma(d, ca, fb);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            // This lane's word q (columns 2q, 2q+1) of unit nt + i, rows g and g + 8 (1024 bytes on): x in, grad_x
            // back in its place.
            const unsigned o = e_swz ^ ((nt + i) << 4);
            uint32_t* x0 = reinterpret_cast<uint32_t*>(xs + e_x + o);
            const uint32_t* g0 = reinterpret_cast<const uint32_t*>(xs + e_g + o);
            x0[0] = dx_word(d[i][0], d[i][1], c_lo, x0[0], p_lo, g0[0]);
            x0[256] = dx_word(d[i][2], d[i][3], c_hi, x0[256], p_hi, g0[256]);
          }
        }
        __syncwarp();
        // The warp's grad_x tile: 16 rows x 8 units, four 16-byte stores a lane (a row's 128 bytes by 8 lanes).
        bf16* out = fa.gx + (mine.tile(m) * kFusedTM + s_r) * K + kw + 8 * s_u;
        const int64_t left = a.tokens - mine.tile(m) * kFusedTM - s_r;  // rows s_r + 4j < left are tokens
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (4 * j < left)
            *reinterpret_cast<uint4*>(out + int64_t(4 * j) * K) =
                *reinterpret_cast<const uint4*>(xs + (j & 1 ? s_off1 : s_off0) + (j >> 1) * 1024);
        fence_proxy_async();  // grad_x written into the stage, before the tensor copy that refills it
        tiles.release(mine, m, 32 * kFmWarps, kCoefBytes);
      }
      if (!waited) cluster_wait();
      cluster_arrive_relaxed();  // X(n)
    }
    cluster_wait();
    float* p = fa.part + int64_t(mine.id) * a.M * K + kw;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < 3; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int mx = 8 * nt + 2 * q + (e & 1), col = 16 * mt + g + 8 * (e >> 1);
          if (mx < a.M) p[int64_t(mx) * K + col] = acc[mt][nt][e];
        }
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kFmFinisherRegs));
    cluster_arrive_relaxed();
    cluster_wait();
    const float s0 = __ldg(a.scale), s1 = __ldg(a.scale + 1), s2 = __ldg(a.scale + 2);
    const float base_m = lane < a.M ? __ldg(a.base + lane) : 0.f;
    for (int n = 0; n < int(mine.count) + 1; ++n) {
      if (n > 0) cluster_wait();
      cluster_arrive_relaxed();  // X(n), before the work below
      if (n >= mine.count || warp != kFmWarps) continue;
      // b. Token `rank` of tile n: its gate inputs are loaded before the wait for its sums.
      const int64_t t = mine.tile(n) * kFusedTM + rank;
      const bool live = t < a.tokens;
      const int H = a.H;
      const float mix = live && lane < a.M ? a.mixes[t * a.M + lane] : 0.f;
      const float g_post = live && lane >= H && lane < 2 * H ? a.g_post[t * H + lane - H] : 0.f;
      const double g_comb = live && lane >= 2 * H && lane < a.M ? a.gate[t * GW + lane] : 0.0;
      const double red =
          gather_rows<kFusedCluster>(gpart + (n % 3) * kFusedCluster * NC, rows_in + n % 3, unsigned(n / 3) & 1);
      float cf;
      double gg;
      PreKind::bwd_token_warp(red, mix, base_m, s0, s1, s2, g_post, g_comb, a, cf, gg);
      if (!live) cf = 0.f;  // the tile's rows past the last token: zeros (x is zero there too)
      broadcast_coef<CW, kFusedCluster>(scoef + (n % 3) * kFusedTM * CS + rank * CS, coef_in + n % 3, cf);
      if (live && lane < GW) a.gate[t * GW + lane] = gg;
    }
    cluster_wait();  // no CTA leaves while another may still send into its shared memory
  }
}

// The Sinkhorn's share of hc_pre's backward (PreKind::comb_backward, a thread per token; at hc 4 comb_backward_quad)
// ahead of mix_fused_bwd_mma, whose finisher reads it back from the gate rows: it needs neither x nor g_y.
template <int HC>
__global__ void __launch_bounds__(128) mix_comb_bwd_kernel(MixBwdTokenArgs a) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (HC == H4) comb_backward_quad(g, a);
  else if (g < a.tokens) PreKind::comb_backward(g, a, HC);
}

// The sums after a backward without them in its own launch (launch_mix_bwd_sums): blocks [0, cs.cols) sum the gate
// columns as colsum_column does, first so that the longest go out first; the rest the splits' partials of grad_fn,
// n of them, each over the splits in order. Launched programmatically dependent (griddep_wait before any read).
__global__ void __launch_bounds__(256) mix_bwd_sums_kernel(const float* __restrict__ part, float* __restrict__ out,
                                                           int64_t n, int splits, ColsumArgs cs) {
  __shared__ double sh[256];
  griddep_wait();
  if (int(blockIdx.x) < cs.cols) return colsum_column(cs, blockIdx.x, sh);
  const int64_t first = int64_t(blockIdx.x - cs.cols) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n; i += int64_t(gridDim.x - cs.cols) * blockDim.x) split_sum<1>(part, n, i, splits, out);
}

// -------------------------------------------------------------------------------------------------------------------
// Launch helpers
// -------------------------------------------------------------------------------------------------------------------

void check_hc(int hc) {
  if (hc < 1 || hc > kMaxHc)
    throw std::invalid_argument("hc cuda kernels: hc must be in [1, " + std::to_string(kMaxHc) + "], got " +
                                std::to_string(hc));
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

template <typename F>
void with_dtype(Dtype dt, F&& f) {
  if (dt == Dtype::bf16) f(bf16{});
  else f(float{});
}

template <typename F>
void with_bool(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

// f(std::integral_constant<int, hc>) for hc in [1, kMaxHc] (check_hc has vetted it).
template <typename F>
void with_hc(int hc, F&& f) {
  static_assert(kMaxHc == 4);
  switch (hc) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

template <typename F>
void with_kind(MixKind kind, F&& f) {
  if (kind == MixKind::pre) f(PreKind{});
  else f(HeadKind{});
}

// 16-byte paths need hidden % 8 == 0 (every row then starts 16-byte aligned) and 16-byte aligned bases.
bool vec_ok(int64_t hidden, std::initializer_list<const void*> ptrs) {
  if (hidden % 8 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned(p, 16)) return false;
  return true;
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------------
// Launchers
// -------------------------------------------------------------------------------------------------------------------

int mix_rows(MixKind kind, int hc) { return kind == MixKind::pre ? (2 + hc) * hc : hc; }
int mix_scale_count(MixKind kind) { return kind == MixKind::pre ? PreKind::NS : HeadKind::NS; }
int64_t mix_coef_floats(MixKind kind, int64_t tokens) {
  if (kind == MixKind::head) return tokens * HeadKind::CW;
  return tokens * PreKind::CW + int64_t(ceil_div(tokens, kTermTileTokens)) * kDxTermWords;
}
int mix_gate_width(MixKind kind) { return kind == MixKind::pre ? PreKind::GW : HeadKind::GW; }

int64_t sinkhorn_hist_floats(int64_t tokens, int hc, int iters) {
  // Every stage (comb_backward), or at hc 4 every kQuadSegment-th (comb_backward_quad's checkpoints).
  const int norms = std::max(sinkhorn_norms(iters), 0);
  const int stages = hc == H4 ? (norms + kQuadSegment - 1) / kQuadSegment : norms;
  return int64_t(stages) * H4 * H4 * tokens;
}

int mix_bwd_splits(MixKind kind, Dtype dt, int64_t tokens, int hc, int64_t hidden, int sm_count) {
  const int64_t k = int64_t(hc) * hidden;
  const bool mma = dx_dfn_mma_shape(kind, dt, hidden);
  const int64_t resident = mma ? kDxMmaResident : 3;
  const int64_t kblocks = mma ? hidden / kDxMmaD : std::max<int64_t>(1, (k + 2 * kDxThreads - 1) / (2 * kDxThreads));
  // One wave of the resident CTAs (rounding up made a second, nearly empty wave: ~2x the time at V4 dims); a split of
  // fewer than 32 tokens is not worth its partial row.
  int64_t splits = resident * int64_t(std::max(sm_count, 1)) / kblocks;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, tokens / 32));
  return int(std::clamp<int64_t>(splits, 1, 64));
}

void launch_hc_post_fwd(Dtype dt, bool hf, const void* x, const void* residual, const float* post, const float* comb,
                        void* out, int64_t tokens, int hc, int64_t hidden, cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0 || hidden == 0) return;
  const bool vec = vec_ok(hidden, {x, residual, out});
  const unsigned blocks = ceil_div(tokens, kWarpTokensPerBlock);
  with_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    with_bool(vec, [&](auto v) {
      constexpr int V = decltype(v)::value ? 8 : 1;
      with_bool(hf, [&](auto h) {
        hc_post_fwd_kernel<T, V, decltype(h)::value><<<blocks, 256, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(residual), post, comb, static_cast<T*>(out), tokens, hc,
            int(hidden));
      });
    });
  });
}

void launch_hc_post_bwd(Dtype dt, const void* grad_out, const void* x, const void* residual, const float* post,
                        const float* comb, void* grad_x, void* grad_residual, float* grad_post, float* grad_comb,
                        int64_t tokens, int hc, int64_t hidden, cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0) return;
  const bool vec = vec_ok(hidden, {grad_out, x, residual, grad_x, grad_residual});
  const unsigned blocks = ceil_div(tokens, kPostBwdTokensPerBlock);
  with_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    with_bool(vec, [&](auto v) {
      constexpr int V = decltype(v)::value ? 8 : 1;
      hc_post_bwd_kernel<T, V><<<blocks, 32 * kPostBwdTokensPerBlock, 0, stream>>>(
          static_cast<const T*>(grad_out), static_cast<const T*>(x), static_cast<const T*>(residual), post, comb,
          static_cast<T*>(grad_x), static_cast<T*>(grad_residual), grad_post, grad_comb, tokens, hc, int(hidden));
    });
  });
}

int64_t mix_fnT_floats(MixKind kind, int hc, int64_t hidden) {
  return int64_t(hc) * hidden * (kind == MixKind::pre ? PreKind::MP : HeadKind::MP);
}

void launch_mix_fn_transpose(MixKind kind, const float* fn, float* fnT, int hc, int64_t hidden, cudaStream_t stream) {
  check_hc(hc);
  const int64_t K = hc * hidden;
  const int mp = kind == MixKind::pre ? PreKind::MP : HeadKind::MP;
  if (K == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((K * mp + 255) / 256, 2048));
  mix_fn_transpose_kernel<<<blocks, 256, 0, stream>>>(fn, fnT, mix_rows(kind, hc), mp, int(K));
}

void launch_mix_fwd(MixKind kind, Dtype dt, const void* x, const float* fnT, const float* base, const float* scale,
                    float* mixes, float* pre, float* post, float* comb, int64_t tokens, int hc, int64_t hidden,
                    MixConsts k, cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0) return;
  const int K = int(hc * hidden);
  const MixFwdArgs a{base, scale, mixes, pre, post, comb, tokens, K, hc, mix_rows(kind, hc),
                     k.hc_eps, k.rms_eps, k.post_mult, k.sinkhorn_iters};
  // 16-byte copies of x straight into shared memory: every row must start on 16 bytes (K % 8 == 0 serves both).
  const bool as = aligned(x, 16) && aligned(fnT, 16) && K % 8 == 0;
  const unsigned blocks = ceil_div(tokens, kTM);
  with_kind(kind, [&](auto kind_tag) {
    using Kind = decltype(kind_tag);
    with_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      with_bool(as, [&](auto v) {
        auto kernel = mix_fwd_kernel<T, Kind, decltype(v)::value>;
        constexpr size_t smem = mix_fwd_smem_bytes<T, Kind::MP>();
        // Above 48 KB a kernel must opt in; an error here is what the bridge's cudaGetLastError then reports.
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
          return;
        kernel<<<blocks, kMixThreads, smem, stream>>>(static_cast<const T*>(x), fnT, a);
      });
    });
  });
}

namespace {

// A fused kernel's launch: `clusters` clusters of `cluster` CTAs (16 is a non-portable size: Hopper allows it).
struct FusedLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  FusedLaunch(int clusters, size_t smem, cudaStream_t stream, int threads = kFusedThreads,
              int cluster = kFusedCluster) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(cluster), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(unsigned(clusters * cluster)), cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem, cfg.stream = stream, cfg.attrs = &attr, cfg.numAttrs = 1;
  }
  FusedLaunch(const FusedLaunch&) = delete;  // cfg points at attr
};

// A tensor map of `rank` dims (innermost first; strides in bytes of dims 1..rank-1) whose boxes land in shared memory
// with the 128-byte swizzle.
CUtensorMap swizzled_map(CUtensorMapDataType type, cuuint32_t rank, const void* p, const cuuint64_t* dims,
                         const cuuint64_t* strides, const cuuint32_t* box) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) throw std::runtime_error("hc kernels: the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map;
  const cuuint32_t step[4] = {1, 1, 1, 1};
  const CUresult r = encode(&map, type, rank, const_cast<void*>(p), dims, strides, box, step,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("hc kernels: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ")");
  return map;
}

// x [tokens][streams][hidden] as the fused kernels' 4-D tensor map (see the forward's layout note) with its box: a
// tile's (tm tokens) slice of every stream (x: H4 streams; the backward's g_y: one).
CUtensorMap fused_x_map(const void* x, int64_t tokens, int64_t hidden, int dc, int streams = H4, int tm = kFusedTM) {
  // [stream][hidden / 64][token][64]: strides (bytes) of dims 1-3 are token, chunk, stream.
  const cuuint64_t dims[4] = {64, cuuint64_t(tokens), cuuint64_t(hidden / 64), cuuint64_t(streams)};
  const cuuint64_t strides[3] = {cuuint64_t(streams * hidden) * 2, 128, cuuint64_t(hidden) * 2};
  const cuuint32_t box[4] = {64, cuuint32_t(tm), cuuint32_t(dc / 64), cuuint32_t(streams)};
  return swizzled_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, x, dims, strides, box);
}

template <typename F>
void with_fused(MixKind kind, int64_t hidden, F&& f) {
  with_kind(kind, [&](auto kind_tag) {
    using Kind = decltype(kind_tag);
    if (hidden == kFusedHidden) f(Kind{}, std::integral_constant<int, 1>{});
    else f(Kind{}, std::integral_constant<int, 2>{});
  });
}

}  // namespace

int mix_fused_fwd_clusters(MixKind kind, int64_t hidden) {
  return once_per_device(std::make_pair(int(kind), hidden), [&] {
    int n = 0;
    with_fused(kind, hidden, [&](auto kind_tag, auto bpw) {
      using Kind = decltype(kind_tag);
      auto kernel = mix_fused_fwd_kernel<Kind, decltype(bpw)::value>;
      const int smem = int(mix_fused_smem_bytes<Kind::MP, decltype(bpw)::value>());
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
          cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
        return;
      const FusedLaunch launch(1, size_t(smem), nullptr);
      if (cudaOccupancyMaxActiveClusters(&n, kernel, &launch.cfg) != cudaSuccess) n = 0;
    });
    return n;  // 0: no fused path here
  });
}

bool mix_fused_fwd_fits(MixKind kind, Dtype dt, const void* x, const float* fn, const void* y, int hc,
                        int64_t hidden) {
  // fn is read in float2 (fn's fragments): a view of it at an odd float offset takes the unfused path.
  return dt == Dtype::bf16 && hc == kMaxHc && (hidden == kFusedHidden || hidden == 2 * kFusedHidden) &&
         aligned(x, 16) && aligned(fn, 8) && aligned(y, 16) && mix_fused_fwd_clusters(kind, hidden) > 0;
}

void launch_mix_fused_fwd(MixKind kind, const void* x, const float* fn, const float* base, const float* scale,
                          float* mixes, float* pre, void* y, int64_t tokens, int hc, int64_t hidden, MixConsts k,
                          cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0) return;
  const FusedArgs fa{{base, scale, mixes, pre, nullptr, nullptr, tokens, int(hc * hidden), hc, mix_rows(kind, hc),
                      k.hc_eps, k.rms_eps, k.post_mult, k.sinkhorn_iters},
                     static_cast<bf16*>(y)};
  const int64_t tiles = (tokens + kFusedTM - 1) / kFusedTM;
  const int clusters = int(std::min<int64_t>(tiles, mix_fused_fwd_clusters(kind, hidden)));
  with_fused(kind, hidden, [&](auto kind_tag, auto bpw) {
    using Kind = decltype(kind_tag);
    constexpr int BPW = decltype(bpw)::value;
    const FusedLaunch launch(clusters, mix_fused_smem_bytes<Kind::MP, BPW>(), stream);
    cudaLaunchKernelEx(&launch.cfg, mix_fused_fwd_kernel<Kind, BPW>, fused_x_map(x, tokens, hidden, FusedSlice<BPW>::Dc),
                       fn, fa);
  });
}

namespace {

// The fused backward's kernel for a kind and hidden, as f(kernel, shared memory bytes, threads, splits per cluster,
// Dc, CTAs a cluster and tokens a tile, the same number): hc_head's mix_fused_bwd (hidden 2048 or 4096), hc_pre's
// mix_fused_bwd_mma (hidden 4096); false: none.
template <typename F>
bool with_fused_bwd(MixKind kind, int64_t hidden, F&& f) {
  if (kind == MixKind::pre) {
    if (hidden != 2 * kFusedHidden) return false;
    f(mix_fused_bwd_mma_kernel, mix_fused_bwd_mma_smem_bytes(), kFmThreads, 1, FusedMmaBwd::Dc, kFusedCluster);
    return true;
  }
  const auto head = [&](auto bpw) {
    using Sb = FusedBwdSlice<decltype(bpw)::value>;
    f(mix_fused_bwd_kernel<HeadKind, decltype(bpw)::value>, mix_fused_bwd_smem_bytes<HeadKind, decltype(bpw)::value>(),
      kFbThreads, Sb::Groups, Sb::Dc, Sb::C);
  };
  if (hidden == kFusedHidden) head(std::integral_constant<int, 1>{});
  else if (hidden == 2 * kFusedHidden) head(std::integral_constant<int, 2>{});
  else return false;
  return true;
}

int mix_fused_bwd_clusters(MixKind kind, int64_t hidden) {
  return once_per_device(std::make_pair(int(kind), hidden), [&] {
    int n = 0;
    with_fused_bwd(kind, hidden, [&](auto kernel, size_t smem, int threads, int, int, int cluster) {
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess ||
          cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
        return;
      const FusedLaunch launch(1, smem, nullptr, threads, cluster);
      if (cudaOccupancyMaxActiveClusters(&n, kernel, &launch.cfg) != cudaSuccess) n = 0;
    });
    return n;
  });
}

}  // namespace

bool mix_fused_bwd_fits(MixKind kind, Dtype dt, const void* x, const void* grad_y, const void* grad_x, int hc,
                        int64_t hidden) {
  return dt == Dtype::bf16 && hc == kMaxHc && aligned(x, 16) && aligned(grad_y, 16) && aligned(grad_x, 16) &&
         mix_fused_bwd_clusters(kind, hidden) > 0;
}

int mix_fused_bwd_splits(MixKind kind, int64_t tokens, int64_t hidden) {
  int groups = 0, tm = 1;
  with_fused_bwd(kind, hidden, [&](auto, size_t, int, int g, int, int cluster) { groups = g, tm = cluster; });
  return int(std::min<int64_t>(ceil_div(tokens, tm), mix_fused_bwd_clusters(kind, hidden))) * groups;
}

void launch_mix_comb_bwd(const float* mixes, const float* grad_comb, const float* base, const float* scale,
                         double* gate_grads, float* hist, int64_t tokens, int hc, MixConsts k, cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0) return;
  const MixBwdTokenArgs a{mixes, nullptr, nullptr, grad_comb, base, scale, nullptr, gate_grads, hist, tokens,
                          0, hc, mix_rows(MixKind::pre, hc), k.hc_eps, k.rms_eps, k.post_mult, k.sinkhorn_iters};
  with_hc(hc, [&](auto h) {
    const int threads = h == H4 ? 32 * comb_warps_per_block(tokens, 4) : 128;
    mix_comb_bwd_kernel<decltype(h)::value><<<ceil_div(tokens * (h == H4 ? H4 : 1), threads), threads, 0, stream>>>(a);
  });
}

void launch_mix_fused_bwd(MixKind kind, const void* x, const void* grad_y, const float* mixes, const float* grad_post,
                          const float* fn, const float* base, const float* scale, double* gate_grads, void* grad_x,
                          float* partial, int64_t tokens, int hc, int64_t hidden, MixConsts k, cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0) return;
  const FusedBwdArgs fa{{mixes, nullptr, grad_post, nullptr, base, scale, nullptr, gate_grads, nullptr, tokens,
                         int(hc * hidden), hc, mix_rows(kind, hc), k.hc_eps, k.rms_eps, k.post_mult, k.sinkhorn_iters},
                        fn, static_cast<bf16*>(grad_x), partial};
  with_fused_bwd(kind, hidden, [&](auto kernel, size_t smem, int threads, int, int dc, int cluster) {
    const int clusters = int(std::min<int64_t>(ceil_div(tokens, cluster), mix_fused_bwd_clusters(kind, hidden)));
    const FusedLaunch launch(clusters, smem, stream, threads, cluster);
    cudaLaunchKernelEx(&launch.cfg, kernel, fused_x_map(x, tokens, hidden, dc, H4, cluster),
                       fused_x_map(grad_y, tokens, hidden, dc, 1, cluster), fa);
  });
}

// A programmatic dependent launch of a kernel that calls griddep_wait before it reads what the kernel before it in the
// stream writes: set up while that one runs, it starts as that one completes, or earlier where that one calls
// griddep_launch_dependents.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

void launch_mix_post_comb(const float* mixes, const float* base, const float* scale, float* post, float* comb,
                          int64_t tokens, int hc, MixConsts k, cudaStream_t stream, bool one_thread_per_token) {
  check_hc(hc);
  if (tokens == 0) return;
  const MixFwdArgs a{base, scale, const_cast<float*>(mixes), nullptr, post, comb, tokens, 0, hc,
                     mix_rows(MixKind::pre, hc), k.hc_eps, k.rms_eps, k.post_mult, k.sinkhorn_iters};
  if (hc == H4 && !one_thread_per_token) {
    // A programmatic dependent launch: set up while the kernel before it runs, it starts as that one completes (H100,
    // V4 dims, after the fused forward: 0.3143 -> 0.3090 ms, medians of 5 and 4 alternating runs, the same bits; the
    // fused forward triggering it at its last tile, so that its blocks wait beside the tail: 0.3165 ms).
    launch_dependent(mix_post_comb_quad_kernel, dim3(unsigned(ceil_div(tokens * H4, 512))), dim3(512), 0, stream, a);
    return;
  }
  with_hc(hc, [&](auto h) { mix_post_comb_kernel<decltype(h)::value><<<ceil_div(tokens, 128), 128, 0, stream>>>(a); });
}

void launch_collapse(Dtype dt, const void* x, const float* pre, void* y, int64_t tokens, int hc, int64_t hidden,
                     cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0 || hidden == 0) return;
  const bool vec = vec_ok(hidden, {x, y});
  const unsigned blocks = ceil_div(tokens, kWarpTokensPerBlock);
  with_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    with_bool(vec, [&](auto v) {
      constexpr int V = decltype(v)::value ? 8 : 1;
      collapse_kernel<T, V><<<blocks, 256, 0, stream>>>(static_cast<const T*>(x), pre, static_cast<T*>(y), tokens,
                                                        hc, int(hidden));
    });
  });
}

void launch_mix_bwd_reduce(MixKind kind, Dtype dt, const void* x, const void* grad_y, double* red, const float* mixes,
                           const float* grad_comb, const float* base, const float* scale, double* gate_grads,
                           float* hist, int64_t tokens, int hc, int64_t hidden, MixConsts k, cudaStream_t stream) {
  check_hc(hc);
  if (tokens == 0) return;
  const bool vec = vec_ok(hidden, {x, grad_y});
  const bool pre = kind == MixKind::pre;
  const MixBwdTokenArgs a{mixes, red, nullptr, grad_comb, base, scale, nullptr, gate_grads, hist, tokens,
                          int(hc * hidden), hc, mix_rows(kind, hc), k.hc_eps, k.rms_eps, k.post_mult,
                          k.sinkhorn_iters};
  const int comb_wpb = pre && hc == H4 ? comb_warps_per_block(tokens, 8) : 0;
  const unsigned blocks = ceil_div(tokens, kWarpTokensPerBlock) + (pre ? comb_block_count(hc, tokens, comb_wpb) : 0);
  with_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    with_bool(vec, [&](auto v) {
      constexpr int V = decltype(v)::value ? 8 : 1;
      const auto launch = [&](auto comb_hc) {
        mix_bwd_reduce_kernel<T, V, decltype(comb_hc)::value><<<blocks, 256, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(grad_y), red, tokens, hc, int(hidden), a, comb_wpb);
      };
      if (pre) with_hc(hc, launch);
      else launch(std::integral_constant<int, 0>{});
    });
  });
}

void launch_mix_bwd_token(MixKind kind, const float* mixes, const double* red, const float* grad_post,
                          const float* base, const float* scale, float* coef, double* gate_grads, unsigned* arrivals,
                          int64_t tokens, int hc, int64_t hidden, MixConsts k, cudaStream_t stream) {
  check_hc(hc);
  if (kind == MixKind::pre && !aligned(coef, 16))
    throw std::invalid_argument("launch_mix_bwd_token: hc_pre's coef must be 16-byte aligned (its rows go in float4s)");
  const int n_arrivals = arrivals ? int(mix_bwd_arrivals(hidden)) : 0;
  if (tokens == 0 && n_arrivals == 0) return;
  const MixBwdTokenArgs a{mixes, red, grad_post, nullptr, base, scale, coef, gate_grads, nullptr, tokens,
                          int(hc * hidden), hc, mix_rows(kind, hc), k.hc_eps, k.rms_eps, k.post_mult,
                          k.sinkhorn_iters};
  with_kind(kind, [&](auto kind_tag) {
    using Kind = decltype(kind_tag);
    with_hc(hc, [&](auto h) {
      mix_bwd_token_kernel<Kind, decltype(h)::value>
          <<<std::max<int64_t>(1, ceil_div(tokens, 128)), 128, 0, stream>>>(a, arrivals, n_arrivals);
    });
  });
}

int64_t mix_bwd_arrivals(int64_t hidden) { return ceil_div(hidden, int64_t(kDxMmaD)); }

namespace {

ColsumArgs colsum_args(MixKind kind, const double* gate_grads, int64_t tokens, int hc, float* grad_base,
                       float* grad_scale) {
  const int m = mix_rows(kind, hc);
  return {gate_grads, tokens, mix_gate_width(kind), grad_base, m, kind == MixKind::pre ? PreKind::MP : HeadKind::MP,
          grad_scale, m + mix_scale_count(kind)};
}

// The CUDA-core dx_dfn: every dtype, hidden and alignment.
void launch_mix_bwd_dx_dfn_cuda_cores(MixKind kind, Dtype dt, const void* x, const void* grad_y, const float* coef,
                                      const float* fn, void* grad_x, float* partial, int64_t tokens, int hc,
                                      int64_t hidden, int splits, cudaStream_t stream) {
  const int K = int(hc * hidden);
  if (K == 0) return;
  const int64_t per_split = std::max<int64_t>(1, (tokens + splits - 1) / splits);
  const size_t el = dt == Dtype::bf16 ? 2 : 4;
  const bool pair = hidden % 2 == 0 && aligned(x, 2 * el) && aligned(grad_y, 2 * el) && aligned(grad_x, 2 * el);
  with_kind(kind, [&](auto kind_tag) {
    using Kind = decltype(kind_tag);
    with_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      with_bool(pair, [&](auto v) {
        constexpr int KV = decltype(v)::value ? 2 : 1;
        const dim3 grid(ceil_div(K, int64_t(kDxThreads) * KV), unsigned(splits));
        mix_bwd_dx_dfn_kernel<T, Kind, KV><<<grid, kDxThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(grad_y), coef, fn, static_cast<T*>(grad_x), partial,
            tokens, K, int(hidden), mix_rows(kind, hc), per_split);
      });
    });
  });
}

}  // namespace

void launch_mix_bwd_dx_dfn(MixKind kind, Dtype dt, const void* x, const void* grad_y, const float* coef,
                           const float* fn, void* grad_x, float* partial, int64_t tokens, int hc, int64_t hidden,
                           int splits, const MixBwdSums& sums, cudaStream_t stream) {
  check_hc(hc);
  const int K = int(hc * hidden);
  if (K > 0 && dx_dfn_mma_shape(kind, dt, hidden) && aligned(x, 16) && aligned(grad_y, 16) && aligned(coef, 16) &&
      aligned(grad_x, 16) && dx_dfn_mma_ready()) {
    const bool fold = sums.arrivals && aligned(partial, 16) && aligned(sums.grad_fn, 16);
    const ColsumArgs cs = colsum_args(kind, sums.gate_grads, tokens, hc, sums.grad_base, sums.grad_scale);
    // Whole tiles of 16 a split, so that every tile has its block of coefficient terms.
    const int64_t per_split = std::max<int64_t>(1, ceil_div(ceil_div(tokens, splits), kDxMmaTM)) * kDxMmaTM;
    const int blocks = int(hidden / kDxMmaD);
    const int cs_blocks = std::clamp(kDxMmaResident * sm_count() - blocks * splits, 1, cs.cols);
    const DxFinish f{sums.grad_fn, fold ? sums.arrivals : nullptr, cs, cs_blocks};
    const dim3 grid(unsigned(fold ? std::max(blocks, cs_blocks) : blocks), unsigned(splits + (fold ? 1 : 0)));
    // Dependent on the token kernel (its coefficients, gate rows and zeroed counters are read after griddep_wait):
    // the CTAs load fn and their first x and g_y tiles while it runs. x, g_y and fn are written before the token
    // kernel starts, and the token kernel writes none of them.
    // No tile is copied where there are no tokens, but a map needs a row.
    const int64_t rows = std::max<int64_t>(tokens, 1);
    const cuuint64_t cdims[2] = {cuuint64_t(PreKind::CW), cuuint64_t(rows)}, cstride[1] = {PreKind::CW * 4};
    const cuuint32_t cbox[2] = {cuuint32_t(PreKind::CW), cuuint32_t(kDxMmaTM)};
    static_assert(kDxMmaTM == kFusedTM && kDxMmaD == 64, "x and g_y boxes as the fused kernels': 16 tokens x 64");
    launch_dependent(mix_bwd_dx_dfn_mma_kernel, grid, dim3(kDxMmaThreads), kDxMmaSmem, stream,
                     fused_x_map(x, rows, hidden, kDxMmaD, hc), fused_x_map(grad_y, rows, hidden, kDxMmaD, 1),
                     swizzled_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, coef, cdims, cstride, cbox), coef, fn,
                     static_cast<bf16*>(grad_x), partial, tokens, hc, int(hidden), mix_rows(kind, hc), per_split, f);
    if (fold) return;
  } else {
    launch_mix_bwd_dx_dfn_cuda_cores(kind, dt, x, grad_y, coef, fn, grad_x, partial, tokens, hc, hidden, splits,
                                     stream);
  }
  launch_mix_bwd_sums(kind, partial, splits, sums, tokens, hc, hidden, stream);
}

// One launch for both sums, programmatically dependent on the backward before it, against the two plain launches
// (sum_splits, then colsum) it replaced (H200, V4 dims, bench/hc_ab.sh, 3 alternating runs, every hash the same): the
// sums alone 0.0173 -> 0.0121 ms (hc_head) and 0.0205 -> 0.0174 (hc_pre's two-pass), hc_head's fused backward with
// them 0.4093 -> 0.4067 (reports/gpu/2026-11-29-h200-bwd-sums-one-launch-ab.log).
void launch_mix_bwd_sums(MixKind kind, const float* partial, int splits, const MixBwdSums& sums, int64_t tokens, int hc,
                         int64_t hidden, cudaStream_t stream) {
  check_hc(hc);
  const int64_t n = int64_t(mix_rows(kind, hc)) * hc * hidden;
  const ColsumArgs cs = colsum_args(kind, sums.gate_grads, tokens, hc, sums.grad_base, sums.grad_scale);
  const int64_t blocks = cs.cols + std::min<int64_t>(ceil_div(n, 256), 4096);
  launch_dependent(mix_bwd_sums_kernel, dim3(unsigned(blocks)), dim3(256), 0, stream, partial, sums.grad_fn, n, splits,
                   cs);
}

void launch_sinkhorn_divide(const float* numerators, const float* denominators, float* quotients, int64_t lines,
                            cudaStream_t stream) {
  if (lines % H4 != 0) throw std::invalid_argument("launch_sinkhorn_divide: lines must be a multiple of 4");
  const int64_t groups = lines / H4;
  if (groups == 0) return;
  sinkhorn_divide_kernel<<<unsigned(std::min<int64_t>(ceil_div(groups, 256), 4096)), 256, 0, stream>>>(
      reinterpret_cast<const float4*>(numerators), reinterpret_cast<const float4*>(denominators),
      reinterpret_cast<float4*>(quotients), groups);
}

}  // namespace parity::hc::cuda
