// WSB SpMM on Tensor Cores. One warp owns one 16-row window and 64 features: for each tile it
// gathers the 16 source rows of those features into shared memory (8 lanes read one row's
// 128 bytes, so each gather is coalesced) and multiplies the 16 x 16 value block by them with
// WMMA, accumulating 16 x 64 results in float fragments; the window's rows are written once.
// Padding columns (-1) read zeros, so a padded slot never turns inf or NaN features into NaN.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "cuda/common.cuh"
#include "cuda/wsb_kernels.h"

namespace fastgnn {
namespace cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;        // windows per block
constexpr int kChunk = 64;       // features per warp: four 16-wide accumulator fragments
constexpr int kXStride = kChunk + 8;    // half elements; a multiple of 8 as WMMA loads need
constexpr int kOutStride = kChunk + 4;  // floats; a multiple of 4 as WMMA stores need

template <typename scalar_t, bool kVector>
__global__ void __launch_bounds__(kWarps * 32)
wsb_spmm_kernel(WsbView wsb, const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                int64_t width) {
#if __CUDA_ARCH__ >= 800
  __shared__ __align__(32) scalar_t xs[kWarps][16 * kXStride];
  __shared__ __align__(32) float os[kWarps][16 * kOutStride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t window = int64_t(blockIdx.x) * kWarps + warp;
  if (window >= wsb.windows) return;  // the warp's own work only: no block-wide barrier below
  const int64_t f0 = int64_t(blockIdx.y) * kChunk;
  const auto* vals = static_cast<const scalar_t*>(wsb.tile_vals);
  scalar_t* tile_x = xs[warp];

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kChunk / 16];
  for (auto& a : acc) wmma::fill_fragment(a, 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, scalar_t, wmma::row_major> a_frag;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, scalar_t, wmma::row_major> b_frag;
  const int64_t left = width - f0;
  const int fragments = int((left < kChunk ? left : kChunk) + 15) / 16;

  for (int t = wsb.tile_ptr[window]; t < wsb.tile_ptr[window + 1]; ++t) {
    if (kVector) {  // 16 rows x 8 pieces of 8 features: 8 lanes per row, 4 rounds
#pragma unroll
      for (int round = 0; round < 4; ++round) {
        const int piece = round * 32 + lane, r = piece / 8, f = (piece % 8) * 8;
        const int c = wsb.tile_cols[16 * t + r];
        uint4 v = make_uint4(0, 0, 0, 0);
        if (c >= 0 && f0 + f < width)
          v = *reinterpret_cast<const uint4*>(x + int64_t(c) * width + f0 + f);
        *reinterpret_cast<uint4*>(tile_x + r * kXStride + f) = v;
      }
    } else {
      for (int i = lane; i < 16 * kChunk; i += 32) {
        const int r = i / kChunk, f = i % kChunk;
        const int c = wsb.tile_cols[16 * t + r];
        tile_x[r * kXStride + f] = (c >= 0 && f0 + f < width)
                                       ? x[int64_t(c) * width + f0 + f]
                                       : Scalar<scalar_t>::store(0.0f);
      }
    }
    __syncwarp();
    wmma::load_matrix_sync(a_frag, vals + int64_t(t) * 256, 16);
#pragma unroll
    for (int j = 0; j < kChunk / 16; ++j) {
      if (j < fragments) {
        wmma::load_matrix_sync(b_frag, tile_x + j * 16, kXStride);
        wmma::mma_sync(acc[j], a_frag, b_frag, acc[j]);
      }
    }
    __syncwarp();  // the next gather overwrites tile_x
  }

  float* staged = os[warp];
#pragma unroll
  for (int j = 0; j < kChunk / 16; ++j)
    wmma::store_matrix_sync(staged + j * 16, acc[j], kOutStride, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 16 * kChunk; i += 32) {
    const int r = i / kChunk, f = i % kChunk;
    const int64_t row = window * 16 + r;
    if (row < wsb.rows && f0 + f < width)
      out[row * width + f0 + f] = Scalar<scalar_t>::store(staged[r * kOutStride + f]);
  }
#else
  __trap();  // Tensor Core fp16/bf16 WMMA needs sm_80 or newer; the glue refuses older GPUs
#endif
}

template <typename scalar_t>
void launch(WsbView wsb, const void* x, void* out, int64_t width, cudaStream_t stream) {
  const dim3 grid(unsigned((wsb.windows + kWarps - 1) / kWarps),
                  unsigned((width + kChunk - 1) / kChunk));
  const auto* xs = static_cast<const scalar_t*>(x);
  auto* o = static_cast<scalar_t*>(out);
  const bool vector = width % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vector)
    wsb_spmm_kernel<scalar_t, true><<<grid, kWarps * 32, 0, stream>>>(wsb, xs, o, width);
  else
    wsb_spmm_kernel<scalar_t, false><<<grid, kWarps * 32, 0, stream>>>(wsb, xs, o, width);
}

}  // namespace

void wsb_spmm(FloatType type, WsbView wsb, const void* x, void* out, int64_t width,
              cudaStream_t stream) {
  if (wsb.windows == 0 || width == 0) return;
  if (type == FloatType::kHalf) launch<__half>(wsb, x, out, width, stream);
  else launch<__nv_bfloat16>(wsb, x, out, width, stream);
}

}  // namespace cuda
}  // namespace fastgnn
