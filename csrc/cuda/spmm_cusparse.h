// cuSPARSE SpMM behind a per-graph cache (descriptors, workspace, preprocessing), torch-facing.
#pragma once

#include <ATen/ATen.h>

namespace fastgnn {
namespace cuda {

// Which sparse operand a cache entry describes: the forward CSR, the cached transposed CSR,
// or the forward CSR used through cuSPARSE's transposed operation.
enum class SparseOperand : int { kForward = 0, kCachedTranspose = 1, kForwardTransposed = 2 };

// out = op(A) x with cuSPARSE, A the CSR (rowptr, col, value) of `rows` x `cols`; value is
// undefined for all ones, else float32 (float64 for double x) in the CSR's edge order.
// cusparse_algo is 0 (ALG_DEFAULT) or 1 (CSR_ALG1); CSR_ALG2/ALG3 are not offered because they
// faulted on an H100 (cuSPARSE 13) for some widths. graph_key 0: no caching.

void cusparse_spmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value,
                   const at::Tensor& x, at::Tensor& out, int64_t cols, SparseOperand operand,
                   int64_t graph_key, int cusparse_algo);

}  // namespace cuda
}  // namespace fastgnn
