// Dot-product (Graph Transformer) forward kernels of the fused attention (see attention_kernels.cuh).
#include "cuda/attention_kernels.cuh"

namespace fastgnn {
namespace cuda {
namespace attention {
FASTGNN_ATTENTION_LAUNCH(, AttentionKind::kDotProduct, false)
}  // namespace attention
}  // namespace cuda
}  // namespace fastgnn
