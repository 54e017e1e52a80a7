// CPU MaxK family: the row-wise top-k into CBSR (values [N, k], column indices [N, k] in
// ascending column order), the forward SpGEMM (dense output rows accumulated in a per-thread
// buffer) and the backward SSpMM (only the k kept entries of each source row, pushed from each
// destination's gradient row into per-thread buffers, or pulled over the transposed CSR).
// OpenMP over rows, dynamic chunks for skewed degrees; deterministic for a thread count.
#include "cpu/cpu_common.h"
#include "maxk_common.h"

#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace fastgnn {
namespace cpu {
namespace {

constexpr int64_t kRowsPerChunk = 64;

at::ScalarType cbsr_index_scalar_type(int64_t num_features) {
  switch (cbsr_index_type(num_features)) {
    case CbsrIndexType::kUInt8: return at::kByte;
    case CbsrIndexType::kInt16: return at::kShort;
    default: return at::kInt;
  }
}

// Calls f(cidx_t{}) for the CBSR index dtype.
template <typename F>
void dispatch_cbsr_index(at::ScalarType type, const char* op, F&& f) {
  switch (type) {
    case at::kByte: f(uint8_t{}); break;
    case at::kShort: f(int16_t{}); break;
    case at::kInt: f(int32_t{}); break;
    default: TORCH_CHECK(false, op, ": CBSR indices must be uint8, int16 or int32, got ", type);
  }
}

template <typename scalar_t>
auto key_of(scalar_t v) {
  return maxk_order_key(acc_type<scalar_t>(v));
}

// The k-th largest of a row's keys, bit by bit from the top: a bit stays set when at least k
// keys reach the candidate (one compare-and-count pass over the row per bit, which the
// compiler vectorises). A candidate that exactly k keys reach ends the search early: keeping
// the keys at or above it then keeps exactly those k.
template <typename key_t>
FASTGNN_ALWAYS_INLINE key_t kth_largest_key(const key_t* keys, int64_t width, int64_t k) {
  key_t threshold = 0;
  for (int bit = 8 * int(sizeof(key_t)) - 1; bit >= 0; --bit) {
    const key_t candidate = threshold | (key_t(1) << bit);
    int32_t count = 0;  // width fits in int32 (checked by maxk_cpu)
    for (int64_t f = 0; f < width; ++f) count += keys[f] >= candidate;
    if (count >= k) threshold = candidate;
    if (count == k) break;
  }
  return threshold;
}

// Rows [begin, end): the row's keys, their k-th largest, then one pass in column order keeps
// the larger keys and the first of the equal ones (ties to the smallest column), so the kept
// columns come out ascending without a sort. `keys` is a buffer of `width` entries.
template <typename scalar_t, typename cidx_t, typename key_t>
FASTGNN_ALWAYS_INLINE void select_row_range(const scalar_t* x, scalar_t* values,
                                            cidx_t* indices, int64_t width, int64_t k,
                                            int64_t begin, int64_t end, key_t* keys) {
  for (int64_t i = begin; i < end; ++i) {
    const scalar_t* xi = x + i * width;
    for (int64_t f = 0; f < width; ++f) keys[f] = key_of(xi[f]);
    const key_t kth = kth_largest_key(keys, width, k);
    int64_t ties = k;  // how many entries equal to the k-th key are kept
    for (int64_t f = 0; f < width; ++f) ties -= keys[f] > kth;
    scalar_t* vi = values + i * k;
    cidx_t* ci = indices + i * k;
    for (int64_t f = 0, m = 0; m < k; ++f) {
      if (keys[f] > kth || (keys[f] == kth && ties-- > 0)) {
        vi[m] = xi[f];
        ci[m++] = cidx_t(f);
      }
    }
  }
}

template <typename scalar_t, typename cidx_t>
void select_rows(const scalar_t* x, scalar_t* values, cidx_t* indices, int64_t rows,
                 int64_t width, int64_t k) {
  using key_t = decltype(key_of(scalar_t{}));
  parallel_chunks(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    std::vector<key_t> keys(width);
    on_best_isa<select_row_range<scalar_t, cidx_t, key_t>>(x, values, indices, width, k, begin,
                                                            end, keys.data());
  });
}

std::tuple<at::Tensor, at::Tensor> maxk_cpu(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2, "maxk: x must be 2-D [N, F], got ", x.dim(), " dims");
  const int64_t rows = x.size(0), width = x.size(1);
  TORCH_CHECK(k >= 1 && k <= width, "maxk: k must be in [1, ", width, "], got ", k);
  TORCH_CHECK(width <= std::numeric_limits<int32_t>::max(), "maxk: too many features");
  auto xc = x.contiguous();
  auto values = at::empty({rows, k}, x.options());
  auto indices = at::empty({rows, k}, x.options().dtype(cbsr_index_scalar_type(width)));
  FASTGNN_DISPATCH_FLOAT(x.scalar_type(), "maxk", [&] {
    dispatch_cbsr_index(indices.scalar_type(), "maxk", [&](auto c) {
      using cidx_t = decltype(c);
      select_rows(xc.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(),
                  indices.data_ptr<cidx_t>(), rows, width, k);
    });
  });
  return {values, indices};
}

