// The destination pass of the Graph Transformer attention backward over the WSB layout, on
// Tensor Cores (FlashAttention-2's backward over a window's tiles). One warp walks one piece
// for one head, as the forward does; per tile, with the forward's lse and delta = <dOut, out>
// per row:
//   S = Q K^T, P = exp(scale S - lse) (per edge), dP = dOut V^T, g = P (dP - delta),
//   dQ += (c g) K  (c: the slot's edge count),
// and it stores every edge's (g, P) in CSR order, the [H, E, 2] scratch of the CSR backward's
// destination pass, so that the CSR source pass forms dK and dV from it unchanged. dQ is
// accumulated in float per window, its pieces' partials summed in piece order by a second
// kernel: no atomics, bitwise equal run to run.
//
// Edge ids: a row's CSR edges run in ascending source order (duplicates adjacent) and so do
// its nonempty slots over the window's tiles. Each row carries a cursor, its next edge's CSR
// position, from the plan's edge_starts at the piece's first tile; a slot of c edges takes
// the next c positions.
#include "cuda/common.cuh"
#include "cuda/wsb_attention_tiles.cuh"
#include "cuda/wsb_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

using namespace wsb_attention;

#if __CUDA_ARCH__ >= 800
// w as an A fragment in two parts, hi = w rounded to T and lo = the rest rounded to T, so that
// hi K + lo K keeps w's float precision (one rounding of dS to T would cost its mantissa:
// a row's dS sum to zero, and the products cancel).
template <typename T>
__device__ __forceinline__ void split_pack(float w0, float w1, unsigned& hi, unsigned& lo) {
  hi = pack<T>(w0, w1);
  const float2 rounded = unpack_bits<T>(hi);
  lo = pack<T>(w0 - rounded.x, w1 - rounded.y);
}

// Row g + 8 half's (g, P) for this lane's slots of the tile: count[n][2 half + e] edges at
// slot 8n + 2c + e. The row's four lanes scan their slots' counts (two 16-bit sums, slots
// 0-7 and 8-15, packed in one int) to find each slot's first CSR position; cursor moves past
// the tile's edges of the row.
__device__ __forceinline__ void store_scores(float2* scores, int& cursor, int half,
                                             const float (&count)[2][4], const float (&grad)[2][4],
                                             const float (&weight)[2][4]) {
  const int c = threadIdx.x % 4;
  int n0[2], n1[2];  // edges of this lane's two slots in slots 0-7, in slots 8-15
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    n0[e] = int(count[0][2 * half + e]);
    n1[e] = int(count[1][2 * half + e]);
  }
  const int mine = (n0[0] + n0[1]) | ((n1[0] + n1[1]) << 16);
  int scan = mine;  // inclusive over the row's lanes c' <= c
#pragma unroll
  for (int d = 1; d < 4; d *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, scan, d, 4);
    if (c >= d) scan += up;
  }
  const int total = __shfl_sync(0xffffffffu, scan, 3, 4), before = scan - mine;
  int first[2][2];  // [n][e]: the slot's first CSR position
  first[0][0] = cursor + (before & 0xffff);
  first[1][0] = cursor + (total & 0xffff) + (before >> 16);
  first[0][1] = first[0][0] + n0[0];
  first[1][1] = first[1][0] + n1[0];
  cursor += (total & 0xffff) + (total >> 16);
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int edges = n == 0 ? n0[e] : n1[e];
      const float2 score = make_float2(grad[n][2 * half + e], weight[n][2 * half + e]);
      for (int m = 0; m < edges; ++m) scores[first[n][e] + m] = score;
    }
  }
}
#endif

