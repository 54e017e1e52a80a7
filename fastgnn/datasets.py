"""Structures of the real benchmark graphs, read from a local data root.

The root is ``FASTGNN_DATA`` (default ``../shared/datasets`` beside the project, then
``./.data``). Loaders raise :class:`DatasetUnavailable` when files are missing, so tests and
benchmarks can skip with the reason. Each returns a :class:`GraphData`: an int64
``edge_index`` (row 0 sources), the node count and, where the dataset has them, features
and labels.
"""
from __future__ import annotations

import gzip
import os
import pickle
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np
import torch

_PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class DatasetUnavailable(FileNotFoundError):
    """The dataset's files are not under the data root."""


@dataclass
class GraphData:
    name: str
    edge_index: torch.Tensor
    num_nodes: int
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None


def data_root() -> str:
    env = os.environ.get("FASTGNN_DATA")
    if env:
        return env
    for candidate in (os.path.join(_PROJECT, "..", "shared", "datasets"),
                      os.path.join(_PROJECT, ".data")):
        if os.path.isdir(candidate):
            return os.path.normpath(candidate)
    return os.path.normpath(os.path.join(_PROJECT, "..", "shared", "datasets"))


def _path(*parts: str) -> str:
    path = os.path.join(data_root(), *parts)
    if not os.path.exists(path):
        raise DatasetUnavailable(f"{path} not found (set FASTGNN_DATA to the datasets folder)")
    return path


def _undirected(edges: np.ndarray) -> torch.Tensor:
    e = torch.from_numpy(np.ascontiguousarray(edges, dtype=np.int64))
    return torch.cat([e, e.flip(0)], dim=1)


def tolokers() -> GraphData:
    d = np.load(_path("heterophilous", "tolokers.npz"))
    x = torch.from_numpy(d["node_features"])
    return GraphData("tolokers", _undirected(d["edges"].T), x.shape[0], x,
                     torch.from_numpy(d["node_labels"]))


def ogbn_arxiv() -> GraphData:
    with gzip.open(_path("ogbn_arxiv_structure", "raw", "edge.csv.gz")) as f:
        edges = np.loadtxt(f, delimiter=",", dtype=np.int64).T
    with gzip.open(_path("ogbn_arxiv_structure", "raw", "num-node-list.csv.gz")) as f:
        num_nodes = int(f.read().split()[0])
    with gzip.open(_path("ogbn_arxiv_structure", "raw", "node-label.csv.gz")) as f:
        y = torch.from_numpy(np.loadtxt(f, dtype=np.int64).reshape(-1))
    return GraphData("ogbn-arxiv", torch.from_numpy(edges), num_nodes, None, y)


def flickr() -> GraphData:
    import scipy.sparse as sp

    adj = sp.load_npz(_path("flickr_structure", "adj_full.npz")).tocoo()
    edge_index = torch.from_numpy(np.stack([adj.row, adj.col]).astype(np.int64))
    return GraphData("flickr", edge_index, adj.shape[0])


def roads() -> GraphData:
    with gzip.open(_path("roads", "usa_road_d_ny_arcs.txt.gz")) as f:
        arcs = np.loadtxt(f, dtype=np.int64, usecols=(0, 1)).T
    return GraphData("roads-ny", torch.from_numpy(arcs), int(arcs.max()) + 1)


def _planetoid(name: str) -> GraphData:
    """Planetoid citation graph from its raw files (the edges PyG's Planetoid builds)."""
    lower = name.lower()

    def read(part):
        with open(_path("planetoid", name, "raw", f"ind.{lower}.{part}"), "rb") as f:
            return pickle.load(f, encoding="latin1")

    graph = read("graph")
    test_index = np.loadtxt(_path("planetoid", name, "raw", f"ind.{lower}.test.index"),
                            dtype=np.int64)
    num_nodes = max(max(graph) + 1, int(test_index.max()) + 1)
    pairs = {(src, dst) for src, nbrs in graph.items() for dst in nbrs if src != dst}
    pairs |= {(dst, src) for src, dst in pairs}
    edges = np.array(sorted(pairs), dtype=np.int64).T
    return GraphData(name.lower(), torch.from_numpy(edges), num_nodes)


def cora() -> GraphData:
    return _planetoid("Cora")


def citeseer() -> GraphData:
    return _planetoid("CiteSeer")


LOADERS: Dict[str, Callable[[], GraphData]] = {
    "cora": cora,
    "citeseer": citeseer,
    "tolokers": tolokers,
    "ogbn-arxiv": ogbn_arxiv,
    "flickr": flickr,
    "roads-ny": roads,
}


def load(name: str) -> GraphData:
    try:
        loader = LOADERS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(LOADERS)}") from None
    return loader()
