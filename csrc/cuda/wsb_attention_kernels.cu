// Graph Transformer attention over the WSB layout on Tensor Cores. One warp walks one piece of
// a window's tiles for one head (WsbAttentionView: the plan) with a FlashAttention-style
// online softmax: per tile, S = Q_w K_tile^T (16 x 16 scores of the window's 16 destinations
// against the tile's 16 sources), empty slots masked, running max and sum per row in float,
// O += P V_tile. The next tile's key and value rows and its count block are gathered into
// shared memory (cp.async) while the current one is multiplied, as in the WSB SpMM.
//
// mma.sync m16n8k16 rather than WMMA: its fragment layouts are documented, so the score
// accumulators of S convert in registers into the A operand of P V (FlashAttention-2's trick);
// WMMA's fragments are opaque and would stage every 16 x 16 score block through shared memory
// and back, twice per tile. Key and value fragments come from shared memory through ldmatrix
// (the values transposed on the fly).
//
// A slot holding c > 1 duplicate edges weighs c exp(s): softmax runs over edges, as in the CSR
// kernel. Rows without in-edges get zeros and lse -inf, as there.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/wsb_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

constexpr int kAttentionWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One stage of a warp's double buffer, in half elements: 16 key rows, 16 value rows, the
// 16 x 16 count block. Rows are padded by 16 bytes so that the 8 rows one ldmatrix reads fall
// in different banks.
template <int kDim>
struct Stage {
  static constexpr int kStride = kDim + 8;
  static constexpr int kRows = 16 * kStride;
  static constexpr int kElems = 2 * kRows + 256;
  static constexpr int kWarpBytes = 2 * kElems * 2;
  static_assert((kStride * 2) % 16 == 0 && (kElems * 2) % 16 == 0,
                "cp.async and ldmatrix need 16-byte aligned rows");
};

#if __CUDA_ARCH__ >= 800
template <typename T>
__device__ __forceinline__ unsigned pack(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
template <>
__device__ __forceinline__ unsigned pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}

