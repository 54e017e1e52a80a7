// The gradient ops that the autograd formulas call are differentiable once only: with no
// autograd kernel, a second backward through them (create_graph=True, then another grad) would
// see outputs with no history and return zeros, with only a warning. PyTorch's
// not-implemented fallback gives their outputs a node that raises "derivative for
// fastgnn::<op> is not implemented" instead, when and only when that second backward runs.
// spmm and wsb_spmm are not here: their gradient is spmm on the transpose, itself
// differentiable; maxk's formulas are differentiable where they can be (fastgnn/ops/maxk.py).
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

namespace fastgnn {

TORCH_LIBRARY_IMPL(fastgnn, Autograd, m) {
  for (const char* op : {"minmax_aggregate_backward", "minmax_weight_backward",
                         "edge_softmax_backward", "gatv2_backward", "graph_attention_backward",
                         "gat_backward", "attention_delta_backward", "gat_source_backward",
                         "gat_destination_backward", "wsb_graph_attention_backward"}) {
    m.impl(op, torch::autograd::autogradNotImplementedFallback());
  }
}

}  // namespace fastgnn
