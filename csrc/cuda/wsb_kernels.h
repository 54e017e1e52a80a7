// Launchers of the WSB (weighted block-sparse) Tensor Core kernels: raw pointers, no torch.
#pragma once

#include <cuda_runtime.h>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// The WSB layout of a destination-major graph: destinations in windows of 16 rows; window w
// owns tiles [tile_ptr[w], tile_ptr[w + 1]); tile t covers 16 source columns
// tile_cols[16 t .. 16 t + 15] (-1: padding) and holds the dense 16 x 16 row-major block
// tile_vals[256 t ..] of edge values (row: destination within the window, column: slot).
struct WsbView {
  const int* tile_ptr;
  const int* tile_cols;
  const void* tile_vals;  // the features' half type
  int64_t windows;
  int64_t rows;  // destinations (the last window may be partial)
};

// out[i] = sum over tiles of the window of i of tile_vals[i, c] * x[tile_cols[c]], with fp16 or
// bf16 Tensor Core products accumulated in float. type is kHalf or kBFloat16.
void wsb_spmm(FloatType type, WsbView wsb, const void* x, void* out, int64_t width,
              cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
