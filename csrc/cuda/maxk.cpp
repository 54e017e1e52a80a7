// Torch-facing glue of the CUDA MaxK family: checks, stream, allocation, work lists.
#include <torch/library.h>

#include "cuda/glue.h"
#include "cuda/maxk_kernels.h"
#include "cuda/spmm_split_work.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int64_t kDefaultChunk = 256;
constexpr int64_t kChunkMask = (int64_t(1) << 20) - 1;  // maxk_spgemm config: the chunk
constexpr int64_t kSspmmChunkShift = 8;                   // maxk_sspmm config

at::ScalarType index_scalar_type(int64_t num_features) {
  switch (cbsr_index_type(num_features)) {
    case CbsrIndexType::kUInt8: return at::kByte;
    case CbsrIndexType::kInt16: return at::kShort;
    default: return at::kInt;
  }
}

void check_indices(const at::Tensor& indices, int64_t num_features, const char* op) {
  TORCH_CHECK(indices.scalar_type() == index_scalar_type(num_features), op,
              ": CBSR indices of ", num_features, " features must have dtype ",
              index_scalar_type(num_features), ", got ", indices.scalar_type());
}

void check_value(const c10::optional<at::Tensor>& value, const at::Tensor& features,
                 int64_t nnz, const char* op) {
  if (!value.has_value()) return;
  TORCH_CHECK(value->scalar_type() == acc_type(features) && value->numel() == nnz &&
                  value->is_contiguous() && value->device() == features.device(),
              op, ": edge values must be a contiguous float32 (float64 for float64 features) "
              "tensor on the graph's GPU with one entry per edge");
}

int64_t chunk_of(int64_t bits) { return bits > 0 ? bits : kDefaultChunk; }

std::tuple<at::Tensor, at::Tensor> maxk_cuda(const at::Tensor& x, int64_t k) {
  const c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(x.dim() == 2, "maxk: x must be 2-D [N, F], got ", x.dim(), " dims");
  const int64_t rows = x.size(0), width = x.size(1);
  TORCH_CHECK(k >= 1 && k <= width, "maxk: k must be in [1, ", width, "], got ", k);
  TORCH_CHECK(width <= kMaxkSelectMaxWidth && x.scalar_type() != at::kDouble,
              "maxk: the CUDA kernel takes float32/16/bf16 rows of at most ",
              kMaxkSelectMaxWidth, " features");
  auto xc = x.contiguous();
  auto values = at::empty({rows, k}, x.options());
  auto indices = at::empty({rows, k}, x.options().dtype(index_scalar_type(width)));
  maxk_select(float_type(x), cbsr_index_type(width), xc.data_ptr(), values.data_ptr(),
              indices.data_ptr(), rows, width, k, stream());
  return {values, indices};
}

at::Tensor maxk_spgemm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                            const c10::optional<at::Tensor>& value, const at::Tensor& values,
                            const at::Tensor& indices, int64_t num_features,
                            const c10::optional<at::Tensor>& /*t_rowptr*/,
                            const c10::optional<at::Tensor>& /*t_col*/,
                            const c10::optional<at::Tensor>& /*t_perm*/,
                            const c10::optional<at::Tensor>& /*t_value*/, int64_t graph_key,
                            int64_t config) {
  const c10::cuda::CUDAGuard guard(values.device());
  const CsrView csr = csr_view(rowptr, col, "maxk_spgemm");
  TORCH_CHECK(values.dim() == 2 && indices.sizes() == values.sizes() && values.is_cuda() &&
                  indices.device() == values.device() && values.device() == col.device(),
              "maxk_spgemm: CBSR values and indices must be [N, k] on the graph's GPU");
  check_indices(indices, num_features, "maxk_spgemm");
  check_value(value, values, csr.nnz, "maxk_spgemm");
  const int64_t k = values.size(1);
  TORCH_CHECK(k <= num_features, "maxk_spgemm: k exceeds the feature width");
  TORCH_CHECK(num_features * int64_t(values.scalar_type() == at::kDouble ? 8 : 4) <=
                  kMaxkRowBufferBytes,
              "maxk_spgemm: ", num_features, " features exceed the shared-memory row buffer");
  TORCH_CHECK(config >= 0, "maxk_spgemm: config must be non-negative");
  auto valc = values.contiguous(), idxc = indices.contiguous();
  auto out = at::empty({csr.rows, num_features}, values.options());
  if (csr.rows == 0 || num_features == 0) return out;
  const auto work = split_work(rowptr, graph_key, 0, chunk_of(config & kChunkMask));
  auto partial = at::empty({work->slots * num_features}, values.options().dtype(acc_type(values)));
  maxk_spgemm(float_type(values), cbsr_index_type(num_features), csr, data_or_null(value),
              valc.data_ptr(), idxc.data_ptr(), out.data_ptr(), partial.data_ptr(),
              work->view(), num_features, k, stream());
  return out;
}

