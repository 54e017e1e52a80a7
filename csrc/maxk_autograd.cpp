// Autograd of the MaxK family (maxk, maxk_spgemm, maxk_sspmm), in C++ for the reason spmm's is
// (csrc/spmm_autograd.cpp): MaxK layers call maxk and maxk_spgemm once a layer, and eager
// training steps on a GPU are bound by host time, where a Python autograd.Function cost about
// 20 us per forward + backward. The formulas:
//   maxk:        grad_x scatters grad_values into zeros at the kept columns;
//   maxk_spgemm: grad_values = maxk_sspmm(grad_out) under the backward config that the forward's
//                config carries; grad_value[e] = sum_m values[j, m] grad_out[i, indices[j, m]]
//                for the CSR edge e: j -> i (E x k temporaries);
//   maxk_sspmm:  (the double backward) grad_grad_out = maxk_spgemm of the same pattern; the edge
//                values get no second-order gradient (NotImplementedError).
// Gradients call the ops through the dispatcher, so they are differentiable in turn, and
// torch.compile traces them with the fake kernels registered from Python (fastgnn/ops/maxk.py).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "autograd_common.h"

namespace fastgnn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// maxk_spgemm config bits 32-63: its backward's maxk_sspmm config (_BACKWARD_SHIFT in
// fastgnn/ops/maxk.py, which lays the config out).
constexpr int64_t kBackwardShift = 32;

std::tuple<at::Tensor, at::Tensor> maxk_call(const at::Tensor& x, int64_t k) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::maxk", "")
                             .typed<decltype(maxk_call)>();
  return op.call(x, k);
}

at::Tensor spgemm_call(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                       const at::Tensor& values, const at::Tensor& indices, int64_t num_features,
                       const OptTensor& t_rowptr, const OptTensor& t_col, const OptTensor& t_perm,
                       const OptTensor& t_value, int64_t graph_key, int64_t config) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::maxk_spgemm", "")
                             .typed<decltype(spgemm_call)>();
  return op.call(rowptr, col, value, values, indices, num_features, t_rowptr, t_col, t_perm,
                 t_value, graph_key, config);
}

at::Tensor sspmm_call(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                      const OptTensor& t_rowptr, const OptTensor& t_col, const OptTensor& t_value,
                      const at::Tensor& grad_out, const at::Tensor& indices, int64_t graph_key,
                      int64_t config) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fastgnn::maxk_sspmm", "")
                             .typed<decltype(sspmm_call)>();
  return op.call(rowptr, col, value, t_rowptr, t_col, t_value, grad_out, indices, graph_key,
                 config);
}

bool given(const OptTensor& t) { return t.has_value() && t->defined(); }

class Maxk : public torch::autograd::Function<Maxk> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, int64_t k) {
    at::Tensor values, indices;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(values, indices) = maxk_call(x, k);
    }
    ctx->mark_non_differentiable({indices});
    // else autograd zero-fills a gradient for indices every backward
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({indices});
    ctx->saved_data["width"] = x.sym_size(1);
    return {values, indices};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& grad = grads[0];
    if (!grad.defined()) return {at::Tensor(), at::Tensor()};
    const at::Tensor indices = ctx->get_saved_variables()[0];
    const at::Tensor grad_x =
        at::zeros_symint({grad.sym_size(0), ctx->saved_data["width"].toSymInt()}, grad.options())
            .scatter_(1, indices.to(at::kLong), grad);
    return {grad_x, at::Tensor()};
  }
};

// dw[e] = sum_m values[j, m] grad_out[i, indices[j, m]] for the CSR edges e: j -> i. Sizes are
// read as SymInts: torch.compile and opcheck trace this with symbolic shapes.
at::Tensor edge_value_grad(const at::Tensor& rowptr, const at::Tensor& col,
                           const at::Tensor& values, const at::Tensor& indices,
                           const at::Tensor& grad_out) {
  const at::Tensor degree = (rowptr.slice(0, 1) - rowptr.slice(0, 0, -1)).to(at::kLong);
  const at::Tensor row = at::repeat_interleave_symint(
      at::arange(degree.sym_numel(), col.options().dtype(at::kLong)), degree, c10::nullopt,
      col.sym_numel());
  const at::Tensor src = col.to(at::kLong);
  const at::Tensor flat = row.unsqueeze(1) * grad_out.sym_size(1) +
                          indices.index_select(0, src).to(at::kLong);
  const auto acc = values.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor picked = grad_out.reshape(-1).index({flat}).to(acc);
  return (picked * values.index_select(0, src).to(acc)).sum(1);
}

// Saved tensors of maxk_spgemm, in this order.
enum SpgemmSaved { kRowptr, kCol, kValue, kValues, kIndices, kTRowptr, kTCol, kTPerm, kTValue };

