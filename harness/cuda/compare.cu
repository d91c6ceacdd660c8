/*
compare()'s fused CUDA comparator (interface and contract: compare.cuh; per-element definitions shared with the CPU
path: compare_element.hpp).

compare_scan: persistent blocks of 256 threads, two per SM, each block one contiguous stretch walked in tiles of 2048
elements. A thread loads 8 elements a side (one to four 16-byte loads; where both sides are 16-bit, the next tile's
loads are issued before this one is computed) and computes them 4 at a time (8 at once would take ~180 registers).
It keeps its sums in registers, in index order; the histograms sit in shared memory, counted with atomic increments
that the hardware aggregates over a warp (ATOMS.POPC.INC): the ULP distances by bit_width(u - 1), a copy per warp (the
buckets follow from the width), and the |err| buckets; the heatmap's cells take a thread's maximum when it moves to
another cell. Four elements all finite in the ULP dtype (nearly all of real data) take finite_unit, ~60 instructions
an element for bf16 against bf16; any others, and the tail, go element by element through cmp::classify_bits, the
CPU's definition. At the end a block's totals are reduced in a fixed order and written to its slot; the histogram
and the cells go to global ones with integer atomics.

compare_first: one block per stretch that holds some of the first mismatches, listing them in order (a block-wide
prefix count per tile) until it has the number asked for.

ptxas (sm_90a): 120-128 registers; no spills in the loop (bf16 against fp64 parks two loop-invariant words outside it).
*/
#include "harness/cuda/compare.cuh"

#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace parity::compare_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlocksPerSm = 2;
constexpr int kVec = 8;                             // elements a thread loads per tile
constexpr int kUnit = 4;                            // elements computed together (more would spill registers)
constexpr int64_t kTile = int64_t{kThreads} * kVec;  // elements per block and step
// A stretch this long keeps every per-thread and per-block counter within 32 bits.
constexpr int64_t kMaxStretch = int64_t{1} << 30;
// The ULP histogram is kept by bit_width(u - 1) of a nonzero distance u (below 64: fp64 distances saturate at 2^63-1),
// with distance 0 in a slot of its own.
constexpr int kZeroSlot = 64;
constexpr int kWidths = kZeroSlot + 1;

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

// Unit `u` (0 or 1) of eight loaded elements, chosen at run time without indexing the registers that hold them.
template <typename T>
__device__ __forceinline__ Vec<T, kUnit> unit(const Vec<T>& v, int u) {
  Vec<T, kUnit> r;
#pragma unroll
  for (int k = 0; k < Vec<T, kUnit>::kWords; ++k) r.w[k] = u == 0 ? v.w[k] : v.w[Vec<T, kUnit>::kWords + k];
  return r;
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
  RareCounts rare;
  alignas(8) unsigned char reduce[kWarps * 8];
};

// The heatmap's cells (their bounds in shared memory) over the [rows, cols] view of the tensor.
struct Heatmap {
  const int64_t* row_bound;  // cell row k spans rows [row_bound[k], row_bound[k + 1])
  const int64_t* col_bound;  // cell column k spans columns [col_bound[k], col_bound[k + 1])
  int64_t cols;
  int cell_rows, cell_cols;
};

// Where an element lies: its row and column in the view, and those of its cell.
struct GridSpot {
  int64_t row, col;
  int kr, kc;

  // Along a stretch rows only grow: kr moves up from where it was.
  __device__ void seek_row(const Heatmap& h) {
    while (kr + 1 < h.cell_rows && row >= h.row_bound[kr + 1]) ++kr;
  }
  // Columns jump about: kc is tried first, then a binary search over the bounds.
  __device__ void seek_col(const Heatmap& h) {
    if (col >= h.col_bound[kc] && col < h.col_bound[kc + 1]) return;
    int lo = 0, hi = h.cell_cols;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (h.col_bound[mid] <= col) lo = mid;
      else hi = mid;
    }
    kc = lo;
  }
  __device__ void next(const Heatmap& h) {
    if (++col == h.cols) col = 0, ++row;
    seek_row(h);
    seek_col(h);
  }
  __device__ int cell(const Heatmap& h) const { return kr * h.cell_cols + kc; }
  // This element and the n - 1 after it lie in one cell.
  __device__ bool holds(const Heatmap& h, int n) const { return col + n <= h.col_bound[kc + 1]; }
};

