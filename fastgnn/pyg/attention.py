"""Attention layers on fastgnn's fused attention ops: GATConv, GATv2Conv and TransformerConv."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.utils import scatter

from fastgnn import ops
from fastgnn._gat_layer import gat_layer
from fastgnn._gat_scores import destination_scores, gat_scores
from fastgnn.pyg import compiled
from fastgnn.pyg._base import (FastLayer, cast, check_device, check_features, common_dtype,
                               parameter, split_pair)
from fastgnn.pyg.structure import Structure, Unsupported, as_edges, resolve


def _deferred(op: str, edge_index, edge_attr, *xs: torch.Tensor) -> bool:
    """Whether the call runs on ``compiled.attention_op``: under torch.compile, without edge
    features (their per-edge inputs follow the Structure's edge order)."""
    if edge_attr is not None or not compiled.applies(edge_index, op, xs[0].device):
        return False
    check_device(edge_index.device, *xs)
    return True


def _dropout(layer) -> float:
    """The layer's attention dropout: none in eval mode."""
    return layer.dropout if layer.training else 0.0


def _attention_edges(edge_index):
    edges = as_edges(edge_index)
    if edges.is_sparse:
        raise Unsupported("a sparse adjacency")
    return edges


def _loop_attr(structure: Structure, kept_attr: torch.Tensor, fill_value) -> torch.Tensor:
    """Features of the added self-loops, as PyG's add_self_loops computes them from the
    remaining edges."""
    size = (structure.num_loops,) + tuple(kept_attr.shape[1:])
    if fill_value is None:
        return kept_attr.new_ones(size)
    if isinstance(fill_value, (int, float)):
        return kept_attr.new_full(size, fill_value)
    if isinstance(fill_value, torch.Tensor):
        loop = fill_value.to(kept_attr.device, kept_attr.dtype)
        if kept_attr.dim() != loop.dim():
            loop = loop.unsqueeze(0)
        return loop.expand(size).contiguous()
    return scatter(kept_attr, structure.kept_dst, 0, structure.num_loops, fill_value)


def _heads_out(layer, out: torch.Tensor) -> torch.Tensor:
    return out.reshape(-1, layer.heads * layer.out_channels) if layer.concat else out.mean(dim=1)


def _gat_out(layer, out: torch.Tensor, residual: Optional[torch.Tensor]) -> torch.Tensor:
    """The GAT layers' output: heads concatenated or averaged, then residual and bias."""
    out = _heads_out(layer, out)
    if residual is not None:
        out = out + residual
    bias = parameter(layer, "bias")
    return out if bias is None else out + bias


def _looped_structure(layer, edges, num_src: int, num_dst: int) -> Structure:
    """The structure PyG's GAT layers attend over: with add_self_loops, existing loops are
    replaced by one per node below min(S, T)."""
    if layer.add_self_loops:
        return resolve(edges, num_src, num_dst, "replace", min(num_src, num_dst))
    return resolve(edges, num_src, num_dst)


def _edge_features(layer, structure: Structure, edges, edge_attr) -> torch.Tensor:
    """edge_attr on the structure's edges ([E, edge_dim]), the added self-loops' filled in
    as PyG's add_self_loops does with ``layer.fill_value``."""
    extend = None
    if layer.add_self_loops:
        def extend(attr):
            kept = attr[structure.kept]
            return torch.cat([kept, _loop_attr(structure, kept, layer.fill_value)])
    attr = structure.per_edge(edges, "edge_attr", edge_attr, extend)
    return attr.view(-1, 1) if attr.dim() == 1 else attr


class GATConv(FastLayer, pyg_nn.GATConv):
    """:class:`torch_geometric.nn.GATConv` on ``fastgnn.ops.gat_attention``.

    The edge term ``att_edge . lin_edge(edge_attr)`` is computed as ``edge_attr @ M`` with
    ``M [edge_dim, H]`` folded from ``lin_edge.weight`` and ``att_edge``: no E x H x C tensor.
    """

    summing_aggrs = ("add", "sum")

    def forward(self, x, edge_index, edge_attr: Optional[torch.Tensor] = None, size=None,
                return_attention_weights=None):
        return self._dispatch(x, edge_index, edge_attr, size, return_attention_weights)

    def _fused(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        if return_attention_weights:
            raise Unsupported("return_attention_weights=True")
        if size is not None:
            raise Unsupported("an explicit size")
        heads, channels = self.heads, self.out_channels
        x_src, x_dst = split_pair(x)
        if x_dst is None:
            raise Unsupported("destination features None")
        check_features(x_src, x_dst)
        deferred = _deferred("gat_attention", edge_index, edge_attr, x_src, x_dst)
        if not deferred:
            edges = _attention_edges(edge_index)
            structure = _looped_structure(self, edges, x_src.size(0), x_dst.size(0))

        residual = self.res(x_dst) if self.res is not None else None
        att_src, att_dst = parameter(self, "att_src"), parameter(self, "att_dst")
        lin = self.lin
        if lin is not None and isinstance(x, torch.Tensor):  # both scores from one projection
            lin_src, atts, alpha_dst = lin, (att_src, att_dst), None
        else:
            lin_src, lin_dst = (lin, lin) if lin is not None else (self.lin_src, self.lin_dst)
            atts = (att_src,)
            alpha_dst = destination_scores(x_dst, lin_dst, heads, att_dst)
        alpha_edge = None
        lin_edge = self.lin_edge
        if edge_attr is not None and lin_edge is not None:  # PyG ignores edge_attr otherwise
            attr = _edge_features(self, structure, edges, edge_attr)
            weight = parameter(lin_edge, "weight").view(heads, channels, -1)
            fold = (weight * parameter(self, "att_edge").view(heads, channels, 1)).sum(dim=1)
            alpha_edge = attr.to(fold.dtype) @ fold.t()
        if not deferred:
            out = gat_layer(structure.graph, x_src, lin_src, heads, atts, alpha_dst,
                            self.negative_slope, _dropout(self), alpha_edge)
            if out is not None:
                return _gat_out(self, out, residual)
        h_src, alpha_src, *dst_scores = gat_scores(x_src, lin_src, heads, *atts)
        alpha_dst = dst_scores[0] if alpha_dst is None else alpha_dst
        dtype = common_dtype(h_src, alpha_src, alpha_dst, alpha_edge)
        if deferred:
            out = compiled.attention_op("gat_attention", edge_index, (
                cast(alpha_dst, dtype), cast(h_src, dtype), cast(alpha_src, dtype)),
                self.negative_slope, self.add_self_loops, _dropout(self))
            return _gat_out(self, out, residual)
        out = ops.gat_attention(structure.graph, cast(h_src, dtype), cast(alpha_src, dtype),
                                cast(alpha_dst, dtype), self.negative_slope, _dropout(self),
                                alpha_edge=cast(alpha_edge, dtype))
        return _gat_out(self, out, residual)


class GATv2Conv(FastLayer, pyg_nn.GATv2Conv):
    """:class:`torch_geometric.nn.GATv2Conv` on ``fastgnn.ops.gatv2_attention``."""

    summing_aggrs = ("add", "sum")

    def forward(self, x, edge_index, edge_attr: Optional[torch.Tensor] = None,
                return_attention_weights=None):
        return self._dispatch(x, edge_index, edge_attr, return_attention_weights)

    def _fused(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        if return_attention_weights:
            raise Unsupported("return_attention_weights=True")
        heads, channels = self.heads, self.out_channels
        x_src, x_dst = split_pair(x)
        if x_dst is None:
            raise Unsupported("destination features None")
        check_features(x_src, x_dst)
        if edge_attr is not None and self.lin_edge is None:
            raise Unsupported("edge_attr without edge_dim")
        deferred = _deferred("gatv2_attention", edge_index, edge_attr, x_src, x_dst)
        if not deferred:
            edges = _attention_edges(edge_index)
            structure = _looped_structure(self, edges, x_src.size(0), x_dst.size(0))

        residual = self.res(x_dst) if self.res is not None else None
        x_l = self.lin_l(x_src).view(-1, heads, channels)
        if isinstance(x, torch.Tensor) and self.share_weights:
            x_r = x_l
        else:
            x_r = self.lin_r(x_dst).view(-1, heads, channels)
        edge_term = None
        if edge_attr is not None:
            attr = _edge_features(self, structure, edges, edge_attr)
            edge_term = self.lin_edge(attr).view(-1, heads, channels)
        att = self.att.view(heads, channels)
        dtype = common_dtype(x_l, x_r, att, edge_term)
        if deferred:
            out = compiled.attention_op("gatv2_attention", edge_index, (
                cast(x_r, dtype), cast(x_l, dtype), cast(att, dtype)), self.negative_slope,
                self.add_self_loops, _dropout(self))
            return _gat_out(self, out, residual)
        out = ops.gatv2_attention(structure.graph, cast(x_r, dtype), cast(x_l, dtype),
                                  cast(att, dtype), self.negative_slope, _dropout(self),
                                  edge_term=cast(edge_term, dtype))
        return _gat_out(self, out, residual)


class TransformerConv(FastLayer, pyg_nn.TransformerConv):
    """:class:`torch_geometric.nn.TransformerConv` on ``fastgnn.ops.graph_attention``."""

    summing_aggrs = ("add", "sum")

    def forward(self, x, edge_index, edge_attr: Optional[torch.Tensor] = None,
                return_attention_weights=None):
        return self._dispatch(x, edge_index, edge_attr, return_attention_weights)

    def _fused(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        if isinstance(return_attention_weights, bool):
            raise Unsupported("return_attention_weights")
        if (edge_attr is None) != (self.lin_edge is None):
            raise Unsupported("edge_attr without edge_dim" if self.lin_edge is None
                              else "edge_dim without edge_attr")
        heads, channels = self.heads, self.out_channels
        x_src, x_dst = split_pair(x)
        if x_dst is None:
            raise Unsupported("destination features None")
        check_features(x_src, x_dst)
        deferred = _deferred("graph_attention", edge_index, edge_attr, x_src, x_dst)
        if not deferred:
            structure = resolve(_attention_edges(edge_index), x_src.size(0), x_dst.size(0))

        query = self.lin_query(x_dst).view(-1, heads, channels)
        key = self.lin_key(x_src).view(-1, heads, channels)
        value = self.lin_value(x_src).view(-1, heads, channels)
        edge_term = None
        if self.lin_edge is not None:
            edge_term = self.lin_edge(edge_attr).view(-1, heads, channels)
        dtype = common_dtype(query, key, value, edge_term)
        features = (cast(query, dtype), cast(key, dtype), cast(value, dtype))
        if deferred:
            out = compiled.attention_op("graph_attention", edge_index, features,
                                        1.0 / math.sqrt(channels), False, _dropout(self))
        else:
            out = ops.graph_attention(structure.graph, *features,
                                      scale=1.0 / math.sqrt(channels),
                                      dropout=_dropout(self),
                                      edge_term=cast(edge_term, dtype))
        out = _heads_out(self, out)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        return out
