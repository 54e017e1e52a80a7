// CPU min/max aggregation: OpenMP over destination rows (dynamic schedule for skewed degrees),
// the feature loop innermost, branch-free and contiguous so the compiler vectorises it. The
// winning source is tracked alongside the running value; with edge weights (kWeighted) each
// message is x[col[e], f] * weight[edge e, head of f] and the winning CSR position e is tracked.
// Equal messages: the earliest edge of the row wins, or with kLastWins the latest. With
// kIgnoreNaN (DGL's rule) a row starts from the identity (-inf for max, +inf for min) with no
// winner (-1) and takes a message only when an ordered comparison says it is better (with
// kLastWins: better or equal), so NaN messages never win and rows no message won keep the
// identity.
#include "cpu/cpu_common.h"
#include "minmax_checks.h"

#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

// Whether v replaces the running best b. Edges arrive in CSR order (ascending sources), so a
// strict comparison keeps the earliest edge (the smallest source) among ties; kLastWins keeps
// the latest. NaN beats every number and, once held, is replaced by nothing (kLastWins: by a
// later NaN only, as by a later equal number): !(v >= b) is true for v NaN, b == b is false
// for b NaN; v >= b is false when either is NaN, v != v true for v NaN. kIgnoreNaN: ordered
// comparisons alone, false for NaN.
template <bool kMax, bool kLastWins, bool kIgnoreNaN, typename acc_t>
inline bool replaces(acc_t v, acc_t b) {
  if constexpr (kIgnoreNaN)
    return kLastWins ? (kMax ? v >= b : v <= b) : (kMax ? v > b : v < b);
  else if constexpr (kLastWins)
    return (kMax ? v >= b : v <= b) | (v != v);
  else
    return (kMax ? !(v <= b) : !(v >= b)) & (b == b);
}

// Optional edge weights of one head, in input edge order: the weight of CSR position e,
// w[edge(e) * stride], multiplies the features of the head being reduced (stride: the number
// of heads; perm maps positions to input edges, null: the same order). The product is rounded
// to the feature type before it is compared, as a framework multiplying in that type would.
template <typename scalar_t, typename index_t>
struct HeadWeights {
  const scalar_t* w;
  int64_t stride;
  const index_t* perm;
  scalar_t at(index_t e) const { return w[int64_t(perm ? perm[e] : e) * stride]; }
};

template <bool kWeighted, typename scalar_t, typename acc_t, typename index_t>
inline acc_t message(scalar_t xv, HeadWeights<scalar_t, index_t> hw, index_t e) {
  if constexpr (kWeighted)
    return acc_t(scalar_t(acc_t(xv) * acc_t(hw.at(e))));
  else
    return acc_t(xv);
}

// GCC's vector extensions (selects on vector masks included) carry the vector tiles (float32
// and half rows); other compilers take the generic loop.
#if defined(__GNUC__) && !defined(__clang__)
#define FASTGNN_VECTOR_TILES 1
#endif

#ifdef FASTGNN_VECTOR_TILES
// W-lane vector types (no intrinsics: the same code builds for SSE2 and AVX2).
template <int W>
struct Lanes {
  typedef float f32 __attribute__((vector_size(4 * W)));
  typedef int32_t i32 __attribute__((vector_size(4 * W)));
  typedef float f32_unaligned __attribute__((vector_size(4 * W), aligned(4)));
  typedef int32_t i32_unaligned __attribute__((vector_size(4 * W), aligned(4)));
};

constexpr int32_t kPrefetchAhead = 8;  // edges between a row's prefetch and its use