// The largest value of the heatmap cell a thread is in, written to the block's cells when it leaves the cell.
struct CellMax {
  unsigned long long* cells;
  int cell = -1;
  unsigned long long bits = 0;

  __device__ void add(int c, double v) {
    if (c != cell) flush(), cell = c, bits = 0;
    bits = max(bits, bits_of(v));
  }
  // Non-negative doubles order as their bits; a cell only grows, so one already as large needs no atomic.
  __device__ void flush() {
    if (cell >= 0 && bits > cells[cell]) atomicMax(&cells[cell], bits);
  }
};

// A thread's totals in registers. The comparable elements are counted by what they are not (RareCounts), those at a
// nonzero distance in the width histogram; where a maximum sits is an offset into the block's stretch (at most 2^30).
template <typename TU>
struct ThreadTotals {
  using UlpSum = std::conditional_t<sizeof(TU) == 8, double, uint64_t>;  // exact below fp64, as on the CPU
  uint32_t rel_defined = 0;
  UlpSum sum_ulp = 0;
  double sum_abs = 0, sum_rel = 0, sum_aa = 0, sum_ee = 0, sum_dd = 0, sum_ae = 0;
  double max_abs = -1, max_rel = -1, max_abs_expected = 0;
  int64_t max_ulp = -1;
  uint32_t max_abs_at = 0, max_rel_at = 0, max_ulp_at = 0;
  // What an approximate quotient must reach for its exact one to possibly beat max_rel (see Scanner::finite_unit).
  double rel_bar = -1;

  __device__ void offer_rel(double rel, uint32_t at) {
    if (rel <= max_rel) return;
    max_rel = rel, max_rel_at = at;
    rel_bar = rel == 0 ? CUDART_MIN_DENORM : rel * (1 - 0x1p-40);
  }
};

// The distance's slot in the width histogram.
__device__ __forceinline__ int width_slot(uint64_t u) { return u == 0 ? kZeroSlot : cmp::bit_width(u - 1); }
__device__ __forceinline__ int width_slot(uint32_t u) {
  int top;  // the position of the highest set bit of u - 1, -1 where u = 1: bit_width(u - 1) - 1
  asm("bfind.u32 %0, %1;" : "=r"(top) : "r"(u - 1));
  return (u == 0 ? kZeroSlot - 1 : top) + 1;
}

// 1 / y for a normal y, within a few units in the last place: the hardware's approximation refined by two Newton steps,
// without the branches of a correctly rounded division.
__device__ __forceinline__ double reciprocal(double y) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(y));
  r = fma(r, fma(-y, r, 1.0), r);
  return fma(r, fma(-y, r, 1.0), r);
}

template <typename TA, typename TE>
class Scanner {
 public:
  using TU = UlpType<TA, TE>;
  using F = typename Traits<TU>::Format;
  // Distances of every dtype but fp64 fit 32 bits (opposite signs add two magnitudes below 2^31).
  static constexpr bool kFastPath = F::kWidth <= 32;

  __device__ Scanner(const ScanArgs& args, ScanShared& sh)
      : act_(static_cast<const TA*>(args.actual)), exp_(static_cast<const TE*>(args.expected)),
        allow_nan_(args.allow_nan), err_(sh.err), width_(sh.width[threadIdx.x / 32]), rare_(sh.rare),
        heat_{sh.row_bound, sh.col_bound, args.grid.cols, static_cast<int>(args.grid.cell_rows),
              static_cast<int>(args.grid.cell_cols)} {
    cell_.cells = sh.cells;
  }

