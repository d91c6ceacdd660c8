/*
compare()'s fused CUDA comparator (interface and contract: compare.cuh; per-element definitions shared with the CPU
path: compare_element.hpp).

compare_scan: persistent blocks of 256 threads, two per SM, each block one contiguous stretch walked in tiles of 2048
elements. A thread takes 8 elements a side per tile. Where both sides are 16-bit they come through its own slots of a
ring in shared memory, copied (cp.async) three tiles ahead and read back by the thread alone (a tile before its turn),
so no barrier is needed; wider pairs are loaded as they are computed (one to four 16-byte loads a side). Where both
sides are one 16-bit dtype the eight are computed straight-line, else a half at a time (all eight at once spill). A
thread keeps its sums in registers, in index order, and the ULP distances up to 32 as five-bit counts packed in one word
(where both sides are one 16-bit dtype, two distances are found per 32-bit word, with packed max/min, and a table gives
both counts at once); larger distances go to a per-warp shared histogram by bit_width(u - 1), and every |err| to the
block's shared histogram, both with integer atomics. Eight elements all finite (from the exponent bits where both sides
are stored in the ULP dtype; where both are one 16-bit dtype, from each lane's largest magnitude, which also gives the
largest |e|) take finite8, straight-line; maxima and heatmap cells are checked once per vector against a cheap key of
its largest values, and only a vector that may beat one is offered again exactly (the keys of the maxima are shared
across the warp after every tile). A thread's place in the heatmap moves on with its vector, tile by tile, in 32-bit
coordinates unless the view has more than 2^30 rows or columns; a column's cell comes from a table of column segments no
wider than a cell. Within its stretch a thread names elements by 32-bit offsets; its copies' sources are a 64-bit base
each plus one. Any others, and the tail, go element by element through cmp::classify_bits, the CPU's definition. At the
end a block's totals are reduced in a fixed order and written to its slot; the histogram and the cells go to global ones
with integer atomics.

compare_merge: one block merges the blocks' totals in block order (runs of neighbours, then a fixed tree) and places
the first mismatches: which blocks hold them, and where in the list each block's go.

compare_first: one block per stretch (those that hold none of the first mismatches return at once), listing them in
order (a block-wide prefix count per tile) until it has the number asked for.

ptxas (sm_90a): 82-128 registers, no spill in any instantiation (bf16 against fp64, fp64 against bf16 and fp64 against
fp32 spilled 8-20 bytes before offer() and the straddling cells recomputed |err|: see Scanner). On an H200 the same
2^30 compare took 2.62 ms, 2.73x its faster read (issue-bound: the ratio follows the card's read rate). Then, with
16-bit values widened to fp64 from their bits (finite_value: F2F.F64.BF16 of a half register, where a shift or mask
came first) and vectors without a zero e taking finite8<true>, which tests no quotient per element (finite8's
straight block for bf16 pairs 275 -> 220 instructions, cuobjdump): 2.573 -> 2.464 ms, x_read 2.64 -> 2.53 (H200,
bench/compare_ab.sh, 3 alternating runs, results hashes unchanged at 5 shapes;
reports/gpu/2026-11-27-h200-comparator-widen-ab.log). The ring's shared addresses taken once (Stager): 2.461-2.477 ->
2.425-2.439 ms, x_read 2.53 -> 2.49 (H200, 2 alternating runs, same hashes; -ab2 in
reports/gpu/2026-11-27-h200-comparator-stager-ab.log, against 296abe8 in -ab1). ncu then (H200, 2^28 as [2^16,
4096], reports/gpu/2026-11-27-h200-comparator-ncu.txt): 407 instructions per warp and vector, issue slots 62.6% busy,
1.27 eligible warps of 3.77 per scheduler; finite8's straight block (220 instructions) held 31% of the stall samples,
the ~150 around it half: the ring's read and the finiteness check waiting on it 12%, the bars and the spot's advance
14%, the heatmap's check 6%. The ring read a tile early (five slots, so that three tiles stay in flight): 2.431-2.439
-> 2.389-2.405 ms (x_read 2.49 -> 2.45, same hashes). Dropped: the heatmap's cell end kept with the spot (one load
off the check, one more in the advance): 1.5% slower (both in reports/gpu/2026-11-27-h200-comparator-ring-read-ab.log);
cells found by shifts where every cell is 2^r x 2^c (no shared load in the advance or the check): 0.6-0.8% faster, not
worth a second path (reports/gpu/2026-11-27-h200-comparator-pow2-cells-ab.log). The errors' key with the low words' or
(bar_of), so that errors equal to the largest are not offered again (offer() had run for 3.8% of the warps' vectors):
2.376-2.401 -> 2.355-2.375 ms (reports/gpu/2026-11-27-h200-comparator-tie-key-ab.log). Dropped: blocks of 320
threads (5 warps a scheduler, where ptxas gives bf16 pairs 96 registers and spills 20 bytes): 2.356-2.370 -> 2.450-2.466
ms, x1.04 (reports/gpu/2026-11-28-h200-comparator-320-threads-ab.log): more warps do not make up for the registers.
Measured (H100, bench/compare_cuda_timing.cu, 2^30 bf16 pairs, scan + merge + first): 2.62 ms, 1.88x a read of both,
flat or as [2^18, 4096] (A/B in one process each step, results hashes unchanged: 2.07x before the 32-bit coordinates and
offsets with the magnitude-based finiteness, 2.01x after them, 1.88x with the straight-line eight; the 64-bit
coordinates, forced, 2.08x; 2.78x before the ring, the packed distances, the bit finiteness check and the moving heatmap
spot; 3.23x as [2^18, 4096]). Tried and dropped: the reciprocal from fp32's rcp and one fp64 step (x1.10: it adds to the
XU pipe, with the conversions). ncu before the ring: ~66 instructions per element, issue slots 58% busy at 16 warps per
SM, and 14% of warp samples waiting on the loads at their first use, which the ring removed. Tried and dropped: two
neighbouring vectors a thread and tile (x1.02), the halves unrolled with the vector read again for the rare branches
(x1.04), three blocks per SM (spills, x1.01), the bars shared every other tile (no change).
ncu at 861a88d (H100, 2^30 bf16 pairs as [2^18, 4096], clocks locked at 1.59 GHz: 3.58 ms): 61 instructions per
element, issue slots 69% busy (IPC 2.76), pipes ALU 56%, fp64 28%, XU 28% (the fp64 conversions and reciprocal),
DRAM 36%; stall samples: not selected 21%, fixed-latency waits 20%, selected 19%, math pipe throttle 10%, branch
resolving 10% (a third of it at the back edge of finite8's two-half loop), short scoreboard 7%: bound by instructions
issued, not by bytes. Per warp and vector then (source counters at 6cdb134, 2^28 as [2^16, 4096]): 513
instructions, of which finite4 244, the pair distances and finite8's tail 88, the tile loop's copies, waits and
finiteness check 66, the spot's advance and the bars 52, the heatmap's check 18 (and 8.5 on average re-checking
vectors that tie a cell's largest high word). From the SASS (cuobjdump) since: ptxas kept the 8 |err| of a vector alive
for the rare straddling-cell path (8 DADDs on every vector) and added the CGA base to each histogram address; with
|err| recomputed there and in offer() from opaque copies, and the counter's address in LOP3 + LEA.HI (err_slot),
finite8's straight block for bf16 pairs went from 292 to 275 instructions a warp and vector: scan 2.58 -> 2.54 ms,
compare 2.60 -> 2.56 ms at 2^30 (x0.985, H100, 3 alternating runs of bench/compare_ab.sh, results hashes unchanged at
5 shapes; reports/gpu/2026-11-27-h100-comparator-hot-path-ab.log).
Where the scan's time goes on an H200 (timing-only ablations at 2^30 bf16 pairs, 2.356 ms as is, x_read 2.48 in that
standalone timing): without the |err| histogram's atomics x0.951, without the four sums of products x0.938, without the
heatmap's check x0.937, without the packed ULP counts x0.936. No piece holds it; the 2x target needs ~19% off, about
three of those pieces' worth (reports/gpu/2026-11-30-h200-comparator-ablations.log, the patch beside it).
*/
#include "harness/cuda/compare.cuh"

#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <math_constants.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace parity::compare_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlocksPerSm = 2;
constexpr int kVec = 8;                             // elements a thread loads and computes per tile
constexpr int kTile = kThreads * kVec;  // elements per block and step
// A stretch this long keeps every per-thread and per-block counter within 32 bits.
constexpr int64_t kMaxStretch = int64_t{1} << 30;
// The ULP histogram is kept by bit_width(u - 1) of a nonzero distance u (below 64: fp64 distances saturate at 2^63-1);
// distance 0 is what the nonzero ones leave of the comparable elements.
constexpr int kWidths = 64;

