"""Accuracy against float64, shared by the PyG and DGL adapter tests (issue 16: "Bring every
op's error within 2x of the stock layer's own"): the enabled layer's float32 output and
gradients (inputs and parameters), measured against a float64 run of the stock layer, are off
by at most twice as much as the stock layer's own float32 run."""
from __future__ import annotations

import copy
from typing import Callable, Dict, Optional

import torch


def relative_error(value: torch.Tensor, exact: torch.Tensor) -> float:
    """``|value - exact| / |exact|`` in float64 (Frobenius norms)."""
    return float((value.double() - exact).norm() / exact.norm())


def run(layer: torch.nn.Module, forward: Callable, inputs: Dict[str, torch.Tensor],
        dtype: torch.dtype, grad_seed: int = 1) -> Dict[str, Optional[torch.Tensor]]:
    """Runs a deep copy of ``layer`` in ``dtype`` as ``forward(layer, **inputs)`` (the inputs
    cast to ``dtype``, as leaves that require grad) and back-propagates a fixed random
    float64 output gradient (rounded to ``dtype``). Returns the output and the gradients of
    every input and parameter, by name (inputs by their keys, parameters by their names)."""
    layer = copy.deepcopy(layer).to(dtype)
    leaves = {name: t.detach().to(dtype).clone().requires_grad_()
              for name, t in inputs.items()}
    out = forward(layer, **leaves)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed),
                       dtype=torch.float64)
    out.backward(grad.to(dtype))
    results = {"out": out.detach()}
    results.update({f"input {name}": leaf.grad for name, leaf in leaves.items()})
    results.update({name: p.grad for name, p in layer.named_parameters()})
    return results


def error_ratios(exact, stock, ours) -> Dict[str, tuple]:
    """``{key: (our error, stock error)}`` against ``exact`` for every result whose exact
    value is not 0 (gradients that vanish in exact arithmetic, such as TransformerConv's key
    bias, have no relative error to compare)."""
    errors = {}
    for key, value in exact.items():
        if value is None or float(value.norm()) < 1e-6 * value.numel() ** 0.5:
            continue
        errors[key] = (relative_error(ours[key], value), relative_error(stock[key], value))
    return errors


def assert_within_twice_stock(stock: torch.nn.Module, fast: torch.nn.Module,
                              forward: Callable, inputs: Dict[str, torch.Tensor],
                              grad_seed: int = 1) -> Dict[str, tuple]:
    """Runs the stock layer in float64 (the exact values) and float32, and ``fast`` (the
    enabled layer) in float32; every error of ``fast`` is at most twice the stock one's."""
    exact = run(stock, forward, inputs, torch.float64, grad_seed)
    stock32 = run(stock, forward, inputs, torch.float32, grad_seed)
    ours = run(fast, forward, inputs, torch.float32, grad_seed)
    assert ours.keys() == exact.keys()
    errors = error_ratios(exact, stock32, ours)
    assert errors, "nothing to compare"
    failed = {key: f"{our:.2e} vs stock {own:.2e}" for key, (our, own) in errors.items()
              if not our <= 2 * own}
    assert not failed, failed
    return errors
