// Throwaway probe: how much faster is hc_pre's dx_dfn_mma (token + dx_dfn+sums) on a chunk of Tc tokens when the
// reduce has just read that chunk (x, g_y in L2) than after an L2 flush? Decides whether a chunked two-pass backward
// (each chunk's second read from L2) is worth building.
#include "bench/cuda_timing.cuh"
#include "kernels/cuda/hc.cuh"
#include <cuda_bf16.h>
#include <cmath>
#include <cstdio>
#include <vector>
#include <algorithm>
namespace kc = parity::hc::cuda;
template <typename T>
__global__ void fill_normal(T* p, int64_t n, uint32_t seed, float stddev, float mean) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = mean + stddev * hash_normal(i, seed);
    if constexpr (std::is_same_v<T, float>) p[i] = v; else p[i] = __float2bfloat16_rn(v);
  }
}
template <typename T> T* alloc(int64_t n) { T* p; CK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T))); return p; }
template <typename T> T* normal(int64_t n, uint32_t seed, float sd = 1.f, float mean = 0.f) {
  T* p = alloc<T>(n); fill_normal<<<1024, 256>>>(p, n, seed, sd, mean); CK(cudaGetLastError()); return p; }
int main() {
  const int64_t T = 16384, D = 4096; const int H = 4; const int64_t HD = H * D;
  const auto kind = kc::MixKind::pre;
  const int M = kc::mix_rows(kind, H);
  const kc::MixConsts k{1e-6f, 1e-6f, 2.f, 20};
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  cudaStream_t s = 0;
  auto* x = normal<__nv_bfloat16>(T * HD, 11);
  auto* gy = normal<__nv_bfloat16>(T * D, 12);
  auto* y = alloc<__nv_bfloat16>(T * D);
  auto* gx = alloc<__nv_bfloat16>(T * HD);
  float* fn = normal<float>(int64_t(M) * HD, 13, 1.f / std::sqrt(float(HD)));
  float* base = normal<float>(M, 14);
  float* scale = normal<float>(3, 15, 0.3f, 1.f);
  float *mixes = alloc<float>(T * M), *pre = alloc<float>(T * H);
  float* gpost = normal<float>(T * H, 16);
  float* gcomb = normal<float>(T * H * H, 17);
  double* red = alloc<double>(T * (1 + H));
  float* coef = alloc<float>(kc::mix_coef_floats(kind, T));
  double* gate = alloc<double>(T * kc::mix_gate_width(kind));
  float* hist = alloc<float>(kc::sinkhorn_hist_floats(T, H, k.sinkhorn_iters));
  float* part = alloc<float>(int64_t(64) * M * HD);
  float *gfn = alloc<float>(int64_t(M) * HD), *gbase = alloc<float>(M), *gscale = alloc<float>(3);
  unsigned* arrivals = alloc<unsigned>(kc::mix_bwd_arrivals(D));
  char* flushbuf = alloc<char>(int64_t(512) << 20);
  kc::launch_mix_fused_fwd(kind, x, fn, base, scale, mixes, pre, y, T, H, D, k, s);
  CK(cudaDeviceSynchronize());
  auto reduce = [&](int64_t tc) { kc::launch_mix_bwd_reduce(kind, kc::Dtype::bf16, x, gy, red, mixes, gcomb, base, scale, gate, hist, tc, H, D, k, s); };
  auto token = [&](int64_t tc) { kc::launch_mix_bwd_token(kind, mixes, red, gpost, base, scale, coef, gate, arrivals, tc, H, D, k, s); };
  auto dx = [&](int64_t tc) {
    const int sp = kc::mix_bwd_splits(kind, kc::Dtype::bf16, tc, H, D, sms);
    kc::launch_mix_bwd_dx_dfn(kind, kc::Dtype::bf16, x, gy, coef, fn, gx, part, tc, H, D, sp, {gfn, gate, gbase, gscale, arrivals}, s); };
  auto flush = [&] { CK(cudaMemsetAsync(flushbuf, 0x5a, int64_t(512) << 20, s)); };
  cudaEvent_t ev[5]; for (auto& e : ev) CK(cudaEventCreate(&e));
  auto el = [&](int a, int b) { float t; CK(cudaEventElapsedTime(&t, ev[a], ev[b])); return double(t); };
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  std::printf("%6s %6s | %9s %9s %9s %9s | %9s %9s | ns/token: warm-path cold-path\n", "Tc", "splits", "reduce", "token", "dx_warm", "sum_warm", "tok+dx_c", "sum_cold");
  for (int64_t tc : {256, 512, 768, 1024, 1536, 2048, 4096, 16384}) {
    std::vector<double> r, t, dw, dc;
    for (int rep = 0; rep < 15; ++rep) {
      flush();
      CK(cudaEventRecord(ev[0], s)); reduce(tc); CK(cudaEventRecord(ev[1], s)); token(tc); CK(cudaEventRecord(ev[2], s)); dx(tc); CK(cudaEventRecord(ev[3], s));
      CK(cudaEventSynchronize(ev[3]));
      r.push_back(el(0, 1)); t.push_back(el(1, 2)); dw.push_back(el(2, 3));
      flush(); reduce(tc); flush();
      CK(cudaEventRecord(ev[0], s)); token(tc); dx(tc); CK(cudaEventRecord(ev[1], s));
      CK(cudaEventSynchronize(ev[1]));
      dc.push_back(el(0, 1));
    }
    const double R = med(r), Tk = med(t), DW = med(dw), DC = med(dc);
    std::printf("%6lld %6d | %9.4f %9.4f %9.4f %9.4f | %9.4f %9.4f | %8.2f %8.2f\n", (long long)tc,
                kc::mix_bwd_splits(kind, kc::Dtype::bf16, tc, H, D, sms), R, Tk, DW, R + Tk + DW, DC, R + DC,
                1e6 * (R + Tk + DW) / tc, 1e6 * (R + DC) / tc);
  }
  // The same chain at 16384 as the bench's hot row (no flush) for reference.
  const double hot = time_ms([&] { reduce(T); token(T); dx(T); });
  std::printf("hot 16384: %.4f ms\n", hot);
  return 0;
}