// Storage types of the 16-bit dtypes: the raw bits.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

// What the kernels need of a storage type: its value in fp64 and in fp32 (rounded to nearest even from fp64), and its
// own bit pattern.
template <typename T>
struct Traits;
template <>
struct Traits<double> {
  using Format = cmp::Fp64Format;
  static __device__ double value(double x) { return x; }
  static __device__ float to_float(double x) { return __double2float_rn(x); }
  static __device__ uint64_t bits(double x) { return static_cast<uint64_t>(__double_as_longlong(x)); }
};
template <>
struct Traits<float> {
  using Format = cmp::Fp32Format;
  static __device__ double value(float x) { return x; }
  static __device__ float to_float(float x) { return x; }
  static __device__ uint64_t bits(float x) { return __float_as_uint(x); }
};
template <>
struct Traits<F16> {
  using Format = cmp::Fp16Format;
  static __device__ float to_float(F16 x) { return __half2float(__ushort_as_half(x.bits)); }
  static __device__ double value(F16 x) { return to_float(x); }
  static __device__ uint64_t bits(F16 x) { return x.bits; }
};
template <>
struct Traits<BF16> {
  using Format = cmp::Bf16Format;
  static __device__ float to_float(BF16 x) { return __uint_as_float(uint32_t{x.bits} << 16); }
  static __device__ double value(BF16 x) { return to_float(x); }
  static __device__ uint64_t bits(BF16 x) { return x.bits; }
};

// Traits<T>::value(x) where x is finite (finite8 and what it offers again): a 16-bit x widens from its bits in one
// conversion (F2F.F64.BF16 or .F16 of a register's half), where value() first moves it into an fp32 (a shift or an
// unpack apiece).
template <typename T>
__device__ __forceinline__ double finite_value(T x) {
  double d;
  if constexpr (std::is_same_v<T, BF16>) {
    asm("cvt.f64.bf16 %0, %1;" : "=d"(d) : "h"(x.bits));
  } else if constexpr (std::is_same_v<T, F16>) {
    asm("cvt.f64.f16 %0, %1;" : "=d"(d) : "h"(x.bits));
  } else {
    d = Traits<T>::value(x);
  }
  return d;
}

// x's bit pattern in the ULP dtype TU, rounded as static_cast<TU> rounds on the CPU: a wider side goes through fp32
// (c10::Half and c10::BFloat16 convert from float only), every step to nearest even.
template <typename TU, typename T>
__device__ __forceinline__ uint64_t bits_in(T x) {
  if constexpr (std::is_same_v<TU, T>) {
    return Traits<T>::bits(x);
  } else if constexpr (std::is_same_v<TU, float>) {
    return __float_as_uint(Traits<T>::to_float(x));
  } else if constexpr (std::is_same_v<TU, BF16>) {
    return cmp::bf16_bits_of_float_bits(__float_as_uint(Traits<T>::to_float(x)));
  } else {
    static_assert(std::is_same_v<TU, F16>);
    return __half_as_ushort(__float2half_rn(Traits<T>::to_float(x)));
  }
}

// narrower() of compare.cpp: a tie goes to actual.
template <typename TA, typename TE>
using UlpType = std::conditional_t<(sizeof(TE) < sizeof(TA)), TE, TA>;

// N elements of T as the 32-bit words that hold them, as loaded: two 16-bit elements share a word (as separate values
// they would take a register each).
template <typename T, int N = kVec>
struct Vec {
  static constexpr int kWords = N * static_cast<int>(sizeof(T)) / 4;
  uint32_t w[kWords];

  // Element j, for j known at compile time (in unrolled loops), so that w stays in registers.
  __device__ T operator[](int j) const {
    if constexpr (sizeof(T) == 2) {
      return T{static_cast<uint16_t>(w[j / 2] >> (16 * (j % 2)))};
    } else if constexpr (sizeof(T) == 4) {
      return __uint_as_float(w[j]);
    } else {
      return __hiloint2double(static_cast<int>(w[2 * j + 1]), static_cast<int>(w[2 * j]));
    }
  }
};

// Elements [p, p + count) of x: 16-byte loads where all eight are there and aligned, else one at a time.
template <typename T>
__device__ __forceinline__ Vec<T> load8(const T* x, int64_t p, int count, bool aligned) {
  Vec<T> r{};
  if (count == kVec && aligned) {
#pragma unroll
    for (int k = 0; k < Vec<T>::kWords / 4; ++k) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(x + p) + k);
      r.w[4 * k] = q.x, r.w[4 * k + 1] = q.y, r.w[4 * k + 2] = q.z, r.w[4 * k + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (j >= count) break;
      const uint64_t bits = Traits<T>::bits(x[p + j]);
      if constexpr (sizeof(T) == 2) {
        r.w[j / 2] |= static_cast<uint32_t>(bits) << (16 * (j % 2));
      } else if constexpr (sizeof(T) == 4) {
        r.w[j] = static_cast<uint32_t>(bits);
      } else {
        r.w[2 * j] = static_cast<uint32_t>(bits), r.w[2 * j + 1] = static_cast<uint32_t>(bits >> 32);
      }
    }
  }
  return r;
}

// Half h (0 or 1) of eight loaded elements, chosen at run time without indexing the registers that hold them.
template <typename T>
__device__ __forceinline__ Vec<T, kVec / 2> half(const Vec<T>& v, int h) {
  constexpr int kWords = Vec<T, kVec / 2>::kWords;
  Vec<T, kVec / 2> r;
#pragma unroll
  for (int k = 0; k < kWords; ++k) r.w[k] = h == 0 ? v.w[k] : v.w[kWords + k];
  return r;
}

// p, which the compiler can no longer recompute from the kernel's arguments: kept in registers, it is a base that a
// 32-bit offset is added to in one instruction, where the recomputation took eight.
template <typename T>
__device__ __forceinline__ const T* opaque(const T* p) {
  asm("mov.b64 %0, %0;" : "+l"(p));
  return p;
}

// v's words, which the compiler can no longer tie to the values computed from v before.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> opaque(Vec<T, N> v) {
#pragma unroll
  for (int k = 0; k < Vec<T, N>::kWords; ++k) asm volatile("" : "+r"(v.w[k]));
  return v;
}

__device__ __forceinline__ unsigned long long bits_of(double v) {
  return static_cast<unsigned long long>(__double_as_longlong(v));
}

struct ScanArgs {
  const void* actual;
  const void* expected;
  int64_t numel, stretch;
  cmp::GridShape grid;
  bool allow_nan, aligned;
  BlockTotals* blocks;
  unsigned long long* err_hist;
  unsigned long long* cells;
};

// Nonzero distances up to 32 are counted in registers, five bits per width 0..5 (bit_width(u - 1)) in one word,
// emptied into per-thread counters every kPackedVectors vectors, before a field could pass 31.
constexpr int kPackedWidths = 6;
constexpr uint32_t kPackedLimit = 32;
constexpr int kPackedVectors = 3;
// Where both sides are 16-bit, two distances clamped to kPackedLimit + 1 index a table of their two increments of that
// word (rows by the second distance).
constexpr int kPairRows = kPackedLimit + 2, kPairStride = 64;

// The packed word's increment for one distance u: a one in u's width field for 1 <= u <= 32, else nothing.
__host__ __device__ constexpr uint32_t packed_increment(uint32_t u) {
  return u == 0 || u > kPackedLimit ? 0 : uint32_t{1} << (5 * cmp::bit_width(u - 1));
}

// Counts of the elements that are not comparable (NaN and Inf mismatches, matching NaNs): rare, so kept here rather
// than in every thread's registers.
struct RareCounts {
  uint32_t nan_mismatch, inf_mismatch, nan_expected, both_nan;
  uint32_t differ, listed;  // of those elements: that differ; that Metrics::first lists
};

struct ScanShared {
  uint32_t err[cmp::kErrBuckets];
  uint32_t width[kWarps][kWidths];
  unsigned long long cells[cmp::kGridSide * cmp::kGridSide];
  int64_t row_bound[cmp::kGridSide + 1], col_bound[cmp::kGridSide + 1];  // cell k spans [bound[k], bound[k+1])
  uint8_t segment_cell[2 * cmp::kGridSide];  // the cell column of column j << segment_shift (Heatmap)
  uint32_t width_pairs[kPairRows * kPairStride];  // Scanner::count_pair's table
  RareCounts rare;
  alignas(8) unsigned char reduce[kWarps * 8];
};

