// Torch-facing glue of the CUDA edge softmax: checks, stream, allocation, the row split.
#include <torch/library.h>

#include "cuda/edge_softmax_kernels.h"
#include "cuda/glue.h"
#include "edge_softmax_checks.h"

namespace fastgnn {
namespace cuda {
namespace {

EdgeRows edge_rows(const at::Tensor& rowptr, const c10::optional<at::Tensor>& edge_perm,
                   const c10::optional<at::Tensor>& light_rows,
                   const c10::optional<at::Tensor>& heavy_rows, const char* op) {
  check_row_split(rowptr, light_rows, heavy_rows, op);
  EdgeRows rows{rowptr.data_ptr(), data_or_null(edge_perm), rowptr.numel() - 1,
                rowptr.scalar_type() == at::kLong};
  if (heavy_rows.has_value() && heavy_rows->numel() > 0) {
    rows.light = light_rows->data_ptr();
    rows.num_light = light_rows->numel();
    rows.heavy = heavy_rows->data_ptr();
    rows.num_heavy = heavy_rows->numel();
  }
  return rows;
}

at::Tensor edge_softmax_cuda(const at::Tensor& rowptr, const c10::optional<at::Tensor>& edge_perm,
                             const at::Tensor& logits,
                             const c10::optional<at::Tensor>& light_rows,
                             const c10::optional<at::Tensor>& heavy_rows) {
  const c10::cuda::CUDAGuard guard(logits.device());
  check_edge_rows(rowptr, edge_perm, logits, "edge_softmax");
  const EdgeRows rows = edge_rows(rowptr, edge_perm, light_rows, heavy_rows, "edge_softmax");
  auto lc = logits.contiguous();
  auto out = at::empty_like(lc);
  if (out.numel() == 0) return out;
  edge_softmax_forward(float_type(lc), rows, lc.data_ptr(), out.data_ptr(), lc.size(1),
                       stream());
  return out;
}

at::Tensor edge_softmax_backward_cuda(const at::Tensor& rowptr,
                                      const c10::optional<at::Tensor>& edge_perm,
                                      const at::Tensor& out, const at::Tensor& grad_out,
                                      const c10::optional<at::Tensor>& light_rows,
                                      const c10::optional<at::Tensor>& heavy_rows) {
  const c10::cuda::CUDAGuard guard(out.device());
  check_edge_rows(rowptr, edge_perm, out, "edge_softmax_backward");
  const EdgeRows rows =
      edge_rows(rowptr, edge_perm, light_rows, heavy_rows, "edge_softmax_backward");
  TORCH_CHECK(grad_out.sizes() == out.sizes() && grad_out.scalar_type() == out.scalar_type() &&
                  grad_out.device() == out.device(),
              "edge_softmax_backward: grad_out must have out's shape, dtype and device");
  auto oc = out.contiguous(), gc = grad_out.contiguous();
  auto grad = at::empty_like(oc);
  if (grad.numel() == 0) return grad;
  edge_softmax_backward(float_type(oc), rows, oc.data_ptr(), gc.data_ptr(), grad.data_ptr(),
                        oc.size(1), stream());
  return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, CUDA, m) {
  m.impl("edge_softmax", &edge_softmax_cuda);
  m.impl("edge_softmax_backward", &edge_softmax_backward_cuda);
}

}  // namespace cuda
}  // namespace fastgnn
