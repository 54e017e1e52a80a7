"""Loads the compiled extension, fastgnn._C, whose import registers the torch.ops.fastgnn ops.

When it is missing (not built, or built for another torch) the package still imports and the
``reference`` backend still works; ``fastgnn.info()`` says why the native ops are absent.
"""
from __future__ import annotations

import ctypes
import os
import warnings
from typing import Optional

import torch

# FASTGNN_CPU_ISA caps the CPU kernels' clone (the C++ side reads it once, at first use).
CPU_ISAS = ("baseline", "avx2", "avx512")
_isa = os.environ.get("FASTGNN_CPU_ISA")
if _isa is not None and _isa not in CPU_ISAS:
    raise ValueError(f"FASTGNN_CPU_ISA must be one of {', '.join(CPU_ISAS)}, got {_isa!r}")

load_error: Optional[str] = None
try:
    from fastgnn import _C  # noqa: F401  (import registers the ops)
    build_info = _C.build_info()
except ImportError as exc:  # pragma: no cover - depends on the installation
    _C = None
    build_info = {"cuda": False, "cuda_runtime_version": None, "cuda_archs": "",
                  "openmp": False, "openmp_max_threads": 0, "compiler": "", "cpu_isa": None}
    load_error = f"{type(exc).__name__}: {exc}"

available = _C is not None
cuda_built = bool(build_info["cuda"])


def has_private_cxx_runtime(library_path: str) -> bool:
    """Whether a shared library carries its own copy of the C++ runtime.

    Some GCC wrappers link libstdc++ statically. A C++ error thrown by such a copy of
    fastgnn._C is not caught by libtorch, which uses the process's libstdc++: the process
    crashes on bad input instead of raising. The library's ``__cxa_throw`` is then not the one
    the process's libstdc++ exports.
    """
    try:
        ours = ctypes.CDLL(library_path).__cxa_throw
        shared = ctypes.CDLL("libstdc++.so.6").__cxa_throw
    except (OSError, AttributeError):  # not Linux/libstdc++, or no C++ runtime at all
        return False
    as_address = ctypes.cast(ours, ctypes.c_void_p).value
    return as_address != ctypes.cast(shared, ctypes.c_void_p).value


private_cxx_runtime = available and has_private_cxx_runtime(_C.__file__)
if private_cxx_runtime:  # pragma: no cover - depends on the compiler that built _C
    warnings.warn(
        "fastgnn._C was linked with its own copy of libstdc++ (the C++ compiler links it "
        "statically), so its C++ errors crash the process instead of raising. Rebuild with the "
        "system compiler, for example: CC=/usr/bin/gcc CXX=/usr/bin/g++ "
        "LDSHARED='/usr/bin/g++ -shared' pip install --no-build-isolation -e .", RuntimeWarning)


def devices():
    """Device types the native ops were built for."""
    if not available:
        return ()
    return ("cpu", "cuda") if cuda_built else ("cpu",)


def has_op(name: str) -> bool:
    return available and hasattr(torch.ops.fastgnn, name)