// The heatmap's cells (their bounds in shared memory) over the [rows, cols] view of the tensor. Columns are also cut
// into segments of 2^segment_shift, no wider than the narrowest cell, so that a segment meets at most two cells:
// the cell of a column is that of its segment's first column or the next one.
struct Heatmap {
  const int64_t* row_bound;  // cell row k spans rows [row_bound[k], row_bound[k + 1])
  const int64_t* col_bound;  // cell column k spans columns [col_bound[k], col_bound[k + 1])
  const uint8_t* segment_cell;
  int64_t cols;
  int cell_rows, cell_cols, segment_shift;
};

// The widest segments no wider than a cell: 2^s <= cols / cell_cols < 2^(s+1), so that at most 2 * cell_cols of them
// cover the columns.
__host__ __device__ inline int segment_shift(const cmp::GridShape& g) {
  const auto narrowest = static_cast<uint64_t>(g.cols / g.cell_cols);
  return cmp::bit_width(narrowest) - 1;
}

// Where an element lies: its row and column in the view, and those of its cell. Coord is int32_t where every row and
// column, and a tile past them, fits it (narrow_coordinates), which saves the 64-bit steps every tile; else int64_t.
template <typename Coord>
struct GridSpot {
  Coord row, col;
  Coord next_row;  // where cell row kr + 1 starts; past every row where kr is the last
  int kr, kc;

  __device__ static GridSpot of(const Heatmap& h, int64_t flat) {
    GridSpot s{static_cast<Coord>(flat / h.cols), static_cast<Coord>(flat % h.cols), -1, -1, 0};
    s.seek_row(h);
    s.seek_col(h);
    return s;
  }
  // Along a stretch rows only grow: kr moves up from where it was.
  __device__ void seek_row(const Heatmap& h) {
    while (row >= next_row) {
      ++kr;
      next_row = kr + 1 < h.cell_rows ? static_cast<Coord>(h.row_bound[kr + 1]) : std::numeric_limits<Coord>::max();
    }
  }
  // Columns jump about: the column's segment names its cell or the one before.
  __device__ void seek_col(const Heatmap& h) {
    const int k = h.segment_cell[col >> h.segment_shift];
    kc = k + (col >= static_cast<Coord>(h.col_bound[k + 1]));
  }
  // `step` elements on, where step % cols = dcol and step / cols = drow.
  __device__ void advance(const Heatmap& h, Coord drow, Coord dcol) {
    row += drow, col += dcol;
    if (col >= static_cast<Coord>(h.cols)) col -= static_cast<Coord>(h.cols), ++row;
    seek_row(h);
    seek_col(h);
  }
  __device__ void next(const Heatmap& h) { advance(h, 0, 1); }
  __device__ int cell(const Heatmap& h) const { return kr * h.cell_cols + kc; }
  // This element and the n - 1 after it lie in one cell.
  __device__ bool holds(const Heatmap& h, int n) const { return col + n <= static_cast<Coord>(h.col_bound[kc + 1]); }
};

// Every row and column of the view, and where a thread's spot can step past them (a tile on, a row on), fit 32 bits.
__host__ __device__ constexpr bool narrow_coordinates(const cmp::GridShape& g) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  return g.rows <= kLimit && g.cols <= kLimit;
}

// A cheap bound on non-negative doubles, from their high words: key(x) = 2 * hi(x) + 1 for x > 0, 0 for x = 0, where
// no nonzero x has a high word of 0 (a nonzero error or quotient here is at least ~2^-300; where a side is fp64 the low
// words are looked at too, see Scanner::finite8). x > m implies key(x) >= bar(m) = 2 * hi(m) + 1; the converse fails
// only where both share their high word (a relative 2^-20), which the exact check behind the bar then settles. An
// error's key may also be 2 * hi(x) + (lo(x) != 0), which is 0 for x = 0 too: x > m with hi(x) = hi(m) has a nonzero
// low word. So an error equal to the largest one, with no low bits (as nearly every difference of two 16-bit values
// has), is not offered again.
__device__ __forceinline__ uint32_t bar_of(double m) { return 2 * static_cast<uint32_t>(__double2hiint(m)) + 1; }

// The largest value of a heatmap cell only grows; the block's copy is read before an atomic is spent on it.
__device__ __forceinline__ void raise_cell(unsigned long long* cell, double v) {
  const unsigned long long bits = bits_of(v);
  if (bits > *cell) atomicMax(cell, bits);
}

// A thread's totals in registers. The comparable elements are counted here, those at a nonzero distance in the width
// histogram; where a maximum sits is an offset into the block's stretch (at most 2^30).
template <typename TA, typename TE, typename TU>
struct ThreadTotals {
  using UlpSum = std::conditional_t<sizeof(TU) == 8, double, uint64_t>;  // exact below fp64, as on the CPU
  // |e| of the finite elements' pass, in fp32 where e is no wider (exact: e is an fp32 value).
  using Expected = std::conditional_t<sizeof(TE) == 8, double, float>;
  uint32_t comparable = 0, rel_defined = 0;
  UlpSum sum_ulp = 0;
  double sum_abs = 0, sum_rel = 0, sum_aa = 0, sum_ee = 0, sum_dd = 0, sum_ae = 0;
  double max_abs = -1, max_rel = -1, max_abs_expected = 0;
  Expected max_expected = 0;
  int64_t max_ulp = -1;
  uint32_t max_abs_at = 0, max_rel_at = 0, max_ulp_at = 0;
  // Keys (bar_of) an element's |err| and approximate quotient must reach to possibly beat max_abs and max_rel, and
  // the distance that may beat max_ulp; 0 while there is no maximum. The quotient's bar is taken a relative 2^-40
  // below max_rel (see Scanner::finite8). Between vectors the warp's lanes share their bars (Scanner::share_bars).
  uint32_t abs_bar = 0, rel_bar = 0, ulp_bar = 0;

  __device__ void offer_abs(double x, uint32_t at) {
    if (x <= max_abs) return;
    max_abs = x, max_abs_at = at;
    abs_bar = bar_of(x);
  }
  __device__ void offer_rel(double rel, uint32_t at) {
    if (rel <= max_rel) return;
    max_rel = rel, max_rel_at = at;
    rel_bar = bar_of(rel * (1 - 0x1p-40));
  }
};

// The position of the highest set bit, -1 for 0: bit_width(x) - 1.
__device__ __forceinline__ int top_bit(uint32_t x) {
  int top;
  asm("bfind.u32 %0, %1;" : "=r"(top) : "r"(x));
  return top;
}
// 1 << s, and 0 for every s >= 32 (PTX clamps the shift; C++ leaves it undefined).
__device__ __forceinline__ uint32_t one_at(uint32_t s) {
  uint32_t r;
  asm("shl.b32 %0, 1, %1;" : "=r"(r) : "r"(s));
  return r;
}

// The distance's slot in the width histogram: bit_width(u - 1) of a nonzero distance u.
__device__ __forceinline__ int width_slot(uint64_t u) { return cmp::bit_width(u - 1); }

// 1 / y for a normal y, within a few units in the last place: the hardware's approximation r (relative error e0 under
// 2^-20) refined once to third order, r * (1 + e0 + e0^2), without the branches of a correctly rounded division.
__device__ __forceinline__ double reciprocal(double y) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(y));
  const double e0 = fma(-y, r, 1.0);
  return fma(fma(e0, e0, e0), r, r);
}

// The ring of Scanner::Stager: kStages slots a side and thread, in dynamic shared memory (Scanner::kRingBytes).
constexpr int kStages = 5;
extern __shared__ uint4 scan_ring[];

template <typename TA, typename TE, typename Coord>
class Scanner {
 public:
  using TU = UlpType<TA, TE>;
  using F = typename Traits<TU>::Format;
  // Distances of every dtype but fp64 fit 32 bits (opposite signs add two magnitudes below 2^31).
  static constexpr bool kFastPath = F::kWidth <= 32;
  // Both sides stored in one 16-bit TU: the distances of a word's two elements are found together (pair_distance).
  static constexpr bool kPairs = std::is_same_v<TA, TU> && std::is_same_v<TE, TU> && F::kWidth == 16;
  // Both sides 16-bit: a thread's vectors come through its slots of the ring (Stager), 16 bytes a side.
  static constexpr bool kRing = sizeof(TA) == 2 && sizeof(TE) == 2;
  static constexpr int kRingBytes = kRing ? kStages * 2 * kThreads * 16 : 0;

