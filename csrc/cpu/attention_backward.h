// The CPU attention backward's glue, shared with other destination passes: the WSB one
// (csrc/cpu/wsb_attention_backward.cpp) reuses the CSR backward's checks and source pass.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <tuple>

namespace fastgnn {
namespace cpu {

// What a Graph Transformer destination pass reads and writes, in the accumulation dtype
// (float; double for double features), contiguous.
struct DestinationBuffers {
  at::Tensor q, k, v;    // the features
  at::Tensor grad_out;   // [T, H, D]
  at::Tensor lse;        // [T, H]: the forward's log-sum-exp
  at::Tensor delta;      // [T, H]: <grad_out, out>
  at::Tensor grad_q;     // [T, H, D], zeros: the pass writes q's gradient
  at::Tensor scores;     // [E, H, 2]: the pass writes each (edge, head)'s dLogit and softmax
                         // weight, edges in CSR order
};
using DestinationPass = std::function<void(const DestinationBuffers&)>;

// graph_attention_backward without edge term or dropout, its destination pass `destination`:
// returns (grad_q, grad_k, grad_v), k and v's from the CSR source pass.
std::tuple<at::Tensor, at::Tensor, at::Tensor> graph_attention_backward_from(
    const DestinationPass& destination, const at::Tensor& grad_out, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& rowptr, const at::Tensor& col,
    const c10::optional<at::Tensor>& t_rowptr, const c10::optional<at::Tensor>& t_col,
    const at::Tensor& t_perm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    double scale, const char* op);

}  // namespace cpu
}  // namespace fastgnn
