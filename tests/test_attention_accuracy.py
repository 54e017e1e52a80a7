"""Accuracy of the enabled attention layers against float64: on a real graph, the float32
error of every output and parameter gradient stays within 2x of stock PyG's own float32 error
(both measured against a float64 run of the stock layer)."""
from __future__ import annotations

import copy

import pytest
import torch

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fastgnn  # noqa: E402
from _accuracy import assert_within_twice_stock  # noqa: E402
from conftest import devices, load_dataset  # noqa: E402
from fastgnn import reference  # noqa: E402


LAYERS = {
    "GATConv": lambda c: pyg_nn.GATConv(c, 32, heads=4),
    "TransformerConv": lambda c: pyg_nn.TransformerConv(c, 32, heads=4),
    "GATv2Conv": lambda c: pyg_nn.GATv2Conv(c, 32, heads=4),
}


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "GATConv", "TransformerConv", "GATv2Conv"])
def test_float32_error_within_twice_stock(name):
    data = load_dataset("tolokers")
    x = torch.randn(data.num_nodes, 32, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(0)
    stock = LAYERS[name](x.shape[1])
    assert_within_twice_stock(stock, fastgnn.enable(copy.deepcopy(stock)),
                              lambda layer, x: layer(x, data.edge_index), {"x": x})


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_gatv2_leaky_relu_derivative_at_zero_is_pytorchs(zero, device):
    """A float32 x_dst + x_src rounds to 0 where the exact sum is tiny of either sign. At 0 the
    LeakyReLU derivative is PyTorch's (the slope), for +0 and -0 alike, as in the stock layer:
    taking 1 at +0 once put GATv2's x gradients 5x further from float64 than stock's."""
    g = fastgnn.Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 1, 1]]), num_nodes=3)
    gen = torch.Generator().manual_seed(0)
    x_src = torch.randn(3, 1, 4, generator=gen)
    x_dst = torch.randn(3, 1, 4, generator=gen)
    if zero == 0.0:  # edge 0 -> 1: x + (-x) is +0 in two features
        x_dst[1, 0, :2] = -x_src[0, 0, :2]
    else:  # -0 + -0 is -0
        x_dst[1, 0, :2] = x_src[0, 0, :2] = -0.0
    att = torch.randn(1, 4, generator=gen)
    grad = torch.randn(3, 1, 4, generator=gen)

    def grads(fn):
        inputs = [t.to(device).clone().requires_grad_() for t in (x_dst, x_src, att)]
        fn(g.to(device), *inputs).backward(grad.to(device))
        return [t.grad.cpu() for t in inputs]
    for ours, stock in zip(grads(fastgnn.ops.gatv2_attention), grads(reference.gatv2_attention)):
        torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-6)