  __device__ Scanner(const ScanArgs& args, ScanShared& sh)
      : act_(static_cast<const TA*>(args.actual)), exp_(static_cast<const TE*>(args.expected)),
        allow_nan_(args.allow_nan), err_(sh.err), width_(sh.width[threadIdx.x / 32]), width_pairs_(sh.width_pairs),
        cells_(sh.cells),
        rare_(sh.rare),
        heat_{sh.row_bound, sh.col_bound, sh.segment_cell, args.grid.cols, static_cast<int>(args.grid.cell_rows),
              static_cast<int>(args.grid.cell_cols), segment_shift(args.grid)} {}

  // The block's stretch [begin, end), a tile at a time. A thread's vector moves on by a tile each step, and so does
  // its place in the heatmap.
  __device__ void scan(int64_t begin, int64_t end, bool aligned) {
    begin_ = begin;
    // From here on an element is named by its offset into the stretch (below 2^30), which steps in 32 bits.
    act_ += begin, exp_ += begin;
    const auto len = static_cast<int>(end - begin);
    const auto drow = static_cast<Coord>(kTile / heat_.cols), dcol = static_cast<Coord>(kTile % heat_.cols);
    const int o0 = threadIdx.x * kVec;
    // Every thread steps through all the block's tiles (share_bars needs the whole warp); in the first `whole` its
    // vector has all eight elements.
    const int tiles = (len + kTile - 1) / kTile;
    const int whole = len - o0 >= kVec ? (len - o0 - kVec) / kTile + 1 : 0;
    const auto elements = [&](int k, int o) {
      if (k < whole) [[likely]] return kVec;
      return o < len ? count(o, len) : 0;
    };
    GridSpot<Coord> at = GridSpot<Coord>::of(heat_, begin + o0);
    if constexpr (kRing) {
      // Tile k + kStages - 1 goes into the slot that tile k - 1 was read from (into registers, before tile k - 1 was
      // computed). Tile k + 1 is read at the end of tile k, once its copies are in (those of the kStages - 2 after it
      // may be pending), so that the shared loads' latency passes under the spot's advance: read at the top of the
      // tile, they and the finiteness check waiting on them held 12% of the warps' stall samples (ncu, H200).
      Stager stager(act_ + o0, exp_ + o0, len - o0, aligned ? whole : 0);
      for (int k = 0; k < kStages - 1; ++k) stager.next();
      __pipeline_wait_prior(kStages - 2);
      Vec<TA> a = stager.template read<TA>(0, 0);
      Vec<TE> e = stager.template read<TE>(0, 1);
      int get = 0;  // tile k's slot
      for (int k = 0; k < tiles; ++k) {
        stager.next();
        const int o = o0 + k * kTile;
        if (const int n = elements(k, o); n > 0) scan8(at, o, n, a, e);
        share_bars();
        __pipeline_wait_prior(kStages - 2);
        get = get + 1 == kStages ? 0 : get + 1;
        a = stager.template read<TA>(get, 0);  // past the last tile, a slot's stale words: not used
        e = stager.template read<TE>(get, 1);
        at.advance(heat_, drow, dcol);
      }
      __pipeline_wait_prior(0);
    } else {
      for (int k = 0; k < tiles; ++k) {
        const int o = o0 + k * kTile;
        if (const int n = elements(k, o); n > 0) scan8(at, o, n, load8(act_, o, n, aligned), load8(exp_, o, n, aligned));
        if constexpr (kFastPath) share_bars();
        at.advance(heat_, drow, dcol);
      }
    }
    if constexpr (kFastPath) {
      unpack();
#pragma unroll
      for (int w = 0; w < kPackedWidths; ++w)
        if (widths_[w] != 0) atomicAdd(&width_[w], widths_[w]);
    }
    if constexpr (kPairs) {
      const auto largest = static_cast<uint16_t>(max(e_magnitude_ & 0xFFFFu, e_magnitude_ >> 16));
      t_.max_expected = fmaxf(t_.max_expected, Traits<TE>::to_float(TE{largest}));
    }
    t_.max_abs_expected = fmax(t_.max_abs_expected, static_cast<double>(t_.max_expected));
  }

  __device__ const ThreadTotals<TA, TE, TU>& totals() const { return t_; }
  // Where a maximum found at `offset` sits, -1 where there is none.
  __device__ int64_t index(double max, uint32_t offset) const { return max < 0 ? -1 : begin_ + offset; }

 private:
  static __device__ int count(int o, int len) { return min(kVec, len - o); }

  // The copies of a thread's vectors into its slots of the ring, tile after tile, each tile a group of its own (empty
  // past the end, so that groups and tiles keep in step): 16 bytes a side for the first `copied` tiles; a vector
  // after those (short, or unaligned) is loaded and stored by the thread itself.
  struct Stager {
    const TA* const a;  // the thread's first vector; the next one is `offset` elements on
    const TE* const e;
    const int limit;  // elements from a to the stretch's end
    const int copied;
    int k = 0, put = 0;  // tiles copied so far; the slot tile k goes to (k % kStages, kept without a division)
    unsigned offset = 0;
    // The shared-space address of slot 0 of side 0 (slot s of side d: + (2 * s + d) * kSide bytes), taken once: from
    // the generic pointer, every copy and read recomputed the CTA's shared window (S2UR, ULEA: 8 instructions a tile).
    static constexpr unsigned kSide = kThreads * 16;
    const unsigned mine = static_cast<unsigned>(__cvta_generic_to_shared(&scan_ring[threadIdx.x]));

    __device__ Stager(const TA* a, const TE* e, int limit, int copied)
        : a(opaque(a)), e(opaque(e)), limit(limit), copied(copied) {}

