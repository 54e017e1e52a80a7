"""Attention layers on fastgnn's fused attention ops: GATv2Conv and TransformerConv."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.utils import scatter

from fastgnn import ops
from fastgnn.pyg._base import FastLayer, cast, check_features, common_dtype, split_pair
from fastgnn.pyg.structure import Structure, Unsupported, as_edges, resolve


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


class GATv2Conv(FastLayer, pyg_nn.GATv2Conv):
    """:class:`torch_geometric.nn.GATv2Conv` on ``fastgnn.ops.gatv2_attention``."""

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
        edges = _attention_edges(edge_index)
        num_src, num_dst = x_src.size(0), x_dst.size(0)
        if self.add_self_loops:
            structure = resolve(edges, num_src, num_dst, "replace", min(num_src, num_dst))
        else:
            structure = resolve(edges, num_src, num_dst)

        residual = self.res(x_dst) if self.res is not None else None
        x_l = self.lin_l(x_src).view(-1, heads, channels)
        if isinstance(x, torch.Tensor) and self.share_weights:
            x_r = x_l
        else:
            x_r = self.lin_r(x_dst).view(-1, heads, channels)
        edge_term = None
        if edge_attr is not None:
            extend = None
            if self.add_self_loops:
                def extend(attr):
                    kept = attr[structure.kept]
                    return torch.cat([kept, _loop_attr(structure, kept, self.fill_value)])
            attr = structure.per_edge(edges, "edge_attr", edge_attr, extend)
            if attr.dim() == 1:
                attr = attr.view(-1, 1)
            edge_term = self.lin_edge(attr).view(-1, heads, channels)
        att = self.att.view(heads, channels)
        dtype = common_dtype(x_l, x_r, att, edge_term)
        out = ops.gatv2_attention(structure.graph, cast(x_r, dtype), cast(x_l, dtype),
                                  cast(att, dtype), self.negative_slope,
                                  self.dropout if self.training else 0.0,
                                  edge_term=cast(edge_term, dtype))
        out = _heads_out(self, out)
        if residual is not None:
            out = out + residual
        return out if self.bias is None else out + self.bias


class TransformerConv(FastLayer, pyg_nn.TransformerConv):
    """:class:`torch_geometric.nn.TransformerConv` on ``fastgnn.ops.graph_attention``."""

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
        edges = _attention_edges(edge_index)
        structure = resolve(edges, x_src.size(0), x_dst.size(0))

        query = self.lin_query(x_dst).view(-1, heads, channels)
        key = self.lin_key(x_src).view(-1, heads, channels)
        value = self.lin_value(x_src).view(-1, heads, channels)
        edge_term = None
        if self.lin_edge is not None:
            edge_term = self.lin_edge(edge_attr).view(-1, heads, channels)
        dtype = common_dtype(query, key, value, edge_term)
        out = ops.graph_attention(structure.graph, cast(query, dtype), cast(key, dtype),
                                  cast(value, dtype), scale=1.0 / math.sqrt(channels),
                                  dropout=self.dropout if self.training else 0.0,
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