// Checks shared by the SpGEMM and SSpMM: CBSR shapes and index dtype, optional edge values.
void check_cbsr(const at::Tensor& values, const at::Tensor& indices, int64_t num_features,
                const char* op) {
  TORCH_CHECK(values.dim() == 2 && indices.sizes() == values.sizes(), op,
              ": CBSR values and indices must both be [N, k]");
  TORCH_CHECK(indices.scalar_type() == cbsr_index_scalar_type(num_features), op,
              ": CBSR indices of ", num_features, " features must have dtype ",
              cbsr_index_scalar_type(num_features), ", got ", indices.scalar_type());
  TORCH_CHECK(values.size(1) <= num_features, op, ": k (", values.size(1),
              ") exceeds the feature width (", num_features, ")");
}

at::Tensor contiguous_values(const c10::optional<at::Tensor>& value, const at::Tensor& like,
                             int64_t nnz, const char* op) {
  if (!value.has_value()) return at::Tensor();
  TORCH_CHECK(value->scalar_type() == (like.scalar_type() == at::kDouble ? at::kDouble : at::kFloat)
                  && value->numel() == nnz,
              op, ": edge values must be float32 (float64 for float64 features) with one "
              "entry per edge");
  return value->contiguous();
}

// Neighbours are visited in random order, so their CBSR rows miss the cache: the rows this
// many edges ahead are prefetched while the current one is scattered.
constexpr int64_t kPrefetchEdges = 6;

template <bool kWrite, typename scalar_t, typename cidx_t>
FASTGNN_ALWAYS_INLINE void prefetch_cbsr_row(const scalar_t* values, const cidx_t* indices,
                                             int64_t k) {
  prefetch_row<kWrite>(values, k);
  prefetch_row(indices, k);
}

// Calls visit(j, w) for each in-edge j -> i of row i (weight w), prefetching the k-entry rows
// of `rows` (CBSR values, or the push's accumulators) and `indices` kPrefetchEdges edges ahead.
template <bool kWrite, typename index_t, typename acc_t, typename row_t, typename cidx_t,
          typename Visit>
FASTGNN_ALWAYS_INLINE void for_each_in_edge(const index_t* rowptr, const index_t* col,
                                            const acc_t* value, int64_t i, const row_t* rows,
                                            const cidx_t* indices, int64_t k, Visit&& visit) {
  const int64_t first = rowptr[i], last = rowptr[i + 1];
  for (int64_t e = first; e < last; ++e) {
    if (e + kPrefetchEdges < last) {
      const int64_t ahead = col[e + kPrefetchEdges];
      prefetch_cbsr_row<kWrite>(rows + ahead * k, indices + ahead * k, k);
    }
    visit(int64_t(col[e]), value ? value[e] : acc_t(1));
  }
}

// The per-edge loops of the SpGEMM and the pushed SSpMM. With kFixed > 0 (k known at compile
// time) the neighbour's CBSR row is first copied to locals (half values converted, by F16C in
// the AVX2 clone kIsa), which tells the compiler it does not alias the accumulators (uint8
// indices may alias anything), and the loop unrolls fully: about half the cost per entry of
// the runtime-k loop.
template <int kFixed, Isa kIsa = Isa::kBaseline, typename scalar_t, typename cidx_t,
          typename acc_t>