    __device__ void next() {
      const unsigned slot = mine + put * 2 * kSide;
      if (k < copied) [[likely]] {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(slot), "l"(a + offset) : "memory");
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(slot + kSide), "l"(e + offset) : "memory");
      } else if (static_cast<int>(offset) < limit) {
        const int n = count(offset, limit);
        store(slot, as_uint4(load8(a, offset, n, false)));
        store(slot + kSide, as_uint4(load8(e, offset, n, false)));
      }
      __pipeline_commit();
      offset += kTile, ++k;
      put = put + 1 == kStages ? 0 : put + 1;
    }
    static __device__ void store(unsigned at, uint4 q) {
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(q.x), "r"(q.y), "r"(q.z), "r"(q.w)
                   : "memory");
    }
    template <typename T>
    __device__ Vec<T> read(int slot, int side) const {
      Vec<T> v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                   : "r"(mine + (2 * slot + side) * kSide)
                   : "memory");
      return v;
    }
  };
  template <typename T>
  static __device__ uint4 as_uint4(const Vec<T>& v) { return {v.w[0], v.w[1], v.w[2], v.w[3]}; }

  // x's bits in TU, shifted to the top of a 32-bit word.
  template <typename T>
  static __device__ uint32_t high_bits(T x) {
    return static_cast<uint32_t>(bits_in<TU>(x)) << (32 - F::kWidth);
  }

  // Eight elements all finite in TU with finite stored values (nearly all of real data) take finite8; any others, and
  // the tail, go element by element through cmp::classify_bits, the CPU's definition. (finite8's rare branches loop
  // over the eight unrolled too: a loop that indexes the loaded words at run time puts them in local memory.)
  __device__ void scan8(GridSpot<Coord> at, int o, int n, const Vec<TA>& a, const Vec<TE>& e) {
    if constexpr (kPairs) {
      // The magnitudes' bits order as the values do, so the largest |e| is kept as bits (taken in at the end of scan).
      uint32_t e_smallest;
      const uint32_t e_magnitude = magnitudes(e, e_smallest);
      if (n == kVec && below_inf(__vmaxu2(magnitudes(a), e_magnitude))) {
        e_magnitude_ = __vmaxu2(e_magnitude_, e_magnitude);
        // With no zero e (as in most vectors of real data) every quotient is defined: no test per element.
        if (__vcmpeq2(e_smallest, 0) == 0) return finite8<true>(at, o, a, e);
        return finite8<false>(at, o, a, e);
      }
    } else if constexpr (kFastPath) {
      if (n == kVec && all_finite(a, e)) return finite8(at, o, a, e);
    }
    // Element by element, each read again (from cache).
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      if (j > 0) at.next(heat_);
      raise_cell(&cells_[at.cell(heat_)], element(o + j, act_[o + j], exp_[o + j]));
    }
  }

  // Both sides one 16-bit dtype: each 16-bit lane's largest magnitude (the bits without the sign) over v's words.
  template <typename T>
  static __device__ uint32_t magnitudes(const Vec<T>& v) {
    uint32_t smallest;
    return magnitudes(v, smallest);
  }
  // ...and the smallest too.
  template <typename T>
  static __device__ uint32_t magnitudes(const Vec<T>& v, uint32_t& smallest) {
    uint32_t m = 0;
    smallest = 0x7FFF7FFFu;
#pragma unroll
    for (int k = 0; k < Vec<T>::kWords; ++k) {
      m = __vmaxu2(m, v.w[k] & 0x7FFF7FFFu);
      smallest = __vminu2(smallest, v.w[k] & 0x7FFF7FFFu);
    }
    return m;
  }
  // Both lanes of m below Inf's bits: adding 0x8000 - Inf to a lane carries into its top bit exactly where it is not.
  static __device__ bool below_inf(uint32_t m) {
    constexpr uint32_t kLift = (0x8000u - static_cast<uint32_t>(F::kInfBits)) * 0x10001u;
    return ((m + kLift) & 0x80008000u) == 0;
  }

  // Where both sides are stored in TU, from the bits alone (exponent_carries). Else from the stored values, through
  // fp32: a sum of magnitudes is finite only where every one is (a sum that overflows merely sends the vector the exact
  // way); where a side is stored wider than TU, its values must also be finite in TU.
  static __device__ bool all_finite(const Vec<TA>& a, const Vec<TE>& e) {
    if constexpr (std::is_same_v<TA, TU> && std::is_same_v<TE, TU>) {
      return (exponent_carries(a) | exponent_carries(e)) == 0;
    } else {
      float magnitudes = 0;
      uint32_t largest = 0;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        magnitudes += fabsf(Traits<TA>::to_float(a[j])) + fabsf(Traits<TE>::to_float(e[j]));
        if constexpr (!std::is_same_v<TA, TU>) largest = max(largest, high_bits(a[j]) & 0x7FFFFFFFu);
        if constexpr (!std::is_same_v<TE, TU>) largest = max(largest, high_bits(e[j]) & 0x7FFFFFFFu);
      }
      return magnitudes < CUDART_INF_F && largest < (uint32_t{F::kInfBits} << (32 - F::kWidth));
    }
  }

  // Nonzero where an element of v is Inf or NaN: each exponent field plus its lowest bit carries into the bit above it
  // (a sign bit, masked off beforehand) exactly where the field is all ones. A 32-bit word holds two 16-bit elements
  // or one fp32; an fp64's exponent is in its high word.
  template <typename T>
  static __device__ uint32_t exponent_carries(const Vec<T>& v) {
    using G = typename Traits<T>::Format;
    constexpr uint64_t kLowest = G::kInfBits & (~G::kInfBits + 1);
    constexpr int kShift = G::kWidth == 64 ? 32 : 0;
    constexpr uint32_t kField = static_cast<uint32_t>(G::kInfBits >> kShift), kOne = static_cast<uint32_t>(kLowest >> kShift);
    constexpr uint32_t kCopies = G::kWidth == 16 ? 0x10001u : 1u;  // one copy per element of a word
    constexpr int kFirst = G::kWidth == 64 ? 1 : 0, kStride = G::kWidth == 64 ? 2 : 1;
    uint32_t carries = 0;
#pragma unroll
    for (int k = kFirst; k < Vec<T>::kWords; k += kStride) carries |= (v.w[k] & kField * kCopies) + kOne * kCopies;
    return carries & 0x80008000u;
  }

  static __device__ double error(TA a, TE e) { return fabs(finite_value(a) - finite_value(e)); }

  // The ordered-integer distance of two values finite in TU, from high_bits(): magnitudes subtract on one side of zero
  // and add across it (+0 and -0 have magnitude 0; two finite magnitudes add below 2^32).
  static __device__ uint32_t distance(uint32_t ha, uint32_t he) {
    const uint32_t ma = ha & 0x7FFFFFFFu, me = he & 0x7FFFFFFFu;
    const uint32_t d = static_cast<int32_t>(ha ^ he) < 0 ? ma + me : static_cast<uint32_t>(abs(static_cast<int32_t>(ma - me)));
    return d >> (32 - F::kWidth);
  }

  // The distances of the two 16-bit elements of wa and we, finite, as two 16-bit halves (two finite magnitudes add
  // below 2^16). Each element is keyed so that its order is the keys' order: a negative one flipped below 0x8000, a
  // positive one lifted above; -0 and +0 then key 0x7FFF and 0x8000, and keys across zero lie one further apart than
  // the distance, which the signs that differ take back.
  static __device__ uint32_t pair_distance(uint32_t wa, uint32_t we) {
    const uint32_t sa = sign_halves(wa), se = sign_halves(we);
    const uint32_t ka = wa ^ (sa | 0x80008000u), ke = we ^ (se | 0x80008000u);
    // Each half of the larger key is at least the smaller's plus the sign correction: no borrow crosses the halves.
    return __vmaxu2(ka, ke) - __vminu2(ka, ke) - ((sa ^ se) & 0x00010001u);
  }
  // 0xFFFF in each 16-bit half whose sign bit is set.
  static __device__ uint32_t sign_halves(uint32_t w) {
    uint32_t r;
    asm("prmt.b32 %0, %1, 0, 0xBB99;" : "=r"(r) : "r"(w));
    return r;
  }
  // The packed word's increments of both distances of a pair (packed_increment, from the table).
  __device__ uint32_t count_pair(uint32_t d) const {
    constexpr uint32_t kClamp = (kPackedLimit + 1) * 0x10001u;
    const uint32_t c = __vminu2(d, kClamp);
    // (c >> 16) * kPairStride + (c & 0xFFFF), with the low half below 2^10 so that c >> 10 shifts it out.
    static_assert(kPairStride == 1 << 6 && kPackedLimit + 1 < 1 << 10);
    return width_pairs_[(c >> 10) + (c & 0xFFFFu)];
  }

  // What finite8 gathers over its vector besides the thread's sums: the largest distance, the high words of the largest
  // |err| (and the or of the errors' low words) and approximate quotient; the sums of the distances and quotients, how
  // many quotients are defined, and whether an |e| is below 2^-1000.
  struct Largest {
    uint32_t u = 0, x_high = 0, x_low = 0, rel_high = 0, defined = 0;
    std::conditional_t<F::kWidth <= 16, uint32_t, uint64_t> sum_u = 0;  // eight 16-bit distances fit 32 bits
    double sum_rel = 0;
    bool tiny = false;
  };

  // kNonzero: no e of the vector is 0 (known where both sides are one 16-bit dtype).
  template <bool kNonzero>
  __device__ void finite4(const Vec<TA, kVec / 2>& a, const Vec<TE, kVec / 2>& e, Largest& big) {
    ThreadTotals<TA, TE, TU>& t = t_;
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      if constexpr (!kPairs) {
        const uint32_t u = distance(high_bits(a[j]), high_bits(e[j]));
        big.u = max(big.u, u);
        big.sum_u += u;
        // packed_increment(u) in three instructions: distance 0 shifts by 160, nothing; above 32 it sets bits 30-31 or
        // nothing, which unpack() leaves alone.
        packed_ += one_at(5 * (top_bit(u - 1) + 1));
      }

      const double av = finite_value(a[j]), ev = finite_value(e[j]);
      const double diff = av - ev, x = fabs(diff);
      t.sum_abs += x;
      t.sum_aa = fma(av, av, t.sum_aa);
      t.sum_ee = fma(ev, ev, t.sum_ee);
      t.sum_dd = fma(diff, diff, t.sum_dd);
      t.sum_ae = fma(av, ev, t.sum_ae);
      const auto x_hi = static_cast<uint32_t>(__double2hiint(diff)) & 0x7FFFFFFFu;  // |diff|'s, off the fp64 pipe
      atomicAdd(err_slot(x_hi), 1u);
      big.x_high = max(big.x_high, x_hi);
      // The low words: where a side is fp64, a nonzero error can have a high word of 0 (a subnormal); and an error that
      // shares the largest one's high word can exceed it only through them (see bar_of).
      big.x_low |= static_cast<uint32_t>(__double2loint(diff));

      // |1 / e| as the modifier of the product (reciprocal() is odd: its steps commute with the sign), without |e|.
      const double rel = x * fabs(reciprocal(ev));  // NaN where e is 0, and unused there
      if (kNonzero || ev != 0) {  // where e is 0 the relative error is not defined
        big.sum_rel += rel;
        big.rel_high = max(big.rel_high, static_cast<uint32_t>(__double2hiint(rel)));
        ++big.defined;
      }
      if constexpr (std::is_same_v<TE, double>) {
        const double e_abs = fabs(ev);
        big.tiny |= ev != 0 && e_abs < 0x1p-1000;
        t.max_expected = fmax(t.max_expected, e_abs);
      } else if constexpr (!kPairs) {
        t.max_expected = fmaxf(t.max_expected, fabsf(Traits<TE>::to_float(e[j])));
      }
    }
  }

  // Eight finite elements: comparable, with finite stored values. Per element only what every element adds to, and
  // straight-line: the sums, the distance's width (in registers up to 32, else in shared memory behind a vote-free
  // branch on the vector's largest), the |err| bucket; maxima and the heatmap are not tracked per element but by a key
  // (bar_of) of the vector's largest, and where an element may beat one, the vector is offered again exactly.
  //
  // The relative errors' sum takes x * |reciprocal(e)|, within 2^-50 of x / |e| (the sums may differ in their last
  // bits anyway); max_rel takes the correctly rounded x / |e|, as on the CPU. That quotient can exceed max_rel only if
  // the approximate one reaches a relative 2^-40 below it (and no quotient here is subnormal: x and |e| come from
  // values finite in TU); quotients by an |e| below 2^-1000, possible where e is fp64, are all exact.
  template <bool kNonzero = false>
  __device__ void finite8(GridSpot<Coord> at, int o, const Vec<TA>& a, const Vec<TE>& e) {
    ThreadTotals<TA, TE, TU>& t = t_;
    Largest big;
    if constexpr (kPairs) {
      // Both halves straight-line where both sides are one 16-bit dtype (128 registers, no spill; the selects and the
      // loop's back edge go): x0.93 on an H100 against the loop below.
      finite4<kNonzero>(half(a, 0), half(e, 0), big);
      finite4<kNonzero>(half(a, 1), half(e, 1), big);
    } else {
      // A half at a time, in a loop the compiler does not unroll: all eight at once spill (16 to 200 bytes).
#pragma unroll 1
      for (int h = 0; h < 2; ++h) finite4<kNonzero>(half(a, h), half(e, h), big);
    }
    if constexpr (kPairs) {
      uint32_t largest = 0;
#pragma unroll
      for (int k = 0; k < Vec<TA>::kWords; ++k) {
        const uint32_t d = pair_distance(a.w[k], e.w[k]);
        largest = __vmaxu2(largest, d);
        big.sum_u = __dp2a_lo(d, 0x0101u, big.sum_u);
        packed_ += count_pair(d);
      }
      big.u = max(largest & 0xFFFFu, largest >> 16);
    }
    t.comparable += kVec;
    t.rel_defined += big.defined;
    t.sum_ulp += big.sum_u;
    if (big.tiny) big.sum_rel = exact_rel_sum(a, e);
    t.sum_rel += big.sum_rel;
    if (big.u > kPackedLimit) count_wide(a, e);
    if (++packed_vectors_ == kPackedVectors) unpack();

    // Where every error of the vector has no low bits, one equal to a largest (as errors of 16-bit values often are:
    // with abs_bar at 2 * hi + 1 they took ~4% of a warp's vectors down offer(), ncu, H200) is not offered again.
    const uint32_t x_key = 2 * big.x_high + (big.x_low != 0);
    const uint32_t rel_key = big.rel_high == 0 ? 0 : 2 * big.rel_high + 1;
    if (big.tiny || x_key >= t.abs_bar || rel_key >= t.rel_bar || big.u >= t.ulp_bar) offer(o, a, e);

    if (at.holds(heat_, kVec)) {
      unsigned long long* const cell = &cells_[at.cell(heat_)];
      if (x_key >= bar_of(__longlong_as_double(static_cast<long long>(*cell)))) raise_cell(cell, largest_error(a, e));
      return;
    }
    // A vector across cells (rare): its errors recomputed from copies the compiler cannot see through, so that it does
    // not keep |err| of every element from the sums above for this path (8 DADDs on every vector).
    const Vec<TA> ar = opaque(a);
    const Vec<TE> er = opaque(e);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (j > 0) at.next(heat_);
      raise_cell(&cells_[at.cell(heat_)], error(ar[j], er[j]));
    }
  }

  // Each lane's bars raised to the warp's highest. A lane's own maxima stay exact; it merely stops offering what
  // cannot beat its warp's: the block's largest value, and its first occurrence, is still offered by its lane, since
  // no vector of an earlier tile (an earlier index) reached it. Per-lane bars alone sent ~43% of a warp's vectors
  // down the exact path (a maximum rises ~ln n times per lane, and one lane's offer takes the whole warp there);
  // shared, the rises come per warp. All lanes are here together: scan's loop runs the same tiles in every lane.
  __device__ void share_bars() {
    ThreadTotals<TA, TE, TU>& t = t_;
    t.abs_bar = __reduce_max_sync(~0u, t.abs_bar);
    t.rel_bar = __reduce_max_sync(~0u, t.rel_bar);
    t.ulp_bar = __reduce_max_sync(~0u, static_cast<uint32_t>(t.max_ulp + 1));  // distances here are below 2^32 - 1
  }

  // The packed width counts into the thread's counters.
  __device__ void unpack() {
#pragma unroll
    for (int w = 0; w < kPackedWidths; ++w) widths_[w] += (packed_ >> (5 * w)) & 0x1F;
    packed_ = 0, packed_vectors_ = 0;
  }

  // The distances above kPackedLimit of a finite vector, into the warp's width histogram.
  __device__ void count_wide(const Vec<TA>& a, const Vec<TE>& e) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const uint32_t u = distance(high_bits(a[j]), high_bits(e[j]));
      if (u > kPackedLimit) atomicAdd(&width_[top_bit(u - 1) + 1], 1u);
    }
  }

  // The |err| histogram's counter of an error whose high word is x_hi (sign clear): its bucket x_hi >> 18 scaled to a
  // byte offset by masking before the shift (ptxas then adds the base in one LEA.HI, where x_hi >> 18 took three).
  __device__ uint32_t* err_slot(uint32_t x_hi) const {
    constexpr int kShift = cmp::kErrShift - 32;
    constexpr uint32_t kBucketBits = ~((uint32_t{1} << kShift) - 1);
    return reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(err_) + ((x_hi & kBucketBits) >> (kShift - 2)));
  }

  __device__ double largest_error(const Vec<TA>& a, const Vec<TE>& e) const {
    double largest = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) largest = fmax(largest, error(a[j], e[j]));
    return largest;
  }

  // The relative errors' sum of a vector with correctly rounded quotients.
  static __device__ double exact_rel_sum(const Vec<TA>& a, const Vec<TE>& e) {
    double sum = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const double ev = finite_value(e[j]);
      if (ev != 0) sum += error(a[j], e[j]) / fabs(ev);
    }
    return sum;
  }

  // Offers each element of a finite vector to the maxima, in order, as element() does.
  __device__ void offer(int o, const Vec<TA>& a_in, const Vec<TE>& e_in) {
    ThreadTotals<TA, TE, TU>& t = t_;
    const auto at = static_cast<uint32_t>(o);
    const Vec<TA> a = opaque(a_in);  // see finite8's cells: recomputed here, not kept from the sums
    const Vec<TE> e = opaque(e_in);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const double ev = finite_value(e[j]), x = error(a[j], e[j]);
      const int64_t u = distance(high_bits(a[j]), high_bits(e[j]));
      t.offer_abs(x, at + j);
      if (u > t.max_ulp) t.max_ulp = u, t.max_ulp_at = at + j;
      if (ev != 0) t.offer_rel(x / fabs(ev), at + j);
    }
  }

  // Element o of the stretch, as the CPU path's scalar loop takes it; returns its heatmap value.
  __device__ double element(int o, TA act, TE exp) {
    ThreadTotals<TA, TE, TU>& t = t_;
    const cmp::UlpClass c = cmp::classify_bits<F>(bits_in<TU>(act), bits_in<TU>(exp), allow_nan_);
    const double a = Traits<TA>::value(act), e = Traits<TE>::value(exp);
    const double x = cmp::abs_error(a, e), e_abs = fabs(e);
    if (e_abs < CUDART_INF && e_abs > t.max_abs_expected) t.max_abs_expected = e_abs;
    if (c.e_nan) atomicAdd(&rare_.nan_expected, 1u);
    if (!c.comparable) {
      if (c.nan_mismatch) atomicAdd(&rare_.nan_mismatch, 1u);
      if (c.inf_mismatch) atomicAdd(&rare_.inf_mismatch, 1u);
      if (c.both_nan) atomicAdd(&rare_.both_nan, 1u);
      if (c.differs) atomicAdd(&rare_.differ, 1u);
      if (c.differs || c.nan_mismatch) atomicAdd(&rare_.listed, 1u);
      return c.nan_mismatch || c.inf_mismatch ? CUDART_INF : 0.0;  // a matching NaN is no error
    }
    const auto offset = static_cast<uint32_t>(o);
    ++t.comparable;
    t.sum_abs += x;
    t.sum_ulp += static_cast<typename ThreadTotals<TA, TE, TU>::UlpSum>(c.ulp);
    t.offer_abs(x, offset);
    if (static_cast<int64_t>(c.ulp) > t.max_ulp) t.max_ulp = static_cast<int64_t>(c.ulp), t.max_ulp_at = offset;
    if (c.ulp != 0) atomicAdd(&width_[width_slot(c.ulp)], 1u);
    atomicAdd(&err_[cmp::err_bucket(bits_of(x))], 1u);
    if (fabs(a) < CUDART_INF && e_abs < CUDART_INF) {
      t.sum_aa += a * a;
      t.sum_ee += e * e;
      t.sum_dd += (a - e) * (a - e);
      t.sum_ae += a * e;
      if (e != 0) {
        const double rel = x / e_abs;
        ++t.rel_defined;
        t.sum_rel += rel;
        t.offer_rel(rel, offset);
      }
    }
    return x;
  }

  const TA* act_;
  const TE* exp_;
  const bool allow_nan_;
  uint32_t* const err_;
  uint32_t* const width_;
  const uint32_t* const width_pairs_;
  unsigned long long* const cells_;
  RareCounts& rare_;
  const Heatmap heat_;
  int64_t begin_ = 0;
  uint32_t packed_ = 0;
  int packed_vectors_ = 0;
  uint32_t e_magnitude_ = 0;  // kPairs: the largest |e| of the finite vectors, as bits in each 16-bit lane
  uint32_t widths_[kPackedWidths] = {};
  ThreadTotals<TA, TE, TU> t_;
};

