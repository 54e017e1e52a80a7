"""Loads the compiled extension, fastgnn._C, whose import registers the torch.ops.fastgnn ops.

When it is missing (not built, or built for another torch) the package still imports and the
``reference`` backend still works; ``fastgnn.info()`` says why the native ops are absent.
"""
from __future__ import annotations

from typing import Optional

import torch

load_error: Optional[str] = None
try:
    from fastgnn import _C  # noqa: F401  (import registers the ops)
    build_info = _C.build_info()
except ImportError as exc:  # pragma: no cover - depends on the installation
    _C = None
    build_info = {"cuda": False, "cuda_runtime_version": None, "cuda_archs": "",
                  "openmp": False, "openmp_max_threads": 0, "compiler": ""}
    load_error = f"{type(exc).__name__}: {exc}"

available = _C is not None
cuda_built = bool(build_info["cuda"])


def devices():
    """Device types the native ops were built for."""
    if not available:
        return ()
    return ("cpu", "cuda") if cuda_built else ("cpu",)


def has_op(name: str) -> bool:
    return available and hasattr(torch.ops.fastgnn, name)
