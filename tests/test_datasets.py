"""The real datasets load with the sizes their sources state (skipped when absent)."""
import pytest
import torch

import fastgnn
from conftest import load_dataset

EXPECTED = {  # name: (nodes, directed edges)
    "cora": (2708, 10556),
    "citeseer": (3327, 9104),
    "tolokers": (11758, 1038000),
    "ogbn-arxiv": (169343, 1166243),
    "flickr": (89250, 899756),
    "roads-ny": (264346, 730100),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dataset_loads_and_builds_a_graph(name):
    data = load_dataset(name)
    nodes, edges = EXPECTED[name]
    assert data.num_nodes == nodes and data.edge_index.shape == (2, edges)
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    assert g.num_edges == edges and int(g.in_degree.sum()) == edges


def test_unknown_dataset_and_missing_root(monkeypatch, tmp_path):
    from fastgnn import datasets
    with pytest.raises(ValueError, match="unknown dataset"):
        datasets.load("imagenet")
    monkeypatch.setenv("FASTGNN_DATA", str(tmp_path))
    with pytest.raises(datasets.DatasetUnavailable, match="FASTGNN_DATA"):
        datasets.load("cora")


def test_symmetric_datasets_are_symmetric():
    data = load_dataset("tolokers")
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    assert g.is_symmetric and not g.has_self_loops
    assert torch.equal(g.in_degree, g.out_degree)
