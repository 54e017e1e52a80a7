// GAT (v1) backward kernels of the fused attention (see attention_gat_kernels.cuh).
#include "cuda/attention_gat_kernels.cuh"

namespace fastgnn {
namespace cuda {

void gat_backward(const GatParams& p, const RowSet& rows, bool do_dst, bool do_src,
                  cudaStream_t stream) {
  gat::launch<true>(p, rows, do_dst, do_src, stream);
}

}  // namespace cuda
}  // namespace fastgnn
