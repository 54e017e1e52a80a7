"""What every fastgnn DGL layer shares: dispatch between the fused path and DGL's own forward,
the per-layer backend, and the input checks of the fused path."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from fastgnn import _adapter
from fastgnn.dgl._graphs import Unsupported, fastgnn_graph
from fastgnn.graph import Graph


class StockRaises(Exception):
    """An input DGL's own forward rejects with its own error (e.g. 0-in-degree nodes): the
    layer runs DGL's forward, without a fallback warning, so that users see that error."""


def graph_of(layer, dgl_graph, check_zero_in_degree: bool = True) -> Graph:
    """The cached fastgnn Graph; DGL's 0-in-degree error stays where the layer raises it."""
    graph = fastgnn_graph(dgl_graph)
    if check_zero_in_degree and not layer._allow_zero_in_degree and graph.cached(
            "has_zero_in_degree", lambda: bool((graph.in_degree == 0).any())):
        raise StockRaises()
    return graph


def split_features(feat, dgl_graph) -> Tuple[torch.Tensor, torch.Tensor]:
    """``dgl.utils.expand_as_pair``: a pair as given; a block's destinations are its first
    sources."""
    if isinstance(feat, tuple):
        return feat
    if dgl_graph.is_block:
        return feat, feat[:dgl_graph.num_dst_nodes()]
    return feat, feat


def check_features(graph: Graph, feat_src, feat_dst, name: str = "feat",
                   two_dim: bool = False) -> None:
    """Float tensors on the graph's device with one row per node, of one dtype (a TypeError
    naming the argument otherwise); other inputs go to DGL's forward, which raises its own."""
    for value, rows in ((feat_src, graph.num_src_nodes), (feat_dst, graph.num_dst_nodes)):
        if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
            raise Unsupported("node features that are not float tensors")
        if value.dim() < 2 or (two_dim and value.dim() != 2) or value.shape[0] != rows:
            raise Unsupported(f"node features of shape {list(value.shape)}")
        if value.device != graph.device:
            raise Unsupported(f"node features on {value.device} with a graph on {graph.device}")
    if feat_dst.dtype != feat_src.dtype:
        raise TypeError(f"{name}[1] has dtype {feat_dst.dtype} but {name}[0] has "
                        f"{feat_src.dtype}; cast them to one dtype")


def scalar_edge_weight(graph: Graph, edge_weight: Optional[torch.Tensor],
                       feat: torch.Tensor) -> Optional[torch.Tensor]:
    """``edge_weight`` (one scalar per edge: [E], or [E, 1, ...] with no more dimensions than
    ``feat``) as the [E] vector fastgnn.ops.spmm takes; DGL broadcasts a wider one into a
    wider output, which runs DGL's own code."""
    if edge_weight is None:
        return None
    if not isinstance(edge_weight, torch.Tensor) or edge_weight.dim() == 0 or \
            edge_weight.shape[0] != graph.num_edges:
        raise StockRaises()  # DGL asserts the size
    if edge_weight.numel() != graph.num_edges or edge_weight.device != graph.device \
            or edge_weight.dim() > max(feat.dim(), 1):
        raise Unsupported(f"edge_weight of shape {list(edge_weight.shape)} on "
                          f"{edge_weight.device}")
    if edge_weight.dtype != feat.dtype:
        raise TypeError(f"edge_weight has dtype {edge_weight.dtype} but feat has {feat.dtype}; "
                        "cast them to one dtype")
    return edge_weight.reshape(-1)


def dropout_rate(dropout: torch.nn.Dropout) -> float:
    return dropout.p if dropout.training else 0.0


class FastLayer:
    """Mixin placed before a DGL layer class: ``forward`` runs ``_fused`` and falls back to
    DGL's forward (with a one-time warning naming the option) when it raises Unsupported."""

    def _fused(self, *args, **kwargs):  # pragma: no cover - every layer defines it
        raise NotImplementedError

    def _dispatch(self, *args, **kwargs):
        try:
            return _adapter.run_fused(self, "fastgnn.dgl.nn", *args, **kwargs)
        except Unsupported as exc:
            _adapter.warn_fallback(f"fastgnn.dgl.nn.{type(self).__name__}", str(exc),
                                   "DGL's own forward")
        except StockRaises:
            pass
        return super().forward(*args, **kwargs)

    def __prepare_scriptable__(self):
        # torch.jit.script calls this first. DGL's layers do not script either (they take a
        # DGLGraph); say so here instead of failing inside our dispatch.
        raise RuntimeError(
            f"fastgnn.dgl.nn.{type(self).__name__} cannot be compiled with torch.jit.script "
            "(DGL's own layers cannot either: their forward takes a DGLGraph). Use "
            "torch.compile, or fastgnn.disable(model) to get the stock layers back.")
