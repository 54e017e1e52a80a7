// Entry points of the fused attention kernels: pick the kind's launcher; att-gradient reduce.
#include "cuda/attention_kernels.cuh"
#include "cuda/attention_kernels.h"

namespace fastgnn {
namespace cuda {

int64_t attention_partial_rows(const RowSet& rows) {
  return ceil_div(rows.num_rows, attention::groups_per_block(rows.warps_per_row));
}

int attention_sign_words(const AttentionParams& p) {
  if (p.kind != AttentionKind::kGatv2) return 0;
  const attention::DimPlan plan = attention::plan_dim(p.dim, attention::fast_path_ok(p));
  return plan.fast_dim == 0 ? 0 : sign_words_for_dim(plan.fast_dim);
}

void attention_forward(const AttentionParams& p, const RowSet& rows, cudaStream_t stream) {
  if (p.kind == AttentionKind::kGatv2)
    attention::launch<AttentionKind::kGatv2, false>(p, rows, false, 0, stream);
  else
    attention::launch<AttentionKind::kDotProduct, false>(p, rows, false, 0, stream);
}

namespace {

void backward_pass(const AttentionParams& p, const RowSet& rows, bool source_pass,
                   int64_t partial_offset, cudaStream_t stream) {
  if (p.kind == AttentionKind::kGatv2)
    attention::launch<AttentionKind::kGatv2, true>(p, rows, source_pass, partial_offset, stream);
  else
    attention::launch<AttentionKind::kDotProduct, true>(p, rows, source_pass, partial_offset,
                                                        stream);
}

}  // namespace

void attention_backward_dst(const AttentionParams& p, const RowSet& rows, int64_t partial_offset,
                            cudaStream_t stream) {
  backward_pass(p, rows, false, partial_offset, stream);
}

void attention_backward_src(const AttentionParams& p, const RowSet& rows, cudaStream_t stream) {
  backward_pass(p, rows, true, 0, stream);
}

namespace {

// delta[pair] = <grad_out[pair, :], out[pair, :]>: one read of each operand and no [N, H, D]
// temporary. Each pair takes `lanes` lanes (enough for its row in packets of N, at most a
// warp) so that a warp moves whole 16-byte packets of several pairs at once: one pair per warp
// left most lanes of a D = 64 row with a 4-byte load each.
template <typename T, int N>
__global__ void attention_delta_kernel(const T* __restrict__ grad_out, const T* __restrict__ out,
                                       typename Scalar<T>::acc* __restrict__ delta,
                                       int64_t pairs, int64_t dim, int lanes) {
  using acc_t = typename Scalar<T>::acc;
  const int lane = threadIdx.x % kWarp, sub = lane % lanes, per_warp = kWarp / lanes;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x / kWarp * per_warp;
  for (int64_t first = warp * per_warp; first < pairs; first += stride) {  // warp-uniform
    const int64_t pair = first + lane / lanes;
    acc_t sum = 0;
    if (pair < pairs) {
      for (int64_t f = int64_t(sub) * N; f < dim; f += int64_t(lanes) * N) {
        acc_t g[N], o[N];
        load_packet<T, N>(grad_out + pair * dim + f, g);
        load_packet<T, N>(out + pair * dim + f, o);
#pragma unroll
        for (int k = 0; k < N; ++k) sum += g[k] * o[k];
      }
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (sub == 0 && pair < pairs) delta[pair] = sum;
  }
}

}  // namespace

void attention_delta(FloatType type, const void* grad_out, const void* out, void* delta,
                     int64_t pairs, int64_t dim, cudaStream_t stream) {
  if (pairs == 0) return;
  constexpr int kThreads = 256;
  dispatch_float(type, [&](auto s) {
    using T = decltype(s);
    dispatch_vec(packet_size(dim, sizeof(T), grad_out, out), [&](auto vec) {
      constexpr int N = decltype(vec)::value;
      int lanes = 1;
      while (lanes < kWarp && lanes * N < dim) lanes *= 2;
      const int64_t warps = ceil_div(pairs, kWarp / lanes);
      attention_delta_kernel<T, N><<<grid_for(warps * kWarp, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(grad_out), static_cast<const T*>(out),
          static_cast<typename Scalar<T>::acc*>(delta), pairs, dim, lanes);
    });
  });
  check_launch("attention_delta");
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
