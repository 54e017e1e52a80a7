"""OGB node property prediction: ogbn-arxiv, ogbn-products and ogbn-proteins, official splits.

The files are read here, from OGB's raw layout, rather than through the ``ogb`` package:
its dataset classes ``torch.load`` pickles (which fails on torch >= 2.6, where
``weights_only`` defaults to true) and ask on stdin before large or updated downloads. This
reader never prompts, and caches what it parsed as plain tensors (loaded with
``weights_only=True``). Scores come from OGB's ``Evaluator``, named by :attr:`ogb_name`.
"""
from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import dataclass
from typing import Callable, Dict, List

import numpy as np
import torch
from torch_geometric import utils as pyg_utils
from torch_geometric.data import Data, download_url, extract_zip

from .base import GraphDataModule
from .common import check_split, index_mask, missing_files, pick, require_files

URL = "http://snap.stanford.edu/ogb/data/nodeproppred/{}.zip"


@dataclass(frozen=True)
class _Spec:
    archive: str  # the zip on OGB's server, and the folder it unpacks to
    split: str  # the official split's folder under split/
    inverse_edges: bool  # edge.csv.gz holds each undirected edge once (OGB's add_inverse_edge)
    node_features: bool
    edge_features: bool
    task: str


SPECS: Dict[str, _Spec] = {
    "ogbn-arxiv": _Spec("arxiv", "time", False, True, False, "multiclass"),
    "ogbn-products": _Spec("products", "sales_ranking", True, True, False, "multiclass"),
    "ogbn-proteins": _Spec("proteins", "species", True, False, True, "multilabel"),
}
SPLIT_PARTS = ("train", "valid", "test")
#: seed of the random features that ``random_features`` puts in place of ``x``
RANDOM_FEATURES_SEED = 0


def read_csv(path: str, dtype) -> np.ndarray:
    """One of OGB's headerless ``*.csv.gz`` files as a 2-D array."""
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2)