at::Tensor maxk_sspmm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                           const c10::optional<at::Tensor>& value,
                           const c10::optional<at::Tensor>& t_rowptr,
                           const c10::optional<at::Tensor>& t_col,
                           const c10::optional<at::Tensor>& t_value, const at::Tensor& grad_out,
                           const at::Tensor& indices, int64_t graph_key, int64_t config) {
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const CsrView csr = csr_view(rowptr, col, "maxk_sspmm");
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.size(0) == csr.rows && grad_out.is_cuda() &&
                  grad_out.device() == col.device(),
              "maxk_sspmm: grad_out must be [num_dst, F] on the graph's GPU");
  const int64_t width = grad_out.size(1);
  TORCH_CHECK(indices.dim() == 2 && indices.device() == grad_out.device(),
              "maxk_sspmm: indices must be [num_src, k] on the graph's GPU");
  check_indices(indices, width, "maxk_sspmm");
  TORCH_CHECK(config >= 0, "maxk_sspmm: config must be non-negative");
  const bool push = (config & 1) != 0;
  const int64_t chunk = chunk_of(config >> kSspmmChunkShift);
  const int64_t rows = indices.size(0), k = indices.size(1);
  auto gc = grad_out.contiguous(), idxc = indices.contiguous();
  const auto type = cbsr_index_type(width);
  if (push) {
    check_value(value, grad_out, csr.nnz, "maxk_sspmm");
    TORCH_CHECK(width * int64_t(grad_out.scalar_type() == at::kDouble ? 8 : 4) <=
                    kMaxkRowBufferBytes,
                "maxk_sspmm: ", width, " features exceed the shared-memory row buffer");
    at::globalContext().alertNotDeterministic("fastgnn maxk_sspmm pushed with atomic adds");
    auto acc = at::zeros({rows, k}, grad_out.options().dtype(acc_type(grad_out)));
    if (rows == 0 || k == 0 || csr.nnz == 0) return acc.to(grad_out.scalar_type());
    const auto work = split_work(rowptr, graph_key, 0, chunk);
    maxk_sspmm_push(float_type(grad_out), type, csr, data_or_null(value), gc.data_ptr(),
                    idxc.data_ptr(), acc.data_ptr(), work->view(), width, k, stream());
    return acc.scalar_type() == grad_out.scalar_type() ? acc : acc.to(grad_out.scalar_type());
  }
  TORCH_CHECK(t_rowptr.has_value() && t_col.has_value(),
              "maxk_sspmm: the pulled backward needs the transposed CSR (t_rowptr, t_col)");
  const CsrView t_csr = csr_view(*t_rowptr, *t_col, "maxk_sspmm");
  TORCH_CHECK(t_csr.rows == rows && t_csr.nnz == csr.nnz && t_csr.index64 == csr.index64,
              "maxk_sspmm: the transposed CSR does not match the CSR and indices");
  check_value(t_value, grad_out, csr.nnz, "maxk_sspmm");
  auto grad_values = at::empty({rows, k}, grad_out.options());
  if (rows == 0 || k == 0) return grad_values;
  const auto work = split_work(*t_rowptr, graph_key, 1, chunk);
  auto partial = at::empty({work->slots * k}, grad_out.options().dtype(acc_type(grad_out)));
  maxk_sspmm_pull(float_type(grad_out), type, t_csr, data_or_null(t_value), gc.data_ptr(),
                  idxc.data_ptr(), grad_values.data_ptr(), partial.data_ptr(), work->view(),
                  width, k, stream());
  return grad_values;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("maxk", &maxk_cuda);
  m.impl("maxk_spgemm", &maxk_spgemm_cuda);
  m.impl("maxk_sspmm", &maxk_sspmm_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
