// Graph Transformer (dot-product) backward kernels of the fused attention.
#include "cuda/attention_kernels.cuh"

namespace fastgnn {
namespace cuda {
namespace attention {
FASTGNN_ATTENTION_LAUNCH(, AttentionKind::kDotProduct, true)
}  // namespace attention
}  // namespace cuda
}  // namespace fastgnn
