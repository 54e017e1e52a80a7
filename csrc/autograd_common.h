// What the C++ autograd kernels (csrc/*_autograd.cpp) share.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace fastgnn {

using OptTensor = c10::optional<at::Tensor>;

// save_for_backward keeps an absent optional as an undefined tensor; this turns it back.
inline OptTensor optional(const at::Tensor& t) {
  return t.defined() ? OptTensor(t) : c10::nullopt;
}

}  // namespace fastgnn
