"""Neighbourhood aggregation: sum and mean route to SpMM, min and max to the reduction kernels."""
from __future__ import annotations

from typing import Optional

import torch

from fastgnn import _validate, backends, reference, reordering
from fastgnn.graph import Graph
from fastgnn.ops import minmax
from fastgnn.ops._common import check_graph
from fastgnn.ops.spmm import spmm

REDUCES = ("sum", "mean", "min", "max")


def aggregate(g: Graph, x: torch.Tensor, reduce: str = "sum",
              edge_weight: Optional[torch.Tensor] = None,
              ties: str = "smallest-source", nan: str = "propagate") -> torch.Tensor:
    """``out[i] = reduce_j w_ji * x[j]`` over the in-neighbours j of each destination i.

    ``x``: ``[num_src_nodes, *]``. ``edge_weight`` (optional, input edge order, gets a
    gradient): ``[E]``, one multiplier per edge, or ``[E, H]``, one per edge and head, with
    ``x`` of shape ``[num_src_nodes, H, *]`` (each head's features times its own weight).
    Destinations without in-edges get zeros (and no gradient).
    For min/max, ties go to the smallest source index (then, among duplicate edges, the
    earliest) and NaN propagates, as ``torch.scatter_reduce`` with "amin"/"amax" does; so
    min/max run a reordered graph (``Graph.reordered``) in its own node order, with a warning:
    relabelled ids would pick other sources among ties. ``ties="first-edge"`` or
    ``"last-edge"`` gives equal messages to the smallest or largest input edge id instead
    (DGL's rules; see ``fastgnn.dgl``). The whole gradient of an output entry goes to its
    winning message: its source (times the edge's weight) and its edge.
    ``nan="ignore"`` reduces as DGL 2.1 does: every entry starts from the identity (-inf for
    max, +inf for min) and a message replaces the held value when it is greater (less), or with
    ``ties="last-edge"`` greater or equal; comparisons with NaN are false. So NaN messages never
    win, and entries that no message wins (no in-edges, only NaN messages, ...) keep the
    identity, their gradient going to node 0 (times edge 0's weight) and edge 0 (times node 0's
    features), where DGL's goes.
    """
    check_graph(g)
    _validate.choice("reduce", reduce, REDUCES)
    _validate.choice("ties", ties, minmax.TIES)
    _validate.choice("nan", nan, minmax.NANS)
    if edge_weight is not None:
        _validate.tensor("edge_weight", edge_weight)
    if reduce in ("sum", "mean") and (edge_weight is None or edge_weight.dim() == 1):
        return spmm(g, x, edge_weight=edge_weight, reduce=reduce)
    _validate.node_features("x", x, g.num_src_nodes, g.device, "num_src_nodes")
    if edge_weight is not None:
        _check_weight(g, x, edge_weight)
    if reduce in ("sum", "mean"):
        return torch.stack([spmm(g, x[:, h], edge_weight=edge_weight[:, h], reduce=reduce)
                            for h in range(edge_weight.shape[1])], dim=1)
    reordering.warn_if_requested(g, f"with reduce={reduce!r} (ties go to the smallest caller id)",
                                 "aggregate")
    impl = backends.select(minmax.OP, x.device)
    if edge_weight is None and ties == "smallest-source" and nan == "propagate":
        return impl.fn(g, x, reduce)
    return impl.fn(g, x, reduce, edge_weight=edge_weight, ties=ties, nan=nan)


def _check_weight(g: Graph, x: torch.Tensor, edge_weight: torch.Tensor) -> None:
    _validate.float_tensor("edge_weight", edge_weight)
    if edge_weight.device != g.device:
        raise ValueError(f"edge_weight is on {edge_weight.device} but the graph is on {g.device}")
    heads_ok = edge_weight.dim() == 2 and x.dim() >= 2 and edge_weight.shape[1] == x.shape[1]
    if edge_weight.shape[:1] != (g.num_edges,) or not (edge_weight.dim() == 1 or heads_ok):
        raise ValueError(f"edge_weight must have shape [{g.num_edges}] (one value per edge) or "
                         f"[{g.num_edges}, H] with x of shape [num_src_nodes, H, ...] (one per "
                         f"edge and head), got {list(edge_weight.shape)} with x "
                         f"{list(x.shape)}")


backends.register(minmax.OP, "reference", ("cpu", "cuda"), reference.aggregate, priority=-10)
