"""Fused graph attention: GATv2 and dot-product (Graph Transformer) attention."""
from __future__ import annotations

from typing import Optional

import torch

from fastgnn import _validate, backends, reference
from fastgnn.graph import Graph
from fastgnn.ops._common import check_graph


def _check_heads(name: str, value: torch.Tensor, rows: int, g: Graph, rows_name: str,
                 heads: Optional[int] = None, dim: Optional[int] = None) -> None:
    _validate.node_features(name, value, rows, g.device, rows_name, dim=3)
    if (heads is not None and value.shape[1] != heads) or (dim is not None and value.shape[2] != dim):
        raise ValueError(f"{name} must have shape [{rows}, {heads}, {dim}], got {list(value.shape)}")


def _check_edge_term(edge_term, g: Graph, heads: int, dim: int) -> None:
    if edge_term is None:
        return
    _validate.float_tensor("edge_term", edge_term)
    if edge_term.device != g.device:
        raise ValueError(f"edge_term is on {edge_term.device} but the graph is on {g.device}")
    if tuple(edge_term.shape) != (g.num_edges, heads, dim):
        raise ValueError(f"edge_term must have shape [{g.num_edges}, {heads}, {dim}], got "
                         f"{list(edge_term.shape)}")


def _check_dropout(dropout: float) -> None:
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")


def gatv2_attention(g: Graph, x_dst: torch.Tensor, x_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2, dropout: float = 0.0, *,
                    edge_term: Optional[torch.Tensor] = None) -> torch.Tensor:
    """GATv2 attention, PyG's GATv2Conv semantics, fused: ``[T,H,D], [S,H,D], [H,D] -> [T,H,D]``.

    ``e_ij = att_h . LeakyReLU(x_dst[i,h] + x_src[j,h] (+ edge_term[e,h]))``, softmax over the
    in-edges of i, ``out[i,h] = sum_j alpha_ij x_src[j,h]``. Attention dropout applies when
    ``dropout > 0`` (callers pass 0 in eval mode). ``edge_term``: ``[E,H,D]``, input edge order.
    """
    check_graph(g)
    _validate.node_features("x_src", x_src, g.num_src_nodes, g.device, "num_src_nodes", dim=3)
    heads, dim = x_src.shape[1], x_src.shape[2]
    _check_heads("x_dst", x_dst, g.num_dst_nodes, g, "num_dst_nodes", heads, dim)
    _validate.float_tensor("att", att)
    if tuple(att.shape) != (heads, dim) or att.device != g.device:
        raise ValueError(f"att must have shape [{heads}, {dim}] on {g.device}, got "
                         f"{list(att.shape)} on {att.device}")
    _check_edge_term(edge_term, g, heads, dim)
    _check_dropout(dropout)
    impl = backends.select("gatv2_attention", x_src.device)
    return impl.fn(g, x_dst, x_src, att, negative_slope=float(negative_slope),
                   dropout=float(dropout), edge_term=edge_term)


def graph_attention(g: Graph, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: Optional[float] = None, dropout: float = 0.0, *,
                    edge_term: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Dot-product graph attention, PyG's TransformerConv semantics, fused.

    ``q [T,H,D]`` on destinations, ``k, v [S,H,D]`` on sources; ``e_ij = scale * q[i].k[j]``
    (scale defaults to 1/sqrt(D)), softmax over the in-edges of i, ``out[i] = sum alpha v[j]``.
    ``edge_term [E,H,D]`` (input edge order) is added to keys and values.
    """
    check_graph(g)
    _validate.node_features("k", k, g.num_src_nodes, g.device, "num_src_nodes", dim=3)
    heads, dim = k.shape[1], k.shape[2]
    _check_heads("v", v, g.num_src_nodes, g, "num_src_nodes", heads, dim)
    _check_heads("q", q, g.num_dst_nodes, g, "num_dst_nodes", heads, dim)
    _check_edge_term(edge_term, g, heads, dim)
    _check_dropout(dropout)
    if scale is not None and not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    impl = backends.select("graph_attention", q.device)
    return impl.fn(g, q, k, v, scale=scale, dropout=float(dropout), edge_term=edge_term)


backends.register("gatv2_attention", "reference", ("cpu", "cuda"), reference.gatv2_attention,
                  priority=-10)
backends.register("graph_attention", "reference", ("cpu", "cuda"), reference.graph_attention,
                  priority=-10)