class OGBNodeProp(GraphDataModule):
    """ogbn-arxiv, ogbn-products or ogbn-proteins with the official split (the only split, 0).

    Files: OGB's layout, ``root/<ogbn_name>/raw/{edge,num-node-list,num-edge-list,
    node-label,node-feat,edge-feat}.csv.gz`` and ``root/<ogbn_name>/split/<split>/
    {train,valid,test}.csv.gz`` (``<ogbn_name>`` is e.g. ``ogbn_arxiv``, as ``ogb`` names
    it), downloaded and unpacked there from OGB's server when absent, without prompting.

    - ogbn-arxiv: multi-class (40); the citation graph is directed, and made undirected as in
      OGB's examples unless ``to_undirected`` is false.
    - ogbn-products: multi-class (47); undirected (OGB stores each edge once and adds the
      reverse edges, as here).
    - ogbn-proteins: multi-label (112 binary tasks, ``y`` int64 0/1, ROC-AUC); undirected,
      ``edge_attr`` [E, 8]; it has no node features, so ``x`` is the mean of each node's
      incoming edge features, as in OGB's examples.

    ``random_features=F > 0`` puts seeded standard-normal features ``[N, F]`` in place of
    ``x`` and then needs no feature file: speed runs use it on structure-only copies.
    """

    NAMES = tuple(SPECS)

    def __init__(self, root: str, name: str, split: int = 0, download: bool = True,
                 random_features: int = 0, to_undirected: bool = True, **options):
        super().__init__(root, check_split(split, 1), download, **options)
        self.name = pick(name, self.NAMES)
        if isinstance(random_features, bool) or not isinstance(random_features, int) \
                or random_features < 0:
            raise ValueError(f"random_features must be an int >= 0; got {random_features!r}")
        self.random_features = random_features
        self.to_undirected = to_undirected
        self._spec = SPECS[self.name]

    @property
    def task(self) -> str:
        return self._spec.task

    @property
    def ogb_name(self) -> str:
        return self.name

    @property
    def folder(self) -> str:
        return os.path.join(self.root, self.name.replace("-", "_"))

    def _raw(self, file: str) -> str:
        return os.path.join(self.folder, "raw", f"{file}.csv.gz")

    def _split(self, part: str) -> str:
        return os.path.join(self.folder, "split", self._spec.split, f"{part}.csv.gz")

    def _parsed(self, what: str, files: List[str], read: Callable[[], dict]) -> dict:
        """``read()``'s tensors, parsed from ``files`` once (downloading them if missing and
        allowed) and then loaded from the cache ``processed/fastgnn_zoo_<what>.pt``."""
        cache = os.path.join(self.folder, "processed", f"fastgnn_zoo_{what}.pt")
        if os.path.exists(cache):
            return torch.load(cache, weights_only=True)
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            if not self.download:
                raise missing_files(self.root, missing)
            _download(self._spec.archive, self.root, self.folder)
            require_files(self.root, files)
        value = read()
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = f"{cache}.{os.getpid()}.tmp"  # other ranks may read the cache while it is written
        torch.save(value, tmp)
        os.replace(tmp, cache)
        return value

    def _read_graph(self) -> dict:
        spec = self._spec
        graph = {
            "edge_index": torch.from_numpy(read_csv(self._raw("edge"), np.int64).T.copy()),
            "num_nodes": int(read_csv(self._raw("num-node-list"), np.int64)[0, 0]),
            "y": torch.from_numpy(read_csv(self._raw("node-label"), np.int64)),
        }
        for part in SPLIT_PARTS:
            graph[part] = torch.from_numpy(read_csv(self._split(part), np.int64)[:, 0].copy())
        if spec.edge_features:
            graph["edge_attr"] = torch.from_numpy(read_csv(self._raw("edge-feat"), np.float32))
        return graph

    def load(self):
        spec = self._spec
        graph_files = [self._raw(f) for f in ("edge", "num-node-list", "node-label")]
        graph_files += [self._split(p) for p in SPLIT_PARTS]
        if spec.edge_features:
            graph_files.append(self._raw("edge-feat"))
        graph = self._parsed("graph", graph_files, self._read_graph)
        n = graph["num_nodes"]
        edge_index, edge_attr = graph["edge_index"], graph.get("edge_attr")
        if spec.inverse_edges:  # each edge followed by its reverse, in ogb's order
            edge_index = torch.stack([edge_index, edge_index.flip(0)], dim=2).reshape(2, -1)
            if edge_attr is not None:
                edge_attr = edge_attr.repeat_interleave(2, dim=0)
        elif self.to_undirected:
            edge_index = pyg_utils.to_undirected(edge_index, num_nodes=n)

        if self.random_features:
            gen = torch.Generator().manual_seed(RANDOM_FEATURES_SEED)
            x = torch.randn(n, self.random_features, generator=gen)
        elif spec.node_features:
            feat = self._raw("node-feat")
            x = self._parsed("node_feat", [feat],
                             lambda: {"x": torch.from_numpy(read_csv(feat, np.float32))})["x"]
        else:  # ogbn-proteins: the mean of the incoming edges' features
            x = pyg_utils.scatter(edge_attr, edge_index[1], dim=0, dim_size=n, reduce="mean")

        y = graph["y"]
        data = Data(x=x, y=y[:, 0] if spec.task == "multiclass" else y, edge_index=edge_index,
                    num_nodes=n)
        if edge_attr is not None:
            data.edge_attr = edge_attr
        data.train_mask = index_mask(graph["train"], n)
        data.val_mask = index_mask(graph["valid"], n)
        data.test_mask = index_mask(graph["test"], n)
        return data


def _download(archive: str, root: str, folder: str) -> None:
    """Fetches OGB's zip and moves what it unpacks (``root/<archive>/``) into ``folder``,
    keeping files already there that the zip lacks (a staged structure-only copy)."""
    path = download_url(URL.format(archive), root)
    extract_zip(path, root)
    os.unlink(path)
    unpacked = os.path.join(root, archive)
    for dirpath, _, files in os.walk(unpacked):
        target = os.path.join(folder, os.path.relpath(dirpath, unpacked))
        os.makedirs(target, exist_ok=True)
        for file in files:
            os.replace(os.path.join(dirpath, file), os.path.join(target, file))
    shutil.rmtree(unpacked)
