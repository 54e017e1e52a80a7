"""GCN followed by a GRU over the snapshots of a dynamic graph (T-GCN / MPNN-LSTM style), on
``fastgnn.nn.SnapshotGCNGRU``: every snapshot's GCN aggregation in one
``fastgnn.ops.spmm_snapshots`` call, whatever the zoo backend.

It takes the zoo's ``(x, edge_index, edge_attr)`` with ``edge_attr`` ``[E]`` the first
snapshot that holds each edge (0 to T-1, as :class:`fastgnn.zoo.data.ArxivByYear` gives it):
snapshot ``t`` holds the edges whose ``edge_attr`` is at most ``t``; without ``edge_attr``
the graph is one snapshot. ``x`` ``[N, F]`` is shared by every snapshot (static node
features).
"""
from __future__ import annotations

import weakref

import torch
from torch import nn

from fastgnn.nn import SnapshotGCNGRU
from fastgnn.snapshots import SnapshotGraph

_SUPPORTED = {"heads": 1, "residual": False, "norm": "none", "input_mlp": False,
              "output_mlp": False, "input_dropout": 0.0, "feed_forward": False}


class GCNGRU(nn.Module):
    """``SnapshotGCNGRU`` for the zoo. The backbone options every zoo model takes are accepted
    at the values this model has (one head, no residual, norm, MLPs or feed-forward blocks);
    others are an error."""

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 64,
                 num_layers: int = 2, dropout: float = 0.5, heads: int = 1,
                 residual: bool = False, norm: str = "none", input_mlp: bool = False,
                 output_mlp: bool = False, input_dropout: float = 0.0,
                 feed_forward: bool = False):
        super().__init__()
        given = {"heads": heads, "residual": residual, "norm": norm, "input_mlp": input_mlp,
                 "output_mlp": output_mlp, "input_dropout": input_dropout,
                 "feed_forward": feed_forward}
        for name, value in given.items():
            if value != _SUPPORTED[name]:
                raise ValueError(f"gcn-gru does not support {name}={value!r}")
        self.net = SnapshotGCNGRU(in_channels, hidden_channels, out_channels, num_layers,
                                  dropout)
        self._window = None  # (edge_index, edge_attr) weakrefs, their versions, SnapshotGraph

    def snapshots(self, edge_index: torch.Tensor, edge_attr, num_nodes: int) -> SnapshotGraph:
        """The window of ``edge_index`` by ``edge_attr`` (None: one snapshot of every edge),
        built once per pair of tensors (the dataset's, passed every epoch) and rebuilt when
        either changes."""
        if edge_attr is not None and (
                not isinstance(edge_attr, torch.Tensor) or edge_attr.dim() != 1 or
                edge_attr.is_floating_point() or edge_attr.shape[0] != edge_index.shape[1]):
            raise ValueError("gcn-gru reads edge_attr as the first snapshot of each edge: an "
                             "integer [E] tensor (a dynamic-graph data module such as "
                             "fastgnn.zoo.data.ArxivByYear), or None for a static graph")
        key = (edge_index, edge_attr)
        versions = tuple(t._version for t in key if t is not None)
        if self._window is not None:
            refs, cached_versions, graph = self._window
            if all(ref() is t for ref, t in zip(refs, key) if t is not None) and \
                    versions == cached_versions and graph.num_nodes == num_nodes:
                return graph
        if edge_attr is None:
            lists = [edge_index]
        else:
            first = edge_attr.to(torch.int64)
            if first.numel() and int(first.min()) < 0:
                raise ValueError("edge_attr (each edge's first snapshot) must be >= 0")
            count = int(first.max()) + 1 if first.numel() else 1
            lists = [edge_index[:, first <= t] for t in range(count)]
        graph = SnapshotGraph(lists, num_nodes, device=edge_index.device)
        self._window = ([weakref.ref(t) if t is not None else None for t in key], versions,
                        graph)
        return graph

    def forward(self, x, edge_index, edge_attr=None):
        return self.net(self.snapshots(edge_index, edge_attr, x.shape[0]), x)