// W values of a float32, bfloat16 or (8 lanes: the AVX2 clone's F16C) float16 row as float
// lanes: bfloat16's bits are the upper half of the float32 it stands for, so a widening and a
// shift convert it exactly.
template <int W, typename feat_t>
inline __attribute__((always_inline)) typename Lanes<W>::f32 load_lanes(const feat_t* p) {
  using L = Lanes<W>;
  if constexpr (std::is_same_v<feat_t, float>) {
    return *reinterpret_cast<const typename L::f32_unaligned*>(p);
#if FASTGNN_HAVE_AVX2_CLONE
  } else if constexpr (std::is_same_v<feat_t, c10::Half> && W == 8) {
    return (typename L::f32)load8_float16(p);
#endif
  } else {
    static_assert(std::is_same_v<feat_t, c10::BFloat16>, "float32 or bfloat16 rows");
    return widen_bfloat16<W, typename L::f32>(p);
  }
}

// float32 (or, unweighted, bfloat16 or float16: load_lanes) features with int32 sources, the
// common case: features [f0, f0 + W * kVecs) of one row over edges [begin, end), the running
// values (float) and sources held in vector registers.
template <bool kMax, bool kWeighted, bool kLastWins, bool kIgnoreNaN, int W, int kVecs,
          typename feat_t>
inline __attribute__((always_inline)) void reduce_tile_f32(const int32_t* col, int32_t begin,
                                                            int32_t end, const feat_t* x,
                                                            HeadWeights<feat_t, int32_t> hw,
                                                            int64_t width,
                                                            int64_t f0, float* b, int32_t* a) {
  static_assert(std::is_same_v<feat_t, float> || !kWeighted,
                "a weighted message is rounded to the feature type: float32 only here");
  using L = Lanes<W>;
  typename L::f32 best[kVecs];
  typename L::i32 src[kVecs];
  for (int k = 0; k < kVecs; ++k) {
    best[k] = *reinterpret_cast<const typename L::f32_unaligned*>(b + f0 + W * k);
    src[k] = *reinterpret_cast<const typename L::i32_unaligned*>(a + f0 + W * k);
  }
  for (int32_t e = begin; e < end; ++e) {
    const int32_t j = col[e];
    const feat_t* xj = x + int64_t(j) * width + f0;
    if (e + kPrefetchAhead < end)  // the tile of a later edge's row
      prefetch_row(x + int64_t(col[e + kPrefetchAhead]) * width + f0, W * kVecs);
    const typename L::i32 jv = typename L::i32{} + (kWeighted ? e : j);
    for (int k = 0; k < kVecs; ++k) {
      typename L::f32 v = load_lanes<W>(xj + W * k);
      if constexpr (kWeighted) v = v * hw.at(e);
      typename L::i32 take;  // as replaces()
      if constexpr (kIgnoreNaN && kLastWins)
        take = kMax ? v >= best[k] : v <= best[k];
      else if constexpr (kIgnoreNaN)
        take = kMax ? v > best[k] : v < best[k];
      else if constexpr (kLastWins)
        take = (kMax ? v >= best[k] : v <= best[k]) | (v != v);
      else
        take = (kMax ? ~(v <= best[k]) : ~(v >= best[k])) & (best[k] == best[k]);
      best[k] = take ? v : best[k];
      src[k] = take ? jv : src[k];
    }
  }
  for (int k = 0; k < kVecs; ++k) {
    *reinterpret_cast<typename L::f32_unaligned*>(b + f0 + W * k) = best[k];
    *reinterpret_cast<typename L::i32_unaligned*>(a + f0 + W * k) = src[k];
  }
}

#if defined(__x86_64__)
#define FASTGNN_AVX512_TILES 1
// load_lanes at 16 lanes for AVX-512, in intrinsics (float16 converted by vcvtph2ps).
template <typename feat_t>
FASTGNN_TARGET_AVX512 inline __attribute__((always_inline)) __m512 load16(const feat_t* p) {
  if constexpr (std::is_same_v<feat_t, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<feat_t, c10::Half>) {
    return load16_float16(p);
  } else {
    return load16_bfloat16(p);
  }
}

// reduce_tile_f32 at 16 lanes for AVX-512, in intrinsics: GCC compiles the vector extensions'
// 16-lane selects element by element (20x slower). Not always_inline: only the AVX-512 row
// clone may inline it (a function of another target may not), the others never call it.
template <bool kMax, bool kWeighted, bool kLastWins, bool kIgnoreNaN, int kVecs,
          typename feat_t>