// ---- block reductions in a fixed order: a shuffle tree per warp, then the warps in order ---- ------------------

template <typename T>
__device__ T block_sum(T v, ScanShared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(~0u, v, o);
  T* const partial = reinterpret_cast<T*>(sh.reduce);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarps; ++w) total += partial[w];
  __syncthreads();
  return total;
}

// The largest v and the lowest index where it occurs (at < 0: none), in thread 0.
template <typename T>
__device__ void block_max_at(T& v, int64_t& at, ScanShared& sh) {
  const auto take = [&](T ov, int64_t oat) {
    if (ov > v || (ov == v && oat >= 0 && oat < at)) v = ov, at = oat;
  };
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const T ov = __shfl_down_sync(~0u, v, o);
    const int64_t oat = __shfl_down_sync(~0u, at, o);
    take(ov, oat);
  }
  __shared__ T values[kWarps];
  __shared__ int64_t where[kWarps];
  if (threadIdx.x % 32 == 0) values[threadIdx.x / 32] = v, where[threadIdx.x / 32] = at;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kWarps; ++w) take(values[w], where[w]);
  __syncthreads();
}

template <typename TA, typename TE, typename Coord>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) compare_scan(const ScanArgs args) {
  __shared__ ScanShared sh;
  for (int i = threadIdx.x; i < cmp::kErrBuckets; i += kThreads) sh.err[i] = 0;
  for (int i = threadIdx.x; i < kWarps * kWidths; i += kThreads) sh.width[i / kWidths][i % kWidths] = 0;
  for (int i = threadIdx.x; i < cmp::kGridSide * cmp::kGridSide; i += kThreads) sh.cells[i] = 0;
  if (threadIdx.x == 0) sh.rare = {};
  const int k = threadIdx.x;
  if (k <= args.grid.cell_rows) sh.row_bound[k] = cmp::block_start(k, args.grid.rows, args.grid.cell_rows);
  if (k <= args.grid.cell_cols) sh.col_bound[k] = cmp::block_start(k, args.grid.cols, args.grid.cell_cols);
  if constexpr (Scanner<TA, TE, Coord>::kPairs) {
    for (int i = threadIdx.x; i < kPairRows * kPairStride; i += kThreads) {
      const auto lo = static_cast<uint32_t>(i % kPairStride), hi = static_cast<uint32_t>(i / kPairStride);
      sh.width_pairs[i] = lo < kPairRows ? packed_increment(lo) + packed_increment(hi) : 0;
    }
  }
  if (const int64_t first = int64_t{k} << segment_shift(args.grid); k < 2 * cmp::kGridSide && first < args.grid.cols)
    sh.segment_cell[k] = static_cast<uint8_t>(cmp::block_of(first, args.grid.cols, args.grid.cell_cols));
  __syncthreads();

  const int64_t begin = blockIdx.x * args.stretch, end = std::min(args.numel, begin + args.stretch);
  Scanner<TA, TE, Coord> scanner(args, sh);
  scanner.scan(begin, end, args.aligned);
  __syncthreads();

  // Block totals into this block's slot, the histogram and the cells into the global ones.
  const auto& th = scanner.totals();
  cmp::ScanTotals t;
  t.comparable = block_sum<unsigned long long>(th.comparable, sh);
  t.rel_defined = block_sum<unsigned long long>(th.rel_defined, sh);
  t.sum_ulp = static_cast<double>(block_sum(th.sum_ulp, sh));
  t.sum_abs = block_sum(th.sum_abs, sh);
  t.sum_rel = block_sum(th.sum_rel, sh);
  t.sum_aa = block_sum(th.sum_aa, sh);
  t.sum_ee = block_sum(th.sum_ee, sh);
  t.sum_dd = block_sum(th.sum_dd, sh);
  t.sum_ae = block_sum(th.sum_ae, sh);
  t.max_abs = th.max_abs, t.max_abs_at = scanner.index(th.max_abs, th.max_abs_at);
  t.max_rel = th.max_rel, t.max_rel_at = scanner.index(th.max_rel, th.max_rel_at);
  t.max_ulp = th.max_ulp, t.max_ulp_at = scanner.index(th.max_ulp, th.max_ulp_at);
  block_max_at(t.max_abs, t.max_abs_at, sh);
  block_max_at(t.max_rel, t.max_rel_at, sh);
  block_max_at(t.max_ulp, t.max_ulp_at, sh);
  t.max_abs_expected = th.max_abs_expected;
  int64_t no_index = -1;
  block_max_at(t.max_abs_expected, no_index, sh);

  for (int i = threadIdx.x; i < cmp::kErrBuckets; i += kThreads)
    if (sh.err[i] != 0) atomicAdd(&args.err_hist[i], static_cast<unsigned long long>(sh.err[i]));
  for (int i = threadIdx.x; i < cmp::kGridSide * cmp::kGridSide; i += kThreads)
    if (sh.cells[i] != 0) atomicMax(&args.cells[i], sh.cells[i]);
  // The warps' width histograms into the first (a block counts below 2^32).
  if (threadIdx.x < kWidths)
    for (int warp = 1; warp < kWarps; ++warp) sh.width[0][threadIdx.x] += sh.width[warp][threadIdx.x];
  __syncthreads();
  if (threadIdx.x != 0) return;

  t.nan_mismatch = sh.rare.nan_mismatch;
  t.inf_mismatch = sh.rare.inf_mismatch;
  t.nan_expected = sh.rare.nan_expected;
  t.both_nan = sh.rare.both_nan;
  // Bucket by bucket, so that ulp_hist is indexed by constants and stays out of local memory; distance 0 takes what
  // the nonzero widths leave of the comparable elements.
  int64_t nonzero = 0;  // comparable elements at a nonzero distance
#pragma unroll
  for (int b = 1; b < cmp::kUlpBuckets - 1; ++b) {
    for (int w = 0; w < kWidths; ++w)
      if (cmp::ulp_bucket_of_width(w) == b) t.ulp_hist[b] += sh.width[0][w];
    nonzero += t.ulp_hist[b];
  }
  t.ulp_hist[0] = t.comparable - nonzero;
  t.bitwise_diff = nonzero + sh.rare.differ;
  args.blocks[blockIdx.x] = {t, nonzero + sh.rare.listed};
}

