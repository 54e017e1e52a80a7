"""Autograd and fake-kernel registration for the C++ ops, across torch versions.

On torch >= 2.4 autograd and fake kernels are registered on the op itself
(``torch.library.register_autograd`` / ``register_fake``), so ``torch.compile`` traces
through and ``torch.library.opcheck`` passes. On older torch (2.2, the DGL environment) the
fake kernel goes through ``impl_abstract`` and autograd through an ``autograd.Function``
wrapper around the op.
"""
from __future__ import annotations

from typing import Callable

import torch

HAS_OP_AUTOGRAD = hasattr(torch.library, "register_autograd")
# The feature arguments that the ops' autocast policy casts (csrc/autocast.cpp).
AUTOCAST_ARGUMENTS = frozenset(("x", "x_dst", "x_src", "att", "q", "k", "v", "edge_term",
                                "alpha_src", "alpha_dst", "alpha_edge", "logits", "weight"))


if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
    def autocast_dtype(device_type: str):
        """The dtype of an enabled ``torch.autocast`` on this device type, else None."""
        return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(
            device_type) else None
else:
    def autocast_dtype(device_type: str):
        """The dtype of an enabled ``torch.autocast`` on this device type, else None."""
        if device_type == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        if device_type == "cpu" and torch.is_autocast_cpu_enabled():
            return torch.get_autocast_cpu_dtype()
        return None


# True while torch.compile traces (torch.compiler.is_compiling is torch >= 2.3). Bound, not
# wrapped: the PyG adapter asks on every call. Keep torch._dynamo's: with torch.compiler's,
# pyg.structure._eager sees False inside frames dynamo falls back on and runs structure code
# under dynamo (test_torch_compile fails).
is_compiling = torch._dynamo.is_compiling


def is_recording(device) -> bool:
    """True while torch.compile traces or a CUDA graph is captured on ``device``: host work then
    runs once, not per call (no timing, and a host value would be a constant of the graph)."""
    if is_compiling():
        return True
    return torch.device(device).type == "cuda" and torch.cuda.is_current_stream_capturing()


def op(name: str):
    """The OpOverloadPacket ``torch.ops.fastgnn.<name>``."""
    return getattr(torch.ops.fastgnn, name)


def register_fake(name: str, fn: Callable) -> None:
    qualname = f"fastgnn::{name}"
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake(qualname, fn)
    else:  # torch < 2.4
        torch.library.impl_abstract(qualname)(fn)


def register_autograd(name: str, backward: Callable, setup_context: Callable) -> Callable:
    """Registers the backward of op ``name``; returns the callable that runs it with autograd.

    ``setup_context(ctx, inputs, output)`` and ``backward(ctx, *grads)`` follow
    ``torch.library.register_autograd``; backward returns one gradient (or None) per input.
    The formula is registered on the op (torch >= 2.4) for torch.compile and opcheck; eager
    calls go through a plain ``autograd.Function`` with the same formula, which skips the
    registered wrapper's per-call work (about 40 us a call on CPU). Under autocast, eager
    calls cast the op's feature arguments before the Function, as the op's autocast kernel
    would below it: the Function then saves the inputs the kernels actually read.
    """
    fn = op(name)
    features = tuple(i for i, argument in enumerate(fn.default._schema.arguments)
                     if argument.name in AUTOCAST_ARGUMENTS)

    class _Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            with torch._C._AutoDispatchBelowAutograd():
                output = fn(*inputs)
            setup_context(ctx, inputs, output)
            return output

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    _Function.__name__ = f"{name}_autograd"
    if not HAS_OP_AUTOGRAD:
        return lambda *inputs: _Function.apply(*_autocast(inputs, features))
    torch.library.register_autograd(f"fastgnn::{name}", backward, setup_context=setup_context)

    def call(*inputs):
        if is_compiling():
            return fn(*inputs)  # traced: the op with its registered formula
        return _Function.apply(*_autocast(inputs, features))

    return call


def _autocast(inputs: tuple, features: tuple) -> tuple:
    """``inputs`` with the feature arguments at ``features`` in the autocast dtype when autocast
    is on for their device (float16/bfloat16/float32 ones; float64 is left alone)."""
    first = inputs[features[0]] if features else None
    dtype = autocast_dtype(first.device.type) if isinstance(first, torch.Tensor) else None
    if dtype is None:
        return inputs
    cast = list(inputs)
    for i in features:
        if i >= len(cast):  # an optional argument left to its default
            break
        t = cast[i]
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype not in (
                dtype, torch.float64):
            cast[i] = t.to(dtype)
    return tuple(cast)
