// Autograd of the SpMM family, in C++ (as min/max's, the attention ops', edge_softmax's and MaxK's:
// csrc/*_autograd.cpp; the other families register theirs from Python).
//
// Why C++ here: spmm is the op of GCN/SAGE layers at small feature widths, where a call is
// bound by host time, not by the GPU. A Python autograd.Function costs about 5 us per call on
// a fast host and several times that on a GPU server's; this kernel costs about 1 us. It is
// the same formula the Python registration held:
//   spmm:  dX = A^T dY (the same op with the transpose flag flipped),
//          dvalue_e = <dY[row e], x[col e]> (sddmm; rows and columns swap when transposed);
//   sddmm: da = G b, db = G^T a, with G the edge gradient as the CSR's values.
// Gradients call the ops through the dispatcher, so they are differentiable in turn, and
// torch.compile traces them with the fake kernels registered from Python.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "autograd_common.h"

namespace fastgnn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kBackwardShift = 8;  // algo bits 8-15: the backward's kernel

at::Tensor spmm_call(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                     const at::Tensor& x, const OptTensor& t_rowptr, const OptTensor& t_col,
                     const OptTensor& t_perm, const OptTensor& t_value, int64_t num_out,
                     bool transpose, int64_t graph_key, int64_t algo) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::spmm", "")
                             .typed<decltype(spmm_call)>();
  return op.call(rowptr, col, value, x, t_rowptr, t_col, t_perm, t_value, num_out, transpose,
                 graph_key, algo);
}

at::Tensor sddmm_call(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                      const at::Tensor& b) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::sddmm", "")
                             .typed<decltype(sddmm_call)>();
  return op.call(rowptr, col, a, b);
}

class Spmm : public torch::autograd::Function<Spmm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rowptr,
                            const at::Tensor& col, const OptTensor& value, const at::Tensor& x,
                            const OptTensor& t_rowptr, const OptTensor& t_col,
                            const OptTensor& t_perm, const OptTensor& t_value, int64_t num_out,
                            bool transpose, int64_t graph_key, int64_t algo) {
    ctx->save_for_backward({rowptr, col, value.value_or(at::Tensor()), x,
                            t_rowptr.value_or(at::Tensor()), t_col.value_or(at::Tensor()),
                            t_perm.value_or(at::Tensor()), t_value.value_or(at::Tensor())});
    ctx->saved_data["transpose"] = transpose;
    ctx->saved_data["graph_key"] = graph_key;
    ctx->saved_data["algo"] = algo;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return spmm_call(rowptr, col, value, x, t_rowptr, t_col, t_perm, t_value, num_out,
                     transpose, graph_key, algo);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rowptr = saved[0], &col = saved[1], &value = saved[2], &x = saved[3];
    const bool transpose = ctx->saved_data["transpose"].toBool();
    const at::Tensor grad = grads[0].contiguous();
    variable_list out(12);  // one per forward argument
    // needs_input_grad counts only the tensors given: rowptr, col, value when present, x.
    const size_t value_edge = 2, x_edge = value.defined() ? 3 : 2;
    if (ctx->needs_input_grad(x_edge))
      out[3] = spmm_call(rowptr, col, optional(value), grad, optional(saved[4]),
                         optional(saved[5]), optional(saved[6]), optional(saved[7]), x.size(0),
                         !transpose, ctx->saved_data["graph_key"].toInt(),
                         ctx->saved_data["algo"].toInt() >> kBackwardShift);
    if (value.defined() && ctx->needs_input_grad(value_edge))
      out[2] = transpose ? sddmm_call(rowptr, col, x.contiguous(), grad)
                         : sddmm_call(rowptr, col, grad, x);
    return out;
  }
};

class Sddmm : public torch::autograd::Function<Sddmm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rowptr,
                            const at::Tensor& col, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({rowptr, col, a, b});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return sddmm_call(rowptr, col, a, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rowptr = saved[0], &col = saved[1], &a = saved[2], &b = saved[3];
    // spmm takes contiguous values in the accumulation dtype (sddmm's own output dtype)
    const at::Tensor grad =
        grads[0].to(a.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).contiguous();
    variable_list out(4);
    if (ctx->needs_input_grad(2))
      out[2] = spmm_call(rowptr, col, grad, b, c10::nullopt, c10::nullopt, c10::nullopt,
                         c10::nullopt, a.size(0), false, 0, 0);
    if (ctx->needs_input_grad(3))
      out[3] = spmm_call(rowptr, col, grad, a, c10::nullopt, c10::nullopt, c10::nullopt,
                         c10::nullopt, b.size(0), true, 0, 0);
    return out;
  }
};

at::Tensor spmm_autograd(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                         const at::Tensor& x, const OptTensor& t_rowptr, const OptTensor& t_col,
                         const OptTensor& t_perm, const OptTensor& t_value, int64_t num_out,
                         bool transpose, int64_t graph_key, int64_t algo) {
  return Spmm::apply(rowptr, col, value, x, t_rowptr, t_col, t_perm, t_value, num_out,
                     transpose, graph_key, algo);
}

at::Tensor sddmm_autograd(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a,
                          const at::Tensor& b) {
  return Sddmm::apply(rowptr, col, a, b);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, Autograd, m) {
  m.impl("spmm", &spmm_autograd);
  m.impl("sddmm", &sddmm_autograd);
}

}  // namespace fastgnn
