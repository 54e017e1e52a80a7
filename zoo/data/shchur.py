"""Amazon (Computers, Photo) and Coauthor (CS, Physics) with the split protocol of "Pitfalls
of Graph Neural Network Evaluation" (Shchur et al. 2018)."""
from __future__ import annotations

import numpy as np
import torch
from torch_geometric import datasets as pyg_datasets
from torch_geometric.transforms import LargestConnectedComponents

from .base import GraphDataModule
from .common import check_split, index_mask, pick, pyg_dataset

TRAIN_PER_CLASS = 20
VAL_PER_CLASS = 30


def pitfalls_split(y: torch.Tensor, seed: int, train_per_class: int = TRAIN_PER_CLASS,
                   val_per_class: int = VAL_PER_CLASS):
    """Boolean (train, val, test) masks: per class, ``train_per_class`` random nodes to train,
    ``val_per_class`` others to validate, the rest to test, drawn from ``seed``."""
    labels = y.numpy()
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        if members.size < train_per_class + val_per_class:
            raise ValueError(f"class {c} has {members.size} nodes, fewer than the "
                             f"{train_per_class} + {val_per_class} the split needs")
        train.append(members[:train_per_class])
        val.append(members[train_per_class:train_per_class + val_per_class])
    n = labels.shape[0]
    train_mask = index_mask(torch.from_numpy(np.concatenate(train)), n)
    val_mask = index_mask(torch.from_numpy(np.concatenate(val)), n)
    return train_mask, val_mask, ~(train_mask | val_mask)


class _PitfallsDataModule(GraphDataModule):
    """The Pitfalls protocol on a graph PyG loads: 20 nodes per class to train, 30 per class
    to validate, every other node to test, at random from the seed ``split`` (any int >= 0;
    the zoo reports splits 0 to 9).

    The paper keeps only each graph's largest connected component. PyG's loaders keep the
    whole graph (the node and edge counts PyG documents), which is what PyG users train on,
    so that is the default here; ``largest_connected_component=True`` gives the paper's
    graphs (Amazon Photo: 7,487 of 7,650 nodes).
    """

    task = "multiclass"
    NAMES: tuple = ()
    pyg_class: type

    def __init__(self, root: str, name: str, split: int = 0, download: bool = True,
                 largest_connected_component: bool = False, **options):
        super().__init__(root, check_split(split), download, **options)
        self.name = pick(name, self.NAMES)
        self.largest_connected_component = largest_connected_component

    def load(self):
        data = pyg_dataset(self.pyg_class, self.root, self.download, name=self.name)[0]
        if self.largest_connected_component:
            data = LargestConnectedComponents()(data)
        data.train_mask, data.val_mask, data.test_mask = pitfalls_split(data.y, self.split)
        return data


class Amazon(_PitfallsDataModule):
    __doc__ = ("Amazon co-purchase graphs (Computers, Photo) through "
               "``torch_geometric.datasets.Amazon``; files ``root/<name>/raw/"
               "amazon_electronics_<name>.npz``.\n\n    " + _PitfallsDataModule.__doc__)
    NAMES = ("Computers", "Photo")
    pyg_class = pyg_datasets.Amazon


class Coauthor(_PitfallsDataModule):
    __doc__ = ("Coauthor graphs (CS, Physics) through ``torch_geometric.datasets.Coauthor``; "
               "files ``root/<name>/raw/ms_academic_<cs|phy>.npz``.\n\n    "
               + _PitfallsDataModule.__doc__)
    NAMES = ("CS", "Physics")
    pyg_class = pyg_datasets.Coauthor