template <typename T, int kDim>
__global__ void __launch_bounds__(kWarps * 32)
wsb_attention_backward_kernel(WsbAttentionView wsb, WsbAttentionBackward bwd,
                              const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, float scale_log2, float scale) {
#if __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t task = int64_t(blockIdx.x) * kWarps + warp;  // piece * heads + head
  if (task >= wsb.pieces * wsb.heads) return;  // warp-uniform: no block barrier follows
  const int64_t heads = wsb.heads, h = task % heads, piece = task / heads;
  const int* item = wsb.work + piece * 4;
  const int begin = item[0], end = item[1], dest = item[3];
  const int64_t window = item[2];
  T* stages = reinterpret_cast<T*>(smem_raw + warp * Stage<kDim>::kWarpBytes);
  const int g = lane / 4, c = lane % 4;  // the fragments' row group and column pair
  const auto* grad_out = static_cast<const T*>(bwd.grad_out);
  const auto* out = static_cast<const T*>(bwd.out);

  unsigned qa[kDim / 16][4], da[kDim / 16][4];  // the window's queries and output gradients
  load_rows<T, kDim>(qa, q, window, wsb.rows, heads, h);
  load_rows<T, kDim>(da, grad_out, window, wsb.rows, heads, h);
  // Per row (g, g + 8): delta = <dOut, out> (this lane's features of dOut are its fragment's:
  // read out's there, the row's four lanes add), lse in log2 units, the next edge's position.
  float delta[2], lse2[2];
  int cursor[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = window * 16 + g + 8 * half;
    float sum = 0.0f;
    lse2[half] = 0.0f;  // rows past the end have no edges: never read
    if (i < wsb.rows) {
      const T* row = out + (i * heads + h) * kDim + 2 * c;
#pragma unroll
      for (int s = 0; s < kDim / 16; ++s) {
#pragma unroll
        for (int part = 0; part < 2; ++part) {
          const float2 d = unpack_bits<T>(da[s][2 * part + half]);
          const float2 o = unpack(row + s * 16 + 8 * part);
          sum += d.x * o.x + d.y * o.y;
        }
      }
      lse2[half] = bwd.lse[i * heads + h] * kLog2e;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    delta[half] = sum + __shfl_xor_sync(0xffffffffu, sum, 2);
    cursor[half] = bwd.edge_starts[piece * 16 + g + 8 * half];
  }
  auto* scores = reinterpret_cast<float2*>(bwd.scores) + h * bwd.edges;

  float dq[kDim / 8][4];  // dQ / scale: 8-feature column tiles, rows g and g + 8
#pragma unroll
  for (auto& tile : dq) tile[0] = tile[1] = tile[2] = tile[3] = 0.0f;

  walk_tiles<T, kDim>(wsb, k, v, begin, end, h, stages, [&](const T* ks, const T* vs,
                                                              const T* cs) {
    float s[2][4] = {}, dp[2][4] = {};  // [n]: slots 8n .. 8n + 7
    tile_scores<T, kDim>(s, qa, ks);    // S = Q K^T
    tile_scores<T, kDim>(dp, da, vs);   // dP = dOut V^T
    float count[2][4], weight[2][4], grad[2][4];
    load_counts<T>(count, cs);
    unsigned hi[4], lo[4];  // c g as the A fragment of (c g) K
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        weight[n][e] = count[n][e] > 0.0f ? exp2f(s[n][e] * scale_log2 - lse2[half]) : 0.0f;
        grad[n][e] = weight[n][e] * (dp[n][e] - delta[half]);
      }
      split_pack<T>(count[n][0] * grad[n][0], count[n][1] * grad[n][1], hi[2 * n], lo[2 * n]);
      split_pack<T>(count[n][2] * grad[n][2], count[n][3] * grad[n][3], hi[2 * n + 1],
                    lo[2 * n + 1]);
    }
    accumulate_rows<T, kDim>(dq, hi, ks);
    accumulate_rows<T, kDim>(dq, lo, ks);
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_scores(scores, cursor[half], half, count, grad, weight);
  });

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + 8 * half;
    if (dest >= 0) {  // a piece of a split window: its partial
      float* partial = bwd.partials + ((int64_t(dest) * 16 + r) * heads + h) * kDim + 2 * c;
#pragma unroll
      for (int j = 0; j < kDim / 8; ++j)
        *reinterpret_cast<float2*>(partial + 8 * j) =
            make_float2(dq[j][2 * half], dq[j][2 * half + 1]);
      continue;
    }
    const int64_t i = window * 16 + r;
    if (i >= wsb.rows) continue;
    T* row = static_cast<T*>(bwd.grad_q) + (i * heads + h) * kDim + 2 * c;
