"""Ops with a second output no loss reaches (min/max's winners, MaxK's column indices,
attention's log-sum-exp; the WSB attention's lse in tests/test_wsb_attention.py) do not have
autograd zero-fill a gradient for it in every backward: for min/max that was a [T, F] integer
fill beside the scatter, 8% of the backward's GPU time on tolokers at width 512 (H200). The
gradients stay the reference's."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, ops
from conftest import ZeroFills, devices, random_graph


def _backward_fills(fn, leaves):
    """The zero fills of one backward of ``fn(*leaves)``, and the gradients."""
    out = fn(*leaves)
    grad = torch.randn_like(out)
    with ZeroFills() as fills:
        grads = torch.autograd.grad(out, leaves, grad)
    return fills.made, grads, grad


def _cases(device):
    """name: (native function of the leaves, its reference, leaves, the unreachable output's
    (shape, dtype))."""
    g, _ = random_graph(30, 150, seed=5, device=device)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(30, 12, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    heads, dim = 2, 4
    q = torch.randn(30, heads, dim, generator=gen, dtype=torch.float64).to(device)
    k = torch.randn(30, heads, dim, generator=gen, dtype=torch.float64).to(device)
    att = torch.randn(heads, dim, generator=gen, dtype=torch.float64).to(device)
    q, k, att = (t.requires_grad_() for t in (q, k, att))
    return {
        "max": (lambda x: ops.aggregate(g, x, "max"), (x,), ((30, 12), g.col.dtype)),
        "min": (lambda x: ops.aggregate(g, x, "min"), (x,), ((30, 12), g.col.dtype)),
        "maxk": (lambda x: ops.maxk(x, 5).to_dense(), (x,),
                 ((30, 5), ops.maxk(x.detach(), 5).indices.dtype)),
        "gatv2": (lambda q, k, att: ops.gatv2_attention(g, q, k, att, 0.2), (q, k, att),
                  ((30, heads), torch.float64)),
    }


@pytest.mark.skipif(not (_native.has_op("minmax_aggregate") and _native.has_op("maxk")
                         and _native.has_op("gatv2_forward")),
                    reason="native ops not built")
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", ["max", "min", "maxk", "gatv2"])
def test_no_gradient_is_filled_for_the_unreachable_output(device, case):
    fn, leaves, unreachable = _cases(device)[case]
    with fastgnn.backend("native"):
        made, got, grad = _backward_fills(fn, leaves)
    assert unreachable not in made, made
    with fastgnn.backend("reference"):
        want = torch.autograd.grad(fn(*leaves), leaves, grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
