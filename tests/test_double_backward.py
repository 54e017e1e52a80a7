"""Second derivatives: spmm's gradient is itself differentiable and passes gradgradcheck; the
ops whose gradient kernels are differentiable once raise on a second backward instead of
returning zeros (which they did, with only a warning), while a first backward with
create_graph=True still gives the ordinary gradients."""
from __future__ import annotations

import contextlib

import pytest
import torch

import fastgnn
from fastgnn import _native, ops
from conftest import deterministic_algorithms, devices, random_edge_index, random_graph

HEADS, DIM = 2, 4


def _leaf(*shape, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device).requires_grad_()


def once_differentiable_cases(g, device):
    """name: (function of the leaves, leaves)."""
    rows, sources, edges = g.num_dst_nodes, g.num_src_nodes, g.num_edges
    x = _leaf(sources, 6, device=device, seed=1)
    q, k, v = (_leaf(n, HEADS, DIM, device=device, seed=s)
               for n, s in ((rows, 2), (sources, 3), (sources, 4)))
    att = _leaf(HEADS, DIM, device=device, seed=5)
    alpha_src, alpha_dst = _leaf(sources, HEADS, device=device, seed=6), \
        _leaf(rows, HEADS, device=device, seed=7)
    weight = _leaf(edges, device=device, seed=8).detach().abs().requires_grad_()
    logits = _leaf(edges, HEADS, device=device, seed=9)
    return {
        "max": (lambda x: ops.aggregate(g, x, "max"), (x,)),
        "min, weighted": (lambda x, w: ops.aggregate(g, x, "min", edge_weight=w), (x, weight)),
        "edge_softmax": (lambda e: ops.edge_softmax(g, e), (logits,)),
        "gatv2": (lambda q, k, att: ops.gatv2_attention(g, q, k, att, 0.2), (q, k, att)),
        "graph_attention": (lambda q, k, v: ops.graph_attention(g, q, k, v), (q, k, v)),
        "gat": (lambda v, a_src, a_dst: ops.gat_attention(g, v, a_src, a_dst, 0.2),
                (v, alpha_src, alpha_dst)),
    }


def _second_backward(fn, leaves):
    out = fn(*leaves)
    grads = torch.autograd.grad((out ** 2).sum(), leaves, create_graph=True)
    return grads, lambda: torch.autograd.grad(sum(g.sum() for g in grads), leaves)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("weighted", [False, True])
def test_spmm_is_twice_differentiable(device, weighted):
    g, _ = random_graph(20, 70, seed=3, device=device)
    x = _leaf(20, 3, device=device, seed=1)
    leaves = (x, _leaf(g.num_edges, device=device, seed=2)) if weighted else (x,)
    fn = (lambda x, w: ops.spmm(g, x, edge_weight=w)) if weighted else \
        (lambda x: ops.spmm(g, x, "both"))
    assert torch.autograd.gradgradcheck(fn, leaves)


@pytest.mark.skipif(not (_native.has_op("gatv2_forward") and _native.has_op("gat_forward")),
                    reason="native attention ops not built")
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", ["max", "min, weighted", "edge_softmax", "gatv2",
                                  "graph_attention", "gat"])
def test_second_backward_raises_and_first_is_unchanged(device, case):
    g, _ = random_graph(30, 120, seed=4, device=device)
    fn, leaves = once_differentiable_cases(g, device)[case]
    # the CUDA min/max backward's atomics add in an order that varies from call to call: the
    # deterministic pull there, so that two calls can be equal bit for bit
    pull = device == "cuda" and case in ("max", "min, weighted")
    with deterministic_algorithms() if pull else contextlib.nullcontext():
        grads, second = _second_backward(fn, leaves)
        plain = torch.autograd.grad((fn(*leaves) ** 2).sum(), leaves)
    for with_graph, without in zip(grads, plain):
        torch.testing.assert_close(with_graph.detach(), without, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"derivative for fastgnn::\w+ is not implemented"):
        second()


def test_enabled_gatconv_second_backward_raises():
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    layer = fastgnn.enable(pyg_nn.GATConv(6, 4, heads=HEADS).double())
    x = _leaf(40, 6, device="cpu", seed=1)
    edge_index = random_edge_index(40, 40, 160, seed=2)
    grads, second = _second_backward(lambda x: layer(x, edge_index), (x,))
    assert grads[0].abs().sum() > 0
    with pytest.raises(RuntimeError, match="differentiate twice|not implemented"):
        second()
