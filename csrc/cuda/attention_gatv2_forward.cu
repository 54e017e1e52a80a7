// GATv2 forward kernels of the fused attention (see attention_kernels.cuh).
#include "cuda/attention_kernels.cuh"

namespace fastgnn {
namespace cuda {
namespace attention {
FASTGNN_ATTENTION_LAUNCH(, AttentionKind::kGatv2, false)
}  // namespace attention
}  // namespace cuda
}  // namespace fastgnn
