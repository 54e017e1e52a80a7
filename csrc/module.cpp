// The Python module fastgnn._C. Importing it runs the static TORCH_LIBRARY registrations of
// every op. Its Python functions report how the extension was built, release a freed graph's
// native cache entries and cut a sampler's packed outputs into batches: plain C calls, paid
// by every batch the sampler makes (the dispatcher's host time for the release op was ten
// times this one's).
#include <Python.h>

#include <exception>

#include "cpu/kernel_common.h"
#include "graph_cache.h"
#include "packed_parts.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef FASTGNN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

PyObject* build_info(PyObject*, PyObject*) {
  PyObject* info = PyDict_New();
  auto put = [&](const char* key, PyObject* value) {
    PyDict_SetItemString(info, key, value);
    Py_DECREF(value);
  };
#ifdef FASTGNN_WITH_CUDA
  put("cuda", Py_NewRef(Py_True));
  put("cuda_runtime_version", PyLong_FromLong(CUDART_VERSION));
  put("cuda_archs", PyUnicode_FromString(FASTGNN_CUDA_ARCHS));
#else
  put("cuda", Py_NewRef(Py_False));
  put("cuda_runtime_version", Py_NewRef(Py_None));
  put("cuda_archs", PyUnicode_FromString(""));
#endif
#ifdef _OPENMP
  put("openmp", Py_NewRef(Py_True));
  put("openmp_max_threads", PyLong_FromLong(omp_get_max_threads()));
#else
  put("openmp", Py_NewRef(Py_False));
  put("openmp_max_threads", PyLong_FromLong(1));
#endif
  put("compiler", PyUnicode_FromString(__VERSION__));
  // the clone the CPU kernels take (on_widest_isa's choice)
#if FASTGNN_HAVE_AVX2_CLONE
  using fastgnn::cpu::cpu_has_avx2, fastgnn::cpu::cpu_has_avx512;
  put("cpu_isa", PyUnicode_FromString(cpu_has_avx512() ? "avx512"
                                      : cpu_has_avx2() ? "avx2"
                                                       : "baseline"));
#else
  put("cpu_isa", PyUnicode_FromString("baseline"));
#endif
  return info;
}

PyObject* release_graph_cache(PyObject*, PyObject* key) {
  const long long graph_key = PyLong_AsLongLong(key);
  if (graph_key == -1 && PyErr_Occurred()) return nullptr;
  try {  // a C++ exception must not cross into the interpreter (it would terminate it)
    fastgnn::release_graph_cache(graph_key);
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"build_info", build_info, METH_NOARGS, "How this extension was built."},
    {"release_graph_cache", release_graph_cache, METH_O,
     "Drops the native cache entries of a freed graph's key."},
    {"cut_packed", fastgnn::cut_packed, METH_VARARGS,
     "The batches' parts of a packed sample_neighbors_many output, as tensors."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "fastgnn compiled ops", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&module); }
