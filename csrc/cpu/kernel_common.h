// Helpers of the CPU kernels that need no ATen operators: kernel-only translation units
// include this alone and compile in a fraction of the time of one including ATen.h.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

namespace fastgnn {
namespace cpu {

// Threads for an OpenMP region: torch's intra-op setting, so torch.set_num_threads() applies.
inline int num_threads() { return std::max(1, at::get_num_threads()); }

// Accumulation type of a feature type: float for halves and float, double for double.
template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

#define FASTGNN_ALWAYS_INLINE inline __attribute__((always_inline))
#define FASTGNN_RESTRICT __restrict__
#define FASTGNN_ALWAYS_INLINE_LAMBDA __attribute__((always_inline))

// Starts loading `count` values from `row` into cache, a 64-byte line at a time (kWrite: for a
// later write). Neighbour rows are random accesses, and the edge loops are bound by their
// latency, so the kernels prefetch the rows of edges a few steps ahead.
template <bool kWrite = false, typename T>
FASTGNN_ALWAYS_INLINE void prefetch_row(const T* row, int64_t count) {
  const char* bytes = reinterpret_cast<const char*>(row);
  const int64_t size = count * int64_t(sizeof(T));
  for (int64_t b = 0; b < size; b += 64) __builtin_prefetch(bytes + b, kWrite);
}

// Runs body(begin, end) over [0, n) in chunks of `chunk`, handed out dynamically so that
// skewed rows (hubs) do not leave threads idle.
template <typename Body>
void parallel_chunks(int64_t n, int64_t chunk, const Body& body) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic, 1)
  for (int64_t c = 0; c < num_chunks; ++c) body(c * chunk, std::min(n, (c + 1) * chunk));
}

// The instruction set a kernel body is compiled for, when on_widest_isa hands each clone its own
// body: the vector width, and whether float16 converts in hardware.
enum class Isa { kBaseline, kAvx2, kAvx512 };

// The widest clone the kernels may take: avx512 unless FASTGNN_CPU_ISA says baseline or avx2
// (read once; fastgnn checks its value at import), so that tests run every clone on one CPU, as
// ATEN_CPU_CAPABILITY does for ATen's kernels.
inline Isa isa_limit() {
  static const Isa limit = [] {
    const char* name = std::getenv("FASTGNN_CPU_ISA");
    if (name && std::strcmp(name, "baseline") == 0) return Isa::kBaseline;
    if (name && std::strcmp(name, "avx2") == 0) return Isa::kAvx2;
    return Isa::kAvx512;
  }();
  return limit;
}

// True when the CPU running us has AVX2, FMA and F16C (checked once; every AVX2 CPU has the
// other two) and isa_limit() allows it. Kernels are built for the baseline ISA and, where the
// compiler allows, once more for AVX2+FMA+F16C, picked at run time.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define FASTGNN_HAVE_AVX2_CLONE 1
#define FASTGNN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c") && isa_limit() != Isa::kBaseline;
  return has;
}
#else
#define FASTGNN_HAVE_AVX2_CLONE 0
#define FASTGNN_TARGET_AVX2
inline bool cpu_has_avx2() { return false; }
#endif

// Calls Body(args...) compiled for AVX2+FMA when the CPU has it, else for the baseline ISA.
// Body must be FASTGNN_ALWAYS_INLINE (and so must what it calls in its hot loops), so that each
// clone inlines its own copy; OpenMP regions stay outside (GCC outlines them before inlining).
template <auto Body, typename... Args>
void on_baseline_isa(Args&&... args) {
  Body(std::forward<Args>(args)...);
}

#if FASTGNN_HAVE_AVX2_CLONE
template <auto Body, typename... Args>
FASTGNN_TARGET_AVX2 void on_avx2(Args&&... args) {
  Body(std::forward<Args>(args)...);
}

// The same for AVX-512, for bodies written for 64-byte vectors (AccVec<scalar_t, Isa::kAvx512>).
inline bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && isa_limit() == Isa::kAvx512;
  return has;
}