  // The block's stretch [begin, end), a tile at a time. Where the tile starts in the heatmap is the same in every
  // thread (warp-uniform registers); a unit's place is found from it.
  __device__ void scan(int64_t begin, int64_t end, bool aligned) {
    begin_ = begin;
    const int64_t cols = heat_.cols, drow = kTile / cols, dcol = kTile % cols;
    GridSpot tile{begin / cols, 0, 0, 0};
    tile.col = begin - tile.row * cols;
    tile.seek_row(heat_);
    const int offset = threadIdx.x * kVec;
    int64_t p = begin + offset;
    const auto load = [&](int64_t at, Vec<TA>& a, Vec<TE>& e) {
      if (at < end) a = load8(act_, at, count(at, end), aligned), e = load8(exp_, at, count(at, end), aligned);
    };
    // Where both sides are 16-bit, the next tile's loads are issued before this one is computed, so that a thread has
    // more than 32 bytes in flight; wider pairs have that already, and no registers to spare.
    constexpr bool kPrefetch = Vec<TA>::kWords + Vec<TE>::kWords <= 8;
    Vec<TA> a{};
    Vec<TE> e{};
    if constexpr (kPrefetch) load(p, a, e);
    for (int64_t base = begin; base < end; base += kTile, p += kTile) {
      Vec<TA> a_next{};
      Vec<TE> e_next{};
      if constexpr (kPrefetch) load(p + kTile, a_next, e_next);
      else load(p, a, e);
      if (p < end) scan8(tile, offset, p, count(p, end), a, e);
      if constexpr (kPrefetch) a = a_next, e = e_next;
      tile.row += drow, tile.col += dcol;
      if (tile.col >= cols) tile.col -= cols, ++tile.row;
      tile.seek_row(heat_);
    }
    cell_.flush();
  }

  __device__ const ThreadTotals<TU>& totals() const { return t_; }
  // Where a maximum found at `offset` sits, -1 where there is none.
  __device__ int64_t index(double max, uint32_t offset) const { return max < 0 ? -1 : begin_ + offset; }

 private:
  static __device__ int count(int64_t p, int64_t end) { return static_cast<int>(std::min<int64_t>(kVec, end - p)); }

  // The element `offset` elements after the tile's start: offset < kTile, so at most kTile / cols + 1 rows on.
  __device__ GridSpot spot(const GridSpot& tile, int offset) {
    const int64_t at = tile.col + offset;
    const int64_t rows_on = heat_.cols >= kTile ? int64_t{at >= heat_.cols}
                                                : int64_t{static_cast<uint32_t>(at) / static_cast<uint32_t>(heat_.cols)};
    GridSpot s{tile.row + rows_on, at - rows_on * heat_.cols, tile.kr, kc_};
    s.seek_row(heat_);
    s.seek_col(heat_);
    kc_ = s.kc;
    return s;
  }

  // Eight loaded elements, a unit at a time: a loop the compiler does not unroll, so that it does not interleave the
  // units' arithmetic (eight at once need ~180 registers).
  __device__ void scan8(const GridSpot& tile, int offset, int64_t p, int n, const Vec<TA>& a, const Vec<TE>& e) {
#pragma unroll 1
    for (int u = 0; u < kVec / kUnit && u * kUnit < n; ++u)
      scan_unit(tile, offset + u * kUnit, p + u * kUnit, min(n - u * kUnit, kUnit), unit(a, u), unit(e, u));
  }

  __device__ void scan_unit(const GridSpot& tile, int offset, int64_t p, int n, const Vec<TA, kUnit>& a,
                            const Vec<TE, kUnit>& e) {
    if constexpr (kFastPath) {
      if (n == kUnit) {
        uint32_t ua[kUnit], ue[kUnit], largest = 0;
#pragma unroll
        for (int j = 0; j < kUnit; ++j) {
          ua[j] = static_cast<uint32_t>(bits_in<TU>(a[j]));
          ue[j] = static_cast<uint32_t>(bits_in<TU>(e[j]));
          largest = max(largest, max(ua[j] & uint32_t{F::kMagnitude}, ue[j] & uint32_t{F::kMagnitude}));
        }
        if (largest < F::kInfBits) return finite_unit(tile, offset, p, a, e, ua, ue);
      }
    }
    // Element by element, each read again (from cache): the unit stays in registers only on the path above.
    GridSpot at = spot(tile, offset);
#pragma unroll 1
    for (int j = 0; j < n; ++j) {
      if (j > 0) at.next(heat_);
      cell_.add(at.cell(heat_), element(p + j, act_[p + j], exp_[p + j]));
    }
  }

