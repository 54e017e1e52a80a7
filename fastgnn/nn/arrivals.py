"""Dynamic graphs built from a static one by edge arrival order: each snapshot is a prefix
of the edges (ogbn-arxiv: a citation arrives with the later of its two papers' years)."""
from __future__ import annotations

import gzip
import os
from typing import List, Tuple

import numpy as np
import torch

from fastgnn import datasets


def arxiv_by_year() -> Tuple[torch.Tensor, torch.Tensor, int]:
    """``(edge_index, edge_year, num_nodes)`` of ogbn-arxiv, both directions of every
    citation, sorted by arrival year (stable: file order within a year)."""
    graph = datasets.ogbn_arxiv()
    with gzip.open(os.path.join(datasets.data_root(), "ogbn_arxiv_structure", "raw",
                                "node_year.csv.gz")) as f:
        node_year = torch.from_numpy(np.loadtxt(f, dtype=np.int64).reshape(-1))
    edges = graph.edge_index
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    year = torch.maximum(node_year[edges[0]], node_year[edges[1]])
    order = torch.sort(year, stable=True).indices
    return edges[:, order], year[order], graph.num_nodes


def prefix_window(edge_index: torch.Tensor, snapshots: int, overlap: float) -> List[torch.Tensor]:
    """``snapshots`` prefixes of ``edge_index`` (arrival order), evenly spaced, the last one
    every edge and the first ``overlap`` of them: the window's shared edges are ``overlap`` of
    its distinct ones."""
    total = edge_index.shape[1]
    sizes = np.linspace(overlap * total, total, snapshots).round().astype(np.int64)
    return [edge_index[:, :int(n)] for n in sizes]


def year_snapshots(edge_index: torch.Tensor, edge_year: torch.Tensor,
                   years) -> List[torch.Tensor]:
    """The snapshot of each year in ``years``: every edge that arrived by then."""
    return [edge_index[:, : int(torch.searchsorted(edge_year, int(y), right=True))]
            for y in years]
