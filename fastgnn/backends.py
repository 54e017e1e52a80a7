"""Backend registry and selection.

Each op registers its implementations under a backend name with the device types they run
on and a priority; ``auto`` picks the highest-priority implementation available for the
op and the input's device. The active backend comes from, in order: the innermost
``with fastgnn.backend(name)`` block, ``fastgnn.set_backend(name)``, ``FASTGNN_BACKEND`` (read
when fastgnn is imported and by ``set_backend(None)``).
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from fastgnn import _library

AUTO = "auto"


@dataclass(frozen=True)
class Implementation:
    backend: str
    devices: Tuple[str, ...]
    fn: Callable
    priority: int


_registry: Dict[str, List[Implementation]] = {}
# select()'s answers per (op, backend, device type): ops call it on every call.
_selected: Dict[Tuple[str, str, str], Implementation] = {}
_global_backend: Optional[str] = None
_local = threading.local()


def register(op: str, backend: str, devices, fn: Callable, priority: int = 0) -> None:
    """Registers ``fn`` as ``op``'s implementation under ``backend`` for the device types."""
    impls = _registry.setdefault(op, [])
    impls[:] = [i for i in impls if i.backend != backend]
    impls.append(Implementation(backend, tuple(devices), fn, priority))
    impls.sort(key=lambda i: -i.priority)
    _selected.clear()


def unregister(op: str, backend: str) -> None:
    """Removes ``op``'s implementation under ``backend`` (the op goes when none is left)."""
    impls = [i for i in _registry.get(op, ()) if i.backend != backend]
    if impls:
        _registry[op] = impls
    else:
        _registry.pop(op, None)
    _selected.clear()


def names() -> List[str]:
    """Every backend name some op implements, plus ``auto``."""
    found = {i.backend for impls in _registry.values() for i in impls}
    return [AUTO] + sorted(found)


def available(op: str, device_type: Optional[str] = None) -> List[str]:
    """Backends implementing ``op`` (on ``device_type`` when given), best first."""
    return [i.backend for i in _registry.get(op, ())
            if device_type is None or device_type in i.devices]


def ops() -> List[str]:
    return sorted(_registry)


def _check_name(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"backend name must be a str, got {type(name).__name__}")
    known = names()
    if name not in known:
        raise ValueError(f"unknown fastgnn backend {name!r}; available: {', '.join(known)}")
    return name


def _read_environment() -> Optional[str]:
    return os.environ.get("FASTGNN_BACKEND") or None


# Read at import and by set_backend(None), not per call: an environment lookup costs about
# as much as the rest of a small op's Python path.
_environment_backend = _read_environment()


def set_backend(name: Optional[str]) -> None:
    """Sets the process-wide backend (``None`` returns to ``FASTGNN_BACKEND``, read again, or
    ``auto``)."""
    global _global_backend, _environment_backend
    if name is None:
        _environment_backend = _read_environment()
    _global_backend = None if name is None else _check_name(name)


def get_backend() -> str:
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    if _global_backend is not None:
        return _global_backend
    return _check_name(_environment_backend) if _environment_backend else AUTO


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """``with fastgnn.backend("reference"): ...`` uses that backend inside the block."""
    _check_name(name)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(name)
    try:
        yield
    finally:
        stack.pop()


def select(op: str, device: torch.device, name: Optional[str] = None) -> Implementation:
    """The implementation of ``op`` to run on ``device`` under the active (or given) backend."""
    name = get_backend() if name is None else _check_name(name)
    device_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    # Traced by torch.compile, the memo is neither read nor written: dynamo would guard on its
    # contents, and the entry a traced call adds would fail that guard on the next call (one
    # recompilation per compiled model).
    memo = not _library.is_compiling()
    impl = _selected.get((op, name, device_type)) if memo else None
    if impl is not None:
        return impl
    for impl in _registry.get(op, ()):
        if device_type in impl.devices and (name == AUTO or impl.backend == name):
            if memo:
                _selected[(op, name, device_type)] = impl
            return impl
    have = available(op, device_type)
    raise RuntimeError(
        f"fastgnn op {op!r} has no {name!r} implementation on {device_type}; available there: "
        f"{', '.join(have) if have else 'none'}")
