// fastgnn._C.cut_packed(packed, layout, start_column, length_column, length_extra): batch b's
// part of a packed output of sample_neighbors_many is packed[start : start + length], start and
// length (plus length_extra) read from row b of the layout. Each part is made here as an alias
// of the packed storage that shares its version counter, the work of a slice without its
// dispatch and autograd view bookkeeping (the outputs are integer index arrays); on the GPU
// the parts have gaps between them, which split_with_sizes would have cut into views too, as
// many as the parts, to be thrown away. A sampled batch's host time is mostly such views.
#include "packed_parts.h"

#include <torch/csrc/autograd/python_variable.h>

#include <exception>
#include <string>

namespace fastgnn {
namespace {

// packed[start : start + length], sharing packed's storage and version counter.
at::Tensor part_of(const at::Tensor& packed, int64_t start, int64_t length) {
  at::Tensor part = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(packed.storage()), packed.key_set(), packed.dtype());
  c10::TensorImpl* impl = part.unsafeGetTensorImpl();
  impl->set_storage_offset(packed.storage_offset() + start);
  impl->set_sizes_contiguous({length});
  impl->set_version_counter(packed.unsafeGetTensorImpl()->version_counter());
  return part;
}

PyObject* fail(PyObject* type, const std::string& message) {
  PyErr_SetString(type, ("cut_packed: " + message).c_str());
  return nullptr;
}

PyObject* cut(PyObject* packed_object, PyObject* layout_object, long long start_column,
              long long length_column, long long length_extra) {
  if (!THPVariable_Check(packed_object) || !THPVariable_Check(layout_object)) {
    return fail(PyExc_TypeError, "packed and layout must be tensors");
  }
  const at::Tensor& packed = THPVariable_Unpack(packed_object);
  const at::Tensor& layout = THPVariable_Unpack(layout_object);
  if (packed.dim() != 1 || packed.stride(0) != 1 || packed.requires_grad()) {
    return fail(PyExc_ValueError, "packed must be a 1-D contiguous tensor outside autograd");
  }
  if (!layout.device().is_cpu() || layout.scalar_type() != at::kLong || layout.dim() != 2 ||
      !layout.is_contiguous()) {
    return fail(PyExc_ValueError, "layout must be a contiguous 2-D int64 CPU tensor");
  }
  const int64_t rows = layout.size(0), width = layout.size(1);
  if (start_column < 0 || start_column >= width || length_column < 0 ||
      length_column >= width) {
    return fail(PyExc_ValueError, "a column past the layout's width " + std::to_string(width));
  }
  const int64_t* row = layout.data_ptr<int64_t>();
  const int64_t size = packed.numel();
  PyObject* parts = PyTuple_New(rows);
  if (parts == nullptr) return nullptr;
  for (int64_t b = 0; b < rows; ++b, row += width) {
    const int64_t start = row[start_column], length = row[length_column] + length_extra;
    if (start < 0 || length < 0 || start > size - length) {
      Py_DECREF(parts);
      return fail(PyExc_ValueError, "batch " + std::to_string(b) + "'s part [" +
                                        std::to_string(start) + ", +" + std::to_string(length) +
                                        ") is outside the packed output of " +
                                        std::to_string(size));
    }
    PyObject* part = THPVariable_Wrap(part_of(packed, start, length));
    if (part == nullptr) {
      Py_DECREF(parts);
      return nullptr;
    }
    PyTuple_SET_ITEM(parts, b, part);
  }
  return parts;
}

}  // namespace

PyObject* cut_packed(PyObject*, PyObject* args) {
  PyObject *packed, *layout;
  long long start_column, length_column, length_extra;
  if (!PyArg_ParseTuple(args, "OOLLL:cut_packed", &packed, &layout, &start_column,
                        &length_column, &length_extra)) {
    return nullptr;
  }
  try {  // a C++ exception must not cross into the interpreter (it would terminate it)
    return cut(packed, layout, start_column, length_column, length_extra);
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

}  // namespace fastgnn
