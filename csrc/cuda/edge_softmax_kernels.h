// Launchers of the edge softmax CUDA kernels (raw pointers, sizes, stream; no torch). Edge
// values are [E, width] in input edge order, of the feature type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// The rows to normalise over: row i holds positions [rowptr[i], rowptr[i + 1]), position p
// the input edge perm[p] (perm null: p); rowptr and perm int64 when index64, else int32.
// light/heavy (rowptr's index type) split the rows by length: the light ones a warp each, the
// heavy ones a block each; heavy null or empty: every row a warp (light unread).
struct EdgeRows {
  const void* rowptr;
  const void* perm;
  int64_t rows;
  bool index64;
  const void* light = nullptr;
  int64_t num_light = 0;
  const void* heavy = nullptr;
  int64_t num_heavy = 0;
};

// out = softmax of logits over each row's edges, per column (the edge_softmax op).
void edge_softmax_forward(FloatType type, EdgeRows rows, const void* logits, void* out,
                          int64_t width, cudaStream_t stream);

// grad = out * (grad_out - the row's sum of out * grad_out), per column.
void edge_softmax_backward(FloatType type, EdgeRows rows, const void* out, const void* grad_out,
                           void* grad, int64_t width, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
