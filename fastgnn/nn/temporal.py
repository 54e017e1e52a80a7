"""A GCN followed by a GRU over a window of snapshots (T-GCN / MPNN-LSTM style).

Every snapshot of the window is convolved in one ``fastgnn.ops.spmm_snapshots`` call (each
with its own degree normalisation), then each node's sequence of T embeddings runs through a
GRU; the last hidden state is the node's output.
"""
from __future__ import annotations

import torch

from fastgnn.ops.snapshots import spmm_snapshots
from fastgnn.snapshots import SnapshotGraph


class SnapshotGCNConv(torch.nn.Module):
    """GCN convolution of every snapshot: ``out[t] = D_t^-1/2 A_t D_t^-1/2 xs[t] W + b``
    (``norm="both"``; add self-loops to the snapshots for Kipf and Welling's exact GCN).

    ``xs`` is ``[T, N, in]``, or ``[N, in]`` node features shared by every snapshot (static
    features): then ``x W`` is computed once and every snapshot aggregates that one copy."""

    def __init__(self, in_channels: int, out_channels: int, norm: str = "both",
                 bias: bool = True):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.norm = norm

    def forward(self, sg: SnapshotGraph, xs: torch.Tensor) -> torch.Tensor:
        h = self.lin(xs)
        if xs.dim() == 2:
            h = h.expand(sg.num_snapshots, -1, -1)  # stride 0: read once per edge
        out = spmm_snapshots(sg, h, self.norm)
        return out if self.bias is None else out + self.bias


class SnapshotGCNGRU(torch.nn.Module):
    """``num_layers`` SnapshotGCNConv layers (ReLU between), a GRU over the T snapshots, and a
    linear read-out of the last hidden state: ``[T, N, in]`` (or static ``[N, in]``) ``->
    [N, out]``."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.0):
        super().__init__()
        widths = [in_channels] + [hidden_channels] * num_layers
        self.convs = torch.nn.ModuleList(SnapshotGCNConv(a, b) for a, b in zip(widths, widths[1:]))
        self.gru = torch.nn.GRU(hidden_channels, hidden_channels)
        self.out = torch.nn.Linear(hidden_channels, out_channels)
        self.dropout = dropout

    def forward(self, sg: SnapshotGraph, xs: torch.Tensor) -> torch.Tensor:
        h = xs
        for conv in self.convs:
            h = torch.nn.functional.dropout(conv(sg, h).relu(), self.dropout, self.training)
        _, last = self.gru(h)  # h is [T, N, hidden]: the GRU's (sequence, batch, feature)
        return self.out(last[-1])