FASTGNN_ALWAYS_INLINE void scatter_add(acc_t* __restrict row, const scalar_t* values,
                                       const cidx_t* indices, acc_t w, int64_t k) {
  if constexpr (kFixed > 0) {
    acc_t v[kFixed];
    cidx_t c[kFixed];
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      std::memcpy(v, values, sizeof(v));
    } else {
      as_acc<kIsa, acc_t>(values, kFixed, v);
    }
    std::memcpy(c, indices, sizeof(c));
#pragma GCC unroll 64
    for (int m = 0; m < kFixed; ++m) row[c[m]] += w * v[m];
  } else {
    for (int64_t m = 0; m < k; ++m) row[indices[m]] += w * acc_t(values[m]);
  }
}

// acc[m] += w * dy[indices[m]], an FMA in the AVX2 clone kIsa whatever the compiler would
// contract (so half rows, converted to float first, sum exactly as float32 rows do).
template <int kFixed, Isa kIsa, typename cidx_t, typename acc_t>
FASTGNN_ALWAYS_INLINE void gather_add(acc_t* __restrict acc, const acc_t* __restrict dy,
                                      const cidx_t* indices, acc_t w, int64_t k) {
  if constexpr (kFixed > 0) {
    cidx_t c[kFixed];
    std::memcpy(c, indices, sizeof(c));
#pragma GCC unroll 64
    for (int m = 0; m < kFixed; ++m) acc[m] = mul_add<kIsa>(w, dy[c[m]], acc[m]);
  } else {
    for (int64_t m = 0; m < k; ++m) acc[m] = mul_add<kIsa>(w, dy[indices[m]], acc[m]);
  }
}

// Calls f(std::integral_constant<int, K>{}) with K = k for the common float32 and half / uint8
// cases (MaxK-GNN's k = 8 ... 64 of at most 256 features), else K = 0 (runtime k).
template <typename scalar_t, typename cidx_t, typename F>
void dispatch_fixed_k(int64_t k, F&& f) {
  if constexpr (!std::is_same_v<scalar_t, double> && std::is_same_v<cidx_t, uint8_t>) {
    switch (k) {
      case 8: return f(std::integral_constant<int, 8>{});
      case 16: return f(std::integral_constant<int, 16>{});
      case 32: return f(std::integral_constant<int, 32>{});
      case 64: return f(std::integral_constant<int, 64>{});
      default: break;
    }
  }
  f(std::integral_constant<int, 0>{});
}

// out[i] = sum over edges j -> i of w_e * h[j] for rows [begin, end): each neighbour's k
// (value, column) pairs are scattered into the thread's dense row buffer (F accumulators,
// cache resident). kIsa: the clone it is compiled for.
template <int kFixed, typename scalar_t, typename index_t, typename cidx_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void spgemm_row_range(const index_t* rowptr, const index_t* col,
                                            const acc_type<scalar_t>* value,
                                            const scalar_t* values, const cidx_t* indices,
                                            scalar_t* out, int64_t k, int64_t width,
                                            int64_t begin, int64_t end,
                                            acc_type<scalar_t>* __restrict row) {
  using acc_t = acc_type<scalar_t>;
  for (int64_t i = begin; i < end; ++i) {
    std::fill(row, row + width, acc_t(0));
    // always inlined, so that the clone's float16 conversions inline into it
    for_each_in_edge<false>(rowptr, col, value, i, values, indices, k,
                            [&](int64_t j, acc_t w) FASTGNN_ALWAYS_INLINE_LAMBDA {
      scatter_add<kFixed, kIsa>(row, values + j * k, indices + j * k, w, k);
    });
    store_as<kIsa>(row, width, out + i * width);
  }
}

