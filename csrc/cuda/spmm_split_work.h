// The work lists of the load-balanced SpMM (spmm_csr_split), built on the GPU from a CSR's
// row pointers and cached per graph like the cuSPARSE state.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "cuda/spmm_kernels.h"

namespace fastgnn {
namespace cuda {

struct SplitWork {
  at::Tensor item_row, item_start, item_slot, split_row, split_first;  // the CSR's index type
  int64_t items = 0, split_rows = 0, slots = 0, chunk = 0;
  SplitWorkView view() const;
};

// The work list cutting rowptr's rows into items of at most `chunk` edges: built once per
// (graph, operand, chunk, device) and dropped with the Graph (graph_key 0: built per call).
// operand tells apart the CSRs of one graph (0: forward, 1: cached transpose).
std::shared_ptr<const SplitWork> split_work(const at::Tensor& rowptr, int64_t graph_key,
                                            int operand, int64_t chunk);

}  // namespace cuda
}  // namespace fastgnn
