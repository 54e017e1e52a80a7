// Argument checks of the weighted min/max aggregation and its backwards, shared by the CPU and
// CUDA implementations.
#pragma once

#include <ATen/ATen.h>

namespace fastgnn {

// The optional map from CSR positions to input edges: [E] of col's dtype, contiguous.
inline void check_edge_perm(const c10::optional<at::Tensor>& edge_perm, const at::Tensor& col,
                            const char* op) {
  if (!edge_perm.has_value()) return;
  TORCH_CHECK(edge_perm->dim() == 1 && edge_perm->numel() == col.numel() &&
                  edge_perm->is_contiguous() && edge_perm->scalar_type() == col.scalar_type() &&
                  edge_perm->device() == col.device(),
              op, ": edge_perm must be a contiguous 1-D tensor of col's dtype with one entry per "
              "edge");
}

// The number of weight columns (heads) of the optional per-edge weights of minmax_aggregate,
// 0 when absent: [E, H] (input edge order, edge_perm mapping CSR positions to it) of x's
// dtype and device, H dividing x's width.
inline int64_t check_minmax_weight(const c10::optional<at::Tensor>& weight,
                                   const c10::optional<at::Tensor>& edge_perm,
                                   const at::Tensor& col, const at::Tensor& x, const char* op) {
  check_edge_perm(edge_perm, col, op);
  if (!weight.has_value()) return 0;
  const at::Tensor& w = *weight;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == col.numel() && w.size(1) >= 1,
              op, ": weight must be [E, H] with one row per edge, got ", w.sizes());
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.device() == x.device(), op,
              ": weight must have x's dtype and device");
  TORCH_CHECK(x.size(1) % w.size(1) == 0, op, ": weight's ", w.size(1),
              " columns (heads) must divide x's width ", x.size(1));
  return w.size(1);
}

// minmax_aggregate_backward: col and weight come together (arg then holds CSR positions).
inline int64_t check_backward_weight(const at::Tensor& arg, const at::Tensor& grad_out,
                                     const c10::optional<at::Tensor>& col,
                                     const c10::optional<at::Tensor>& weight,
                                     const c10::optional<at::Tensor>& edge_perm) {
  TORCH_CHECK(col.has_value() == weight.has_value(),
              "minmax_aggregate_backward: pass col and weight together, or neither");
  if (!col.has_value()) return 0;
  TORCH_CHECK(col->dim() == 1 && col->scalar_type() == arg.scalar_type() &&
                  col->device() == arg.device(),
              "minmax_aggregate_backward: col must be 1-D, of arg's dtype and device");
  return check_minmax_weight(weight, edge_perm, *col, grad_out, "minmax_aggregate_backward");
}

// minmax_weight_backward: arg and grad_out [T, F] of one shape, x [S, F] of grad_out's dtype,
// heads dividing F.
inline void check_weight_backward(const at::Tensor& col, const at::Tensor& arg,
                                  const at::Tensor& grad_out, const at::Tensor& x, int64_t heads,
                                  int64_t rows, const c10::optional<at::Tensor>& edge_perm) {
  check_edge_perm(edge_perm, col, "minmax_weight_backward");
  TORCH_CHECK(arg.dim() == 2 && grad_out.sizes() == arg.sizes() && arg.size(0) == rows &&
                  arg.scalar_type() == col.scalar_type(),
              "minmax_weight_backward: arg and grad_out must be [T, F] of one shape, T the "
              "CSR's rows, arg of col's dtype");
  TORCH_CHECK(x.dim() == 2 && x.size(1) == arg.size(1) &&
                  x.scalar_type() == grad_out.scalar_type() && x.device() == grad_out.device(),
              "minmax_weight_backward: x must be [S, F] of grad_out's dtype and device");
  TORCH_CHECK(heads >= 1 && arg.size(1) % heads == 0,
              "minmax_weight_backward: heads must divide the width, got ", heads);
}

}  // namespace fastgnn