template <int kFixed, typename scalar_t, typename index_t, typename cidx_t>
void spgemm_rows(const index_t* rowptr, const index_t* col, const acc_type<scalar_t>* value,
                 const scalar_t* values, const cidx_t* indices, scalar_t* out, int64_t rows,
                 int64_t k, int64_t width) {
  parallel_chunks(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    std::vector<acc_type<scalar_t>> buffer(width);
    on_avx2_or_baseline<spgemm_row_range<kFixed, scalar_t, index_t, cidx_t, Isa::kAvx2>,
                        spgemm_row_range<kFixed, scalar_t, index_t, cidx_t, Isa::kBaseline>>(
        rowptr, col, value, values, indices, out, k, width, begin, end, buffer.data());
  });
}

at::Tensor maxk_spgemm_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                           const c10::optional<at::Tensor>& value, const at::Tensor& values,
                           const at::Tensor& indices, int64_t num_features,
                           const c10::optional<at::Tensor>& /*t_rowptr*/,
                           const c10::optional<at::Tensor>& /*t_col*/,
                           const c10::optional<at::Tensor>& /*t_perm*/,
                           const c10::optional<at::Tensor>& /*t_value*/, int64_t /*graph_key*/,
                           int64_t /*config: one CPU kernel*/) {
  check_csr(rowptr, col, "maxk_spgemm");
  check_cbsr(values, indices, num_features, "maxk_spgemm");
  const int64_t rows = rowptr.numel() - 1, k = values.size(1);
  const at::Tensor vc = contiguous_values(value, values, col.numel(), "maxk_spgemm");
  auto valc = values.contiguous(), idxc = indices.contiguous();
  auto out = at::empty({rows, num_features}, values.options());
  if (rows == 0 || num_features == 0) return out;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "maxk_spgemm", [&] {
    FASTGNN_DISPATCH_FLOAT(values.scalar_type(), "maxk_spgemm", [&] {
      using acc_t = acc_type<scalar_t>;
      dispatch_cbsr_index(indices.scalar_type(), "maxk_spgemm", [&](auto c) {
        using cidx_t = decltype(c);
        dispatch_fixed_k<scalar_t, cidx_t>(k, [&](auto fixed) {
          spgemm_rows<decltype(fixed)::value, scalar_t, index_t, cidx_t>(
              rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(),
              vc.defined() ? vc.data_ptr<acc_t>() : nullptr, valc.data_ptr<scalar_t>(),
              idxc.data_ptr<cidx_t>(), out.data_ptr<scalar_t>(), rows, k, num_features);
        });
      });
    });
  });
  return out;
}

// Pull: per source j, the k kept entries dot its out-neighbours' gradient rows (over the
// transposed CSR). Each gradient row is gathered at k scattered columns.
template <typename scalar_t, typename index_t, typename cidx_t>
void sspmm_pull(const index_t* t_rowptr, const index_t* t_col, const acc_type<scalar_t>* t_value,
                const scalar_t* grad_out, const cidx_t* indices, scalar_t* grad_values,
                int64_t rows, int64_t k, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  parallel_chunks(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc_buffer(k);
    std::vector<int32_t> col_buffer(k);
    acc_t* __restrict acc = acc_buffer.data();
    int32_t* __restrict cols = col_buffer.data();
    for (int64_t j = begin; j < end; ++j) {
      std::fill(acc, acc + k, acc_t(0));
      for (int64_t m = 0; m < k; ++m) cols[m] = int32_t(indices[j * k + m]);
      const int64_t first = t_rowptr[j], last = t_rowptr[j + 1];
      for (int64_t e = first; e < last; ++e) {
        if (e + kPrefetchEdges < last) {
          const scalar_t* ahead = grad_out + int64_t(t_col[e + kPrefetchEdges]) * width;
          for (int64_t m = 0; m < k; ++m) __builtin_prefetch(ahead + cols[m]);
        }
        const acc_t w = t_value ? t_value[e] : acc_t(1);
        const scalar_t* __restrict dy = grad_out + int64_t(t_col[e]) * width;
        for (int64_t m = 0; m < k; ++m) acc[m] += w * acc_t(dy[cols[m]]);
      }
      for (int64_t m = 0; m < k; ++m) grad_values[j * k + m] = scalar_t(acc[m]);
    }
  });
}

