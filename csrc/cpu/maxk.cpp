// CPU MaxK family: the row-wise top-k into CBSR (values [N, k], column indices [N, k] in
// ascending column order), the forward SpGEMM (dense output rows accumulated in a per-thread
// buffer) and the backward SSpMM (only the k kept entries of each source row, pulled over the
// transposed CSR). OpenMP over rows, dynamic chunks for skewed degrees; deterministic.
#include "cpu/cpu_common.h"
#include "maxk_common.h"

#include <torch/library.h>

#include <numeric>
#include <vector>

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

template <typename scalar_t, typename cidx_t>
void select_rows(const scalar_t* x, scalar_t* values, cidx_t* indices, int64_t rows,
                 int64_t width, int64_t k) {
  using key_t = decltype(key_of(scalar_t{}));
  parallel_chunks(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    std::vector<key_t> keys(width);
    std::vector<int32_t> order(width);
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t* xi = x + i * width;
      for (int64_t f = 0; f < width; ++f) keys[f] = key_of(xi[f]);
      std::iota(order.begin(), order.end(), 0);
      // Larger key first, the smaller column among equal keys: a strict total order.
      auto before = [&](int32_t a, int32_t b) {
        return keys[a] > keys[b] || (keys[a] == keys[b] && a < b);
      };
      if (k < width) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
      std::sort(order.begin(), order.begin() + k);
      for (int64_t m = 0; m < k; ++m) {
        values[i * k + m] = xi[order[m]];
        indices[i * k + m] = cidx_t(order[m]);
      }
    }
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

template <typename scalar_t, typename index_t, typename cidx_t>
void spgemm_rows(const index_t* rowptr, const index_t* col, const acc_type<scalar_t>* value,
                 const scalar_t* values, const cidx_t* indices, scalar_t* out, int64_t rows,
                 int64_t k, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  parallel_chunks(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> row(width);
    for (int64_t i = begin; i < end; ++i) {
      std::fill(row.begin(), row.end(), acc_t(0));
      for (index_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
        const int64_t j = col[e];
        const acc_t w = value ? value[e] : acc_t(1);
        const scalar_t* vj = values + j * k;
        const cidx_t* cj = indices + j * k;
        for (int64_t m = 0; m < k; ++m) row[cj[m]] += w * acc_t(vj[m]);
      }
      scalar_t* o = out + i * width;
      for (int64_t f = 0; f < width; ++f) o[f] = scalar_t(row[f]);
    }
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
        spgemm_rows<scalar_t, index_t, cidx_t>(
            rowptr.data_ptr<index_t>(), col.data_ptr<index_t>(),
            vc.defined() ? vc.data_ptr<acc_t>() : nullptr, valc.data_ptr<scalar_t>(),
            idxc.data_ptr<cidx_t>(), out.data_ptr<scalar_t>(), rows, k, num_features);
      });
    });
  });
  return out;
}

template <typename scalar_t, typename index_t, typename cidx_t>
void sspmm_rows(const index_t* t_rowptr, const index_t* t_col, const acc_type<scalar_t>* t_value,
                const scalar_t* grad_out, const cidx_t* indices, scalar_t* grad_values,
                int64_t rows, int64_t k, int64_t width) {
  using acc_t = acc_type<scalar_t>;
  parallel_chunks(rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc(k);
    std::vector<int64_t> cols(k);
    for (int64_t j = begin; j < end; ++j) {
      std::fill(acc.begin(), acc.end(), acc_t(0));
      for (int64_t m = 0; m < k; ++m) cols[m] = indices[j * k + m];
      for (index_t e = t_rowptr[j]; e < t_rowptr[j + 1]; ++e) {
        const acc_t w = t_value ? t_value[e] : acc_t(1);
        const scalar_t* dy = grad_out + int64_t(t_col[e]) * width;
        for (int64_t m = 0; m < k; ++m) acc[m] += w * acc_t(dy[cols[m]]);
      }
      for (int64_t m = 0; m < k; ++m) grad_values[j * k + m] = scalar_t(acc[m]);
    }
  });
}

at::Tensor maxk_sspmm_cpu(const at::Tensor& rowptr, const at::Tensor& col,
                          const c10::optional<at::Tensor>& /*value*/,
                          const c10::optional<at::Tensor>& t_rowptr,
                          const c10::optional<at::Tensor>& t_col,
                          const c10::optional<at::Tensor>& t_value, const at::Tensor& grad_out,
                          const at::Tensor& indices, int64_t /*graph_key*/,
                          int64_t /*config: one CPU kernel*/) {
  check_csr(rowptr, col, "maxk_sspmm");
  TORCH_CHECK(t_rowptr.has_value() && t_col.has_value(),
              "maxk_sspmm: the CPU kernel needs the transposed CSR (t_rowptr, t_col)");
  check_csr(*t_rowptr, *t_col, "maxk_sspmm");
  TORCH_CHECK(t_col->numel() == col.numel() && t_rowptr->scalar_type() == col.scalar_type(),
              "maxk_sspmm: the transposed CSR does not match the CSR");
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.size(0) == rowptr.numel() - 1,
              "maxk_sspmm: grad_out must be [num_dst, F]");
  const int64_t width = grad_out.size(1), rows = t_rowptr->numel() - 1;
  TORCH_CHECK(indices.dim() == 2 && indices.size(0) == rows &&
                  indices.scalar_type() == cbsr_index_scalar_type(width),
              "maxk_sspmm: indices must be [num_src, k] with the CBSR index dtype of ", width,
              " features");
  const int64_t k = indices.size(1);
  const at::Tensor tvc = contiguous_values(t_value, grad_out, col.numel(), "maxk_sspmm");
  auto gc = grad_out.contiguous(), idxc = indices.contiguous();
  auto grad_values = at::empty({rows, k}, grad_out.options());
  if (rows == 0 || k == 0) return grad_values;
  FASTGNN_DISPATCH_INDEX(rowptr.scalar_type(), "maxk_sspmm", [&] {
    FASTGNN_DISPATCH_FLOAT(grad_out.scalar_type(), "maxk_sspmm", [&] {
      using acc_t = acc_type<scalar_t>;
      dispatch_cbsr_index(indices.scalar_type(), "maxk_sspmm", [&](auto c) {
        using cidx_t = decltype(c);
        sspmm_rows<scalar_t, index_t, cidx_t>(
            t_rowptr->data_ptr<index_t>(), t_col->data_ptr<index_t>(),
            tvc.defined() ? tvc.data_ptr<acc_t>() : nullptr, gc.data_ptr<scalar_t>(),
            idxc.data_ptr<cidx_t>(), grad_values.data_ptr<scalar_t>(), rows, k, width);
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