#define FASTGNN_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

template <auto Body, typename... Args>
FASTGNN_TARGET_AVX512 void on_avx512(Args&&... args) {
  Body(std::forward<Args>(args)...);
}
#endif

#if FASTGNN_HAVE_AVX2_CLONE
// float16 <-> float32, 8 or 16 lanes at once, for the AVX2 (F16C) and AVX-512 clones. c10::Half
// converts through a dozen integer operations a value unless the whole translation unit is
// built with F16C, which the baseline clone may not assume. Not always_inline: a body without
// the target may not force them in; GCC inlines them once that body is inlined into its clone.
// So every function and lambda between the clone and them must be always_inline, or they stay
// calls (`objdump -dr` shows any: none in the kernels now).
FASTGNN_TARGET_AVX2 inline float load1_float16(c10::Half v) { return _cvtsh_ss(v.x); }
FASTGNN_TARGET_AVX2 inline __m256 load8_float16(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
FASTGNN_TARGET_AVX2 inline void store8_float16(__m256 v, c10::Half* p) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// bfloat16 widened to the float whose high half it is (exact); written with intrinsics since
// GCC splits a generic 8-lane widening into 128-bit halves even in the AVX2 clone.
FASTGNN_TARGET_AVX2 inline __m256 load8_bfloat16(const c10::BFloat16* p) {
  const __m256i wide =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
FASTGNN_TARGET_AVX512 inline __m512 load16_bfloat16(const c10::BFloat16* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
FASTGNN_TARGET_AVX512 inline __m512 load16_float16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
FASTGNN_TARGET_AVX512 inline void store16_float16(__m512 v, c10::Half* p) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// a * b + c rounded once (FMA), for kernels whose float32 and half instances must round alike.
// GCC decides loop by loop whether `c += a * b` becomes an FMA, by version and tuning: built by
// GCC 13, the float32 and half instances of the spmm gather rounded apart at some widths.
FASTGNN_TARGET_AVX2 inline float fused_mul_add(float a, float b, float c) {
  return __builtin_fmaf(a, b, c);
}
FASTGNN_TARGET_AVX2 inline double fused_mul_add(double a, double b, double c) {
  return __builtin_fma(a, b, c);
}
FASTGNN_TARGET_AVX2 inline __m256 fused_mul_add(__m256 a, __m256 b, __m256 c) {
  return _mm256_fmadd_ps(a, b, c);
}
FASTGNN_TARGET_AVX2 inline __m256d fused_mul_add(__m256d a, __m256d b, __m256d c) {
  return _mm256_fmadd_pd(a, b, c);
}
FASTGNN_TARGET_AVX512 inline __m512 fused_mul_add(__m512 a, __m512 b, __m512 c) {
  return _mm512_fmadd_ps(a, b, c);
}
FASTGNN_TARGET_AVX512 inline __m512d fused_mul_add(__m512d a, __m512d b, __m512d c) {
  return _mm512_fmadd_pd(a, b, c);
}
#endif

// c + a * b: one rounding in the AVX2 and AVX-512 clones, two in the baseline one (no FMA).
template <Isa kIsa, typename acc_t>
FASTGNN_ALWAYS_INLINE acc_t mul_add(acc_t a, acc_t b, acc_t c) {
#if FASTGNN_HAVE_AVX2_CLONE
  if constexpr (kIsa != Isa::kBaseline) return fused_mul_add(a, b, c);
#endif
  return a * b + c;
}

// W bfloat16 bit patterns and the float bit patterns they widen to.
template <int W>
struct BfloatBits {
  typedef uint16_t narrow __attribute__((vector_size(2 * W)));
  typedef uint32_t wide __attribute__((vector_size(4 * W)));
};

// W bfloat16 values widened to the floats they are the high half of: exact, no per-value
// conversion.
template <int W, typename Float>
FASTGNN_ALWAYS_INLINE Float widen_bfloat16(const c10::BFloat16* p) {
  typename BfloatBits<W>::narrow bits;
  std::memcpy(&bits, p, sizeof(bits));
  const auto wide = __builtin_convertvector(bits, typename BfloatBits<W>::wide) << 16;
  Float v;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}

// W float lanes rounded to bfloat16 as c10::BFloat16 rounds one value (to nearest even, NaN to
// 0x7fc0), bit for bit.
template <int W, typename Float>
FASTGNN_ALWAYS_INLINE void narrow_bfloat16(Float v, c10::BFloat16* p) {
  using Wide = typename BfloatBits<W>::wide;
  Wide bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const Wide rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const Wide nan = Wide{} + 0x7fc0u;
  const auto narrow =
      __builtin_convertvector(v != v ? nan : rounded, typename BfloatBits<W>::narrow);
  std::memcpy(p, &narrow, sizeof(narrow));
}

// A vector of accumulators as a GCC/Clang vector: 32 bytes (8 floats or 4 doubles), 64 for
// AVX-512 bodies. The compiler maps 32 bytes to one AVX register, or two SSE ones on the
// baseline ISA, and keeps tiles in registers. (Its load/store are always inlined, so the ABI
// note GCC gives for the baseline ISA is moot.)
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename scalar_t, Isa kIsa = Isa::kBaseline>
struct AccVec {
  using acc_t = acc_type<scalar_t>;
  static constexpr int kBytes = kIsa == Isa::kAvx512 ? 64 : 32;
  typedef acc_t type __attribute__((vector_size(kBytes)));
  static constexpr int kLanes = kBytes / int(sizeof(acc_t));
#if FASTGNN_HAVE_AVX2_CLONE
  static constexpr bool kHardwareFloat16 =
      std::is_same_v<scalar_t, c10::Half> && kIsa != Isa::kBaseline;
#else
  static constexpr bool kHardwareFloat16 = false;
#endif
  // Loads and stores a whole vector of features with no per-value conversion: float16 by F16C,
  // bfloat16 (the high half of a float) by widening and shifting, on any ISA.
  static constexpr bool kVectorConvert =
      kHardwareFloat16 || std::is_same_v<scalar_t, c10::BFloat16>;

  static FASTGNN_ALWAYS_INLINE type load(const scalar_t* p) {
    type v;
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      std::memcpy(&v, p, sizeof(v));
#if FASTGNN_HAVE_AVX2_CLONE
    } else if constexpr (kHardwareFloat16 && kIsa == Isa::kAvx512) {
      v = type(load16_float16(p));
    } else if constexpr (kHardwareFloat16) {
      v = type(load8_float16(p));
    } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16> && kIsa == Isa::kAvx512) {
      v = type(load16_bfloat16(p));
    } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16> && kIsa == Isa::kAvx2) {
      v = type(load8_bfloat16(p));
#endif
    } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
      v = widen_bfloat16<kLanes, type>(p);
    } else {
      for (int k = 0; k < kLanes; ++k) v[k] = acc_t(p[k]);
    }
    return v;
  }

  // acc + w * v, as the scalar mul_add.
  static FASTGNN_ALWAYS_INLINE type mul_add(acc_t w, type v, type acc) {
#if FASTGNN_HAVE_AVX2_CLONE
    constexpr bool kFloat = std::is_same_v<acc_t, float>;
    const type wv = type{} + w;
    if constexpr (kIsa == Isa::kAvx512 && kFloat) {
      return type(fused_mul_add(__m512(wv), __m512(v), __m512(acc)));
    } else if constexpr (kIsa == Isa::kAvx512) {
      return type(fused_mul_add(__m512d(wv), __m512d(v), __m512d(acc)));
    } else if constexpr (kIsa == Isa::kAvx2 && kFloat) {
      return type(fused_mul_add(__m256(wv), __m256(v), __m256(acc)));
    } else if constexpr (kIsa == Isa::kAvx2) {
      return type(fused_mul_add(__m256d(wv), __m256d(v), __m256d(acc)));
    }
#endif
    return acc + w * v;
  }

  static FASTGNN_ALWAYS_INLINE void store(type v, scalar_t* p) {
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      std::memcpy(p, &v, sizeof(v));
#if FASTGNN_HAVE_AVX2_CLONE
    } else if constexpr (kHardwareFloat16 && kIsa == Isa::kAvx512) {
      store16_float16(__m512(v), p);
    } else if constexpr (kHardwareFloat16) {
      store8_float16(__m256(v), p);
#endif
    } else if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
      narrow_bfloat16<kLanes>(v, p);
    } else {
      for (int k = 0; k < kLanes; ++k) p[k] = scalar_t(v[k]);
    }
  }
};

