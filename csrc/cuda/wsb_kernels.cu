// WSB SpMM on Tensor Cores. A block of kWsbWarps warps runs one 64-feature chunk (blockIdx.y)
// of the pieces its warp slots hold (WsbView: the plan). Each warp walks its run of a window's
// tiles with a double buffer: while it multiplies one tile's 16 x 16 value block by the
// tile's 16 gathered feature rows (WMMA, float accumulators), the next tile's rows are already
// on their way into shared memory (cp.async), so every warp keeps loads in flight instead of
// waiting for each gather. The warps of a piece then add their partials in shared memory in
// warp order, and a window of several pieces is summed in piece order by a second kernel:
// the result does not depend on timing. Padding columns (-1) read zeros, so a padded slot
// never turns inf or NaN features into NaN.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "cuda/async_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/wsb_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

using namespace nvcuda;

constexpr int kChunk = 64;              // features per block: four 16-wide accumulator fragments
constexpr int kXStride = kChunk + 8;    // half elements; a multiple of 8 as WMMA loads need
constexpr int kOutStride = kChunk + 4;  // floats; a multiple of 4 as WMMA stores need
// One stage of a warp's double buffer: the tile's 16 feature rows, then its value block.
// Multiples of 32 bytes keep every WMMA pointer aligned.
constexpr int kXBytes = 16 * kXStride * 2;
constexpr int kStageBytes = kXBytes + 256 * 2;
constexpr int kWarpBytes = 2 * kStageBytes;
static_assert(kXBytes % 32 == 0 && kStageBytes % 32 == 0, "WMMA needs 32-byte aligned tiles");
// After its walk a warp stages its float partial over its own buffers.
static_assert(16 * kOutStride * 4 <= kWarpBytes, "the partial must fit the warp's buffers");

template <typename scalar_t, bool kVector>
__global__ void __launch_bounds__(kWsbWarps * 32, 4)
wsb_spmm_kernel(WsbView wsb, const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                float* __restrict__ partials, int64_t width) {
#if __CUDA_ARCH__ >= 800
  __shared__ __align__(128) unsigned char smem[kWsbWarps][kWarpBytes];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int* item = wsb.work + (int64_t(blockIdx.x) * kWsbWarps + warp) * 4;
  const int begin = item[0], end = item[1], code = item[2], dest = item[3];
  const int64_t f0 = int64_t(blockIdx.y) * kChunk;
  const auto* vals = static_cast<const scalar_t*>(wsb.tile_vals);
  auto stage_x = [&](int s) { return reinterpret_cast<scalar_t*>(smem[warp] + s * kStageBytes); };
  auto stage_vals = [&](int s) {
    return reinterpret_cast<scalar_t*>(smem[warp] + s * kStageBytes + kXBytes);
  };

  // Lane l holds the column of row l % 16 of the next tile to gather, loaded one tile ahead
  // so that issuing a gather never waits on its column ids.
  const int* cols = wsb.tile_cols + lane % 16;
  int col = begin < end ? cols[16 * int64_t(begin)] : -1;
  auto gather = [&](int t, int s) {
    scalar_t* xs = stage_x(s);
    scalar_t* vs = stage_vals(s);
    if (kVector) {  // 16 rows x 8 pieces of 8 features: 8 lanes per row, 4 rounds
#pragma unroll
      for (int round = 0; round < 4; ++round) {
        const int r = round * 4 + lane / 8, f = (lane % 8) * 8;
        const int c = __shfl_sync(0xffffffffu, col, r);
        const bool real = c >= 0 && f0 + f < width;
        copy_async(xs + r * kXStride + f, real ? x + int64_t(c) * width + f0 + f : x,
                   real ? 16 : 0);
      }
      copy_async(vs + lane * 8, vals + int64_t(t) * 256 + lane * 8, 16);
    } else {  // unaligned or odd widths: plain loads, half a row per round
#pragma unroll 8
      for (int k = 0; k < 32; ++k) {
        const int r = k / 2, f = (k % 2) * 32 + lane;
        const int c = __shfl_sync(0xffffffffu, col, r);
        xs[r * kXStride + f] = (c >= 0 && f0 + f < width) ? x[int64_t(c) * width + f0 + f]
                                                          : Scalar<scalar_t>::store(0.0f);
      }
      for (int i = lane; i < 256; i += 32) vs[i] = vals[int64_t(t) * 256 + i];
    }
    commit_async();  // an empty group on the plain path: the waits below stay uniform
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kChunk / 16];
  for (auto& a : acc) wmma::fill_fragment(a, 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, scalar_t, wmma::row_major> a_frag;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, scalar_t, wmma::row_major> b_frag;
  const int64_t left = width - f0;
  const int fragments = int((left < kChunk ? left : kChunk) + 15) / 16;

  if (begin < end) {
    gather(begin, 0);
    if (begin + 1 < end) col = cols[16 * int64_t(begin + 1)];
  }
  for (int t = begin; t < end; ++t) {
    const int s = (t - begin) % 2;
    if (t + 1 < end) {
      gather(t + 1, s ^ 1);  // in flight while tile t is multiplied
      if (t + 2 < end) col = cols[16 * int64_t(t + 2)];
      wait_async<1>();  // tile t's group has landed; tile t + 1's may still be in flight
    } else {
      wait_async<0>();
    }
    __syncwarp();  // every lane's copies of tile t are visible to the warp
    wmma::load_matrix_sync(a_frag, stage_vals(s), 16);
#pragma unroll
    for (int j = 0; j < kChunk / 16; ++j) {
      if (j < fragments) {
        wmma::load_matrix_sync(b_frag, stage_x(s) + j * 16, kXStride);
        wmma::mma_sync(acc[j], a_frag, b_frag, acc[j]);
      }
    }
    __syncwarp();  // the gather of tile t + 2 overwrites this stage
  }

  // No copy is pending (the last wait drained them), so the partial may overwrite the stages.
  auto staged = [&](int w) { return reinterpret_cast<const float*>(smem[w]); };
#pragma unroll
  for (int j = 0; j < kChunk / 16; ++j)
    wmma::store_matrix_sync(reinterpret_cast<float*>(smem[warp]) + j * 16, acc[j], kOutStride,
                            wmma::mem_row_major);
  __syncthreads();  // the partials of the piece's other warps are staged too
  if (code < 0) return;  // an idle slot (the plan pads the last block)
  const int64_t window = code >> 2;
  const int warps = 1 << (code & 3);
  const int first = warp & ~(warps - 1);  // the plan aligns a piece's warps to their count
  // The piece's warps add its partials in warp order, 8 features (16 bytes of output) a
  // lane on the vector path, where 8 divides the width.
  constexpr int kPer = kVector ? 8 : 1;
  for (int i = ((warp - first) * 32 + lane) * kPer; i < 16 * kChunk; i += warps * 32 * kPer) {
    const int r = i / kChunk, f = i % kChunk;
    if (f0 + f >= width) continue;
    float sum[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) sum[k] = staged(first)[r * kOutStride + f + k];
    for (int w = 1; w < warps; ++w) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) sum[k] += staged(first + w)[r * kOutStride + f + k];
    }
    if (dest >= 0)
      store_packet<float, kPer>(partials + (int64_t(dest) * 16 + r) * width + f0 + f, sum);
    else if (window * 16 + r < wsb.rows)
      store_packet<scalar_t, kPer>(out + (window * 16 + r) * width + f0 + f, sum);
  }
