// GATv2 instantiations of the fused attention kernels.
#include "cuda/attention_kernels.cuh"

namespace fastgnn {
namespace cuda {
namespace attention {

void launch_gatv2(const AttentionParams& p, const RowSet& rows, bool backward, bool do_dst,
                  bool do_src, int64_t partial_offset, cudaStream_t stream) {
  launch<AttentionKind::kGatv2>(p, rows, backward, do_dst, do_src, partial_offset, stream);
}

}  // namespace attention
}  // namespace cuda
}  // namespace fastgnn
