"""Planetoid citation graphs (Cora, CiteSeer, PubMed) with their public split."""
from __future__ import annotations

from torch_geometric import datasets as pyg_datasets
from torch_geometric.transforms import NormalizeFeatures

from .base import GraphDataModule
from .common import check_split, pick, pyg_dataset


class Planetoid(GraphDataModule):
    """Cora, CiteSeer or PubMed (Yang et al. 2016) through ``torch_geometric.datasets.Planetoid``
    with the public split (20 nodes per class to train, 500 to validate, 1,000 to test); the
    only split is 0.

    Files: ``root/<name>/raw/ind.<name>.*``, downloaded there from the Planetoid repository
    as PyG does. Features are row-normalized, as in the GCN paper and PyG's examples, unless
    ``normalize_features`` is false.
    """

    task = "multiclass"
    NAMES = ("Cora", "CiteSeer", "PubMed")

    def __init__(self, root: str, name: str, split: int = 0, download: bool = True,
                 normalize_features: bool = True, **options):
        super().__init__(root, check_split(split, 1), download, **options)
        self.name = pick(name, self.NAMES)
        self.normalize_features = normalize_features

    def load(self):
        transform = NormalizeFeatures() if self.normalize_features else None
        dataset = pyg_dataset(pyg_datasets.Planetoid, self.root, self.download,
                              name=self.name, split="public", transform=transform)
        return dataset[0]
