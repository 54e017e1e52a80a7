// Autograd of the fused attention ops (gatv2_forward, graph_attention_forward, gat_forward), in
// C++ for the reason spmm's and min/max's are (csrc/spmm_autograd.cpp): GAT, GATv2 and Graph
// Transformer layers call them once a layer, and eager training steps on a GPU are bound by
// host time, where a Python autograd.Function cost about 17 us per forward + backward.
// The three ops share one argument layout (CSR, edge_perm, transpose, three features, an
// optional edge term, coefficient, dropout, seed, seed_tensor, offset, launch plan) and one
// backward formula: their <name>_backward op, given grad_out, the forward's out and lse and the
// forward's arguments; seed_tensor among them, so that the backward regenerates the forward's
// dropout mask. The backward is called through the dispatcher, so torch.compile traces it with
// the fake kernels registered from Python (fastgnn/ops/attention.py).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "autograd_common.h"

namespace fastgnn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using ForwardOp = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& edge_perm,
    const OptTensor& t_rowptr, const OptTensor& t_col, const OptTensor& t_perm,
    const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const OptTensor& edge_term,
    double coef, double dropout, int64_t seed, const OptTensor& seed_tensor, int64_t offset,
    const OptTensor& light_rows, const OptTensor& heavy_rows, int64_t heavy_warps);

using BackwardOp = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& edge_perm,
    const OptTensor& t_rowptr, const OptTensor& t_col, const at::Tensor& t_perm,
    const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const OptTensor& edge_term,
    double coef, double dropout, int64_t seed, const OptTensor& seed_tensor, int64_t offset,
    const OptTensor& light_rows, const OptTensor& heavy_rows, int64_t heavy_warps);

struct Gatv2 {
  static constexpr const char* kForward = "fastgnn::gatv2_forward";
  static constexpr const char* kBackward = "fastgnn::gatv2_backward";
};
struct GraphAttention {
  static constexpr const char* kForward = "fastgnn::graph_attention_forward";
  static constexpr const char* kBackward = "fastgnn::graph_attention_backward";
};
struct Gat {
  static constexpr const char* kForward = "fastgnn::gat_forward";
  static constexpr const char* kBackward = "fastgnn::gat_backward";
};

// Saved tensors, in this order (out and lse: the forward's outputs).
enum Saved {
  kRowptr, kCol, kEdgePerm, kTRowptr, kTCol, kTPerm, kA, kB, kC, kEdgeTerm, kSeedTensor,
  kLightRows, kHeavyRows, kOut, kLse
};
constexpr size_t kForwardArguments = 18;
constexpr size_t kFirstFeature = 6;  // a, b, c, edge_term: forward arguments 6-9

template <typename Op>
class Attention : public torch::autograd::Function<Attention<Op>> {
 public:
  static variable_list forward(
      AutogradContext* ctx, const at::Tensor& rowptr, const at::Tensor& col,
      const OptTensor& edge_perm, const OptTensor& t_rowptr, const OptTensor& t_col,
      const OptTensor& t_perm, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
      const OptTensor& edge_term, double coef, double dropout, int64_t seed,
      const OptTensor& seed_tensor, int64_t offset, const OptTensor& light_rows,
      const OptTensor& heavy_rows, int64_t heavy_warps) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow(Op::kForward, "")
                               .template typed<ForwardOp>();
    at::Tensor out, lse;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(out, lse) = op.call(rowptr, col, edge_perm, t_rowptr, t_col, t_perm, a, b, c,
                                   edge_term, coef, dropout, seed, seed_tensor, offset,
                                   light_rows, heavy_rows, heavy_warps);
    }
    ctx->save_for_backward({rowptr, col, edge_perm.value_or(at::Tensor()),
                            t_rowptr.value_or(at::Tensor()), t_col.value_or(at::Tensor()),
                            t_perm.value_or(at::Tensor()), a, b, c,
                            edge_term.value_or(at::Tensor()), seed_tensor.value_or(at::Tensor()),
                            light_rows.value_or(at::Tensor()), heavy_rows.value_or(at::Tensor()),
                            out, lse});
    // lse is the backward's statistics, not a result: no gradient, and none materialised (a
    // [T, H] fill a call)
    ctx->mark_non_differentiable({lse});
    ctx->set_materialize_grads(false);
    ctx->saved_data["coef"] = coef;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["heavy_warps"] = heavy_warps;
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow(Op::kBackward, "")
                               .template typed<BackwardOp>();
    variable_list out(kForwardArguments);  // one per forward argument
    if (!grads[0].defined()) return out;
    const auto saved = ctx->get_saved_variables();
    TORCH_CHECK(saved[kTPerm].defined(),
                "fastgnn attention: the forward ran without gradient tracking of its inputs, so "
                "the transposed graph was not prepared");
    const auto& data = ctx->saved_data;
    const auto features = op.call(
        grads[0].contiguous(), saved[kOut], saved[kLse], saved[kRowptr], saved[kCol],
        optional(saved[kEdgePerm]), optional(saved[kTRowptr]), optional(saved[kTCol]),
        saved[kTPerm], saved[kA], saved[kB], saved[kC], optional(saved[kEdgeTerm]),
        data.at("coef").toDouble(), data.at("dropout").toDouble(), data.at("seed").toInt(),
        optional(saved[kSeedTensor]), data.at("offset").toInt(), optional(saved[kLightRows]),
        optional(saved[kHeavyRows]), data.at("heavy_warps").toInt());
    out[kFirstFeature] = std::get<0>(features);
    out[kFirstFeature + 1] = std::get<1>(features);
    out[kFirstFeature + 2] = std::get<2>(features);
    if (saved[kEdgeTerm].defined()) out[kFirstFeature + 3] = std::get<3>(features);
    return out;
  }
};

template <typename Op>
std::tuple<at::Tensor, at::Tensor> attention_autograd(
    const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& edge_perm,
    const OptTensor& t_rowptr, const OptTensor& t_col, const OptTensor& t_perm,
    const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const OptTensor& edge_term,
    double coef, double dropout, int64_t seed, const OptTensor& seed_tensor, int64_t offset,
    const OptTensor& light_rows, const OptTensor& heavy_rows, int64_t heavy_warps) {
  auto outputs = Attention<Op>::apply(rowptr, col, edge_perm, t_rowptr, t_col, t_perm, a, b, c,
                                      edge_term, coef, dropout, seed, seed_tensor, offset,
                                      light_rows, heavy_rows, heavy_warps);
  return {outputs[0], outputs[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastgnn, Autograd, m) {
  m.impl("gatv2_forward", &attention_autograd<Gatv2>);
  m.impl("graph_attention_forward", &attention_autograd<GraphAttention>);
  m.impl("gat_forward", &attention_autograd<Gat>);
}

}  // namespace fastgnn
