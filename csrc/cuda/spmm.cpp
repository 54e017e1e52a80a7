// Torch-facing glue of the CUDA SpMM family: checks, stream, allocation, kernel choice.
#include <torch/library.h>

#include "cuda/glue.h"
#include "cuda/spmm_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

const void* optional_ptr(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr() : nullptr;
}

at::Tensor spmm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                     const c10::optional<at::Tensor>& value, const at::Tensor& x,
                     const c10::optional<at::Tensor>& t_rowptr,
                     const c10::optional<at::Tensor>& t_col,
                     const c10::optional<at::Tensor>& t_perm, int64_t num_out, bool transpose,
                     int64_t /*graph_key*/, int64_t /*algo*/) {
  const c10::cuda::CUDAGuard guard(x.device());
  const CsrView csr = csr_view(rowptr, col, "spmm");
  TORCH_CHECK(x.dim() == 2, "spmm: x must be 2-D");
  if (value.has_value())
    TORCH_CHECK(value->scalar_type() == acc_type(x) && value->numel() == csr.nnz &&
                    value->is_contiguous() && value->is_cuda(),
                "spmm: value must be a contiguous float32 (float64 for float64 x) GPU tensor "
                "with one entry per edge");
  auto xc = x.contiguous();
  const int64_t width = x.size(1);
  if (!transpose) {
    auto out = at::empty({num_out, width}, x.options());
    spmm_csr(float_type(x), csr, optional_ptr(value), nullptr, xc.data_ptr(), out.data_ptr(),
             width, stream());
    return out;
  }
  TORCH_CHECK(x.size(0) == csr.rows, "spmm: x rows mismatch for the transposed product");
  if (t_rowptr.has_value() && t_col.has_value() && t_perm.has_value()) {
    const CsrView t_csr = csr_view(*t_rowptr, *t_col, "spmm");
    auto out = at::empty({num_out, width}, x.options());
    spmm_csr(float_type(x), t_csr, optional_ptr(value), t_perm->data_ptr(), xc.data_ptr(),
             out.data_ptr(), width, stream());
    return out;
  }
  at::globalContext().alertNotDeterministic(
      "fastgnn spmm backward without a cached transpose (Graph(cache_transpose=False))");
  auto acc = at::zeros({num_out, width}, x.options().dtype(acc_type(x)));
  spmm_csr_transposed_atomic(float_type(x), csr, optional_ptr(value), xc.data_ptr(),
                             acc.data_ptr(), width, stream());
  return acc.to(x.scalar_type());
}

at::Tensor sddmm_cuda(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                      const at::Tensor& b) {
  const c10::cuda::CUDAGuard guard(a.device());
  const CsrView csr = csr_view(rowptr, col, "sddmm");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1) && a.size(0) == csr.rows,
              "sddmm: a must be [rows, D] and b [*, D]");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "sddmm: a and b dtypes differ");
  auto ac = a.contiguous(), bc = b.contiguous();
  auto out = at::empty({csr.nnz}, a.options().dtype(acc_type(a)));
  sddmm_csr(float_type(a), csr, ac.data_ptr(), bc.data_ptr(), out.data_ptr(), a.size(1),
            stream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("spmm", &spmm_cuda);
  m.impl("sddmm", &sddmm_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
