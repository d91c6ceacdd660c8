// Gating probe (not committed code): can CTAs on the SMs the fused forward's clusters leave free run beside it without
// slowing it? A "hog" kernel emulates a solo CTA's memory traffic per 16-token tile (x from DRAM, half of fn and the
// x tile again from L2, y written) plus a spin for its compute.
#include "kernels/cuda/hc.cuh"
#include "bench/cuda_timing.cuh"
#include <cuda_bf16.h>
#include <cstdio>
#include <cmath>
#include <string>
namespace kc = parity::hc::cuda;

__global__ void fill_normal(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hash_normal(i, seed));
}
__global__ void fill_normal(float* p, int64_t n, uint32_t seed, float sd, float mean) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = mean + sd * hash_normal(i, seed);
}

__global__ void stamp(unsigned long long* p) { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(*p)); }
__global__ void __launch_bounds__(512, 1) hog(const uint4* x, const uint4* fn, uint4* y, int64_t tile0, int64_t tiles,
                                              long long spin, unsigned* sink, unsigned long long* stamps, bool mem) {
  extern __shared__ uint4 pad[];
  unsigned acc = 0;
  unsigned long long t_start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_start));
  constexpr int kX = 512 * 1024 / 16, kFn = 768 * 1024 / 16, kY = 128 * 1024 / 16;
  for (int64_t t = tile0 + blockIdx.x; t < tile0 + tiles; t += gridDim.x) {
    const uint4* xt = x + t * kX;
    if (mem) {
    for (int i = threadIdx.x; i < kX; i += 512) { uint4 v = __ldcg(xt + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
    const uint4* f = fn + (t & 1) * kFn;
    for (int i = threadIdx.x; i < kFn; i += 512) { uint4 v = __ldcg(f + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
    for (int i = threadIdx.x; i < kX; i += 512) { uint4 v = __ldcg(xt + i); acc += v.x ^ v.y ^ v.z ^ v.w; }
    uint4* yt = y + t * kY;
    for (int i = threadIdx.x; i < kY; i += 512) yt[i] = make_uint4(acc, i, 0, 0);
    }
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {}
  }
  if (acc == 0x12345678u) sink[0] = acc;
  unsigned long long t_end;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_end));
  unsigned smid;
  asm("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) stamps[3 * blockIdx.x] = smid, stamps[3 * blockIdx.x + 1] = t_start, stamps[3 * blockIdx.x + 2] = t_end;
  (void)pad;
}

int main() {
  const int64_t T = 16384, H = 4, D = 4096, HD = H * D;
  const int M = kc::mix_rows(kc::MixKind::pre, H);
  const kc::MixConsts k{1e-6f, 1e-6f, 2.f, 20};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  __nv_bfloat16 *x, *y;
  float *fn, *base, *scale, *mixes, *pre, *post, *comb;
  unsigned* sink;
  CK(cudaMalloc(&x, T * HD * 2)); CK(cudaMalloc(&y, T * D * 2));
  CK(cudaMalloc(&fn, M * HD * 4)); CK(cudaMalloc(&base, 64 * 4)); CK(cudaMalloc(&scale, 64 * 4));
  CK(cudaMalloc(&mixes, T * M * 4)); CK(cudaMalloc(&pre, T * H * 4)); CK(cudaMalloc(&post, T * H * 4));
  CK(cudaMalloc(&comb, T * H * H * 4)); CK(cudaMalloc(&sink, 4));
  unsigned long long* stamps;
  CK(cudaMalloc(&stamps, 8 * 200));
  fill_normal<<<1024, 256>>>(x, T * HD, 11);
  fill_normal<<<1024, 256>>>(fn, M * HD, 13, 1.f / std::sqrt(float(HD)), 0.f);
  fill_normal<<<1, 64>>>(base, 64, 14, 1.f, 0.f);
  fill_normal<<<1, 64>>>(scale, 64, 15, 0.3f, 1.f);
  CK(cudaDeviceSynchronize());
  const int clusters = kc::mix_fused_fwd_clusters(kc::MixKind::pre, D);
  const int free_sms = prop.multiProcessorCount - 16 * clusters;
  std::printf("%s: %d SMs, %d clusters, %d free SMs\n", prop.name, prop.multiProcessorCount, clusters, free_sms);
  const int smem = 200 * 1024;
  CK(cudaFuncSetAttribute(hog, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaStream_t s1;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  auto fused = [&](int64_t tokens) {
    kc::launch_mix_fused_fwd(kc::MixKind::pre, x, fn, base, scale, mixes, pre, y, tokens, H, D, k, 0);
    kc::launch_mix_post_comb(mixes, base, scale, post, comb, tokens, H, k, 0);
  };
  bool mem = true;
  auto hogl = [&](cudaStream_t s, int64_t tile0, int64_t tiles, long long spin) {
    hog<<<free_sms, 512, smem, s>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(fn),
                                    reinterpret_cast<uint4*>(y), tile0, tiles, spin, sink, stamps, mem);
  };
  // The fused forward on stream 0 and the hog on s1 beside it (with `stamped`, a stamp after the forward on stream 0).
  auto pair = [&](int64_t t1, int64_t tile0, int64_t tiles, long long spin, bool stamped) {
    CK(cudaEventRecord(fork, 0));
    CK(cudaStreamWaitEvent(s1, fork));
    fused(t1);
    hogl(s1, tile0, tiles, spin);
    if (stamped) stamp<<<1, 1>>>(stamps + 191);
    CK(cudaEventRecord(join, s1));
    CK(cudaStreamWaitEvent(0, join));
  };
  std::printf("fused 16384 alone                %.4f ms\n", time_ms([&] { fused(T); }, 3, 30));
  for (int64_t t1 : {14336, 14848}) {
    const int64_t tile0 = t1 / 16, tiles = (T - t1) / 16;
    std::printf("fused %lld alone                %.4f ms\n", (long long)t1, time_ms([&] { fused(t1); }, 3, 30));
    for (long long spin : {0LL, 20000LL, 40000LL, 60000LL}) {
      std::printf("  hog %lld tiles spin %6lld alone   %.4f ms\n", (long long)tiles, spin,
                  time_ms([&] { hogl(0, tile0, tiles, spin); }, 3, 30));
      std::printf("  fused || hog spin %6lld        %.4f ms\n", spin, time_ms([&] { pair(t1, tile0, tiles, spin, false); }, 3, 30));
    }
  }
  for (bool m : {false, true}) {
    mem = m;
    const int64_t t1 = 14336, tile0 = t1 / 16, tiles = (T - t1) / 16;
    const long long spin = 40000;
    std::printf("mem %d: hog alone %.4f, fused || hog %.4f ms\n", int(m), time_ms([&] { hogl(0, tile0, tiles, spin); }, 3, 30),
                time_ms([&] { pair(t1, tile0, tiles, spin, false); }, 3, 30));
    CK(cudaDeviceSynchronize());
    stamp<<<1, 1>>>(stamps + 190);
    pair(t1, tile0, tiles, spin, true);
    CK(cudaDeviceSynchronize());
    unsigned long long h[200];
    CK(cudaMemcpy(h, stamps, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("  fused window (stamp before, after fused+post_comb on stream 0): 0 .. %.1f us\n", (h[191] - h[190]) / 1e3);
    for (int b = 0; b < free_sms; ++b)
      std::printf("  hog CTA %2d on SM %3llu: %.1f .. %.1f us\n", b, h[3 * b], (double(h[3 * b + 1]) - double(h[190])) / 1e3,
                  (double(h[3 * b + 2]) - double(h[190])) / 1e3);
  }
  std::printf("fused 16384 alone                %.4f ms\n", time_ms([&] { fused(T); }, 3, 30));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
}
