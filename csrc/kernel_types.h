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

}  // namespace fastgnn