#else
  __trap();  // Tensor Core fp16/bf16 WMMA needs sm_80 or newer; the glue refuses older GPUs
#endif
}

// The windows of several pieces: their partials summed in piece order. One block per partial
// row; only a window's first piece has work.
template <typename scalar_t>
__global__ void __launch_bounds__(256)
wsb_finish_kernel(const int* __restrict__ splits, const float* __restrict__ partials,
                  scalar_t* __restrict__ out, int64_t rows, int64_t width) {
  const int64_t window = splits[2 * int64_t(blockIdx.x)];
  const int pieces = splits[2 * int64_t(blockIdx.x) + 1];
  if (window < 0) return;
  const int64_t count = (rows - window * 16 < 16 ? rows - window * 16 : 16) * width;
  const float* first = partials + int64_t(blockIdx.x) * 16 * width;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    float sum = first[i];
    for (int p = 1; p < pieces; ++p) sum += first[int64_t(p) * 16 * width + i];
    out[window * 16 * width + i] = Scalar<scalar_t>::store(sum);
  }
}

template <typename scalar_t>
void launch(WsbView wsb, const void* x, void* out, float* partials, int64_t width,
            cudaStream_t stream) {
  const dim3 grid(unsigned(wsb.slots / kWsbWarps), unsigned((width + kChunk - 1) / kChunk));
  const auto* xs = static_cast<const scalar_t*>(x);
  auto* o = static_cast<scalar_t*>(out);
  // cp.async moves aligned 16-byte pieces: 8 features of a row, 8 values of a block.
  const bool vector = width % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(wsb.tile_vals) % 16 == 0;
  if (vector)
    wsb_spmm_kernel<scalar_t, true>
        <<<grid, kWsbWarps * 32, 0, stream>>>(wsb, xs, o, partials, width);
  else
    wsb_spmm_kernel<scalar_t, false>
        <<<grid, kWsbWarps * 32, 0, stream>>>(wsb, xs, o, partials, width);
  if (wsb.split_pieces > 0)
    wsb_finish_kernel<scalar_t><<<unsigned(wsb.split_pieces), 256, 0, stream>>>(
        wsb.splits, partials, o, wsb.rows, width);
}

}  // namespace

void wsb_spmm(FloatType type, WsbView wsb, const void* x, void* out, float* partials,
              int64_t width, cudaStream_t stream) {
  if (wsb.windows == 0 || width == 0) return;
  if (type == FloatType::kHalf) launch<__half>(wsb, x, out, partials, width, stream);
  else launch<__nv_bfloat16>(wsb, x, out, partials, width, stream);
}

}  // namespace cuda
}  // namespace fastgnn
