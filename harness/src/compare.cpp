#include "harness/cuda/compare_element.hpp"

#include <fmt/format.h>

#include <ATen/Parallel.h>
#if PARITY_WITH_CUDA
#include "harness/cuda/compare.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/tensor.hpp>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

// ATen's parallel_for is defined in its headers, with OpenMP: compiled without it, every chunk below runs on the calling
// thread (CMakeLists.txt builds this file with OpenMP).
#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "compare.cpp must be compiled with OpenMP, or compare() runs on one thread"
#endif

namespace parity {
namespace {

static_assert(cmp::kUlpBuckets == kUlpBuckets && cmp::kGridSide == kErrorGridSide);
using cmp::kErrBuckets;
using cmp::kErrShift;

constexpr int64_t kMaxUlp = std::numeric_limits<int64_t>::max();

// What the ULP arithmetic needs to know about a floating dtype. Integer and fp8 outputs plug in here.
struct FloatFormat {
  at::ScalarType type;
  at::ScalarType bits_type;     // signed integer of the same width, to view the bit pattern
  int width;                    // bits per element
  int digits;                   // significand bits, the implicit one included
  int emin, emax;               // exponents of the smallest and largest normal binades
  uint64_t (*bits_of)(double);  // the bit pattern of a value rounded to this dtype
};

template <typename T>
constexpr FloatFormat format_of(at::ScalarType type, at::ScalarType bits_type, uint64_t (*bits_of)(double)) {
  using L = std::numeric_limits<T>;
  // numeric_limits counts exponents for a significand in [0.5, 1); IEEE binades are [1, 2).
  return {type,   bits_type, static_cast<int>(sizeof(T) * 8), L::digits, L::min_exponent - 1, L::max_exponent - 1,
          bits_of};
}

const FloatFormat& float_format(at::ScalarType t) {
  // Half and bfloat16 round from float: exact for every value representable in them, which is all the ULP
  // helpers promise.
  static const FloatFormat fp64 =
      format_of<double>(at::kDouble, at::kLong, [](double v) { return std::bit_cast<uint64_t>(v); });
  static const FloatFormat fp32 = format_of<float>(
      at::kFloat, at::kInt, [](double v) { return uint64_t{std::bit_cast<uint32_t>(static_cast<float>(v))}; });
  static const FloatFormat fp16 = format_of<c10::Half>(
      at::kHalf, at::kShort, [](double v) { return uint64_t{c10::Half(static_cast<float>(v)).x}; });
  static const FloatFormat bf16 = format_of<c10::BFloat16>(
      at::kBFloat16, at::kShort, [](double v) { return uint64_t{c10::BFloat16(static_cast<float>(v)).x}; });
  switch (t) {
    case at::kDouble:
      return fp64;
    case at::kFloat:
      return fp32;
    case at::kHalf:
      return fp16;
    case at::kBFloat16:
      return bf16;
    default:
      throw InputError(fmt::format("unsupported dtype {} for numeric comparison (supported: fp64, fp32, fp16, bf16)",
                                   dtype_name(t)));
  }
}

int64_t magnitude_mask(const FloatFormat& f) { return static_cast<int64_t>((uint64_t{1} << (f.width - 1)) - 1); }

// fp16 and bf16 have the same width; neither is narrower, so the output's own dtype wins.
at::ScalarType narrower(at::ScalarType actual, at::ScalarType expected) {
  return float_format(expected).width < float_format(actual).width ? expected : actual;
}

// ---- the single pass ------------------------------------------------------------------------------------------
// compare() reads both tensors once: every metric is a per-chunk partial (fixed chunk boundaries, so the result does
// not depend on the thread count) merged in chunk order afterwards. A chunk is walked in blocks: a block whose values
// are all finite in the ULP dtype (nearly every block of real data) goes through a branch-free vector kernel, any
// other block (and a chunk's last few elements) through the scalar classification of one element at a time.

constexpr int64_t kChunk = int64_t{1} << 18;  // elements; large enough that the partials cost little to merge
constexpr int64_t kBlock = 512;                // a multiple of 32 whose per-element arrays stay in L1
// Past this many elements the |err| percentiles come from a log-spaced histogram (cmp::err_bucket, four buckets per
// octave) rather than a sort (see below).
constexpr int64_t kExactPercentileLimit = int64_t{1} << 16;
// While a thread scans its chunks the histogram is kept at a finer grain: slot = the top 16 bits of the error's double,
// four slots to a bucket. Those 16 bits load straight from memory, so counting an error is a load and an increment.
constexpr int kErrSlotShift = kErrShift - 2;
constexpr int kErrSlots = 1 << (64 - kErrSlotShift - 1);
int64_t err_slot(double err) { return static_cast<int64_t>(std::bit_cast<uint64_t>(err) >> kErrSlotShift); }
// Errors of neighbouring elements often share a slot: counting them into one counter would chain every increment on the
// previous one's store. Element k of a block counts into copy k % kErrCopies; the copies sit 64 bytes apart modulo
// 4 KiB so that the same slot of each falls in a different L1 set.
constexpr int kErrCopies = 4;
constexpr int64_t kErrCopyStride = kErrSlots + 16;
// A thread adds its slot counts into the histogram at least this often: before one could pass 32 bits.
constexpr int64_t kChunksPerFold = (int64_t{1} << 31) / kChunk;

// Storage type -> the sign-magnitude bit pattern of a value of that type.
template <typename T>
struct Bits;
template <>
struct Bits<double> {
  static uint64_t of(double v) { return std::bit_cast<uint64_t>(v); }
};
template <>
struct Bits<float> {
  static uint64_t of(float v) { return std::bit_cast<uint32_t>(v); }
};
template <>
struct Bits<c10::Half> {
  static uint64_t of(c10::Half v) { return v.x; }
};
template <>
struct Bits<c10::BFloat16> {
  static uint64_t of(c10::BFloat16 v) { return v.x; }
};

// The ULP histogram's finite buckets, for the scalar path and the vector kernel alike (cmp::kUlpEdges).
constexpr auto kUlpEdges = std::to_array(cmp::kUlpEdges);
static_assert(std::all_of(kUlpEdges.begin() + 1, kUlpEdges.end(), [](uint32_t e) { return std::has_single_bit(e); }));
using cmp::ulp_bucket;

// Bit layout of the ULP dtype TU.
template <typename TU>
using UlpFormat = cmp::BitFormat<sizeof(TU) * 8, std::numeric_limits<TU>::digits>;

// One element of actual (TA) against expected (TE), classified and ULP-counted in TU: the reference for every element
// the vector kernel does not take.
struct Element : cmp::UlpClass {
  double a, e;     // the stored values in fp64
  double abs_err;  // |a - e|
};

template <typename TA, typename TE, typename TU>
Element classify(TA act, TE exp, bool allow_nan) {
  Element el;
  // Classification in TU: a wider side is rounded to the narrower dtype first (exactly what .to() does).
  static_cast<cmp::UlpClass&>(el) = cmp::classify_bits<UlpFormat<TU>>(Bits<TU>::of(static_cast<TU>(act)),
                                                                      Bits<TU>::of(static_cast<TU>(exp)), allow_nan);
  el.a = static_cast<double>(act), el.e = static_cast<double>(exp);
  el.abs_err = cmp::abs_error(el.a, el.e);
  return el;
}

// ---- the vector kernel ----------------------------------------------------------------------------------------
// GCC vector extensions of kBytes bytes: 32 in the AVX2 kernel (two SSE2 registers each in the baseline one), 64 in the
// AVX-512 one (GCC 12 lowers 64-byte vectors to scalar code on AVX2, so the width follows the ISA). Whatever the width,
// element k of a block adds to fp64 lane k % kLanes of a sum, in the order of k, so every kernel computes the same bits.
// The helpers take and return vectors by value: always inlined into the kernels, they never make the calls whose ABI GCC
// warns about for the default target. (The warning comes where templates are instantiated, at the end of the file: it
// stays off to the end.)
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename T, int kBytes>
struct VectorOf {
  typedef T type __attribute__((vector_size(kBytes)));
};
template <typename T, int kBytes>
using Vec = typename VectorOf<T, kBytes>::type;
constexpr int kLanes = 8;

// A kernel's vector width in bytes.
template <CpuKernel kKernel>
constexpr int kBytesOf = kKernel == CpuKernel::avx512 ? 64 : 32;

// The vector types of one width: kDoubles fp64 lanes, kWords 32-bit ones.
template <int kBytes>
struct Simd {
  static constexpr int kDoubles = kBytes / 8, kWords = kBytes / 4;
  using D = Vec<double, kBytes>;
  using L = Vec<int64_t, kBytes>;
  using F = Vec<float, kBytes / 2>;  // kDoubles floats
  using I = Vec<int32_t, kBytes>;
  using U = Vec<uint32_t, kBytes>;
  using H = Vec<uint16_t, kBytes / 2>;  // kWords halves
};

template <typename V, typename T>
[[gnu::always_inline]] inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T, typename V>
[[gnu::always_inline]] inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}
// Element by element: GCC 12 splits __builtin_convertvector between vectors of different sizes into 128-bit parts.
template <typename To, typename From>
[[gnu::always_inline]] inline To convert(const From& x) {
  using T = std::remove_cvref_t<decltype(To{}[0])>;
  return [&]<size_t... J>(std::index_sequence<J...>) {
    return To{static_cast<T>(x[J])...};
  }(std::make_index_sequence<sizeof(To) / sizeof(T)>{});
}
// fp32 to fp64. At 64 bytes element by element conversions come out as one instruction only while the code that uses
// them leaves GCC 12 nothing to fold into the single elements: the instruction is asked for by name.
template <typename D, typename F>
[[gnu::always_inline]] inline D widen(const F& x) {
#if defined(__x86_64__)
  if constexpr (sizeof(D) == 64) return __builtin_ia32_cvtps2pd512_mask(x, D{}, 0xFF, 4);  // 4: the current rounding
#endif
  return convert<D>(x);
}
template <typename V>
[[gnu::always_inline]] inline V vmax(V a, V b) {
  return a > b ? a : b;
}
template <typename V>
[[gnu::always_inline]] inline V vmin(V a, V b) {
  return a < b ? a : b;
}
// max(a, b) of fp64 lanes that are non-negative or, in a, -1 (the maxima's start): at 64 bytes a signed compare of the
// bit patterns, which orders such values as the values and keeps the ordering off the floating-point adders, which
// the kernel's sums keep busy (AVX2 has no 64-bit integer max). Of any finite lanes it is positive exactly where one
// of them is, which is all the quotients' screen (see below) asks of it.
template <typename D>
[[gnu::always_inline]] inline D max_of_nonnegative(D a, D b) {
  if constexpr (sizeof(D) == 64) {
    using L = Vec<int64_t, sizeof(D)>;
    return (D)vmax((L)a, (L)b);
  }
  return vmax(a, b);
}
// x / y where y (>= 0) is nonzero, else 0: not defined there, and no defined one (at least 0) is smaller. At 64 bytes
// a division under the mask of an integer test (the floating-point compares share pipes with the kernel's many
// additions); AVX2 has no masks: the quotient is masked after.
template <typename D>
[[gnu::always_inline]] inline D defined_quotient(D x, D y) {
  using L = Vec<int64_t, sizeof(D)>;
#if defined(__x86_64__)
  if constexpr (sizeof(D) == 64) {
    using Q = long long __attribute__((vector_size(64)));  // the builtin's own type
    return __builtin_ia32_divpd512_mask(x, y, D{}, __builtin_ia32_ptestmq512((Q)y, (Q)y, 0xFF), 4);  // 4: as above
  }
#endif
  return (D)((L)(x / y) & ~((L)y == 0));
}
template <typename D>
[[gnu::always_inline]] inline D vabs(D x) {
  return (D)((Vec<uint64_t, sizeof(D)>)x & ~(uint64_t{1} << 63));
}
template <typename V>
[[gnu::always_inline]] inline auto lane_max(const V& v) {
  auto m = v[0];
  for (size_t j = 1; j < sizeof(V) / sizeof(m); ++j) m = std::max(m, v[j]);
  return m;
}
template <typename V>
[[gnu::always_inline]] inline int64_t lane_sum(const V& v) {
  int64_t s = 0;
  for (size_t j = 0; j < sizeof(V) / sizeof(v[0]); ++j) s += static_cast<int64_t>(v[j]);
  return s;
}
// Whether a lane of x, fp64 lanes viewed as int64, is positive: a double above +0.
template <typename D>
[[gnu::always_inline]] inline bool any_positive(D x) {
#if defined(__x86_64__)
  if constexpr (sizeof(D) == 64) {
    using Q = long long __attribute__((vector_size(64)));
    return __builtin_ia32_pcmpgtq512_mask((Q)x, Q{}, 0xFF) != 0;
  }
#endif
  return lane_max(x) > 0;
}

// ---- relative errors summed as fractions --------------------------------------------------------------------------
// Where one side is bf16 and neither fp64, the four quotients x / e a lane takes from a run of 32 elements (elements j,
// j + 8, j + 16 and j + 24 of it for lane j) are summed as one fraction, ((x0 e1 + x1 e0) e2 e3 + (x2 e3 + x3 e2) e0
// e1) / (e0 e1 e2 e3): one division for four quotients, where one each kept the fp64 divider (one VDIVPD zmm per 16
// cycles on Intel cores) busy. One thread, bf16 against fp32, Emerald Rapids, AVX-512: 4.575 -> 4.355 and 4.62 -> 4.44
// ms at 2^22, 72.95 -> 67.7 and 71.8 -> 71.05 ms at 2^26 (two A/Bs of 6 ABBA rounds of bench/cpu_compare_ab.sh, faster
// in 5-6 of them; reports/cpu/2026-11-29-intel-xeon-ci-compare-quotient-fractions-ab.log); the baseline kernel 17%
// faster, the AVX2 one ~9% slower (6.1 -> 6.6 ms) until its fractions got a loop of their own (see take_fractions).
// Probes: without the screen below 6% faster still, without the one division no faster; fp32 pairs gained nothing
// (4.35-4.50 against 4.22-4.36 ms), so they keep a division per element.
// Every product and sum rounds, and no term is negative: the fraction is within a dozen units in the last place of the
// sum of the rounded quotients (the sums may differ in their last bits anyway: mean_rel's contract is 1e-12 relative).
// Values of fp32 and bf16 have magnitudes in [2^-149, 2^128], so every product stays in [2^-596, 2^642], far from
// fp64's underflow and overflow, and den is 0 only where an e is; there the e = 0 elements (whose relative error is not
// defined) are taken out as 0 / 1. An fp64 side would overflow: it takes one division per element. The largest quotient
// is found apart (it must be the correctly rounded one): each pair tells from its products whether one of its quotients
// may exceed a bar a relative 2^-40 below the largest so far, x0 / e0 > T implying round(x0 e1) > round(bar round(e0
// e1)), and only then are its run's quotients divided out (rarely: a new largest).
template <typename D>
struct QuotientSum {
  D num, den;  // the quotients' sum is num / den
  D excess;    // positive (as int64) in the lanes where a quotient may exceed T, the largest so far
};
// a * b + c rounded once, the same bits in every kernel: an FMA instruction where the kernel's ISA has one, else libm's
// fma lane by lane. (At 32 bytes the kernel must say which it is: GCC scalarised a per-lane fma in the AVX2 kernel's
// loop, 6.07 -> 7.76 ms; reports/cpu/2026-11-30-intel-xeon-ci-compare-loop-ablations.log.)
template <CpuKernel kKernel, typename D>
[[gnu::always_inline]] inline D fused_multiply_add(D a, D b, D c) {
#if defined(__x86_64__)
  if constexpr (sizeof(D) == 64) return __builtin_ia32_vfmaddpd512_mask(a, b, c, 0xFF, 4);  // 4: the current rounding
  if constexpr (sizeof(D) == 32 && kKernel == CpuKernel::avx2) return __builtin_ia32_vfmaddpd256(a, b, c);
#endif
  return [&]<size_t... J>(std::index_sequence<J...>) {
    return D{__builtin_fma(a[J], b[J], c[J])...};
  }(std::make_index_sequence<sizeof(D) / sizeof(double)>{});
}
// c - a * b, rounded once where the ISA has FMA: either way within the bar's margin (see above).
template <typename D>
[[gnu::always_inline]] inline D minus_product(D a, D b, D c) {
#if defined(__x86_64__)
  if constexpr (sizeof(D) == 64) return __builtin_ia32_vfnmaddpd512_mask(a, b, c, 0xFF, 4);  // 4: the current rounding
#endif
  return c - a * b;
}
template <typename D>
[[gnu::always_inline]] inline QuotientSum<D> quotient_pair(D x0, D e0, D x1, D e1, D bar) {
  const D x0e1 = x0 * e1, x1e0 = x1 * e0, den = e0 * e1;
  return {x0e1 + x1e0, den, minus_product(bar, den, max_of_nonnegative(x0e1, x1e0))};
}
template <CpuKernel kKernel, typename D>
[[gnu::always_inline]] inline QuotientSum<D> quotient_quad(const QuotientSum<D>& p, const QuotientSum<D>& q) {
  return {fused_multiply_add<kKernel>(p.num, q.den, q.num * p.den), p.den * q.den,
          max_of_nonnegative(p.excess, q.excess)};
}
// The bar of the largest quotient T so far (negative: none yet, and every pair's excess is positive).
inline double quotient_bar(double largest) { return largest * (1 - 0x1p-40); }

// A sum of kLanes fp64 lanes, kParts vectors: element k of a block adds to lane k % kLanes, the lower elements first.
// Eight lanes, so that the AVX-512 kernel adds one vector of its own to each sum per step: with four, two sums shared a
// register, and a step's two dependent additions and their shuffles were what its loop waited for (bf16 against fp32
// at 2^22 on one Zen 4 core: 2.33 -> 2.15 ms, 4 alternating runs).
template <int kBytes>
struct LaneSum {
  using D = typename Simd<kBytes>::D;
  static constexpr int kParts = kLanes * 8 / kBytes;
  D parts[kParts];
  // Zero, part by part: a zero-initialised member made a block's VectorSums one memset of ~800 bytes, which GCC
  // emitted as a rep stos (1.5% of the AVX-512 scan's samples, one thread, bf16 against fp32 at 2^22).
  LaneSum() {
    for (D& p : parts) p = D{};
  }
  [[gnu::always_inline]] void add(int part, D x) { parts[part] += x; }
  // x * y. With kExact every product is exact in fp64 (two values of at most 26 significant bits, as fp32 and bf16
  // values have): a fused multiply-add then rounds as the add alone does, in one instruction. (The file is built with
  // -ffp-contract=off, so that no other product and sum fuse.)
  template <bool kExact>
  [[gnu::always_inline]] void add_product(int part, D x, D y) {
    if constexpr (kExact && kBytes == 64) return add_fused<CpuKernel::avx512>(part, x, y);
    add(part, x * y);
  }
  // x * y rounded with the sum, not apart.
  template <CpuKernel kKernel>
  [[gnu::always_inline]] void add_fused(int part, D x, D y) {
    parts[part] = fused_multiply_add<kKernel>(x, y, parts[part]);
  }
  double lane(int j) const { return parts[j / Simd<kBytes>::kDoubles][j % Simd<kBytes>::kDoubles]; }
  // Adds lane j into lanes[j], a vector at a time: lane by lane, GCC built each vector of lanes from 8-byte loads, and
  // 1.8% of the AVX-512 scan's samples sat on one of them.
  void add_to(std::array<double, kLanes>& lanes) const {
    constexpr int kDoubles = Simd<kBytes>::kDoubles;
    for (int p = 0; p < kParts; ++p)
      store(lanes.data() + p * kDoubles, load<D>(lanes.data() + p * kDoubles) + parts[p]);
  }
  // Whether a lane is NaN or Inf: its magnitude's bits reach Inf's. At 64 bytes one integer compare a vector. Else
  // lane by lane: the same test on vectors (a maximum of int64 lanes, which SSE2 lacks) took the baseline kernel 46 ->
  // 60 ms (bf16 against fp32 at 2^22), though it runs once a block; why was not found.
  bool any_non_finite() const {
    if constexpr (kBytes == 64) {
      using L = Vec<int64_t, kBytes>;
      constexpr int64_t kBelowInf = 0x7FEFFFFFFFFFFFFF;  // the largest finite magnitude's bits
      for (const D& p : parts)
        if (any_positive((D)((L)vabs(p) - kBelowInf))) return true;
      return false;
    }
    for (int j = 0; j < kLanes; ++j)
      if (!std::isfinite(lane(j))) return true;
    return false;
  }
};

// The kernel takes TU in {fp32, bf16} with each side stored as TU, fp32 or fp64; anything else is scalar.
template <typename T, typename TU>
constexpr bool kVectorSide =
    std::is_same_v<T, TU> ? !std::is_same_v<TU, c10::Half> && !std::is_same_v<TU, double>
                          : (std::is_same_v<TU, float> || std::is_same_v<TU, c10::BFloat16>) &&
                                (std::is_same_v<T, float> || std::is_same_v<T, double>);

// The magnitude bits of c10::BFloat16(float)'s round to nearest even of fp32 magnitude bits m: a finite value's carry
// never reaches the sign bit, and a NaN lands at or above Inf's bits, which is all the kernel needs to hand its block
// to the scalar path. Monotonic: the rounded largest is the largest rounded.
template <typename U>
[[gnu::always_inline]] inline U bf16_magnitude(U m) {
  return (m + 0x7FFFu + ((m << 15) >> 31)) >> 16;
}

// kWords elements of one side rounded to TU as static_cast<TU> rounds them: the sign and magnitude bits.
template <typename U>
struct UlpBits {
  U sign;    // bit 31
  U mag;     // NaN and Inf, and only they, reach UlpFormat<TU>::kInfBits
  U stored;  // the stored value's magnitude as fp32 bits (exact for fp32 and bf16 storage)
};

template <typename T, typename TU, int kBytes>
[[gnu::always_inline]] inline UlpBits<typename Simd<kBytes>::U> load_bits(const T* p) {
  using V = Simd<kBytes>;
  using U = typename V::U;
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const U raw = convert<U>(load<typename V::H>(p));
    return {raw << 16, raw & 0x7FFFu, (raw & 0x7FFFu) << 16};
  } else {
    U f32;
    if constexpr (std::is_same_v<T, float>) {
      f32 = load<U>(p);
    } else {
      // static_cast<TU> of a double goes through float, for bf16 too (c10::BFloat16 has no double constructor).
      using D = typename V::D;
      using F = typename V::F;
      const F f[2] = {convert<F>(load<D>(p)), convert<F>(load<D>(p + V::kDoubles))};
      std::memcpy(&f32, f, sizeof f);
    }
    const U m = f32 & 0x7FFFFFFFu;
    if constexpr (std::is_same_v<TU, float>) return {f32, m, m};
    return {f32, bf16_magnitude(m), m};
  }
}

