// Entry points of the fused attention kernels: pick the kind's launcher; att-gradient reduce.
#include "cuda/attention_kernels.cuh"
#include "cuda/attention_kernels.h"

namespace fastgnn {
namespace cuda {

int64_t attention_partial_rows(const RowSet& rows) {
  return ceil_div(rows.num_rows, attention::groups_per_block(rows.warps_per_row));
}

void attention_forward(const AttentionParams& p, const RowSet& rows, cudaStream_t stream) {
  if (p.kind == AttentionKind::kGatv2)
    attention::launch<AttentionKind::kGatv2, false>(p, rows, false, false, 0, stream);
  else
    attention::launch<AttentionKind::kDotProduct, false>(p, rows, false, false, 0, stream);
}

void attention_backward(const AttentionParams& p, const RowSet& rows, bool do_dst, bool do_src,
                        int64_t partial_offset, cudaStream_t stream) {
  if (p.kind == AttentionKind::kGatv2)
    attention::launch<AttentionKind::kGatv2, true>(p, rows, do_dst, do_src, partial_offset, stream);
  else
    attention::launch<AttentionKind::kDotProduct, true>(p, rows, do_dst, do_src, partial_offset,
                                                        stream);
}

void attention_reduce_partials(FloatType type, const void* partial, int64_t partial_rows,
                               int64_t width, void* grad_att, cudaStream_t stream) {
  if (width == 0) return;
  const unsigned blocks = unsigned(ceil_div(width, kWarp));
  const unsigned threads = attention::kWarpsPerBlock * kWarp;
  if (type == FloatType::kDouble)
    attention::reduce_partials_kernel<double><<<blocks, threads, 0, stream>>>(
        static_cast<const double*>(partial), partial_rows, width, static_cast<double*>(grad_att));
  else
    attention::reduce_partials_kernel<float><<<blocks, threads, 0, stream>>>(
        static_cast<const float*>(partial), partial_rows, width, static_cast<float*>(grad_att));
  check_launch("attention_reduce_partials");
}

}  // namespace cuda
}  // namespace fastgnn
