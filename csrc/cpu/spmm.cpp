// CPU SpMM and SDDMM. Rows (destinations) are handed out dynamically, so hubs do not stall a
// thread; each row's features are processed in compile-time tiles held in registers (64, 32,
// 16, 8 wide, then a short tail), so the edge list is walked once per tile and every gathered
// source row is read in full cache lines. The loops are compiled for the baseline ISA and once
// more for AVX2+FMA, chosen at run time.
#include "cpu/cpu_common.h"

#include <torch/library.h>

#include <vector>

namespace fastgnn {
namespace cpu {
namespace {

// How a gather finds the weight of edge e: none (1), value[e], or value[value_perm[e]] (a
// transposed CSR walking values kept in forward order). A template parameter, so the edge
// loop carries no branch and the compiler keeps the feature tile in vector registers.
enum class Weights { kOne, kDirect, kPermuted };

// out[i] = sum over e in row i of weight(e) * x[col[e]].
template <typename scalar_t, typename index_t>
struct Gather {
  using acc_t = acc_type<scalar_t>;
  const index_t* rowptr;
  const index_t* col;
  const acc_t* value;
  const index_t* value_perm;
  const scalar_t* x;
  scalar_t* out;
  int64_t width;

  template <Weights kWeights>
  FASTGNN_ALWAYS_INLINE acc_t weight(index_t e) const {
    if constexpr (kWeights == Weights::kOne) return acc_t(1);
    else if constexpr (kWeights == Weights::kDirect) return value[e];
    else return value[value_perm[e]];
  }

  Weights weights() const {
    return !value ? Weights::kOne : value_perm ? Weights::kPermuted : Weights::kDirect;
  }
};

// Features [f0, f0 + kVecs * lanes) of one output row, accumulated in vector registers.
template <int kVecs, Weights kWeights, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_tile(const Gather<scalar_t, index_t>& g, index_t begin,
                                       index_t end, int64_t f0, scalar_t* out_row) {
  using Vec = AccVec<scalar_t>;
  typename Vec::type acc[kVecs] = {};
  for (index_t e = begin; e < end; ++e) {
    const auto w = g.template weight<kWeights>(e);
    const scalar_t* src = g.x + int64_t(g.col[e]) * g.width + f0;
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v) acc[v] += w * Vec::load(src + v * Vec::kLanes);
  }
#pragma GCC unroll 16
  for (int v = 0; v < kVecs; ++v) Vec::store(acc[v], out_row + f0 + v * Vec::kLanes);
}

// The last `count` (< one vector) features of a row.
template <Weights kWeights, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_tail(const Gather<scalar_t, index_t>& g, index_t begin,
                                       index_t end, int64_t f0, int64_t count, scalar_t* out_row) {
  using acc_t = acc_type<scalar_t>;
  acc_t acc[AccVec<scalar_t>::kLanes] = {};
  for (index_t e = begin; e < end; ++e) {
    const acc_t w = g.template weight<kWeights>(e);
    const scalar_t* src = g.x + int64_t(g.col[e]) * g.width + f0;
    for (int64_t k = 0; k < count; ++k) acc[k] += w * acc_t(src[k]);
  }
  for (int64_t k = 0; k < count; ++k) out_row[f0 + k] = scalar_t(acc[k]);
}

// One output row, edges [begin, end) of g, tile by tile.
template <Weights kWeights, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_row(const Gather<scalar_t, index_t>& g, index_t begin,
                                      index_t end, scalar_t* out_row) {
  constexpr int64_t kLanes = AccVec<scalar_t>::kLanes;
  const int64_t width = g.width;
  int64_t f = 0;
  for (; f + 8 * kLanes <= width; f += 8 * kLanes)
    gather_tile<8, kWeights>(g, begin, end, f, out_row);
  if (width - f >= 4 * kLanes) { gather_tile<4, kWeights>(g, begin, end, f, out_row); f += 4 * kLanes; }
  if (width - f >= 2 * kLanes) { gather_tile<2, kWeights>(g, begin, end, f, out_row); f += 2 * kLanes; }
  if (width - f >= kLanes) { gather_tile<1, kWeights>(g, begin, end, f, out_row); f += kLanes; }
  if (f < width) gather_tail<kWeights>(g, begin, end, f, width - f, out_row);
}

template <Weights kWeights, typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_rows(const Gather<scalar_t, index_t>& g, int64_t row_begin,
                                       int64_t row_end) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t kTileWidth = 8 * AccVec<scalar_t>::kLanes;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const index_t begin = g.rowptr[i], end = g.rowptr[i + 1];
    scalar_t* out_row = g.out + i * g.width;
    if constexpr (kWeights == Weights::kPermuted) {
      if (g.width > kTileWidth) {
        // Several tiles would each fetch value[perm[e]] at random: fetch the row's weights
        // once into a per-thread buffer and walk the row with direct weights.
        static thread_local std::vector<acc_t> row_weights;
        const int64_t degree = int64_t(end - begin);
        if (int64_t(row_weights.size()) < degree) row_weights.resize(degree);
        for (index_t e = begin; e < end; ++e) row_weights[e - begin] = g.value[g.value_perm[e]];
        const Gather<scalar_t, index_t> row{nullptr, g.col + begin, row_weights.data(),
                                            nullptr, g.x, g.out, g.width};
        gather_row<Weights::kDirect>(row, index_t(0), index_t(degree), out_row);
        continue;
      }
    }
    gather_row<kWeights>(g, begin, end, out_row);
  }
}