// kDoubles elements' stored values in fp64. A bf16 side reads the fp32 bits that the first loop of the kernel left in
// f32: converting there, a whole vector at a time, takes a third of the instructions.
template <typename D, typename T>
[[gnu::always_inline]] inline D load_values(const T* p, const float* f32) {
  using F = Vec<float, sizeof(D) / 2>;
  if constexpr (std::is_same_v<T, double>) {
    return load<D>(p);
  } else if constexpr (std::is_same_v<T, float>) {
    return widen<D>(load<F>(p));
  } else {
    return widen<D>(load<F>(f32));
  }
}

// A block's totals: the floating sums lane by lane, the rest in whatever lanes the width has.
template <int kBytes>
struct VectorSums {
  using D = typename Simd<kBytes>::D;
  using U = typename Simd<kBytes>::U;
  LaneSum<kBytes> sum_abs, sum_rel, sum_aa, sum_ee, sum_dd, sum_ae;
  D max_abs = D{} - 1, max_rel = D{} - 1;
  // Where quotients sum as fractions: the first element of the run where max_rel's largest lane first reached its
  // final value, so that its first occurrence is looked for from there (find_rel divides element by element).
  int64_t max_rel_from = 0;
  U max_ulp{};
  U ulp_low{}, ulp_high{};  // the distances' low and high 16 bits, each summed exactly over a block
  double max_abs_expected = 0;
  int64_t rel_defined = 0;
};