class Spgemm : public torch::autograd::Function<Spgemm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rowptr,
                            const at::Tensor& col, const OptTensor& value,
                            const at::Tensor& values, const at::Tensor& indices,
                            int64_t num_features, const OptTensor& t_rowptr,
                            const OptTensor& t_col, const OptTensor& t_perm,
                            const OptTensor& t_value, int64_t graph_key, int64_t config) {
    ctx->save_for_backward({rowptr, col, value.value_or(at::Tensor()), values, indices,
                            t_rowptr.value_or(at::Tensor()), t_col.value_or(at::Tensor()),
                            t_perm.value_or(at::Tensor()), t_value.value_or(at::Tensor())});
    ctx->saved_data["graph_key"] = graph_key;
    ctx->saved_data["config"] = config;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return spgemm_call(rowptr, col, value, values, indices, num_features, t_rowptr, t_col,
                       t_perm, t_value, graph_key, config);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rowptr = saved[kRowptr], &col = saved[kCol], &value = saved[kValue],
                     &indices = saved[kIndices], &t_perm = saved[kTPerm];
    const at::Tensor grad = grads[0].contiguous();
    variable_list out(12);  // one per forward argument
    // needs_input_grad counts only the tensors given: rowptr, col, value when present, values.
    const size_t value_input = 2, values_input = value.defined() ? 3 : 2;
    if (ctx->needs_input_grad(values_input)) {
      at::Tensor t_value = saved[kTValue];
      if (value.defined() && !t_value.defined() && t_perm.defined())
        t_value = value.index_select(0, t_perm.to(at::kLong));
      out[3] = sspmm_call(rowptr, col, optional(value), optional(saved[kTRowptr]),
                          optional(saved[kTCol]), optional(t_value), grad, indices,
                          ctx->saved_data["graph_key"].toInt(),
                          ctx->saved_data["config"].toInt() >> kBackwardShift);
    }
    if (value.defined() && ctx->needs_input_grad(value_input))
      out[2] = edge_value_grad(rowptr, col, saved[kValues], indices, grad);
    return out;
  }
};

class Sspmm : public torch::autograd::Function<Sspmm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rowptr,
                            const at::Tensor& col, const OptTensor& value,
                            const OptTensor& t_rowptr, const OptTensor& t_col,
                            const OptTensor& t_value, const at::Tensor& grad_out,
                            const at::Tensor& indices, int64_t graph_key, int64_t config) {
    // needs_input_grad counts only the tensors given: rowptr, col, then value, t_rowptr, t_col
    // and t_value when present, grad_out.
    const int64_t t_value_input = 2 + given(value) + given(t_rowptr) + given(t_col);
    ctx->saved_data["t_value_input"] = given(t_value) ? t_value_input : int64_t(-1);
    ctx->saved_data["grad_out_input"] = t_value_input + given(t_value);
    ctx->saved_data["num_features"] = grad_out.sym_size(1);
    ctx->saved_data["graph_key"] = graph_key;
    ctx->save_for_backward({rowptr, col, value.value_or(at::Tensor()), indices});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return sspmm_call(rowptr, col, value, t_rowptr, t_col, t_value, grad_out, indices, graph_key,
                      config);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rowptr = saved[0], &col = saved[1], &value = saved[2],
                     &indices = saved[3];
    const auto& data = ctx->saved_data;
    const int64_t t_value_input = data.at("t_value_input").toInt();
    TORCH_CHECK_NOT_IMPLEMENTED(
        !(value.defined() && ctx->needs_input_grad(2)) &&
            !(t_value_input >= 0 && ctx->needs_input_grad(t_value_input)),
        "fastgnn.ops.maxk_spmm: double backward through edge weights is not supported");
    variable_list out(10);  // one per forward argument
    if (ctx->needs_input_grad(data.at("grad_out_input").toInt()))
      out[6] = spgemm_call(rowptr, col, optional(value), grads[0].contiguous(), indices,
                           data.at("num_features").toSymInt().guard_int(__FILE__, __LINE__),
                           c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt,
                           data.at("graph_key").toInt(), 0);
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> maxk_autograd(const at::Tensor& x, int64_t k) {
  auto outputs = Maxk::apply(x, k);
  return {outputs[0], outputs[1]};
}

at::Tensor spgemm_autograd(const at::Tensor& rowptr, const at::Tensor& col,
                           const OptTensor& value, const at::Tensor& values,
                           const at::Tensor& indices, int64_t num_features,
                           const OptTensor& t_rowptr, const OptTensor& t_col,
                           const OptTensor& t_perm, const OptTensor& t_value, int64_t graph_key,
                           int64_t config) {
  return Spgemm::apply(rowptr, col, value, values, indices, num_features, t_rowptr, t_col, t_perm,
                       t_value, graph_key, config);
}

at::Tensor sspmm_autograd(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                          const OptTensor& t_rowptr, const OptTensor& t_col,
                          const OptTensor& t_value, const at::Tensor& grad_out,
                          const at::Tensor& indices, int64_t graph_key, int64_t config) {
  return Sspmm::apply(rowptr, col, value, t_rowptr, t_col, t_value, grad_out, indices, graph_key,
                      config);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, Autograd, m) {
  m.impl("maxk", &maxk_autograd);
  m.impl("maxk_spgemm", &spgemm_autograd);
  m.impl("maxk_sspmm", &sspmm_autograd);
}

}  // namespace fastgnn