// The 8-float vector the row helpers below convert with in a clone (8 lanes in the AVX-512 one
// too: rows are often a head of 8-64 features).
template <typename feat_t, Isa kIsa>
using RowVec = AccVec<feat_t, kIsa == Isa::kBaseline ? Isa::kBaseline : Isa::kAvx2>;

// One value as acc_t (float16 by F16C in the AVX2 and AVX-512 clones).
template <Isa kIsa, typename feat_t>
FASTGNN_ALWAYS_INLINE acc_type<feat_t> to_acc(feat_t v) {
  if constexpr (AccVec<feat_t, kIsa>::kHardwareFloat16) {
#if FASTGNN_HAVE_AVX2_CLONE
    return load1_float16(v);
#endif
  } else {
    return acc_type<feat_t>(v);
  }
}

// n values of `row` as acc_t: the row itself when feat_t is acc_t, else converted into
// `buffer`, 8 values at a time where AccVec::kVectorConvert.
template <Isa kIsa, typename acc_t, typename feat_t>
FASTGNN_ALWAYS_INLINE const acc_t* as_acc(const feat_t* FASTGNN_RESTRICT row, int64_t n,
                                          acc_t* FASTGNN_RESTRICT buffer) {
  if constexpr (std::is_same_v<acc_t, feat_t>) {
    return row;
  } else {
    int64_t d = 0;
    using Vec = RowVec<feat_t, kIsa>;
    if constexpr (Vec::kVectorConvert) {
      for (; d + Vec::kLanes <= n; d += Vec::kLanes) {
        const typename Vec::type v = Vec::load(row + d);
        std::memcpy(buffer + d, &v, sizeof(v));
      }
    }
#pragma omp simd
    for (int64_t t = d; t < n; ++t) buffer[t] = to_acc<kIsa>(row[t]);
    return buffer;
  }
}