// A chunk's 16-bit halves of distances add up in 32-bit lanes (at least eight to a vector) without passing 2^32.
static_assert(kChunk / 8 * 0xFFFF < int64_t{1} << 32);

// A block's per-element values, for what lane totals cannot say: where a maximum sits, which elements differ, the
// histograms and the heatmap. (Where the largest relative error sits is recomputed from abs: it is rarely asked.)
// Aligned to a cache line, so that no vector load or store of the widest kernel straddles two.
struct VectorArrays {
  alignas(64) double abs[kBlock];
  alignas(64) uint32_t ulp[kBlock];
  alignas(64) float act_f32[kBlock], exp_f32[kBlock];  // a bf16 side's values as fp32
};

// Prefetches the line holding p[ahead], computed without pointer arithmetic as that element may lie past the tensor.
template <typename T>
[[gnu::always_inline]] inline void prefetch(const T* p, int64_t ahead) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + ahead * sizeof(T)));
}

// prefetch(p + i, ahead) once per 64 bytes of p, where i steps by kLanes or a vector's words (more often, the redundant
// prefetches of a line cost load slots).
template <typename T>
[[gnu::always_inline]] inline void prefetch_line(const T* p, int64_t i, int64_t ahead) {
  constexpr int64_t kPerLine = std::max<int64_t>(64 / sizeof(T), kLanes);
  if (i % kPerLine == 0) prefetch(p + i, ahead);
}

// Counts errors[0, n) into the slot counts, element c into copy c % kErrCopies (delta -1: takes them back out).
template <int n>
[[gnu::always_inline]] inline void count_errors(uint32_t* counts, const double* errors, uint32_t delta = 1) {
  for (int c = 0; c < n; ++c) counts[c % kErrCopies * kErrCopyStride + err_slot(errors[c])] += delta;
}