#pragma unroll
    for (int j = 0; j < kDim / 8; ++j)
      *reinterpret_cast<unsigned*>(row + 8 * j) =
          pack<T>(dq[j][2 * half] * scale, dq[j][2 * half + 1] * scale);
  }
#else
  __trap();  // mma.sync on fp16/bf16 with cp.async needs sm_80 or newer; the glue refuses older
#endif
}

// The windows of several pieces: their dQ partials summed in piece order. One block per
// partial row; only a window's first piece has work.
template <typename T>
__global__ void __launch_bounds__(256)
wsb_attention_backward_finish_kernel(WsbAttentionView wsb, int64_t dim,
                                     const float* __restrict__ partials, float scale,
                                     T* __restrict__ grad_q) {
  const int64_t window = wsb.splits[2 * int64_t(blockIdx.x)];
  const int pieces = wsb.splits[2 * int64_t(blockIdx.x) + 1];
  if (window < 0) return;
  const int64_t rows = wsb.rows - window * 16 < 16 ? wsb.rows - window * 16 : 16;
  const int64_t per_piece = 16 * wsb.heads * dim;  // floats of a partial row
  const float* first = partials + int64_t(blockIdx.x) * per_piece;
  for (int64_t i = threadIdx.x; i < rows * wsb.heads * dim; i += blockDim.x) {
    float sum = 0.0f;
    for (int p = 0; p < pieces; ++p) sum += first[p * per_piece + i];
    grad_q[window * 16 * wsb.heads * dim + i] = Scalar<T>::store(sum * scale);
  }
}

template <typename T, int kDim>
void launch(const WsbAttentionView& wsb, const WsbAttentionBackward& bwd, const void* q,
            const void* k, const void* v, float scale, cudaStream_t stream) {
  constexpr int kBytes = Stage<kDim>::kBlockBytes;
  auto kernel = wsb_attention_backward_kernel<T, kDim>;
  if (kBytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  const int64_t tasks = wsb.pieces * wsb.heads;
  kernel<<<unsigned(ceil_div(tasks, kWarps)), kWarps * 32, kBytes, stream>>>(
      wsb, bwd, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      scale * kLog2e, scale);
  check_launch("wsb_graph_attention_backward");
  if (wsb.split_pieces > 0) {
    wsb_attention_backward_finish_kernel<T><<<unsigned(wsb.split_pieces), 256, 0, stream>>>(
        wsb, kDim, bwd.partials, scale, static_cast<T*>(bwd.grad_q));
    check_launch("wsb_graph_attention_backward (summing split windows)");
  }
}

template <typename T>
void launch_for_dim(const WsbAttentionView& wsb, const WsbAttentionBackward& bwd, const void* q,
                    const void* k, const void* v, float scale, int64_t dim, cudaStream_t stream) {
  if (dim == 32) launch<T, 32>(wsb, bwd, q, k, v, scale, stream);
  else if (dim == 64) launch<T, 64>(wsb, bwd, q, k, v, scale, stream);
  else launch<T, 128>(wsb, bwd, q, k, v, scale, stream);
}

}  // namespace

void wsb_graph_attention_backward(FloatType type, const WsbAttentionView& wsb,
                                  const WsbAttentionBackward& bwd, const void* q, const void* k,
                                  const void* v, double scale, int64_t dim, cudaStream_t stream) {
  if (wsb.pieces == 0 || wsb.heads == 0) return;
  if (type == FloatType::kHalf)
    launch_for_dim<__half>(wsb, bwd, q, k, v, float(scale), dim, stream);
  else
    launch_for_dim<__nv_bfloat16>(wsb, bwd, q, k, v, float(scale), dim, stream);
}

}  // namespace cuda
}  // namespace fastgnn
