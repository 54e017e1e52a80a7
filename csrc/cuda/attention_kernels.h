// Launchers of the fused attention CUDA kernels (raw pointers, sizes, stream; no torch types).
#pragma once

#include <cuda_runtime.h>

#include "attention_dropout.h"
#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

enum class AttentionKind : int { kGatv2 = 0, kDotProduct = 1 };

// One traversal: rows (a list of row ids, or null for 0..num_rows-1) of a CSR, each (row,
// head) handled by warps_per_row warps.
struct RowSet {
  const void* rows;  // index dtype, or null
  int64_t num_rows;
  int warps_per_row;
};

// Everything the kernels read and write. Features are [N, H, D] in `type`; a = x_dst or q
// (destinations), b = x_src or k, c = att [H, D] or v (sources); edge [E, H, D] input order,
// located through edge_perm. Statistics are float (double for double features).
struct AttentionParams {
  AttentionKind kind;
  FloatType type;
  CsrView csr;             // the CSR walked (forward CSR, or transposed CSR for a source pass)
  const void* src_perm;    // source passes: CSR position of each walked edge
  const void* edge_perm;   // CSR position -> input position (null: identity)
  const void* a;
  const void* b;
  const void* c;
  const void* edge;
  double coef;             // negative slope (GATv2) or scale (dot product)
  int64_t heads, dim;
  DropoutSpec dropout;
  bool aligned;            // every feature pointer is 16-byte aligned (vector loads allowed)
  // forward outputs
  void* out;
  void* lse;
  // backward inputs and outputs (grad_edge may be null)
  const void* grad_out;
  const void* saved_out;   // the forward's out
  const void* lse_in;
  void* grad_a;
  void* grad_b;
  void* grad_c;            // v gradient (dot product); unused for GATv2
  void* grad_edge;
  void* att_partial;       // [partial rows, H, D] float/double, GATv2 destination passes
  void* scores;            // [H, E, 2] float/double: each edge's dLogit and weight, CSR order
  // H * E * attention_sign_words(p) uint32 (GATv2 fast path): the sign of each pre-activation
  // z, written by the destination pass, so the source pass reads no x_dst or edge-term row.
  // Per (heads a warp serves, edge): one word per lane feature slot, bit = lane.
  void* sign_bits;
};

// 32-bit words of z signs per (edge, head) at a fast-path head dimension (16 to 256): one
// bit per feature, at least one word. The host allocates this many; the kernels check that
// their layout fits it.
constexpr int sign_words_for_dim(int64_t dim) { return dim > 32 ? int(dim / 32) : 1; }

// 32-bit words of z signs per (edge, head) the GATv2 backward keeps (0: it keeps none, and
// its source pass reloads x_dst instead); p.aligned must already cover the backward's tensors.
int attention_sign_words(const AttentionParams& p);

// Number of att-gradient partial rows a destination pass over `rows` writes.
int64_t attention_partial_rows(const RowSet& rows);

void attention_forward(const AttentionParams& p, const RowSet& rows, cudaStream_t stream);

// The backward's destination pass: rows are destinations (of p.csr); gradients of a, att
// (partials from row att_partial[partial_offset]) and edge, and every edge's scores.
void attention_backward_dst(const AttentionParams& p, const RowSet& rows, int64_t partial_offset,
                            cudaStream_t stream);

// The backward's source pass, after every destination pass: rows are sources of the walked
// edges of p.csr (src_perm gives their CSR positions); gradients of b and c from the scores.
void attention_backward_src(const AttentionParams& p, const RowSet& rows, cudaStream_t stream);

// delta[i] = <grad_out[i, :], out[i, :]> over `pairs` rows of `dim` features (feature type
// in, float or double out): the softmax backward's per-(node, head) term.
void attention_delta(FloatType type, const void* grad_out, const void* out, void* delta,
                     int64_t pairs, int64_t dim, cudaStream_t stream);

// grad_att[h, d] = sum over partial rows (deterministic order).
void attention_reduce_partials(FloatType type, const void* partial, int64_t partial_rows,
                               int64_t width, void* grad_att, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
