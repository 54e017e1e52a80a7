"""fastgnn.enable / disable on PyG models: swapping, shared parameters, optimizer state,
idempotence, per-layer backends, PyG left untouched, and training accuracy on Cora."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys

import pytest
import torch

torch_geometric = pytest.importorskip("torch_geometric")
import torch_geometric.nn as pyg_nn  # noqa: E402

import fastgnn  # noqa: E402
import fastgnn.datasets  # noqa: E402
import fastgnn.pyg as fpyg  # noqa: E402
from fastgnn import backends  # noqa: E402
from conftest import devices, load_dataset, project_env, random_edge_index  # noqa: E402

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Net(torch.nn.Module):
    """A model built from stock PyG layers, one of each kind, nested."""

    def __init__(self, channels=8):
        super().__init__()
        self.gcn = pyg_nn.GCNConv(channels, channels)
        self.blocks = torch.nn.ModuleList([
            pyg_nn.SAGEConv(channels, channels, aggr="max"),
            torch.nn.Sequential(pyg_nn.GraphConv(channels, channels)),
            pyg_nn.GINConv(torch.nn.Linear(channels, channels), train_eps=True),
        ])
        self.simple = pyg_nn.SimpleConv("mean", "sum")
        self.gat = pyg_nn.GATv2Conv(channels, 4, heads=2, edge_dim=2)
        self.gat_v1 = pyg_nn.GATConv(channels, channels, heads=2, concat=False, edge_dim=2)
        self.transformer = pyg_nn.TransformerConv(channels, channels, heads=2, concat=False,
                                                  beta=True)

    def forward(self, x, edge_index, edge_attr):
        x = self.gcn(x, edge_index).relu()
        x = self.blocks[0](x, edge_index)
        x = self.blocks[1][0](x, edge_index)
        x = self.blocks[2](x, edge_index)
        x = self.simple(x, edge_index)
        x = self.gat_v1(x, edge_index, edge_attr)
        x = self.gat(x, edge_index, edge_attr)
        return self.transformer(x, edge_index)


def _inputs(device="cpu"):
    gen = torch.Generator().manual_seed(0)
    ei = random_edge_index(40, 40, 200, seed=1)
    return (torch.randn(40, 8, generator=gen).to(device), ei.to(device),
            torch.randn(ei.size(1), 2, generator=gen).to(device))


STOCK_TYPES = {pyg_nn.GCNConv, pyg_nn.SAGEConv, pyg_nn.GraphConv, pyg_nn.GINConv,
               pyg_nn.SimpleConv, pyg_nn.GATv2Conv, pyg_nn.TransformerConv, pyg_nn.GATConv}


def _layer_types(model):
    return [type(m) for m in model.modules() if isinstance(m, tuple(STOCK_TYPES))]


def test_enable_swaps_every_layer_and_shares_parameters():
    torch.manual_seed(0)
    model = Net()
    params = {name: p for name, p in model.named_parameters()}
    buffers = {name: b for name, b in model.named_buffers()}
    args = _inputs()
    expected = model(*args)
    assert fastgnn.enable(model) is model
    assert all(t in fpyg.LAYERS for t in _layer_types(model))
    assert {n: p for n, p in model.named_parameters()} == params  # the same tensor objects
    assert all(b is buffers[n] for n, b in model.named_buffers())
    torch.testing.assert_close(model(*args), expected, rtol=1e-4, atol=1e-5)
    fastgnn.disable(model)
    assert set(_layer_types(model)) <= STOCK_TYPES
    torch.testing.assert_close(model(*args), expected, rtol=1e-4, atol=1e-5)


def test_enable_disable_enable_is_idempotent():
    torch.manual_seed(0)
    model = Net()
    args = _inputs()
    fastgnn.enable(model)
    once = model(*args)
    types = _layer_types(model)
    fastgnn.enable(model)
    assert _layer_types(model) == types
    fastgnn.disable(model)
    fastgnn.disable(model)
    assert set(_layer_types(model)) <= STOCK_TYPES
    fastgnn.enable(model)
    assert _layer_types(model) == types
    torch.testing.assert_close(model(*args), once)
    assert "_fastgnn_backend" not in vars(fastgnn.disable(model).gcn)


def test_enable_single_layer_returns_the_swapped_layer():
    stock = pyg_nn.GCNConv(8, 8)
    fast = fastgnn.enable(stock)
    assert type(fast) is fpyg.GCNConv and fast.lin.weight is stock.lin.weight
    back = fastgnn.disable(fast)
    assert type(back) is pyg_nn.GCNConv and back.lin.weight is stock.lin.weight
    with pytest.raises(TypeError, match="torch.nn.Module"):
        fastgnn.enable("not a model")
    with pytest.raises(ValueError, match="unknown fastgnn backend"):
        fastgnn.enable(stock, backend="nope")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("order", ["enable-then-to", "to-then-enable"])
def test_enable_before_or_after_to(device, order):
    torch.manual_seed(0)
    stock = Net()
    model = copy.deepcopy(stock)
    if order == "enable-then-to":
        model = fastgnn.enable(model).to(device)
    else:
        model = fastgnn.enable(model.to(device))
    args = _inputs(device)
    out = model(*args)
    assert out.device.type == device
    expected = stock.to(device)(*args)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_optimizer_state_stays_valid():
    torch.manual_seed(0)
    stock = Net()
    model = copy.deepcopy(stock)
    args = _inputs()
    # SGD with momentum: stateful, and (unlike Adam) not amplifying rounding noise in
    # near-zero gradients, so the two runs stay comparable.
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (stock, model)]
    for step in range(4):
        if step == 2:
            fastgnn.enable(model)  # mid-training: the momentum buffers stay attached
        for m, opt in zip((stock, model), opts):
            opt.zero_grad()
            m(*args).tanh().mean().backward()
            opt.step()
    assert all("momentum_buffer" in opts[1].state[p] for p in model.parameters())
    for (name, p), q in zip(stock.named_parameters(), model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def _class_snapshot(cls):
    return {name: value for name, value in vars(cls).items() if name != "__weakref__"}


def test_pyg_classes_and_modules_unchanged():
    torch.manual_seed(0)
    model = Net()
    args = _inputs()
    model(*args)  # PyG fills its per-class propagate templates on first use
    classes = list(STOCK_TYPES) + [pyg_nn.MessagePassing, torch.nn.Module]
    before = {cls: _class_snapshot(cls) for cls in classes}
    modules = {mod: dict(vars(mod)) for mod in (pyg_nn, torch_geometric.nn.conv, torch.nn)}
    fastgnn.enable(model)
    model(*args)
    copy.deepcopy(model)(*args)
    fastgnn.disable(model)
    model(*args)
    fastgnn.enable(model, backend="reference")
    model(*args)
    for cls in classes:
        assert _class_snapshot(cls) == before[cls], cls
    for mod, contents in modules.items():
        assert dict(vars(mod)) == contents, mod


def test_per_layer_backend_is_applied():
    seen = []

    def spy(g, x, **kwargs):
        seen.append(backends.get_backend())
        return backends.select("spmm", x.device, "reference").fn(g, x, **kwargs)

    backends.register("spmm", "spy", ("cpu",), spy, priority=-100)
    try:
        torch.manual_seed(0)
        gcn = fastgnn.enable(pyg_nn.GCNConv(8, 8), backend="spy")
        assert gcn._fastgnn_backend == "spy"
        x, ei, _ = _inputs()
        expected = fastgnn.disable(copy.deepcopy(gcn))(x, ei)
        torch.testing.assert_close(gcn(x, ei), expected)
        assert seen == ["spy"]
        fastgnn.enable(gcn)  # back to auto: the spy never wins
        gcn(x, ei)
        assert seen == ["spy"]
    finally:
        backends.unregister("spmm", "spy")


def test_enable_imports_the_adapter_by_itself():
    code = ("import fastgnn, sys, torch_geometric.nn as P\n"
            "assert 'fastgnn.pyg' not in sys.modules\n"
            "layer = fastgnn.enable(P.SAGEConv(4, 4))\n"
            "assert type(layer).__module__ == 'fastgnn.pyg.basic', type(layer)\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROJECT, env=project_env())


# ---- training on Cora --------------------------------------------------------------------------
class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden, classes):
        super().__init__()
        self.conv1 = pyg_nn.GCNConv(in_channels, hidden, cached=True)
        self.conv2 = pyg_nn.GCNConv(hidden, classes, cached=True)

    def forward(self, x, edge_index):  # no input dropout: on 2708 x 1433 it dominates CPU time
        x = self.conv1(x, edge_index).relu()
        x = torch.nn.functional.dropout(x, 0.5, self.training)
        return self.conv2(x, edge_index)


def _cora(tmp_path):
    """PyG's Planetoid Cora (real features and split) from a copy of the shared raw files;
    else the structure with random features and labels."""
    data = load_dataset("cora")  # skips when the raw files are absent
    source = os.path.join(fastgnn.datasets.data_root(), "planetoid", "Cora")
    try:
        from torch_geometric.datasets import Planetoid
        shutil.copytree(source, tmp_path / "Cora")
        return Planetoid(str(tmp_path), "Cora")[0]
    except Exception:  # noqa: BLE001 - any loading problem: fall back to synthetic data
        gen = torch.Generator().manual_seed(0)
        y = torch.randint(0, 7, (data.num_nodes,), generator=gen)
        x = torch.nn.functional.one_hot(y, 7).float() + torch.randn(data.num_nodes, 7,
                                                                   generator=gen)
        mask = torch.rand(data.num_nodes, generator=gen)
        return torch_geometric.data.Data(x=x, y=y, edge_index=data.edge_index,
                                          train_mask=mask < 0.2, test_mask=mask > 0.6)


def _train_accuracy(data, fast):
    torch.manual_seed(0)
    model = GCN(data.x.size(1), 16, int(data.y.max()) + 1)
    if fast:
        model = fastgnn.enable(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(50):
        model.train()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data.x, data.edge_index)[data.train_mask],
                                                 data.y[data.train_mask])
        loss.backward()
        opt.step()
    model.eval()
    pred = model(data.x, data.edge_index).argmax(-1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


@pytest.mark.data
def test_gcn_trains_on_cora_to_the_same_accuracy(tmp_path):
    data = _cora(tmp_path)
    stock, fast = _train_accuracy(data, False), _train_accuracy(data, True)
    assert abs(stock - fast) <= 0.02, (stock, fast)
    assert fast > 0.5


def test_edge_index_made_under_inference_mode():
    """An edge_index created inside torch.inference_mode has no version counter: the enabled
    layer still runs (building its structure for the call) and equals the stock layer."""
    torch.manual_seed(0)
    stock = pyg_nn.GCNConv(6, 4)
    fast = fastgnn.enable(copy.deepcopy(stock))
    x = torch.randn(30, 6)
    with torch.inference_mode():
        edge_index = torch.randint(0, 30, (2, 120))
        for _ in range(2):  # the second call must not reuse a stale entry either
            torch.testing.assert_close(fast(x, edge_index), stock(x, edge_index))