// n (a multiple of 32) elements of actual against expected, and with kCountErrors their errors into err_counts. False,
// with s and b partly written (and no counts added), where one of them is not finite in TU. The work is two pieces:
// `first`, the bits, distances and integer maxima of kWords elements, and `step`, the fp64 sums of kLanes (the
// expected side's magnitude goes to `first` where its bits hold it exactly). At 32 bytes each is a loop of its own, so
// that each has few accumulators: a sum spilled to the stack would chain every iteration on a store-to-load forward.
// The six sums of eight lanes take six AVX-512 registers but twelve of AVX2's sixteen, where GCC spills some: the AVX2
// kernel is ~8% slower than with four lanes (2.9 -> 3.15 ms at 2^22, bf16 against fp32, on a Zen 4 made to take it),
// and a third loop for the sums of products costs more (3.47 ms). At 64 bytes both run in one loop, `first`'s work
// under the divider's pace (one VDIVPD zmm a step), which the second of two loops ran at while the first left the
// divider idle: one thread, bf16 against fp32, 5.33 -> 4.77 ms at 2^22 and 84.6 -> 75.5 ms at 2^26 (fp32 pairs 5.00 ->
// 4.38, 78.8 -> 68.7); with defined_quotient's masked division, against the two loops in another A/B, 5.26 -> 4.55
// and 84.8 -> 73.7 ms (fp32 pairs 4.98 -> 4.18, 78.9 -> 66.2). Emerald Rapids, 6 ABBA rounds of bench/cpu_compare_ab.sh
// each, every round faster: reports/cpu/2026-11-29-intel-xeon-ci-compare-one-pass-ab.log. Every kernel sums in the
// same order, so all ISAs give the same bits.
// Where the AVX-512 loop's time goes (one thread, bf16 against fp32 at 2^22, minima of 60 alternating repetitions,
// Emerald Rapids; timing-only ablations): 4.04 ms as is, 3.70 without the quotients' screen, 3.54 without their
// fractions too, 3.79 without the ULP distances, 3.83 without the four sums of products, 3.99 without the |err|
// counts: no one piece holds it. Tried: a run's distances in 16-bit lanes, e rounded by vcvtne2ps2bf16 (AVX512_BF16,
// 6 instructions fewer a run): 3.98 ms, not worth a fourth kernel; the screen tested once a block: within the noise
// (reports/cpu/2026-11-30-intel-xeon-ci-compare-loop-ablations.log, the patches beside it). Kept: d^2 summed fused
// (add_fused, in every kernel and the scalar path) and the quads' numerators formed fused: one thread, minima of 80
// alternating repetitions, bf16 against fp32 4.07 -> 3.88 ms at 2^22 and 62.5 -> 60.9 ms at 2^26, fp32 pairs (no
// fractions) unchanged, the AVX2 kernel 5.99 -> 5.90 ms, the baseline one 46 -> 54.5 ms (libm's fma a lane); the
// medians of that VM's noisy hours agree in direction only
// (reports/cpu/2026-11-30-intel-xeon-ci-compare-fused-dd-ab.log).
template <typename TA, typename TE, typename TU, bool kCountErrors, CpuKernel kKernel>
[[gnu::always_inline]] inline bool scan_vector_block(const TA* act, const TE* exp, int64_t n, double largest_rel,
                                                     VectorSums<kBytesOf<kKernel>>& s, VectorArrays& b,
                                                     uint32_t* err_counts) {
  constexpr int kBytes = kBytesOf<kKernel>;
  using V = Simd<kBytes>;
  using D = typename V::D;
  using L = typename V::L;
  using I = typename V::I;
  using U = typename V::U;
  constexpr bool kExpectedBits = !std::is_same_v<TE, double>;
  // Neither side fp64: every product of two values is exact (see add_product). With a 16-bit side too, quotients sum
  // as fractions (see "relative errors summed as fractions" for why only then).
  constexpr bool kNoFp64 = !std::is_same_v<TA, double> && !std::is_same_v<TE, double>;
  constexpr bool kFractions = kNoFp64 && (sizeof(TA) == 2 || sizeof(TE) == 2);
  constexpr int kParts = LaneSum<kBytes>::kParts;
  U max_mag{}, max_expected{};
  I expected_zero{};
  // kWords elements from i: bits, distances, maxima, and a bf16 side's fp32 copy for `step`.
  const auto first = [&](int64_t i) {
    const UlpBits<U> a = load_bits<TA, TU, kBytes>(act + i), e = load_bits<TE, TU, kBytes>(exp + i);
    if constexpr (std::is_same_v<TA, c10::BFloat16>) store(b.act_f32 + i, a.sign);
    if constexpr (std::is_same_v<TE, c10::BFloat16>) store(b.exp_f32 + i, e.sign);
    // Only a side that may round to Inf in TU needs its magnitudes' maximum (see `finite`).
    if constexpr (sizeof(TA) > sizeof(TU)) max_mag = vmax(max_mag, a.mag);
    if constexpr (kExpectedBits) {
      max_expected = vmax(max_expected, e.stored);
      if constexpr (!kFractions) expected_zero -= e.stored == 0;  // else counted where a fraction shows one
    } else {
      max_mag = vmax(max_mag, e.mag);
    }
    // The ordered-integer distance without forming ordered integers: magnitudes subtract on one side of zero and
    // add across it (+0 and -0 have magnitude 0).
    const I d = (I)(a.mag - e.mag);
    const U ulp = (I)(a.sign ^ e.sign) < 0 ? a.mag + e.mag : (U)(d < 0 ? -d : d);
    store(b.ulp + i, ulp);
    // The next block's 16-bit sides here, the wider ones in `step` (see the note above scan_chunk_baseline).
    if constexpr (sizeof(TA) == 2) prefetch_line(act, i, kBlock);
    if constexpr (sizeof(TE) == 2) prefetch_line(exp, i, kBlock);
    s.max_ulp = vmax(s.max_ulp, ulp);
    if constexpr (sizeof(TU) == 2) {
      s.ulp_low += ulp;
    } else {
      s.ulp_low += ulp & 0xFFFFu;
      s.ulp_high += ulp >> 16;
    }
  };
  // Whether every element is finite in TU. Where a side is stored as TU it is where its values are, and a NaN or Inf
  // on either side makes that element's |err|, and so sum_abs, NaN or Inf (no |err| is negative: none cancels): one
  // test a block, where the maxima of both sides' magnitudes took two instructions each vector of `first` (measured
  // with the deferred division: see take_fractions). A wider side may round to Inf in TU: its magnitudes' maximum, the
  // expected side's from max_expected.
  const auto finite = [&] {
    uint32_t expected = lane_max(max_expected);
    if constexpr (sizeof(TU) == 2) expected = bf16_magnitude(expected);
    return lane_max(max_mag) < UlpFormat<TU>::kInfBits && expected < UlpFormat<TU>::kInfBits &&
           !s.sum_abs.any_non_finite();
  };
  D max_e_abs{};
  L e_zero{};
  // kLanes elements from i, a vector of kDoubles at a time: the vector of each sum's lanes it adds to is known here.
  // Where quotients sum as fractions, each vector's |err| and |e| go to x and e for them.
  const auto step = [&](int64_t i, D (&x)[kParts], D (&e)[kParts]) {
    // The next block's wider sides, spread over the block's longest work: the hardware prefetcher alone falls behind
    // while the block is computed, and a burst of prefetches stalls it (see the note above scan_chunk_baseline). Past
    // the end of the tensor they are harmless: prefetches do not fault.
    if constexpr (sizeof(TA) != 2) prefetch_line(act, i, kBlock);
    if constexpr (sizeof(TE) != 2) prefetch_line(exp, i, kBlock);
#pragma GCC unroll 8
    for (int part = 0; part < kParts; ++part, i += V::kDoubles) {
      const D av = load_values<D>(act + i, b.act_f32 + i), ev = load_values<D>(exp + i, b.exp_f32 + i);
      const D diff = av - ev, err = vabs(diff), e_abs = vabs(ev);
      const D rel = kFractions ? D{} : defined_quotient(err, e_abs);
      store(b.abs + i, err);
      s.sum_abs.add(part, err);
      if constexpr (kFractions) {
        x[part] = err, e[part] = e_abs;
      } else {
        s.sum_rel.add(part, rel);
      }
      s.sum_aa.template add_product<kNoFp64>(part, av, av);
      s.sum_ee.template add_product<kNoFp64>(part, ev, ev);
      s.sum_dd.template add_fused<kKernel>(part, diff, diff);
      s.sum_ae.template add_product<kNoFp64>(part, av, ev);
      s.max_abs = max_of_nonnegative(s.max_abs, err);
      if constexpr (!kFractions) s.max_rel = max_of_nonnegative(s.max_rel, rel);
      if constexpr (!kExpectedBits) {
        max_e_abs = vmax(max_e_abs, e_abs);
        e_zero -= (L)e_abs == 0;  // an integer compare (see defined_quotient)
      }
    }
  };
  // The |err| and |e| of elements [i, i + 32) (see "relative errors summed as fractions"), from b.abs and the sides.
  const auto run_values = [&](int64_t i, int q, int part, D& x, D& e) {
    const int64_t j = i + q * kLanes + part * V::kDoubles;
    x = load<D>(b.abs + j), e = vabs(load_values<D>(exp + j, b.exp_f32 + j));
  };
  D bar = D{} + quotient_bar(largest_rel);
  // The fraction of the run at i in the lanes of `part`, from b.abs and the expected side; with `zeros`, the run's
  // e = 0 elements taken out (as 0 / 1) and counted in its lanes.
  const auto stored_fraction = [&](int64_t i, int part, L* zeros) {
    D x[4], e[4];
    for (int q = 0; q < 4; ++q) {
      run_values(i, q, part, x[q], e[q]);
      if (zeros) {
        const L zero = (L)e[q] == 0;
        x[q] = zero ? D{} : x[q], e[q] = zero ? D{} + 1 : e[q];
        *zeros -= zero;
      }
    }
    return quotient_quad<kKernel>(quotient_pair(x[0], e[0], x[1], e[1], bar),
                                  quotient_pair(x[2], e[2], x[3], e[3], bar));
  };
  // A run whose quotients may hold a new largest: all of them divided out, and the bar raised. No run before the one
  // that raises the block's largest holds that value: it would have been offered (its quotient exceeds the bar) and
  // raised it first.
  const auto offer_quotients = [&](int64_t i) [[gnu::cold]] {
    const double before = lane_max(s.max_rel);
    for (int q = 0; q < 4; ++q)
      for (int part = 0; part < kParts; ++part) {
        D x, e;
        run_values(i, q, part, x, e);
        s.max_rel = max_of_nonnegative(s.max_rel, defined_quotient(x, e));
      }
    const double after = lane_max(s.max_rel);
    if (after > before) s.max_rel_from = i;
    largest_rel = std::max(largest_rel, after);
    bar = D{} + quotient_bar(largest_rel);
  };
  // The histogram's loads and increments go to the scalar and memory pipes beside the vector work of this loop, rather
  // than to a loop of their own. A step counts the errors stored kLag elements before it: a load of part of a store
  // still in flight waits for the store to complete.
  constexpr int64_t kLag = 32;
  const int64_t lead = std::min(kLag, n);
  // A run's fractions, one a part: each divided out a run later, where its inputs are long ready (divided as they were
  // formed, the division held back the loop's retirement: ~22% of a profile's samples at the instruction after it).
  // With `finite`'s test from sum_abs and the zeros counted only where a fraction shows one, one thread, bf16 against
  // fp32: 4.50 -> 4.195 ms at 2^22 (faster in 6 of 6 ABBA rounds), 69.55 -> 68.95 ms at 2^26 (4 of 6); minima of 30
  // alternating repetitions 4.32 -> 4.07 and 66.9 -> 63.6 ms; fp32 pairs unchanged within the noise; llvm-mca's model
  // of the AVX-512 loop 63.2 -> 54.2 cycles a run (Emerald Rapids;
  // reports/cpu/2026-11-29-intel-xeon-ci-compare-deferred-division-ab.log). The run is offered where its screen
  // fires. An e = 0 gives its pair an excess of x e' >= 0, so such a run is offered only where its error is nonzero.
  QuotientSum<D> pending[kParts];
  for (QuotientSum<D>& p : pending) p.num = D{}, p.den = D{} + 1;
  const auto take_fractions = [&](int64_t i, const QuotientSum<D> (&quads)[kParts]) {
    D excess;
#pragma GCC unroll 2
    for (int part = 0; part < kParts; ++part) {
      s.sum_rel.add(part, pending[part].num / pending[part].den);  // NaN or Inf where an e is 0: see below
      pending[part] = quads[part];
      excess = part == 0 ? quads[part].excess : max_of_nonnegative(excess, quads[part].excess);
    }
    if (any_positive(excess)) [[unlikely]]
      offer_quotients(i);
  };
  // At 64 bytes the fractions are formed from the registers of a run's steps. AVX2's sixteen registers cannot hold
  // them beside the sums (the kernel was ~9% slower with them: spills), so there they come from b.abs in a loop of
  // their own: the AVX2 kernel 7.56 -> 6.81 ms with the rest of the change (bf16 against fp32 at 2^22, medians of 4
  // ABBA rounds), the baseline one unchanged (46-48 ms).
  constexpr bool kFractionsInRun = kFractions && kBytes == 64;
  // The sums of elements [i, i + kRun), and their errors' counts: a run of a fraction, else one of `first`'s vectors
  // (the loop fp32 pairs ran before fractions).
  constexpr int64_t kRun = kFractions ? 32 : V::kWords;
  const auto run = [&](int64_t i) {
    D x[2][kParts], e[2][kParts];
    QuotientSum<D> pairs[2][kParts];
#pragma GCC unroll 4
    for (int q = 0; q < kRun / kLanes; ++q) {
      const int64_t j = i + q * kLanes;
      step(j, x[q % 2], e[q % 2]);
      if constexpr (kCountErrors)
        if (j >= kLag) count_errors<kLanes>(err_counts, b.abs + j - kLag);
      if constexpr (kFractionsInRun)
        if (q % 2 == 1)
#pragma GCC unroll 2
          for (int part = 0; part < kParts; ++part)
            pairs[q / 2][part] = quotient_pair(x[0][part], e[0][part], x[1][part], e[1][part], bar);
    }
    if constexpr (kFractionsInRun) {
      QuotientSum<D> quads[kParts];
      for (int part = 0; part < kParts; ++part) quads[part] = quotient_quad<kKernel>(pairs[0][part], pairs[1][part]);
      take_fractions(i, quads);
    }
  };
  if constexpr (kBytes == 64) {
    for (int64_t i = 0; i < n; i += kRun) {  // one loop (see above)
      for (int64_t j = i; j < i + kRun; j += V::kWords) first(j);
      run(i);
    }
  } else {
    for (int64_t i = 0; i < n; i += V::kWords) first(i);
    for (int64_t i = 0; i < n; i += kRun) run(i);
    if constexpr (kFractions)
      for (int64_t i = 0; i < n; i += 32) {
        QuotientSum<D> quads[kParts];
        for (int part = 0; part < kParts; ++part) quads[part] = stored_fraction(i, part, nullptr);
        take_fractions(i, quads);
      }
  }
  if constexpr (kFractions) {
    const QuotientSum<D> none[kParts]{};
    take_fractions(0, none);  // the last run's; none's excess is 0, which offers nothing
  }
  // The finiteness check needs the sums, so it comes after the counts, which a block that fails it takes back.
  if (!finite()) {
    if constexpr (kCountErrors)
      for (int64_t j = 0; j < n - lead; j += kLanes) count_errors<kLanes>(err_counts, b.abs + j, ~0u);
    return false;
  }
  // A run with an e = 0 left its fraction NaN or Inf (nothing else can: every den of finite values is positive): the
  // block's sum again, with those elements taken out, and counted.
  int64_t expected_zeros = 0;
  if constexpr (kFractions) {
    if (s.sum_rel.any_non_finite()) [[unlikely]] {
      s.sum_rel = {};
      L zeros{};
      for (int64_t i = 0; i < n; i += 32)
        for (int part = 0; part < kParts; ++part) {
          const QuotientSum<D> quad = stored_fraction(i, part, &zeros);
          s.sum_rel.add(part, quad.num / quad.den);
        }
      expected_zeros = lane_sum(zeros);
    }
  } else if constexpr (kExpectedBits) {
    expected_zeros = lane_sum(expected_zero);
  }
  if constexpr (kCountErrors) {
#pragma GCC unroll 1
    for (int64_t i = n - lead; i < n; i += kLanes) count_errors<kLanes>(err_counts, b.abs + i);
  }
  if constexpr (kExpectedBits) {
    s.max_abs_expected = std::bit_cast<float>(lane_max(max_expected));
    s.rel_defined = n - expected_zeros;
  } else {
    s.max_abs_expected = lane_max(max_e_abs);
    s.rel_defined = n - lane_sum(e_zero);
  }
  return true;
}

// acc + 1 in the lanes where `holds` is set (all ones). AVX-512 (64 bytes) adds under the compare's mask, one
// instruction; AVX2 has no masks: it subtracts the all-ones lanes.
template <typename V>
[[gnu::always_inline]] inline V count_if(V acc, V holds) {
  if constexpr (sizeof(V) == 64) return holds ? acc + 1 : acc;
  return acc - holds;
}

// How many distances exceed each edge, lane by lane: each 32-bit lane holds two 16-bit counts. Summing the lanes, where
// small counts would be widened to 64 bits one by one, is left to the end of a chunk: no 16-bit count passes 2^16
// there.
template <int kBytes>
using AboveEdges = std::array<typename Simd<kBytes>::U, kUlpEdges.size()>;
static_assert(kChunk / 16 < (1 << 16), "a 16-bit count of a chunk's distances counts at most kChunk / 16 of them");

