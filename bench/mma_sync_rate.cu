// The tensor cores as mma.sync drives them (m16n8k16, bf16 operands, fp32 accumulators: the product of hc.cu's
// mix_fused_fwd, dx_dfn_mma and mix_fused_bwd_mma): a dependent chain's latency, and how many one sub-partition (of
// four an SM) issues a cycle with 1 to 8 warps, each running 1 to 8 independent chains. The budget a kernel's MMAs take
// of a tile follows: its MMAs a warp and tile times the cycles apart a warp can issue them, and its MMAs a
// sub-partition times the cycles apart the sub-partition can. Build and run:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -I. bench/mma_sync_rate.cu -o mma_sync_rate && ./mma_sync_rate
// Measured (H100 80GB HBM3 at 1980 MHz, 2026-11-28; reports/gpu/2026-11-28-h100-mma-sync-rate.log, which applies it
// to hc_pre's kernels): a chain 24.8 cycles an MMA; one warp a sub-partition no better than 16.1 cycles apart however
// many chains it runs (22.2 with eight); four or eight warps a sub-partition 6.2-6.6 cycles apart, 520-611 TFLOP/s
// over the 132 SMs (wgmma's dense bf16 peak is ~990). H200 (1980 MHz, 2026-11-29;
// reports/gpu/2026-11-29-h200-mma-sync-wgmma-rate.log): mma.sync the same (24.8, 16.1, 6.2-6.6 cycles). wgmma
// m64n16k16 (A from registers, B from shared memory) no faster: at best 13.0 cycles apart an SM, 6.5 per m16n8k16's
// work a sub-partition, 573 TFLOP/s with four warpgroups; m64n32k16 16.0 cycles apart, 4.0 per m16n8k16's work, 918
// TFLOP/s (ptxas serializes the two-chain kernels, warning C7511, so their lines understate). So a tile of 16 tokens
// gains nothing from wgmma's rate; what wgmma adds is that the warpgroup goes on while its products run.
#include "bench/cuda_timing.cuh"

#include <utility>

