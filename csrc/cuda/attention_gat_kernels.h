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
  const void* grad_out;
  const void* lse_in;
  const void* delta;
  void* grad_alpha_dst;
  void* grad_x_src;
  void* grad_alpha_src;
  void* grad_alpha_edge;
};

void gat_forward(const GatParams& p, const RowSet& rows, cudaStream_t stream);

// do_dst: rows are destinations (gradients of alpha_dst and alpha_edge); do_src: rows are
// sources of the walked edges, src_perm their CSR positions (gradients of x_src and
// alpha_src). Both at once on a symmetric graph.
void gat_backward(const GatParams& p, const RowSet& rows, bool do_dst, bool do_src,
                  cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