// n acc_t values written to `row` as feat_t, 8 at a time where AccVec::kVectorConvert.
template <Isa kIsa, typename feat_t, typename acc_t>
FASTGNN_ALWAYS_INLINE void store_as(const acc_t* FASTGNN_RESTRICT values, int64_t n,
                                    feat_t* FASTGNN_RESTRICT row) {
  int64_t d = 0;
  using Vec = RowVec<feat_t, kIsa>;
  if constexpr (Vec::kVectorConvert) {
    for (; d + Vec::kLanes <= n; d += Vec::kLanes) {
      typename Vec::type v;
      std::memcpy(&v, values + d, sizeof(v));
      Vec::store(v, row + d);
    }
  }
  for (; d < n; ++d) row[d] = feat_t(values[d]);
}

// The sum of 8 float lanes, halves added pairwise: 3 dependent adds, where GCC's reduction
// epilogue adds the lanes one after another (the attention forwards' logits wait on it).
template <typename V>
FASTGNN_ALWAYS_INLINE float sum_lanes8(V v) {
  static_assert(sizeof(V) == 8 * sizeof(float), "8 float lanes");
  float half4[4], quarter[2];
  for (int k = 0; k < 4; ++k) half4[k] = v[k] + v[k + 4];
  for (int k = 0; k < 2; ++k) quarter[k] = half4[k] + half4[k + 2];
  return quarter[0] + quarter[1];
}

