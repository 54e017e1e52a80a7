// Helpers shared by the CPU ops: the kernel helpers plus ATen-facing dispatch and checks.
#pragma once

#include <ATen/ATen.h>

#include "cpu/kernel_common.h"

namespace fastgnn {
namespace cpu {

// Dispatch over the CSR index dtype (int32 or int64).
#define FASTGNN_DISPATCH_INDEX(index_type, NAME, ...)                        \
  [&] {                                                                      \
    if ((index_type) == at::kInt) {                                          \
      using index_t = int32_t;                                               \
      return __VA_ARGS__();                                                  \
    }                                                                        \
    TORCH_CHECK((index_type) == at::kLong, NAME, ": index dtype must be int32 or int64"); \
    using index_t = int64_t;                                                 \
    return __VA_ARGS__();                                                    \
  }()

// Floating types every op accepts: accumulation happens in acc_t (float for halves).
#define FASTGNN_DISPATCH_FLOAT(dtype, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, NAME, __VA_ARGS__)

inline void check_csr(const at::Tensor& rowptr, const at::Tensor& col, const char* op) {
  TORCH_CHECK(rowptr.dim() == 1 && col.dim() == 1, op, ": rowptr and col must be 1-D");
  TORCH_CHECK(rowptr.scalar_type() == col.scalar_type(), op, ": rowptr and col dtypes differ");
  TORCH_CHECK(rowptr.is_contiguous() && col.is_contiguous(), op, ": CSR must be contiguous");
  TORCH_CHECK(rowptr.numel() >= 1, op, ": rowptr needs at least one entry");
}

}  // namespace cpu
}  // namespace fastgnn
