// Types shared by the torch-facing glue (.cpp) and the kernels (.cu), which see no torch
// headers: the glue maps at::ScalarType to these and passes raw pointers.
#pragma once

#include <cstdint>

namespace fastgnn {

enum class FloatType : int { kHalf = 0, kBFloat16 = 1, kFloat = 2, kDouble = 3 };

// A destination-major CSR as raw device pointers; index64 says whether they are int64.
struct CsrView {
  const void* rowptr;
  const void* col;
  int64_t rows;
  int64_t nnz;
  bool index64;
};

// The work list of the load-balanced CUDA kernels (SpMM, min/max) over one CSR, index arrays
// in the CSR's index type: item t covers edges [item_start[t], min(item_start[t] + chunk,
// rowptr[item_row[t] + 1])). A row of one item has item_slot -1 and is written directly; the
// k-th row of several items, split_row[k], has its partial results in slots
// [split_first[k], split_first[k + 1]).
struct SplitWorkView {
  const void* item_row;
  const void* item_start;
  const void* item_slot;
  const void* split_row;
  const void* split_first;
  int64_t items;
  int64_t split_rows;
  int64_t slots;
  int64_t chunk;
};

}  // namespace fastgnn