// One thread's destinations [begin, end) of the push: each gradient row converted once for
// all its in-edges' samples when it is half (each converted where it was sampled took the
// float16 backward to 0.68x float32's speed), by F16C in the AVX2 clone kIsa.
template <int kFixed, typename scalar_t, typename index_t, typename cidx_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void push_rows(const index_t* rowptr, const index_t* col,
                                     const acc_type<scalar_t>* value, const scalar_t* grad_out,
                                     const cidx_t* indices, acc_type<scalar_t>* __restrict acc,
                                     acc_type<scalar_t>* converted, int64_t k, int64_t width,
                                     int64_t begin, int64_t end) {
  using acc_t = acc_type<scalar_t>;
  for (int64_t i = begin; i < end; ++i) {
    const acc_t* __restrict dy = as_acc<kIsa, acc_t>(grad_out + i * width, width, converted);
    for_each_in_edge<true>(rowptr, col, value, i, acc, indices, k,
                           [&](int64_t j, acc_t w) FASTGNN_ALWAYS_INLINE_LAMBDA {
      gather_add<kFixed, kIsa>(acc + j * k, dy, indices + j * k, w, k);
    });
  }
}

// out[p0, p1) = the team's buffers summed in thread order, written in out's dtype (half: a
// block at a time, converted by vector in the AVX2 clone kIsa).
template <typename scalar_t, Isa kIsa>
FASTGNN_ALWAYS_INLINE void sum_buffers(const acc_type<scalar_t>* buffers, int team,
                                       int64_t entries, int64_t p0, int64_t p1, scalar_t* out) {
  using acc_t = acc_type<scalar_t>;
  constexpr bool kHalf = !std::is_same_v<acc_t, scalar_t>;
  constexpr int64_t kBlock = 64;
  acc_t block[kBlock];
  for (int64_t p = p0; p < p1; p += kBlock) {
    const int64_t n = std::min(kBlock, p1 - p);
    acc_t* sum;
    if constexpr (kHalf) sum = block; else sum = out + p;  // float rows: summed in place
    for (int64_t q = 0; q < n; ++q) {
      acc_t s = buffers[p + q];
      for (int t = 1; t < team; ++t) s += buffers[t * entries + p + q];
      sum[q] = s;
    }
    if constexpr (kHalf) store_as<kIsa>(block, n, out + p);
  }
}

// Push (the paper's outer product): per destination i, its gradient row (read once, cache
// resident) is sampled at each in-neighbour's k columns and added to that neighbour's k
// entries in a buffer of the thread. Destinations are split into one contiguous range of
// about equal edge count per thread, and the buffers are summed in thread order: the result
// is deterministic for a given thread count. It reads ~k entries per edge where the pull
// touches most cache lines of a gradient row.
template <int kFixed, typename scalar_t, typename index_t, typename cidx_t>
void sspmm_push(const index_t* rowptr, const index_t* col, const acc_type<scalar_t>* value,
                const scalar_t* grad_out, const cidx_t* indices, scalar_t* grad_values,
                acc_type<scalar_t>* buffers, int threads, int64_t rows_dst, int64_t rows_src,
                int64_t k, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  const int64_t entries = rows_src * k, edges = rowptr[rows_dst];
#pragma omp parallel num_threads(threads)
  {
    int thread = 0, team = 1;
#ifdef _OPENMP
    thread = omp_get_thread_num();
    team = omp_get_num_threads();
#endif
    std::vector<acc_t> converted(std::is_same_v<scalar_t, acc_t> ? 0 : width);
    // rows whose first edge falls in this thread's share of the edges
    auto first_row_at = [&](int64_t edge) {
      return std::lower_bound(rowptr, rowptr + rows_dst, index_t(edge)) - rowptr;
    };
    const int64_t begin = first_row_at(edges * thread / team);
    const int64_t end = thread + 1 == team ? rows_dst : first_row_at(edges * (thread + 1) / team);
    on_avx2_or_baseline<push_rows<kFixed, scalar_t, index_t, cidx_t, Isa::kAvx2>,
                        push_rows<kFixed, scalar_t, index_t, cidx_t, Isa::kBaseline>>(
        rowptr, col, value, grad_out, indices, buffers + thread * entries, converted.data(), k,
        width, begin, end);
#pragma omp barrier
    on_avx2_or_baseline<sum_buffers<scalar_t, Isa::kAvx2>, sum_buffers<scalar_t, Isa::kBaseline>>(
        buffers, team, entries, entries * thread / team, entries * (thread + 1) / team,
        grad_values);
  }
}

