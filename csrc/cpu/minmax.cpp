// CPU min/max aggregation: OpenMP over destination rows (dynamic schedule for skewed degrees),
// the feature loop innermost, branch-free and contiguous so the compiler vectorises it. The
// winning source is tracked alongside the running value.
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

// Whether v replaces the running best b. Edges arrive in ascending source order, so a strict
// comparison keeps the smallest source among ties. NaN beats every number and, once held, is
// never replaced: !(v >= b) is true for v NaN, and b == b is false for b NaN.
template <bool kMax, typename acc_t>
inline bool replaces(acc_t v, acc_t b) {
  return (kMax ? !(v <= b) : !(v >= b)) & (b == b);
}

// GCC's vector extensions (selects on vector masks included) carry the float32 fast path;
// other compilers take the generic loop.
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

// float32 features with int32 sources, the common case: features [f0, f0 + W * kVecs) of one
// row over edges [begin, end), the running values and sources held in vector registers.
template <bool kMax, int W, int kVecs>
inline __attribute__((always_inline)) void reduce_tile_f32(const int32_t* col, int32_t begin,
                                                            int32_t end, const float* x,
                                                            int64_t width, int64_t f0, float* b,
                                                            int32_t* a) {
  using L = Lanes<W>;
  typename L::f32 best[kVecs];
  typename L::i32 src[kVecs];
  for (int k = 0; k < kVecs; ++k) {
    best[k] = *reinterpret_cast<const typename L::f32_unaligned*>(b + f0 + W * k);
    src[k] = *reinterpret_cast<const typename L::i32_unaligned*>(a + f0 + W * k);
  }
  for (int32_t e = begin; e < end; ++e) {
    const int32_t j = col[e];
    const float* xj = x + int64_t(j) * width + f0;
    if (e + kPrefetchAhead < end)  // the tile of a later edge's row
      prefetch_row(x + int64_t(col[e + kPrefetchAhead]) * width + f0, W * kVecs);
    const typename L::i32 jv = typename L::i32{} + j;
    for (int k = 0; k < kVecs; ++k) {
      const typename L::f32 v = *reinterpret_cast<const typename L::f32_unaligned*>(xj + W * k);
      const typename L::i32 take =
          (kMax ? ~(v <= best[k]) : ~(v >= best[k])) & (best[k] == best[k]);  // as replaces()
      best[k] = take ? v : best[k];
      src[k] = take ? jv : src[k];
    }
  }
  for (int k = 0; k < kVecs; ++k) {
    *reinterpret_cast<typename L::f32_unaligned*>(b + f0 + W * k) = best[k];
    *reinterpret_cast<typename L::i32_unaligned*>(a + f0 + W * k) = src[k];
  }
}

#endif  // FASTGNN_VECTOR_TILES

// Any types: features [f0, width) of one row over edges [begin, end).
template <bool kMax, typename scalar_t, typename index_t, typename acc_t>
inline __attribute__((always_inline)) void reduce_features(const index_t* col, index_t begin,
                                                            index_t end, const scalar_t* x,
                                                            int64_t width, int64_t f0, acc_t* b,
                                                            index_t* a) {
  for (index_t e = begin; e < end; ++e) {
    const index_t j = col[e];
    const scalar_t* xj = x + int64_t(j) * width;
    for (int64_t f = f0; f < width; ++f) {
      const acc_t v = acc_t(xj[f]);
      const bool take = replaces<kMax>(v, b[f]);
      b[f] = take ? v : b[f];
      a[f] = take ? j : a[f];
    }
  }
}

// One destination row i: out/arg row i; b is a per-thread buffer of width entries. W is the
// vector width of the float32 fast path.
template <bool kMax, int W, typename scalar_t, typename index_t, typename acc_t>
inline __attribute__((always_inline)) void reduce_row(const index_t* rowptr,
                                                       const index_t* col, const scalar_t* x,
                                                       scalar_t* out, index_t* arg, int64_t i,
                                                       int64_t width, acc_t* b) {
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
  for (int64_t f = 0; f < width; ++f) b[f] = acc_t(x0[f]);
  for (int64_t f = 0; f < width; ++f) a[f] = first;
  int64_t f0 = 0;
#ifdef FASTGNN_VECTOR_TILES
  if constexpr (std::is_same_v<scalar_t, float> && std::is_same_v<index_t, int32_t>) {
    constexpr int kVecs = 4;  // 4 + 4 registers of running values and sources
    for (; f0 + W * kVecs <= width; f0 += W * kVecs)
      reduce_tile_f32<kMax, W, kVecs>(col, begin + 1, end, x, width, f0, b, a);
    for (; f0 + W <= width; f0 += W)
      reduce_tile_f32<kMax, W, 1>(col, begin + 1, end, x, width, f0, b, a);
  }
#endif
  if (f0 < width) reduce_features<kMax>(col, begin + 1, end, x, width, f0, b, a);
  for (int64_t f = 0; f < width; ++f) o[f] = scalar_t(b[f]);
}

// reduce_row for the baseline ISA and for AVX2, picked at run time (the build assumes
// neither). AVX-512 is left out: GCC's 16-lane selects compile poorly.
template <bool kMax, typename scalar_t, typename index_t, typename acc_t>
void reduce_row_base(const index_t* rowptr, const index_t* col, const scalar_t* x, scalar_t* out,
                     index_t* arg, int64_t i, int64_t width, acc_t* b) {
  reduce_row<kMax, 4>(rowptr, col, x, out, arg, i, width, b);
}

