"""fastgnn.enable on DGL models: the module walk, DGL left untouched, the per-structure Graph
cache, and a stock two-layer model on Cora training to the same accuracy."""
from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
import weakref

import numpy as np
import pytest
import torch

dgl = pytest.importorskip("dgl")

import fastgnn  # noqa: E402
import fastgnn.dgl as fdgl  # noqa: E402
import fastgnn.dgl.nn as fnn  # noqa: E402
from conftest import load_dataset, project_env  # noqa: E402
from dgl_cases import make_graph, no_fallback  # noqa: E402
from fastgnn import datasets  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TwoLayer(torch.nn.Module):
    """A model as DGL users write it: stock layers, a dropout, a graph argument."""

    def __init__(self, in_feats, hidden, classes, kind="graphconv"):
        super().__init__()
        if kind == "graphconv":
            self.conv1 = dgl.nn.GraphConv(in_feats, hidden, activation=torch.relu)
            self.conv2 = dgl.nn.GraphConv(hidden, classes)
        else:
            self.conv1 = dgl.nn.GATConv(in_feats, hidden, 4, activation=torch.nn.functional.elu)
            self.conv2 = dgl.nn.GATConv(hidden * 4, classes, 1)
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, graph, x):
        h = self.conv1(graph, self.dropout(x)).flatten(1)
        return self.conv2(graph, self.dropout(h)).flatten(1)


def test_enable_swaps_dgl_layers_in_place_and_disable_restores():
    model = torch.nn.Sequential()
    model.inner = TwoLayer(8, 4, 3)
    model.gin = dgl.nn.GINConv(torch.nn.Linear(3, 3), "sum")
    params = {name: p for name, p in model.named_parameters()}
    assert fastgnn.enable(model) is model
    assert type(model.inner.conv1) is fnn.GraphConv and type(model.gin) is fnn.GINConv
    assert type(model.gin.apply_func) is torch.nn.Linear
    assert {name: p for name, p in model.named_parameters()} == params  # the same tensors
    fastgnn.disable(model)
    assert type(model.inner.conv1) is dgl.nn.GraphConv and type(model.gin) is dgl.nn.GINConv
    layer = dgl.nn.DotGatConv(4, 4, 2)
    assert type(fastgnn.enable(layer)) is fnn.DotGatConv  # a layer itself: a new object


@pytest.mark.slow
def test_dgl_is_not_modified():
    """Snapshots of DGL's modules and classes, taken before fastgnn is imported, are unchanged
    after importing fastgnn.dgl and enabling and disabling a model (run in a fresh process)."""
    script = textwrap.dedent("""
        import inspect, sys, types
        import dgl, dgl.nn.pytorch, dgl.nn.pytorch.conv, dgl.ops, dgl.function, torch

        def snapshot():
            found = {}
            for module in (dgl, dgl.nn, dgl.nn.pytorch, dgl.nn.pytorch.conv, dgl.ops,
                           dgl.function, dgl.heterograph):
                found[module.__name__] = {k: id(v) for k, v in vars(module).items()}
                for name, cls in vars(module).items():
                    if inspect.isclass(cls) and cls.__module__.startswith("dgl"):
                        found[cls.__module__ + "." + cls.__qualname__] = {
                            k: id(v) for k, v in vars(cls).items()}
            return found

        before = snapshot()
        import fastgnn, fastgnn.dgl, fastgnn.dgl.nn
        model = torch.nn.Sequential(dgl.nn.GraphConv(4, 4), dgl.nn.GATv2Conv(4, 4, 2))
        fastgnn.disable(fastgnn.enable(model))
        after = snapshot()
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        print("CHANGED", changed)
        sys.exit(1 if changed else 0)
    """)
    env = project_env(DGLBACKEND="pytorch")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


