// compare()'s CUDA path: kernels over raw device pointers and their launchers. No LibTorch here, so the nvcc
// translation unit stays light; harness/src/compare.cpp allocates, launches and copies the results back.
//
// One pass: launch_compare_scan reads both tensors once. CUDA block b scans one contiguous stretch of elements and
// writes its totals (cmp::ScanTotals, per element exactly as the CPU path computes them: harness/cuda/compare_element.hpp);
// launch_compare_merge merges them on the device in block order, as the CPU merges its chunks: so the counts, maxima
// and where they first occur are the CPU's, and the floating sums are added in an order of their own but the same one
// on every run on a device (per-thread sums in index order, fixed butterflies, blocks in a fixed tree; no floating
// atomics). The |err| histogram and the heatmap's cells, integer counts and maxima, are added across blocks with
// integer atomics. The merge also places the first mismatches: which stretches hold them and where each one's go in
// the list; launch_compare_first lists them from those stretches. Nothing crosses to the host but what compare()
// reports: the merged totals, the histogram, the cells and the listed elements.
//
// Every launcher starts exactly one kernel on `stream`, so the caller can check cudaGetLastError after each.
#pragma once
#include "harness/cuda/compare_element.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace parity::compare_cuda {

enum class Dtype : int { fp64, fp32, fp16, bf16 };

// Block b of the scan covers elements [b * stretch, min(numel, (b + 1) * stretch)).
struct ScanLayout {
  int blocks;
  int64_t stretch;
};
ScanLayout scan_layout(int64_t numel);  // on the current device

struct BlockTotals {
  cmp::ScanTotals t;  // every field; ulp_hist without its last (NaN/Inf) bucket, which the caller fills in
  int64_t listed;     // elements Metrics::first lists: those that differ, and NaN mismatches
};

// The ULP dtype is the narrower of the two (a tie goes to actual), as on the CPU. The caller zeroes err_hist
// (cmp::kErrBuckets counts) and cells (grid.cell_rows * grid.cell_cols maxima, as the bits of non-negative doubles).
void launch_compare_scan(Dtype actual_type, Dtype expected_type, const void* actual, const void* expected,
                         int64_t numel, const cmp::GridShape& grid, bool allow_nan, ScanLayout layout,
                         BlockTotals* blocks, unsigned long long* err_hist, unsigned long long* cells,
                         cudaStream_t stream);

// For tests: the scan's 64-bit heatmap coordinates, which only views with more than 2^30 rows or columns need, taken for
// every view while on.
void force_wide_coordinates(bool on);

// Lists the first `count` listed elements of [begin, end), in index order, at out[offset], out[offset + 1], ...
struct FirstRange {
  int64_t begin, end, count, offset;
};

// The blocks' totals (block_count of them, as launch_compare_scan wrote them) merged in block order into *total
// (listed: of the whole tensor), and ranges[b], the first mismatches block b holds (count 0 where it holds none of the
// first first_n listed elements).
void launch_compare_merge(const BlockTotals* blocks, ScanLayout layout, int64_t numel, int first_n,
                          BlockTotals* total, FirstRange* ranges, cudaStream_t stream);
struct Listed {
  int64_t flat;
  double actual, expected;  // the stored values
};
// One block per range; a range of count 0 lists nothing.
void launch_compare_first(Dtype actual_type, Dtype expected_type, const void* actual, const void* expected,
                          bool allow_nan, const FirstRange* ranges, int range_count, Listed* out, cudaStream_t stream);

// The floor the comparator is held to (bench/bench_compare_cuda.cpp): reads a and b once (16-byte aligned, sizes a
// multiple of 16 bytes) and writes one word per block (read_both_blocks() of them) so that nothing is optimised away.
int read_both_blocks();
void launch_read_both(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes, unsigned* out,
                      cudaStream_t stream);

}  // namespace parity::compare_cuda
