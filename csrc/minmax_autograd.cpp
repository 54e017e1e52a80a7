// Autograd of minmax_aggregate, in C++ for the reason spmm's is (csrc/spmm_autograd.cpp): SAGE
// max/pool and GIN-max layers call it once a layer, and on small graphs a call is bound by host
// time, where a Python autograd.Function costs several times the op's own dispatch.
// The formula: grad_x scatters each output entry's gradient to its winner (minmax_aggregate_
// backward; with edge weights arg holds CSR positions and the gradient is scaled by the
// winner's weight) and the weights' gradient is minmax_weight_backward. Gradients call the ops
// through the dispatcher, so torch.compile traces them with the fake kernels registered from
// Python.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "autograd_common.h"

namespace fastgnn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor> minmax_call(
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x, bool is_max,
    const OptTensor& light_rows, const OptTensor& heavy_rows, int64_t max_degree, int64_t config,
    const OptTensor& t_rowptr, const OptTensor& t_col, int64_t graph_key, const OptTensor& weight,
    const OptTensor& edge_perm, bool last_wins, bool ignore_nan) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::minmax_aggregate", "")
                             .typed<decltype(minmax_call)>();
  return op.call(rowptr, col, x, is_max, light_rows, heavy_rows, max_degree, config, t_rowptr,
                 t_col, graph_key, weight, edge_perm, last_wins, ignore_nan);
}

at::Tensor backward_call(const at::Tensor& arg, const at::Tensor& grad_out, int64_t num_src,
                         const OptTensor& t_rowptr, const OptTensor& t_col, const OptTensor& col,
                         const OptTensor& weight, const OptTensor& edge_perm) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::minmax_aggregate_backward", "")
                             .typed<decltype(backward_call)>();
  return op.call(arg, grad_out, num_src, t_rowptr, t_col, col, weight, edge_perm);
}

at::Tensor weight_backward_call(const at::Tensor& rowptr, const at::Tensor& col,
                                const at::Tensor& arg, const at::Tensor& grad_out,
                                const at::Tensor& x, int64_t heads, const OptTensor& edge_perm) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::minmax_weight_backward", "")
                             .typed<decltype(weight_backward_call)>();
  return op.call(rowptr, col, arg, grad_out, x, heads, edge_perm);
}

class MinmaxAggregate : public torch::autograd::Function<MinmaxAggregate> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& rowptr,
                               const at::Tensor& col, const at::Tensor& x, bool is_max,
                               const OptTensor& light_rows, const OptTensor& heavy_rows,
                               int64_t max_degree, int64_t config, const OptTensor& t_rowptr,
                               const OptTensor& t_col, int64_t graph_key, const OptTensor& weight,
                               const OptTensor& edge_perm, bool last_wins, bool ignore_nan) {
    const bool weight_grad = weight.has_value() && weight->requires_grad();
    ctx->saved_data["num_src"] = x.size(0);
    ctx->saved_data["weight_grad"] = weight_grad;
    at::Tensor out, arg;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(out, arg) = minmax_call(rowptr, col, x, is_max, light_rows, heavy_rows, max_degree,
                                       config, t_rowptr, t_col, graph_key, weight, edge_perm,
                                       last_wins, ignore_nan);
    }
    ctx->mark_non_differentiable({arg});
    // else autograd zero-fills a gradient for arg, a [T, F] integer fill every backward
    ctx->set_materialize_grads(false);
    // x only when the weights want a gradient
    ctx->save_for_backward({arg, t_rowptr.value_or(at::Tensor()), t_col.value_or(at::Tensor()),
                            rowptr, col, weight.value_or(at::Tensor()),
                            edge_perm.value_or(at::Tensor()), weight_grad ? x : at::Tensor()});
    return {out, arg};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &arg = saved[0], &rowptr = saved[3], &col = saved[4], &weight = saved[5];
    variable_list out(15);  // one per forward argument
    if (!grads[0].defined()) return out;
    const at::Tensor grad = grads[0].contiguous();
    // needs_input_grad counts the tensors given: rowptr, col, then x
    if (ctx->needs_input_grad(2)) {
      const bool weighted = weight.defined();
      out[2] = backward_call(arg, grad, ctx->saved_data["num_src"].toInt(), optional(saved[1]),
                             optional(saved[2]), weighted ? OptTensor(col) : c10::nullopt,
                             optional(weight), weighted ? optional(saved[6]) : c10::nullopt);
    }
    if (ctx->saved_data["weight_grad"].toBool())
      out[11] = weight_backward_call(rowptr, col, arg, grad, saved[7], weight.size(1),
                                     optional(saved[6]));
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> minmax_autograd(
    const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x, bool is_max,
    const OptTensor& light_rows, const OptTensor& heavy_rows, int64_t max_degree, int64_t config,
    const OptTensor& t_rowptr, const OptTensor& t_col, int64_t graph_key, const OptTensor& weight,
    const OptTensor& edge_perm, bool last_wins, bool ignore_nan) {
  auto outputs = MinmaxAggregate::apply(rowptr, col, x, is_max, light_rows, heavy_rows,
                                        max_degree, config, t_rowptr, t_col, graph_key, weight,
                                        edge_perm, last_wins, ignore_nan);
  return {outputs[0], outputs[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, Autograd, m) {
  m.impl("minmax_aggregate", &minmax_autograd);
}

}  // namespace fastgnn