// x's and y's non-negative lanes in one vector of signed lanes half as wide, each saturated at the largest such lane
// holds, in whatever order (the counts below do not care). AVX-512 packs them in one instruction (packssdw, packsswb);
// the other widths clamp, shift and or.
template <typename Narrow, typename Wide>
[[gnu::always_inline]] inline Narrow narrow_saturated(Wide x, Wide y) {
  using T = std::remove_cvref_t<decltype(Narrow{}[0])>;
#if defined(__x86_64__)
  if constexpr (sizeof(Wide) == 64 && sizeof(T) == 2) return __builtin_ia32_packssdw512_mask(x, y, Narrow{}, ~0u);
  if constexpr (sizeof(Wide) == 64 && sizeof(T) == 1) {
    using Q = char __attribute__((vector_size(64)));  // the builtin's own type
    return (Narrow)__builtin_ia32_packsswb512_mask(x, y, Q{}, ~0ull);
  }
#endif
  const Wide largest = Wide{} + std::numeric_limits<T>::max();
  return (Narrow)(vmin(x, largest) | vmin(y, largest) << static_cast<int>(8 * sizeof(T)));
}

// Adds how many of n (a multiple of 32) distances exceed each of the first K edges to `above`. Only edges below a
// block's largest distance can be exceeded, so a block of small distances counts few. The distances are narrowed to
// 16-bit lanes, and those to bytes: a compare counts 64 distances at 64 bytes against each edge below 127, and 32
// against the others. kWide: distances may reach 2^31, which a signed lane reads as negative (only a block whose
// largest passes every edge, 1024, can hold one). Before, distances were clamped, shifted and or-ed two or four to a
// 32-bit lane, and a block whose largest passed 64 counted every edge two to a lane. One thread, against that, minima
// of 40 alternating repetitions: bf16 against fp32 4.12 -> 4.05 ms at 2^22 and 64.7 -> 63.1 ms at 2^26, fp32 pairs
// 4.22 -> 4.10 and 66.3 -> 64.2 ms; the AVX2 kernel 6.11 -> 5.96 ms (bf16, 2^22); the counting loop of a bf16 block
// past 1024, 28 -> 33 instructions for twice the distances (Emerald Rapids;
// reports/cpu/2026-11-29-intel-xeon-ci-compare-narrowed-edge-counts-ab.log).
template <int K, bool kWide, int kBytes>
[[gnu::always_inline]] inline void count_above_edges(const uint32_t* ulp, int64_t n, AboveEdges<kBytes>& above) {
  if constexpr (K > 0) {
    using V = Simd<kBytes>;
    using U = typename V::U;
    using I = typename V::I;
    using W = Vec<int16_t, kBytes>;
    using B = Vec<int8_t, kBytes>;
    constexpr int kWords = V::kWords;
    static_assert(kUlpEdges.back() < std::numeric_limits<int16_t>::max());
    constexpr int kInBytes = std::min<int>(K, std::ranges::count_if(kUlpEdges, [](uint32_t e) { return e < 127; }));
    B in_bytes[kInBytes] = {};          // at most kBlock / 32 per lane
    W in_words[K - kInBytes + 1] = {};  // at most kBlock / 16 per lane (one spare: no array of size 0)
    // Distances [i, i + 4 kWords), the lanes of any vector past `parts` 0, which exceeds no edge.
    const auto count = [&](int64_t i, int parts) {
      I d[4] = {};
      for (int p = 0; p < parts; ++p) {
        const U u = load<U>(ulp + i + kWords * p);
        d[p] = (I)(kWide && K == kUlpEdges.size() ? vmin(u, U{} + 0x7FFFu) : u);
      }
      const W w[2] = {narrow_saturated<W>(d[0], d[1]), narrow_saturated<W>(d[2], d[3])};
      for (int k = kInBytes; k < K; ++k)
        for (const W& x : w) in_words[k - kInBytes] = count_if(in_words[k - kInBytes], x > int16_t(kUlpEdges[k]));
      const B b = narrow_saturated<B>(w[0], w[1]);
      for (int k = 0; k < kInBytes; ++k) in_bytes[k] = count_if(in_bytes[k], b > int8_t(kUlpEdges[k]));
    };
    int64_t i = 0;
    for (; i + 4 * kWords <= n; i += 4 * kWords) count(i, 4);
    if (i < n) count(i, static_cast<int>((n - i) / kWords));  // at 64 bytes, 32 distances: two vectors
    for (int k = 0; k < kInBytes; ++k) {
      const U counts = (U)in_bytes[k];
      above[k] += (counts & 0x00FF00FFu) + ((counts >> 8) & 0x00FF00FFu);
    }
    for (int k = kInBytes; k < K; ++k) above[k] += (U)in_words[k - kInBytes];
  }
}

// The largest of n > 0 values that are non-negative or +Inf: their bit patterns order as they do, and a maximum of
// integers vectorises where one of doubles (which must keep std::max's order of NaN) is a chain of dependent steps.
[[gnu::always_inline]] inline double largest_of(const double* values, int64_t n) {
  int64_t largest = 0;
  for (int64_t k = 0; k < n; ++k) largest = std::max(largest, std::bit_cast<int64_t>(values[k]));
  return std::bit_cast<double>(largest);
}

template <typename T>
int64_t first_index_of(const T* values, int64_t n, T v) {
  return std::find(values, values + n, v) - values;
}

// ---- one chunk --------------------------------------------------------------------------------------------------

struct Partial : cmp::ScanTotals {
  std::vector<int64_t> first;  // flat indices of the chunk's first listed elements
  std::vector<double> grid;    // the error grid's cells this chunk touched (max is order-free)
};

using Grid = cmp::GridShape;
using cmp::block_of;
using cmp::block_start;

// What one thread reuses from chunk to chunk and from call to call.
class Scratch {
 public:
  static Scratch& of_this_thread() {
    // On the heap: a thread-local object this large could exhaust the static TLS of a library loaded with dlopen.
    thread_local const std::unique_ptr<Scratch> scratch = std::make_unique<Scratch>();
    return *scratch;
  }
  VectorArrays block;

  // The |err| slot counts, zero, for the chunks of one task: a count is an integer, so a thread adds up all its chunks
  // in any order before their counts go into the histogram. (A task that threw left them dirty: cleared here.)
  uint32_t* start_counting() {
    if (err_counts_.empty()) err_counts_.resize(kErrCopies * kErrCopyStride);
    if (counting_) std::fill(err_counts_.begin(), err_counts_.end(), 0);
    counting_ = true;
    return err_counts_.data();
  }
  // Adds the counts into the buckets of hist, and zeroes them. None lies past the slot of max_err, the largest error
  // counted (negative: none). A bucket's sixteen counts (four slots in each copy) are summed in a register: added slot
  // by slot into the histogram, each addition waited on the store of the one before (the fold's share of a one-thread
  // compare's samples at 2^22: ~1.3% -> ~0.7%).
  void fold_counts(double max_err, std::vector<uint64_t>& hist) {
    const int64_t buckets = max_err < 0 ? 0 : err_slot(max_err) / 4 + 1;
    for (int64_t b = 0; b < buckets; ++b) {
      uint64_t sum = 0;
      for (int c = 0; c < kErrCopies; ++c)
        for (int k = 0; k < 4; ++k) sum += err_counts_[c * kErrCopyStride + 4 * b + k];
      hist[b] += sum;
    }
    for (int c = 0; c < kErrCopies; ++c) std::fill_n(err_counts_.data() + c * kErrCopyStride, 4 * buckets, 0);
    counting_ = false;
  }

 private:
  std::vector<uint32_t> err_counts_;
  bool counting_ = false;
};

// The largest value offered and where it was first offered.
template <typename T>
struct Max {
  T value = -1;
  int64_t at = -1;
  void offer(T v, int64_t i) {
    if (v > value) value = v, at = i;
  }
};

// One chunk of actual (TA) against expected (TE), ULP-counted in TU, by the vector kernel kKernel.
// A block's costs outside the vector loops held ~20% of the AVX-512 scan's samples (one thread, bf16 against fp32 at
// 2^22, Emerald Rapids; the distances' edge counts 12% of them): the sums' memset, find_rel dividing from the block's
// start, the lanes' totals built from 8-byte loads, any_non_finite lane by lane, a heatmap span's maximum as a chain;
// and once a call, the |err| slots' fold (Scratch). Without them, minima of 30 alternating repetitions: bf16 against
// fp32 3.85 -> 3.69 ms at 2^22 and 62.1 -> 58.6 ms at 2^26, fp32 pairs 4.12 -> 3.96 and 65.3 -> 62.9 ms; AVX2 5.93 ->
// 5.85 and 5.61 -> 5.34 ms at 2^22; the baseline kernel unchanged
// (reports/cpu/2026-11-30-intel-xeon-ci-compare-block-costs-ab.log).
template <typename TA, typename TE, typename TU, CpuKernel kKernel>
class ChunkScan {
  static constexpr int kBytes = kBytesOf<kKernel>;

 public:
  // Exactly one of err_counts (Scratch::start_counting) and comparable_errors: where the |err| percentiles come from.
  ChunkScan(const TA* act, const TE* exp, const Grid& g, const CompareOptions& opts, Partial& p, Scratch& scratch,
            uint32_t* err_counts, std::vector<double>* comparable_errors)
      : act_(act), exp_(exp), g_(g), allow_nan_(opts.allow_nan),
        first_n_(static_cast<size_t>(std::max(opts.first_n, 0))), p_(p), scratch_(scratch), err_counts_(err_counts),
        comparable_errors_(comparable_errors) {
    p_.grid.assign(g.cell_rows * g.cell_cols, 0.0);
  }

  void scan(int64_t begin, int64_t end) {
    for (int64_t pos = begin; pos < end; pos += kBlock) {
      const int64_t n = std::min(kBlock, end - pos);
      int64_t done = 0;
      if constexpr (kVectorSide<TA, TU> && kVectorSide<TE, TU>) {
        if (const int64_t whole = n & ~int64_t{31}; whole > 0) {
          VectorSums<kBytes> s;
          VectorArrays& b = scratch_.block;
          const TA* const a = act_ + pos;
          const TE* const e = exp_ + pos;
          const double largest_rel = t_.max_rel.value;
          if (err_counts_ ? scan_vector_block<TA, TE, TU, true, kKernel>(a, e, whole, largest_rel, s, b, err_counts_)
                          : scan_vector_block<TA, TE, TU, false, kKernel>(a, e, whole, largest_rel, s, b, nullptr))
            add_vector_block(pos, whole, s, b), done = whole;
        }
      }
      if (done < n) scan_scalar(pos + done, pos + n);
    }
    finish();
  }

 private:
  using UlpSum = std::conditional_t<sizeof(TU) == 8, double, uint64_t>;  // exact below fp64, which can saturate

