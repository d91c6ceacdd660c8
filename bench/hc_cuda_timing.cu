// Standalone timing of the hc CUDA kernels (kernels/cuda/hc.cu) against a device-to-device copy, before the harness
// has a perf mode. Build (next to kernels/cuda/hc.cu):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I. bench/hc_cuda_timing.cu kernels/cuda/hc.cu \
//        -o hc_cuda_timing && ./hc_cuda_timing [tokens=16384] [hc=4] [hidden=4096]
// bf16 streams, seeded pseudo-random data (never zeros). Each line: median of 20 timed launches after 3 warm-ups
// (CUDA events), the bytes that launch must move (each input read once, each output written once), the achieved
// rate, and that rate over the measured copy rate (bytes read + bytes written, cudaMemcpyAsync of 1 GiB).
// After each backward and fused forward, hashes of its outputs (same hash = same bits); after a one-pass backward, how
// many elements of its grad_x differ from the two passes' and by more than one ULP; after a fused forward, how far its
// mixes and y are from the two kernels'.
// PyTorch eager of the same ops: bench/hc_torch_timing.py (eager and torch.compile).
//
// Measured (H100 80GB HBM3, driver 580.159.04, T=16384 H=4 D=4096 bf16; copy 2.99 TB/s; two runs agree to 0.5%):
//   kernel                               ms     % copy        eager PyTorch (HF composition)   ms
//   hc_post fwd cuda:v1               0.425      95.2%        hc_post fwd                    6.125
//   hc_post fwd cuda:hf               0.434      93.1%        hc_post fwd+bwd               13.249
//   hc_post bwd                       0.729      87.2%
//   hc_pre  fwd (transpose+mix_fwd)   0.486      37.3%        hc_pre  fwd                    5.398
//   hc_pre  fwd collapse              0.232      96.9%        hc_pre  fwd+bwd               18.200
//   hc_pre  fwd total                 0.712      31.8%   (of one pass; x is read twice)
//   hc_pre  fwd fused                 0.642      35.0%   (x read once; `parity run --perf`, d306270)
//   hc_pre  bwd reduce / token        0.227 / 0.108
//   hc_pre  bwd dx_dfn / sums         1.151 / 0.020   (0.488 on the tensor cores, mix_bwd_dx_dfn_mma)
//   hc_pre  bwd total                 1.498      27.2%   (0.839 ms, 48%, with it)
//   hc_head fwd total                 0.453      49.6%        hc_head fwd                    5.013
//   hc_head bwd total                 0.782      51.7%        hc_head fwd+bwd               16.579
// (hc_post bwd: 0.788 ms before its 128-register cap; hc_pre bwd dx_dfn 2.51 ms before token tiles; mix_fwd 0.602
// ms with register staging. On an H200 (copy 4.21 TB/s) the same code gave hc_post fwd 0.313 ms, 92%.)
#include "bench/cuda_timing.cuh"
#include "kernels/cuda/hc.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kc = parity::hc::cuda;

template <typename T>
__global__ void fill_normal(T* p, int64_t n, uint32_t seed, float stddev, float mean) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = mean + stddev * hash_normal(i, seed);
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else p[i] = __float2bfloat16_rn(v);
  }
}

// post in (0, 2); each comb row positive and summing to 1 (as hc_pre produces them).
__global__ void fill_gates(float* post, float* comb, int64_t tokens, int h, uint32_t seed) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens; t += int64_t(gridDim.x) * blockDim.x) {
    for (int k = 0; k < h; ++k) post[t * h + k] = 2.f / (1.f + expf(-hash_normal(t * h + k, seed)));
    for (int j = 0; j < h; ++j) {
      float s = 0.f;
      for (int k = 0; k < h; ++k)
        s += comb[(t * h + j) * h + k] = expf(2.f * hash_normal((t * h + j) * h + k, seed + 1));
      for (int k = 0; k < h; ++k) comb[(t * h + j) * h + k] /= s;
    }
  }
}

template <typename T>
T* alloc(int64_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(T)));
  return p;
}

template <typename T>
T* normal(int64_t n, uint32_t seed, float stddev = 1.f, float mean = 0.f) {
  T* p = alloc<T>(n);
  fill_normal<<<1024, 256>>>(p, n, seed, stddev, mean);
  CK(cudaGetLastError());
  return p;
}