FASTGNN_TARGET_AVX512 void reduce_tile_f32_avx512(
    const int32_t* col, int32_t begin, int32_t end, const feat_t* x,
    HeadWeights<feat_t, int32_t> hw, int64_t width, int64_t f0, float* b, int32_t* a) {
  __m512 best[kVecs];
  __m512i src[kVecs];
  for (int k = 0; k < kVecs; ++k) {
    best[k] = _mm512_loadu_ps(b + f0 + 16 * k);
    src[k] = _mm512_loadu_si512(a + f0 + 16 * k);
  }
  for (int32_t e = begin; e < end; ++e) {
    const int32_t j = col[e];
    const feat_t* xj = x + int64_t(j) * width + f0;
    if (e + kPrefetchAhead < end)  // the tile of a later edge's row
      prefetch_row(x + int64_t(col[e + kPrefetchAhead]) * width + f0, 16 * kVecs);
    const __m512i jv = _mm512_set1_epi32(kWeighted ? e : j);
    for (int k = 0; k < kVecs; ++k) {
      __m512 v = load16(xj + 16 * k);
      if constexpr (kWeighted) v = _mm512_mul_ps(v, _mm512_set1_ps(hw.at(e)));
      // replaces(): !(v <= b) (min: !(v >= b)), true when either is NaN, and b not NaN;
      // kLastWins: v >= b (min: v <= b), false when either is NaN, or v NaN; kIgnoreNaN: the
      // ordered comparison alone
      __mmask16 take;
      if constexpr (kIgnoreNaN)
        take = _mm512_cmp_ps_mask(v, best[k], kLastWins ? (kMax ? _CMP_GE_OQ : _CMP_LE_OQ)
                                                        : (kMax ? _CMP_GT_OQ : _CMP_LT_OQ));
      else if constexpr (kLastWins)
        take = _mm512_cmp_ps_mask(v, best[k], kMax ? _CMP_GE_OQ : _CMP_LE_OQ) |
               _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      else
        take = _mm512_cmp_ps_mask(v, best[k], kMax ? _CMP_NLE_UQ : _CMP_NGE_UQ) &
               _mm512_cmp_ps_mask(best[k], best[k], _CMP_ORD_Q);
      best[k] = _mm512_mask_mov_ps(best[k], take, v);
      src[k] = _mm512_mask_mov_epi32(src[k], take, jv);
    }
  }
  for (int k = 0; k < kVecs; ++k) {
    _mm512_storeu_ps(b + f0 + 16 * k, best[k]);
    _mm512_storeu_si512(a + f0 + 16 * k, src[k]);
  }
}
#endif

#endif  // FASTGNN_VECTOR_TILES

// Any types: features [f0, f1) of one row over edges [begin, end).
template <bool kMax, bool kWeighted, bool kLastWins, bool kIgnoreNaN, typename scalar_t,
          typename index_t, typename acc_t>
inline __attribute__((always_inline)) void reduce_features(const index_t* col, index_t begin,
                                                            index_t end, const scalar_t* x,
                                                            HeadWeights<scalar_t, index_t> hw,
                                                            int64_t width, int64_t f0, int64_t f1,
                                                            acc_t* b, index_t* a) {
  for (index_t e = begin; e < end; ++e) {
    const index_t j = col[e];
    const index_t won = kWeighted ? e : j;
    const scalar_t* xj = x + int64_t(j) * width;
    for (int64_t f = f0; f < f1; ++f) {
      const acc_t v = message<kWeighted, scalar_t, acc_t>(xj[f], hw, e);
      const bool take = replaces<kMax, kLastWins, kIgnoreNaN>(v, b[f]);
      b[f] = take ? v : b[f];
      a[f] = take ? won : a[f];
    }
  }
}

// Features [f0, f1) (one head's, with weights) of one row over edges [begin, end), b and a
// already holding the running values (the first edge's messages, or the identity with no
// winner): vector tiles, then the generic loop.
template <bool kMax, bool kWeighted, bool kLastWins, bool kIgnoreNaN, int W, typename scalar_t,
          typename index_t, typename acc_t>
