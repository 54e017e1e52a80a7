"""Accuracy of the enabled neighbourhood-reduction PyG layers (GCNConv, SAGEConv, GraphConv,
GINConv, SimpleConv) against float64: the float32 error of the output and of every input and
parameter gradient stays within 2x of stock PyG's own float32 error, both measured against a
float64 run of the stock layer (issue 16). The attention layers: test_attention_accuracy.py."""
from __future__ import annotations

import copy

import pytest
import torch

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fastgnn  # noqa: E402
from _accuracy import assert_within_twice_stock  # noqa: E402
from conftest import load_dataset, random_edge_index  # noqa: E402
from pyg_cases import fused_only  # noqa: E402

C = 32


def _gin(**kwargs):
    mlp = torch.nn.Sequential(torch.nn.Linear(C, C), torch.nn.ReLU(), torch.nn.Linear(C, C))
    return pyg_nn.GINConv(mlp, **kwargs)


# name: (stock layer, whether it takes per-edge weights)
LAYERS = {
    "GCNConv": (lambda: pyg_nn.GCNConv(C, C), False),
    "GCNConv-weighted": (lambda: pyg_nn.GCNConv(C, C), True),
    "GCNConv-improved-weighted": (lambda: pyg_nn.GCNConv(C, C, improved=True), True),
    "GCNConv-no-self-loops": (lambda: pyg_nn.GCNConv(C, C, add_self_loops=False), False),
    "GCNConv-unnormalised": (lambda: pyg_nn.GCNConv(C, C, normalize=False), False),
    "GCNConv-unnormalised-weighted": (lambda: pyg_nn.GCNConv(C, C, normalize=False), True),
    "SAGEConv-mean": (lambda: pyg_nn.SAGEConv(C, C), False),
    "SAGEConv-sum": (lambda: pyg_nn.SAGEConv(C, C, aggr="sum"), False),
    "SAGEConv-max": (lambda: pyg_nn.SAGEConv(C, C, aggr="max"), False),
    "SAGEConv-min": (lambda: pyg_nn.SAGEConv(C, C, aggr="min"), False),
    "SAGEConv-mean-project-normalize": (
        lambda: pyg_nn.SAGEConv(C, C, project=True, normalize=True), False),
    "GraphConv-add": (lambda: pyg_nn.GraphConv(C, C), False),
    "GraphConv-add-weighted": (lambda: pyg_nn.GraphConv(C, C), True),
    "GraphConv-mean-weighted": (lambda: pyg_nn.GraphConv(C, C, aggr="mean"), True),
    "GraphConv-max": (lambda: pyg_nn.GraphConv(C, C, aggr="max"), False),
    "GraphConv-min": (lambda: pyg_nn.GraphConv(C, C, aggr="min"), False),
    "GINConv": (lambda: _gin(train_eps=True), False),
    "GINConv-mean": (lambda: _gin(train_eps=True, aggr="mean"), False),
    "GINConv-max": (lambda: _gin(aggr="max"), False),
    "SimpleConv-sum": (lambda: pyg_nn.SimpleConv(), False),
    "SimpleConv-mean-weighted": (lambda: pyg_nn.SimpleConv(aggr="mean"), True),
    "SimpleConv-sum-root-sum-weighted": (
        lambda: pyg_nn.SimpleConv(combine_root="sum"), True),
    "SimpleConv-self-loop-weighted": (
        lambda: pyg_nn.SimpleConv(combine_root="self_loop"), True),
    "SimpleConv-max-root-cat": (lambda: pyg_nn.SimpleConv(aggr="max", combine_root="cat"),
                                False),
    "SimpleConv-min": (lambda: pyg_nn.SimpleConv(aggr="min"), False),
}


def _check(name, edge_index, num_nodes):
    make, weighted = LAYERS[name]
    gen = torch.Generator().manual_seed(5)
    inputs = {"x": torch.randn(num_nodes, C, generator=gen)}
    if weighted:
        inputs["edge_weight"] = torch.rand(edge_index.shape[1], generator=gen) + 0.1
    torch.manual_seed(0)
    stock = make()
    with fused_only():  # the enabled layer takes its fused path
        return assert_within_twice_stock(
            stock, fastgnn.enable(copy.deepcopy(stock)),
            lambda layer, **leaves: layer(edge_index=edge_index, **leaves), inputs)


@pytest.mark.parametrize("name", LAYERS)
def test_float32_error_within_twice_stock(name):
    """A random graph with the awkward cases: a hub receiving from a third of the edges'
    worth of sources (in-degree ~13000), isolated nodes, self-loops and duplicate edges."""
    _check(name, random_edge_index(2000, 2000, 40000, seed=3), 2000)


# every layer and every reduction (sum, mean, max, min; with and without edge weights) once
ON_TOLOKERS = ["GCNConv", "GCNConv-weighted", "SAGEConv-mean", "SAGEConv-max", "SAGEConv-min",
               "GraphConv-add-weighted", "GINConv", "SimpleConv-sum", "SimpleConv-mean-weighted"]


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("name", ON_TOLOKERS)
def test_float32_error_within_twice_stock_tolokers(name):
    """The real graph the issue measured on (11758 nodes, about a million edges)."""
    data = load_dataset("tolokers")
    _check(name, data.edge_index, data.num_nodes)