  // The chunk's running totals.
  struct Totals {
    int64_t bitwise_diff = 0, nan_mismatch = 0, inf_mismatch = 0, nan_expected = 0, both_nan = 0;
    int64_t comparable = 0, rel_defined = 0;
    std::array<double, kLanes> sum_abs{}, sum_rel{}, sum_aa{}, sum_ee{}, sum_dd{}, sum_ae{};
    UlpSum sum_ulp = 0;
    double max_abs_expected = 0;
    Max<double> max_abs, max_rel;
    Max<int64_t> max_ulp;
    std::array<int64_t, kUlpBuckets> ulp_hist{};
    int64_t vector_elements = 0;  // in blocks of the vector kernel, whose distances `above` counts
    AboveEdges<kBytes> above{};
    typename Simd<kBytes>::U ulp_low{}, ulp_high{};  // VectorSums' summed over the chunk
  };

  void add_vector_block(int64_t pos, int64_t n, const VectorSums<kBytes>& s, const VectorArrays& b) {
    Totals& t = t_;
    t.comparable += n;
    s.sum_abs.add_to(t.sum_abs);
    s.sum_rel.add_to(t.sum_rel);
    s.sum_aa.add_to(t.sum_aa);
    s.sum_ee.add_to(t.sum_ee);
    s.sum_dd.add_to(t.sum_dd);
    s.sum_ae.add_to(t.sum_ae);
    t.rel_defined += s.rel_defined;
    t.ulp_low += s.ulp_low;
    t.ulp_high += s.ulp_high;
    t.max_abs_expected = std::max(t.max_abs_expected, s.max_abs_expected);
    // A block rarely holds a new maximum: look for where it sits only then.
    const double block_max_abs = lane_max(s.max_abs), block_max_rel = lane_max(s.max_rel);
    const uint32_t block_max_ulp = lane_max(s.max_ulp);
    if (block_max_abs > t.max_abs.value) t.max_abs = {block_max_abs, pos + first_index_of(b.abs, n, block_max_abs)};
    if (s.rel_defined > 0 && block_max_rel > t.max_rel.value)
      t.max_rel = {block_max_rel, pos + find_rel(pos, s.max_rel_from, b.abs, block_max_rel)};
    if (block_max_ulp > t.max_ulp.value) t.max_ulp = {block_max_ulp, pos + first_index_of(b.ulp, n, block_max_ulp)};

    t.vector_elements += n;
    const int edges_below_max = ulp_bucket(block_max_ulp);
    [&]<int... K>(std::integer_sequence<int, K...>) {
      ((K == edges_below_max ? count_above_edges<K, sizeof(TU) == 4, kBytes>(b.ulp, n, t.above) : void()), ...);
    }(std::make_integer_sequence<int, kUlpEdges.size() + 1>{});

    add_to_grid(pos, n, b.abs, block_max_abs);
    if (block_max_ulp > 0)
      for (int64_t k = 0; k < n && p_.first.size() < first_n_; ++k)
        if (b.ulp[k] != 0) p_.first.push_back(pos + k);
    if (comparable_errors_) comparable_errors_->insert(comparable_errors_->end(), b.abs, b.abs + n);
  }

  // The first element of the vector block at pos whose relative error, computed as the kernel does, is rel; none
  // before `from` is.
  int64_t find_rel(int64_t pos, int64_t from, const double* abs, double rel) const {
    int64_t k = from;
    for (double e; (e = static_cast<double>(exp_[pos + k])) == 0 || abs[k] / std::fabs(e) != rel;) ++k;
    return k;
  }

  // Elements the vector kernel does not take add to lane 0 in order: a comparison that is all scalar (fp64, fp16)
  // sums exactly as one sequential loop does.
  void scan_scalar(int64_t from, int64_t to) {
    constexpr double kInfinity = std::numeric_limits<double>::infinity();
    double* const cell = scratch_.block.abs;  // the heatmap value of each element
    double block_max = 0;
    // A local copy: with the totals behind `this`, the compiler must assume the stores to cell alias them and keeps
    // every one in memory.
    Totals t = t_;
    for (int64_t i = from; i < to; ++i) {
      const Element el = classify<TA, TE, TU>(act_[i], exp_[i], allow_nan_);
      t.bitwise_diff += el.differs;
      t.nan_mismatch += el.nan_mismatch;
      t.inf_mismatch += el.inf_mismatch;
      t.nan_expected += el.e_nan;
      t.both_nan += el.both_nan;
      t.comparable += el.comparable;
      const double e_abs = std::fabs(el.e);
      if (e_abs < kInfinity && e_abs > t.max_abs_expected) t.max_abs_expected = e_abs;
      double value = 0;  // a matching NaN is no error
      if (el.comparable) {
        value = el.abs_err;
        t.sum_abs[0] += el.abs_err;
        if (comparable_errors_) comparable_errors_->push_back(el.abs_err);
        t.sum_ulp += static_cast<UlpSum>(el.ulp);
        t.max_abs.offer(el.abs_err, i);
        t.max_ulp.offer(static_cast<int64_t>(el.ulp), i);
        ++t.ulp_hist[ulp_bucket(el.ulp)];
        if (err_counts_) ++err_counts_[err_slot(el.abs_err)];
        if (std::fabs(el.a) < kInfinity && e_abs < kInfinity) {
          t.sum_aa[0] += el.a * el.a;
          t.sum_ee[0] += el.e * el.e;
          t.sum_dd[0] = std::fma(el.a - el.e, el.a - el.e, t.sum_dd[0]);  // fused, as the vector kernels sum
          t.sum_ae[0] += el.a * el.e;
          if (el.e != 0) {
            const double rel = el.abs_err / e_abs;
            ++t.rel_defined;
            t.sum_rel[0] += rel;
            t.max_rel.offer(rel, i);
          }
        }
      } else if (el.nan_mismatch || el.inf_mismatch) {
        value = kInfinity;
      }
      cell[i - from] = value;
      block_max = std::max(block_max, value);
      if (p_.first.size() < first_n_ && (el.differs || el.nan_mismatch)) p_.first.push_back(i);
    }
    t_ = t;
    add_to_grid(from, to - from, cell, block_max);
  }

  // Raises the heatmap cells under elements [pos, pos + n) to their values (max the largest of them).
  void add_to_grid(int64_t pos, int64_t n, const double* value, double max) {
    // A block usually sits in the span of the block before it.
    if (pos >= span_begin_ && pos + n <= span_end_) {
      p_.grid[span_cell_] = std::max(p_.grid[span_cell_], max);
      return;
    }
    for (int64_t k = 0; k < n;) {
      if (pos + k < span_begin_ || pos + k >= span_end_) find_span(pos + k);
      const int64_t run = std::min(span_end_ - (pos + k), n - k);
      p_.grid[span_cell_] = std::max(p_.grid[span_cell_], largest_of(value + k, run));
      k += run;
    }
  }

  // The stretch of flat indices around i that lies in one heatmap cell: part of a row, or whole rows of a view with
  // one column.
  void find_span(int64_t i) {
    const int64_t row = i / g_.cols, cell_row = block_of(row, g_.rows, g_.cell_rows);
    if (g_.cols == 1) {
      span_begin_ = block_start(cell_row, g_.rows, g_.cell_rows);
      span_end_ = block_start(cell_row + 1, g_.rows, g_.cell_rows);
      span_cell_ = cell_row;
    } else {
      const int64_t cell_col = block_of(i % g_.cols, g_.cols, g_.cell_cols);
      span_begin_ = row * g_.cols + block_start(cell_col, g_.cols, g_.cell_cols);
      span_end_ = row * g_.cols + block_start(cell_col + 1, g_.cols, g_.cell_cols);
      span_cell_ = cell_row * g_.cell_cols + cell_col;
    }
  }

  // Lanes add up in a fixed order.
  static double total(const std::array<double, kLanes>& l) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }

  void finish() {
    Totals& t = t_;
    std::array<int64_t, kUlpEdges.size()> above;
    for (size_t k = 0; k < above.size(); ++k) above[k] = lane_sum((t.above[k] & 0xFFFFu) + (t.above[k] >> 16));
    t.bitwise_diff += above[0];
    t.ulp_hist[0] += t.vector_elements - above[0];
    for (size_t k = 1; k < above.size(); ++k) t.ulp_hist[k] += above[k - 1] - above[k];
    t.ulp_hist[above.size()] += above.back();
    t.sum_ulp += static_cast<UlpSum>((lane_sum(t.ulp_high) << 16) + lane_sum(t.ulp_low));
    Partial& p = p_;
    p.bitwise_diff = t.bitwise_diff, p.nan_mismatch = t.nan_mismatch, p.inf_mismatch = t.inf_mismatch;
    p.nan_expected = t.nan_expected, p.both_nan = t.both_nan;
    p.comparable = t.comparable, p.rel_defined = t.rel_defined;
    p.sum_abs = total(t.sum_abs), p.sum_rel = total(t.sum_rel), p.sum_ulp = static_cast<double>(t.sum_ulp);
    p.sum_aa = total(t.sum_aa), p.sum_ee = total(t.sum_ee), p.sum_dd = total(t.sum_dd), p.sum_ae = total(t.sum_ae);
    p.max_abs = t.max_abs.value, p.max_abs_at = t.max_abs.at;
    p.max_rel = t.max_rel.value, p.max_rel_at = t.max_rel.at;
    p.max_ulp = t.max_ulp.value, p.max_ulp_at = t.max_ulp.at;
    p.max_abs_expected = t.max_abs_expected;
    std::copy(t.ulp_hist.begin(), t.ulp_hist.end(), p.ulp_hist);
  }

  const TA* act_;
  const TE* exp_;
  const Grid& g_;
  const bool allow_nan_;
  const size_t first_n_;
  Partial& p_;
  Scratch& scratch_;
  uint32_t* const err_counts_;
  std::vector<double>* comparable_errors_;
  Totals t_;
  int64_t span_begin_ = 0, span_end_ = 0, span_cell_ = 0;  // see find_span
};

