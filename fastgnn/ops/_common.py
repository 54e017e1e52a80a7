"""Checks and helpers shared by the op modules."""
from __future__ import annotations

import torch

from fastgnn.graph import Graph


def check_graph(g) -> Graph:
    if not isinstance(g, Graph):
        raise TypeError(f"g must be a fastgnn.Graph, got {type(g).__name__} (build one with "
                        "fastgnn.Graph.from_edge_index)")
    return g


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
