// Launchers of the SpMM-family CUDA kernels (raw pointers, sizes, stream; no torch types).
#pragma once

#include <cuda_runtime.h>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

// Our CSR kernels (the low values of the op's algo int; cuSPARSE takes the others).
enum class CsrKernel : int {
  kAuto = 0,     // rows per warp picked from the feature width
  kWarp = 1,     // one warp per row, lanes over the features with vector loads
  kSubWarp = 2,  // a group of 4-16 lanes per row, several rows per warp (narrow features)
  kBlock = 3,    // one block per row, its warps split the edges (very heavy rows)
  // 4-6: rows cut into items of at most 64 << 2 * (kernel - 4) edges (spmm_csr_split).
  kSplitFirst = 4,
  kSplitLast = 6,
};

// out[i] = sum_e value[vidx(e)] * x[col[e]] over row i of csr; vidx(e) = value_perm[e] when
// value_perm is set (a transposed CSR walking forward-order values), else e. value may be null
// (all ones); it is float, or double for double features. Deterministic for every kernel.
void spmm_csr(FloatType type, CsrView csr, const void* value, const void* value_perm,
              const void* x, void* out, int64_t width, CsrKernel kernel, cudaStream_t stream);

// spmm_csr's product over a work list (see SplitWorkView); partial holds work.slots * width
// accumulators (float, or double for double features).
void spmm_csr_split(FloatType type, CsrView csr, const void* value, const void* value_perm,
                    const void* x, void* out, void* partial, SplitWorkView work, int64_t width,
                    cudaStream_t stream);

// acc[col[e]] += value[e] * x[row(e)] with atomics into a float/double accumulator of
// [num_out, width]: A^T x without a transposed CSR (non-deterministic summation order).
void spmm_csr_transposed_atomic(FloatType type, CsrView csr, const void* value, const void* x,
                                void* acc, int64_t width, cudaStream_t stream);

// out[e] = <a[row(e)], b[col(e)]> (float, or double for double inputs).
void sddmm_csr(FloatType type, CsrView csr, const void* a, const void* b, void* out,
               int64_t width, cudaStream_t stream);

}  // namespace cuda
}  // namespace fastgnn
