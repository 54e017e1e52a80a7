// GAT (v1) forward kernels of the fused attention (see attention_gat_kernels.cuh).
#include "cuda/attention_gat_kernels.cuh"

namespace fastgnn {
namespace cuda {

void gat_forward(const GatParams& p, const RowSet& rows, cudaStream_t stream) {
  gat::launch<false>(p, rows, stream);
}

}  // namespace cuda
}  // namespace fastgnn
