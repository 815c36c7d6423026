// policyc prelude, the run-time library of generated models: scalar semantics of the op table (as
// ir/src/reference_kernels.cpp), the vector types of the GEMM microkernels, the thread pool and
// the profiler's bookkeeping. Pasted at the top of every generated output_code.cpp; the LLVM
// backend's support library (codegen/src/llvm/support.cpp) compiles the same file.
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#if defined(__AVX512BF16__)
#include <immintrin.h>  // vdpbf16ps (only where --precision bf16 can use it: compile time)
#endif

#if defined(__GNUC__) && !defined(__clang__)
// 16-lane vectors pass by value between the inline functions below on targets without AVX-512
// too; GCC notes that such a call's ABI differs, but none of them is ever a real call.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define PC_INLINE static inline __attribute__((always_inline))
#define PC_RESTRICT __restrict__
// Kernels stay separate functions: profiles show them by name.
#define PC_KERNEL static __attribute__((noinline))

namespace pc {

// libm's functions as <cmath> declares them (float and double overloads, integers as double), but
// through the compiler's builtins: <cmath> alone took 0.25 of the 0.65 s a one-op model took to
// build. exp, log, erf, expm1 and tanh are below: their float forms are the LLVM backend's.
#define PC_LIBM1(fn) \
  PC_INLINE float fn(float x) { return __builtin_##fn##f(x); } \
  PC_INLINE double fn(double x) { return __builtin_##fn(x); } \
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0> \
  PC_INLINE double fn(I x) { \
    return __builtin_##fn(static_cast<double>(x)); \
  }
#define PC_LIBM2(fn) \
  PC_INLINE float fn(float a, float b) { return __builtin_##fn##f(a, b); } \
  PC_INLINE double fn(double a, double b) { return __builtin_##fn(a, b); }
PC_LIBM1(sqrt) PC_LIBM1(fabs) PC_LIBM1(floor) PC_LIBM1(ceil) PC_LIBM1(trunc) PC_LIBM1(nearbyint)
PC_LIBM1(sin) PC_LIBM1(cos) PC_LIBM1(tan) PC_LIBM1(asin) PC_LIBM1(acos) PC_LIBM1(atan)
PC_LIBM1(sinh) PC_LIBM1(cosh) PC_LIBM1(asinh) PC_LIBM1(acosh) PC_LIBM1(atanh) PC_LIBM1(log1p)
PC_LIBM2(pow) PC_LIBM2(fmod) PC_LIBM2(copysign)
#undef PC_LIBM1
#undef PC_LIBM2

// The profiler's clock (a vDSO call, about 20 ns).
PC_INLINE uint64_t nowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

// One trace event while the trace has room; `thread` 0 is the thread that called run, i > 0 the
// pool's i-th worker (policyc_trace_event::thread).
PC_INLINE void traceEvent(policyc_trace_event* trace, int64_t capacity, int64_t* count, int32_t kernel, int32_t thread,
                          int64_t batch, uint64_t t0, uint64_t dt) {
  if (__atomic_load_n(count, __ATOMIC_RELAXED) >= capacity) return;
  const int64_t e = __atomic_fetch_add(count, 1, __ATOMIC_RELAXED);
  if (e < capacity) trace[e] = {kernel, thread, batch, t0, dt};
  else __atomic_store_n(count, capacity, __ATOMIC_RELAXED);
}

// A profiled model's bookkeeping after kernel `kernel` ran from t0 (policyc_profile in
// policyc_model.h): its totals, and a trace event while the trace has room. Both backends call it;
// `calls` null for a run's later row blocks (its time counts, its call was counted once).
PC_INLINE void profileRecord(uint64_t* ns, uint64_t* calls, policyc_trace_event* trace, int64_t capacity, int64_t* count,
                             int32_t kernel, int64_t batch, uint64_t t0) {
  const uint64_t dt = nowNs() - t0;
  __atomic_fetch_add(&ns[kernel], dt, __ATOMIC_RELAXED);
  if (calls) __atomic_fetch_add(&calls[kernel], 1, __ATOMIC_RELAXED);
  traceEvent(trace, capacity, count, kernel, 0, batch, t0, dt);
}

// A profiled run's trace as the pool sees it: every chunk of a kernel split between threads is
// an event on the track of the thread that ran it (the kernel's own event, on the calling
// thread, spans them). The LLVM backend builds the same struct: keep the two in step.
struct ChunkTrace {
  policyc_trace_event* trace;
  int64_t capacity;
  int64_t* count;
  int32_t kernel;
  int64_t batch;
};

// 8 floats: one AVX register where the target has AVX, two SSE registers otherwise.
// Naturally aligned types (GCC keeps under-aligned vector variables in memory); loads and stores
// of any alignment go through memcpy.
typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x4 __attribute__((vector_size(16)));

PC_INLINE f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
PC_INLINE void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }
PC_INLINE f32x8 splat8(float x) { return f32x8{x, x, x, x, x, x, x, x}; }
typedef int32_t i32x8 __attribute__((vector_size(32)));

typedef float f32x16 __attribute__((vector_size(64)));
// Without 512-bit vectors GCC 12 keeps 16 lanes in two registers but moves them to and from
// memory one lane at a time through the stack (a memcpy of the whole vector): there they go as
// two halves.
PC_INLINE f32x8 lo8(f32x16 x) { return __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7); }
PC_INLINE f32x8 hi8(f32x16 x) { return __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15); }
PC_INLINE f32x16 join16(f32x8 lo, f32x8 hi) {
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
PC_INLINE f32x16 load16(const float* p) {
#if defined(__AVX512F__)
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
#else
  return join16(load8(p), load8(p + 8));
#endif
}
PC_INLINE void store16(float* p, f32x16 v) {
#if defined(__AVX512F__)
  std::memcpy(p, &v, sizeof v);
#else
  store8(p, lo8(v));
  store8(p + 8, hi8(v));
#endif
}
PC_INLINE f32x16 splat16(float x) { return f32x16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

// A stride-2 average pool's taps (KernelSchedule::vectorEpilogue on Form::Pool): evenLanes(p) is
// p[0], p[2], ..., p[14] in the order 0 2 8 10 4 6 12 14 (one in-lane shuffle of two loads; the
// values' natural order would cost a lane-crossing permute per tap), evenOrder puts a vector
// of that order back into the natural one, once for the sum of all taps (adds lane by lane do
// not care where a lane sits). The masks are codegen's kEvenLanes and kEvenOrder (schedule.h).
PC_INLINE f32x8 evenLanes(const float* p) {
  return __builtin_shufflevector(load8(p), load8(p + 8), 0, 2, 8, 10, 4, 6, 12, 14);
}
PC_INLINE f32x8 evenOrder(f32x8 v) { return __builtin_shufflevector(v, v, 0, 1, 4, 5, 2, 3, 6, 7); }

// Lanes [A, B) of the 8 floats at p, the others `fill`, the floats outside never read (nor
// faulting): a partial chunk of a row (the conv and pool rows). A and B are constants.
template <int A, int B> PC_INLINE f32x8 loadLanes8(const float* p, float fill) {
  static_assert(0 <= A && A < B && B <= 8, "lanes of one chunk");
  if constexpr (A == 0 && B == 8) {
    return load8(p);
  } else {
    const i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    const i32x8 on = (lane >= A) & (lane < B);
#if defined(__AVX__)
    const f32x8 x = __builtin_ia32_maskloadps256(reinterpret_cast<const f32x8*>(p), on);  // _mm256_maskload_ps
#else
    f32x8 x = {};
    for (int l = A; l < B; ++l) x[l] = p[l];
#endif
    return on ? x : splat8(fill);
  }
}
// The max pools' last, partial chunk: its columns past the row read as `fill`.
template <int N> PC_INLINE f32x8 loadFirst8(const float* p, float fill) { return loadLanes8<0, N>(p, fill); }
// The first N of v's lanes stored at p, nothing past them written: an implicit GEMM tile's
// R <= 8 positions of one channel (KernelSchedule::tileEpilogue). Plain stores of 4, 2 and 1
// lanes (a masked store is microcoded on some x86 cores).
template <int N> PC_INLINE void storeFirst8(float* p, f32x8 v) {
  static_assert(0 < N && N <= 8, "lanes of one vector");
  typedef float f32x2 __attribute__((vector_size(8)));
  if constexpr (N == 8) {
    store8(p, v);
  } else {
    int at = 0;
    if constexpr (N >= 4) {
      const f32x4 lo = __builtin_shufflevector(v, v, 0, 1, 2, 3);
      std::memcpy(p, &lo, sizeof lo);
      at = 4;
    }
    if constexpr (N % 4 >= 2) {
      const f32x2 two = N >= 4 ? __builtin_shufflevector(v, v, 4, 5) : __builtin_shufflevector(v, v, 0, 1);
      std::memcpy(p + at, &two, sizeof two);
      at += 2;
    }
    if constexpr (N % 2) p[at] = v[at];
  }
}
// Lanes where a or b is NaN: one unordered compare (f32x8 on AVX), else two.
template <class V> PC_INLINE auto eitherNaN(V a, V b) {
#if defined(__AVX__) && !defined(__clang__)
  if constexpr (sizeof(V) == sizeof(f32x8)) return reinterpret_cast<i32x8>(__builtin_ia32_cmpps256(a, b, 3));  // _CMP_UNORD_Q
  else return (a != a) | (b != b);
#else
  return (a != a) | (b != b);
#endif
}
// Whether any lane of a mask (each lane all ones or all zeros) is set.
PC_INLINE bool anyLane(i32x8 m) {
#if defined(__AVX__) && !defined(__clang__)
  return __builtin_ia32_movmskps256(reinterpret_cast<f32x8>(m)) != 0;
#else
  int32_t any = 0;
  for (int l = 0; l < 8; ++l) any |= m[l];
  return any != 0;
#endif
}
// Eight rows of eight as eight columns, in registers: x[c] lane t becomes the old x[t] lane c.
// Three rounds of shuffles (unpack pairs of rows, then pairs of pairs, then halves), which x86
// has as single instructions.
PC_INLINE void transpose8(f32x8 (&x)[8]) {
  f32x8 a[8], b[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    a[i] = __builtin_shufflevector(x[i], x[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    a[i + 1] = __builtin_shufflevector(x[i], x[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    b[i] = __builtin_shufflevector(a[i], a[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    b[i + 1] = __builtin_shufflevector(a[i], a[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    b[i + 2] = __builtin_shufflevector(a[i + 1], a[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    b[i + 3] = __builtin_shufflevector(a[i + 1], a[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    x[c] = __builtin_shufflevector(b[c], b[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    x[c + 4] = __builtin_shufflevector(b[c], b[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}
#if defined(__AVX512F__)
// Eight rows of sixteen as sixteen columns of eight: column c's lanes (x[t][c], t = 0..7) go to
// tr[c]. Three rounds of eight two-source shuffles (unpack pairs of rows, then pairs of pairs as
// 64-bit elements, then the two row groups' 128-bit lanes side by side), where two 8 x 8 blocks
// take 48 and the extracts of their halves: the LLVM printer's Emitter::transpose8x16.
PC_INLINE void transpose8x16(const f32x16 (&x)[8], float (*PC_RESTRICT tr)[8]) {
  f32x16 a[8], b[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    a[i] = __builtin_shufflevector(x[i], x[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
    a[i + 1] = __builtin_shufflevector(x[i], x[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  }
  // b[4g + j], 128-bit lane L: rows 4g..4g+3 of column 4L + j.
#pragma GCC unroll 2
  for (int g = 0; g < 8; g += 4) {
    b[g] = __builtin_shufflevector(a[g], a[g + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    b[g + 1] = __builtin_shufflevector(a[g], a[g + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    b[g + 2] = __builtin_shufflevector(a[g + 1], a[g + 3], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    b[g + 3] = __builtin_shufflevector(a[g + 1], a[g + 3], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // columns j and 4 + j, 8 + j and 12 + j
    const f32x16 lo = __builtin_shufflevector(b[j], b[j + 4], 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const f32x16 hi = __builtin_shufflevector(b[j], b[j + 4], 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    store8(tr[j], lo8(lo));
    store8(tr[4 + j], hi8(lo));
    store8(tr[8 + j], lo8(hi));
    store8(tr[12 + j], hi8(hi));
  }
}
#endif
// An implicit GEMM tile out[R][W] (R <= 8 positions by W = 16 or 32 channels) as tr[W][8]: lane t
// of channel n's row is out[t][n], lanes R..7 zero, by 8 x 16 blocks with AVX-512
// (transpose8x16), else 8 x 8 ones (transpose8).
template <int R, int W> PC_INLINE void transposeTile(const float (*PC_RESTRICT out)[W], float (*PC_RESTRICT tr)[8]) {
  static_assert(0 < R && R <= 8 && W % 8 == 0, "a tile of at most 8 rows");
#if defined(__AVX512F__)
  if constexpr (W % 16 == 0) {
#pragma GCC unroll 2
    for (int h = 0; h < W / 16; ++h) {
      f32x16 x[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) x[t] = t < R ? load16(out[t] + 16 * h) : f32x16{};
      transpose8x16(x, tr + 16 * h);
    }
    return;
  }
#endif
#pragma GCC unroll 4
  for (int h = 0; h < W / 8; ++h) {
    f32x8 x[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) x[t] = t < R ? load8(out[t] + 8 * h) : f32x8{};
    transpose8(x);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) store8(tr[8 * h + c], x[c]);
  }
}

// The direct convs' rows (emitConv): an output row as registers, chunks of 16 columns, every tap
// added with a masked load and a masked FMA on the lanes it reaches (a row in memory written by
// shifted loops of 20 or 21 columns stalls on store forwarding). A chunk is one AVX-512 register,
// two AVX ones (GCC lowers a 16-lane select on AVX2 lane by lane), or, without masked loads
// (SSE), 16 floats in memory and a loop per tap as before.
// fmaLanes<A, B>(acc, xa, w): acc + x * w on lanes [A, B), the other lanes unchanged and their x
// never read (nor faulting); xa points at lane A's value. A and B are constants: the masks fold.
// fmaLanesZ, for a finite w (RowTaps::finiteWeights; the C++ printer uses it for the average
// pools' w = 1): the same sums, the other lanes' x read as copysign(0, -w), whose product with w
// is -0 (acc + -0 is acc, -0 included), so that no select follows the FMA on the accumulator's
// chain (AVX2: uint8_convbn's 3x3 average pool 456 -> 398 us at batch 64). A conv's weight is
// loaded at run time, and its sign per tap cost more than the select (a depthwise conv 1.15x slower).
#if defined(__AVX__) && !defined(__AVX512F__)
template <int A, int B> PC_INLINE f32x8 fmaLanes8(f32x8 acc, const float* xa, f32x8 w) {
  static_assert(0 <= A && A < B && B <= 8, "lanes of one half");
  if constexpr (A == 0 && B == 8) {
    return acc + load8(xa) * w;
  } else {
    const i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return (lane >= A) & (lane < B) ? acc + loadLanes8<A, B>(xa - A, 0.0f) * w : acc;
  }
}
#endif
#if defined(__AVX512F__)
typedef f32x16 RowChunk;
template <int A, int B> PC_INLINE RowChunk fmaLanes(RowChunk acc, const float* xa, float w) {
  static_assert(0 <= A && A < B && B <= 16, "lanes of one chunk");
  if constexpr (A == 0 && B == 16) {
    return acc + load16(xa) * splat16(w);
  } else {
    // _mm512_maskz_loadu_ps and _mm512_mask3_fmadd_ps without <immintrin.h> (0.4 s a model).
    const unsigned short m = static_cast<unsigned short>(((1u << (B - A)) - 1u) << A);
    const f32x16 x = __builtin_ia32_loadups512_mask(xa - A, f32x16{}, m);
    return __builtin_ia32_vfmaddps512_mask3(x, splat16(w), acc, m, 4 /* _MM_FROUND_CUR_DIRECTION */);
  }
}
PC_INLINE void storeChunk(float* p, RowChunk r) { store16(p, r); }
template <int A, int B> PC_INLINE RowChunk fmaLanesZ(RowChunk acc, const float* xa, float w) { return fmaLanes<A, B>(acc, xa, w); }
template <int A, int B> PC_INLINE RowChunk loadChunk(const float* xa) {
  static_assert(0 <= A && A < B && B <= 16, "lanes of one chunk");
  if constexpr (A == 0 && B == 16) {
    return load16(xa);
  } else {
    const unsigned short m = static_cast<unsigned short>(((1u << (B - A)) - 1u) << A);
    return __builtin_ia32_loadups512_mask(xa - A, f32x16{}, m);
  }
}
PC_INLINE RowChunk fmaChunk(RowChunk acc, RowChunk x, float w) { return acc + x * splat16(w); }
template <int A, int B> PC_INLINE RowChunk loadRows2(const float* x0, const float* x1, bool in0, bool in1) {
  static_assert(0 <= A && A < B && B <= 8, "lanes of one half");
  const unsigned short m = static_cast<unsigned short>(((1u << (B - A)) - 1u) << A);
  RowChunk r = in0 ? __builtin_ia32_loadups512_mask(x0 - A, f32x16{}, m) : f32x16{};
  return in1 ? __builtin_ia32_loadups512_mask(x1 - A - 8, r, static_cast<unsigned short>(m << 8)) : r;
}
#elif defined(__AVX__)
struct RowChunk {
  f32x8 lo, hi;
};
template <int A, int B> PC_INLINE RowChunk fmaLanes(RowChunk acc, const float* xa, float w) {
  static_assert(0 <= A && A < B && B <= 16, "lanes of one chunk");
  if constexpr (A < 8) acc.lo = fmaLanes8<A, (B < 8 ? B : 8)>(acc.lo, xa, splat8(w));
  if constexpr (B > 8) acc.hi = fmaLanes8<(A > 8 ? A : 8) - 8, B - 8>(acc.hi, xa + ((A > 8 ? A : 8) - A), splat8(w));
  return acc;
}
PC_INLINE void storeChunk(float* p, RowChunk r) { store8(p, r.lo), store8(p + 8, r.hi); }
// A chunk of sums over a window's size (an average pool counting its padding), lane by lane as
// the 16-lane chunk divides.
PC_INLINE RowChunk operator/(RowChunk r, float d) { return {r.lo / splat8(d), r.hi / splat8(d)}; }
template <int A, int B> PC_INLINE f32x8 fmaLanesZ8(f32x8 acc, const float* xa, float w) {
  if constexpr (A == 0 && B == 8) return acc + load8(xa) * splat8(w);
  else return acc + loadLanes8<A, B>(xa - A, pc::copysign(0.0f, -w)) * splat8(w);
}
template <int A, int B> PC_INLINE RowChunk fmaLanesZ(RowChunk acc, const float* xa, float w) {
  static_assert(0 <= A && A < B && B <= 16, "lanes of one chunk");
  if constexpr (A < 8) acc.lo = fmaLanesZ8<A, (B < 8 ? B : 8)>(acc.lo, xa, w);
  if constexpr (B > 8) acc.hi = fmaLanesZ8<(A > 8 ? A : 8) - 8, B - 8>(acc.hi, xa + ((A > 8 ? A : 8) - A), w);
  return acc;
}
// Lanes [A, B) of the 8 floats at p, the others 0: vmaskmovps zeroes them itself (loadLanes8's
// select after it is an extra blend per load).
template <int A, int B> PC_INLINE f32x8 loadLanesZero8(const float* p) {
  if constexpr (A == 0 && B == 8) {
    return load8(p);
  } else {
    const i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return __builtin_ia32_maskloadps256(reinterpret_cast<const f32x8*>(p), (lane >= A) & (lane < B));
  }
}
template <int A, int B> PC_INLINE RowChunk loadChunk(const float* xa) {
  static_assert(0 <= A && A < B && B <= 16, "lanes of one chunk");
  RowChunk r{f32x8{}, f32x8{}};
  if constexpr (A < 8) r.lo = loadLanesZero8<A, (B < 8 ? B : 8)>(xa - A);
  if constexpr (B > 8) r.hi = loadLanesZero8<(A > 8 ? A : 8) - 8, B - 8>(xa - A + 8);
  return r;
}
PC_INLINE RowChunk fmaChunk(RowChunk acc, RowChunk x, float w) {
  const f32x8 wv = splat8(w);
  return {acc.lo + x.lo * wv, acc.hi + x.hi * wv};
}
template <int A, int B> PC_INLINE RowChunk loadRows2(const float* x0, const float* x1, bool in0, bool in1) {
  static_assert(0 <= A && A < B && B <= 8, "lanes of one half");
  return {in0 ? loadLanesZero8<A, B>(x0 - A) : f32x8{}, in1 ? loadLanesZero8<A, B>(x1 - A) : f32x8{}};
}
#else
// No masked loads (SSE): the chunk in memory, each tap a loop over its lanes.
struct RowChunk {
  float v[16];
};
template <int A, int B> PC_INLINE RowChunk fmaLanes(RowChunk acc, const float* xa, float w) {
  for (int l = A; l < B; ++l) acc.v[l] += xa[l - A] * w;
  return acc;
}
PC_INLINE void storeChunk(float* p, RowChunk r) { std::memcpy(p, r.v, sizeof r.v); }
PC_INLINE RowChunk operator/(RowChunk r, float d) {
  for (float& v : r.v) v /= d;
  return r;
}
template <int A, int B> PC_INLINE RowChunk fmaLanesZ(RowChunk acc, const float* xa, float w) { return fmaLanes<A, B>(acc, xa, w); }
template <int A, int B> PC_INLINE RowChunk loadChunk(const float* xa) {
  RowChunk r{};
  for (int l = A; l < B; ++l) r.v[l] = xa[l - A];
  return r;
}
PC_INLINE RowChunk fmaChunk(RowChunk acc, RowChunk x, float w) {
  for (int l = 0; l < 16; ++l) acc.v[l] += x.v[l] * w;
  return acc;
}
template <int A, int B> PC_INLINE RowChunk loadRows2(const float* x0, const float* x1, bool in0, bool in1) {
  RowChunk r{};
  for (int l = A; l < B; ++l) {
    if (in0) r.v[l] = x0[l - A];
    if (in1) r.v[8 + l] = x1[l - A];
  }
  return r;
}
#endif
// conv_rows (ConvRowTiles in the schedule): loadChunk<A, B>(xa) is lanes [A, B) of a chunk of
// 16 columns (xa at lane A's value), the other lanes 0 and never read; fmaChunk(acc, x, w) is
// acc + x * w on every lane. One input chunk serves a block of output channels. loadRows2<A, B>
// (x0, x1, in0, in1): two rows of at most 8 columns in one chunk, lanes [A, B) of row 0 (x0 at
// lane A's value; zeros unless in0) in lanes A..B-1 and of row 1 in lanes 8+A..8+B-1.

// ---- GEMM microkernels over weights packed in panels of 16 output columns: panel[k][c] is the
// weight of column c for input k. Each computes out[t][c] = bias[c] + sum_k x_t[k] * panel[k][c].
// A panel row is one f32x16 with AVX-512, two f32x8 otherwise (AVX registers, or SSE pairs).

// Width-generic helpers for the microkernels below (V is f32x8 or f32x16).
template <class V>
PC_INLINE V loadv(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
PC_INLINE void storev(float* p, V v) { std::memcpy(p, &v, sizeof v); }
PC_INLINE f32x8 splatv(f32x8, float x) { return splat8(x); }
PC_INLINE f32x16 splatv(f32x16, float x) { return splat16(x); }

// Columns [8*half, 8*half + 8) of a packed weight panel row (`row`: 16 values; with f32x16, all
// 16, half 0) as f32 (--precision, docs/precision.md): f32 as stored; int8 converted (the columns'
// scales, `scale`, are applied once at the end: accEnd). Activations and accumulators stay f32.
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int8_t i8x8 __attribute__((vector_size(8)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
template <class V>
PC_INLINE V loadw(const float* row, int half, const float*) { return loadv<V>(row + 8 * half); }
// bf16 weights (WeightStorage::Bf16) come as pairs along k, the layout bf16-dot has (packing.h:
// toBf16Pairs): the 32-bit lane c of pair row q holds column c of row 2q in its low half and of
// row 2q + 1 in its high half, so that a shift (row 2q) or a mask (row 2q + 1) of one load gives
// a vector of f32 weights: one instruction a vector, as many as the FMAs that use them (columns
// c and c + 8 in one lane took a load, a shift, a mask and a lane insert for 16 on AVX-512). The
// microkernels step k by two over them (kPairs).
struct bf16x2 {
  uint32_t bits;
};
template <class WT>
constexpr bool kPairs = std::is_same_v<WT, bf16x2>;
// Rows 2q and 2q + 1, columns [8*half, 8*half + 8) (with f32x16, all 16, half 0), of pair row `row`.
template <class V>
PC_INLINE void loadPair(const bf16x2* row, int half, V& even, V& odd) {
  using U = std::conditional_t<sizeof(V) == 32, u32x8, u32x16>;
  U bits;
  std::memcpy(&bits, reinterpret_cast<const uint32_t*>(row) + 8 * half, sizeof bits);
  const U e = bits << 16, o = bits & 0xffff0000u;
  std::memcpy(&even, &e, sizeof even);
  std::memcpy(&odd, &o, sizeof odd);
}
template <class V>
PC_INLINE V loadw(const int8_t* row, int half, const float*) {
  // One sign extension from memory to 8 or 16 lanes (vpmovsxbd): GCC 12 turns
  // __builtin_convertvector from an 8- or 16-byte vector into scalar code (10x slower).
  typedef char c8x16 __attribute__((vector_size(16)));
  typedef int64_t i64x2 __attribute__((vector_size(16)));
#if defined(__AVX512F__) && !defined(__clang__)
  if constexpr (sizeof(V) == 64) {
    c8x16 b;
    std::memcpy(&b, row, sizeof b);
    return __builtin_convertvector((i32x16)__builtin_ia32_pmovsxbd512_mask(b, i32x16{}, static_cast<unsigned short>(0xffff)), V);
  }
#endif
  int64_t eight;
  std::memcpy(&eight, row + 8 * half, sizeof eight);
  const c8x16 b = (c8x16)(i64x2{eight, 0});
#if defined(__AVX2__) && !defined(__clang__)
  if constexpr (sizeof(V) == 32) return __builtin_convertvector((i32x8)__builtin_ia32_pmovsxbd256(b), V);
#endif
  using B = std::conditional_t<sizeof(V) == 32, i8x8, i8x16>;
  B narrow;
  std::memcpy(&narrow, sizeof(V) == 32 ? static_cast<const void*>(&b) : static_cast<const void*>(row), sizeof narrow);
  return __builtin_convertvector(narrow, V);
}
// 8 or 16 bools (a byte each) as lane masks, all ones where set: a vector epilogue's `where`
// condition (an attention's causal mask), through loadw's one sign extension.
PC_INLINE i32x8 boolLanes8(const uint8_t* p) { return loadw<f32x8>(reinterpret_cast<const int8_t*>(p), 0, nullptr) != 0.0f; }
PC_INLINE i32x16 boolLanes16(const uint8_t* p) { return loadw<f32x16>(reinterpret_cast<const int8_t*>(p), 0, nullptr) != 0.0f; }
// An int8 panel widened to f32 once for many rows (KernelSchedule::widenRows): the values of the
// int8 weights, their scales still to be applied at each tile's end.
struct WideI8 {
  float v;
};
template <class V>
PC_INLINE V loadw(const WideI8* row, int half, const float*) { return loadv<V>(reinterpret_cast<const float*>(row) + 8 * half); }
// `count` panels of K rows (`stride` elements apart) as f32 values at dst, K x 16 floats a panel:
// what loadw gives, stored, for the tiles of many rows to read as f32 (or WideI8) panels.
template <class WT, class DT>
PC_INLINE void widenPanels(int64_t K, const WT* PC_RESTRICT w, int64_t stride, int64_t count, DT* PC_RESTRICT dst) {
  float* PC_RESTRICT out = reinterpret_cast<float*>(dst);
  for (int64_t p = 0; p < count; ++p) {
    for (int64_t k = 0; k < K; ++k, out += 16) {
#if defined(__AVX512F__)
      storev(out, loadw<f32x16>(w + p * stride + k * 16, 0, nullptr));
#else
      storev(out, loadw<f32x8>(w + p * stride + k * 16, 0, nullptr));
      storev(out + 8, loadw<f32x8>(w + p * stride + k * 16, 1, nullptr));
#endif
    }
  }
}

// The same from bf16 pairs along k (bf16x2, and uint32_t for WeightStorage::Bf16Dot: --precision
// bf16 on a target with AVX512_BF16, whose layers from 16 rows on multiply these f32 values by
// their f32 activations with FMAs; vdpbf16ps issues at half the FMA's products per cycle on
// Sapphire Rapids).
// (Vectors of the target's width: GCC moves a wider one through the stack a lane at a time.)
template <class DT>
PC_INLINE void widenPanels(int64_t K, const bf16x2* PC_RESTRICT w, int64_t stride, int64_t count, DT* PC_RESTRICT dst) {
#if defined(__AVX512F__)
  typedef f32x16 V;
#else
  typedef f32x8 V;
#endif
  constexpr int W = sizeof(V) / sizeof(float);
  float* PC_RESTRICT out = reinterpret_cast<float*>(dst);
  for (int64_t p = 0; p < count; ++p, out += K * 16) {
    for (int64_t q = 0; 2 * q < K; ++q) {
      for (int h = 0; h < 16 / W; ++h) {
        V even, odd;
        loadPair(w + p * stride + q * 16, h, even, odd);
        storev(out + 2 * q * 16 + h * W, even);
        if (2 * q + 1 < K) storev(out + (2 * q + 1) * 16 + h * W, odd);
      }
    }
  }
}
template <class DT>
PC_INLINE void widenPanels(int64_t K, const uint32_t* PC_RESTRICT w, int64_t stride, int64_t count, DT* PC_RESTRICT dst) {
  widenPanels(K, reinterpret_cast<const bf16x2*>(w), stride, count, dst);
}

// A layer whose narrowed panels the model widens once into a region of f32 panels
// (Schedule::loadWidened: by the first kernel that reads them, a linear layer's first run of many
// rows or a conv's first run; later such runs read the region): the bf16 pairs at byte `from` of the weights blob (`count` panels, `stride` pairs apart, K rows)
// become K x 16 floats a panel at float `to` of the region. (Only bf16: a layer small enough to
// keep f32 panels in L2 is never int8, codegen::kStreamedWeights.)
struct WidenJob {
  int64_t from, to, K, stride, count;
};
// Runs the jobs once per process: the first caller widens while later ones wait for it; after
// that one acquiring load a call. `state`: 0 not yet, 1 widening, 2 done. The values are exact
// (a bf16 value is an f32 value), so whoever compiled this gives the same floats.
static __attribute__((noinline)) void widenAtLoadSlow(int32_t* state, const WidenJob* jobs, int32_t n, const unsigned char* blob,
                                                      float* region) {
  int32_t expected = 0;
  if (__atomic_compare_exchange_n(state, &expected, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
    for (int32_t i = 0; i < n; ++i) {
      const WidenJob& j = jobs[i];
      widenPanels(j.K, reinterpret_cast<const bf16x2*>(blob + j.from), j.stride, j.count, region + j.to);
    }
    __atomic_store_n(state, 2, __ATOMIC_RELEASE);
    return;
  }
  while (__atomic_load_n(state, __ATOMIC_ACQUIRE) != 2) sched_yield();
}
PC_INLINE void widenAtLoad(int32_t* state, const WidenJob* jobs, int32_t n, const unsigned char* blob, float* region) {
  if (__builtin_expect(__atomic_load_n(state, __ATOMIC_ACQUIRE) == 2, 1)) return;
  widenAtLoadSlow(state, jobs, n, blob, region);
}

// Where a microkernel's accumulators start and how they end: f32 and bf16 weights from the bias,
// as they are; int8 ones from zero, then times the columns' scales plus the bias once at the end
// (sum_k x_k q_kc s_c = s_c sum_k x_k q_kc), so that the loop converts each weight and
// multiplies nothing more (atari_cnn's 3136x512 layer at batch 1: 96 -> 65 us).
template <class WT>
constexpr bool kScaledAtEnd = std::is_same_v<WT, int8_t> || std::is_same_v<WT, WideI8>;
template <class V, class WT>
PC_INLINE V accStart(const float* bias) {
  if constexpr (kScaledAtEnd<WT>) return V{};
  else return loadv<V>(bias);
}
template <class V, class WT>
PC_INLINE V accEnd(V acc, const float* bias, const float* scale) {
  if constexpr (kScaledAtEnd<WT>) return acc * loadv<V>(scale) + loadv<V>(bias);
  else return acc;
}

// A microkernel's `at` for rows stored contiguously (a linear layer's rows; gathered conv patches
// pass their offsets instead): element k of a row is x[k]. A type of its own so that a kernel can
// load whole vectors from such rows (bf16Pairs).
struct Contiguous {
  constexpr int64_t operator()(int64_t k) const { return k; }
};

// Where a microkernel's finished rows go: RowsAt stores row t at out + t * os (a stack tile, or
// the output's own rows); the _fin entry points below instead hand each row's 16 columns from
// column c to an epilogue functor end(t, c, f32x16), which stores them itself, so that the tile
// never goes through memory (a 4 x 32 tile at K = 11: 16 stores and loads against 88 FMAs).
struct RowsAt {
  float* PC_RESTRICT out;
  int64_t os;
  template <class V>
  inline __attribute__((always_inline)) void operator()(int64_t t, int64_t c, V v) const { storev(out + t * os + c, v); }
};

// Four rows times two vectors of columns, eight independent accumulators: row t's [0, W) from the
// panel rows at wa (their half ha, loadw), its [W, 2W) from those at wb (half hb; W = V's lanes;
// sa and sb the panels' int8 scales), each column starting from its bias; row t's columns
// [c, c + W) go to end(t, c, ...) (RowsAt: out + t * os).
// Row t's element k is x_t[at(k)]; every output sums over k in order. Serves as the AVX2 4x16
// (one panel as two halves) and the AVX-512 4x32 (two panels) kernel.
// gemm_4x2v_by (below) is this out of line, writing a tile (RowsAt); gemm_4x32_fin inlines it
// with an epilogue functor, where no tile is written, so the reason for gemm_4x2v_by does not apply.
template <class V, class At, class WT, class End>
PC_INLINE void gemm_4x2v_to(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* wa, int ha,
                            const WT* wb, int hb, const float* PC_RESTRICT bias, End end,
                            const float* PC_RESTRICT sa, const float* PC_RESTRICT sb) {
  constexpr int W = sizeof(V) / sizeof(float);
  const V ba = accStart<V, WT>(bias), bb = accStart<V, WT>(bias + W);
  V a0 = ba, a1 = bb, b0 = ba, b1 = bb, c0 = ba, c1 = bb, d0 = ba, d1 = bb;
  auto step = [&](int64_t k, V wka, V wkb) {
    const int64_t o = at(k);
    V v = splatv(V{}, x0[o]);
    a0 += v * wka;
    a1 += v * wkb;
    v = splatv(V{}, x1[o]);
    b0 += v * wka;
    b1 += v * wkb;
    v = splatv(V{}, x2[o]);
    c0 += v * wka;
    c1 += v * wkb;
    v = splatv(V{}, x3[o]);
    d0 += v * wka;
    d1 += v * wkb;
  };
  if constexpr (kPairs<WT>) {
    int64_t k = 0;
#pragma GCC unroll 2
    for (; k + 2 <= K; k += 2) {
      V ea, oa, eb, ob;
      loadPair(wa + k / 2 * 16, ha, ea, oa);
      loadPair(wb + k / 2 * 16, hb, eb, ob);
      step(k, ea, eb);
      step(k + 1, oa, ob);
    }
    if (k < K) {  // an odd K's last row: the low halves of the last pair row
      V ea, oa, eb, ob;
      loadPair(wa + k / 2 * 16, ha, ea, oa);
      loadPair(wb + k / 2 * 16, hb, eb, ob);
      step(k, ea, eb);
    }
  } else {
    // Unrolled, as LLVM unrolls the same loop: measured 1.35x faster (a 256x256 linear layer at
    // batch 64, 101 -> 75 us), the loop's own bookkeeping no longer between the FMAs.
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; ++k) step(k, loadw<V>(wa + k * 16, ha, sa), loadw<V>(wb + k * 16, hb, sb));
  }
  const float* PC_RESTRICT ta = sa ? sa + 8 * ha : nullptr;
  const float* PC_RESTRICT tb = sb ? sb + 8 * hb : nullptr;
  end(0, 0, accEnd<V, WT>(a0, bias, ta));
  end(0, W, accEnd<V, WT>(a1, bias + W, tb));
  end(1, 0, accEnd<V, WT>(b0, bias, ta));
  end(1, W, accEnd<V, WT>(b1, bias + W, tb));
  end(2, 0, accEnd<V, WT>(c0, bias, ta));
  end(2, W, accEnd<V, WT>(c1, bias + W, tb));
  end(3, 0, accEnd<V, WT>(d0, bias, ta));
  end(3, W, accEnd<V, WT>(d1, bias + W, tb));
}
// Not inlined: inlined into a layer whose epilogue only copies `out` on (no activation), GCC 12
// kept the eight accumulators in out's stack slots, a load and a store around every FMA (a
// 256x256 linear layer at batch 64 on AVX2: 310 us, 107 us as a function of its own).
template <class V, class At, class WT>
__attribute__((noinline)) static void gemm_4x2v_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                                                   const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* wa, int ha,
                                                   const WT* wb, int hb, const float* PC_RESTRICT bias, float* PC_RESTRICT out,
                                                   int64_t os, const float* PC_RESTRICT sa, const float* PC_RESTRICT sb) {
  gemm_4x2v_to<V>(K, at, x0, x1, x2, x3, wa, ha, wb, hb, bias, RowsAt{out, os}, sa, sb);
}

#if defined(__AVX512BF16__)
// ---- products in bf16 with f32 accumulation (--precision bf16 on a target with AVX512_BF16;
// the schedule's WeightStorage::Bf16Dot). vdpbf16ps adds to each f32 lane the products of one
// pair of bf16 values (k even in the low half, k odd in the high half) from each operand. The
// weights come packed as such pairs (packing.h: toBf16Pairs, a panel row of 16 32-bit lanes per
// pair of k); a tile first rounds its rows' activations to bf16 pairs (bf16Pairs), then streams
// its panels. The products of two bf16 values are exact in f32: only the rounding of both
// operands differs from f32 arithmetic.
constexpr int64_t kMaxDotPairs = 2048;  // codegen::kMaxBf16DotPairs: a tile's rows on the stack
// x[at(0..K)) as bf16 pairs, 16 values at a time by vcvtneps2bf16 (to nearest even, as the
// weights' packing; a denormal becomes zero), a zero high half past an odd K. `dst` has room for
// whole 8-word vectors (kMaxDotPairs is a multiple of 8).
template <class At>
PC_INLINE void bf16Pairs(int64_t K, At at, const float* PC_RESTRICT x, uint32_t* PC_RESTRICT dst) {
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    f32x16 v;
    if constexpr (std::is_same_v<At, Contiguous>) {
      v = loadv<f32x16>(x + k);  // GCC builds v[i] = x[k + i] by 16 inserts
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) v[i] = x[at(k + i)];
    }
    const __m256bh b = _mm512_cvtneps_pbh((__m512)v);
    std::memcpy(dst + k / 2, &b, sizeof b);
  }
  if (k < K) {
    f32x16 v = {};
    for (int i = 0; k + i < K; ++i) v[i] = x[at(k + i)];
    const __m256bh b = _mm512_cvtneps_pbh((__m512)v);
    std::memcpy(dst + k / 2, &b, sizeof b);
  }
}
PC_INLINE f32x16 dotPair(f32x16 acc, uint32_t x, __m512i w) {
  return (f32x16)_mm512_dpbf16_ps((__m512)acc, (__m512bh)_mm512_set1_epi32(static_cast<int>(x)), (__m512bh)w);
}
// R rows (row t's element k is x[t][at(k)]) times P panels (panel p at w + p * stride, in 32-bit
// pair rows), each column starting from its bias; row t's panel p goes to out + t * outStride + 16p.
// One accumulator per row and panel, except a lone row and panel: four, over k pairs in turn
// (vdpbf16ps's latency), added at the end.
template <int R, int P, class At>
PC_INLINE void gemmDot(int64_t K, At at, const float* const (&x)[R], const uint32_t* PC_RESTRICT w, int64_t stride,
                       const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t outStride) {
  const int64_t Q = (K + 1) / 2;
  uint32_t xb[R][kMaxDotPairs];
  for (int t = 0; t < R; ++t) bf16Pairs(K, at, x[t], xb[t]);
  if constexpr (R == 1 && P == 1) {
    f32x16 a = loadv<f32x16>(bias), b = {}, c = {}, d = {};
    int64_t q = 0;
    for (; q + 4 <= Q; q += 4) {
      a = dotPair(a, xb[0][q], _mm512_loadu_si512(w + q * 16));
      b = dotPair(b, xb[0][q + 1], _mm512_loadu_si512(w + q * 16 + 16));
      c = dotPair(c, xb[0][q + 2], _mm512_loadu_si512(w + q * 16 + 32));
      d = dotPair(d, xb[0][q + 3], _mm512_loadu_si512(w + q * 16 + 48));
    }
    for (; q < Q; ++q) a = dotPair(a, xb[0][q], _mm512_loadu_si512(w + q * 16));
    storev(out, (a + b) + (c + d));
  } else {
    f32x16 acc[R][P];
    for (int t = 0; t < R; ++t)
      for (int p = 0; p < P; ++p) acc[t][p] = loadv<f32x16>(bias + 16 * p);
#pragma GCC unroll 2
    for (int64_t q = 0; q < Q; ++q) {
      __m512i wv[P];
      for (int p = 0; p < P; ++p) wv[p] = _mm512_loadu_si512(w + p * stride + q * 16);
      for (int t = 0; t < R; ++t)
        for (int p = 0; p < P; ++p) acc[t][p] = dotPair(acc[t][p], xb[t][q], wv[p]);
    }
    for (int t = 0; t < R; ++t)
      for (int p = 0; p < P; ++p) storev(out + t * outStride + 16 * p, acc[t][p]);
  }
}
// A Winograd panel of C rows of 16 f32 lanes (V's channels) rewritten in place as bf16 pairs along
// the channels, the panel operand of gemmDot: row c2 holds channel 2c2 in the low half of each
// 32-bit lane and 2c2 + 1 in the high half (zero past an odd C), rounded by vcvtneps2bf16 as
// bf16Pairs rounds a tile's rows. Row c2 is written after rows 2c2 and 2c2 + 1 are read.
PC_INLINE void winogradPairs(float* v, int64_t C) {
  for (int64_t c = 0; c < C; c += 2) {
    const __m512 a = (__m512)loadv<f32x16>(v + c * 16);
    const __m512 b = c + 1 < C ? (__m512)loadv<f32x16>(v + (c + 1) * 16) : _mm512_setzero_ps();
    const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a));
    const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(b));
    _mm512_storeu_si512(v + c / 2 * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}
#endif
// Elements of a packed panel of K rows: uint32_t and bf16x2 weights are bf16 pairs along k.
template <class WT>
constexpr int64_t panelElems(int64_t K) {
  return std::is_same_v<WT, uint32_t> || kPairs<WT> ? (K + 1) / 2 * 16 : K * 16;
}

// The weight pointer of the microkernels below is float, bf16x2 (bf16 pairs along k, widened),
// uint32_t (the same pairs, products in bf16: gemmDot), WideI8 (int8 panels widened once) or
// int8_t (with `scale`, the panel's 16 column scales; null otherwise).
#if defined(__AVX512F__)
// One row: four accumulators over interleaved k for instruction-level parallelism.
template <class WT, class End>
PC_INLINE void gemm_1x16_to(int64_t K, const float* PC_RESTRICT x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                            End end, const float* PC_RESTRICT scale) {
  f32x16 a = accStart<f32x16, WT>(bias), b = {}, c = {}, d = {};
  int64_t k = 0;
  if constexpr (kPairs<WT>) {
    for (; k + 4 <= K; k += 4) {
      f32x16 w0, w1, w2, w3;
      loadPair(w + k / 2 * 16, 0, w0, w1);
      loadPair(w + k / 2 * 16 + 16, 0, w2, w3);
      a += splat16(x[k]) * w0;
      b += splat16(x[k + 1]) * w1;
      c += splat16(x[k + 2]) * w2;
      d += splat16(x[k + 3]) * w3;
    }
    for (int64_t i = 0; i < (K & 3); ++i, ++k) {  // the last K % 4 (see gemm_1x16_to)
      f32x16 e, o;
      loadPair(w + k / 2 * 16, 0, e, o);
      a += splat16(x[k]) * (k % 2 ? o : e);
    }
  } else {
    for (; k + 4 <= K; k += 4) {
      const WT* p = w + k * 16;
      a += splat16(x[k]) * loadw<f32x16>(p, 0, scale);
      b += splat16(x[k + 1]) * loadw<f32x16>(p + 16, 0, scale);
      c += splat16(x[k + 2]) * loadw<f32x16>(p + 32, 0, scale);
      d += splat16(x[k + 3]) * loadw<f32x16>(p + 48, 0, scale);
    }
    // The last K % 4 values, a count GCC sees is small (`k < K` made it warn, in every model,
    // that an iteration past 2^62 would overflow w + k * 16); the same in the loops like it.
    for (int64_t i = 0; i < (K & 3); ++i, ++k) a += splat16(x[k]) * loadw<f32x16>(w + k * 16, 0, scale);
  }
  end(0, 0, accEnd<f32x16, WT>((a + b) + (c + d), bias, scale));
}
template <class WT>
PC_INLINE void gemm_1x16(int64_t K, const float* PC_RESTRICT x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float* PC_RESTRICT out, const float* PC_RESTRICT scale = nullptr) {
  gemm_1x16_to(K, x, w, bias, RowsAt{out, 0}, scale);
}

// Four rows share every weight load; row t's element k is x_t[at(k)].
template <class At, class WT, class End>
PC_INLINE void gemm_4x16_to(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* PC_RESTRICT w,
                            const float* PC_RESTRICT bias, End end, const float* PC_RESTRICT scale) {
  f32x16 a = accStart<f32x16, WT>(bias), b = a, c = a, d = a;
  auto step = [&](int64_t k, f32x16 wk) {
    const int64_t o = at(k);
    a += splat16(x0[o]) * wk;
    b += splat16(x1[o]) * wk;
    c += splat16(x2[o]) * wk;
    d += splat16(x3[o]) * wk;
  };
  if constexpr (kPairs<WT>) {
    int64_t k = 0;
#pragma GCC unroll 2
    for (; k + 2 <= K; k += 2) {
      f32x16 e, o;
      loadPair(w + k / 2 * 16, 0, e, o);
      step(k, e);
      step(k + 1, o);
    }
    if (k < K) {
      f32x16 e, o;
      loadPair(w + k / 2 * 16, 0, e, o);
      step(k, e);
    }
  } else {
#pragma GCC unroll 4  // as gemm_4x2v_by
    for (int64_t k = 0; k < K; ++k) step(k, loadw<f32x16>(w + k * 16, 0, scale));
  }
  end(0, 0, accEnd<f32x16, WT>(a, bias, scale));
  end(1, 0, accEnd<f32x16, WT>(b, bias, scale));
  end(2, 0, accEnd<f32x16, WT>(c, bias, scale));
  end(3, 0, accEnd<f32x16, WT>(d, bias, scale));
}
template <class At, class WT>
PC_INLINE void gemm_4x16_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* PC_RESTRICT w,
                            const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t os, const float* PC_RESTRICT scale) {
  gemm_4x16_to(K, at, x0, x1, x2, x3, w, bias, RowsAt{out, os}, scale);
}

// Four rows times two panels (32 columns): eight accumulators, enough to keep both 512-bit FMA
// pipes busy through the FMA latency, where four (one panel) leave them half idle. Every output
// element sums over k in the same order as gemm_4x16_by: the results are identical.
template <class At, class WT>
PC_INLINE void gemm_4x32_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* PC_RESTRICT wa,
                            const WT* PC_RESTRICT wb, const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t os,
                            const float* PC_RESTRICT scale) {
  gemm_4x2v_by<f32x16>(K, at, x0, x1, x2, x3, wa, 0, wb, 0, bias, out, os, scale, scale ? scale + 16 : nullptr);
}

#if defined(__AVX512BF16__)
// The same three over bf16 pairs along k (uint32_t: WeightStorage::Bf16Dot), products in bf16.
PC_INLINE void gemm_1x16(int64_t K, const float* PC_RESTRICT x, const uint32_t* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float* PC_RESTRICT out, const float* PC_RESTRICT = nullptr) {
  gemmDot<1, 1>(K, Contiguous{}, {x}, w, 0, bias, out, 0);
}
template <class At>
PC_INLINE void gemm_4x16_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const uint32_t* PC_RESTRICT w,
                            const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t os, const float* PC_RESTRICT) {
  gemmDot<4, 1>(K, at, {x0, x1, x2, x3}, w, 0, bias, out, os);
}
template <class At>
PC_INLINE void gemm_4x32_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const uint32_t* PC_RESTRICT wa,
                            const uint32_t* PC_RESTRICT wb, const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t os,
                            const float* PC_RESTRICT) {
  gemmDot<4, 2>(K, at, {x0, x1, x2, x3}, wa, wb - wa, bias, out, os);
}
#endif

#else
// Without AVX-512 a panel row is two f32x8 (GCC would spill a 16-float vector type).
template <class WT>
PC_INLINE void gemm_1x16(int64_t K, const float* PC_RESTRICT x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float* PC_RESTRICT out, const float* PC_RESTRICT scale = nullptr) {
  f32x8 a0 = accStart<f32x8, WT>(bias), a1 = accStart<f32x8, WT>(bias + 8), b0 = {}, b1 = {}, c0 = {}, c1 = {}, d0 = {}, d1 = {};
  int64_t k = 0;
  if constexpr (kPairs<WT>) {
    for (; k + 4 <= K; k += 4) {
      f32x8 e0, o0, e1, o1;
      loadPair(w + k / 2 * 16, 0, e0, o0);
      loadPair(w + k / 2 * 16, 1, e1, o1);
      a0 += splat8(x[k]) * e0;
      a1 += splat8(x[k]) * e1;
      b0 += splat8(x[k + 1]) * o0;
      b1 += splat8(x[k + 1]) * o1;
      loadPair(w + k / 2 * 16 + 16, 0, e0, o0);
      loadPair(w + k / 2 * 16 + 16, 1, e1, o1);
      c0 += splat8(x[k + 2]) * e0;
      c1 += splat8(x[k + 2]) * e1;
      d0 += splat8(x[k + 3]) * o0;
      d1 += splat8(x[k + 3]) * o1;
    }
    for (int64_t i = 0; i < (K & 3); ++i, ++k) {  // the last K % 4 (see gemm_1x16_to)
      f32x8 e0, o0, e1, o1;
      loadPair(w + k / 2 * 16, 0, e0, o0);
      loadPair(w + k / 2 * 16, 1, e1, o1);
      a0 += splat8(x[k]) * (k % 2 ? o0 : e0);
      a1 += splat8(x[k]) * (k % 2 ? o1 : e1);
    }
  } else {
    for (; k + 4 <= K; k += 4) {
      const WT* p = w + k * 16;
      a0 += splat8(x[k]) * loadw<f32x8>(p, 0, scale);
      a1 += splat8(x[k]) * loadw<f32x8>(p, 1, scale);
      b0 += splat8(x[k + 1]) * loadw<f32x8>(p + 16, 0, scale);
      b1 += splat8(x[k + 1]) * loadw<f32x8>(p + 16, 1, scale);
      c0 += splat8(x[k + 2]) * loadw<f32x8>(p + 32, 0, scale);
      c1 += splat8(x[k + 2]) * loadw<f32x8>(p + 32, 1, scale);
      d0 += splat8(x[k + 3]) * loadw<f32x8>(p + 48, 0, scale);
      d1 += splat8(x[k + 3]) * loadw<f32x8>(p + 48, 1, scale);
    }
    for (int64_t i = 0; i < (K & 3); ++i, ++k) {  // the last K % 4 (see gemm_1x16_to)
      a0 += splat8(x[k]) * loadw<f32x8>(w + k * 16, 0, scale);
      a1 += splat8(x[k]) * loadw<f32x8>(w + k * 16, 1, scale);
    }
  }
  store8(out, accEnd<f32x8, WT>((a0 + b0) + (c0 + d0), bias, scale));
  store8(out + 8, accEnd<f32x8, WT>((a1 + b1) + (c1 + d1), bias + 8, scale ? scale + 8 : nullptr));
}

// One panel as two 8-float halves.
template <class At, class WT>
PC_INLINE void gemm_4x16_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* PC_RESTRICT w,
                            const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t os, const float* PC_RESTRICT scale) {
  gemm_4x2v_by<f32x8>(K, at, x0, x1, x2, x3, w, 0, w, 1, bias, out, os, scale, scale);
}

// Sixteen 8-float registers of accumulators would not fit beside the weights: one panel at a time.
template <class At, class WT>
PC_INLINE void gemm_4x32_by(int64_t K, At at, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1,
                            const float* PC_RESTRICT x2, const float* PC_RESTRICT x3, const WT* PC_RESTRICT wa,
                            const WT* PC_RESTRICT wb, const float* PC_RESTRICT bias, float* PC_RESTRICT out, int64_t os,
                            const float* PC_RESTRICT scale) {
  gemm_4x16_by(K, at, x0, x1, x2, x3, wa, bias, out, os, scale);
  gemm_4x16_by(K, at, x0, x1, x2, x3, wb, bias + 16, out + 16, os, scale ? scale + 16 : nullptr);
}

#endif

// Four rows of x, contiguous; row t of the result to out + t * os (a stack tile, or the rows of
// the output itself: KernelSchedule::directRows).
template <class WT>
PC_INLINE void gemm_4x16(int64_t K, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1, const float* PC_RESTRICT x2,
                         const float* PC_RESTRICT x3, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float* PC_RESTRICT out, int64_t os, const float* PC_RESTRICT scale = nullptr) {
  gemm_4x16_by(K, Contiguous{}, x0, x1, x2, x3, w, bias, out, os, scale);
}
// Four contiguous rows times two adjacent panels (wa and wb = wa + 16 * K).
template <class WT>
PC_INLINE void gemm_4x32(int64_t K, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1, const float* PC_RESTRICT x2,
                         const float* PC_RESTRICT x3, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float* PC_RESTRICT out, int64_t os, const float* PC_RESTRICT scale = nullptr) {
  gemm_4x32_by(K, Contiguous{}, x0, x1, x2, x3, w, w + panelElems<WT>(K), bias, out, os, scale);
}
// The three tiles of a linear layer with each finished row handed to end(t, c, f32x16) (RowsAt):
// with AVX-512 and f32, bf16 or int8 panels straight from the accumulators (direct(end));
// otherwise (AVX2's half panels, bf16 products) through an R x C stack tile (tiled(tile)), whose
// rows endRows then hands on.
template <int R, int C, class End>
PC_INLINE void endRows(const float (&tile)[R][C], End end) {
  for (int64_t t = 0; t < R; ++t)
    for (int64_t c = 0; c < C; c += 16) end(t, c, load16(tile[t] + c));
}
template <int R, int C, class WT, class Direct, class Tiled, class End>
PC_INLINE void finishTile(Direct direct, Tiled tiled, End end) {
#if defined(__AVX512F__)
  if constexpr (!std::is_same_v<WT, uint32_t>) {
    direct(end);
    return;
  }
#else
  (void)direct;
#endif
  alignas(64) float tile[R][C];
  tiled(tile[0]);
  endRows(tile, end);
}
template <class WT, class End>
PC_INLINE void gemm_4x32_fin(int64_t K, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1, const float* PC_RESTRICT x2,
                             const float* PC_RESTRICT x3, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, End end,
                             const float* PC_RESTRICT scale = nullptr) {
  finishTile<4, 32, WT>(
      [&](auto e) {
        gemm_4x2v_to<f32x16>(K, Contiguous{}, x0, x1, x2, x3, w, 0, w + panelElems<WT>(K), 0, bias, e, scale,
                             scale ? scale + 16 : nullptr);
      },
      [&](float* tile) { gemm_4x32(K, x0, x1, x2, x3, w, bias, tile, 32, scale); }, end);
}
template <class WT, class End>
PC_INLINE void gemm_4x16_fin(int64_t K, const float* PC_RESTRICT x0, const float* PC_RESTRICT x1, const float* PC_RESTRICT x2,
                             const float* PC_RESTRICT x3, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, End end,
                             const float* PC_RESTRICT scale = nullptr) {
  finishTile<4, 16, WT>([&](auto e) { gemm_4x16_to(K, Contiguous{}, x0, x1, x2, x3, w, bias, e, scale); },
                        [&](float* tile) { gemm_4x16(K, x0, x1, x2, x3, w, bias, tile, 16, scale); }, end);
}
template <class WT, class End>
PC_INLINE void gemm_1x16_fin(int64_t K, const float* PC_RESTRICT x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, End end,
                             const float* PC_RESTRICT scale = nullptr) {
  finishTile<1, 16, WT>([&](auto e) { gemm_1x16_to(K, x, w, bias, e, scale); },
                        [&](float* tile) { gemm_1x16(K, x, w, bias, tile, scale); }, end);
}
template <class WT>
PC_INLINE void gemm_4x32_at(int64_t K, const int32_t* PC_RESTRICT off, const float* PC_RESTRICT x0,
                            const float* PC_RESTRICT x1, const float* PC_RESTRICT x2, const float* PC_RESTRICT x3,
                            const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, float (*PC_RESTRICT out)[32],
                            const float* PC_RESTRICT scale = nullptr) {
  gemm_4x32_by(K, [off](int64_t k) { return static_cast<int64_t>(off[k]); }, x0, x1, x2, x3, w, w + panelElems<WT>(K), bias, out[0], 32, scale);
}
// Reading x_t[k] at x_t[off[k]]: a convolution's patches straight from the input when the window
// lies inside it (off is the window's offset table, the same for every position).
template <class WT>
PC_INLINE void gemm_4x16_at(int64_t K, const int32_t* PC_RESTRICT off, const float* PC_RESTRICT x0,
                            const float* PC_RESTRICT x1, const float* PC_RESTRICT x2, const float* PC_RESTRICT x3,
                            const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, float (*PC_RESTRICT out)[16],
                            const float* PC_RESTRICT scale = nullptr) {
  gemm_4x16_by(K, [off](int64_t k) { return static_cast<int64_t>(off[k]); }, x0, x1, x2, x3, w, bias, out[0], 16, scale);
}

// R rows times P panels of 16 columns: a conv's tile of R output positions (gemm6x16: 6 x 1, with
// AVX2 twelve 8-lane accumulators where gemm_4x16's eight leave the two FMA pipes waiting on the
// FMA latency, NatureCNN's first conv 72 -> 82 GFLOP/s on its own; gemm8x32: 8 x 2, sixteen
// 16-lane accumulators on AVX-512, where gemm_4x32's eight keep two 512-bit FMA pipes half busy).
// Panel p's weights start p * panelElems(K) after w. Row t's element k is x[t][at(k)]; every
// output sums over k in order, as gemm_4x16_by: the same bits. Not inlined, as gemm_4x2v_by.
// Row t of the tile is stored at out + t * os (os = 16 * P: a stack tile; a linear layer's output
// rows: their stride). G > 1 (a conv's taps along a window row, where at(k + u) = at(k) + u for
// u < G and G divides K): one offset a group of G values of k, the others as constant
// displacements from it (the offset table's load and the loop's own instructions were a tenth of
// the body: a 32-channel 3 x 3 conv's tile 160 -> 180 GFLOP/s on its own).
template <int R, int P, int G, class At, class WT, class End>
PC_INLINE void gemm_rxp_to(int64_t K, At at, const float* const* PC_RESTRICT x, const WT* PC_RESTRICT w,
                           const float* PC_RESTRICT bias, End end, const float* PC_RESTRICT scale) {
#if defined(__AVX512F__)
  typedef f32x16 V;
  constexpr int H = 1;  // vectors a panel row
#else
  typedef f32x8 V;
  constexpr int H = 2;
#endif
  constexpr int Q = P * H, L = 16 / H;  // vectors a tile row, lanes a vector
  const int64_t pe = panelElems<WT>(K);
  V acc[R][Q];
#pragma GCC unroll 16
  for (int t = 0; t < R; ++t)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) acc[t][q] = accStart<V, WT>(bias + L * q);
  auto step = [&](int64_t o, const V* wk) {
#pragma GCC unroll 16
    for (int t = 0; t < R; ++t) {
      const V v = splatv(V{}, x[t][o]);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) acc[t][q] += v * wk[q];
    }
  };
  if constexpr (kPairs<WT>) {
    int64_t k = 0;
    for (; k + 2 <= K; k += 2) {
      V e[Q], o[Q];
      for (int q = 0; q < Q; ++q) loadPair(w + q / H * pe + k / 2 * 16, q % H, e[q], o[q]);
      step(at(k), e);
      step(at(k + 1), o);
    }
    if (k < K) {  // an odd K's last row: the low halves of the last pair row
      V e[Q], o[Q];
      for (int q = 0; q < Q; ++q) loadPair(w + q / H * pe + k / 2 * 16, q % H, e[q], o[q]);
      step(at(k), e);
    }
  } else if constexpr (G > 1) {
    for (int64_t k = 0; k < K; k += G) {
      const int64_t o = at(k);
#pragma GCC unroll 8
      for (int u = 0; u < G; ++u) {
        V wk[Q];
        for (int q = 0; q < Q; ++q) wk[q] = loadw<V>(w + q / H * pe + (k + u) * 16, q % H, scale ? scale + 16 * (q / H) : nullptr);
        step(o + u, wk);
      }
    }
  } else {
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; ++k) {
      V wk[Q];
      for (int q = 0; q < Q; ++q) wk[q] = loadw<V>(w + q / H * pe + k * 16, q % H, scale ? scale + 16 * (q / H) : nullptr);
      step(at(k), wk);
    }
  }
  for (int t = 0; t < R; ++t)
    for (int q = 0; q < Q; ++q) end(t, L * q, accEnd<V, WT>(acc[t][q], bias + L * q, scale ? scale + L * q : nullptr));
}
template <int R, int P, int G = 1, class At, class WT>
__attribute__((noinline)) static void gemm_rxp_by(int64_t K, At at, const float* const* PC_RESTRICT x, const WT* PC_RESTRICT w,
                                                  const float* PC_RESTRICT bias, float* PC_RESTRICT out,
                                                  const float* PC_RESTRICT scale, int64_t os = 16 * P) {
  gemm_rxp_to<R, P, G>(K, at, x, w, bias, RowsAt{out, os}, scale);
}
// A conv tile's rows as an array (emitPackedConv): four rows at x[t][off[k]] (the windows inside
// the input) or contiguous (gathered patches), one or two panels; then six rows, one panel.
template <class WT>
PC_INLINE void gemm_4x16_at(int64_t K, const int32_t* PC_RESTRICT off, const float* const* x, const WT* PC_RESTRICT w,
                            const float* PC_RESTRICT bias, float (*PC_RESTRICT out)[16], const float* PC_RESTRICT scale = nullptr) {
  gemm_4x16_at(K, off, x[0], x[1], x[2], x[3], w, bias, out, scale);
}
template <class WT>
PC_INLINE void gemm_4x32_at(int64_t K, const int32_t* PC_RESTRICT off, const float* const* x, const WT* PC_RESTRICT w,
                            const float* PC_RESTRICT bias, float (*PC_RESTRICT out)[32], const float* PC_RESTRICT scale = nullptr) {
  gemm_4x32_at(K, off, x[0], x[1], x[2], x[3], w, bias, out, scale);
}
template <class WT>
PC_INLINE void gemm_4x16(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float (*PC_RESTRICT out)[16], const float* PC_RESTRICT scale = nullptr) {
  gemm_4x16(K, x[0], x[1], x[2], x[3], w, bias, out[0], 16, scale);
}
template <class WT>
PC_INLINE void gemm_4x32(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,
                         float (*PC_RESTRICT out)[32], const float* PC_RESTRICT scale = nullptr) {
  gemm_4x32(K, x[0], x[1], x[2], x[3], w, bias, out[0], 32, scale);
}
// Tiles of R rows by P panels (gemm6x16, gemm8x32 and its odd last panel, gemm8x16); the `_at`
// form reads row t's value k at x[t][off[k]], with off[k + u] = off[k] + u within groups of G.
// The `_at` form (a conv's tile, transposed next) is inlined into its kernel: the window's
// offsets and K are constants there (gap_cnn's first conv, K = 27: 11.5 -> 10.2 us at batch 1,
// 780 -> 685 us at batch 64); the linear forms stay out of line (gemm_4x2v_by's reason).
#define PC_GEMM_RXP(R, COLS)                                                                                                  \
  template <int G = 1, class WT>                                                                                          \
  PC_INLINE void gemm_##R##x##COLS##_at(int64_t K, const int32_t* PC_RESTRICT off, const float* const* x, const WT* PC_RESTRICT w, \
                                     const float* PC_RESTRICT bias, float (*PC_RESTRICT out)[COLS],                            \
                                     const float* PC_RESTRICT scale = nullptr) {                                          \
    gemm_rxp_to<R, COLS / 16, G>(K, [off](int64_t k) { return static_cast<int64_t>(off[k]); }, x, w, bias, RowsAt{out[0], COLS}, \
                                 scale);                                                                                  \
  }                                                                                                                       \
  template <class WT>                                                                                                     \
  PC_INLINE void gemm_##R##x##COLS(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,  \
                                float (*PC_RESTRICT out)[COLS], const float* PC_RESTRICT scale = nullptr) {                   \
    gemm_rxp_by<R, COLS / 16>(K, Contiguous{}, x, w, bias, out[0], scale);                                                \
  }                                                                                                                       \
  template <class WT>                                                                                                     \
  PC_INLINE void gemm_##R##x##COLS(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias,  \
                                float* PC_RESTRICT out, int64_t os, const float* PC_RESTRICT scale = nullptr) {               \
    gemm_rxp_by<R, COLS / 16>(K, Contiguous{}, x, w, bias, out, scale, os);                                               \
  }
PC_GEMM_RXP(2, 16)
PC_GEMM_RXP(6, 16)
PC_GEMM_RXP(8, 16)
PC_GEMM_RXP(8, 32)
#undef PC_GEMM_RXP

// ---- Winograd F(2x2, 3x3) (codegen's WinogradTiles, Impl::WinogradF23): the transforms of a
// run of N tiles along a tile row (1 to 8 on vectors of 8, 16 on vectors of 16: WinogradTiles::
// inputRuns, outputRuns), a tile a vector lane. Additions only, in a fixed order that the LLVM printer's
// Emitter::winogradInput / winogradOutput repeat: the same bits.
// Lanes [0, W) of two W-lane vectors' 2W lanes: the even ones, or the odd ones.
template <class V, int W, bool Odd> PC_INLINE V halfLanes(V a, V b) {
  if constexpr (W == 16) {
    return Odd ? __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
               : __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  } else {
    return Odd ? __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15) : __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
  }
}
// The 4 x 4 input values of the tiles from tile column x0 (r[i]: band row 2 ty + i of a channel):
// along each row (x[2t] - x[2t+2], x[2t+1] + x[2t+2], x[2t+2] - x[2t+1], x[2t+1] - x[2t+3]),
// then the same across the rows (row 0 - row 2, 1 + 2, 2 - 1, 1 - 3); value (i, j) of V stored
// at v + (i*4 + j) * vs, N lanes. Reads 2W floats from r[i] + 2 x0 and from 2 further on.
// A run of N tiles' vector: 8 lanes for runs of 1 to 8, 16 for runs of 16.
template <int N> using WinogradVector = std::conditional_t<N == 16, f32x16, f32x8>;
template <int N>
PC_INLINE void winogradInput(const float* const* r, int64_t x0, float* PC_RESTRICT v, int64_t vs) {
  static_assert((0 < N && N <= 8) || N == 16, "runs of 1 to 8 or 16 tiles");
  typedef WinogradVector<N> V;
  constexpr int W = sizeof(V) / sizeof(float);
  V q[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const float* p = r[i] + 2 * x0;
    const V l0 = loadv<V>(p), l1 = loadv<V>(p + W), l2 = loadv<V>(p + 2), l3 = loadv<V>(p + W + 2);
    const V a = halfLanes<V, W, false>(l0, l1), b = halfLanes<V, W, true>(l0, l1);
    const V c = halfLanes<V, W, false>(l2, l3), d = halfLanes<V, W, true>(l2, l3);
    q[i][0] = a - c;
    q[i][1] = b + c;
    q[i][2] = c - b;
    q[i][3] = b - d;
  }
  auto store = [](float* p, V x) {
    if constexpr (N == 16) storev(p, x);
    else storeFirst8<N>(p, x);
  };
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    store(v + j * vs, q[0][j] - q[2][j]);
    store(v + (4 + j) * vs, q[1][j] + q[2][j]);
    store(v + (8 + j) * vs, q[2][j] - q[1][j]);
    store(v + (12 + j) * vs, q[1][j] - q[3][j]);
  }
}
// The outputs of a run of N tiles from their 16 products (i, j) at m + (i*4 + j) * ms (W lanes
// read): along each row ((m0 + m1) + m2, (m1 - m2) - m3), then across the rows the same, plus
// `bias`; output row 0's 2N values (lanes interleaved: tile t's two columns) to y0, row 1's to y1.
template <int N>
PC_INLINE void winogradOutput(const float* PC_RESTRICT m, int64_t ms, float bias, float* PC_RESTRICT y0, float* PC_RESTRICT y1) {
  static_assert((0 < N && N <= 8) || N == 16, "runs of 1 to 8 or 16 tiles");
  typedef WinogradVector<N> V;
  V s[4][2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const V a = loadv<V>(m + (4 * i) * ms), b = loadv<V>(m + (4 * i + 1) * ms), c = loadv<V>(m + (4 * i + 2) * ms),
            d = loadv<V>(m + (4 * i + 3) * ms);
    s[i][0] = (a + b) + c;
    s[i][1] = (b - c) - d;
  }
  const V bv = V{} + bias;
  float* const out[2] = {y0, y1};
  const V y00 = ((s[0][0] + s[1][0]) + s[2][0]) + bv, y01 = ((s[0][1] + s[1][1]) + s[2][1]) + bv;
  const V y10 = ((s[1][0] - s[2][0]) - s[3][0]) + bv, y11 = ((s[1][1] - s[2][1]) - s[3][1]) + bv;
  const V rows[2][2] = {{y00, y01}, {y10, y11}};
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    if constexpr (N == 16) {
      store16(out[i], __builtin_shufflevector(rows[i][0], rows[i][1], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23));
      store16(out[i] + 16, __builtin_shufflevector(rows[i][0], rows[i][1], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31));
    } else {
      // 2N columns: the first 8 from the low half's lanes, the rest from the high half's.
      const f32x8 lo = __builtin_shufflevector(rows[i][0], rows[i][1], 0, 8, 1, 9, 2, 10, 3, 11);
      storeFirst8<(2 * N < 8 ? 2 * N : 8)>(out[i], lo);
      if constexpr (N > 4) storeFirst8<2 * N - 8>(out[i] + 8, __builtin_shufflevector(rows[i][0], rows[i][1], 4, 12, 5, 13, 6, 14, 7, 15));
    }
  }
}
// Six (or two) contiguous rows by one panel (a linear layer's sextet without AVX-512, and the pair
// of rows below its last whole quad), each finished row handed to end(t, c, f32x16), as
// gemm_4x16_fin (finishTile).
template <class WT, class End>
PC_INLINE void gemm_6x16_fin(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, End end,
                             const float* PC_RESTRICT scale = nullptr) {
  finishTile<6, 16, WT>([&](auto e) { gemm_rxp_to<6, 1, 1>(K, Contiguous{}, x, w, bias, e, scale); },
                        [&](float* tile) { gemm_6x16(K, x, w, bias, reinterpret_cast<float (*)[16]>(tile), scale); }, end);
}
template <class WT, class End>
PC_INLINE void gemm_2x16_fin(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, End end,
                             const float* PC_RESTRICT scale = nullptr) {
  finishTile<2, 16, WT>([&](auto e) { gemm_rxp_to<2, 1, 1>(K, Contiguous{}, x, w, bias, e, scale); },
                        [&](float* tile) { gemm_2x16(K, x, w, bias, reinterpret_cast<float (*)[16]>(tile), scale); }, end);
}
// Eight contiguous rows by two panels, each finished row handed to end(t, c, f32x16) (RowsAt),
// as gemm_4x32_fin (finishTile).
template <class WT, class End>
PC_INLINE void gemm_8x32_fin(int64_t K, const float* const* x, const WT* PC_RESTRICT w, const float* PC_RESTRICT bias, End end,
                             const float* PC_RESTRICT scale = nullptr) {
  finishTile<8, 32, WT>([&](auto e) { gemm_rxp_to<8, 2, 1>(K, Contiguous{}, x, w, bias, e, scale); },
                        [&](float* tile) { gemm_8x32(K, x, w, bias, reinterpret_cast<float (*)[32]>(tile), scale); }, end);
}

// ---- dot products along k (Impl::DotRows: a linear layer of at most 12 outputs, w as the model
// has it, [N][K]). Rows x[0 .. R) by the N rows of w: lane l of sixteen partial sums takes k =
// 16i + l for ascending i (a multiply-add each; the lanes past K add +0 products), then lanes
// l + 8 into l, l + 4, l + 2, l + 1, and bias[n] last, into out[r][n]: the LLVM printer's order
// (Emitter::emitDotRows), so both backends give the same bits.
// x * w + acc in one rounding where the target has FMA (GCC left some of dotRows' products in a
// masked last block unfused under -ffp-contract=fast), as the LLVM printer's fmuladd is there;
// a multiply and an add where it has none, as fmuladd is there.
PC_INLINE f32x8 fmadd8(f32x8 x, f32x8 w, f32x8 acc) {
#if defined(__FMA__)
  return __builtin_ia32_vfmaddps256(x, w, acc);
#else
  return acc + x * w;
#endif
}
// A loaded vector kept in a register: GCC otherwise folds its load into every FMA that reads it
// (dotRows' 4 x 3 tile loaded each row and weight vector 3 and 4 times, 24 loads for 12 FMAs:
// td3_actor's head at batch 64 took 2.1x the LLVM build's time on an AMD host, whose cores issue
// fewer 512-bit loads than FMAs a cycle).
template <class V> PC_INLINE V inRegister(V v) {
  __asm__("" : "+v"(v));
  return v;
}
template <int R, int N>
PC_INLINE void dotRows(int64_t K, const float* const* x, const float* PC_RESTRICT w, const float* PC_RESTRICT bias, float (*out)[16]) {
  static_assert(R >= 1 && R <= 4 && N >= 1 && N <= 16 && R * N <= 16, "dot_rows tile");
#if defined(__AVX512F__)
  f32x16 acc[R][N] = {};
  auto step = [&](auto load) {  // one block of 16 k's: load(p) its 16 floats from p
    f32x16 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = inRegister(load(x[r]));
    for (int n = 0; n < N; ++n) {
      const f32x16 wv = inRegister(load(w + n * K));
      for (int r = 0; r < R; ++r) acc[r][n] = __builtin_ia32_vfmaddps512_mask(xv[r], wv, acc[r][n], 0xffff, 4 /* current rounding */);
    }
  };
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) step([&](const float* p) { return load16(p + k); });
  if (k < K) {
    const unsigned short m = static_cast<unsigned short>((1u << (K - k)) - 1u);
    step([&](const float* p) { return __builtin_ia32_loadups512_mask(p + k, f32x16{}, m); });
  }
  auto sum8 = [&](int r, int n) { return lo8(acc[r][n]) + hi8(acc[r][n]); };
#else
  // Without AVX-512 each block as its two halves (lanes 0-7, 8-15): lane by lane the same sums.
  f32x8 acc[R][N][2] = {};
  auto step = [&](auto load) {
    for (int h = 0; h < 2; ++h) {
      f32x8 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = inRegister(load(x[r], h));
      for (int n = 0; n < N; ++n) {
        const f32x8 wv = inRegister(load(w + n * K, h));
        for (int r = 0; r < R; ++r) acc[r][n][h] = fmadd8(xv[r], wv, acc[r][n][h]);
      }
    }
  };
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) step([&](const float* p, int h) { return load8(p + k + 8 * h); });
  if (k < K) {
    step([&](const float* p, int h) {
      float t[8] = {};
      for (int64_t l = 0; l < 8 && k + 8 * h + l < K; ++l) t[l] = p[k + 8 * h + l];
      return load8(t);
    });
  }
  auto sum8 = [&](int r, int n) { return acc[r][n][0] + acc[r][n][1]; };
#endif
  if constexpr (N == 1) {
    for (int r = 0; r < R; ++r) {
      const f32x8 s8 = sum8(r, 0);
      const f32x4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
      out[r][0] = ((s4[0] + s4[2]) + (s4[1] + s4[3])) + bias[0];
    }
    return;
  }
  // Four outputs at a time, transposed so that lane j sums output n0 + j: the same additions.
  // bias and out have 16 columns: the lanes past N compute what is never read.
  for (int r = 0; r < R; ++r) {
    for (int n0 = 0; n0 < N; n0 += 4) {
      f32x4 s4[4];
      for (int j = 0; j < 4; ++j) {
        const f32x8 s8 = n0 + j < N ? sum8(r, n0 + j < N ? n0 + j : 0) : f32x8{};
        s4[j] = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
      }
      const f32x4 u01 = __builtin_shufflevector(s4[0], s4[1], 0, 4, 1, 5), u23 = __builtin_shufflevector(s4[0], s4[1], 2, 6, 3, 7);
      const f32x4 v01 = __builtin_shufflevector(s4[2], s4[3], 0, 4, 1, 5), v23 = __builtin_shufflevector(s4[2], s4[3], 2, 6, 3, 7);
      const f32x4 l0 = __builtin_shufflevector(u01, v01, 0, 1, 4, 5), l1 = __builtin_shufflevector(u01, v01, 2, 3, 6, 7);
      const f32x4 l2 = __builtin_shufflevector(u23, v23, 0, 1, 4, 5), l3 = __builtin_shufflevector(u23, v23, 2, 3, 6, 7);
      f32x4 b;
      std::memcpy(&b, bias + n0, sizeof b);
      const f32x4 t = ((l0 + l2) + (l1 + l3)) + b;
      std::memcpy(&out[r][n0], &t, sizeof t);
    }
  }
}

// ---- threads. A run with threads > 1 splits each large kernel's outer iteration space into
// contiguous chunks of whole units (rows, row quads x weight panels, position quads); a unit is
// computed by the same code whichever thread runs it, so results are bitwise identical for every
// thread count. The workers live in one pool per loaded model, created on the first run that asks
// for them; a dispatch allocates nothing. A run that finds the pool busy (another caller's run
// is using it) runs its chunks itself.

#if defined(__x86_64__) || defined(__i386__)
PC_INLINE void cpuRelax() { __builtin_ia32_pause(); }
#else
PC_INLINE void cpuRelax() {}
#endif

// (pthreads, not <thread>: the C++ thread headers would double the time to compile a model.)
class Pool {
 public:
  static constexpr int kMaxWorkers = 63;
  typedef void (*Task)(void* ctx, int chunk);

  static Pool& get() {
    static Pool pool;
    return pool;
  }

  // 0 on a thread that calls run, i on the pool's i-th worker (the trace's tracks).
  static int& threadIndex() {
    static thread_local int index = 0;
    return index;
  }

  // Runs task(ctx, c) for every c in [0, chunks) on `threads` threads, the caller's among them;
  // returns when all ran.
  void run(int threads, int chunks, Task task, void* ctx) {
    if (getpid() != pid_) afterFork();
    if (pthread_mutex_trylock(&busy_) != 0) {
      for (int c = 0; c < chunks; ++c) task(ctx, c);
      return;
    }
    ensureWorkers((threads < chunks ? threads : chunks) - 1);  // best effort: the caller claims whatever no worker does
    task_ = task;
    ctx_ = ctx;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = ((state_.load(std::memory_order_relaxed) >> 32) + 1) & 0xffffffffu;
    callerCpu_.store(sched_getcpu(), std::memory_order_relaxed);
    pthread_mutex_lock(&wake_);
    // Generation in the high half, the number of chunks and the next unclaimed one below.
    state_.store(gen << 32 | static_cast<uint64_t>(chunks) << 16, std::memory_order_release);
    // Only workers that no earlier run has woken yet: one woken but not yet running (its core
    // busy with another process) needs no second wake-up, and a wake-up is a system call.
    const bool sleepers = sleeping_.load(std::memory_order_relaxed) > 0;
    sleeping_.store(0, std::memory_order_relaxed);
    pthread_mutex_unlock(&wake_);
    if (sleepers) {
      alive_.store(nowNs(), std::memory_order_relaxed);  // expected up soon
      pthread_cond_broadcast(&wakeCv_);
    }
    const uint64_t t0 = nowNs();
    const int mine = claim(gen, false);
    // The workers hold at most one chunk each when the caller runs out: a worker that is running
    // ends it within about a chunk's time, so the caller spins twice its own chunks' mean time
    // (kCallerMinSpinNs..kCallerSpinNs). A worker that takes longer has most likely been
    // preempted, and the caller goes to sleep: its core idle, the scheduler moves the worker
    // there at once, where a spinning caller would keep it waiting for its own core's next turn.
    const uint64_t perChunk = mine > 0 ? (nowNs() - t0) / static_cast<uint64_t>(mine) : kCallerSpinNs;
    waitDone(chunks, perChunk * 2 < kCallerMinSpinNs ? kCallerMinSpinNs : perChunk * 2 > kCallerSpinNs ? kCallerSpinNs : perChunk * 2);
    pthread_mutex_unlock(&busy_);
  }

  // Whether a worker is likely to take part in a run now: one spinning or woken in the last
  // kAbsentNs, or one asleep that the run would wake. No: the workers are awake but have not run
  // for that long, their cores taken by other processes (a woken thread waits for the running
  // one's time slice, milliseconds); the caller would run every chunk itself, paying for the
  // split (each chunk's setup, a conv's rows read twice at chunk edges) for nothing.
  bool workersAround() const {
    if (started_.load(std::memory_order_relaxed) == 0 || sleeping_.load(std::memory_order_relaxed) > 0) return true;
    if (nowNs() - alive_.load(std::memory_order_relaxed) < kAbsentNs) return true;
    return getpid() != pid_;  // a child of fork(): run() starts its workers anew (a system call: only here)
  }
  static constexpr uint64_t kAbsentNs = 50000;

  ~Pool() {
    // Held for good: a run that starts after this (a thread still calling at exit) finds the pool
    // busy and runs its chunks itself.
    pthread_mutex_lock(&busy_);
    pthread_mutex_lock(&wake_);
    stop_ = true;
    pthread_mutex_unlock(&wake_);
    pthread_cond_broadcast(&wakeCv_);
    for (int i = 0; i < workers_; ++i) pthread_join(threads_[i], nullptr);
  }

 private:
  Pool() = default;

  // In a child of fork() the workers do not exist and the locks may have been copied held: start
  // over with none (they are created again on demand).
  void afterFork() {
    pid_ = getpid();
    workers_ = 0;
    started_.store(0, std::memory_order_relaxed);  // the child's workers are numbered from 1 again
    sleeping_.store(0, std::memory_order_relaxed);
    stop_ = false;
    pthread_mutex_init(&busy_, nullptr);
    pthread_mutex_init(&wake_, nullptr);
    pthread_cond_init(&wakeCv_, nullptr);
    pthread_cond_init(&doneCv_, nullptr);
    callerWaiting_.store(false, std::memory_order_relaxed);
  }

  void ensureWorkers(int n) {
    if (n > kMaxWorkers) n = kMaxWorkers;
    // A thread that cannot be started (a resource limit) leaves its chunks to the others.
    while (workers_ < n && pthread_create(&threads_[workers_], nullptr, &Pool::main, this) == 0) ++workers_;
  }
  static void* main(void* self) {
    Pool* pool = static_cast<Pool*>(self);
    threadIndex() = pool->started_.fetch_add(1, std::memory_order_relaxed) + 1;
    pool->work();
    return nullptr;
  }

  // Claims and runs chunks of generation `gen` until none is left; returns how many it ran.
  int claim(uint64_t gen, bool worker) {
    uint64_t s = state_.load(std::memory_order_acquire);
    int ran = 0;
    for (;;) {
      if (s >> 32 != gen) return ran;
      const uint64_t chunks = s >> 16 & 0xffff, next = s & 0xffff;
      if (next >= chunks) return ran;
      if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      task_(ctx_, static_cast<int>(next));
      ++ran;
      if (worker) alive_.store(nowNs(), std::memory_order_relaxed);  // seen by the caller with done_
      // (seq_cst, with callerWaiting_: the caller sees this chunk done or this thread sees it asleep)
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<int>(chunks) &&
          callerWaiting_.load(std::memory_order_seq_cst)) {
        pthread_mutex_lock(&wake_);
        pthread_cond_signal(&doneCv_);
        pthread_mutex_unlock(&wake_);
      }
      s = state_.load(std::memory_order_acquire);
    }
  }

  // The caller, its own chunks done, waits for the workers' chunks: spinning up to spinNs (a chunk
  // claimed by a running worker ends about when the caller's does), then asleep. Not spinning on:
  // on a machine where other processes want the cores, a worker that claimed a chunk may have been
  // preempted, and a caller that keeps its core busy keeps the scheduler from moving the worker
  // there; asleep, the core is free and an idle core pulls a waiting thread at once.
  void waitDone(int chunks, uint64_t spinNs) {
    const uint64_t t0 = nowNs();
    for (int spin = 1; done_.load(std::memory_order_acquire) < chunks; ++spin) {
      cpuRelax();
      if (spin % 64 == 0) sched_yield();  // a worker the scheduler put on this core runs now
      if (spin % 16 == 0 && nowNs() - t0 > spinNs) {
        pthread_mutex_lock(&wake_);
        callerWaiting_.store(true, std::memory_order_seq_cst);
        while (done_.load(std::memory_order_seq_cst) < chunks) pthread_cond_wait(&doneCv_, &wake_);
        callerWaiting_.store(false, std::memory_order_relaxed);
        pthread_mutex_unlock(&wake_);
        return;
      }
    }
  }
  static constexpr uint64_t kCallerSpinNs = 1000000, kCallerMinSpinNs = 10000, kWorkerSpinNs = 200000, kWorkerMinSpinNs = 5000;

  void work() {
    uint64_t seen = state_.load(std::memory_order_acquire) >> 32;
    // How long this worker spins before it sleeps, adapted to the gaps it meets: halved after a
    // spin that found no work (down to kWorkerMinSpinNs), doubled after one that did (up to
    // kWorkerSpinNs). A model whose parallel kernels come back to back keeps its workers spinning
    // between them; one with a single parallel kernel a call (atari_cnn at batch 1: its linear
    // layer, then 250 us of serial convs) stops spinning through the serial part, where a spinning
    // worker that shares the caller's core takes half of it.
    uint64_t spinNs = kWorkerSpinNs;
    for (;;) {
      uint64_t gen = seen;
      // Spin a little first: a run dispatches its kernels back to back. Only a little: a worker
      // spinning through a long stretch of serial work keeps a core busy that the thread doing
      // that work (or another process) could run on, and the scheduler moves threads to an idle
      // core, not to one a spinner occupies.
      const uint64_t t0 = nowNs();
      for (int spin = 1; gen == seen; ++spin) {
        cpuRelax();
        gen = state_.load(std::memory_order_acquire) >> 32;
        if (spin % 64 == 0) {
          const uint64_t now = nowNs();
          alive_.store(now, std::memory_order_relaxed);
          if (now - t0 > spinNs) break;
          // On the caller's core (the scheduler put both there), the caller runs now: a spinning
          // worker would hold it back. Not elsewhere: a yield to another process's thread would
          // hand it the core for a whole time slice (milliseconds), during which this worker
          // takes no part in the runs.
          if (sched_getcpu() == callerCpu_.load(std::memory_order_relaxed)) sched_yield();
        }
      }
      spinNs = gen == seen ? (spinNs / 2 > kWorkerMinSpinNs ? spinNs / 2 : kWorkerMinSpinNs)
                           : (spinNs * 2 < kWorkerSpinNs ? spinNs * 2 : kWorkerSpinNs);
      if (gen == seen) {
        pthread_mutex_lock(&wake_);
        // sleeping_: the workers waiting that no run has woken (a run zeroes it as it wakes them;
        // one waking for another reason counts itself again: at worst a wake-up too many).
        while (!stop_ && (gen = state_.load(std::memory_order_acquire) >> 32) == seen) {
          sleeping_.fetch_add(1, std::memory_order_relaxed);
          pthread_cond_wait(&wakeCv_, &wake_);
        }
        alive_.store(nowNs(), std::memory_order_relaxed);
        const bool stop = stop_;
        pthread_mutex_unlock(&wake_);
        if (stop) return;
      }
      seen = gen;
      claim(gen, true);
    }
  }

  pthread_mutex_t busy_ = PTHREAD_MUTEX_INITIALIZER;  // one run at a time uses the workers
  pthread_mutex_t wake_ = PTHREAD_MUTEX_INITIALIZER;  // guards stop_, sleeping_ and the wake-up
  pthread_cond_t wakeCv_ = PTHREAD_COND_INITIALIZER;
  pthread_cond_t doneCv_ = PTHREAD_COND_INITIALIZER;  // the last chunk is done (a sleeping caller waits on it)
  std::atomic<bool> callerWaiting_{false};
  std::atomic<int> sleeping_{0};  // changed under wake_; read without it by workersAround
  std::atomic<int> callerCpu_{-1};  // the core of the thread that called the latest run
  std::atomic<uint64_t> alive_{0};  // when a worker was last seen spinning, or last woken (nowNs)
  bool stop_ = false;
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_{0};
  std::atomic<int> started_{0};  // workers ever started: their thread indices
  Task task_ = nullptr;
  void* ctx_ = nullptr;
  pthread_t threads_[kMaxWorkers];
  int workers_ = 0;
  pid_t pid_ = getpid();
};

// Runs f(lo, hi) over [0, units) split into at most `threads` contiguous chunks, fewer when a
// chunk would hold less than minChunkCost of work (costPerUnit: about one multiply-add each).
// With `trace` (a profiled run), every chunk is also a trace event of the thread that ran it.
// Chunks per thread of a parallel kernel: whoever runs claims the next chunk, so on a machine
// where another process takes part of a core, the threads that do run take most of the work
// (with one chunk per thread, a thread at half speed would double the kernel's time).
constexpr int64_t kChunksPerThread = 4;
// How many chunks parallelFor makes (chunk c: units [units * c / chunks, units * (c + 1) / chunks)).
PC_INLINE int64_t chunkCount(int32_t threads, int64_t units, double costPerUnit, double minChunkCost) {
  const int64_t t = threads > Pool::kMaxWorkers + 1 ? Pool::kMaxWorkers + 1 : threads;
  int64_t chunks = t <= 1 ? t : t * kChunksPerThread;
  if (chunks > units) chunks = units;
  const double byCost = static_cast<double>(units) * costPerUnit / (minChunkCost > 0 ? minChunkCost : 1e-300);
  if (byCost < static_cast<double>(chunks)) chunks = static_cast<int64_t>(byCost);
  return chunks;
}
template <class F>
PC_INLINE void parallelFor(int32_t threads, int64_t units, double costPerUnit, double minChunkCost, const F& f,
                           const ChunkTrace* trace = nullptr) {
  const int64_t chunks = chunkCount(threads, units, costPerUnit, minChunkCost);
  if (chunks <= 1 || !Pool::get().workersAround()) {
    if (units > 0) f(int64_t{0}, units);
    return;
  }
  struct Ctx {
    const F* f;
    int64_t units, chunks;
    const ChunkTrace* trace;
  } ctx{&f, units, chunks, trace};
  Pool::get().run(threads, static_cast<int>(chunks), [](void* p, int c) {
    const Ctx& x = *static_cast<const Ctx*>(p);
    const uint64_t t0 = x.trace ? nowNs() : 0;
    (*x.f)(x.units * c / x.chunks, x.units * (c + 1) / x.chunks);
    if (const ChunkTrace* t = x.trace) {
      traceEvent(t->trace, t->capacity, t->count, t->kernel, Pool::threadIndex(), t->batch, t0, nowNs() - t0);
    }
  }, &ctx);
}

// A kernel function of a generated model: (inputs, outputs, batch, workspace, status, lo, hi).
using KernelFn = void (*)(const void* const*, void* const*, int64_t, unsigned char*, int*, int64_t, int64_t);

// Runs a kernel's units [0, units) split between threads, out of line: the run function is one
// call per kernel instead of one inlined parallelFor each, so a model of thousands of kernels
// still compiles in time linear in their number.
[[maybe_unused]] static __attribute__((noinline)) void runKernel(KernelFn fn, int32_t threads, int64_t units, double costPerUnit,
                                                                  double minChunkCost, const void* const* inputs,
                                                                  void* const* outputs, int64_t batch, unsigned char* ws,
                                                                  int* status, const ChunkTrace* trace = nullptr) {
  parallelFor(threads, units, costPerUnit, minChunkCost,
              [&](int64_t lo, int64_t hi) { fn(inputs, outputs, batch, ws, status, lo, hi); }, trace);
}

// ---- row blocks (Schedule::rowBlock). A model whose rows are independent runs a large batch
// `block` rows at a time, each block through every kernel, so that a block's activations stay in
// a core's cache. With threads > 1 and enough blocks, the threads take whole blocks instead of
// splitting each kernel: each runs its blocks on one thread in its own slot of the workspace
// (the caller's workspace holds as many slots of a block's size as fit), claiming the next block
// when done. One wait a run instead of one a kernel: a thread that another process preempts
// delays only the block it holds, and no kernel is cut into chunks whose edges cost extra.
// Blocks are a multiple of 4 rows whatever the thread count (a linear layer's row quads fall as
// in a whole-batch run): the same bits at every thread count.

// A model's kernels on `batch` rows from `first_row` on (inputs and outputs advanced to it).
typedef int (*RunRowsFn)(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace, int32_t threads,
                         int64_t first_row);

struct RowBlocks {
  RunRowsFn rows;
  size_t (*workspaceBytes)(int64_t batch);
  int64_t block;  // rows a block
  int64_t maxBatch;
  const int64_t* inputRowBytes;  // bytes a row of each input, each output
  int32_t numInputs;
  const int64_t* outputRowBytes;
  int32_t numOutputs;
};

[[maybe_unused]] static __attribute__((noinline)) int runRowBlocks(const RowBlocks& m, const void* const* inputs,
                                                                    void* const* outputs, int64_t batch, void* workspace,
                                                                    int32_t threads) {
  if (batch <= m.block) return m.rows(inputs, outputs, batch, workspace, threads, 0);
  if (batch > m.maxBatch) return POLICYC_ERROR_ARGUMENT;
  const size_t slotBytes = (m.workspaceBytes(m.block) + 63) / 64 * 64;
  const int64_t slots = slotBytes == 0 ? int64_t{Pool::kMaxWorkers + 1} : static_cast<int64_t>(m.workspaceBytes(batch) / slotBytes);
  int64_t lanes = threads < slots ? threads : slots;
  if (lanes > Pool::kMaxWorkers + 1) lanes = Pool::kMaxWorkers + 1;
  // Threads take whole blocks where each gets two or more (else a thread idles at the end for a
  // block's time: each kernel is split between the threads instead). The first rows run alone,
  // with the caller's arguments, which that run checks: four rows (the least a block holds), then
  // the rest in blocks of about m.block rows, as many as make a multiple of the threads.
  const int64_t head = lanes >= 2 && batch - 4 >= 2 * lanes * m.block ? 4 : m.block;
  const int first = m.rows(inputs, outputs, head, workspace, threads, 0);
  if (first != POLICYC_OK) return first;
  const int64_t rest = batch - head;
  int64_t block = m.block;
  if (head == 4) {
    int64_t blocks = (rest + block - 1) / block;
    blocks = (blocks + lanes - 1) / lanes * lanes;
    block = ((rest + blocks - 1) / blocks + 3) / 4 * 4;
  } else {
    lanes = 1;
  }
  struct Lanes {
    const RowBlocks* m;
    const void* const* inputs;
    void* const* outputs;
    int64_t batch, head, block, blocks;
    unsigned char* workspace;
    size_t slotBytes;
    int32_t threads;  // each block's threads: 1 when the threads take whole blocks
    std::atomic<int64_t> next{0};
    std::atomic<int> rc{POLICYC_OK};
    // Runs blocks from `next` on in workspace slot `slot` until none is left or one failed.
    void lane(int slot) {
      const void** ins = static_cast<const void**>(__builtin_alloca(sizeof(void*) * (m->numInputs + 1)));
      void** outs = static_cast<void**>(__builtin_alloca(sizeof(void*) * (m->numOutputs + 1)));
      for (int64_t b; rc.load(std::memory_order_relaxed) == POLICYC_OK && (b = next.fetch_add(1, std::memory_order_relaxed)) < blocks;) {
        const int64_t r = head + b * block;
        for (int32_t i = 0; i < m->numInputs; ++i) ins[i] = static_cast<const unsigned char*>(inputs[i]) + r * m->inputRowBytes[i];
        for (int32_t i = 0; i < m->numOutputs; ++i) outs[i] = static_cast<unsigned char*>(outputs[i]) + r * m->outputRowBytes[i];
        const int got = m->rows(ins, outs, batch - r < block ? batch - r : block, workspace + slot * slotBytes, threads, r);
        if (got != POLICYC_OK) rc.store(got, std::memory_order_relaxed);
      }
    }
  } run{&m, inputs, outputs, batch, head, block, (rest + block - 1) / block, static_cast<unsigned char*>(workspace), slotBytes,
        lanes >= 2 ? 1 : threads};
  if (lanes < 2) {
    run.lane(0);
  } else {
    Pool::get().run(static_cast<int>(lanes), static_cast<int>(lanes), [](void* p, int c) { static_cast<Lanes*>(p)->lane(c); }, &run);
  }
  return run.rc.load(std::memory_order_relaxed);
}

template <class T> PC_INLINE T inf() { return std::numeric_limits<T>::infinity(); }
template <class T> PC_INLINE T nan() { return std::numeric_limits<T>::quiet_NaN(); }

// NaN-propagating min and max (ONNX: max(NaN, x) = NaN).
// The first NaN, else the larger (smaller); ties keep a. Selects, so that loops of them vectorise;
// b's NaN folded into the comparison's select (as LLVM does: one select fewer a vector).
template <class T> PC_INLINE T maxNaN(T a, T b) {
  const T m = (a < b) | (b != b) ? b : a;
  return a != a ? a : m;
}
// maxNaN for a running maximum: branches, which a scan predicts (the maximum rarely changes),
// where selects would put the comparison on the loop's dependency chain (measured 3x slower).
template <class T> PC_INLINE T maxNaNScan(T a, T b) {
  if (a != a || b != b) return a != a ? a : b;
  return a < b ? b : a;
}
// v > r ? v : r, as one maxss (its very semantics): GCC made the select a compare, a
// conditional move and two moves between the vector and integer registers, 10 cycles a value.
PC_INLINE float maxSel(float v, float r) {
#ifdef __SSE__
  return __builtin_ia32_maxss(f32x4{v, 0, 0, 0}, f32x4{r, 0, 0, 0})[0];
#else
  return v > r ? v : r;
#endif
}
// a > b ? a : b on a vector of floats as one maxps (its very semantics, a NaN or equal zeros
// included): GCC made the select a compare and a blend, two instructions on a running maximum's
// dependency chain.
template <class V> PC_INLINE V maxps(V a, V b) {
#if defined(__AVX512F__) && !defined(__clang__)
  if constexpr (sizeof(V) == 64) return __builtin_ia32_maxps512_mask(a, b, a, static_cast<unsigned short>(0xffff), 4);
#endif
#if defined(__AVX__) && !defined(__clang__)
  if constexpr (sizeof(V) == 32) return __builtin_ia32_maxps256(a, b);
#endif
  return a > b ? a : b;
}
// The vector V{g(0), g(1), ...} built as one vector expression (lane by lane GCC inserted the
// values one at a time, even where g reads consecutive floats: a load).
template <class V, class G, int... L> PC_INLINE V lanesOf(G g, std::integer_sequence<int, L...>) {
  return V{g(L)...};
}
template <class V, class G> PC_INLINE V lanesOf(G g) {
  return lanesOf<V>(g, std::make_integer_sequence<int, sizeof(V) / sizeof(float)>{});
}
// The lanes of two 16-lane vectors where cmpps's predicate Pred holds (0: equal, 3: unordered) as
// bits: one compare into a mask register under AVX-512, where GCC turned a vector compare's
// result into bits lane by lane (argmax over 1024 took 5x LLVM's time there).
#if defined(__AVX512F__) && !defined(__clang__)
template <int Pred> PC_INLINE uint32_t laneBits16(f32x16 a, f32x16 b) {
  return __builtin_ia32_cmpps512_mask(a, b, Pred, static_cast<unsigned short>(0xffff), 4);  // _MM_FROUND_CUR_DIRECTION
}
#endif
// The index of the first (Last: the last) of f(0), ..., f(n - 1) equal to m, n if none (below).
template <bool Last, class F> PC_INLINE int64_t findEqual(int64_t n, float m, F f);
// Whether any of the values a row maximum's steps saw is NaN (pc::maxOf): `add` flags one step's
// vector, `merge` takes another set's flags.
#if defined(__AVX512F__) && !defined(__clang__)
// The lanes with no NaN so far as a mask, each step one compare masked by it (ordered: no NaN),
// which stays in a mask register: moved to an integer register and or'ed there each step, the
// flags cost two more instructions a step (reduce_max over 256 took 1.3x LLVM's time).
struct NanFlags {
  unsigned short ok = 0xffff;
  __attribute__((always_inline)) void add(f32x16 v) { ok = __builtin_ia32_cmpps512_mask(v, v, 7, ok, 4); }  // _CMP_ORD_Q
  __attribute__((always_inline)) void merge(NanFlags o) { ok &= o.ok; }
  __attribute__((always_inline)) bool any() const { return ok != 0xffff; }
};
#else
template <class V> struct NanFlags {
  decltype(V{} < V{}) lanes = {};
  __attribute__((always_inline)) void add(V v) { lanes |= v != v; }
  __attribute__((always_inline)) void add(V v, V u) { lanes |= eitherNaN(v, u); }  // one compare for both (as LLVM does)
  __attribute__((always_inline)) void merge(NanFlags o) { lanes |= o.lanes; }
  __attribute__((always_inline)) bool any() const {
#if defined(__AVX__) && !defined(__clang__)
    if constexpr (sizeof(V) == sizeof(f32x8)) return __builtin_ia32_movmskps256(reinterpret_cast<f32x8>(lanes)) != 0;
#endif
    int32_t a = 0;
    for (size_t l = 0; l < sizeof(V) / sizeof(float); ++l) a |= lanes[l];
    return a != 0;
  }
};
#endif
// The maximum of f(0), ..., f(n - 1) for f32 values (-inf when n is 0): sixteen running maxima as
// selects on vectors (maxps), NaN flags beside them (NanFlags), the lanes halved in registers,
// then the tail (a short row) through maxSel. A running maximum through maxNaNScan is a branch
// per value, and GCC does not vectorise a select chain on floats without -ffinite-math-only.
// Exactly the reference's value: NaN (the quiet one) when a value is NaN, and for a zero maximum
// the first zero (its sign), found by findEqual's vector scan then.
template <class F> PC_INLINE float maxOf(int64_t n, F f) {
  // The sixteen lanes as one vector of the target's width or two (GCC lowers a select or compare
  // on a vector wider than the target's lane by lane).
#if defined(__AVX512F__)
  typedef f32x16 MV;
#else
  typedef f32x8 MV;
#endif
  constexpr int W = sizeof(MV) / sizeof(float);
#if defined(__AVX512F__) && !defined(__clang__)
  using MI = NanFlags;
#else
  using MI = NanFlags<MV>;
#endif
  MV m0 = splatv(MV{}, -inf<float>()), m1 = m0;
  MI nan0;
  // Sixteen values into m0 (W = 16) or m0 and m1 (W = 8), their NaN lanes into n0.
  auto step16 = [&](int64_t i, MV& a0, MV& a1, MI& n0) {
    MV v;
    for (int l = 0; l < W; ++l) v[l] = f(i + l);  // one vector load where f reads consecutive floats
    a0 = maxps(v, a0);
#if defined(__AVX512F__)
    (void)a1;
    n0.add(v);
#else
    MV u;
    for (int l = 0; l < W; ++l) u[l] = f(i + W + l);
    a1 = maxps(u, a1);
    n0.add(v, u);  // the flags were a third of the work with a compare each
#endif
  };
  int64_t i = 0;
  if (n >= 32) {
    // Thirty-two values a step into two sets of running maxima (as Emitter::maxOf): one
    // set's maxps is a chain of dependent instructions (3 cycles each), twice as slow over 1024.
    MV m2 = m0, m3 = m0;
    MI nan2;
    for (; i + 32 <= n; i += 32) {
      step16(i, m0, m1, nan0);
      step16(i + 16, m2, m3, nan2);
    }
    m0 = maxps(m2, m0), m1 = maxps(m3, m1);
    nan0.merge(nan2);
  }
  if (i + 16 <= n) {
    step16(i, m0, m1, nan0);
    i += 16;
  }
  float r = -inf<float>();
  int32_t anyNan = 0;  // or'ed, not a branch per lane
  if (i > 0) {
    // The lanes' maximum (any order gives the same value: equal non-zero values are one value, a
    // zero maximum is looked up below, a NaN is flagged apart).
    anyNan = nan0.any();
#if defined(__AVX__) && !defined(__clang__)
    // By halving the vector (no lane holds a NaN: maxps keeps the running maximum over one),
    // where the lanes went one at a time through maxSel.
#if defined(__AVX512F__)
    const f32x8 m8 = maxps(lo8(m0), hi8(m0));
#else
    const f32x8 m8 = maxps(m1, m0);
#endif
    f32x4 h = __builtin_ia32_maxps(__builtin_shufflevector(m8, m8, 0, 1, 2, 3), __builtin_shufflevector(m8, m8, 4, 5, 6, 7));
    h = __builtin_ia32_maxps(h, __builtin_shufflevector(h, h, 2, 3, 0, 1));
    h = __builtin_ia32_maxps(h, __builtin_shufflevector(h, h, 1, 0, 3, 2));
    r = h[0];
#else
    if constexpr (W == 8) m0 = maxps(m1, m0);
    for (int l = 0; l < W; ++l) r = maxSel(m0[l], r);
#endif
  }
  for (; i < n; ++i) {  // the tail, or a short row
    const float v = f(i);
    r = maxSel(v, r);
    anyNan |= v != v;
  }
  if (anyNan) return pc::nan<float>();
  // The first zero, by the vector scan: a scalar loop here had GCC load f(0) ahead of it and then
  // build an argmax scan's first vector lane by lane around that load.
  if (r == 0.0f) return f(findEqual<false>(n, 0.0f, f));
  return r;
}
// Bit l set where f(i + l) == m, for l in [0, 16): the sixteen values compared as vectors of the
// target's width, the masks gathered by movemask.
template <class F> PC_INLINE uint32_t equalBits16(int64_t i, float m, F f) {
#if defined(__AVX512F__)
  // One vector load where f reads consecutive floats, built as one vector expression: lane by
  // lane, GCC inserted the first step's sixteen values one at a time (masked broadcasts).
  const f32x16 v = lanesOf<f32x16>([&](int l) { return f(i + l); });
#if !defined(__clang__)
  return laneBits16<0>(v, splatv(f32x16{}, m));  // _CMP_EQ_OQ
#else
  const auto eq = v == splatv(f32x16{}, m);
  uint32_t bits = 0;
  for (int l = 0; l < 16; ++l) bits |= static_cast<uint32_t>(eq[l] & 1) << l;
  return bits;
#endif
#else
  f32x8 v0, v1;
  for (int l = 0; l < 8; ++l) v0[l] = f(i + l), v1[l] = f(i + 8 + l);
  const f32x8 mv = splatv(f32x8{}, m);
#if defined(__AVX__) && !defined(__clang__)
  const i32x8 e0 = v0 == mv, e1 = v1 == mv;
  // Most steps hold no match: one movemask of both halves tells.
  if (__builtin_ia32_movmskps256(reinterpret_cast<f32x8>(e0 | e1)) == 0) return 0;
  return static_cast<uint32_t>(__builtin_ia32_movmskps256(reinterpret_cast<f32x8>(e0))) |
         static_cast<uint32_t>(__builtin_ia32_movmskps256(reinterpret_cast<f32x8>(e1))) << 8;
#else
  const auto e0 = v0 == mv, e1 = v1 == mv;
  uint32_t bits = 0;
  for (int l = 0; l < 8; ++l) bits |= static_cast<uint32_t>(e0[l] & 1) << l | static_cast<uint32_t>(e1[l] & 1) << (l + 8);
  return bits;
#endif
#endif
}
// A short row (N <= 16 values f(0), ..., f(N - 1)) as two vectors of 8, -inf past its end, for
// maxShort and argmaxShort: no branch on where its maximum lies, which a predictor cannot know
// (GCC made a select chain over a row branch on each value: argmax over 6 values took 2x LLVM's
// time, and a chain of eight maxss a softmax's row of 8 1.3x).
// Values Base .. Base + 7 of a row of N, f(0), ..., f(N - 1), as one vector (-inf past the row).
// Built as one vector expression (lanesOf): lane by lane, GCC went through the stack (small
// stores, then one wide load: a failed store forwarding on each row).
template <int Base, int N, class F> PC_INLINE f32x8 rowLanes8(F f) {
  return lanesOf<f32x8>([&](int l) { return Base + l < N ? f(Base + l) : -inf<float>(); });
}
template <int N> struct ShortRow {
  static_assert(0 < N && N <= 16, "a short row");
  f32x8 v0, v1;
  template <class F> __attribute__((always_inline)) explicit ShortRow(F f) : v0(rowLanes8<0, N>(f)), v1(rowLanes8<8, N>(f)) {}
  // Bit l set where lane l of (lo, hi) is, for l < N.
  __attribute__((always_inline)) static uint32_t bits(i32x8 lo, i32x8 hi) {
    uint32_t b = 0;
#if defined(__AVX__) && !defined(__clang__)
    b = static_cast<uint32_t>(__builtin_ia32_movmskps256(reinterpret_cast<f32x8>(lo)));
    if constexpr (N > 8) b |= static_cast<uint32_t>(__builtin_ia32_movmskps256(reinterpret_cast<f32x8>(hi))) << 8;
#else
    for (int l = 0; l < 8; ++l) b |= static_cast<uint32_t>(lo[l] & 1) << l | static_cast<uint32_t>(hi[l] & 1) << (l + 8);
#endif
    return b & ((1u << N) - 1u);
  }
  __attribute__((always_inline)) uint32_t nans() const { return bits(v0 != v0, v1 != v1); }
  // The largest value (no lane may be NaN) in every lane, by halving.
  __attribute__((always_inline)) f32x8 largest() const {
    f32x8 m = N > 8 ? maxps(v0, v1) : v0;
    m = maxps(m, __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3));
    m = maxps(m, __builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5));
    return maxps(m, __builtin_shufflevector(m, m, 1, 0, 3, 2, 5, 4, 7, 6));
  }
};
// pc::maxOf(N, f) for N <= 16: the same value (NaN when one is; for a zero maximum the first
// zero, its sign).
template <int N, class F> PC_INLINE float maxShort(F f) {
  const ShortRow<N> row(f);
  if (row.nans() != 0) return pc::nan<float>();
  const float m = row.largest()[0];
  if (m == 0.0f) return f(__builtin_ctz(ShortRow<N>::bits(row.v0 == 0.0f, row.v1 == 0.0f)));
  return m;
}
// The index of the largest of f(0), ..., f(N - 1), N <= 16 (an argmax over a short row): the
// first one (Last: the last), NaN counting as the largest, as in numpy.
template <int N, bool Last, class F> PC_INLINE int64_t argmaxShort(F f) {
  const ShortRow<N> row(f);
  auto pick = [](uint32_t bits) -> int64_t { return Last ? 31 - __builtin_clz(bits) : __builtin_ctz(bits); };
  const uint32_t nans = row.nans();
  if (nans != 0) return pick(nans);
  const f32x8 m = row.largest();
  return pick(ShortRow<N>::bits(row.v0 == m, row.v1 == m));  // a lane holds m
}
// The first index i in [0, n) with f(i) == m (Last: the last one), n when there is none: sixteen
// values a step compared as vectors (an argmax's second pass, KernelSchedule::kScanLanes), the
// values past the last whole sixteen one by one. A compare and a branch per value ran at about
// two values a ns, the row's maximum before it at ten.
template <bool Last, class F> PC_INLINE int64_t findEqual(int64_t n, float m, F f) {
  const int64_t whole = n / 16 * 16;
  // The row read anew: GCC kept a value it had loaded before (the row's first, which the NaN
  // and zero paths around the call read too) and built the scan's first vector around it lane
  // by lane (30 instructions; an argmax over 64 took 1.45x LLVM's time).
  __asm__ volatile("" : : : "memory");
  if constexpr (!Last) {
#pragma GCC unroll 4
    for (int64_t i = 0; i < whole; i += 16) {
      const uint32_t bits = equalBits16(i, m, f);
      if (bits != 0) return i + __builtin_ctz(bits);
    }
    for (int64_t i = whole; i < n; ++i) {
      if (f(i) == m) return i;
    }
  } else {
    for (int64_t i = n - 1; i >= whole; --i) {
      if (f(i) == m) return i;
    }
#pragma GCC unroll 4
    for (int64_t i = whole - 16; i >= 0; i -= 16) {
      const uint32_t bits = equalBits16(i, m, f);
      if (bits != 0) return i + 31 - __builtin_clz(bits);
    }
  }
  return n;
}
// The sum of f(0), ..., f(n - 1) (f32 values) in double: value i into lane i % 16 of sixteen
// partial sums, then lane l and l + 8 added, then those eight pairwise. A single running sum is a
// chain of dependent adds; these vectorise. The LLVM backend's Emitter::sumOf adds in the same order.
// Staged (SumRun::staged): each 16 values are computed into a buffer by a loop of their own first.
template <bool Staged = false, class F> PC_INLINE double sumOf(int64_t n, F f) {
  if (n < 16) {
    // A short row: value i alone in lane i, so each pair below is f(l) + f(l + 8) or f(l) + 0
    // (0 + f(l) is f(l) exactly; every value still meets one add, which makes -0 the +0 the
    // lanes' order gives). Through the lanes' registers and an array instead, the scalar stores
    // stalled the vector loads after them (a softmax over rows of 4 took 2x LLVM's time on an
    // AVX-512 host).
    double q[8];
    for (int l = 0; l < 8; ++l) {
      const double a = l < n ? static_cast<double>(f(l)) : 0.0, b = l + 8 < n ? static_cast<double>(f(l + 8)) : 0.0;
      q[l] = a + b;
    }
    return ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
  }
  // The sixteen lanes as registers of the target's width (a wider vector type GCC keeps in memory).
#ifdef __AVX512F__
  constexpr int W = 8;
  typedef double f64xW __attribute__((vector_size(64)));
  typedef float f32xW __attribute__((vector_size(32)));
#else
  constexpr int W = 4;
  typedef double f64xW __attribute__((vector_size(32)));
  typedef float f32xW __attribute__((vector_size(16)));
#endif
  f64xW lanes[16 / W] = {};
  // Adds values i .. i + 15 (g(l) the l-th of them) to the lanes.
  auto add16 = [&](auto g) {
    for (int b = 0; b < 16 / W; ++b) {
      f32xW v;
      // one vector load where the values are consecutive floats
      for (int l = 0; l < W; ++l) v[l] = g(b * W + l);
#if defined(__AVX512F__) && !defined(__clang__)
      // vcvtps2pd zmm, ymm: GCC's convertvector converted two halves and reassembled them
      lanes[b] += __builtin_ia32_cvtps2pd512_mask(v, f64xW{}, 0xff, 4);
#elif defined(__AVX__) && !defined(__clang__)
      lanes[b] += __builtin_ia32_cvtps2pd256(v);  // vcvtps2pd ymm, xmm (the same: halves and an insert)
#else
      lanes[b] += __builtin_convertvector(v, f64xW);
#endif
    }
  };
  int64_t i = 0;
  if constexpr (Staged) {
    // Up to kStage values at a time: a loop of a few vector iterations per 16 values paid its
    // overhead each time (reduce_log_sum_exp 1.3x behind LLVM's at 1024 wide).
    constexpr int64_t kStage = 256;
    float staged[kStage];
    while (i + 16 <= n) {
      const int64_t m = (n - i < kStage ? n - i : kStage) / 16 * 16;
      for (int64_t l = 0; l < m; ++l) staged[l] = f(i + l);  // a loop GCC vectorises (its calls inlined unrolled were not)
      // The values read back from memory as vectors: a short row's loops unrolled whole, GCC
      // kept them in registers and gathered each vector lane by lane (130 instructions a row of
      // 64; reduce_log_sum_exp over 64 took 1.5x LLVM's time).
      __asm__ volatile("" : : "r"(staged) : "memory");
      for (int64_t s = 0; s < m; s += 16) add16([&](int l) { return staged[s + l]; });
      i += m;
    }
  } else {
    for (; i + 16 <= n; i += 16) add16([&](int l) { return f(i + l); });
  }
  if (i < n) {
    // The tail (i is a multiple of 16 here) into lanes 0 .. n - i - 1 and 0 into the others, which
    // changes no bits: a lane is never -0 (its sums start at +0). Through an array (a vector
    // indexed by a variable stays in memory), the wide loads after the scalar stores stalled: a
    // global average pool over 6 x 6 took 2.5x the LLVM backend's time.
    const int64_t m = n - i;
    add16([&](int l) { return l < m ? f(i + l) : 0.0f; });
  }
  // lane l + lane l + 8, in registers (through an array the stores stall the loads)
#ifdef __AVX512F__
  const f64xW q = lanes[0] + lanes[1];
#else
  const f64xW qlo = lanes[0] + lanes[2], qhi = lanes[1] + lanes[3];
  const double q[8] = {qlo[0], qlo[1], qlo[2], qlo[3], qhi[0], qhi[1], qhi[2], qhi[3]};
#endif
  return ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
}
// Eight rows' running sums (Prod: products) of rows of N = 8 (or 8j) f32 values: acc[r] = init,
// then acc[r] op= f(r, j) in double for j = 0, ..., N - 1, the order of the one-row loop, so the
// same bits. The eight rows are written to a tile in memory (a loop GCC vectorises along the row),
// read back eight values a vector and turned (transpose8) so that value j of the eight rows is
// one vector, then summed a row a lane: GCC did not vectorise a short row's loop across rows (an
// entropy's sum over 8 values at batch 64 took 2.3x LLVM's time, whose vectoriser interleaves the
// rows the same way). Rows of other lengths stay one at a time: their tile rows went out as
// smaller stores that a wide load cannot forward from (rows of 6: 2.7x slower), and rows built as
// vector expressions ran 1.5x slower (GCC inserts lane by lane).
template <int N, bool Prod, class F> PC_INLINE void rowSums8(double init, F f, double (&acc)[8]) {
  static_assert(0 < N && N % 8 == 0, "rows of whole vectors");
  typedef double f64x4 __attribute__((vector_size(32)));
  alignas(32) float tile[8][N];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) tile[r][j] = f(r, j);
  }
  f64x4 lo = {init, init, init, init}, hi = lo;
#pragma GCC unroll 2
  for (int h = 0; h < N / 8; ++h) {
    f32x8 x[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) x[r] = load8(tile[r] + 8 * h);
    transpose8(x);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const f64x4 vlo = __builtin_convertvector(__builtin_shufflevector(x[c], x[c], 0, 1, 2, 3), f64x4);
      const f64x4 vhi = __builtin_convertvector(__builtin_shufflevector(x[c], x[c], 4, 5, 6, 7), f64x4);
      if constexpr (Prod) {
        lo *= vlo;
        hi *= vhi;
      } else {
        lo += vlo;
        hi += vhi;
      }
    }
  }
  std::memcpy(acc, &lo, sizeof lo);
  std::memcpy(acc + 4, &hi, sizeof hi);
}
// R rows of a matmul's outputs: acc[r][j] = the sum over k < K of a(r, k) * b(k)[j] for j < N (N
// a multiple of 4, b(k) pointing at B's row k, contiguous), k ascending from 0 as in the
// one-output loop and contracted the same way, so the same bits; the N sums as vectors of 8 (4
// for N = 4j + 4 not a multiple of 8; 16 with AVX-512 for a multiple of 16, where GCC joined two
// halves into the 16-wide copy after it lane by lane: 3.7x LLVM's time for 4 x 4 by 4 x 16).
// Four rows at a time (KernelSchedule::matmulRowQuads) load each k's row of B once for the four
// rows' FMAs, four independent chains where one row waited K FMA latencies (GCC kept re-reading
// B row by row: an attention's 8 x 16 by 16 x 8 scores 1.3x the LLVM build's time).
template <int R, int N, class FA, class FB> PC_INLINE void matmulRows(int64_t K, FA a, FB b, float (&acc)[R][N]) {
  static_assert(N % 4 == 0 && N <= 64, "a row of vectors");
#if defined(__AVX512F__)
  constexpr int L = N % 16 == 0 ? 16 : N % 8 == 0 ? 8 : 4;
#else
  constexpr int L = N % 8 == 0 ? 8 : 4;
#endif
  typedef float V __attribute__((vector_size(4 * L)));
  V v[R][N / L] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float* row = b(k);
    V w[N / L];
    std::memcpy(w, row, sizeof w);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float x = a(r, k);
#pragma GCC unroll 8
      for (int c = 0; c < N / L; ++c) v[r][c] += x * w[c];
    }
  }
  std::memcpy(acc, v, sizeof v);
}
// One row (a(k): its value k).
template <int N, class FA, class FB> PC_INLINE void matmulRow(int64_t K, FA a, FB b, float (&acc)[N]) {
  float rows[1][N];
  matmulRows<1, N>(K, [&](int, int64_t k) { return a(k); }, b, rows);
  std::memcpy(acc, rows[0], sizeof acc);
}
template <class T> PC_INLINE T minNaN(T a, T b) {
  const T m = (b < a) | (b != b) ? b : a;
  return a != a ? a : m;
}

// ---- f32 exp / tanh / sigmoid from polynomials (Cephes exp within 1.5e-6 relative; tanh below,
// within 3e-7 relative): arithmetic and selects, no libm calls. NaN propagates; overflow gives inf.
PC_INLINE float exp(float x) {
  const float c0 = x < -87.3365f ? -87.3365f : x;
  const float c = c0 > 88.7228f ? 88.7228f : c0;
  // Generated code is built with -fno-trapping-math, under which GCC vectorises floor (and not a
  // floor through an int conversion after the clamp above).
  const float fx = __builtin_floorf(c * 1.44269504088896341f + 0.5f);
  float r = c - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  // 2^n as two factors (n reaches 128 near the top of the range), as the LLVM backend's exp: with
  // exp(x - ln 2) doubled above 87, the two backends were an ulp apart there.
  const int32_t n = static_cast<int32_t>(fx), n1 = n >> 1;
  float e = y * __builtin_bit_cast(float, (n1 + 127) << 23) * __builtin_bit_cast(float, (n - n1 + 127) << 23);
  e = x > 88.7228f ? std::numeric_limits<float>::infinity() : e;
  e = x < -103.972f ? 0.0f : e;
  return x != x ? x : e;
}
PC_INLINE double exp(double x) { return __builtin_exp(x); }

// log (Cephes logf; denormals scaled first; x < 0 -> NaN, 0 -> -inf, inf -> inf), the LLVM
// backend's polynomial.
PC_INLINE float log(float x) {
  const bool tiny = x < 1.17549435e-38f;
  const float xs = tiny ? x * 8388608.0f : x;  // 2^23
  const int32_t bits = __builtin_bit_cast(int32_t, xs);
  const int32_t e = ((bits >> 23) & 0xff) - 126 - (tiny ? 23 : 0);
  float m = __builtin_bit_cast(float, (bits & static_cast<int32_t>(0x807fffff)) | 0x3f000000);
  float fe = static_cast<float>(e);
  const bool lowM = m < 0.707106781186547524f;
  fe = lowM ? fe - 1.0f : fe;
  m = lowM ? (m + m) - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y = fe * -2.12194440e-4f + y;
  y = z * -0.5f + y;
  float r = fe * 0.693359375f + (m + y);
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  r = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : r;
  return x != x ? x : r;
}
PC_INLINE double log(double x) { return __builtin_log(x); }

// erf (Abramowitz-Stegun 7.1.26 on |x|, within 1.5e-7 absolute), the LLVM backend's.
PC_INLINE float erf(float x) {
  const float a = pc::fabs(x);
  const float t = 1.0f / (a * 0.3275911f + 1.0f);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * pc::exp(-(a * a));
  const float r = pc::copysign(y, x);
  return x != x ? x : r;
}
PC_INLINE double erf(double x) { return __builtin_erf(x); }

// exp(x) - 1 as the LLVM backend computes it for f32 (elu, selu); libm's expm1 for f64.
PC_INLINE float expm1(float x) { return pc::exp(x) - 1.0f; }
PC_INLINE double expm1(double x) { return __builtin_expm1(x); }

// x P(x^2) / Q(x^2) on a float or on every lane of a vector (pc::tanh, pc::tanhv).
template <class V> PC_INLINE V tanhRational(V x) {
  const V z = x * x;
  V p = z * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * z - 8.60467152213735e-11f;
  p = p * z + 5.12229709037114e-08f;
  p = p * z + 1.48572235717979e-05f;
  p = p * z + 6.37261928875436e-04f;
  p = p * z + 4.89352455891786e-03f;
  V q = z * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * z + 2.26843463243900e-03f;
  q = q * z + 4.89352518554385e-03f;
  return x * p / q;
}
// tanh(x) = x P(x^2) / Q(x^2) (degrees 6 and 3 in x^2: the rational approximation of Eigen's
// ptanh_float; within 3e-7 relative, 5 ulps, of libm's over every float) up to |x| = 7.99881172
// (its range; past it +-1, within 2.4e-7 of tanh), x itself under 0.0004 in magnitude (its sign
// and denormals kept): one division and eleven FMAs, where 1 - 2 / (exp(2|x|) + 1) and a
// small-argument polynomial, both computed and selected, took twice as many instructions (the tanh
// of a PPO MLP's layers was most of their time at batch 64). The LLVM backend's Builder::tanh is
// the same arithmetic. Past the range a select on x, not a clamp of x: GCC evaluated P and Q of
// the clamp's constant at compile time without the FMAs, an ulp from the LLVM backend's.
PC_INLINE float tanh(float x) {
  const float a = pc::fabs(x);
  const float r = a < 0.0004f ? x : a > 7.99881172180175781f ? (x < 0.0f ? -1.0f : 1.0f) : tanhRational(x);
  return x != x ? x : r;
}
PC_INLINE double tanh(double x) { return __builtin_tanh(x); }

// The same exp and tanh on a vector V of 8 or 16 lanes (an epilogue over a whole GEMM panel).
template <class V>
PC_INLINE V expv(V x) {
  using I = decltype(x < x);  // the lanes as int32
  const V lo = splatv(V{}, -87.3365f), hi = splatv(V{}, 88.7228f);
  V c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  const V t = c * 1.44269504088896341f + 0.5f;
  const I ii = __builtin_convertvector(t, I);
  const V ti = __builtin_convertvector(ii, V);
  const I n = ii - (ti > t ? 1 : 0);
  const V fx = __builtin_convertvector(n, V);
  V r = c - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  const V z = r * r;
  V y = splatv(V{}, 1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const I n1 = n >> 1;
  const V s1 = (V)((n1 + 127) << 23);
  const V s2 = (V)((n - n1 + 127) << 23);
  return y * s1 * s2;
}
// pc::exp on every lane, as the LLVM backend's exp: expv, then 0 below -103.972 and NaN kept
// (exp itself for the arguments softmax gives it, x <= 0). A short row's exps one vector at a
// time (KernelSchedule::kShortRow): GCC left a loop of 4 calls to pc::exp scalar.
template <class V>
PC_INLINE V expFull(V x) {
  V e = expv(x);
  e = x < -103.972f ? V{} : e;
  return x != x ? x : e;
}
// pc::exp, pc::sigmoid and pc::clip on every lane, the same operations lane by lane (a vector
// epilogue's, KernelSchedule::vectorEpilogue): expFull, and inf above 88.7228 as pc::exp gives.
template <class V>
PC_INLINE V expLanes(V x) {
  const V e = expFull(x);
  return x > 88.7228f ? std::numeric_limits<float>::infinity() : e;
}
template <class V>
PC_INLINE V sigmoidLanes(V x) {
  const V e = expLanes(-(x < 0.0f ? -x : x));  // -|x| (a zero's sign aside, which exp does not see)
  // One division of the selected numerator (the same bits as selecting between two quotients,
  // which GCC computes both of: a 27 -> 288 layer's silu at batch 64 1.3x the LLVM build's time).
  const V num = x >= 0.0f ? V{} + 1.0f : e;
  const V r = num / (1.0f + e);
  return x != x ? x : r;
}
template <class V>
PC_INLINE V clipLanes(V x, float lo, float hi) {
  const V y = x < lo ? lo : x;
  const V r = y > hi ? hi : y;
  return x != x ? x : r;
}
// A softmax over eight short rows of N values (KernelSchedule::kShortRow) at once, a row a
// vector lane: lane by lane the operations of one row's pc::maxShort, pc::expFull, pc::sumOf
// and division, so the same bits (a zero maximum's sign, which maxShort looks up, changes no
// exp). f(r, j) is value j of row r of the eight, out(r, j, y) takes its result. One row at a
// time, the sum and the divisions were scalar: a softmax over rows of 8 at batch 64 took 2.2x
// the LLVM backend's time, whose vectoriser takes eight rows at a time the same way. Rows of
// up to 8 are read and written as rows (vectorised copies) and transposed in registers; longer
// ones are gathered lane by lane.
// Log: a log_softmax's rows, (x - max) - log(sum) in double (libm's log of each row's sum).
template <int N, bool Log = false, class F, class O> PC_INLINE void softmaxRows8(F f, O out) {
  static_assert(0 < N && N <= 16, "a short row");
  constexpr bool kRows = N <= 8;
  f32x8 v[kRows ? 8 : N];
  if constexpr (kRows) {
    // Rows built in registers: through a row array, each vector load waited for the scalar
    // stores before it (rows of 6 at 1.9x the LLVM backend's time; rows of 8 16.6 -> 15.3 us over
    // [64, 2, 8, 8]).
    for (int r = 0; r < 8; ++r) v[r] = lanesOf<f32x8>([&](int j) { return j < N ? f(r, j) : 0.0f; });
    transpose8(v);
  } else {
    for (int j = 0; j < N; ++j) v[j] = lanesOf<f32x8>([&](int r) { return f(r, j); });  // value j of the eight rows
  }
  f32x8 m = splat8(-inf<float>());
  i32x8 nans = {};
  for (int j = 0; j < N; ++j) {
    m = maxps(v[j], m);
    nans |= v[j] != v[j];
  }
  m = nans != 0 ? splat8(pc::nan<float>()) : m;
  f32x8 e[N];
  for (int j = 0; j + 1 < N; j += 2) {  // two values a vector of 16 (one 8-lane exp per value took twice as long)
    const f32x16 x = byHalves(join16(v[j] - m, v[j + 1] - m), [](auto t) { return expFull(t); });
    e[j] = lo8(x), e[j + 1] = hi8(x);
  }
  if (N % 2) e[N - 1] = expFull(v[N - 1] - m);
#if defined(__AVX512F__)
  // All eight rows in double at once: one conversion and one division of eight lanes a value.
  typedef double f64x8 __attribute__((vector_size(64)));
  auto wide = [&](int j) { return __builtin_convertvector(e[j], f64x8); };
  f64x8 q[8];
  for (int l = 0; l < 8; ++l) q[l] = (l < N ? wide(l) : f64x8{}) + (l + 8 < N ? wide(l + 8) : f64x8{});
  const f64x8 sum = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
  f32x8 y[N];
  if constexpr (Log) {
    f64x8 ls;
    for (int l = 0; l < 8; ++l) ls[l] = pc::log(sum[l]);
    const f64x8 mw = __builtin_convertvector(m, f64x8);
    for (int j = 0; j < N; ++j) y[j] = __builtin_convertvector((__builtin_convertvector(v[j], f64x8) - mw) - ls, f32x8);
  } else {
    for (int j = 0; j < N; ++j) y[j] = __builtin_convertvector(wide(j) / sum, f32x8);
  }
#else
  typedef double f64x4 __attribute__((vector_size(32)));
  f32x4 h2[2][N];  // h2[h][j]: value j of rows 4h .. 4h + 3
  for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3 in double
    auto wide = [&](int j) -> f64x4 {
      const f32x4 x = h ? __builtin_shufflevector(e[j], e[j], 4, 5, 6, 7) : __builtin_shufflevector(e[j], e[j], 0, 1, 2, 3);
      return __builtin_convertvector(x, f64x4);
    };
    f64x4 q[8];
    for (int l = 0; l < 8; ++l) q[l] = (l < N ? wide(l) : f64x4{}) + (l + 8 < N ? wide(l + 8) : f64x4{});
    const f64x4 sum = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
    if constexpr (Log) {
      f64x4 ls;
      for (int l = 0; l < 4; ++l) ls[l] = pc::log(sum[l]);
      auto half = [&](f32x8 x) -> f64x4 {
        const f32x4 t = h ? __builtin_shufflevector(x, x, 4, 5, 6, 7) : __builtin_shufflevector(x, x, 0, 1, 2, 3);
        return __builtin_convertvector(t, f64x4);
      };
      for (int j = 0; j < N; ++j) h2[h][j] = __builtin_convertvector((half(v[j]) - half(m)) - ls, f32x4);
    } else {
      for (int j = 0; j < N; ++j) h2[h][j] = __builtin_convertvector(wide(j) / sum, f32x4);
    }
  }
  f32x8 y[N];
  for (int j = 0; j < N; ++j) y[j] = __builtin_shufflevector(h2[0][j], h2[1][j], 0, 1, 2, 3, 4, 5, 6, 7);
#endif
  if constexpr (kRows) {
    for (int j = 0; j < 8; ++j) v[j] = j < N ? y[j] : f32x8{};
    transpose8(v);  // back to rows (the transpose is its own inverse)
    // Stored two rows a vector: GCC reads the copy below by 16 floats, and a 16-float load of
    // two 8-float stores waits for them (no store forwarding).
    alignas(64) float o[8][8];
    for (int r = 0; r < 8; r += 2) {
      const f32x16 w = join16(v[r], v[r + 1]);
      std::memcpy(o[r], &w, sizeof w);
    }
    for (int r = 0; r < 8; ++r) {
      for (int j = 0; j < N; ++j) out(r, j, o[r][j]);
      // Row by row: rows shorter than 8 copied on as one run of 8N values, GCC assembled those
      // vectors lane by lane from the tile (rows of 6 at 1.7x the LLVM backend's time).
      if constexpr (N < 8) __asm__ volatile("" : : : "memory");
    }
  } else {
    for (int r = 0; r < 8; ++r) {
      for (int j = 0; j < N; ++j) out(r, j, y[j][r]);
    }
  }
}
template <class V>
PC_INLINE V tanhv(V x) {  // pc::tanh(float) on every lane
  const V a = x < 0.0f ? -x : x;
  const V one = x < 0.0f ? splatv(V{}, -1.0f) : splatv(V{}, 1.0f);
  const V r = a < 0.0004f ? x : (a > 7.99881172180175781f ? one : tanhRational(x));
  return x != x ? x : r;
}
// f on 16 lanes. Without 512-bit vectors GCC 12 lowers a select on 16 lanes one lane at a time
// (scalar compares and branches: ppo_mlp's tanh layers ran 4x slower on an AVX2 host), so there
// f runs on the two 8-lane halves. Each lane's arithmetic is the same either way.
template <class F>
PC_INLINE f32x16 byHalves(f32x16 x, F f) {
#if defined(__AVX512F__)
  return f(x);
#else
  return join16(f(lo8(x)), f(hi8(x)));
#endif
}
PC_INLINE f32x16 exp16(f32x16 x) {
  return byHalves(x, [](auto v) { return expv(v); });
}
PC_INLINE f32x16 tanh16(f32x16 x) {
  return byHalves(x, [](auto v) { return tanhv(v); });
}
PC_INLINE f32x16 relu16(f32x16 x) {  // NaN stays NaN
  return byHalves(x, [](auto v) { return v < 0.0f ? 0.0f : v; });
}

template <class T> PC_INLINE T relu(T x) { return x < T(0) ? T(0) : x; }  // NaN stays NaN
template <class T> PC_INLINE T sigmoid(T x) {
  // exp of -|x| never overflows; the two halves are selected, not branched on.
  const T e = pc::exp(-pc::fabs(x));
  const T r = (x >= T(0) ? T(1) : e) / (T(1) + e);  // one division (sigmoidLanes)
  return x != x ? x : r;
}
template <class T> PC_INLINE T softplus(T x) {
  // f32: log(1 + e) of the polynomials (as the LLVM backend); f64: libm's log1p.
  T l;
  if constexpr (std::is_same<T, float>::value) l = pc::log(1.0f + pc::exp(-pc::fabs(x)));
  else l = pc::log1p(pc::exp(-pc::fabs(x)));
  const T r = (x > T(0) ? x : T(0)) + l;
  return x != x ? x : r;
}
template <class T> PC_INLINE T leakyRelu(T x, T alpha) { return x < T(0) ? alpha * x : x; }
template <class T> PC_INLINE T elu(T x, T alpha) { return x < T(0) ? alpha * pc::expm1(x) : x; }
template <class T> PC_INLINE T selu(T x, T alpha, T gamma) { return x <= T(0) ? gamma * alpha * pc::expm1(x) : gamma * x; }
// y clamped to [0, 1] on its bits: a sign bit makes it +0 (-0 and a negative NaN included), then
// the signed minimum with 1's bits (a positive NaN is 1); the LLVM backend's clamp01 alike. GCC
// vectorised two float selects as four compares and two blends.
template <class T> PC_INLINE T clamp01(T y) {
  typedef typename std::conditional<sizeof(T) == 4, int32_t, int64_t>::type I;
  const I one = sizeof(T) == 4 ? I(0x3f800000) : I(0x3ff0000000000000ll);
  I i;
  std::memcpy(&i, &y, sizeof i);
  i &= ~(i >> (sizeof(I) * 8 - 1));
  i = i < one ? i : one;
  std::memcpy(&y, &i, sizeof i);
  return y;
}
// Selects, not early returns, so that loops of them vectorise.
template <class T> PC_INLINE T hardSigmoid(T x, T alpha, T beta) {
  const T r = clamp01(alpha * x + beta);
  return x != x ? x : r;
}
template <class T> PC_INLINE T clip(T x, T lo, T hi) {
  const T y = x < lo ? lo : x;
  const T r = y > hi ? hi : y;
  return x != x ? x : r;
}
template <class T> PC_INLINE T silu(T x) { return x * sigmoid(x); }
template <class T> PC_INLINE T gelu(T x) { return T(0.5) * x * (T(1) + pc::erf(x * T(0.70710678118654752440))); }
template <class T> PC_INLINE T hardSwish(T x) {
  const T r = x * clamp01(x / T(6) + T(0.5));
  return x != x ? x : r;
}
template <class T> PC_INLINE T batchNorm(T x, T scale, T bias, T mean, T var, T eps) {
  return (x - mean) * (T(1) / pc::sqrt(var + eps)) * scale + bias;
}

// Integer arithmetic saturates at the type's limits, as the interpreter's (which computes in
// double and stores saturating): one semantics for every backend (docs/ir.md).
template <class T> PC_INLINE T satMax(bool negative) {
  return negative ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
}
template <class T> PC_INLINE T add(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    return a + b;
  } else {
    T r;
    return __builtin_add_overflow(a, b, &r) ? satMax<T>(b < T(0)) : r;
  }
}
template <class T> PC_INLINE T sub(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    return a - b;
  } else {
    T r;
    return __builtin_sub_overflow(a, b, &r) ? satMax<T>(!std::is_signed<T>::value || b > T(0)) : r;
  }
}
template <class T> PC_INLINE T mul(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    return a * b;
  } else {
    T r;
    return __builtin_mul_overflow(a, b, &r) ? satMax<T>((a < T(0)) != (b < T(0))) : r;
  }
}
template <class T> PC_INLINE T neg(T a) { return sub<T>(T(0), a); }
template <class T> PC_INLINE T abs(T a) {
  if constexpr (std::is_floating_point<T>::value) {
    return pc::fabs(a);
  } else {
    return a < T(0) ? neg<T>(a) : a;
  }
}

// What a kernel reports through the run's status when a value is outside an operator's domain:
// bits, OR-ed in by any thread (the LLVM backend uses the same bits); after the kernel the run
// returns statusCode(bits), the index error first when both happened (policyc_model.h).
constexpr int kIndexError = 1, kDivisionError = 2;
PC_INLINE void report(int* status, int bit) { __atomic_fetch_or(status, bit, __ATOMIC_RELAXED); }
PC_INLINE int statusCode(int bits) { return (bits & kIndexError) ? POLICYC_ERROR_INDEX : POLICYC_ERROR_DIVISION; }

// Division: C truncation for integers; dividing by zero is an error of the run
// (POLICYC_ERROR_DIVISION, the result 0), the one overflowing case (lowest / -1) saturates.
template <class T> PC_INLINE T div(T a, T b, int* status) {
  if constexpr (std::is_floating_point<T>::value) {
    (void)status;
    return a / b;
  } else {
    if (b == T(0)) {
      report(status, kDivisionError);
      return T(0);
    }
    if (std::is_signed<T>::value && b == T(-1)) return neg<T>(a);
    return T(a / b);
  }
}

// The remainder (ONNX Mod): fmod, the dividend's sign (C's % and fmod); otherwise the divisor's
// (Python's %, integers only). An integer divisor of zero is an error of the run (the result 0);
// lowest % -1 is 0 (it never reaches the instruction, which traps on x86).
template <class T> PC_INLINE T mod(T a, T b, bool fmod, int* status) {
  if constexpr (std::is_floating_point<T>::value) {
    (void)fmod;
    (void)status;
    return pc::fmod(a, b);
  } else {
    if (b == T(0)) {
      report(status, kDivisionError);
      return T(0);
    }
    if constexpr (std::is_signed<T>::value) {
      if (b == T(-1)) return T(0);
      T r = T(a % b);
      if (!fmod && r != T(0) && ((r < T(0)) != (b < T(0)))) r = T(r + b);
      return r;
    } else {
      (void)fmod;
      return T(a % b);
    }
  }
}

// Cast as ONNX and numpy: floats to integers truncate toward zero, NaN becomes 0, out-of-range
// values saturate (integers to narrower integers too); anything to bool is `!= 0` (NaN is true).
template <class To, class From> PC_INLINE To cast(From x) {
  if constexpr (std::is_same<To, bool>::value) {
    return x != From(0);
  } else if constexpr (std::is_integral<To>::value && std::is_floating_point<From>::value) {
    if (x != x) return To(0);
    double t = pc::trunc(double(x));
    if (t <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (t >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return To(t);
  } else if constexpr (std::is_integral<To>::value && std::is_integral<From>::value && !std::is_same<From, bool>::value) {
    // Every integer dtype fits in int64 (u8 is the only unsigned one): clamp there.
    const int64_t v = int64_t(x);
    const int64_t lo = int64_t(std::numeric_limits<To>::lowest()), hi = int64_t(std::numeric_limits<To>::max());
    return To(v < lo ? lo : (v > hi ? hi : v));
  } else {
    return To(x);
  }
}

// libm's pow for every exponent, as the LLVM backend's llvm.pow: a branch around the call for an
// exponent of 2 kept GCC from unrolling the loop of calls (KernelSchedule::unrollCalls; 1.5x slower).
template <class T> PC_INLINE T pow(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    return pc::pow(a, b);
  } else {
    return cast<T, double>(pc::pow(double(a), double(b)));
  }
}


// ---- weights replaced at run time (set_weights; models compiled with --updatable-weights)
//
// The weights blob then also holds the weights as the model file names them (the raw store,
// f32), for every blob region a kernel reads that came from them one int32 code per element
// (1 + the raw element it copies, 0 for a literal zero), and a table of int64 at `table`:
//   [0] weights W, [1] raw elements, [2] the raw store's byte offset, [3] regions R,
//   [4, 4 + W) each weight's first raw element, then R triples (byte offset, elements, codes' byte offset).
// codegen/src/schedule.cpp writes that layout; the backends pass the blob and the table here.

// Runs and updates exclude each other, updates first: a run enters through the gate (a mutex
// held for an instant) and counts itself in `readers`; an update holds the gate, so no run
// starts, until the runs in flight have left and it has written every region. All zero bytes is
// the unlocked state (glibc's PTHREAD_MUTEX_INITIALIZER), so the LLVM backend emits it as a
// zeroed global of kWeightsLockBytes.
struct WeightsLock {
  pthread_mutex_t gate;
  int64_t readers;
  // How many updates there were: a oneDNN kernel compares it with the one its reordered copy of
  // the weight was made from (Primitives in policyc_onednn.h) and makes the copy again when it moved.
  uint64_t generation;
};
constexpr int kWeightsLockBytes = 64;
static_assert(sizeof(WeightsLock) <= kWeightsLockBytes, "the LLVM backend's lock global is too small");

PC_INLINE void weightsReadLock(WeightsLock* l) {
  pthread_mutex_lock(&l->gate);
  __atomic_fetch_add(&l->readers, 1, __ATOMIC_ACQUIRE);
  pthread_mutex_unlock(&l->gate);
}
PC_INLINE void weightsReadUnlock(WeightsLock* l) { __atomic_fetch_sub(&l->readers, 1, __ATOMIC_RELEASE); }

// Checks every given weight against the model's (name, f32, shape) before anything is written.
// POLICYC_ERROR_ARGUMENT for an unknown or repeated name, another dtype or shape, a null array, or
// a value that is not finite: a learner that diverged gets an error, not a policy of NaNs, and the
// kernels may rely on finite weights (a conv's masked taps multiply zeros by them).
static inline int checkWeights(const policyc_tensor_desc* weights, int32_t numWeights, int32_t count,
                               const policyc_tensor_desc* given, const void* const* data, int32_t* which) {
  if (count < 0 || (count > 0 && (given == nullptr || data == nullptr))) return POLICYC_ERROR_ARGUMENT;
  for (int32_t i = 0; i < count; ++i) {
    const policyc_tensor_desc& g = given[i];
    int32_t w = 0;
    while (w < numWeights && (g.name == nullptr || std::strcmp(weights[w].name, g.name) != 0)) ++w;
    if (w == numWeights || g.dtype != POLICYC_F32 || g.rank != weights[w].rank) return POLICYC_ERROR_ARGUMENT;
    int64_t numel = 1;
    for (int32_t d = 0; d < g.rank; ++d) {
      if (g.shape == nullptr || g.shape[d] != weights[w].shape[d]) return POLICYC_ERROR_ARGUMENT;
      numel *= g.shape[d];
    }
    if (numel > 0 && data[i] == nullptr) return POLICYC_ERROR_ARGUMENT;
    // Without a branch per value (vectorised): |v| <= FLT_MAX is false for infinities and NaN.
    const float* v = static_cast<const float*>(data[i]);
    bool finite = true;
    for (int64_t e = 0; e < numel; ++e) finite &= pc::fabs(v[e]) <= std::numeric_limits<float>::max();
    if (!finite) return POLICYC_ERROR_ARGUMENT;
    for (int32_t j = 0; j < i; ++j) {
      if (which[j] == w) return POLICYC_ERROR_ARGUMENT;
    }
    which[i] = w;
  }
  return POLICYC_OK;
}

static inline int64_t weightElements(const policyc_tensor_desc& w) {
  int64_t n = 1;
  for (int32_t d = 0; d < w.rank; ++d) n *= w.shape[d];
  return n;
}

// set_weights: the given weights into the raw store, then every region the kernels read rebuilt
// from it (its codes gather the raw elements it copies), all while no run is in flight.
static inline int setWeights(unsigned char* blob, int64_t table, WeightsLock* lock, const policyc_tensor_desc* weights,
                             int32_t count, const policyc_tensor_desc* given, const void* const* data) {
  const int64_t* t = reinterpret_cast<const int64_t*>(blob + table);
  const int32_t numWeights = static_cast<int32_t>(t[0]);
  int32_t* which = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * static_cast<size_t>(count > 0 ? count : 1)));
  if (which == nullptr) return POLICYC_ERROR_ARGUMENT;
  const int rc = checkWeights(weights, numWeights, count, given, data, which);
  if (rc != POLICYC_OK) {
    std::free(which);
    return rc;
  }
  float* raw = reinterpret_cast<float*>(blob + t[2]);
  pthread_mutex_lock(&lock->gate);
  while (__atomic_load_n(&lock->readers, __ATOMIC_ACQUIRE) != 0) sched_yield();
  for (int32_t i = 0; i < count; ++i) {
    const int64_t n = weightElements(weights[which[i]]);
    if (n > 0) std::memcpy(raw + t[4 + which[i]], data[i], static_cast<size_t>(n) * sizeof(float));
  }
  const int64_t regions = t[3];
  const int64_t* r = t + 4 + numWeights;
  for (int64_t i = 0; i < regions; ++i, r += 3) {
    float* out = reinterpret_cast<float*>(blob + r[0]);
    const int32_t* codes = reinterpret_cast<const int32_t*>(blob + r[2]);
    for (int64_t e = 0; e < r[1]; ++e) out[e] = codes[e] == 0 ? 0.0f : raw[codes[e] - 1];
  }
  __atomic_add_fetch(&lock->generation, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock->gate);
  std::free(which);
  return POLICYC_OK;
}

// get_weights: weight `index`'s current values (as the model file shapes it) into `out`.
static inline int getWeights(unsigned char* blob, int64_t table, WeightsLock* lock, const policyc_tensor_desc* weights,
                             int32_t index, void* out) {
  const int64_t* t = reinterpret_cast<const int64_t*>(blob + table);
  if (index < 0 || index >= t[0]) return POLICYC_ERROR_ARGUMENT;
  const int64_t n = weightElements(weights[index]);
  if (n == 0) return POLICYC_OK;
  if (out == nullptr) return POLICYC_ERROR_ARGUMENT;
  weightsReadLock(lock);
  std::memcpy(out, blob + t[2] + t[4 + index] * static_cast<int64_t>(sizeof(float)), static_cast<size_t>(n) * sizeof(float));
  weightsReadUnlock(lock);
  return POLICYC_OK;
}

}  // namespace pc
