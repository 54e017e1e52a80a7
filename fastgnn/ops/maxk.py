"""MaxK nonlinearity and SpMM over its sparse output (MaxK-GNN)."""
from __future__ import annotations

from typing import Optional

import torch

from fastgnn import _validate, backends, reference
from fastgnn.graph import NORMS, Graph
from fastgnn.ops._common import check_graph
from fastgnn.ops.spmm import REDUCES


def _check_k(k, width: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 1 <= k <= width:
        raise ValueError(f"k must be in [1, {width}] (the feature width), got {k}")


def maxk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Keeps the ``k`` largest entries of each row of ``x`` ([N, F]) and zeroes the others."""
    _validate.float_tensor("x", x)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [N, F], got shape {list(x.shape)}")
    _check_k(k, x.shape[1])
    return backends.select("maxk", x.device).fn(x, k)


def maxk_spmm(g: Graph, x: torch.Tensor, k: int, norm: str = "none",
              edge_weight: Optional[torch.Tensor] = None, reduce: str = "sum") -> torch.Tensor:
    """``spmm(g, maxk(x, k), norm, edge_weight, reduce)`` without densifying MaxK's output."""
    check_graph(g)
    _validate.node_features("x", x, g.num_src_nodes, g.device, "num_src_nodes", dim=2)
    _check_k(k, x.shape[1])
    _validate.choice("norm", norm, NORMS)
    _validate.choice("reduce", reduce, REDUCES)
    if edge_weight is not None:
        _validate.edge_values("edge_weight", edge_weight, g.num_edges, g.device)
    impl = backends.select("maxk_spmm", x.device)
    return impl.fn(g, x, k, norm=norm, edge_weight=edge_weight, reduce=reduce)


backends.register("maxk", "reference", ("cpu", "cuda"), reference.maxk, priority=-10)
backends.register("maxk_spmm", "reference", ("cpu", "cuda"), reference.maxk_spmm, priority=-10)
