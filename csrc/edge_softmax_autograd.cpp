// Autograd of edge_softmax, in C++ for the reason spmm's is (csrc/spmm_autograd.cpp): DGL
// attention layers call it once a layer, and on small graphs a call is bound by host time,
// where a Python autograd.Function costs several times the op's own dispatch.
// Only the output is saved: the gradient is edge_softmax_backward over the same rows, called
// through the dispatcher so that torch.compile traces it with the fake kernel registered from
// Python (fastgnn/ops/edge_softmax.py).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "autograd_common.h"

namespace fastgnn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor edge_softmax_call(const at::Tensor& rowptr, const OptTensor& edge_perm,
                             const at::Tensor& logits, const OptTensor& light_rows,
                             const OptTensor& heavy_rows) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::edge_softmax", "")
                             .typed<decltype(edge_softmax_call)>();
  return op.call(rowptr, edge_perm, logits, light_rows, heavy_rows);
}

at::Tensor backward_call(const at::Tensor& rowptr, const OptTensor& edge_perm,
                         const at::Tensor& out, const at::Tensor& grad_out,
                         const OptTensor& light_rows, const OptTensor& heavy_rows) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::edge_softmax_backward", "")
                             .typed<decltype(backward_call)>();
  return op.call(rowptr, edge_perm, out, grad_out, light_rows, heavy_rows);
}

class EdgeSoftmax : public torch::autograd::Function<EdgeSoftmax> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rowptr,
                            const OptTensor& edge_perm, const at::Tensor& logits,
                            const OptTensor& light_rows, const OptTensor& heavy_rows) {
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = edge_softmax_call(rowptr, edge_perm, logits, light_rows, heavy_rows);
    }
    ctx->save_for_backward({rowptr, edge_perm.value_or(at::Tensor()),
                            light_rows.value_or(at::Tensor()), heavy_rows.value_or(at::Tensor()),
                            out});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rowptr = saved[0], &edge_perm = saved[1];
    variable_list out(5);  // one per forward argument
    // needs_input_grad counts only the tensors given: rowptr, edge_perm when present, logits.
    if (ctx->needs_input_grad(edge_perm.defined() ? 2 : 1))
      out[2] = backward_call(rowptr, optional(edge_perm), saved[4], grads[0].contiguous(),
                             optional(saved[2]), optional(saved[3]));
    return out;
  }
};

at::Tensor edge_softmax_autograd(const at::Tensor& rowptr, const OptTensor& edge_perm,
                                 const at::Tensor& logits, const OptTensor& light_rows,
                                 const OptTensor& heavy_rows) {
  return EdgeSoftmax::apply(rowptr, edge_perm, logits, light_rows, heavy_rows);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, Autograd, m) { m.impl("edge_softmax", &edge_softmax_autograd); }

}  // namespace fastgnn