namespace {

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Each warp: `iters` rounds of one MMA on each of its Chains accumulators; block 0's clock64 span (of the last launch)
// is the answer.
template <int Chains>
__global__ void chains_kernel(int iters, float* out, long long* cycles) {
  const uint32_t a[4] = {0x3f803f80u ^ threadIdx.x, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  float d[Chains][4] = {};
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int c = 0; c < Chains; ++c) mma16816(d[c], a, 0x3f80u + c, 0x3f80u);
  const long long t1 = clock64();
  float s = 0;
#pragma unroll
  for (int c = 0; c < Chains; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // the sums stay live
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// launch(out, cycles), one block of `threads` on each of the `sms` SMs, timed: its milliseconds and block 0's clock64
// span.
template <typename Launch>
std::pair<double, long long> timed(int sms, int threads, Launch&& launch) {
  float* out = nullptr;
  long long* cycles = nullptr;
  CK(cudaMalloc(&out, size_t(sms) * threads * sizeof(float)));
  CK(cudaMalloc(&cycles, sms * sizeof(long long)));
  const double ms = time_ms([&] { launch(out, cycles); });
  long long c = 0;
  CK(cudaMemcpy(&c, cycles, sizeof c, cudaMemcpyDeviceToHost));
  CK(cudaFree(out));
  CK(cudaFree(cycles));
  return {ms, c};
}

// One block of `warps` warps on every SM (warp w runs on sub-partition w % 4).
template <int Chains>
void measure(int warps, int sms) {
  constexpr int kIters = 4096;
  const auto [ms, c] = timed(sms, warps * 32, [&](float* out, long long* cycles) {
    chains_kernel<Chains><<<sms, warps * 32>>>(kIters, out, cycles);
  });
  const double per_warp = double(kIters) * Chains, per_subpartition = per_warp * std::max(1, warps / 4);
  const double flops = 2.0 * 16 * 8 * 16 * per_warp * warps * sms;
  std::printf("warps/SM %2d, chains %d: %6.2f cycles apart a sub-partition, %6.2f a warp, %6.1f TFLOP/s\n", warps,
              Chains, double(c) / per_subpartition, double(c) / per_warp, flops / ms / 1e9);
}

// wgmma (a warpgroup's m64nNk16, A from registers, B from shared memory without swizzle), the other way to drive the
// tensor cores: how many cycles apart one SM issues them with 1 to 4 warpgroups, each running 1 to 4 independent
// accumulator chains. N = 16 is a tile of 16 tokens as hc.cu's fused kernels take them.
__device__ __forceinline__ uint64_t wgmma_desc(const void* p, unsigned lead, unsigned stride) {
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return uint64_t((a & 0x3FFFF) >> 4) | uint64_t(lead >> 4) << 16 | uint64_t(stride >> 4) << 32;
}
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b);
template <>
__device__ __forceinline__ void wgmma_rs<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, 1, 1, 1, "
      "0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
template <>
__device__ __forceinline__ void wgmma_rs<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, %20, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

template <int N, int Chains>
__global__ void __launch_bounds__(512, 1) wgmma_kernel(int iters, float* out, long long* cycles) {
  __shared__ __align__(128) uint32_t b_tile[16 * 32 / 2];  // K 16 x N <= 32 bf16, core matrices of 8 x 16 bytes
  for (int i = threadIdx.x; i < 16 * 32 / 2; i += blockDim.x) b_tile[i] = 0x3f803f80u;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t a[4] = {0x3f803f80u ^ threadIdx.x, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  // Core matrices: the two along K 128 bytes apart, those along N 256 bytes apart.
  const uint64_t b = wgmma_desc(b_tile, 128, 256);
  float d[Chains][N / 2] = {};
  // The zeros in their registers before the fence: set inside the pipeline, they would serialize its wgmma.
#pragma unroll
  for (int c = 0; c < Chains; ++c)
#pragma unroll
    for (int e = 0; e < N / 2; ++e) asm volatile("" : "+f"(d[c][e])::"memory");
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < Chains; ++c) wgmma_rs<N>(d[c], a, b);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const long long t1 = clock64();
  float s = 0;
#pragma unroll
  for (int c = 0; c < Chains; ++c)
#pragma unroll
    for (int e = 0; e < N / 2; ++e) s += d[c][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// One block of `groups` warpgroups on every SM.
template <int N, int Chains>
void measure_wgmma(int groups, int sms) {
  constexpr int kIters = 2048;
  const auto [ms, c] = timed(sms, groups * 128, [&](float* out, long long* cycles) {
    wgmma_kernel<N, Chains><<<sms, groups * 128>>>(kIters, out, cycles);
  });
  const double per_group = double(kIters) * Chains;
  const double flops = 2.0 * 64 * N * 16 * per_group * groups * sms;
  // In m16n8k16 units (2048 multiply-adds), for comparison with mma.sync above.
  const double units_per_sm = per_group * groups * 64 * N * 16 / 2048.0;
  std::printf("wgmma m64n%dk16, warpgroups/SM %d, chains %d: %7.2f cycles apart an SM, %5.2f per m16n8k16's work a "
              "sub-partition, %6.1f TFLOP/s\n",
              N, groups, Chains, double(c) / (per_group * groups), 4.0 * double(c) / units_per_sm,
              flops / ms / 1e9);
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("%s, %d SMs\n", p.name, sms);
  measure<1>(1, sms);  // one warp, one chain: the latency
  measure<1>(4, sms);
  measure<3>(4, sms);
  measure<8>(4, sms);
  measure<1>(16, sms);
  measure<3>(16, sms);
  measure<8>(16, sms);
  measure<3>(32, sms);
  measure_wgmma<16, 1>(1, sms);
  measure_wgmma<16, 4>(1, sms);
  measure_wgmma<16, 1>(4, sms);
  measure_wgmma<16, 2>(4, sms);
  measure_wgmma<16, 4>(4, sms);
  measure_wgmma<32, 2>(4, sms);
  measure_wgmma<32, 4>(4, sms);
}
