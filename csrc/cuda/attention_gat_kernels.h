// Launchers of the fused GAT (v1) attention CUDA kernels (raw pointers, sizes, stream).
#pragma once

#include <cuda_runtime.h>

#include "attention_dropout.h"
#include "cuda/attention_kernels.h"
#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// alpha_dst [T, H], x_src [S, H, D], alpha_src [S, H] and alpha_edge [E, H] (input edge
// order, located through edge_perm) in `type`; statistics float (double for double).
struct GatParams {
  FloatType type;
  CsrView csr;             // the CSR walked (forward CSR, or transposed CSR for a source pass)
  const void* src_perm;    // source passes: CSR position of each walked edge
  const void* logit_slot;  // source passes: grad_logit row of each walked edge (null: src_perm)
  const void* edge_perm;   // CSR position -> input position (null: identity)
  const void* alpha_dst;
  const void* x_src;
  const void* alpha_src;
  const void* alpha_edge;  // null: none
  double slope;
  int64_t heads, dim;
  DropoutSpec dropout;
  bool aligned;            // x_src and grad_out 16-byte aligned (vector loads allowed)
  // forward outputs
  void* out;
  void* lse;
  // backward inputs and outputs (grad_alpha_edge null without alpha_edge)
  void* grad_logit;        // [E, H] statistics type, forward CSR order: d loss / d pre-activation
  const void* grad_out;
  const void* lse_in;
  const void* delta;
  void* grad_alpha_dst;
  void* grad_x_src;
  void* grad_alpha_src;
  void* grad_alpha_edge;
  // split rows (a row set with more warps per row than a block has): per-piece partial states,
  // [rows of the set, pieces, H] (x D for part_acc) in the statistics type; part_src double
  void* part_acc;
  void* part_peak;
  void* part_total;
  double* part_src;
};

namespace gat {
// Warps of a kernel block. A row set with more warps per row than this splits each row over
// warps_per_row / kWarpsPerBlock blocks (and needs GatParams' part_* workspaces).
constexpr int kWarpsPerBlock = 8;
}  // namespace gat

void gat_forward(const GatParams& p, const RowSet& rows, cudaStream_t stream);

// Source side: rows are sources of the walked edges, src_perm their forward CSR positions.
// Writes the gradients of x_src and alpha_src, and grad_logit of every walked edge.
void gat_backward(const GatParams& p, const RowSet& rows, cudaStream_t stream);

// Destination side over the forward CSR rows of `rows`: grad_alpha_dst (and grad_alpha_edge)
// from grad_logit.
void gat_backward_dst(const GatParams& p, const RowSet& rows, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