inline __attribute__((always_inline)) void reduce_span(const index_t* col, index_t begin,
                                                        index_t end, const scalar_t* x,
                                                        HeadWeights<scalar_t, index_t> hw,
                                                        int64_t width,
                                                        int64_t f0, int64_t f1, acc_t* b,
                                                        index_t* a) {
#ifdef FASTGNN_VECTOR_TILES
  // Half rows convert to float lanes exactly: bfloat16 in every clone, float16 in the AVX2 and
  // AVX-512 ones (F16C; load_lanes, load16). A weighted half message is rounded to its type
  // (message()), which the tiles do not do.
#ifdef FASTGNN_AVX512_TILES
  constexpr bool kFloat16Lanes = std::is_same_v<scalar_t, c10::Half> && (W == 16 || W == 8);
#else
  constexpr bool kFloat16Lanes = false;
#endif
  constexpr bool kTiles = std::is_same_v<index_t, int32_t> &&
                          (std::is_same_v<scalar_t, float> ||
                           ((std::is_same_v<scalar_t, c10::BFloat16> || kFloat16Lanes) &&
                            !kWeighted));
  if constexpr (kTiles) {
    constexpr int kVecs = 4;  // 4 + 4 registers of running values and sources
#ifdef FASTGNN_AVX512_TILES
    if constexpr (W == 16) {
      for (; f0 + W * kVecs <= f1; f0 += W * kVecs)
        reduce_tile_f32_avx512<kMax, kWeighted, kLastWins, kIgnoreNaN, kVecs>(
            col, begin, end, x, hw, width, f0, b, a);
      for (; f0 + W <= f1; f0 += W)
        reduce_tile_f32_avx512<kMax, kWeighted, kLastWins, kIgnoreNaN, 1>(
            col, begin, end, x, hw, width, f0, b, a);
    } else  // NOLINT(readability/braces)
#endif
    {
      for (; f0 + W * kVecs <= f1; f0 += W * kVecs)
        reduce_tile_f32<kMax, kWeighted, kLastWins, kIgnoreNaN, W, kVecs>(
            col, begin, end, x, hw, width, f0, b, a);
      for (; f0 + W <= f1; f0 += W)
        reduce_tile_f32<kMax, kWeighted, kLastWins, kIgnoreNaN, W, 1>(
            col, begin, end, x, hw, width, f0, b, a);
    }
  }
#endif
  if (f0 < f1)
    reduce_features<kMax, kWeighted, kLastWins, kIgnoreNaN>(col, begin, end, x, hw, width, f0,
                                                            f1, b, a);
}

// One destination row i under kIgnoreNaN: every entry starts from the identity with no winner
// (-1), and all of the row's edges are compared against it.
template <bool kMax, bool kWeighted, bool kLastWins, int W, typename scalar_t, typename index_t,
          typename acc_t>
inline __attribute__((always_inline)) void reduce_row_from_identity(
    const index_t* rowptr, const index_t* col, const scalar_t* x, const scalar_t* weight,
    int64_t heads, const index_t* perm, scalar_t* out, index_t* arg, int64_t i, int64_t width,
    acc_t* b) {
  index_t* a = arg + i * width;
  const index_t begin = rowptr[i], end = rowptr[i + 1];
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  for (int64_t f = 0; f < width; ++f) b[f] = kMax ? -kInf : kInf;
  for (int64_t f = 0; f < width; ++f) a[f] = index_t(-1);
  const int64_t span = kWeighted ? width / heads : width;
  for (int64_t h = 0; h < (kWeighted ? heads : 1); ++h)
    reduce_span<kMax, kWeighted, kLastWins, true, W>(
        col, begin, end, x, HeadWeights<scalar_t, index_t>{weight + h, heads, perm}, width,
        h * span, (h + 1) * span, b, a);
  scalar_t* o = out + i * width;
  for (int64_t f = 0; f < width; ++f) o[f] = scalar_t(b[f]);
}