// FNV-1a over the bytes of device buffers, in order.
uint64_t device_hash(const std::vector<std::pair<const void*, int64_t>>& buffers) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [p, n] : buffers) {
    std::vector<unsigned char> host(n);
    CK(cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost));
    h = fnv1a(host.data(), host.size(), h);
  }
  return h;
}

// bf16 buffers a and b (device), element by element: how many differ, and how many by more than one ULP (bf16's
// sign-magnitude order; a NaN counts as far).
std::pair<int64_t, int64_t> bf16_ulp_diff(const void* a, const std::vector<uint16_t>& b) {
  std::vector<uint16_t> ha(b.size());
  CK(cudaMemcpy(ha.data(), a, b.size() * 2, cudaMemcpyDeviceToHost));
  const auto key = [](uint16_t v) { return v & 0x8000 ? -int32_t(v & 0x7fff) : int32_t(v); };
  const auto nan = [](uint16_t v) { return (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0; };
  int64_t differ = 0, far = 0;
  for (size_t e = 0; e < b.size(); ++e) {
    if (ha[e] == b[e]) continue;
    ++differ;
    far += nan(ha[e]) || nan(b[e]) || std::abs(key(ha[e]) - key(b[e])) > 1;
  }
  return {differ, far};
}

struct Row {
  std::string name;
  double ms, bytes;
};

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int H = argc > 2 ? std::atoi(argv[2]) : 4;
  const int64_t D = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int64_t HD = H * D;
  const int M = kc::mix_rows(kc::MixKind::pre, H), MH = kc::mix_rows(kc::MixKind::head, H);
  const kc::MixConsts k{1e-6f, 1e-6f, 2.f, 20};
  const double e = 2;  // bf16
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs; tokens %lld, hc %d, hidden %lld, bf16 streams\n", prop.name, prop.multiProcessorCount,
              (long long)T, H, (long long)D);
  cudaStream_t s = 0;
  std::vector<Row> rows;

  // ---- copy ceiling: 1 GiB device to device ----
  const int64_t copy_bytes = int64_t(1) << 30;
  char* c0 = alloc<char>(copy_bytes);
  char* c1 = alloc<char>(copy_bytes);
  CK(cudaMemset(c0, 1, copy_bytes));
  const double copy_ms = time_ms([&] { CK(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice, s)); });
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
  CK(cudaFree(c0));
  CK(cudaFree(c1));
  rows.push_back({"copy 1 GiB (read + write)", copy_ms, 2.0 * copy_bytes});

  // ---- hc_post ----
  {
    __nv_bfloat16* x = normal<__nv_bfloat16>(T * D, 1);
    __nv_bfloat16* r = normal<__nv_bfloat16>(T * HD, 2);
    __nv_bfloat16* g = normal<__nv_bfloat16>(T * HD, 3);
    __nv_bfloat16* out = alloc<__nv_bfloat16>(T * HD);
    __nv_bfloat16* gx = alloc<__nv_bfloat16>(T * D);
    __nv_bfloat16* gr = alloc<__nv_bfloat16>(T * HD);
    float *post = alloc<float>(T * H), *comb = alloc<float>(T * H * H);
    float *gpost = alloc<float>(T * H), *gcomb = alloc<float>(T * H * H);
    fill_gates<<<256, 256>>>(post, comb, T, H, 4);
    CK(cudaGetLastError());
    const double small = T * (H + H * H) * 4.0;
    for (bool hf : {false, true})
      rows.push_back({hf ? "hc_post fwd cuda:hf" : "hc_post fwd cuda:v1",
                      time_ms([&] { kc::launch_hc_post_fwd(kc::Dtype::bf16, hf, x, r, post, comb, out, T, H, D, s); }),
                      (T * D + 2 * T * HD) * e + small});
    rows.push_back({"hc_post bwd",
                    time_ms([&] {
                      kc::launch_hc_post_bwd(kc::Dtype::bf16, g, x, r, post, comb, gx, gr, gpost, gcomb, T, H, D, s);
                    }),
                    (3 * T * HD + 2 * T * D) * e + 2 * small});
    for (void* p : {(void*)x, (void*)r, (void*)g, (void*)out, (void*)gx, (void*)gr, (void*)post, (void*)comb,
                    (void*)gpost, (void*)gcomb})
      CK(cudaFree(p));
  }

  // ---- hc_pre and hc_head ----
  {
    const int sms = prop.multiProcessorCount;
    __nv_bfloat16* x = normal<__nv_bfloat16>(T * HD, 11);
    __nv_bfloat16* gy = normal<__nv_bfloat16>(T * D, 12);
    __nv_bfloat16* y = alloc<__nv_bfloat16>(T * D);
    __nv_bfloat16* gx = alloc<__nv_bfloat16>(T * HD);
    float* fn = normal<float>(int64_t(M) * HD, 13, 1.f / std::sqrt(float(HD)));
    float* fnT = alloc<float>(kc::mix_fnT_floats(kc::MixKind::pre, H, D));
    float* base = normal<float>(M, 14);
    float* scale = normal<float>(3, 15, 0.3f, 1.f);
    float *mixes = alloc<float>(T * M), *pre = alloc<float>(T * H), *post = alloc<float>(T * H),
          *comb = alloc<float>(T * H * H);
    float* gpost = normal<float>(T * H, 16);
    float* gcomb = normal<float>(T * H * H, 17);
    double* red = alloc<double>(T * (1 + H));
    float* coef = alloc<float>(kc::mix_coef_floats(kc::MixKind::pre, T));
    double* gate = alloc<double>(T * kc::mix_gate_width(kc::MixKind::pre));
    float* hist = alloc<float>(kc::sinkhorn_hist_floats(T, H, k.sinkhorn_iters));
    const auto splits_of = [&](kc::MixKind kind) { return kc::mix_bwd_splits(kind, kc::Dtype::bf16, T, H, D, sms); };
    float* part = alloc<float>(int64_t(std::max(splits_of(kc::MixKind::pre), splits_of(kc::MixKind::head))) * M * HD);
    float *gfn = alloc<float>(int64_t(M) * HD), *gbase = alloc<float>(M), *gscale = alloc<float>(3);
    unsigned* arrivals = alloc<unsigned>(kc::mix_bwd_arrivals(D));
    const double params = double(M) * HD * 4, small = T * (M + 2 * H + H * H) * 4.0;

    for (kc::MixKind kind : {kc::MixKind::pre, kc::MixKind::head}) {
      const bool p = kind == kc::MixKind::pre;
      const int m = p ? M : MH;
      const std::string op = p ? "hc_pre" : "hc_head";
      const int splits = splits_of(kind);
      const double prm = double(m) * HD * 4;
      auto fwd_mix = [&] {
        kc::launch_mix_fn_transpose(kind, fn, fnT, H, D, s);
        kc::launch_mix_fwd(kind, kc::Dtype::bf16, x, fnT, base, scale, mixes, pre, p ? post : nullptr,
                           p ? comb : nullptr, T, H, D, k, s);
      };
      auto fwd_collapse = [&] { kc::launch_collapse(kc::Dtype::bf16, x, pre, y, T, H, D, s); };
      auto bwd_reduce = [&] {
        kc::launch_mix_bwd_reduce(kind, kc::Dtype::bf16, x, gy, red, mixes, p ? gcomb : nullptr, base, scale, gate,
                                  p ? hist : nullptr, T, H, D, k, s);
      };
      auto bwd_token = [&] {
        kc::launch_mix_bwd_token(kind, mixes, red, gpost, base, scale, coef, gate, arrivals, T, H, D, k, s);
      };
      auto bwd_dx = [&] {  // and the sums over splits and tokens (grad_fn, grad_base, grad_scale)
        kc::launch_mix_bwd_dx_dfn(kind, kc::Dtype::bf16, x, gy, coef, fn, gx, part, T, H, D, splits,
                                  {gfn, gate, gbase, gscale, arrivals}, s);
      };
      auto bwd_sum = [&] {
        kc::launch_mix_bwd_sums(kind, part, splits, {gfn, gate, gbase, gscale, nullptr}, T, H, D, s);
      };
      rows.push_back({op + " fwd: fn_transpose+mix_fwd", time_ms(fwd_mix),
                      T * HD * e + prm + T * (m + 2 * H + H * H) * 4.0});
      rows.push_back({op + " fwd: collapse", time_ms(fwd_collapse), (T * HD + T * D) * e + T * H * 4.0});
      const double fwd_bytes = (T * HD + T * D) * e + prm + (p ? small : T * 2 * H * 4.0);
      rows.push_back({op + " fwd total (vs one pass)", time_ms([&] { fwd_mix(), fwd_collapse(); }), fwd_bytes});
      if (kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, x, fn, y, H, D))
        rows.push_back({op + " fwd fused (vs one pass)", time_ms([&] {
                          kc::launch_mix_fused_fwd(kind, x, fn, base, scale, mixes, pre, y, T, H, D, k, s);
                          if (p) kc::launch_mix_post_comb(mixes, base, scale, post, comb, T, H, k, s);
                        }),
                        fwd_bytes});
      if (p)  // the Sinkhorn's share of the fused forward: it reads the mixes the fused kernel wrote
        rows.push_back({op + " fwd: post_comb", time_ms([&] {
                          kc::launch_mix_post_comb(mixes, base, scale, post, comb, T, H, k, s);
                        }),
                        T * (M + 2 * H + H * H) * 4.0});
      if (kc::mix_fused_fwd_fits(kind, kc::Dtype::bf16, x, fn, y, H, D)) {
        // What the fused forward wrote, hashed: a change to the kernel that keeps its results prints the same hash.
        // Its outputs are poisoned first, so that the hash covers what it wrote, not what the launches above left.
        for (const auto& [ptr, bytes] : {std::pair<void*, int64_t>{y, T * D * 2}, {mixes, T * m * 4}, {pre, T * H * 4},
                                         {post, p ? T * H * 4 : 0}, {comb, p ? T * H * H * 4 : 0}})
          cudaMemsetAsync(ptr, 0xFF, bytes, s);
        kc::launch_mix_fused_fwd(kind, x, fn, base, scale, mixes, pre, y, T, H, D, k, s);
        if (p) kc::launch_mix_post_comb(mixes, base, scale, post, comb, T, H, k, s);
        std::printf("%s fused forward: y, mixes, pre hash %016llx, post, comb hash %016llx\n", op.c_str(),
                    (unsigned long long)device_hash({{y, T * D * 2}, {mixes, T * m * 4}, {pre, T * H * 4}}),
                    (unsigned long long)(p ? device_hash({{post, T * H * 4}, {comb, T * H * H * 4}}) : 0));
        // Against the two kernels (mix_fwd, then the collapse), for a change that does not keep the bits: the mixes'
        // largest difference relative to the largest mix, and y's elements that differ, by more than one ULP too.
        std::vector<float> fused_mixes(T * m), two_mixes(T * m);
        std::vector<uint16_t> fused_y(T * D);
        CK(cudaMemcpy(fused_mixes.data(), mixes, T * m * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(fused_y.data(), y, T * D * 2, cudaMemcpyDeviceToHost));
        fwd_mix(), fwd_collapse();
        CK(cudaMemcpy(two_mixes.data(), mixes, T * m * 4, cudaMemcpyDeviceToHost));
        double diff = 0, largest = 0;
        for (int64_t i = 0; i < T * m; ++i) {
          diff = std::max(diff, std::abs(double(fused_mixes[i]) - double(two_mixes[i])));
          largest = std::max(largest, std::abs(double(two_mixes[i])));
        }
        const auto [differ, far] = bf16_ulp_diff(y, fused_y);
        std::printf("%s fused forward against the two kernels: mixes %.3g of the largest (%.3g), y %lld differ, %lld "
                    "by more than one ULP\n",
                    op.c_str(), diff / largest, largest, (long long)differ, (long long)far);
      }
      fwd_mix();
      // hc_pre's reduce row holds its Sinkhorn backward too (mix_bwd_reduce's first blocks), its token row the gates.
      rows.push_back({op + " bwd: reduce", time_ms(bwd_reduce), (T * HD + T * D) * e});
      rows.push_back({op + " bwd: token", time_ms(bwd_token), T * (2 * m + 2 * H + H * H) * 4.0});
      rows.push_back({op + " bwd: dx_dfn+sums", time_ms(bwd_dx), (2 * T * HD + T * D) * e + prm * (1 + 2 * splits)});
      rows.push_back({op + " bwd: sum_splits+colsum", time_ms(bwd_sum), prm * (1 + splits)});
      rows.push_back({op + " bwd total (vs one pass)", time_ms([&] { bwd_reduce(), bwd_token(), bwd_dx(); }),
                      (2 * T * HD + T * D) * e + 2 * prm + 2 * (p ? small : T * 2 * H * 4.0)});
      // What the backward wrote: a change to its kernels that keeps their results prints the same hashes (grad_fn's
      // fp32 sums also depend on the token splits).
      std::printf("%s backward: grad_x hash %016llx, grad_fn hash %016llx (%d splits), grad_base, grad_scale hash "
                  "%016llx\n",
                  op.c_str(), (unsigned long long)device_hash({{gx, T * HD * 2}}),
                  (unsigned long long)device_hash({{gfn, int64_t(m) * HD * 4}}), splits,
                  (unsigned long long)device_hash({{gbase, m * 4}, {gscale, (p ? 3 : 1) * 4}}));
      if (kc::mix_fused_bwd_fits(kind, kc::Dtype::bf16, x, gy, gx, H, D)) {
        std::vector<uint16_t> gx_two(T * HD);
        CK(cudaMemcpy(gx_two.data(), gx, T * HD * 2, cudaMemcpyDeviceToHost));
        const int fsplits = kc::mix_fused_bwd_splits(kind, T, D);
        float* fpart = alloc<float>(int64_t(fsplits) * m * HD);
        auto bwd_fused = [&] {
          if (p) kc::launch_mix_comb_bwd(mixes, gcomb, base, scale, gate, hist, T, H, k, s);
          kc::launch_mix_fused_bwd(kind, x, gy, mixes, p ? gpost : nullptr, fn, base, scale, gate, gx, fpart, T, H, D,
                                   k, s);
          kc::launch_mix_bwd_sums(kind, fpart, fsplits, {gfn, gate, gbase, gscale, nullptr}, T, H, D, s);
        };
        rows.push_back({op + " bwd fused (vs one pass)", time_ms(bwd_fused),
                        (2 * T * HD + T * D) * e + 2 * prm + 2 * (p ? small : T * 2 * H * 4.0)});
        if (p)  // the Sinkhorn's share of the fused backward, a kernel of its own ahead of it
          rows.push_back({op + " bwd: comb_bwd", time_ms([&] {
                            kc::launch_mix_comb_bwd(mixes, gcomb, base, scale, gate, hist, T, H, k, s);
                          }),
                          T * (M + H * H) * 4.0 + T * H * H * 8.0});
        std::printf("%s fused backward: grad_x hash %016llx, grad_fn hash %016llx (%d splits), grad_base, grad_scale "
                    "hash %016llx\n",
                    op.c_str(), (unsigned long long)device_hash({{gx, T * HD * 2}}),
                    (unsigned long long)device_hash({{gfn, int64_t(m) * HD * 4}}), fsplits,
                    (unsigned long long)device_hash({{gbase, m * 4}, {gscale, (p ? 3 : 1) * 4}}));
        const auto [differ, far] = bf16_ulp_diff(gx, gx_two);
        std::printf("%s fused backward: grad_x against the two passes: %lld of %lld elements differ, %lld by more than "
                    "one ULP\n",
                    op.c_str(), (long long)differ, (long long)(T * HD), (long long)far);
        CK(cudaFree(fpart));
      }
    }
    (void)params;
  }
  CK(cudaDeviceSynchronize());

  std::printf("\n%-36s %10s %10s %10s %8s\n", "kernel", "ms", "GB", "GB/s", "% copy");
  for (const Row& r : rows)
    std::printf("%-36s %10.4f %10.3f %10.1f %7.1f%%\n", r.name.c_str(), r.ms, r.bytes / 1e9, r.bytes / r.ms / 1e6,
                100.0 * (r.bytes / r.ms / 1e6) / copy_gbs);
  std::printf("(copy rate %.1f GB/s; 'total' rows count the bytes of one pass: each input read once, each output "
              "written once)\n",
              copy_gbs);
  return 0;
}
