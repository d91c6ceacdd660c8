// Standalone timing of the fused GPU comparator (harness/cuda/compare.cu) against a read of both tensors, without
// LibTorch, so that a change to the scan builds and times in seconds (bench_compare_cuda.cpp times compare() whole,
// through the harness). Build from the repository root:
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -I. \
//        bench/compare_cuda_timing.cu harness/cuda/compare.cu -o compare_cuda_timing && ./compare_cuda_timing [log2 n = 30] [cols = n]
// (the tensor viewed as [n / cols, cols] for the heatmap, as compare() views a tensor by its last dimension)
// The data are bench_compare_cuda.cpp's: expected ~ N(0, 1) in bf16, actual = expected (1 + 0.01 N(0, 1)) in bf16.
// Each timing: median of 10 event-timed runs after 2 warm-ups; the scan row is launch_compare_scan alone, the
// compare row scan + merge + first (10 listed), as compare() runs them (without its zeroing and copy back).
// The last line is a hash of the merged totals, the |err| histogram and the cells: a change to the scan that keeps
// its results prints the same hash.
#include "bench/cuda_timing.cuh"
#include "harness/cuda/compare.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace cc = parity::compare_cuda;

__global__ void fill_pair(__nv_bfloat16* actual, __nv_bfloat16* expected, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 e = __float2bfloat16_rn(hash_normal(i, 1));
    expected[i] = e;
    actual[i] = __float2bfloat16_rn(__bfloat162float(e) * (1.f + 0.01f * hash_normal(i, 2)));
  }
}

int main(int argc, char** argv) {
  const int log2n = argc > 1 ? std::atoi(argv[1]) : 30;
  const int64_t n = int64_t{1} << log2n;
  __nv_bfloat16 *actual = nullptr, *expected = nullptr;
  CK(cudaMalloc(&actual, n * 2));
  CK(cudaMalloc(&expected, n * 2));
  fill_pair<<<1024, 256>>>(actual, expected, n);
  CK(cudaGetLastError());

  const int64_t cols = argc > 2 ? std::atoll(argv[2]) : n;
  if (cols < 1 || n % cols != 0) {
    std::fprintf(stderr, "cols must divide n\n");
    return 2;
  }
  const int64_t rows = n / cols, side = parity::cmp::kGridSide;
  const parity::cmp::GridShape grid{rows, cols, std::min(rows, side), std::min(cols, side)};
  const int64_t cell_count = grid.cell_rows * grid.cell_cols;
  const cc::ScanLayout layout = cc::scan_layout(n);
  constexpr int kFirst = 10;
  cc::BlockTotals *blocks = nullptr, *total = nullptr;
  cc::FirstRange* ranges = nullptr;
  unsigned long long *hist = nullptr, *cells = nullptr;
  cc::Listed* listed = nullptr;
  unsigned* words = nullptr;
  CK(cudaMalloc(&blocks, layout.blocks * sizeof(cc::BlockTotals)));
  CK(cudaMalloc(&total, sizeof(cc::BlockTotals)));
  CK(cudaMalloc(&ranges, layout.blocks * sizeof(cc::FirstRange)));
  CK(cudaMalloc(&hist, parity::cmp::kErrBuckets * sizeof(unsigned long long)));
  CK(cudaMalloc(&cells, cell_count * sizeof(unsigned long long)));
  CK(cudaMalloc(&listed, kFirst * sizeof(cc::Listed)));
  CK(cudaMalloc(&words, cc::read_both_blocks() * sizeof(unsigned)));

  const auto scan = [&] {
    cc::launch_compare_scan(cc::Dtype::bf16, cc::Dtype::bf16, actual, expected, n, grid, false, layout, blocks, hist,
                            cells, nullptr);
  };
  const auto compare = [&] {
    scan();
    cc::launch_compare_merge(blocks, layout, n, kFirst, total, ranges, nullptr);
    cc::launch_compare_first(cc::Dtype::bf16, cc::Dtype::bf16, actual, expected, false, ranges, layout.blocks, listed,
                             nullptr);
  };
  const double read_ms = time_ms([&] { cc::launch_read_both(actual, n * 2, expected, n * 2, words, nullptr); });
  const double scan_ms = time_ms(scan), compare_ms = time_ms(compare);
  std::printf("2^%d bf16 pairs as [%lld, %lld], %d blocks\n", log2n, (long long)rows, (long long)cols, layout.blocks);
  std::printf("read both   %8.3f ms  %7.1f GB/s\n", read_ms, 4.0 * n / read_ms / 1e6);
  std::printf("scan        %8.3f ms  x_read %.2f\n", scan_ms, scan_ms / read_ms);
  std::printf("compare     %8.3f ms  x_read %.2f\n", compare_ms, compare_ms / read_ms);

  // One clean run for the hash (the histogram and the cells accumulate over runs).
  CK(cudaMemset(hist, 0, parity::cmp::kErrBuckets * sizeof(unsigned long long)));
  CK(cudaMemset(cells, 0, cell_count * sizeof(unsigned long long)));
  compare();
  CK(cudaDeviceSynchronize());
  cc::BlockTotals t;
  std::vector<unsigned long long> h(parity::cmp::kErrBuckets), c(cell_count);
  std::vector<cc::Listed> l(kFirst);
  CK(cudaMemcpy(&t, total, sizeof t, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data(), hist, h.size() * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(c.data(), cells, c.size() * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(l.data(), listed, l.size() * sizeof(cc::Listed), cudaMemcpyDeviceToHost));
  const parity::cmp::ScanTotals& s = t.t;
  std::printf("comparable %lld differ %lld max_ulp %lld@%lld max_abs %.9g@%lld max_rel %.9g sum_abs %.17g "
              "sum_rel %.17g cos %.17g\n",
              (long long)s.comparable, (long long)s.bitwise_diff, (long long)s.max_ulp, (long long)s.max_ulp_at,
              s.max_abs, (long long)s.max_abs_at, s.max_rel, s.sum_abs, s.sum_rel,
              s.sum_ae / std::sqrt(s.sum_aa * s.sum_ee));
  uint64_t hash = fnv1a(&t, sizeof t);
  hash = fnv1a(h.data(), h.size() * 8, hash);
  hash = fnv1a(c.data(), c.size() * 8, hash);
  hash = fnv1a(l.data(), l.size() * sizeof(cc::Listed), hash);
  std::printf("results hash %016llx\n", (unsigned long long)hash);
  return 0;
}
