"""Neighbourhood aggregation: sum and mean route to SpMM, min and max to the reduction kernels."""
from __future__ import annotations

import torch

from fastgnn import _validate, backends, reference, reordering
from fastgnn.graph import Graph
from fastgnn.ops import minmax
from fastgnn.ops._common import check_graph
from fastgnn.ops.spmm import spmm

REDUCES = ("sum", "mean", "min", "max")


def aggregate(g: Graph, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """``out[i] = reduce_j x[j]`` over the in-neighbours j of each destination i.

    ``x``: ``[num_src_nodes, *]``. Destinations without in-edges get zeros (and no gradient).
    For min/max, ties go to the smallest source index and NaN propagates, as
    ``torch.scatter_reduce`` with "amin"/"amax" does; so min/max run a reordered graph
    (``Graph.reordered``) in its own node order, with a warning: relabelled ids would pick
    other sources among ties.
    """
    check_graph(g)
    _validate.choice("reduce", reduce, REDUCES)
    if reduce in ("sum", "mean"):
        return spmm(g, x, reduce=reduce)
    _validate.node_features("x", x, g.num_src_nodes, g.device, "num_src_nodes")
    reordering.warn_if_requested(g, f"with reduce={reduce!r} (ties go to the smallest caller id)",
                                 "aggregate")
    impl = backends.select(minmax.OP, x.device)
    return impl.fn(g, x, reduce)


backends.register(minmax.OP, "reference", ("cpu", "cuda"), reference.aggregate, priority=-10)