template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void gather_rows_any(const Gather<scalar_t, index_t>& g, int64_t b,
                                           int64_t e) {
  switch (g.weights()) {
    case Weights::kOne: return gather_rows<Weights::kOne>(g, b, e);
    case Weights::kDirect: return gather_rows<Weights::kDirect>(g, b, e);
    case Weights::kPermuted: return gather_rows<Weights::kPermuted>(g, b, e);
  }
}

// The same loops compiled for the baseline ISA and for AVX2+FMA (see cpu_common.h).
template <typename scalar_t, typename index_t>
void gather_rows_baseline(const Gather<scalar_t, index_t>& g, int64_t b, int64_t e) {
  gather_rows_any(g, b, e);
}

#if FASTGNN_HAVE_AVX2_CLONE
template <typename scalar_t, typename index_t>
FASTGNN_TARGET_AVX2 void gather_rows_avx2(const Gather<scalar_t, index_t>& g, int64_t b,
                                          int64_t e) {
  gather_rows_any(g, b, e);
}
#endif

// Rows per scheduling chunk: about 2048 edges of work, at least one row.
int64_t rows_per_chunk(int64_t rows, int64_t nnz) {
  const int64_t avg_degree = std::max<int64_t>(1, nnz / std::max<int64_t>(1, rows));
  return std::clamp<int64_t>(2048 / avg_degree, 1, 256);
}

template <typename scalar_t, typename index_t>
void run_gather(const Gather<scalar_t, index_t>& g, int64_t rows) {
  auto rows_fn = &gather_rows_baseline<scalar_t, index_t>;
#if FASTGNN_HAVE_AVX2_CLONE
  if (cpu_has_avx2()) rows_fn = &gather_rows_avx2<scalar_t, index_t>;
#endif
  parallel_chunks(rows, rows_per_chunk(rows, int64_t(g.rowptr[rows])),
                  [&](int64_t b, int64_t e) { rows_fn(g, b, e); });
}

// A^T x without a transposed CSR (Graph(cache_transpose=False)): each thread owns a
// contiguous block of features and scatters into it, so no two threads write the same word
// (no atomics, deterministic) at the price of every thread reading the whole edge list.
template <typename scalar_t, typename index_t>
void scatter_transposed(const index_t* rowptr, const index_t* col,
                        const acc_type<scalar_t>* value, const scalar_t* x,
                        acc_type<scalar_t>* acc, int64_t rows, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t kMinBlock = 16;
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(num_threads(), (width + kMinBlock - 1) / kMinBlock));
  const int64_t block_width = (width + blocks - 1) / blocks;
#pragma omp parallel for num_threads(num_threads()) schedule(static, 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t f_begin = block * block_width, f_end = std::min(width, f_begin + block_width);
    for (int64_t i = 0; i < rows; ++i) {
      const scalar_t* src = x + i * width;
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
        const acc_t w = value ? value[e] : acc_t(1);
        acc_t* dst = acc + int64_t(col[e]) * width;
        for (int64_t f = f_begin; f < f_end; ++f) dst[f] += w * acc_t(src[f]);
      }
    }
  }
}