// ---- the blocks' totals merged -------------------------------------------------------------------------------------

constexpr int kMergeThreads = 128;

// Thread i merges a run of consecutive blocks in order, then the runs pairwise up a tree whose every node joins two
// neighbouring runs, the earlier on the left: merge_in_order's tie rule (the earlier maximum) stays right, and the
// sums' order is fixed by the block count alone. Thread 0 then places the first mismatches over the blocks in order.
__global__ void __launch_bounds__(kMergeThreads) compare_merge(const BlockTotals* blocks, int block_count,
                                                               int64_t stretch, int64_t numel, int first_n,
                                                               BlockTotals* total, FirstRange* ranges) {
  __shared__ cmp::ScanTotals runs[kMergeThreads];
  __shared__ int64_t run_listed[kMergeThreads];
  const int i = threadIdx.x;
  const int per_run = (block_count + kMergeThreads - 1) / kMergeThreads;
  const int first = std::min(block_count, i * per_run), last = std::min(block_count, first + per_run);
  cmp::ScanTotals t;
  int64_t listed = 0;
  for (int b = first; b < last; ++b) cmp::merge_in_order(t, blocks[b].t), listed += blocks[b].listed;
  runs[i] = t;
  run_listed[i] = listed;
  __syncthreads();
  for (int step = 1; step < kMergeThreads; step *= 2) {
    if (i % (2 * step) == 0) cmp::merge_in_order(runs[i], runs[i + step]);
    __syncthreads();
  }

  // Where each run's listed elements start in the list, then the ranges of its blocks.
  __shared__ int64_t run_start[kMergeThreads];
  if (i == 0) {
    int64_t start = 0;
    for (int r = 0; r < kMergeThreads; ++r) run_start[r] = start, start += run_listed[r];
    *total = {runs[0], start};
  }
  __syncthreads();
  int64_t offset = run_start[i];
  for (int b = first; b < last; ++b) {
    const int64_t take = std::max<int64_t>(0, std::min<int64_t>(blocks[b].listed, first_n - offset));
    const int64_t begin = b * stretch;
    ranges[b] = {begin, std::min(numel, begin + stretch), take, offset};
    offset += blocks[b].listed;
  }
}