# ---- the Graph cache ---------------------------------------------------------------------------
def test_repeated_calls_do_not_rebuild():
    graph = make_graph("homogeneous")
    layer = fastgnn.enable(dgl.nn.GraphConv(5, 5, allow_zero_in_degree=True))
    x = torch.randn(60, 5)
    layer(graph, x)
    builds = fdgl.graph_cache.builds
    for _ in range(3):
        layer(graph, x)
        fdgl.copy_u_sum(graph, x)
    with graph.local_scope():  # DGL's scoped copies share the structure
        layer(graph, x)
    layer(graph.local_var(), x)
    assert fdgl.graph_cache.builds == builds
    assert fdgl.fastgnn_graph(graph) is fdgl.fastgnn_graph(graph.local_var())


def test_blocks_dtypes_and_changed_structures_get_their_own_graph():
    graph = make_graph("homogeneous")
    seeds = torch.arange(10)
    block = dgl.to_block(dgl.in_subgraph(graph, seeds), seeds)
    base, of_block = fdgl.fastgnn_graph(graph), fdgl.fastgnn_graph(block)
    assert of_block is not base
    assert (of_block.num_src_nodes, of_block.num_dst_nodes) == (block.num_src_nodes(), 10)
    assert of_block.num_edges == block.num_edges()
    assert fdgl.fastgnn_graph(graph.int()) is not base
    grown = dgl.add_edges(graph, [0], [1])
    assert fdgl.fastgnn_graph(grown).num_edges == base.num_edges + 1
    graph.add_edges([1], [2])  # in place: a new structure object
    assert fdgl.fastgnn_graph(graph).num_edges == base.num_edges + 1


def test_a_blocks_graph_is_tuned_by_size_class_and_keeps_dgls_edge_order():
    """Every mini-batch brings new blocks: an exact tuning signature would make the GPU tuner
    time the kernels' launch choices again for each one."""
    def size_class(n):
        return 1 << max(0, n - 1).bit_length()
    graph = make_graph("homogeneous")
    for seeds in (torch.arange(10), torch.arange(10, 21)):
        block = dgl.to_block(dgl.in_subgraph(graph, seeds), seeds)
        of_block, exact = fdgl.fastgnn_graph(block), fastgnn.Graph.from_dgl(block)
        assert of_block.signature() == ("dgl-block", size_class(block.num_src_nodes()),
                                        size_class(block.num_dst_nodes()),
                                        size_class(block.num_edges()))
        assert torch.equal(of_block.rowptr, exact.rowptr) and torch.equal(of_block.col, exact.col)
        assert (of_block.edge_perm is None) == (exact.edge_perm is None)
        if exact.edge_perm is not None:
            assert torch.equal(of_block.edge_perm, exact.edge_perm)
    assert fdgl.fastgnn_graph(graph).signature()[0] != "dgl-block"  # whole graphs stay exact


def test_cache_never_keeps_graphs_alive():
    graph = make_graph("block")
    fdgl.fastgnn_graph(graph)
    entries = len(fdgl.graph_cache)
    structure = weakref.ref(graph._graph)
    dgl_graph = weakref.ref(graph)
    fast = weakref.ref(fdgl.fastgnn_graph(graph))
    del graph
    gc.collect()
    assert dgl_graph() is None and structure() is None and fast() is None
    assert len(fdgl.graph_cache) < entries  # its entry left (others may have, too)


