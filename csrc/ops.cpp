// Every fastgnn op schema, in one place. Implementations register per device in
// csrc/cpu/<family>.cpp and csrc/cuda/<family>.cpp; autograd and fake kernels are registered
// from Python (fastgnn/ops/<family>.py).
//
// Conventions: a graph arrives as destination-major CSR (rowptr [T+1], col [E], both int32 or
// both int64); rows are destinations, col holds sources. Optional per-edge values are float32
// in CSR order. Launch choices picked by the tuner arrive as plain ints.
#include <torch/library.h>

#include "graph_cache.h"

TORCH_LIBRARY(fastgnn, m) {
  // ---- SpMM family -------------------------------------------------------------------------
  // out = A x with A[i, col[e]] = value[e] for e in row i (value 1 when absent), or, with
  // transpose=true, out = A^T x. The optional t_* tensors are the cached transpose of the same
  // structure (t_perm maps a transposed edge to its CSR position); without them a transposed
  // product uses the device's fallback. t_value optionally holds value already in transposed
  // order (value[t_perm], cached per graph by the caller) to spare the per-edge indirection. num_out is the number of output rows. graph_key names
  // the owning fastgnn.Graph for per-graph device caches (0: none); algo is the tuner's pick.
  // algo: bits 0-7 pick this call's kernel (0-3 ours, 16-19 cuSPARSE; see
  // fastgnn/ops/spmm.py ALGOS), bits 8-15 carry the backward's pick for the autograd formula.
  m.def("spmm(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? t_rowptr, "
        "Tensor? t_col, Tensor? t_perm, Tensor? t_value, int num_out, bool transpose, int graph_key, "
        "int algo) "
        "-> Tensor");
  // out[e] = <a[row(e)], b[col(e)]> in float32: the edge-weight gradient of spmm, without an
  // E x D intermediate.
  m.def("sddmm(Tensor rowptr, Tensor col, Tensor a, Tensor b) -> Tensor");

  // ---- per-graph native caches (catch-all kernels, no tensors) ---------------------------------
  // Frees every cached entry (descriptors, workspaces) of a graph; called when a Graph is freed.
  m.def("release_graph_cache(int graph_key) -> ()", &fastgnn::release_graph_cache);
  // Number of live cache entries over all graphs (for tests and diagnostics).
  m.def("graph_cache_size() -> int", &fastgnn::graph_cache_size);
}
