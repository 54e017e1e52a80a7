// GAT (v1) backward kernels of the fused attention (see attention_gat_kernels.cuh).
#include "cuda/attention_gat_kernels.cuh"

namespace fastgnn {
namespace cuda {

void gat_backward(const GatParams& p, const RowSet& rows, cudaStream_t stream) {
  gat::launch<true>(p, rows, stream);
}

void gat_backward_dst(const GatParams& p, const RowSet& rows, cudaStream_t stream) {
  gat::launch_dst(p, rows, stream);
}

}  // namespace cuda
}  // namespace fastgnn
