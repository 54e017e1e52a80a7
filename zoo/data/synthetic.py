"""CSBM: a contextual stochastic block model, the zoo's built-in dataset (no files, no network).

Nodes get one of ``num_classes`` classes uniformly. Features are the class mean plus standard
Gaussian noise, with class means drawn once from ``N(0, feature_signal**2 / num_channels)``
per coordinate, so one node's features alone classify it poorly. Each node sends
``avg_degree / 2`` edges on average (Poisson); an edge stays in its class with probability
``homophily`` and otherwise goes to a node of another class; the graph is made undirected.
``degree_exponent > 0`` makes the degrees heavy-tailed: the node of rank ``r`` (in a random
order) sends edges at a rate proportional to ``r ** -degree_exponent``, still
``avg_degree / 2`` on average, so a few hubs gather a large share of the edges, as in social
and web graphs.
Averaging over neighbours that mostly share the class cancels the noise: a GNN clearly beats
an MLP there, which ``tests/test_zoo_data.py`` checks.

Everything comes from one ``torch.Generator`` seeded with ``seed``; ``split`` reseeds only the
train/val/test partition.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from fastgnn.zoo.data.base import GraphDataModule


def _check(name: str, value, low, high=None, kind=float) -> None:
    bad = isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int)
    if bad or value < low or (high is not None and value > high):
        span = f"[{low}, {high}]" if high is not None else f">= {low}"
        what = "an int" if kind is int else "a number"
        raise ValueError(f"{name} must be {what} in {span}, got {value!r}")


class CSBM(GraphDataModule):
    """Contextual SBM node classification; ``root`` is unused (nothing is stored)."""

    task = "multiclass"

    def __init__(self, root: Optional[str] = None, split: int = 0, download: bool = True,
                 num_nodes: int = 2000, num_classes: int = 5, num_channels: int = 64,
                 avg_degree: float = 10.0, homophily: float = 0.7, feature_signal: float = 1.5,
                 train_ratio: float = 0.1, val_ratio: float = 0.1, seed: int = 0,
                 degree_exponent: float = 0.0, **options):
        super().__init__(root, split=split, download=download, **options)
        _check("num_nodes", num_nodes, 2, kind=int)
        _check("num_classes", num_classes, 2, num_nodes, kind=int)
        _check("num_channels", num_channels, 1, kind=int)
        _check("avg_degree", avg_degree, 0.0)
        _check("degree_exponent", degree_exponent, 0.0, 2.0)
        _check("homophily", homophily, 0.0, 1.0)
        _check("feature_signal", feature_signal, 0.0)
        _check("train_ratio", train_ratio, 0.0, 1.0)
        _check("val_ratio", val_ratio, 0.0, 1.0 - train_ratio)
        _check("seed", seed, 0, kind=int)
        _check("split", split, 0, kind=int)
        self.num_nodes, self.num_classes, self.num_channels = num_nodes, num_classes, num_channels
        self.avg_degree, self.homophily, self.feature_signal = avg_degree, homophily, feature_signal
        self.train_ratio, self.val_ratio, self.seed = train_ratio, val_ratio, seed
        self.degree_exponent = degree_exponent

    def load(self) -> Data:
        gen = torch.Generator().manual_seed(self.seed)
        n, c = self.num_nodes, self.num_classes
        y = torch.randint(0, c, (n,), generator=gen)
        means = torch.randn(c, self.num_channels, generator=gen)
        means *= self.feature_signal / self.num_channels ** 0.5
        x = means[y] + torch.randn(n, self.num_channels, generator=gen)
        return Data(x=x, y=y, edge_index=self._edges(y, gen), **self._masks())

    def _edges(self, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        n, c = self.num_nodes, self.num_classes
        rate = torch.full((n,), self.avg_degree / 2)
        if self.degree_exponent > 0:  # rank r's rate ~ r^-exponent, ranks in a random order
            weight = torch.arange(1, n + 1, dtype=torch.float64).pow(-self.degree_exponent)
            weight = weight[torch.randperm(n, generator=gen)]
            rate = (weight * (n * self.avg_degree / 2 / weight.sum())).float()
        src = torch.repeat_interleave(torch.arange(n), torch.poisson(rate, generator=gen).long())
        # Destination class: the source's with probability homophily, else another one.
        same = torch.rand(src.numel(), generator=gen) < self.homophily
        shift = torch.randint(1, c, (src.numel(),), generator=gen)
        dst_class = torch.where(same, y[src], (y[src] + shift) % c)
        # A uniform node of that class: sort nodes by class, index into the class's block.
        order = torch.argsort(y, stable=True)
        counts = torch.bincount(y, minlength=c)
        starts = torch.cumsum(counts, 0) - counts
        pick = (torch.rand(src.numel(), generator=gen) * counts[dst_class]).long()
        dst = order[starts[dst_class] + pick]
        edge_index, _ = remove_self_loops(torch.stack([src, dst]))
        return coalesce(to_undirected(edge_index, num_nodes=n), num_nodes=n)

    def _masks(self) -> dict:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.split + 1)
        perm = torch.randperm(self.num_nodes, generator=gen)
        num_train = max(1, round(self.train_ratio * self.num_nodes))
        num_val = round(self.val_ratio * self.num_nodes)
        masks = {}
        for name, part in (("train_mask", perm[:num_train]),
                           ("val_mask", perm[num_train:num_train + num_val]),
                           ("test_mask", perm[num_train + num_val:])):
            mask = torch.zeros(self.num_nodes, dtype=torch.bool)
            mask[part] = True
            masks[name] = mask
        return masks