// One destination row i: out/arg row i; b is a per-thread buffer of width entries. W is the
// vector width of the tiles. With weights ([E, heads], CSR order) each head's features are
// reduced with that head's weight column.
template <bool kMax, bool kWeighted, bool kLastWins, bool kIgnoreNaN, int W, typename scalar_t,
          typename index_t, typename acc_t>
inline __attribute__((always_inline)) void reduce_row(
    const index_t* rowptr, const index_t* col, const scalar_t* x, const scalar_t* weight,
    int64_t heads, const index_t* perm, scalar_t* out, index_t* arg, int64_t i, int64_t width,
    acc_t* b) {
  if constexpr (kIgnoreNaN) {
    reduce_row_from_identity<kMax, kWeighted, kLastWins, W>(rowptr, col, x, weight, heads, perm,
                                                            out, arg, i, width, b);
    return;
  }
  scalar_t* o = out + i * width;
  index_t* a = arg + i * width;
  const index_t begin = rowptr[i], end = rowptr[i + 1];
  if (begin == end) {
    for (int64_t f = 0; f < width; ++f) o[f] = scalar_t(0);
    for (int64_t f = 0; f < width; ++f) a[f] = index_t(-1);
    return;
  }
  const index_t first = col[begin];
  const scalar_t* x0 = x + int64_t(first) * width;
  if constexpr (kWeighted) {
    const int64_t span = width / heads;
    for (int64_t h = 0; h < heads; ++h) {
      const HeadWeights<scalar_t, index_t> hw{weight + h, heads, perm};
      for (int64_t f = h * span; f < (h + 1) * span; ++f)
        b[f] = message<kWeighted, scalar_t, acc_t>(x0[f], hw, begin);
      for (int64_t f = h * span; f < (h + 1) * span; ++f) a[f] = begin;
      reduce_span<kMax, kWeighted, kLastWins, false, W>(col, begin + 1, end, x, hw, width,
                                                        h * span, (h + 1) * span, b, a);
    }
  } else {
    for (int64_t f = 0; f < width; ++f) b[f] = acc_t(x0[f]);
    for (int64_t f = 0; f < width; ++f) a[f] = first;
    reduce_span<kMax, kWeighted, kLastWins, false, W>(
        col, begin + 1, end, x, HeadWeights<scalar_t, index_t>{nullptr, 0, nullptr}, width, 0,
        width, b, a);
  }
  for (int64_t f = 0; f < width; ++f) o[f] = scalar_t(b[f]);
}

template <typename scalar_t, typename index_t, bool kMax, bool kWeighted, bool kLastWins,
          bool kIgnoreNaN>
void minmax_rows(const index_t* rowptr, const index_t* col, const scalar_t* x,
                 const scalar_t* weight, int64_t heads, const index_t* perm, scalar_t* out,
                 index_t* arg, int64_t rows, int64_t width) {
  using acc_t = acc_type<scalar_t>;
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> best(width);
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < rows; ++i)
      // tiles of 16 lanes on AVX-512, 8 on AVX2, 4 on the baseline ISA
      on_widest_isa<
          reduce_row<kMax, kWeighted, kLastWins, kIgnoreNaN, 16, scalar_t, index_t, acc_t>,
          reduce_row<kMax, kWeighted, kLastWins, kIgnoreNaN, 8, scalar_t, index_t, acc_t>,
          reduce_row<kMax, kWeighted, kLastWins, kIgnoreNaN, 4, scalar_t, index_t, acc_t>>(
          rowptr, col, x, weight, heads, perm, out, arg, i, width, best.data());
  }
}

