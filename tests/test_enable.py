"""The module-swapping machinery behind fastgnn.enable / disable, on toy layers."""
import importlib

import pytest
import torch

import fastgnn

enable_module = importlib.import_module("fastgnn.enable")  # fastgnn.enable is the function


class StockLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        return self.lin(x) * self.scale


class FastLayer(StockLayer):
    def forward(self, x):
        return super().forward(x)


@pytest.fixture(autouse=True)
def registered():
    enable_module.register_swap(StockLayer, FastLayer)
    yield
    enable_module._to_fast.pop(StockLayer, None)
    enable_module._to_stock.pop(FastLayer, None)


def test_enable_swaps_nested_layers_sharing_parameters():
    torch.manual_seed(0)
    model = torch.nn.Sequential(StockLayer(), torch.nn.Tanh(), torch.nn.Sequential(StockLayer()))
    weight = model[0].lin.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert fastgnn.enable(model) is model
    assert type(model[0]) is FastLayer and type(model[2][0]) is FastLayer
    assert model[0].lin.weight is weight
    assert model[0]._fastgnn_backend == "auto"
    assert set(model.state_dict()) == set(before)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()  # the optimizer still owns the same tensors
    assert not torch.equal(model[0].lin.weight, before["0.lin.weight"])


def test_enable_single_layer_returns_swapped_layer_and_disable_restores():
    layer = StockLayer()
    fast = fastgnn.enable(layer, backend="reference")
    assert type(fast) is FastLayer and fast._fastgnn_backend == "reference"
    stock = fastgnn.disable(fast)
    assert type(stock) is StockLayer and not hasattr(stock, "_fastgnn_backend")
    assert stock.lin is layer.lin


def test_enable_is_idempotent_and_updates_backend():
    model = torch.nn.Sequential(StockLayer())
    fastgnn.enable(model)
    fastgnn.enable(model, backend="reference")
    assert type(model[0]) is FastLayer and model[0]._fastgnn_backend == "reference"
    fastgnn.disable(fastgnn.disable(model))
    assert type(model[0]) is StockLayer


def test_enable_rejects_bad_arguments():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        fastgnn.enable("model")
    with pytest.raises(ValueError, match="unknown fastgnn backend"):
        fastgnn.enable(StockLayer(), backend="nope")
    with pytest.raises(TypeError, match="must subclass"):
        enable_module.register_swap(StockLayer, torch.nn.Linear)