  static __device__ double error(TA a, TE e) { return fabs(Traits<TA>::value(a) - Traits<TE>::value(e)); }

  // A unit all finite in TU: comparable, with finite stored values. Per element only what every element adds to;
  // maxima are not tracked per element but flagged: where an element may beat one, the unit is offered again exactly.
  //
  // The relative errors' sum takes x * reciprocal(|e|), within 2^-50 of x / |e| (the sums may differ in their last
  // bits anyway); max_rel takes the correctly rounded x / |e|, as on the CPU. That quotient can exceed max_rel only if
  // the approximate one reaches rel_bar, a relative 2^-40 below max_rel (and no quotient here is subnormal: x and |e|
  // come from values finite in TU); quotients by an |e| below 2^-1000, possible where e is fp64, are all exact.
  __device__ void finite_unit(const GridSpot& tile, int offset, int64_t p, const Vec<TA, kUnit>& a,
                              const Vec<TE, kUnit>& e, const uint32_t (&ua)[kUnit], const uint32_t (&ue)[kUnit]) {
    ThreadTotals<TU>& t = t_;
    uint32_t largest_u = 0, defined = 0;
    uint64_t sum_u = 0;
    double largest_err = 0, sum_rel = 0;
    bool may_beat = false, tiny = false;
#pragma unroll
    for (int j = 0; j < kUnit; ++j) {
      const uint32_t u = distance(ua[j], ue[j]);
      atomicAdd(&width_[width_slot(u)], 1u);
      largest_u = max(largest_u, u);
      sum_u += u;

      const double av = Traits<TA>::value(a[j]), ev = Traits<TE>::value(e[j]);
      const double diff = av - ev, x = fabs(diff), e_abs = fabs(ev);
      const bool has_rel = ev != 0;  // where e is 0 the relative error is not defined
      const double rel = x * reciprocal(has_rel ? e_abs : 1.0);
      if (has_rel) sum_rel += rel;
      defined |= uint32_t{has_rel} << j;
      if constexpr (std::is_same_v<TE, double>) tiny |= has_rel && e_abs < 0x1p-1000;
      may_beat |= (has_rel && rel >= t.rel_bar) || e_abs > t.max_abs_expected;
      t.sum_abs += x;
      t.sum_aa += av * av;
      t.sum_ee += ev * ev;
      t.sum_dd += diff * diff;
      t.sum_ae += av * ev;
      atomicAdd(&err_[cmp::err_bucket(bits_of(x))], 1u);
      largest_err = x > largest_err ? x : largest_err;  // no NaN here: fmax's care for it costs instructions
    }
    t.rel_defined += __popc(defined);
    t.sum_ulp += sum_u;
    if (tiny) sum_rel = exact_rel_sum(a, e);
    t.sum_rel += sum_rel;
    if (may_beat || tiny || largest_err > t.max_abs || int64_t{largest_u} > t.max_ulp) offer(p, a, e, ua, ue);

    GridSpot at = spot(tile, offset);
    if (at.holds(heat_, kUnit)) return cell_.add(at.cell(heat_), largest_err);
#pragma unroll
    for (int j = 0; j < kUnit; ++j) {
      if (j > 0) at.next(heat_);
      cell_.add(at.cell(heat_), error(a[j], e[j]));
    }
  }

  // The relative errors' sum of a unit with correctly rounded quotients.
  static __device__ double exact_rel_sum(const Vec<TA, kUnit>& a, const Vec<TE, kUnit>& e) {
    double sum = 0;
#pragma unroll
    for (int j = 0; j < kUnit; ++j) {
      const double ev = Traits<TE>::value(e[j]);
      if (ev != 0) sum += error(a[j], e[j]) / fabs(ev);
    }
    return sum;
  }

  // Offers each element of a finite unit to the maxima, in order, as element() does.
  __device__ void offer(int64_t p, const Vec<TA, kUnit>& a, const Vec<TE, kUnit>& e, const uint32_t (&ua)[kUnit],
                        const uint32_t (&ue)[kUnit]) {
    ThreadTotals<TU>& t = t_;
    const auto at = static_cast<uint32_t>(p - begin_);
#pragma unroll
    for (int j = 0; j < kUnit; ++j) {
      const double ev = Traits<TE>::value(e[j]), x = error(a[j], e[j]), e_abs = fabs(ev);
      const int64_t u = distance(ua[j], ue[j]);
      if (x > t.max_abs) t.max_abs = x, t.max_abs_at = at + j;
      if (u > t.max_ulp) t.max_ulp = u, t.max_ulp_at = at + j;
      if (ev != 0) t.offer_rel(x / e_abs, at + j);
      t.max_abs_expected = fmax(t.max_abs_expected, e_abs);
    }
  }