// One slice [f0, f1) of minmax_scatter's features: zeroed, then the rows in order; with `out`
// (half gradients) the slice is then written to it in their dtype. A half row's slice is
// converted once, by vector, before its scatter (converting value by value in the scatter
// loop made the bfloat16 backward 1.2x and the float16 one 1.03-1.1x slower on tolokers).
// kIsa: the clone (float16 converts by F16C in the AVX2 one).
template <typename scalar_t, typename index_t, bool kWeighted, Isa kIsa>
FASTGNN_ALWAYS_INLINE void scatter_slice(const index_t* arg, const scalar_t* grad_out,
                                         const index_t* col, const scalar_t* weight,
                                         int64_t heads, const index_t* perm,
                                         acc_type<scalar_t>* grad, scalar_t* out, int64_t rows,
                                         int64_t num_src, int64_t width, int64_t f0,
                                         int64_t f1) {
  using acc_t = acc_type<scalar_t>;
  const int64_t span = kWeighted ? width / heads : width;
  constexpr bool kHalf = !std::is_same_v<acc_t, scalar_t>;
  std::vector<acc_t> converted(kHalf ? width : 0);  // a half row, indexed by feature
  for (int64_t j = 0; j < num_src; ++j)
    std::fill(grad + j * width + f0, grad + j * width + f1, acc_t(0));
  for (int64_t i = 0; i < rows; ++i) {
    const index_t* a = arg + i * width;
    const scalar_t* row = grad_out + i * width;
    const acc_t* g;
    if constexpr (kHalf) {
      as_acc<kIsa>(row + f0, f1 - f0, converted.data() + f0);
      g = converted.data();
    } else {
      g = row;
    }
    if constexpr (kWeighted) {
      for (int64_t h = f0 / span; h * span < f1; ++h) {  // the heads the slice overlaps
        const int64_t lo = std::max(f0, h * span), hi = std::min(f1, (h + 1) * span);
        const HeadWeights<scalar_t, index_t> hw{weight + h, heads, perm};
        for (int64_t f = lo; f < hi; ++f) {
          const index_t p = a[f];
          if (p >= 0)
            grad[int64_t(col[p]) * width + f] += g[f] * to_acc<kIsa>(hw.at(p));
        }
      }
    } else {
      for (int64_t f = f0; f < f1; ++f)
        if (a[f] >= 0) grad[int64_t(a[f]) * width + f] += g[f];
    }
  }
  if (out) {
    for (int64_t j = 0; j < num_src; ++j)
      store_as<kIsa>(grad + j * width + f0, f1 - f0, out + j * width + f0);
  }
}

// grad[arg[i, f], f] += grad_out[i, f], grad [num_src, width] uninitialised on entry, and for
// half gradients `out` the result in their dtype (each thread converts its own slice, where a
// separate cast read the whole buffer again). Each thread owns a slice of the features, zeroes
// it and walks the rows in order, so every sum has a fixed order (deterministic without
// atomics) and one parallel region does the whole job. With weights (kWeighted) arg holds CSR
// positions p: grad[col[p], f] += grad_out[i, f] * weight[edge of p, head of f].
template <typename scalar_t, typename index_t, bool kWeighted>
void minmax_scatter(const index_t* arg, const scalar_t* grad_out, const index_t* col,
                    const scalar_t* weight, int64_t heads, const index_t* perm,
                    acc_type<scalar_t>* grad, scalar_t* out, int64_t rows, int64_t num_src,
                    int64_t width) {
  const int64_t threads = num_threads();
  constexpr int64_t kAlign = 16;  // a cache line of float: slices do not share lines
  const int64_t per_thread = (width + threads - 1) / threads;
  const int64_t slice = std::max(kAlign, (per_thread + kAlign - 1) / kAlign * kAlign);
  const int64_t slices = (width + slice - 1) / slice;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t s = 0; s < slices; ++s)
    on_avx2_or_baseline<scatter_slice<scalar_t, index_t, kWeighted, Isa::kAvx2>,
                        scatter_slice<scalar_t, index_t, kWeighted, Isa::kBaseline>>(
        arg, grad_out, col, weight, heads, perm, grad, out, rows, num_src, width, s * slice,
        std::min(width, (s + 1) * slice));
}