// The kernels of each ISA: one ChunkScan compiled for it. At 32 bytes the vector code is written for AVX2 registers;
// the baseline kernel runs it on SSE2 halves (x86-64) or the target's own vectors. At 64 bytes, for AVX-512, each
// instruction that is not a step of a sum takes twice the elements; that ISA has FMA, which the file's
// -ffp-contract=off keeps out of every product and sum but those fused by name, in every kernel alike
// (fused_multiply_add): a contraction GCC chose would round differently, and every kernel must give the same bits.
// flatten: what a kernel calls is compiled into it, for its ISA. One thread, bf16 against fp32 at 2^22 (Zen 4;
// BM_Compare and BM_CompareKernel): AVX-512 3.9-4.1 ms, AVX2 4.45, baseline 48: SSE2's sixteen registers hold a
// third of the six sums' 48 lanes and GCC spills the rest (x86-64 without AVX2 predates 2013). On an H100 host's
// Intel CPU AVX-512 is the fastest too, also against the 32-byte code built for x86-64-v4 (EVEX ymm, no zmm clock
// penalty to avoid): reports/cpu/2026-11-27-h100-host-compare-kernels-and-ablations.log. Zen 4 runs a zmm operation
// on two of its four 256-bit pipes, and half of them add: the sum of a e as an FMA (add_product) and the maxima as
// integer compares (max_of_nonnegative), three operations a step off the adders, took one thread 4.31 -> 3.87 ms at
// 2^22 and 65.0 -> 61.6 ms at 2^26 for bf16 against fp32, 4.29 -> 3.88 and 68.1 -> 63.4 ms for fp32 (2-core Zen 4,
// the CI machines' kind; medians of 7 alternating runs of BM_Compare, the same bits); on an H200 host's Intel CPU no
// change beyond its noise (reports/cpu/2026-11-27-*-compare-fma-intmax-ab.log). Dropped: quotients without the fp64
// division, from vrcp14pd refined twice or from fp32's correctly rounded 1 / e and one Newton step: no faster on the
// Intel hosts, 3% and 5-15% slower on Zen 4 (reports/cpu/2026-11-27-*-refined-quotient-ab.log and the fma-intmax
// logs). On the Intel hosts one thread at 2^26 waits on memory, not on its arithmetic: without the software prefetch
// 20-30% slower, without the |err| counts or the division within noise, prefetching farther ahead no better
// (reports/cpu/2026-11-27-h200-host-compare-ablations.log). Where the prefetches go (once per line, prefetch_line):
// all in the block's short first loop, none through the second, which takes most of the block's time, left Zen 4's
// fp32 pairs ~10% slower than all in the second; but there a 16-bit side's slowed the Intel hosts (bf16 against fp32,
// one thread at 2^26: 87.6 -> 94.4 ms). So a 16-bit side's go in `first` and a wider side's in `step` (one loop at
// 64 bytes since): Intel bf16 / fp32 at 2^26 87.6 / 88.1 (all in the first) -> 85.2 / 80.3 ms, faster in 10 / 8 of 10
// rounds pinned to one core (fp32 pairs ran the same code as all in the second, 84.5 ms: a spread of ~5% between two
// builds of one path); Zen 4 59.9 / 62.9 -> 60.8 / 56.7 (4 rounds; reports/cpu/2026-11-27-compare-prefetch-in-sums-
// loop-ab.log).
template <typename TA, typename TE, typename TU, typename... Args>
[[gnu::flatten]] void scan_chunk_baseline(const TA* act, const TE* exp, int64_t begin, int64_t end, Args&... args) {
  ChunkScan<TA, TE, TU, CpuKernel::baseline>(act, exp, args...).scan(begin, end);
}
#if defined(__x86_64__)
template <typename TA, typename TE, typename TU, typename... Args>
[[gnu::target("avx2,fma"), gnu::flatten]] void scan_chunk_avx2(const TA* act, const TE* exp, int64_t begin,
                                                               int64_t end, Args&... args) {
  ChunkScan<TA, TE, TU, CpuKernel::avx2>(act, exp, args...).scan(begin, end);
}
template <typename TA, typename TE, typename TU, typename... Args>
[[gnu::target("arch=x86-64-v4"), gnu::flatten]] void scan_chunk_avx512(const TA* act, const TE* exp, int64_t begin,
                                                                       int64_t end, Args&... args) {
  ChunkScan<TA, TE, TU, CpuKernel::avx512>(act, exp, args...).scan(begin, end);
}
#endif

// -1: the widest; else the CpuKernel forced.
std::atomic<int> forced_cpu_kernel{-1};

CpuKernel current_cpu_kernel() {
  static const CpuKernel widest = cpu_kernels().front();
  const int forced = forced_cpu_kernel.load();
  return forced < 0 ? widest : static_cast<CpuKernel>(forced);
}

template <typename TA, typename TE, typename TU, typename... Args>
void scan_chunk(CpuKernel kernel, Args&&... args) {
  switch (kernel) {
#if defined(__x86_64__)
    case CpuKernel::avx512:
      return scan_chunk_avx512<TA, TE, TU>(args...);
    case CpuKernel::avx2:
      return scan_chunk_avx2<TA, TE, TU>(args...);
#endif
    default:
      return scan_chunk_baseline<TA, TE, TU>(args...);
  }
}

std::vector<int64_t> unravel(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return index;
}

constexpr std::array<double, 4> kRanks = {0.50, 0.90, 0.99, 0.999};

// 1-based nearest rank of quantile q among n values.
int64_t nearest_rank(double q, int64_t n) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q * static_cast<double>(n))), 1, n);
}

// Exact nearest-rank percentiles, for tensors small enough that sorting their errors costs nothing.
std::array<double, 4> exact_percentiles(std::vector<double> errors) {
  std::array<double, 4> out{};
  if (errors.empty()) return out;
  std::sort(errors.begin(), errors.end());
  for (size_t i = 0; i < kRanks.size(); ++i)
    out[i] = errors[nearest_rank(kRanks[i], static_cast<int64_t>(errors.size())) - 1];
  return out;
}

// Nearest-rank percentiles read off the |err| histogram, interpolated linearly inside the bucket holding the rank:
// approximate to one bucket width (a factor of 2^(1/4)), never above the true maximum. Bucket 0 (zero and errors
// below 2^-1022) reads as 0.
std::array<double, 4> histogram_percentiles(const std::vector<uint64_t>& hist, int64_t n, double max_abs) {
  std::array<double, 4> out{};
  if (n == 0) return out;
  for (size_t i = 0; i < kRanks.size(); ++i) {
    const int64_t rank = nearest_rank(kRanks[i], n);
    int64_t below = 0;
    size_t b = 0;
    while (below + static_cast<int64_t>(hist[b]) < rank) below += static_cast<int64_t>(hist[b++]);
    if (b == 0) continue;
    const double lower = std::bit_cast<double>(uint64_t{b} << kErrShift);
    const double upper = std::bit_cast<double>(uint64_t{b + 1} << kErrShift);
    const double within = (static_cast<double>(rank - below) - 0.5) / static_cast<double>(hist[b]);
    out[i] = std::isinf(lower) ? lower : std::min(lower + within * (upper - lower), max_abs);
  }
  return out;
}

// The Mismatch record of one element from its stored values (only first_n of them are asked for): ulp_distance() rounds
// both to ulp_type, as the scan does.
Mismatch mismatch_at(int64_t flat, double a, double e, at::IntArrayRef sizes, at::ScalarType ulp_type) {
  return {.index = unravel(flat, sizes),
          .actual = a,
          .expected = e,
          .abs_diff = cmp::abs_error(a, e),
          .ulp = ulp_distance(a, e, ulp_type)};
}

// Calls f with a value of the C++ type that stores dtype t (float_format has rejected every other dtype).
template <typename F>
void with_storage_type(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kDouble:
      return f(double{});
    case at::kFloat:
      return f(float{});
    case at::kHalf:
      return f(c10::Half{});
    default:
      return f(c10::BFloat16{});
  }
}

void require_same_shape(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.sizes() != expected.sizes()) {
    throw InputError(fmt::format("shape mismatch: got {} want {}", describe(actual), describe(expected)));
  }
}

// A whole tensor scanned, on the CPU or the GPU: the totals merged in index order, and what is not a total.
struct Scan {
  cmp::ScanTotals t;
  std::array<double, 4> abs_pct{};
  std::vector<double> grid;  // the heatmap's cells, row-major
  std::vector<Mismatch> first;
  std::string kernel;  // Metrics::kernel
};

Scan scan_on_cpu(const at::Tensor& actual, const at::Tensor& expected, const Grid& g, const CompareOptions& opts,
                 at::ScalarType ulp_type) {
  const at::Tensor a = actual.cpu().contiguous(), e = expected.cpu().contiguous();
  const int64_t numel = a.numel();
  const int64_t chunks = (numel + kChunk - 1) / kChunk;
  std::vector<Partial> parts(chunks);
  const bool sort_errors = numel <= kExactPercentileLimit;
  std::vector<double> small_errors;  // every comparable |err|, for exact percentiles of a small tensor
  std::vector<uint64_t> err_hist(kErrBuckets);  // for the percentiles of a larger one
  std::mutex err_hist_mutex;
  const CpuKernel kernel = current_cpu_kernel();  // one for every chunk, whatever a test forces meanwhile
  Scan s;
  s.kernel = "cpu:" + cpu_kernel_name(kernel);
  with_storage_type(a.scalar_type(), [&]<typename TA>(TA) {
    with_storage_type(e.scalar_type(), [&]<typename TE>(TE) {
      using TU = std::conditional_t<(sizeof(TE) < sizeof(TA)), TE, TA>;  // narrower(): a tie goes to actual
      const auto* act = static_cast<const TA*>(a.const_data_ptr());
      const auto* exp = static_cast<const TE*>(e.const_data_ptr());
      at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
        Scratch& scratch = Scratch::of_this_thread();
        uint32_t* const err_counts = sort_errors ? nullptr : scratch.start_counting();
        double max_err = -1;
        for (int64_t c = lo; c < hi; ++c) {
          scan_chunk<TA, TE, TU>(kernel, act, exp, c * kChunk, std::min(numel, (c + 1) * kChunk), g, opts, parts[c],
                                 scratch, err_counts, sort_errors ? &small_errors : nullptr);
          max_err = std::max(max_err, parts[c].max_abs);
          // Before a slot could count past 32 bits.
          if (err_counts && ((c + 1 - lo) % kChunksPerFold == 0 || c + 1 == hi)) {
            const std::lock_guard lock(err_hist_mutex);
            scratch.fold_counts(max_err, err_hist);
            if (c + 1 < hi) scratch.start_counting();
          }
        }
      });
      for (const Partial& p : parts)
        for (const int64_t i : p.first)
          if (static_cast<int>(s.first.size()) < opts.first_n)
            s.first.push_back(mismatch_at(i, static_cast<double>(act[i]), static_cast<double>(exp[i]), a.sizes(),
                                          ulp_type));
    });
  });

  // Merged in chunk order: the floating sums, and which of equal maxima is reported (the first), are fixed.
  s.grid.assign(g.cell_rows * g.cell_cols, 0.0);
  for (const Partial& p : parts) {
    cmp::merge_in_order(s.t, p);
    for (size_t c = 0; c < s.grid.size(); ++c) s.grid[c] = std::max(s.grid[c], p.grid[c]);
  }
  s.abs_pct = sort_errors ? exact_percentiles(std::move(small_errors))
                          : histogram_percentiles(err_hist, s.t.comparable, std::max(s.t.max_abs, 0.0));
  return s;
}

#if PARITY_WITH_CUDA
namespace cc = compare_cuda;

cc::Dtype cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return cc::Dtype::fp64;
    case at::kFloat:
      return cc::Dtype::fp32;
    case at::kHalf:
      return cc::Dtype::fp16;
    default:
      return cc::Dtype::bf16;  // float_format has rejected every other dtype
  }
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(
        fmt::format("compare: CUDA kernel {} failed: {} ({})", kernel, cudaGetErrorName(e), cudaGetErrorString(e)));
}

