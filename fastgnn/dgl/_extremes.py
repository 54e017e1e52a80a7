"""DGL 2.1's max/min of messages: as ``dgl.ops`` gives it, and as ``update_all`` (and so the
layers) gives it.

Its kernels (CPU generic, CPU libxsmm, CUDA) start every entry from -inf (max; +inf for min)
with node 0 and edge 0 as its winners and take a message only when a float comparison says so,
which is false for NaN: ``fastgnn.ops.aggregate(..., nan="ignore")``. ``update_all`` then
replaces every infinite result with 0 (``F.replace_inf_with_zero``, a masked fill: no gradient
there): destinations without in-edges, entries whose messages are all NaN, and genuine +-inf
maxima alike. On a graph without edges DGL runs no kernel and keeps the zeros it allocated,
whose gradient still goes to node 0 through the zero-filled winners.

DGL's CUDA kernels start float16 max from -65504 (min: +65504), the largest finite half, not
from -inf (its ``functor.cuh``): there a message must beat that limit, so an entry whose
messages are all -inf or -65504 (or NaN, or none) keeps -65504 and node 0 and edge 0 as its
winners, and ``update_all`` does not mask it (it is finite). bfloat16 and the CPU start from
-inf.
"""
from __future__ import annotations

from typing import Optional

import torch

from fastgnn import ops
from fastgnn._minmax_unwon import from_half_limit
from fastgnn.graph import Graph
from fastgnn.ops.minmax import weight_matrix


class _ZerosPassingGrad(torch.autograd.Function):
    """Zeros shaped as ``out``, whose gradient goes to ``out`` unchanged."""

    @staticmethod
    def forward(ctx, out):
        return torch.zeros_like(out)

    @staticmethod
    def backward(ctx, grad):
        return grad


def dgl_extremes(graph: Graph, x: torch.Tensor, reduce: str, ties: str,
                 edge_weight: Optional[torch.Tensor] = None,
                 update_all: bool = False) -> torch.Tensor:
    """Max or min (``reduce``) of ``x`` (times ``edge_weight``) over each destination's
    in-edges, with DGL's tie rule ``ties`` (``fastgnn.dgl._ties``): as ``dgl.ops`` gives it
    (+-inf where no message won), or with ``update_all`` as ``update_all`` gives it."""
    out = ops.aggregate(graph, x, reduce, edge_weight=edge_weight, ties=ties, nan="ignore")
    if graph.num_edges == 0:
        return _ZerosPassingGrad.apply(out)
    if starts_at_half_limit(out):  # a DGL CUDA quirk, kept out of aggregate's kernels
        weight = None if edge_weight is None else weight_matrix(graph, edge_weight, x.dtype)
        out = from_half_limit(out, x, weight, reduce)
    return out.masked_fill(out.isinf(), 0) if update_all else out


def starts_at_half_limit(out: torch.Tensor) -> bool:
    """Whether DGL's kernel for ``out`` starts from the float16 limit (CUDA, float16)."""
    return out.is_cuda and out.dtype == torch.float16