// grad_w[edge of p, h] (zeroed on entry) = sum over the features f of head h with
// arg[i, f] == p (p in row i) of grad_out[i, f] * x[col[p], f]. Rows own their edges' entries:
// parallel over rows, each row adding in feature order (deterministic, no atomics).
template <typename scalar_t, typename index_t>
void minmax_weight_grad(const index_t* col, const index_t* perm, const index_t* arg,
                        const scalar_t* grad_out, const scalar_t* x, acc_type<scalar_t>* grad_w,
                        int64_t rows, int64_t width, int64_t heads) {
  using acc_t = acc_type<scalar_t>;
  const int64_t span = width / heads;
#pragma omp parallel for num_threads(num_threads()) schedule(dynamic, 64)
  for (int64_t i = 0; i < rows; ++i) {
    const index_t* a = arg + i * width;
    const scalar_t* g = grad_out + i * width;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t f = h * span; f < (h + 1) * span; ++f) {
        const index_t p = a[f];
        if (p >= 0)
          grad_w[int64_t(perm ? perm[p] : p) * heads + h] +=
              acc_t(g[f]) * acc_t(x[int64_t(col[p]) * width + f]);
      }
    }
  }
}

std::tuple<at::Tensor, at::Tensor> minmax_aggregate_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x, bool is_max,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*max_degree*/,
    int64_t /*config*/, const c10::optional<at::Tensor>& /*t_rowptr*/,
    const c10::optional<at::Tensor>& /*t_col*/, int64_t /*graph_key*/,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& edge_perm,
    bool last_wins, bool ignore_nan) {
  check_csr(rowptr, col, "minmax_aggregate");
  TORCH_CHECK(x.dim() == 2, "minmax_aggregate: x must be 2-D [num_src, F], got ", x.dim(), " dims");
  const int64_t rows = rowptr.numel() - 1, width = x.size(1);
  const int64_t heads = check_minmax_weight(weight, edge_perm, col, x, "minmax_aggregate");
  auto xc = x.contiguous();
  auto wc = weight.has_value() ? weight->contiguous() : at::Tensor();
  const bool permuted = heads > 0 && edge_perm.has_value();
  auto out = at::empty({rows, width}, x.options());
  auto arg = at::empty({rows, width}, x.options().dtype(col.scalar_type()));
  if (rows == 0 || width == 0) return {out, arg};
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "minmax_aggregate", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "minmax_aggregate", [&] {
      const scalar_t* w = heads > 0 ? wc.data_ptr<scalar_t>() : nullptr;
      const index_t* perm = permuted ? edge_perm->data_ptr<index_t>() : nullptr;
      auto run = [&](auto is_max_tag, auto weighted_tag, auto last_wins_tag,
                     auto ignore_nan_tag) {
        minmax_rows<scalar_t, index_t, decltype(is_max_tag)::value,
                    decltype(weighted_tag)::value, decltype(last_wins_tag)::value,
                    decltype(ignore_nan_tag)::value>(
            rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), xc.data_ptr<scalar_t>(), w,
            heads, perm, out.data_ptr<scalar_t>(), arg.data_ptr<index_t>(), rows, width);
      };
      auto by_nan = [&](auto is_max_tag, auto weighted_tag, auto last_wins_tag) {
        if (ignore_nan) run(is_max_tag, weighted_tag, last_wins_tag, std::true_type{});
        else run(is_max_tag, weighted_tag, last_wins_tag, std::false_type{});
      };
      auto by_ties = [&](auto is_max_tag, auto weighted_tag) {
        if (last_wins) by_nan(is_max_tag, weighted_tag, std::true_type{});
        else by_nan(is_max_tag, weighted_tag, std::false_type{});
      };
      auto by_weight = [&](auto is_max_tag) {
        if (w) by_ties(is_max_tag, std::true_type{}); else by_ties(is_max_tag, std::false_type{});
      };
      if (is_max) by_weight(std::true_type{}); else by_weight(std::false_type{});
    });
  });
  return {out, arg};
}

