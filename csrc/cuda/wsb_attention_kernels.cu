// Graph Transformer attention over the WSB layout on Tensor Cores. One warp walks one piece of
// a window's tiles for one head (WsbAttentionView: the plan) with a FlashAttention-style
// online softmax: per tile, S = Q_w K_tile^T (16 x 16 scores of the window's 16 destinations
// against the tile's 16 sources), empty slots masked, running max and sum per row in float,
// O += P V_tile, P going from the score accumulators to the next product in registers
// (wsb_attention_tiles.cuh). The next tile's key and value rows and its count block are
// gathered into shared memory (cp.async) while the current one is multiplied.
//
// A slot holding c > 1 duplicate edges weighs c exp(s): softmax runs over edges, as in the CSR
// kernel. Rows without in-edges get zeros and lse -inf, as there.
#include "cuda/common.cuh"
#include "cuda/wsb_attention_tiles.cuh"
#include "cuda/wsb_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

using namespace wsb_attention;

template <typename T, int kDim>
__global__ void __launch_bounds__(kWarps * 32)
wsb_attention_kernel(WsbAttentionView wsb, const T* __restrict__ q, const T* __restrict__ k,
                     const T* __restrict__ v, float scale_log2, T* __restrict__ out,
                     float* __restrict__ lse, float* __restrict__ partials,
                     float* __restrict__ stats) {
#if __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t task = int64_t(blockIdx.x) * kWarps + warp;  // piece * heads + head
  if (task >= wsb.pieces * wsb.heads) return;  // warp-uniform: no block barrier follows
  const int64_t heads = wsb.heads, h = task % heads;
  const int* item = wsb.work + task / heads * 4;
  const int begin = item[0], end = item[1], dest = item[3];
  const int64_t window = item[2];
  T* stages = reinterpret_cast<T*>(smem_raw + warp * Stage<kDim>::kWarpBytes);
  const int g = lane / 4, c = lane % 4;  // the fragments' row group and column pair

  unsigned qa[kDim / 16][4];  // the window's queries
  load_rows<T, kDim>(qa, q, window, wsb.rows, heads, h);

  float o[kDim / 8][4];  // O: 8-feature column tiles, rows g and g + 8
#pragma unroll
  for (auto& tile : o) tile[0] = tile[1] = tile[2] = tile[3] = 0.0f;
  // Per row (g, g + 8): the running max of the scores in log2 units (-inf: no edge yet) and
  // this lane's share of the running sum (the four lanes of a row add theirs at the end).
  float peak[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};

  walk_tiles<T, kDim>(wsb, k, v, begin, end, h, stages, [&](const T* ks, const T* vs,
                                                              const T* cs) {
    float score[2][4] = {};  // S = Q K^T: score[n] covers slots 8n .. 8n + 7
    tile_scores<T, kDim>(score, qa, ks);
    // Mask empty slots; weights c exp2(s - max) with c the slot's edge count.
    float count[2][4], top[2] = {peak[0], peak[1]};
    load_counts<T>(count, cs);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        score[n][e] = count[n][e] > 0.0f ? score[n][e] * scale_log2 : -INFINITY;
        top[e / 2] = fmaxf(top[e / 2], score[n][e]);
      }
    }
    float rescale[2], base[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      top[half] = fmaxf(top[half], __shfl_xor_sync(0xffffffffu, top[half], 1));
      top[half] = fmaxf(top[half], __shfl_xor_sync(0xffffffffu, top[half], 2));
      base[half] = top[half] == -INFINITY ? 0.0f : top[half];  // no edge yet: weights stay 0
      rescale[half] = exp2f(peak[half] - base[half]);
      peak[half] = top[half];
      total[half] *= rescale[half];
    }
    unsigned pa[4];  // P as the A fragment of P V: the score fragments' layout is a's
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = count[n][e] * exp2f(score[n][e] - base[e / 2]);
        total[e / 2] += p[e];
      }
      pa[2 * n] = pack<T>(p[0], p[1]);
      pa[2 * n + 1] = pack<T>(p[2], p[3]);
    }
#pragma unroll
    for (int j = 0; j < kDim / 8; ++j) {
      o[j][0] *= rescale[0];
      o[j][1] *= rescale[0];
      o[j][2] *= rescale[1];
      o[j][3] *= rescale[1];
    }
    accumulate_rows<T, kDim>(o, pa, vs);
  });

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    total[half] += __shfl_xor_sync(0xffffffffu, total[half], 1);
    total[half] += __shfl_xor_sync(0xffffffffu, total[half], 2);
    const int r = g + 8 * half;
    if (dest >= 0) {  // a piece of a split window: its unnormalised state
      const int64_t at = (int64_t(dest) * 16 + r) * heads + h;
      float* partial = partials + at * kDim + 2 * c;
#pragma unroll
      for (int j = 0; j < kDim / 8; ++j)
        *reinterpret_cast<float2*>(partial + 8 * j) =
            make_float2(o[j][2 * half], o[j][2 * half + 1]);
      if (c == 0) *reinterpret_cast<float2*>(stats + 2 * at) = make_float2(peak[half], total[half]);
      continue;
    }
    const int64_t i = window * 16 + r;
    if (i >= wsb.rows) continue;
    const float inv = total[half] > 0.0f ? 1.0f / total[half] : 0.0f;
    T* row = out + (i * heads + h) * kDim + 2 * c;
