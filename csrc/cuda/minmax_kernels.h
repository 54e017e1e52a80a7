// Launchers of the min/max aggregation CUDA kernels (raw pointers, sizes, stream; no torch).
// arg and row lists have the CSR's index type; out and x the feature type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// Light path: a group of lanes per destination, lanes over features, a sequential scan of the
// row's edges. rows lists the destinations to do (null: all csr.rows of them).
void minmax_light(FloatType type, CsrView csr, const void* rows, int64_t num_rows,
                  const void* x, void* out, void* arg, int64_t width, bool is_max, int warps,
                  cudaStream_t stream);

// Load-balanced path for every row, float32/16/bf16 with fewer than 2^31 sources: one group
// of lanes per work item (see SplitWorkView), as the light path does per row. The items of
// split rows first merge their winners into packed[k, f] ([work.split_rows, width] 64-bit
// words, as the heavy path's; it may alias out) and write those rows' arg, then the other
// items write out and arg, then the split rows' out is gathered from x at arg.
void minmax_split(FloatType type, CsrView csr, SplitWorkView work, const void* x, void* out,
                  void* arg, unsigned long long* packed, int64_t width, bool is_max, int warps,
                  cudaStream_t stream);

// Heavy path for float32/16/bf16 and fewer than 2^31 sources, first step: blockIdx.x picks
// a heavy row, blockIdx.y an edge chunk of edges_per_block; chunk results merge into
// packed[h, f] (a [num_heavy, width] scratch of 64-bit words) by atomicMin/atomicMax, then a
// coalesced pass writes the heavy rows' arg. max_degree sizes the chunk grid.
void minmax_heavy_args(FloatType type, CsrView csr, const void* heavy_rows, int64_t num_heavy,
                       int64_t max_degree, const void* x, void* arg,
                       unsigned long long* packed, int64_t width, bool is_max, int warps,
                       int edges_per_block, cudaStream_t stream);

// Second step: out[row, f] = x[arg[row, f], f] (0 where arg is -1) for the heavy rows.
void minmax_heavy_values(FloatType type, bool index64, const void* heavy_rows,
                         int64_t num_heavy, const void* x, const void* arg, void* out,
                         int64_t width, cudaStream_t stream);

// acc[arg[i, f], f] += grad_out[i, f] with atomics (acc: float, or double for double grads).
void minmax_scatter_atomic(FloatType type, bool index64, const void* arg, const void* grad_out,
                           void* acc, int64_t rows, int64_t width, cudaStream_t stream);

// Deterministic backward over the transposed CSR (rows = sources, col = destinations):
// grad_x[j, f] = sum of grad_out[i, f] over distinct in-edge destinations i of j with
// arg[i, f] == j, summed in a fixed order. grad_x has the feature type.
void minmax_pull(FloatType type, CsrView t_csr, const void* arg, const void* grad_out,
                 void* grad_x, int64_t width, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