at::ScalarType value_type_for(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor spmm_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                    const c10::optional<at::Tensor>& value, const at::Tensor& x,
                    const c10::optional<at::Tensor>& t_rowptr,
                    const c10::optional<at::Tensor>& t_col,
                    const c10::optional<at::Tensor>& t_perm,
                    const c10::optional<at::Tensor>& t_value, int64_t num_out, bool transpose,
                    int64_t /*graph_key*/, int64_t /*algo: one CPU kernel*/) {
  check_csr(rowptr, col, "spmm");
  TORCH_CHECK(x.dim() == 2, "spmm: x must be 2-D, got ", x.dim(), " dims");
  const int64_t rows = rowptr.numel() - 1;
  TORCH_CHECK(!transpose || x.size(0) == rows, "spmm: the transposed product needs x with ",
              rows, " rows, got ", x.size(0));
  TORCH_CHECK(transpose || num_out == rows, "spmm: num_out must equal the CSR rows (", rows,
              "), got ", num_out);
  const bool use_cached_t = transpose && t_rowptr.has_value() && t_col.has_value() &&
                            t_perm.has_value();
  if (use_cached_t) {
    check_csr(*t_rowptr, *t_col, "spmm");
    TORCH_CHECK(t_rowptr->numel() == num_out + 1 && t_col->numel() == col.numel() &&
                    t_perm->numel() == col.numel() && t_perm->scalar_type() == col.scalar_type(),
                "spmm: the cached transpose does not match the CSR");
  }
  at::Tensor vc;
  if (value.has_value()) {
    vc = value->contiguous();
    TORCH_CHECK(vc.scalar_type() == value_type_for(x) && vc.numel() == col.numel(),
                "spmm: value must be float32 (float64 for float64 x) with one entry per edge");
  }
  const bool use_t_value = use_cached_t && vc.defined() && t_value.has_value();
  at::Tensor t_vc;
  if (use_t_value) {
    t_vc = t_value->contiguous();
    TORCH_CHECK(t_vc.scalar_type() == vc.scalar_type() && t_vc.numel() == vc.numel(),
                "spmm: t_value must match value in dtype and size");
  }
  auto xc = x.contiguous();
  const int64_t width = x.size(1);
  auto out = at::empty({num_out, width}, x.options());
  if (num_out == 0 || width == 0) return out;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "spmm", [&] {
    FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "spmm", [&] {
      using acc_t = acc_type<scalar_t>;
      const acc_t* vptr = vc.defined() ? vc.data_ptr<acc_t>() : nullptr;
      if (transpose && !use_cached_t) {
        at::Tensor acc = std::is_same_v<scalar_t, acc_t>
                             ? out.zero_()
                             : at::zeros({num_out, width}, x.options().dtype(value_type_for(x)));
        scatter_transposed<scalar_t, index_t>(rowptr.data_ptr<index_t>(),
                                              col.data_ptr<index_t>(), vptr,
                                              xc.data_ptr<scalar_t>(), acc.data_ptr<acc_t>(),
                                              rows, width);
        if (!acc.is_same(out)) out.copy_(acc);
        return;
      }
      Gather<scalar_t, index_t> g{rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), vptr,
                                  nullptr, xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                  width};
      if (use_cached_t) {
        g.rowptr = t_rowptr->data_ptr<index_t>();
        g.col = t_col->data_ptr<index_t>();
        if (use_t_value) g.value = t_vc.data_ptr<acc_t>();
        else if (vptr) g.value_perm = t_perm->data_ptr<index_t>();
      }
      run_gather(g, num_out);
    });
  });
  return out;
}

// out[e] = <a[row(e)], b[col(e)]>: the destination row stays hot while its edges stream by.
template <typename scalar_t, typename index_t>
FASTGNN_ALWAYS_INLINE void dot_rows(const index_t* rowptr, const index_t* col, const scalar_t* a,
                                    const scalar_t* b, acc_type<scalar_t>* out, int64_t width,
                                    int64_t row_begin, int64_t row_end) {
  using acc_t = acc_type<scalar_t>;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const scalar_t* ar = a + i * width;
    for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const scalar_t* br = b + int64_t(col[e]) * width;
      acc_t s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t f = 0; f < width; ++f) s += acc_t(ar[f]) * acc_t(br[f]);
      out[e] = s;
    }
  }
}

template <typename scalar_t, typename index_t>
void dot_rows_baseline(const index_t* rowptr, const index_t* col, const scalar_t* a,
                       const scalar_t* b, acc_type<scalar_t>* out, int64_t width, int64_t rb,
                       int64_t re) {
  dot_rows(rowptr, col, a, b, out, width, rb, re);
}

#if FASTGNN_HAVE_AVX2_CLONE
template <typename scalar_t, typename index_t>
FASTGNN_TARGET_AVX2 void dot_rows_avx2(const index_t* rowptr, const index_t* col,
                                       const scalar_t* a, const scalar_t* b,
                                       acc_type<scalar_t>* out, int64_t width, int64_t rb,
                                       int64_t re) {
  dot_rows(rowptr, col, a, b, out, width, rb, re);
}
#endif

at::Tensor sddmm_cpu(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                     const at::Tensor& b) {
  check_csr(rowptr, col, "sddmm");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "sddmm: a and b must be 2-D with the same width");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "sddmm: a and b dtypes differ");
  const int64_t rows = rowptr.numel() - 1;
  TORCH_CHECK(a.size(0) == rows, "sddmm: a must have one row per CSR row (", rows, "), got ",
              a.size(0));
  auto ac = a.contiguous(), bc = b.contiguous();
  auto out = at::empty({col.numel()}, a.options().dtype(value_type_for(a)));
  if (col.numel() == 0) return out;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "sddmm", [&] {
    FASTGNN_DISPATCH_FLOAT(a.scalar_type(), "sddmm", [&] {
      auto rows_fn = &dot_rows_baseline<scalar_t, index_t>;
#if FASTGNN_HAVE_AVX2_CLONE
      if (cpu_has_avx2()) rows_fn = &dot_rows_avx2<scalar_t, index_t>;
#endif
      const index_t* rp = rowptr.data_ptr<index_t>();
      const index_t* cp = col.data_ptr<index_t>();
      const scalar_t* ap = ac.data_ptr<scalar_t>();
      const scalar_t* bp = bc.data_ptr<scalar_t>();
      auto* op = out.data_ptr<acc_type<scalar_t>>();
      const int64_t width = a.size(1);
      parallel_chunks(rows, rows_per_chunk(rows, col.numel()), [&](int64_t rb, int64_t re) {
        rows_fn(rp, cp, ap, bp, op, width, rb, re);
      });
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("spmm", &spmm_cpu);
  m.impl("sddmm", &sddmm_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