#if defined(__x86_64__) && defined(FASTGNN_VECTOR_TILES)
#define FASTGNN_X86_DISPATCH 1
template <bool kMax, typename scalar_t, typename index_t, typename acc_t>
__attribute__((target("avx2,fma"))) void reduce_row_avx2(const index_t* rowptr,
                                                         const index_t* col, const scalar_t* x,
                                                         scalar_t* out, index_t* arg, int64_t i,
                                                         int64_t width, acc_t* b) {
  reduce_row<kMax, 8>(rowptr, col, x, out, arg, i, width, b);
}
#endif

template <typename scalar_t, typename index_t, bool kMax>
void minmax_rows(const index_t* rowptr, const index_t* col, const scalar_t* x, scalar_t* out,
                 index_t* arg, int64_t rows, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  auto row_fn = &reduce_row_base<kMax, scalar_t, index_t, acc_t>;
#ifdef FASTGNN_X86_DISPATCH
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    row_fn = &reduce_row_avx2<kMax, scalar_t, index_t, acc_t>;
#endif
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<acc_t> best(width);
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < rows; ++i) row_fn(rowptr, col, x, out, arg, i, width, best.data());
  }
}

// grad[arg[i, f], f] += grad_out[i, f], grad [num_src, width] uninitialised on entry. Each
// thread owns a slice of the features, zeroes it and walks the rows in order, so every sum has
// a fixed order (deterministic without atomics) and one parallel region does the whole job.
template <typename scalar_t, typename index_t>
void minmax_scatter(const index_t* arg, const scalar_t* grad_out, acc_type<scalar_t>* grad,
                    int64_t rows, int64_t num_src, int64_t width) {
  const int64_t threads = num_threads();
  constexpr int64_t kAlign = 16;  // a cache line of float: slices do not share lines
  const int64_t per_thread = (width + threads - 1) / threads;
  const int64_t slice = std::max(kAlign, (per_thread + kAlign - 1) / kAlign * kAlign);
  const int64_t slices = (width + slice - 1) / slice;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t f0 = s * slice, f1 = std::min(width, f0 + slice);
    for (int64_t j = 0; j < num_src; ++j)
      std::fill(grad + j * width + f0, grad + j * width + f1, acc_type<scalar_t>(0));
    for (int64_t i = 0; i < rows; ++i) {
      const index_t* a = arg + i * width;
      const scalar_t* g = grad_out + i * width;
      for (int64_t f = f0; f < f1; ++f)
        if (a[f] >= 0) grad[int64_t(a[f]) * width + f] += acc_type<scalar_t>(g[f]);
    }
  }
}

std::tuple<at::Tensor, at::Tensor> minmax_aggregate_cpu(
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x, bool is_max,
    const c10::optional<at::Tensor>& /*light_rows*/,
    const c10::optional<at::Tensor>& /*heavy_rows*/, int64_t /*max_degree*/,
    int64_t /*config*/, const c10::optional<at::Tensor>& /*t_rowptr*/,
    const c10::optional<at::Tensor>& /*t_col*/, int64_t /*graph_key*/) {
  check_csr(rowptr, col, "minmax_aggregate");
  TORCH_CHECK(x.dim() == 2, "minmax_aggregate: x must be 2-D [num_src, F], got ", x.dim(), " dims");
  const int64_t rows = rowptr.numel() - 1, width = x.size(1);
  auto xc = x.contiguous();
  auto out = at::empty({rows, width}, x.options());
  auto arg = at::empty({rows, width}, x.options().dtype(col.scalar_type()));
  if (rows == 0 || width == 0) return {out, arg};
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "minmax_aggregate", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "minmax_aggregate", [&] {
      auto run = [&](auto is_max_tag) {
        minmax_rows<scalar_t, index_t, decltype(is_max_tag)::value>(
            rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), xc.data_ptr<scalar_t>(),
            out.data_ptr<scalar_t>(), arg.data_ptr<index_t>(), rows, width);
      };
      if (is_max) run(std::true_type{}); else run(std::false_type{});
    });
  });
  return {out, arg};
}

at::Tensor minmax_aggregate_backward_cpu(const at::Tensor& arg, const at::Tensor& grad_out,
                                         int64_t num_src,
                                         const c10::optional<at::Tensor>& /*t_rowptr*/,
                                         const c10::optional<at::Tensor>& /*t_col*/) {
  TORCH_CHECK(arg.dim() == 2 && grad_out.sizes() == arg.sizes(),
              "minmax_aggregate_backward: grad_out and arg must be [T, F] of one shape");
  TORCH_CHECK(num_src >= 0, "minmax_aggregate_backward: num_src must be non-negative");
  auto ac = arg.contiguous(), gc = grad_out.contiguous();
  const auto acc = grad_out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto grad = at::empty({num_src, arg.size(1)}, grad_out.options().dtype(acc));
  FASTGNN_DISPATCH_INDEX(arg.scalar_type(), "minmax_aggregate_backward", [&] {
    FASTGNN_DISPATCH_FLOAT(grad_out.scalar_type(), "minmax_aggregate_backward", [&] {
      minmax_scatter<scalar_t, index_t>(ac.data_ptr<index_t>(), gc.data_ptr<scalar_t>(),
                                        grad.data_ptr<acc_type<scalar_t>>(), arg.size(0),
                                        num_src, arg.size(1));
    });
  });
  return grad.scalar_type() == grad_out.scalar_type() ? grad : grad.to(grad_out.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("minmax_aggregate", &minmax_aggregate_cpu);
  m.impl("minmax_aggregate_backward", &minmax_aggregate_backward_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
