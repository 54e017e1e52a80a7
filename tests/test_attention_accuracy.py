"""Accuracy of the enabled attention layers against float64: on a real graph, the float32
error of every output and parameter gradient stays within 2x of stock PyG's own float32 error
(both measured against a float64 run of the stock layer)."""
from __future__ import annotations

import copy

import pytest
import torch

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fastgnn  # noqa: E402
from conftest import load_dataset  # noqa: E402


def _run(layer, x, edge_index, grad_seed, dtype):
    layer = copy.deepcopy(layer).to(dtype)
    x = x.to(dtype).clone().requires_grad_()
    out = layer(x, edge_index)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed),
                       dtype=torch.float64)
    out.backward(grad.to(dtype))
    results = {"out": out.detach(), "x": x.grad}
    results.update({name: p.grad for name, p in layer.named_parameters()})
    return results


def _relative(value, exact):
    return float((value.double() - exact).norm() / exact.norm())


LAYERS = {
    "GATConv": lambda c: pyg_nn.GATConv(c, 32, heads=4),
    "TransformerConv": lambda c: pyg_nn.TransformerConv(c, 32, heads=4),
    "GATv2Conv": lambda c: pyg_nn.GATv2Conv(c, 32, heads=4),
}


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "GATConv", "TransformerConv",
    pytest.param("GATv2Conv", marks=pytest.mark.xfail(
        strict=True, reason="lin_l/lin_r gradients 4-6x stock's error: see docs/proposed/gat.md")),
])
def test_float32_error_within_twice_stock(name):
    data = load_dataset("tolokers")
    x = torch.randn(data.num_nodes, 32, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(0)
    stock = LAYERS[name](x.shape[1])
    exact = _run(stock, x, data.edge_index, 1, torch.float64)
    stock32 = _run(stock, x, data.edge_index, 1, torch.float32)
    ours = _run(fastgnn.enable(copy.deepcopy(stock)), x, data.edge_index, 1, torch.float32)
    for key, value in exact.items():
        if value is None or float(value.norm()) < 1e-6 * value.numel() ** 0.5:
            continue  # gradients that are 0 in exact arithmetic (TransformerConv's key bias)
        stock_error, our_error = _relative(stock32[key], value), _relative(ours[key], value)
        assert our_error <= 2 * stock_error, f"{key}: {our_error:.2e} vs stock {stock_error:.2e}"