  // The ordered-integer distance of two values finite in TU without forming ordered integers: magnitudes subtract on
  // one side of zero and add across it (+0 and -0 have magnitude 0).
  static __device__ uint32_t distance(uint32_t ua, uint32_t ue) {
    const uint32_t ma = ua & uint32_t{F::kMagnitude}, me = ue & uint32_t{F::kMagnitude};
    return ((ua ^ ue) >> (F::kWidth - 1)) != 0 ? ma + me : (ma > me ? ma - me : me - ma);
  }

  // One element, as the CPU path's scalar loop takes it; returns its heatmap value.
  __device__ double element(int64_t i, TA act, TE exp) {
    ThreadTotals<TU>& t = t_;
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
    const auto offset = static_cast<uint32_t>(i - begin_);
    t.sum_abs += x;
    t.sum_ulp += static_cast<typename ThreadTotals<TU>::UlpSum>(c.ulp);
    if (x > t.max_abs) t.max_abs = x, t.max_abs_at = offset;
    if (static_cast<int64_t>(c.ulp) > t.max_ulp) t.max_ulp = static_cast<int64_t>(c.ulp), t.max_ulp_at = offset;
    atomicAdd(&width_[width_slot(c.ulp)], 1u);
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
  RareCounts& rare_;
  const Heatmap heat_;
  int64_t begin_ = 0;
  int kc_ = 0;  // the cell column of the thread's last unit: likely that of the next
  CellMax cell_;
  ThreadTotals<TU> t_;
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

template <typename TA, typename TE>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) compare_scan(const ScanArgs args) {
  __shared__ ScanShared sh;
  for (int i = threadIdx.x; i < cmp::kErrBuckets; i += kThreads) sh.err[i] = 0;
  for (int i = threadIdx.x; i < kWarps * kWidths; i += kThreads) sh.width[i / kWidths][i % kWidths] = 0;
  for (int i = threadIdx.x; i < cmp::kGridSide * cmp::kGridSide; i += kThreads) sh.cells[i] = 0;
  if (threadIdx.x == 0) sh.rare = {};
  const int k = threadIdx.x;
  if (k <= args.grid.cell_rows) sh.row_bound[k] = cmp::block_start(k, args.grid.rows, args.grid.cell_rows);
  if (k <= args.grid.cell_cols) sh.col_bound[k] = cmp::block_start(k, args.grid.cols, args.grid.cell_cols);
  __syncthreads();

  const int64_t begin = blockIdx.x * args.stretch, end = std::min(args.numel, begin + args.stretch);
  Scanner<TA, TE> scanner(args, sh);
  scanner.scan(begin, end, args.aligned);
  __syncthreads();

  // Block totals into this block's slot, the histogram and the cells into the global ones.
  auto th = scanner.totals();
  cmp::ScanTotals t;
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
  // Bucket by bucket, so that ulp_hist is indexed by constants and stays out of local memory.
#pragma unroll
  for (int b = 0; b < cmp::kUlpBuckets - 1; ++b) {
    for (int w = 0; w < kWidths; ++w)
      if ((w == kZeroSlot ? 0 : cmp::ulp_bucket_of_width(w)) == b) t.ulp_hist[b] += sh.width[0][w];
    t.comparable += t.ulp_hist[b];
  }
  const int64_t nonzero = t.comparable - t.ulp_hist[0];  // comparable elements at a nonzero distance
  t.bitwise_diff = nonzero + sh.rare.differ;
  args.blocks[blockIdx.x] = {t, nonzero + sh.rare.listed};
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

}  // namespace

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
      compare_scan<decltype(a), decltype(e)><<<layout.blocks, kThreads, 0, stream>>>(args);
    });
  });
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
