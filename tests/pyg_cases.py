"""Shared by the PyG adapter tests: layer configurations, inputs and the stock-vs-fastgnn
comparison of outputs and gradients."""
from __future__ import annotations

import contextlib
import copy
import warnings

import torch

import fastgnn

RTOL, ATOL = 1e-4, 1e-5


def _leaf(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point() \
            and value.layout == torch.strided:
        return value.detach().clone().requires_grad_(True)
    if isinstance(value, tuple):
        return tuple(_leaf(v) for v in value)
    return value


def to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    return value


def _leaves(value):
    if isinstance(value, torch.Tensor) and value.requires_grad:
        return [value]
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def features(num_src, num_dst, channels, bipartite, seed=0, dst_channels=None):
    gen = torch.Generator().manual_seed(seed)
    x_src = torch.randn(num_src, channels, generator=gen)
    if not bipartite:
        return x_src
    return x_src, torch.randn(num_dst, dst_channels or channels, generator=gen)


def edge_extra(kind, num_edges, seed=0, dim=3):
    gen = torch.Generator().manual_seed(seed + 1)
    if kind == "weight":
        return torch.rand(num_edges, generator=gen) + 0.1
    if kind == "attr":
        return torch.randn(num_edges, dim, generator=gen)
    return None


def make_pair(stock, train=True, device="cpu"):
    """The stock layer and an independent fastgnn copy (same parameter values)."""
    stock = stock.to(device)
    fast = fastgnn.enable(copy.deepcopy(stock))
    assert type(fast) is not type(stock)
    stock.train(train)
    fast.train(train)
    return stock, fast


def assert_same(stock, fast, args, rtol=RTOL, atol=ATOL, seed=0):
    """Outputs and gradients (inputs and every parameter) of the two layers agree."""
    args_s, args_f = _leaf(args), _leaf(args)
    out_s, out_f = stock(*args_s), fast(*args_f)
    torch.testing.assert_close(out_f, out_s, rtol=rtol, atol=atol)
    grad = torch.randn(out_s.shape, generator=torch.Generator().manual_seed(seed)).to(out_s.device)
    out_s.backward(grad)
    out_f.backward(grad)
    for a, b in zip(_leaves(args_s), _leaves(args_f)):
        torch.testing.assert_close(b.grad, a.grad, rtol=rtol, atol=atol)
    params_s, params_f = dict(stock.named_parameters()), dict(fast.named_parameters())
    assert params_s.keys() == params_f.keys()
    for name, p in params_s.items():
        if p.grad is None:
            assert params_f[name].grad is None or not params_f[name].grad.any(), name
        else:
            torch.testing.assert_close(params_f[name].grad, p.grad, rtol=rtol, atol=atol,
                                       msg=lambda m: f"{name}: {m}")
    return out_s


@contextlib.contextmanager
def fused_only():
    """Turns a FallbackWarning into an error: the layer must take its fused path."""
    from fastgnn.pyg import FallbackWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        yield