// `count` objects of type T from the bytes of a CPU uint8 tensor, starting at byte `offset`.
template <typename T>
std::vector<T> objects_at(const at::Tensor& bytes, int64_t offset, int64_t count) {
  std::vector<T> out(count);
  std::memcpy(out.data(), bytes.const_data_ptr<uint8_t>() + offset, count * sizeof(T));
  return out;
}

// The object of type T at byte `offset` of a device workspace.
template <typename T>
T* placed(uint8_t* base, int64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

// The fused comparator (harness/cuda/compare.cu): one pass over both tensors where actual lives, the blocks' totals
// merged on the device in block order (the same merge as the CPU's chunks, so the same maxima and counts; the floating
// sums are added in another order but in the same one on every run), then the first mismatches from the few blocks
// that hold them. One copy to the host at the end, of what is reported; the only wait is for it.
Scan scan_on_gpu(const at::Tensor& actual, const at::Tensor& expected, const Grid& g, const CompareOptions& opts,
                 at::ScalarType ulp_type) {
  const c10::cuda::CUDAGuard guard(actual.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor a = actual.contiguous(), e = expected.to(actual.device()).contiguous();
  const int64_t numel = a.numel(), cells = g.cell_rows * g.cell_cols, first_n = std::max(opts.first_n, 0);
  const cc::ScanLayout layout = cc::scan_layout(numel);

  // One zeroed workspace. What stays on the device: the blocks' totals and their first-mismatch ranges. What is copied
  // back, from `reported` on: the merged totals, the |err| histogram, the heatmap's cells (as the bits of their
  // doubles), the listed elements.
  const int64_t ranges_at = layout.blocks * int64_t{sizeof(cc::BlockTotals)};
  const int64_t reported = ranges_at + layout.blocks * int64_t{sizeof(cc::FirstRange)};
  const int64_t hist_at = reported + int64_t{sizeof(cc::BlockTotals)};
  const int64_t cells_at = hist_at + kErrBuckets * int64_t{sizeof(uint64_t)};
  const int64_t listed_at = cells_at + cells * int64_t{sizeof(uint64_t)};
  const int64_t bytes = listed_at + first_n * int64_t{sizeof(cc::Listed)};
  const at::Tensor work = at::zeros({bytes}, a.options().dtype(at::kByte));
  uint8_t* const base = work.mutable_data_ptr<uint8_t>();
  auto* const blocks = placed<cc::BlockTotals>(base, 0);
  auto* const ranges = placed<cc::FirstRange>(base, ranges_at);
  const cc::Dtype actual_type = cuda_dtype(a.scalar_type()), expected_type = cuda_dtype(e.scalar_type());
  cc::launch_compare_scan(actual_type, expected_type, a.const_data_ptr(), e.const_data_ptr(), numel, g,
                          opts.allow_nan, layout, blocks, placed<unsigned long long>(base, hist_at),
                          placed<unsigned long long>(base, cells_at), stream);
  check_launch("compare_scan");
  cc::launch_compare_merge(blocks, layout, numel, static_cast<int>(first_n),
                           placed<cc::BlockTotals>(base, reported), ranges, stream);
  check_launch("compare_merge");
  if (first_n > 0) {
    cc::launch_compare_first(actual_type, expected_type, a.const_data_ptr(), e.const_data_ptr(), opts.allow_nan, ranges,
                             layout.blocks, placed<cc::Listed>(base, listed_at), stream);
    check_launch("compare_first");
  }
  const at::Tensor host = work.narrow(0, reported, bytes - reported).cpu();

  Scan s;
  s.kernel = "cuda";
  const auto total = objects_at<cc::BlockTotals>(host, 0, 1).front();
  s.t = total.t;
  s.abs_pct = histogram_percentiles(objects_at<uint64_t>(host, hist_at - reported, kErrBuckets), s.t.comparable,
                                    std::max(s.t.max_abs, 0.0));
  for (const uint64_t bits : objects_at<uint64_t>(host, cells_at - reported, cells))
    s.grid.push_back(std::bit_cast<double>(bits));
  for (const cc::Listed& l : objects_at<cc::Listed>(host, listed_at - reported, std::min(total.listed, first_n)))
    s.first.push_back(mismatch_at(l.flat, l.actual, l.expected, a.sizes(), ulp_type));
  return s;
}
#endif

}  // namespace

std::string cpu_kernel_name(CpuKernel kernel) {
  switch (kernel) {
    case CpuKernel::avx512:
      return "avx512";
    case CpuKernel::avx2:
      return "avx2";
    case CpuKernel::baseline:
      return "baseline";
  }
  return "unknown";
}

std::vector<CpuKernel> cpu_kernels() {
  std::vector<CpuKernel> kernels;
#if defined(__x86_64__)
  __builtin_cpu_init();  // callers may be static initialisers, which can run before libgcc's own
  if (__builtin_cpu_supports("x86-64-v4")) kernels.push_back(CpuKernel::avx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) kernels.push_back(CpuKernel::avx2);
#endif
  kernels.push_back(CpuKernel::baseline);
  return kernels;
}

void force_cpu_kernel(std::optional<CpuKernel> kernel) {
  if (kernel) {
    const std::vector<CpuKernel> runs = cpu_kernels();
    if (std::find(runs.begin(), runs.end(), *kernel) == runs.end())
      throw std::invalid_argument("force_cpu_kernel: this CPU does not run the " + cpu_kernel_name(*kernel) +
                                  " kernel");
  }
  forced_cpu_kernel = kernel ? static_cast<int>(*kernel) : -1;
}

std::string ulp_bucket_label(int bucket) {
  static const char* const kLabels[kUlpBuckets] = {"0",     "1",     "2",      "3-4",      "5-8",   "9-16",
                                                   "17-32", "33-64", "65-256", "257-1024", ">1024", "NaN/Inf"};
  if (bucket < 0 || bucket >= kUlpBuckets) throw std::out_of_range(fmt::format("no ULP bucket {}", bucket));
  return kLabels[bucket];
}

Metrics compare(const at::Tensor& actual, const at::Tensor& expected, const CompareOptions& opts) {
  require_same_shape(actual, expected);
  const at::ScalarType ulp_type = narrower(actual.scalar_type(), expected.scalar_type());

  Metrics m;
  m.dtype = dtype_name(ulp_type);
  m.numel = actual.numel();
  if (m.numel == 0) return m;
  ErrorGrid& grid = m.error_grid;
  grid.tensor_cols = actual.dim() == 0 ? 1 : actual.size(-1);
  grid.tensor_rows = m.numel / grid.tensor_cols;
  grid.rows = std::min(grid.tensor_rows, kErrorGridSide);
  grid.cols = std::min(grid.tensor_cols, kErrorGridSide);
  const Grid g{grid.tensor_rows, grid.tensor_cols, grid.rows, grid.cols};

#if PARITY_WITH_CUDA
  // Small tensors are compared on the CPU wherever they live: their percentiles come from a sort of every error, which
  // the GPU path does not do, and copying them costs nothing.
  const bool on_gpu = actual.is_cuda() && m.numel > kExactPercentileLimit;
  Scan s = on_gpu ? scan_on_gpu(actual, expected, g, opts, ulp_type) : scan_on_cpu(actual, expected, g, opts, ulp_type);
#else
  Scan s = scan_on_cpu(actual, expected, g, opts, ulp_type);
#endif
  const cmp::ScanTotals& t = s.t;
  grid.cells = std::move(s.grid);
  m.first = std::move(s.first);
  m.kernel = std::move(s.kernel);
  m.abs_pct = s.abs_pct;
  m.bitwise_diff = t.bitwise_diff;
  m.nan_mismatch = t.nan_mismatch;
  m.inf_mismatch = t.inf_mismatch;
  m.nan_expected = t.nan_expected;
  m.max_abs_expected_value = t.max_abs_expected;
  // No comparable elements: nothing was off.
  const auto mean = [](double sum, int64_t count) { return count == 0 ? 0.0 : sum / static_cast<double>(count); };
  m.max_abs = std::max(t.max_abs, 0.0);
  m.mean_abs = mean(t.sum_abs, t.comparable);
  m.max_rel = std::max(t.max_rel, 0.0);
  m.mean_rel = mean(t.sum_rel, t.rel_defined);
  m.max_ulp = std::max<int64_t>(t.max_ulp, 0);
  m.mean_ulp = mean(t.sum_ulp, t.comparable);
  std::copy(std::begin(t.ulp_hist), std::end(t.ulp_hist), m.ulp_hist.begin());
  // Matching NaNs are matches: counting them in bucket 0 keeps the histogram summing to numel.
  if (opts.allow_nan) m.ulp_hist[0] += t.both_nan;
  m.ulp_hist[kUlpBuckets - 1] = m.nan_mismatch + m.inf_mismatch;
  const auto worst = [&](int64_t flat) { return flat < 0 ? std::vector<int64_t>{} : unravel(flat, actual.sizes()); };
  m.worst_abs_index = worst(t.max_abs_at);
  m.worst_rel_index = worst(t.max_rel_at);
  m.worst_ulp_index = worst(t.max_ulp_at);

  // Whole-tensor agreement over the elements where both sides are finite.
  const double norm_a = std::sqrt(t.sum_aa), norm_e = std::sqrt(t.sum_ee), norm_diff = std::sqrt(t.sum_dd);
  m.rel_l2 = norm_e > 0 ? norm_diff / norm_e : (norm_diff > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  // Two zero vectors point the same way as far as a parity check cares; one zero vector does not.
  // Clamped: the rounding of the three sums can put identical tensors a bit past 1.
  m.cosine = norm_a > 0 && norm_e > 0 ? std::clamp(t.sum_ae / (norm_a * norm_e), -1.0, 1.0)
                                      : (norm_a == norm_e ? 1.0 : 0.0);
  return m;
}

int64_t ordered_bits(double value, at::ScalarType t) {
  const FloatFormat& f = float_format(t);
  const uint64_t bits = f.bits_of(value);
  const auto magnitude = static_cast<int64_t>(bits & static_cast<uint64_t>(magnitude_mask(f)));
  return (bits >> (f.width - 1)) & 1 ? -magnitude : magnitude;
}

int64_t ulp_distance(double a, double b, at::ScalarType t) {
  if (std::isnan(a) || std::isnan(b)) return -1;
  const __int128 distance = static_cast<__int128>(ordered_bits(a, t)) - ordered_bits(b, t);
  return static_cast<int64_t>(std::min<__int128>(distance < 0 ? -distance : distance, kMaxUlp));
}

double ulp_at(double x, at::ScalarType t) {
  const FloatFormat& f = float_format(t);
  const double magnitude = std::fabs(x);
  if (std::isnan(magnitude) || std::isinf(magnitude)) return magnitude;
  // Below the normal range the spacing is that of the subnormals; past the top binade (a value that would
  // round to Inf) it stays that of the top binade, so a bound built from it stays finite.
  const int exponent = magnitude == 0 ? f.emin : std::clamp(std::ilogb(magnitude), f.emin, f.emax);
  return std::ldexp(1.0, exponent - (f.digits - 1));
}

}  // namespace parity
