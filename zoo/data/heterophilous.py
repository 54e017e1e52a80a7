"""The heterophilous graphs of "A critical look at the evaluation of GNNs under heterophily:
are we really making progress?" (Platonov et al., ICLR 2023), with their 10 splits."""
from __future__ import annotations

from torch_geometric.data import InMemoryDataset
from torch_geometric.datasets import HeterophilousGraphDataset

from .base import GraphDataModule
from .common import check_split, pick, pyg_dataset

#: the graphs PyG's HeterophilousGraphDataset loads
PYG_NAMES = ("roman-empire", "amazon-ratings", "minesweeper", "tolokers", "questions")
#: the benchmark's filtered versions of classic graphs, from the same repository
NPZ_NAMES = ("actor", "squirrel-filtered", "chameleon-filtered")
BINARY = ("minesweeper", "tolokers", "questions")
NUM_SPLITS = 10


class _BenchmarkNpz(HeterophilousGraphDataset):
    """Another npz file of the benchmark repository, read, laid out, downloaded (from
    ``HeterophilousGraphDataset.url``, the repository's ``data`` folder) and processed exactly
    as PyG's ``HeterophilousGraphDataset`` does its five; only the name check differs."""

    def __init__(self, root: str, name: str, force_reload: bool = False):
        self.name = name.replace("-", "_")
        InMemoryDataset.__init__(self, root, force_reload=force_reload)
        self.load(self.processed_paths[0])


class Heterophilous(GraphDataModule):
    """One graph of the heterophily benchmark with split ``split`` (0..9) of its 10 splits.

    ``roman-empire``, ``amazon-ratings``, ``minesweeper``, ``tolokers`` and ``questions`` load
    through ``torch_geometric.datasets.HeterophilousGraphDataset``; ``actor``,
    ``squirrel-filtered`` and ``chameleon-filtered`` are the benchmark's npz files of the same
    repository (https://github.com/yandex-research/heterophilous-graphs, ``data/``), read the
    same way. Every file is ``root/<file>/raw/<file>.npz`` (``<file>``: the name with ``_``
    for ``-``), downloaded from the repository when absent. Edges are made undirected, as PyG
    and the benchmark do.

    ``minesweeper``, ``tolokers`` and ``questions`` are binary tasks scored by ROC-AUC; the
    others are multi-class, scored by accuracy.
    """

    NAMES = PYG_NAMES + NPZ_NAMES

    def __init__(self, root: str, name: str, split: int = 0, download: bool = True, **options):
        super().__init__(root, check_split(split, NUM_SPLITS), download, **options)
        self.name = pick(name, self.NAMES)

    @property
    def task(self) -> str:
        return "binary" if self.name in BINARY else "multiclass"

    def load(self):
        cls = HeterophilousGraphDataset if self.name in PYG_NAMES else _BenchmarkNpz
        data = pyg_dataset(cls, self.root, self.download, name=self.name)[0]
        for key in ("train_mask", "val_mask", "test_mask"):  # [nodes, splits] in PyG's layout
            data[key] = data[key][:, self.split].contiguous()
        return data
