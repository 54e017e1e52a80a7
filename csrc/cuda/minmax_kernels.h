// Launchers of the min/max aggregation CUDA kernels (raw pointers, sizes, stream; no torch).
// arg and row lists have the CSR's index type; out and x the feature type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// Optional per-edge weights, [E, heads] in input edge order of the feature type: the weight of
// CSR position p, values[perm[p], f / (width / heads)] (perm: the CSR's index type, null: the
// same order), multiplies x[col[p], f], and arg holds the winning CSR position instead of the
// source. values null: unweighted.
struct EdgeWeights {
  const void* values;
  int64_t heads;
  const void* perm;
};

// Light path: a group of lanes per destination, lanes over features, a sequential scan of the
// row's edges. rows lists the destinations to do (null: all csr.rows of them). Equal messages:
// the row's earliest edge wins, with last_wins its latest. ignore_nan: DGL's rule (every entry
// starts from the identity with no winner, NaN messages never win).
void minmax_light(FloatType type, CsrView csr, const void* rows, int64_t num_rows,
                  const void* x, EdgeWeights weights, void* out, void* arg, int64_t width,
                  bool is_max, bool last_wins, bool ignore_nan, int warps, cudaStream_t stream);

// Load-balanced path for every row, float32/16/bf16 with fewer than 2^31 sources: one group
// of lanes per work item (see SplitWorkView), as the light path does per row. The items of
// split rows first merge their winners into packed[k, f] ([work.split_rows, width] 64-bit
// words, as the heavy path's; it may alias out) and write those rows' arg, then the other
// items write out and arg, then the split rows' out is gathered from x at arg.
void minmax_split(FloatType type, CsrView csr, SplitWorkView work, const void* x,
                  EdgeWeights weights, void* out, void* arg, unsigned long long* packed,
                  int64_t width, bool is_max, int warps, cudaStream_t stream);

// Heavy path for float32/16/bf16 and fewer than 2^31 sources (weighted: edges), first step:
// blockIdx.x picks a heavy row, blockIdx.y an edge chunk of edges_per_block; chunk results
// merge into packed[h, f] (a [num_heavy, width] scratch of 64-bit words) by
// atomicMin/atomicMax, then a coalesced pass writes the heavy rows' arg. max_degree sizes the
// chunk grid.
void minmax_heavy_args(FloatType type, CsrView csr, const void* heavy_rows, int64_t num_heavy,
                       int64_t max_degree, const void* x, EdgeWeights weights, void* arg,
                       unsigned long long* packed, int64_t width, bool is_max, int warps,
                       int edges_per_block, cudaStream_t stream);

// Second step: out[row, f] = x[arg[row, f], f] (0 where arg is -1) for the heavy rows
// (weighted: x[col[p], f] * weight[p, head of f] at the position p = arg[row, f]).
void minmax_heavy_values(FloatType type, CsrView csr, const void* heavy_rows,
                         int64_t num_heavy, const void* x, EdgeWeights weights, const void* arg,
                         void* out, int64_t width, cudaStream_t stream);

// acc[arg[i, f], f] += grad_out[i, f] with atomics (acc: float, or double for double grads);
// weighted (col given): acc[col[p], f] += grad_out[i, f] * weight[p, head of f], p = arg[i, f].
void minmax_scatter_atomic(FloatType type, bool index64, const void* arg, const void* grad_out,
                           const void* col, EdgeWeights weights, void* acc, int64_t rows,
                           int64_t width, cudaStream_t stream);

// Deterministic backward over the transposed CSR (rows = sources, col = destinations):
// grad_x[j, f] = sum of grad_out[i, f] over distinct in-edge destinations i of j with
// arg[i, f] == j (weighted: col[arg[i, f]] == j, times that edge's weight), summed in a fixed
// order. grad_x has the feature type.
void minmax_pull(FloatType type, CsrView t_csr, const void* arg, const void* grad_out,
                 const void* col, EdgeWeights weights, void* grad_x, int64_t width,
                 cudaStream_t stream);

// The weighted forward's weight gradient: grad_w[perm[p], h] ([E, heads] in input edge order,
// zeroed by the caller, the accumulation type; perm null: CSR order) += grad_out[i, f] *
// x[col[p], f] over the features f of head h with arg[i, f] == p. One thread per (row, head)
// owns its entries: deterministic, no atomics.
void minmax_weight_grad(FloatType type, CsrView csr, const void* perm, const void* arg,
                        const void* grad_out, const void* x, void* grad_w, int64_t width,
                        int64_t heads, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
