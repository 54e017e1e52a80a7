// Graph Transformer (dot-product) forward kernels of the fused attention.
#include "cuda/attention_kernels.cuh"

namespace fastgnn {
namespace cuda {
namespace attention {
FASTGNN_ATTENTION_LAUNCH(, AttentionKind::kDotProduct, false)
}  // namespace attention
}  // namespace cuda
}  // namespace fastgnn
