// Helpers shared by the CPU ops: the kernel helpers plus ATen-facing dispatch and checks.
#pragma once

#include <ATen/ATen.h>

#include <type_traits>

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

// `t` in `type`, contiguous; no op at all where it already is (the profiler would show a
// no-op `to` as a cast).
inline at::Tensor as_type(const at::Tensor& t, at::ScalarType type) {
  return (t.scalar_type() == type ? t : t.to(type)).contiguous();
}

// The dtype a forward reads its features in: their own when float16/bfloat16 and every input
// has it (`all_same`, as under autocast), else the accumulation type `acc`.
inline at::ScalarType read_type(at::ScalarType features, bool all_same, at::ScalarType acc) {
  return all_same && (features == at::kHalf || features == at::kBFloat16) ? features : acc;
}

// Calls f(feat_t{}) with feat_t the C++ type of `read` (from read_type): at::Half,
// at::BFloat16, or acc_t itself.
template <typename acc_t, typename F>
void dispatch_read(at::ScalarType read, F&& f) {
  if constexpr (std::is_same_v<acc_t, float>) {
    if (read == at::kHalf) return f(at::Half{});
    if (read == at::kBFloat16) return f(at::BFloat16{});
  }
  f(acc_t{});
}

// <grad_out[i, h], out[i, h]> of two [T, H, D] tensors, as [T, H] in the statistics dtype
// (float; double for double), summed in double and rounded once: the attention backwards
// subtract it from close values. The CPU kernel of `attention_delta_backward`
// (csrc/cpu/attention_gat.cpp), shared by every CPU attention backward.
at::Tensor attention_delta_cpu(const at::Tensor& grad_out, const at::Tensor& out);

}  // namespace cpu
}  // namespace fastgnn
