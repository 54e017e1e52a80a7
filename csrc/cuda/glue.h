// Torch-side helpers for the CUDA glue files: map tensors to the raw views the kernels take.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernel_types.h"

namespace fastgnn {
namespace cuda {

inline FloatType float_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kHalf: return FloatType::kHalf;
    case at::kBFloat16: return FloatType::kBFloat16;
    case at::kFloat: return FloatType::kFloat;
    case at::kDouble: return FloatType::kDouble;
    default: TORCH_CHECK(false, "fastgnn: unsupported feature dtype ", t.scalar_type());
  }
}

inline CsrView csr_view(const at::Tensor& rowptr, const at::Tensor& col, const char* op) {
  TORCH_CHECK(rowptr.is_cuda() && col.is_cuda(), op, ": CSR must be on the GPU");
  TORCH_CHECK(rowptr.dim() == 1 && col.dim() == 1 && rowptr.numel() >= 1, op, ": bad CSR shape");
  TORCH_CHECK(rowptr.scalar_type() == col.scalar_type() &&
                  (col.scalar_type() == at::kInt || col.scalar_type() == at::kLong),
              op, ": rowptr and col must both be int32 or both int64");
  TORCH_CHECK(rowptr.is_contiguous() && col.is_contiguous(), op, ": CSR must be contiguous");
  return CsrView{rowptr.data_ptr(), col.data_ptr(), rowptr.numel() - 1, col.numel(),
                 col.scalar_type() == at::kLong};
}

inline at::ScalarType acc_type(const at::Tensor& features) {
  return features.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Raw pointer of a tensor the kernels may go without (null when absent or undefined).
inline const void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
inline const void* data_or_null(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? data_or_null(*t) : nullptr;
}

// The WSB kernels' float16/bfloat16 Tensor Core products (and cp.async) need sm_80 or newer.
inline void check_tensor_cores(const at::Device& device, const char* op) {
  int major = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                        device.index()));
  TORCH_CHECK(major >= 8, op,
              ": float16/bfloat16 Tensor Core products need compute capability 8.0+");
}

inline cudaStream_t stream() { return at::cuda::getCurrentCUDAStream().stream(); }

}  // namespace cuda
}  // namespace fastgnn
