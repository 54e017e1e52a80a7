"""ogbn-arxiv as a dynamic graph, for the zoo's snapshot models (``arch: gcn-gru``).

A citation arrives in the later of its two papers' years. The window holds ``window`` yearly
snapshots ending in ``last_year``; snapshot ``t`` holds every edge that arrived by year
``last_year - window + 1 + t`` (a prefix of the edges in arrival order). ``edge_attr`` ``[E]``
(int64) is the first snapshot of the window that holds each edge, which is how the snapshot
models read the window; edges newer than ``last_year`` are left out. Task, labels and the
official time split are ogbn-arxiv's.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np
import torch

from .common import missing_files
from .ogb import OGBNodeProp, read_csv


class ArxivByYear(OGBNodeProp):
    """ogbn-arxiv by arrival year (see the module). Options as :class:`OGBNodeProp`'s
    (``random_features`` defaults to 128: the local copies hold the structure only)."""

    def __init__(self, root: str, window: int = 4, last_year: Optional[int] = None,
                 split: int = 0, download: bool = True, random_features: int = 128, **options):
        super().__init__(root, "ogbn-arxiv", split, download, random_features, **options)
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 63:
            raise ValueError(f"window must be an int from 1 to 63, got {window!r}")
        if last_year is not None and (isinstance(last_year, bool) or
                                      not isinstance(last_year, int)):
            raise ValueError(f"last_year must be an int or None, got {last_year!r}")
        self.window, self.last_year = window, last_year

    def load(self):
        data = super().load()
        path = self._raw("node_year")
        if not os.path.exists(path):
            raise missing_files(self.root, [path])
        node_year = torch.from_numpy(read_csv(path, np.int64)[:, 0].copy())
        year = torch.maximum(node_year[data.edge_index[0]], node_year[data.edge_index[1]])
        last = int(year.max()) if self.last_year is None else self.last_year
        arrived = year <= last
        data.edge_index = data.edge_index[:, arrived]
        data.edge_attr = (year[arrived] - (last - self.window + 1)).clamp(min=0)
        return data
