"""Checks and helpers shared by the op modules."""
from __future__ import annotations

from typing import Optional

import torch

from fastgnn.graph import Graph


def check_graph(g) -> Graph:
    if not isinstance(g, Graph):
        raise TypeError(f"g must be a fastgnn.Graph, got {type(g).__name__} (build one with "
                        "fastgnn.Graph.from_edge_index)")
    return g


def forward_fake(a: torch.Tensor, b: torch.Tensor):
    """``(out, lse)`` shaped as a native attention forward's on destination features ``a`` and
    source features ``b`` ([nodes, heads, dim])."""
    out = b.new_empty((a.shape[0], b.shape[1], b.shape[2]))
    return out, a.new_empty((a.shape[0], b.shape[1]), dtype=acc_dtype(b.dtype))


def edge_perm_index(g: Graph) -> Optional[torch.Tensor]:
    """``g.edge_perm`` in the graph's index dtype, as the native ops take it (None: identity)."""
    if g.edge_perm is None:
        return None
    return g.cached("edge_perm_index", lambda: g.edge_perm.to(g.index_dtype))


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation and edge-value dtype for a feature dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def wants_grad(*tensors) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(generator): this runs on every op call
        if t is not None and t.requires_grad:
            return True
    return False