# ---- Cora --------------------------------------------------------------------------------------
def _cora():
    """Cora's DGLGraph, features, labels and the Planetoid split, from the raw pickles (no
    PyG in the DGL environment)."""
    data = load_dataset("cora")  # the edges, as fastgnn's loader builds them; skips if absent
    raw = os.path.join(datasets.data_root(), "planetoid", "Cora", "raw")

    def read(part):
        # scipy warns about the module path its old pickles name
        with open(os.path.join(raw, f"ind.cora.{part}"), "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pickle.load(f, encoding="latin1")

    test_index = np.loadtxt(os.path.join(raw, "ind.cora.test.index"), dtype=np.int64)
    x = np.vstack([read("allx").toarray(), read("tx").toarray()])
    y = np.vstack([read("ally"), read("ty")]).argmax(1)
    order = np.sort(test_index)
    x[test_index], y[test_index] = x[order], y[order]  # the test rows come in index order
    graph = dgl.add_self_loop(dgl.graph(tuple(data.edge_index), num_nodes=data.num_nodes))
    train = torch.arange(len(read("y")))
    return graph, torch.tensor(x, dtype=torch.float32), torch.tensor(y), train, \
        torch.from_numpy(order)


def _train(model, graph, x, y, train, test, epochs=60):
    torch.manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        loss = torch.nn.functional.cross_entropy(model(graph, x)[train], y[train])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        return (model(graph, x)[test].argmax(1) == y[test]).float().mean().item()


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["graphconv", "gatconv"])
def test_cora_trains_to_the_same_accuracy(kind):
    graph, x, y, train, test = _cora()
    torch.manual_seed(0)
    stock = TwoLayer(x.shape[1], 16 if kind == "graphconv" else 8, 7, kind)
    fast = fastgnn.enable(TwoLayer(x.shape[1], 16 if kind == "graphconv" else 8, 7, kind))
    fast.load_state_dict(stock.state_dict())
    stock_accuracy = _train(stock, graph, x, y, train, test)
    with no_fallback():
        fast_accuracy = _train(fast, graph, x, y, train, test)
    assert stock_accuracy > 0.75
    assert abs(fast_accuracy - stock_accuracy) <= 0.01, (fast_accuracy, stock_accuracy)


_REORDERED_LAYERS = {
    "GraphConv": lambda: dgl.nn.GraphConv(5, 4, norm="both", allow_zero_in_degree=True),
    "SAGEConv": lambda: dgl.nn.SAGEConv(5, 4, "mean"),
    "GATConv": lambda: dgl.nn.GATConv(5, 2, 2, allow_zero_in_degree=True),
    "GATv2Conv": lambda: dgl.nn.GATv2Conv(5, 2, 2, allow_zero_in_degree=True),
    "DotGatConv": lambda: dgl.nn.DotGatConv(5, 2, 2, allow_zero_in_degree=True),
}


@pytest.mark.parametrize("name", list(_REORDERED_LAYERS))
def test_reordered_layers_equal_the_plain_ones(name, monkeypatch):
    from fastgnn import reordering
    from dgl_cases import grads, leaves

    graph = make_graph("homogeneous")
    torch.manual_seed(0)
    stock = _REORDERED_LAYERS[name]().double()
    plain = fastgnn.enable(stock)
    flagged = fastgnn.enable(_REORDERED_LAYERS[name]().double(), reorder="rcm")
    flagged.load_state_dict(plain.state_dict())
    built = []
    internal = reordering.internal
    monkeypatch.setattr(reordering, "internal", lambda g: built.append(g) or internal(g))
    (x,) = leaves((60, 5), dtype=torch.float64)
    with no_fallback():
        ours = flagged(graph, x)
    assert built and built[0].reordering == "rcm"
    theirs = plain(graph, x)
    torch.testing.assert_close(ours, theirs)
    params = [x] + list(flagged.parameters())
    for a, b in zip(grads(ours, params), grads(theirs, [x] + list(plain.parameters()))):
        torch.testing.assert_close(a, b)


def test_reordered_layer_on_a_block_falls_back_once():
    from fastgnn._adapter import _warned

    block = make_graph("block")
    layer = fastgnn.enable(dgl.nn.GraphConv(5, 4, allow_zero_in_degree=True), reorder="rcm")
    plain = fastgnn.enable(dgl.nn.GraphConv(5, 4, allow_zero_in_degree=True))
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(block.num_src_nodes(), 5)
    _warned.clear()
    with pytest.warns(fastgnn.FallbackWarning, match="reorder='rcm' on a bipartite graph"):
        out = layer(block, x)
    torch.testing.assert_close(out, plain(block, x))
