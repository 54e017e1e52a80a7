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
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
