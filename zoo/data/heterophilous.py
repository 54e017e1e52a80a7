"""The heterophilous graphs of "A critical look at the evaluation of GNNs under heterophily:
are we really making progress?" (Platonov et al., ICLR 2023), with their 10 splits."""
from __future__ import annotations

import os

import numpy as np
import torch
from torch_geometric import datasets as pyg_datasets
from torch_geometric.data import Data, download_url
from torch_geometric.utils import to_undirected

from .base import GraphDataModule
from .common import check_split, pick, pyg_dataset, require_files

#: the benchmark repository's data folder (PyG's HeterophilousGraphDataset downloads from it)
DATA_URL = "https://github.com/yandex-research/heterophilous-graphs/raw/main/data"
#: the graphs PyG's HeterophilousGraphDataset loads
PYG_NAMES = ("roman-empire", "amazon-ratings", "minesweeper", "tolokers", "questions")
#: the benchmark's filtered versions of classic graphs, read from its npz files
NPZ_NAMES = ("actor", "squirrel-filtered", "chameleon-filtered")
BINARY = ("minesweeper", "tolokers", "questions")
NUM_SPLITS = 10


class Heterophilous(GraphDataModule):
    """One graph of the heterophily benchmark with split ``split`` (0..9) of its 10 splits.

    ``roman-empire``, ``amazon-ratings``, ``minesweeper``, ``tolokers`` and ``questions`` load
    through ``torch_geometric.datasets.HeterophilousGraphDataset``; ``actor``,
    ``squirrel-filtered`` and ``chameleon-filtered`` are read from the benchmark's npz files
    in the same layout. Every file is ``root/<file>/raw/<file>.npz`` (``<file>`` is the name
    with ``_`` for ``-``), downloaded from the benchmark repository when absent. Edges are made
    undirected, as PyG and the benchmark do.

    ``minesweeper``, ``tolokers`` and ``questions`` are binary tasks scored by ROC-AUC; the
    others are multi-class, scored by accuracy.
    """

    NAMES = PYG_NAMES + NPZ_NAMES

    def __init__(self, root: str, name: str, split: int = 0, download: bool = True):
        super().__init__(root, check_split(split, NUM_SPLITS), download)
        self.name = pick(name, self.NAMES)

    @property
    def task(self) -> str:
        return "binary" if self.name in BINARY else "multiclass"

    def load(self):
        data = (self._load_pyg() if self.name in PYG_NAMES else self._load_npz())
        for key in ("train_mask", "val_mask", "test_mask"):
            data[key] = data[key][:, self.split].contiguous()
        return data

    def _load_pyg(self):
        dataset = pyg_dataset(pyg_datasets.HeterophilousGraphDataset, self.root, self.download,
                              name=self.name)
        return dataset[0]

    def _load_npz(self):
        file = self.name.replace("-", "_")
        raw_dir = os.path.join(self.root, file, "raw")
        path = os.path.join(raw_dir, f"{file}.npz")
        if not os.path.exists(path):
            if not self.download:
                require_files(self.root, [path])
            download_url(f"{DATA_URL}/{file}.npz", raw_dir)
        raw = np.load(path)
        x = torch.from_numpy(raw["node_features"])
        edge_index = torch.from_numpy(raw["edges"]).t().contiguous()
        return Data(x=x, y=torch.from_numpy(raw["node_labels"]),
                    edge_index=to_undirected(edge_index, num_nodes=x.size(0)),
                    # the npz holds [splits, nodes]; PyG's layout is [nodes, splits]
                    train_mask=torch.from_numpy(raw["train_masks"]).t(),
                    val_mask=torch.from_numpy(raw["val_masks"]).t(),
                    test_mask=torch.from_numpy(raw["test_masks"]).t())