// ---- the first mismatches -----------------------------------------------------------------------------------------

struct FirstArgs {
  const void* actual;
  const void* expected;
  bool allow_nan;
  const FirstRange* ranges;
  Listed* out;
};

template <typename TA, typename TE>
__global__ void __launch_bounds__(kThreads) compare_first(const FirstArgs args) {
  using TU = UlpType<TA, TE>;
  const auto* act = static_cast<const TA*>(args.actual);
  const auto* exp = static_cast<const TE*>(args.expected);
  const FirstRange r = args.ranges[blockIdx.x];
  if (r.count == 0) return;
  __shared__ int warp_counts[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t base = r.begin, found = 0; base < r.end && found < r.count; base += kTile) {
    const int64_t p = base + int64_t{threadIdx.x} * kVec;
    uint32_t listed = 0;
    for (int j = 0; j < kVec && p + j < r.end; ++j) {
      const cmp::UlpClass c = cmp::classify_bits<typename Traits<TU>::Format>(bits_in<TU>(act[p + j]),
                                                                             bits_in<TU>(exp[p + j]), args.allow_nan);
      listed |= uint32_t{c.differs || c.nan_mismatch} << j;
    }
    // This thread's place among the tile's listed elements: an inclusive prefix count over the warp, then the warps.
    const int mine = __popc(listed);
    int inclusive = mine;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int other = __shfl_up_sync(~0u, inclusive, o);
      if (lane >= o) inclusive += other;
    }
    if (lane == 31) warp_counts[warp] = inclusive;
    __syncthreads();
    int64_t rank = found + inclusive - mine;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) rank += warp_counts[w];
      found += warp_counts[w];
    }
    for (int j = 0; j < kVec; ++j, listed >>= 1)
      if (listed & 1) {
        if (rank < r.count)
          args.out[r.offset + rank] = {p + j, Traits<TA>::value(act[p + j]), Traits<TE>::value(exp[p + j])};
        ++rank;
      }
    __syncthreads();
  }
}

// ---- reading both once --------------------------------------------------------------------------------------------

__device__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__global__ void __launch_bounds__(kThreads) read_both(const uint4* a, int64_t a_words, const uint4* b, int64_t b_words,
                                                      unsigned* out) {
  uint32_t acc = 0;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < a_words || i < b_words; i += stride) {
    if (i < a_words) acc ^= fold(__ldg(a + i));
    if (i < b_words) acc ^= fold(__ldg(b + i));
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc ^= __shfl_down_sync(~0u, acc, o);
  __shared__ uint32_t warps[kWarps];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) acc ^= warps[w];
    out[blockIdx.x] = acc;
  }
}

// ---- dispatch -----------------------------------------------------------------------------------------------------

// Calls f with a value of the storage type of dtype t.
template <typename Fn>
void with_type(Dtype t, Fn&& f) {
  switch (t) {
    case Dtype::fp64:
      return f(double{});
    case Dtype::fp32:
      return f(float{});
    case Dtype::fp16:
      return f(F16{});
    case Dtype::bf16:
      return f(BF16{});
  }
  throw std::invalid_argument("compare_cuda: unknown dtype " + std::to_string(static_cast<int>(t)));
}

int sm_count() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return std::max(sms, 1);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool wide_coordinates_forced = false;

}  // namespace

void force_wide_coordinates(bool on) { wide_coordinates_forced = on; }

ScanLayout scan_layout(int64_t numel) {
  const int64_t target_blocks = int64_t{sm_count()} * kBlocksPerSm;
  const int64_t per_block = (numel + target_blocks - 1) / target_blocks;
  const int64_t stretch = std::min(kMaxStretch, std::max<int64_t>(1, (per_block + kTile - 1) / kTile) * kTile);
  return {static_cast<int>((numel + stretch - 1) / stretch), stretch};
}

void launch_compare_scan(Dtype actual_type, Dtype expected_type, const void* actual, const void* expected,
                         int64_t numel, const cmp::GridShape& grid, bool allow_nan, ScanLayout layout,
                         BlockTotals* blocks, unsigned long long* err_hist, unsigned long long* cells,
                         cudaStream_t stream) {
  if (numel == 0) return;
  const bool aligned = aligned16(actual) && aligned16(expected);
  const ScanArgs args{actual, expected, numel, layout.stretch, grid, allow_nan, aligned, blocks, err_hist, cells};
  with_type(actual_type, [&](auto a) {
    with_type(expected_type, [&](auto e) {
      using A = decltype(a);
      using E = decltype(e);
      const auto launch = [&](auto kernel, int ring_bytes) {
        // Static and dynamic shared memory together pass 48 KiB: the ring's size is allowed, on the current device.
        const cudaError_t allowed =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_bytes);
        if (allowed != cudaSuccess) throw std::runtime_error(std::string("compare_scan: ") + cudaGetErrorString(allowed));
        kernel<<<layout.blocks, kThreads, ring_bytes, stream>>>(args);
      };
      if (narrow_coordinates(grid) && !wide_coordinates_forced)
        launch(compare_scan<A, E, int32_t>, Scanner<A, E, int32_t>::kRingBytes);
      else
        launch(compare_scan<A, E, int64_t>, Scanner<A, E, int64_t>::kRingBytes);
    });
  });
}

void launch_compare_merge(const BlockTotals* blocks, ScanLayout layout, int64_t numel, int first_n,
                          BlockTotals* total, FirstRange* ranges, cudaStream_t stream) {
  compare_merge<<<1, kMergeThreads, 0, stream>>>(blocks, layout.blocks, layout.stretch, numel, first_n, total, ranges);
}

void launch_compare_first(Dtype actual_type, Dtype expected_type, const void* actual, const void* expected,
                          bool allow_nan, const FirstRange* ranges, int range_count, Listed* out, cudaStream_t stream) {
  if (range_count == 0) return;
  const FirstArgs args{actual, expected, allow_nan, ranges, out};
  with_type(actual_type, [&](auto a) {
    with_type(expected_type, [&](auto e) {
      compare_first<decltype(a), decltype(e)><<<range_count, kThreads, 0, stream>>>(args);
    });
  });
}

int read_both_blocks() { return sm_count() * 4; }

void launch_read_both(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes, unsigned* out,
                      cudaStream_t stream) {
  read_both<<<read_both_blocks(), kThreads, 0, stream>>>(static_cast<const uint4*>(a), a_bytes / 16,
                                                          static_cast<const uint4*>(b), b_bytes / 16, out);
}

}  // namespace parity::compare_cuda
