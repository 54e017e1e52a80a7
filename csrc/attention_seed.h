// The dropout spec of an attention op's (dropout, seed, seed_tensor, offset) arguments,
// ATen-facing and shared by the CPU and CUDA glue so that both read the seed the same way.
#pragma once

#include <ATen/ATen.h>

#include "attention_dropout.h"

namespace fastgnn {

// seed_tensor, when given, replaces seed: a one-element int64 tensor on the features' device.
// A CPU seed is read here; a GPU kernel reads its seed when it runs (DropoutSpec::resolved),
// which is what lets a CUDA graph replay draw a new one.
inline DropoutSpec attention_dropout(double dropout, int64_t seed,
                                     const c10::optional<at::Tensor>& seed_tensor,
                                     int64_t offset, int64_t heads, const at::Device& device,
                                     const char* op) {
  const int64_t* seed_ptr = nullptr;
  if (seed_tensor.has_value()) {
    TORCH_CHECK_TYPE(seed_tensor->scalar_type() == at::kLong && seed_tensor->numel() == 1, op,
                     ": seed_tensor must be a one-element int64 tensor, got ",
                     seed_tensor->scalar_type(), " with ", seed_tensor->numel(), " elements");
    TORCH_CHECK_VALUE(seed_tensor->device() == device, op, ": seed_tensor is on ",
                      seed_tensor->device(), " but the features are on ", device);
    seed_ptr = seed_tensor->data_ptr<int64_t>();
  }
  const DropoutSpec spec = make_dropout(dropout, seed, seed_ptr, offset, heads);
  return device.is_cpu() ? spec.resolved() : spec;
}

}  // namespace fastgnn
