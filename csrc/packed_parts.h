// fastgnn._C.cut_packed: the parts of a packed sampler output as tensors (see packed_parts.cpp).
#pragma once

#include <Python.h>

namespace fastgnn {

PyObject* cut_packed(PyObject* self, PyObject* args);

}  // namespace fastgnn
