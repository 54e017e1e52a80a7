// The Tensor Core building blocks of the WSB Graph Transformer attention kernels (forward and
// backward): fragments of a window's 16 rows, a piece's double-buffered walk over its tiles,
// and the two mma.sync m16n8k16 products on a tile (scores against its 16 gathered rows, and
// a 16 x 16 weight block times those rows).
//
// mma.sync rather than WMMA: its fragment layouts are documented, so score accumulators
// convert in registers into the A operand of the next product (FlashAttention-2's trick);
// WMMA's fragments are opaque and would stage every 16 x 16 block through shared memory.
// Row fragments come from shared memory through ldmatrix (transposed on the fly where the
// rows are the product's K dimension).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/async_copy.cuh"
#include "cuda/wsb_kernels.h"

namespace fastgnn {
namespace cuda {
namespace wsb_attention {

constexpr int kWarps = 4;  // warps of a block; each walks one (piece, head)
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
  static constexpr int kBlockBytes = kWarps * kWarpBytes;  // 72 KiB at D = 128
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
template <typename T>
__device__ __forceinline__ float2 unpack_bits(unsigned bits) {
  return unpack(reinterpret_cast<const T*>(&bits));
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

// The A fragments of head h of a window's 16 rows of x ([rows, heads, kDim]; rows past the
// end read as zeros), one per 16-feature step, held in registers for a whole walk.
template <typename T, int kDim>
__device__ __forceinline__ void load_rows(unsigned (&a)[kDim / 16][4], const T* x, int64_t window,
                                          int64_t rows, int64_t heads, int64_t h) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = window * 16 + g + 8 * half;
    const T* row = x + (i * heads + h) * kDim + 2 * c;
#pragma unroll
    for (int s = 0; s < kDim / 16; ++s) {
      a[s][half] = i < rows ? *reinterpret_cast<const unsigned*>(row + s * 16) : 0u;
      a[s][2 + half] = i < rows ? *reinterpret_cast<const unsigned*>(row + s * 16 + 8) : 0u;
    }
  }
}

// Walks tiles [begin, end) of one window for head h: tile t + 1's key and value rows and its
// count block are gathered into shared memory (cp.async) while visit(keys, values, counts)
// computes on tile t. Padding slots are zero-filled without a read. stages: this warp's two
// Stage<kDim> buffers.
template <typename T, int kDim, typename Visit>
__device__ __forceinline__ void walk_tiles(const WsbAttentionView& wsb, const T* __restrict__ k,
                                           const T* __restrict__ v, int begin, int end,
                                           int64_t h, T* stages, Visit&& visit) {
  using S = Stage<kDim>;
  const int lane = threadIdx.x % 32;
  const int64_t heads = wsb.heads;
  const auto* counts = static_cast<const T*>(wsb.tile_counts);
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

  if (begin < end) {
    gather(begin, 0);
    if (begin + 1 < end) col = cols[16 * int64_t(begin + 1)];
  }
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
    visit(ks, ks + S::kRows, ks + 2 * S::kRows);
    __syncwarp();  // the gather of tile t + 2 overwrites this stage
  }
}

// score[n] += the 16 x 8 block of a (16 rows x kDim, A fragments) times the tile's rows
// (16 x kDim in shared memory, stride Stage<kDim>::kStride) transposed, slots 8n .. 8n + 7.
template <typename T, int kDim>
__device__ __forceinline__ void tile_scores(float (&score)[2][4],
                                            const unsigned (&a)[kDim / 16][4], const T* rows) {
  const int lane = threadIdx.x % 32, mat = lane / 8, mrow = lane % 8;
#pragma unroll
  for (int s = 0; s < kDim / 16; ++s) {
    unsigned b[4];  // matrices: slots 0-7 | 8-15 (mat / 2) x features +0 | +8 (mat % 2)
    load_matrices<false>(
        b, rows + ((mat / 2) * 8 + mrow) * Stage<kDim>::kStride + s * 16 + (mat % 2) * 8);
    mma<T>(score[0], a[s], b[0], b[1]);
    mma<T>(score[1], a[s], b[2], b[3]);
  }
}

// acc (16 x kDim, 8-feature column tiles) += w (16 x 16 slots, an A fragment) times the
// tile's rows (16 slots x kDim in shared memory).
template <typename T, int kDim>
__device__ __forceinline__ void accumulate_rows(float (&acc)[kDim / 8][4], const unsigned (&w)[4],
                                                const T* rows) {
  const int lane = threadIdx.x % 32, mat = lane / 8, mrow = lane % 8;
#pragma unroll
  for (int j = 0; j < kDim / 8; j += 2) {
    unsigned b[4];  // matrices: slots 0-7 | 8-15 (mat % 2) x features 8j | 8j + 8 (mat / 2)
    load_matrices<true>(
        b, rows + ((mat % 2) * 8 + mrow) * Stage<kDim>::kStride + (j + mat / 2) * 8);
    mma<T>(acc[j], w, b[0], b[1]);
    mma<T>(acc[j + 1], w, b[2], b[3]);
  }
}

// The tile's edge counts in the score accumulators' layout: count[n][e] is slot 8n + 2c +
// e % 2 of row g + 8 (e / 2).
template <typename T>
__device__ __forceinline__ void load_counts(float (&count)[2][4], const T* counts) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float2 pair = unpack(counts + (g + 8 * half) * 16 + 8 * n + 2 * c);
      count[n][2 * half] = pair.x;
      count[n][2 * half + 1] = pair.y;
    }
  }
}
#endif

}  // namespace wsb_attention
}  // namespace cuda
}  // namespace fastgnn
