// The tensor cores as mma.sync drives them (m16n8k16, bf16 operands, fp32 accumulators: the product of hc.cu's
// mix_fused_fwd, dx_dfn_mma and mix_fused_bwd_mma): a dependent chain's latency, and how many one sub-partition (of
// four an SM) issues a cycle with 1 to 8 warps, each running 1 to 8 independent chains. The budget a kernel's MMAs take
// of a tile follows: its MMAs a warp and tile times the cycles apart a warp can issue them, and its MMAs a
// sub-partition times the cycles apart the sub-partition can. Build and run:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -I. bench/mma_sync_rate.cu -o mma_sync_rate && ./mma_sync_rate
// Measured (H100 80GB HBM3 at 1980 MHz, 2026-11-28; reports/gpu/2026-11-28-h100-mma-sync-rate.log, which applies it
// to hc_pre's kernels): a chain 24.8 cycles an MMA; one warp a sub-partition no better than 16.1 cycles apart however
// many chains it runs (22.2 with eight); four or eight warps a sub-partition 6.2-6.6 cycles apart, 520-611 TFLOP/s
// over the 132 SMs (wgmma's dense bf16 peak is ~990).
#include "bench/cuda_timing.cuh"

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

// One block of `warps` warps on every SM (warp w runs on sub-partition w % 4).
template <int Chains>
void measure(int warps, int sms) {
  constexpr int kIters = 4096;
  float* out = nullptr;
  long long* cycles = nullptr;
  CK(cudaMalloc(&out, size_t(sms) * warps * 32 * sizeof(float)));
  CK(cudaMalloc(&cycles, sms * sizeof(long long)));
  const double ms = time_ms([&] { chains_kernel<Chains><<<sms, warps * 32>>>(kIters, out, cycles); });
  long long c = 0;
  CK(cudaMemcpy(&c, cycles, sizeof c, cudaMemcpyDeviceToHost));
  const double per_warp = double(kIters) * Chains, per_subpartition = per_warp * std::max(1, warps / 4);
  const double flops = 2.0 * 16 * 8 * 16 * per_warp * warps * sms;
  std::printf("warps/SM %2d, chains %d: %6.2f cycles apart a sub-partition, %6.2f a warp, %6.1f TFLOP/s\n", warps,
              Chains, double(c) / per_subpartition, double(c) / per_warp, flops / ms / 1e9);
  CK(cudaFree(out));
  CK(cudaFree(cycles));
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
}