__device__ __forceinline__ float2 unpack(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 unpack(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// d += a b, a 16 x 16 (row major), b 16 x 8 (column major), float accumulators. Fragments
// (PTX ISA, mma.m16n8k16): lane = 4 g + c holds a's rows g and g + 8 at columns 2c, 2c + 1
// and 2c + 8, 2c + 9; b's column g at rows 2c, 2c + 1 and 2c + 8, 2c + 9; d's rows g and g + 8
// at columns 2c, 2c + 1.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1) {
  if constexpr (std::is_same<T, __half>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices from shared memory, lane l giving the address of row l % 8 of matrix
// l / 8; register m holds matrix m as an mma fragment (kTranspose: its transpose).
template <bool kTranspose>
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], const void* row) {
  const auto at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if (kTranspose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
}
#endif

template <typename T, int kDim>
__global__ void __launch_bounds__(kAttentionWarps * 32)
wsb_attention_kernel(WsbAttentionView wsb, const T* __restrict__ q, const T* __restrict__ k,
                     const T* __restrict__ v, float scale_log2, T* __restrict__ out,
                     float* __restrict__ lse, float* __restrict__ partials,
                     float* __restrict__ stats) {
#if __CUDA_ARCH__ >= 800
  using S = Stage<kDim>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t task = int64_t(blockIdx.x) * kAttentionWarps + warp;  // piece * heads + head
  if (task >= wsb.pieces * wsb.heads) return;  // warp-uniform: no block barrier follows
  const int64_t heads = wsb.heads, h = task % heads;
  const int* item = wsb.work + task / heads * 4;
  const int begin = item[0], end = item[1], dest = item[3];
  const int64_t window = item[2];
  T* stages = reinterpret_cast<T*>(smem_raw + warp * S::kWarpBytes);
  const auto* counts = static_cast<const T*>(wsb.tile_counts);
  const int g = lane / 4, c = lane % 4;  // the fragments' row group and column pair

  // The window's queries as A fragments, kept in registers for the whole walk.
  constexpr int kSteps = kDim / 16;
  unsigned qa[kSteps][4];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = window * 16 + g + 8 * half;
    const T* row = q + (i * heads + h) * kDim + 2 * c;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      qa[s][half] = i < wsb.rows ? *reinterpret_cast<const unsigned*>(row + s * 16) : 0u;
      qa[s][2 + half] = i < wsb.rows ? *reinterpret_cast<const unsigned*>(row + s * 16 + 8) : 0u;
    }
  }

  // Lane l holds the source of slot l % 16 of the next tile to gather, loaded a tile ahead.
  const int* cols = wsb.tile_cols + lane % 16;
  int col = begin < end ? cols[16 * int64_t(begin)] : -1;
  auto gather = [&](int t, int stage) {
    T* ks = stages + stage * S::kElems;
    T* vs = ks + S::kRows;
    constexpr int kPieces = kDim / 8;  // 16-byte pieces of a row
#pragma unroll
    for (int round = 0; round < 16 * kPieces / 32; ++round) {
      const int i = round * 32 + lane, r = i / kPieces, f = (i % kPieces) * 8;
      const int src = __shfl_sync(0xffffffffu, col, r);
      const int64_t at = (int64_t(src) * heads + h) * kDim + f;
      copy_async(ks + r * S::kStride + f, src >= 0 ? k + at : k, src >= 0 ? 16 : 0);
      copy_async(vs + r * S::kStride + f, src >= 0 ? v + at : v, src >= 0 ? 16 : 0);
    }
    copy_async(vs + S::kRows + lane * 8, counts + int64_t(t) * 256 + lane * 8, 16);
    commit_async();
  };

  float o[kDim / 8][4];  // O: 8-feature column tiles, rows g and g + 8
#pragma unroll
  for (auto& tile : o) tile[0] = tile[1] = tile[2] = tile[3] = 0.0f;
  // Per row (g, g + 8): the running max of the scores in log2 units (-inf: no edge yet) and
  // this lane's share of the running sum (the four lanes of a row add theirs at the end).
  float peak[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};

  if (begin < end) {
    gather(begin, 0);
    if (begin + 1 < end) col = cols[16 * int64_t(begin + 1)];
  }
  const int mat = lane / 8, mrow = lane % 8;  // ldmatrix: this lane's matrix and row
  for (int t = begin; t < end; ++t) {
    const int stage = (t - begin) % 2;
    if (t + 1 < end) {
      gather(t + 1, stage ^ 1);  // in flight while tile t is computed
      if (t + 2 < end) col = cols[16 * int64_t(t + 2)];
      wait_async<1>();
    } else {
      wait_async<0>();
    }
    __syncwarp();
    const T* ks = stages + stage * S::kElems;
    const T* vs = ks + S::kRows;
    const T* cs = vs + S::kRows;

    // S = Q K^T: score[n] covers slots 8n .. 8n + 7.
    float score[2][4] = {};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      unsigned b[4];  // matrices: slots 0-7 | 8-15 (mat / 2) x features +0 | +8 (mat % 2)
      load_matrices<false>(b, ks + ((mat / 2) * 8 + mrow) * S::kStride + s * 16 + (mat % 2) * 8);
      mma<T>(score[0], qa[s], b[0], b[1]);
      mma<T>(score[1], qa[s], b[2], b[3]);
    }
    // Mask empty slots; weights c exp2(s - max) with c the slot's edge count.
    float count[2][4], top[2] = {peak[0], peak[1]};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 pair = unpack(cs + (g + 8 * half) * 16 + 8 * n + 2 * c);
        count[n][2 * half] = pair.x;
        count[n][2 * half + 1] = pair.y;
      }
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
#pragma unroll
    for (int j = 0; j < kDim / 8; j += 2) {
      unsigned b[4];  // matrices: slots 0-7 | 8-15 (mat % 2) x features 8j | 8j + 8 (mat / 2)
      load_matrices<true>(b, vs + ((mat % 2) * 8 + mrow) * S::kStride + (j + mat / 2) * 8);
      mma<T>(o[j], pa, b[0], b[1]);
      mma<T>(o[j + 1], pa, b[2], b[3]);
    }
    __syncwarp();  // the gather of tile t + 2 overwrites this stage
  }

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
  constexpr int kBytes = kAttentionWarps * Stage<kDim>::kWarpBytes;  // 72 KiB at D = 128
  auto kernel = wsb_attention_kernel<T, kDim>;
  if (kBytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  const int64_t tasks = wsb.pieces * wsb.heads;
  kernel<<<unsigned(ceil_div(tasks, kAttentionWarps)), kAttentionWarps * 32, kBytes, stream>>>(
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