at::Tensor minmax_aggregate_backward_cpu(const at::Tensor& arg, const at::Tensor& grad_out,
                                         int64_t num_src,
                                         const c10::optional<at::Tensor>& /*t_rowptr*/,
                                         const c10::optional<at::Tensor>& /*t_col*/,
                                         const c10::optional<at::Tensor>& col,
                                         const c10::optional<at::Tensor>& weight,
                                         const c10::optional<at::Tensor>& edge_perm) {
  TORCH_CHECK(arg.dim() == 2 && grad_out.sizes() == arg.sizes(),
              "minmax_aggregate_backward: grad_out and arg must be [T, F] of one shape");
  TORCH_CHECK(num_src >= 0, "minmax_aggregate_backward: num_src must be non-negative");
  const int64_t heads = check_backward_weight(arg, grad_out, col, weight, edge_perm);
  auto ac = arg.contiguous(), gc = grad_out.contiguous();
  auto cc = heads > 0 ? col->contiguous() : at::Tensor();
  auto wc = heads > 0 ? weight->contiguous() : at::Tensor();
  const auto acc = grad_out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto grad = at::empty({num_src, arg.size(1)}, grad_out.options().dtype(acc));
  const bool half = acc != grad_out.scalar_type();
  auto out = half ? at::empty({num_src, arg.size(1)}, grad_out.options()) : grad;
  FASTGNN_DISPATCH_INDEX(arg.scalar_type(), "minmax_aggregate_backward", [&] {
    FASTGNN_DISPATCH_FLOAT(grad_out.scalar_type(), "minmax_aggregate_backward", [&] {
      auto run = [&](auto weighted_tag) {
        constexpr bool kWeighted = decltype(weighted_tag)::value;
        minmax_scatter<scalar_t, index_t, kWeighted>(
            ac.data_ptr<index_t>(), gc.data_ptr<scalar_t>(),
            kWeighted ? cc.data_ptr<index_t>() : nullptr,
            kWeighted ? wc.data_ptr<scalar_t>() : nullptr, heads,
            kWeighted && edge_perm.has_value() ? edge_perm->data_ptr<index_t>() : nullptr,
            grad.data_ptr<acc_type<scalar_t>>(), half ? out.data_ptr<scalar_t>() : nullptr,
            arg.size(0), num_src, arg.size(1));
      };
      if (heads > 0) run(std::true_type{}); else run(std::false_type{});
    });
  });
  return out;
}

at::Tensor minmax_weight_backward_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                                      const at::Tensor& arg, const at::Tensor& grad_out,
                                      const at::Tensor& x, int64_t heads,
                                      const c10::optional<at::Tensor>& edge_perm) {
  check_csr(rowptr, col, "minmax_weight_backward");
  const int64_t rows = rowptr.numel() - 1;
  check_weight_backward(col, arg, grad_out, x, heads, rows, edge_perm);
  auto ac = arg.contiguous(), gc = grad_out.contiguous(), xc = x.contiguous();
  const auto acc = grad_out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto grad_w = at::zeros({col.numel(), heads}, grad_out.options().dtype(acc));
  if (rows == 0 || arg.size(1) == 0) return grad_w.to(grad_out.scalar_type());
  FASTGNN_DISPATCH_INDEX(col.scalar_type(), "minmax_weight_backward", [&] {
    FASTGNN_DISPATCH_FLOAT(grad_out.scalar_type(), "minmax_weight_backward", [&] {
      minmax_weight_grad<scalar_t, index_t>(
          col.data_ptr<index_t>(), edge_perm.has_value() ? edge_perm->data_ptr<index_t>() : nullptr,
          ac.data_ptr<index_t>(), gc.data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(),
          grad_w.data_ptr<acc_type<scalar_t>>(), rows, arg.size(1), heads);
    });
  });
  return grad_w.scalar_type() == grad_out.scalar_type() ? grad_w
                                                        : grad_w.to(grad_out.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("minmax_aggregate", &minmax_aggregate_cpu);
  m.impl("minmax_aggregate_backward", &minmax_aggregate_backward_cpu);
  m.impl("minmax_weight_backward", &minmax_weight_backward_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