// <a, b> with b converted to acc_t as it is read (8 values at a time where
// AccVec::kVectorConvert, straight into the multiply, the lanes summed as a tree). With kKeep
// the converted b is also written to `keep` (for callers that need it as well as the sum).
template <Isa kIsa, bool kKeep = false, typename acc_t, typename feat_t>
FASTGNN_ALWAYS_INLINE acc_t dot_as_acc(const acc_t* FASTGNN_RESTRICT a,
                                       const feat_t* FASTGNN_RESTRICT b, int64_t n,
                                       acc_t* FASTGNN_RESTRICT keep = nullptr) {
  acc_t s = 0;
  int64_t d = 0;
  using Vec = RowVec<feat_t, kIsa>;
  if constexpr (Vec::kVectorConvert) {
    typename Vec::type sum = {};
    for (; d + Vec::kLanes <= n; d += Vec::kLanes) {
      typename Vec::type av;
      std::memcpy(&av, a + d, sizeof(av));
      const typename Vec::type bv = Vec::load(b + d);
      if constexpr (kKeep) std::memcpy(keep + d, &bv, sizeof(bv));
      sum += av * bv;
    }
    s = sum_lanes8(sum);
    // The tail (under 8 values) one by one: as an `omp simd` reduction, GCC vectorises the
    // bfloat16 one and sums its lanes from the stack on every call, even when it is empty.
    for (; d < n; ++d) {
      const acc_t bv = to_acc<kIsa>(b[d]);
      if constexpr (kKeep) keep[d] = bv;
      s += a[d] * bv;
    }
    return s;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t t = 0; t < n; ++t) {
    const acc_t bv = to_acc<kIsa>(b[t]);
    if constexpr (kKeep) keep[t] = bv;
    s += a[t] * bv;
  }
  return s;
}

// y += alpha * x, x converted to acc_t as it is read (as dot_as_acc).
template <Isa kIsa, typename acc_t, typename feat_t>
FASTGNN_ALWAYS_INLINE void add_scaled_as_acc(acc_t* FASTGNN_RESTRICT y, acc_t alpha,
                                             const feat_t* FASTGNN_RESTRICT x, int64_t n) {
  int64_t d = 0;
  using Vec = RowVec<feat_t, kIsa>;
  if constexpr (Vec::kVectorConvert) {
    for (; d + Vec::kLanes <= n; d += Vec::kLanes) {
      typename Vec::type yv;
      std::memcpy(&yv, y + d, sizeof(yv));
      yv += alpha * Vec::load(x + d);
      std::memcpy(y + d, &yv, sizeof(yv));
    }
  }
#pragma omp simd
  for (int64_t t = d; t < n; ++t) y[t] += alpha * to_acc<kIsa>(x[t]);
}

// Avx2Body compiled for AVX2+FMA+F16C when the CPU has it, else BaselineBody: for bodies that
// differ only in their float16 conversions (an Isa parameter). on_best_isa passes one body.
template <auto Avx2Body, auto BaselineBody, typename... Args>
void on_avx2_or_baseline(Args&&... args) {
#if FASTGNN_HAVE_AVX2_CLONE
  if (cpu_has_avx2()) return on_avx2<Avx2Body>(std::forward<Args>(args)...);
#endif
  on_baseline_isa<BaselineBody>(std::forward<Args>(args)...);
}

template <auto Body, typename... Args>
void on_best_isa(Args&&... args) {
  on_avx2_or_baseline<Body, Body>(std::forward<Args>(args)...);
}

// For bodies whose tiles follow the vector width: Avx512Body compiled for AVX-512 when the CPU
// has it, else Avx2Body for AVX2+FMA, else BaselineBody for the baseline ISA.
template <auto Avx512Body, auto Avx2Body, auto BaselineBody, typename... Args>
void on_widest_isa(Args&&... args) {
#if FASTGNN_HAVE_AVX2_CLONE
  if (cpu_has_avx512()) return on_avx512<Avx512Body>(std::forward<Args>(args)...);
  if (cpu_has_avx2()) return on_avx2<Avx2Body>(std::forward<Args>(args)...);
#endif
  on_baseline_isa<BaselineBody>(std::forward<Args>(args)...);
}

}  // namespace cpu
}  // namespace fastgnn
