// Launchers of the WSB (weighted block-sparse) Tensor Core kernels: raw pointers, no torch.
#pragma once

#include <cuda_runtime.h>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// Warps of one block of the WSB SpMM: the plan's warp slots come in groups of this many
// (WARPS in fastgnn/ops/wsb.py).
constexpr int kWsbWarps = 8;

// The WSB layout of a destination-major graph: destinations in windows of 16 rows; window w
// owns tiles [tile_ptr[w], tile_ptr[w + 1]); tile t covers 16 source columns
// tile_cols[16 t .. 16 t + 15] (-1: padding) and holds the dense 16 x 16 row-major block
// tile_vals[256 t ..] of edge values (row: destination within the window, column: slot).
//
// The plan (WSB.plan() in fastgnn/ops/wsb.py) spreads the tiles over warps. work[4 s ..] is
// warp slot s (block s / kWsbWarps, warp s % kWsbWarps): {first tile, end tile, window * 4 +
// log2(warps of its piece) or -1 for an idle slot, partial row or -1}. A piece is a run of one
// window's tiles; its 1, 2, 4 or 8 warps are consecutive slots of one block, aligned to their
// count. A window of one piece is written to the output; the pieces of a longer window write
// float partials [16 rows x width] at their partial row p, and split[2 p ..] is {window,
// pieces} at a window's first piece ({-1, 0} at its others).
struct WsbView {
  const int* tile_ptr;
  const int* tile_cols;
  const void* tile_vals;  // the features' half type
  const int* work;
  const int* splits;
  int64_t windows;
  int64_t rows;          // destinations (the last window may be partial)
  int64_t slots;         // warp slots: a multiple of kWsbWarps
  int64_t split_pieces;  // partial rows of split windows
};

// out[i] = sum over tiles of the window of i of tile_vals[i, c] * x[tile_cols[c]], with fp16 or
// bf16 Tensor Core products accumulated in float, summed in a fixed order (deterministic).
// type is kHalf or kBFloat16; partials holds split_pieces * 16 * width floats.
void wsb_spmm(FloatType type, WsbView wsb, const void* x, void* out, float* partials,
              int64_t width, cudaStream_t stream);

// Graph Transformer attention over the same layout, tile_vals holding each slot's edge count
// (duplicates count). Its plan (WSB.attention_plan() in fastgnn/ops/wsb.py) is a list of
// pieces, each a run of one window's tiles walked by one warp per head: work[4 p ..] =
// {first tile, end tile, window, partial row or -1}, heaviest pieces first. A window of one
// piece is written to out and lse; the pieces of a longer window leave their unnormalised
// softmax state at their partial row p (16 rows x heads: D floats of output, then {running
// max in log2 units, running sum}), merged in piece order by a second kernel; splits as in
// WsbView.
struct WsbAttentionView {
  const int* tile_cols;
  const void* tile_counts;  // the features' half type
  const int* work;
  const int* splits;
  int64_t pieces;
  int64_t split_pieces;  // partial rows of split windows
  int64_t rows;          // destinations
  int64_t heads;
};

// Head dimensions the Tensor Core attention kernel is built for.
constexpr bool wsb_attention_dim_supported(int64_t dim) {
  return dim == 32 || dim == 64 || dim == 128;
}

// out [rows, heads, dim] and lse [rows, heads] (natural log; -inf and zeros for rows without
// in-edges) of softmax(scale q k^T) v over each destination's in-edges, q k v [*, heads, dim]
// in the half type `type`, 16-byte aligned; scores and values on Tensor Cores with float
// accumulation. partials: split_pieces * 16 * heads * dim floats; stats: split_pieces * 16 *
// heads * 2 floats.
void wsb_graph_attention(FloatType type, const WsbAttentionView& wsb, const void* q,
                         const void* k, const void* v, double scale, int64_t dim, void* out,
                         float* lse, float* partials, float* stats, cudaStream_t stream);

// The backward's destination pass over the same plan: grad_q and every edge's (dLogit, softmax
// weight) in `scores`, the CSR backward's [heads, edges, 2] scratch (csrc/cuda/
// attention_kernels.h), so that its source pass gives the k and v gradients. edge_starts
// [pieces * 16] holds, per piece of work and row of its window, the CSR position of the row's
// first edge in the piece (WSB.attention_edge_starts() in fastgnn/ops/wsb.py).
struct WsbAttentionBackward {
  const void* grad_out;    // [rows, heads, dim], the features' half type
  const void* out;         // the forward's
  const float* lse;        // the forward's [rows, heads], natural log
  const int* edge_starts;
  int64_t edges;
  void* grad_q;            // [rows, heads, dim]
  float* scores;           // [heads, edges, 2]
  float* partials;         // split_pieces * 16 * heads * dim floats
};

// grad_q and scores of softmax(scale q k^T) v's backward, on Tensor Cores with float
// accumulation (dLogit kept in float through the dQ product), no atomics.
void wsb_graph_attention_backward(FloatType type, const WsbAttentionView& wsb,
                                  const WsbAttentionBackward& bwd, const void* q, const void* k,
                                  const void* v, double scale, int64_t dim, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
