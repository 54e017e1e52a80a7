// The CUDA attention backward's glue, shared with other destination passes: the WSB Tensor
// Core one (csrc/cuda/wsb_attention.cpp) reuses the CSR backward's checks, allocation and
// source pass.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <tuple>

#include "cuda/attention_kernels.h"

namespace fastgnn {
namespace cuda {

// Fills p.grad_a and every edge's (dLogit, weight) in p.scores ([H, E, 2] float, CSR order)
// from p.grad_out, p.saved_out and p.lse_in, as the CSR destination pass does.
using DestinationPass = std::function<void(const AttentionParams& p)>;

// graph_attention_backward without edge term or dropout, its destination pass `destination`:
// returns (grad_q, grad_k, grad_v), k and v's from the CSR source pass.
std::tuple<at::Tensor, at::Tensor, at::Tensor> graph_attention_backward_from(
    const DestinationPass& destination, const at::Tensor& grad_out, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& rowptr, const at::Tensor& col,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    double scale, const c10::optional<at::Tensor>& light_rows,
    const c10::optional<at::Tensor>& heavy_rows, int64_t heavy_warps, const char* op);

}  // namespace cuda
}  // namespace fastgnn