// config bit 0: push over the forward CSR (per-thread buffers of [num_src, k]); else pull over
// the transposed CSR.
at::Tensor maxk_sspmm_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                          const c10::optional<at::Tensor>& value,
                          const c10::optional<at::Tensor>& t_rowptr,
                          const c10::optional<at::Tensor>& t_col,
                          const c10::optional<at::Tensor>& t_value, const at::Tensor& grad_out,
                          const at::Tensor& indices, int64_t /*graph_key*/, int64_t config) {
  check_csr(rowptr, col, "maxk_sspmm");
  const bool push = config & 1;
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.size(0) == rowptr.numel() - 1,
              "maxk_sspmm: grad_out must be [num_dst, F]");
  const int64_t width = grad_out.size(1);
  TORCH_CHECK(indices.dim() == 2 && indices.scalar_type() == cbsr_index_scalar_type(width),
              "maxk_sspmm: indices must be [num_src, k] with the CBSR index dtype of ", width,
              " features");
  const int64_t rows = indices.size(0), k = indices.size(1);
  if (!push) {
    TORCH_CHECK(t_rowptr.has_value() && t_col.has_value(),
                "maxk_sspmm: the pulled backward needs the transposed CSR (t_rowptr, t_col)");
    check_csr(*t_rowptr, *t_col, "maxk_sspmm");
    TORCH_CHECK(t_col->numel() == col.numel() && t_rowptr->scalar_type() == col.scalar_type() &&
                    t_rowptr->numel() - 1 == rows,
                "maxk_sspmm: the transposed CSR does not match the CSR and indices");
    TORCH_CHECK(t_value.has_value() || !value.has_value(),
                "maxk_sspmm: the pulled backward needs the edge values in transposed order");
  }
  const at::Tensor vc = push ? contiguous_values(value, grad_out, col.numel(), "maxk_sspmm")
                             : contiguous_values(t_value, grad_out, col.numel(), "maxk_sspmm");
  auto gc = grad_out.contiguous(), idxc = indices.contiguous();
  auto grad_values = at::empty({rows, k}, grad_out.options());
  if (rows == 0 || k == 0) return grad_values;
  const int threads = num_threads();
  at::Tensor buffers;
  if (push) {
    const auto acc = grad_out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    buffers = at::zeros({threads, rows, k}, grad_out.options().dtype(acc));
  }
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "maxk_sspmm", [&] {
    FASTGNN_DISPATCH_FLOAT(grad_out.scalar_type(), "maxk_sspmm", [&] {
      using acc_t = acc_type<scalar_t>;
      const acc_t* edge_values = vc.defined() ? vc.data_ptr<acc_t>() : nullptr;
      dispatch_cbsr_index(indices.scalar_type(), "maxk_sspmm", [&](auto c) {
        using cidx_t = decltype(c);
        if (push) {
          dispatch_fixed_k<scalar_t, cidx_t>(k, [&](auto fixed) {
            sspmm_push<decltype(fixed)::value, scalar_t, index_t, cidx_t>(
                rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(), edge_values,
                gc.data_ptr<scalar_t>(), idxc.data_ptr<cidx_t>(),
                grad_values.data_ptr<scalar_t>(), buffers.data_ptr<acc_t>(), threads,
                rowptr.numel() - 1, rows, k, width);
          });
        } else {
          sspmm_pull<scalar_t, index_t, cidx_t>(
              t_rowptr->data_ptr<index_t>(), t_col->data_ptr<index_t>(), edge_values,
              gc.data_ptr<scalar_t>(), idxc.data_ptr<cidx_t>(), grad_values.data_ptr<scalar_t>(),
              rows, k, width);
        }
      });
    });
  });
  return grad_values;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CPU, m) {
  m.impl("maxk", &maxk_cpu);
  m.impl("maxk_spgemm", &maxk_spgemm_cpu);
  m.impl("maxk_sspmm", &maxk_sspmm_cpu);
}

}  // namespace cpu
}  // namespace fastgnn