#pragma unroll
    for (int j = 0; j < kDim / 8; ++j)
      *reinterpret_cast<unsigned*>(row + 8 * j) =
          pack<T>(o[j][2 * half] * inv, o[j][2 * half + 1] * inv);
    if (c == 0)
      lse[i * heads + h] =
          total[half] > 0.0f ? (peak[half] + log2f(total[half])) * kLn2 : -INFINITY;
  }
#else
  __trap();  // mma.sync on fp16/bf16 with cp.async needs sm_80 or newer; the glue refuses older
#endif
}

// The windows of several pieces: their softmax states merged in piece order. One block per
// partial row; only a window's first piece has work.
template <typename T>
__global__ void __launch_bounds__(256)
wsb_attention_finish_kernel(WsbAttentionView wsb, int64_t dim, const float* __restrict__ partials,
                            const float* __restrict__ stats, T* __restrict__ out,
                            float* __restrict__ lse) {
  const int64_t window = wsb.splits[2 * int64_t(blockIdx.x)];
  const int pieces = wsb.splits[2 * int64_t(blockIdx.x) + 1];
  if (window < 0) return;
  const int64_t rows = wsb.rows - window * 16 < 16 ? wsb.rows - window * 16 : 16;
  const int64_t per_piece = 16 * wsb.heads;  // (row, head) pairs of a partial row
  const int64_t first = int64_t(blockIdx.x) * per_piece;
  for (int64_t i = threadIdx.x; i < rows * wsb.heads * dim; i += blockDim.x) {
    const int64_t pair = i / dim;  // row * heads + head within the window
    float top = -INFINITY;
    for (int p = 0; p < pieces; ++p) top = fmaxf(top, stats[2 * (first + p * per_piece + pair)]);
    float total = 0.0f, acc = 0.0f;
    if (top != -INFINITY) {
      for (int p = 0; p < pieces; ++p) {
        const int64_t at = first + p * per_piece + pair;
        const float w = exp2f(stats[2 * at] - top);  // a piece without edges here: 0
        total += w * stats[2 * at + 1];
        acc += w * partials[at * dim + i % dim];
      }
    }
    const int64_t target = window * 16 * wsb.heads + pair;
    out[target * dim + i % dim] = Scalar<T>::store(total > 0.0f ? acc / total : 0.0f);
    if (i % dim == 0) lse[target] = total > 0.0f ? (top + log2f(total)) * kLn2 : -INFINITY;
  }
}

template <typename T, int kDim>
void launch(const WsbAttentionView& wsb, const void* q, const void* k, const void* v,
            float scale_log2, void* out, float* lse, float* partials, float* stats,
            cudaStream_t stream) {
  constexpr int kBytes = Stage<kDim>::kBlockBytes;
  auto kernel = wsb_attention_kernel<T, kDim>;
  if (kBytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  const int64_t tasks = wsb.pieces * wsb.heads;
  kernel<<<unsigned(ceil_div(tasks, kWarps)), kWarps * 32, kBytes, stream>>>(
      wsb, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      scale_log2, static_cast<T*>(out), lse, partials, stats);
  check_launch("wsb_graph_attention");
  if (wsb.split_pieces > 0) {
    wsb_attention_finish_kernel<T><<<unsigned(wsb.split_pieces), 256, 0, stream>>>(
        wsb, kDim, partials, stats, static_cast<T*>(out), lse);
    check_launch("wsb_graph_attention (merging split windows)");
  }
}

template <typename T>
void launch_for_dim(const WsbAttentionView& wsb, const void* q, const void* k, const void* v,
                    float scale_log2, int64_t dim, void* out, float* lse, float* partials,
                    float* stats, cudaStream_t stream) {
  if (dim == 32) launch<T, 32>(wsb, q, k, v, scale_log2, out, lse, partials, stats, stream);
  else if (dim == 64) launch<T, 64>(wsb, q, k, v, scale_log2, out, lse, partials, stats, stream);
  else launch<T, 128>(wsb, q, k, v, scale_log2, out, lse, partials, stats, stream);
}

}  // namespace

void wsb_graph_attention(FloatType type, const WsbAttentionView& wsb, const void* q,
                         const void* k, const void* v, double scale, int64_t dim, void* out,
                         float* lse, float* partials, float* stats, cudaStream_t stream) {
  if (wsb.pieces == 0 || wsb.heads == 0) return;
  const float scale_log2 = float(scale) * kLog2e;
  if (type == FloatType::kHalf)
    launch_for_dim<__half>(wsb, q, k, v, scale_log2, dim, out, lse, partials, stats, stream);
  else
    launch_for_dim<__nv_bfloat16>(wsb, q, k, v, scale_log2, dim, out, lse, partials, stats,
                                  stream);
}

}  // namespace cuda
}  // namespace fastgnn
