"""Neighbourhood-reduction layers on fastgnn.ops.aggregate / spmm: SAGEConv, GraphConv,
GINConv, SimpleConv."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

from fastgnn import ops
from fastgnn.ops import minmax
from fastgnn.ops.spmm import REDUCES as SPMM_REDUCES
from fastgnn.ops.spmm import spmm_unchecked
from fastgnn.pyg._base import (FastLayer, cast, check_device, check_features, common_dtype,
                               edge_vector, reduce_of, split_pair)
from fastgnn.pyg import compiled
from fastgnn.pyg.structure import (Edges, SparseTensor, Unsupported, as_edges,
                                   edges_and_structure, node_counts, resolve)


def _weights(edges: Edges, edge_weight: Optional[torch.Tensor], reduce: str,
             sparse_tensor_values: bool = True):
    """The per-edge multipliers PyG applies: a sparse adjacency's values (its edge_weight
    argument is then unused), else ``edge_weight``. ``sparse_tensor_values=False`` for the
    layers that drop a SparseTensor's values (SAGEConv, GINConv: ``set_value(None)``)."""
    if edges.is_sparse and not sparse_tensor_values and isinstance(edges.source, SparseTensor):
        return None
    weight = edges.values if edges.is_sparse else edge_weight
    if weight is not None and reduce in ("min", "max"):
        raise Unsupported(f"edge weights (or a sparse adjacency) with aggr={reduce!r}")
    return weight


def _reduce(structure, x: torch.Tensor, reduce: str, weight=None) -> torch.Tensor:
    """``x`` has passed :func:`_prepare`'s checks (float, on the structure's device), so sum
    and mean skip the op's own. ``structure``: a Structure or a ``compiled.Pending``."""
    if isinstance(structure, compiled.Pending):
        return compiled.aggregate(structure, x, reduce, weight)
    if weight is None and reduce in SPMM_REDUCES:
        return spmm_unchecked(structure.graph, x, reduce=reduce)
    if weight is None:
        return ops.aggregate(structure.graph, x, reduce)
    dtype = common_dtype(x, weight)
    return ops.spmm(structure.graph, cast(x, dtype), edge_weight=weight, reduce=reduce)


def _prepare(x, edge_index, reduce: str, size=None):
    """Features, edges and the plain Structure for a layer without self-loops. Under
    torch.compile a ``compiled.Pending`` may stand for the Structure, which :func:`_reduce`
    then leaves to the compiled ops to look up."""
    x_src, x_dst = split_pair(x)
    distinct = (x_src,) if x_dst is x_src else (x_src, x_dst)
    check_features(*distinct)
    op = "spmm" if reduce in SPMM_REDUCES else minmax.OP
    if x_dst is not None and compiled.applies(edge_index, op, x_src.device):
        check_device(edge_index.device, *distinct)
        edges = Edges(edge_index, edge_index, None)
        pending = compiled.Pending(edge_index, *node_counts(edges, x_src, x_dst, size))
        return x_src, x_dst, edges, pending
    edges, structure = edges_and_structure(edge_index, x_src, x_dst, size)
    check_device(structure.graph.device, *distinct)
    return x_src, x_dst, edges, structure


class SAGEConv(FastLayer, pyg_nn.SAGEConv):
    """:class:`torch_geometric.nn.SAGEConv` aggregating with fastgnn ops."""

    def forward(self, x, edge_index, size=None):
        return self._dispatch(x, edge_index, size)

    def _fused(self, x, edge_index, size=None):
        reduce = reduce_of(self.aggr)
        x_src, x_dst, edges, structure = _prepare(x, edge_index, reduce, size)
        weight = _weights(edges, None, reduce, sparse_tensor_values=False)
        modules = self._modules  # Module attribute lookups cost more than the checks here
        if self.project and "lin" in modules:
            x_src = modules["lin"](x_src).relu()
        out = modules["lin_l"](_reduce(structure, x_src, reduce, weight))
        if self.root_weight and x_dst is not None:
            out = out + modules["lin_r"](x_dst)
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out


class GraphConv(FastLayer, pyg_nn.GraphConv):
    """:class:`torch_geometric.nn.GraphConv` aggregating with fastgnn ops."""

    def forward(self, x, edge_index, edge_weight=None, size=None):
        return self._dispatch(x, edge_index, edge_weight, size)

    def _fused(self, x, edge_index, edge_weight=None, size=None):
        edge_weight = edge_vector(edge_weight, x)
        reduce = reduce_of(self.aggr)
        x_src, x_dst, edges, structure = _prepare(x, edge_index, reduce, size)
        weight = _weights(edges, edge_weight, reduce)
        out = self.lin_rel(_reduce(structure, x_src, reduce, weight))
        return out if x_dst is None else out + self.lin_root(x_dst)


class GINConv(FastLayer, pyg_nn.GINConv):
    """:class:`torch_geometric.nn.GINConv` aggregating with fastgnn ops."""

    def forward(self, x, edge_index, size=None):
        return self._dispatch(x, edge_index, size)

    def _fused(self, x, edge_index, size=None):
        reduce = reduce_of(self.aggr)
        x_src, x_dst, edges, structure = _prepare(x, edge_index, reduce, size)
        out = _reduce(structure, x_src, reduce,
                      _weights(edges, None, reduce, sparse_tensor_values=False))
        if x_dst is not None:
            out = out + (1 + self.eps) * x_dst
        return self.nn(out)


class SimpleConv(FastLayer, pyg_nn.SimpleConv):
    """:class:`torch_geometric.nn.SimpleConv` aggregating with fastgnn ops."""

    def forward(self, x, edge_index, edge_weight=None, size=None):
        return self._dispatch(x, edge_index, edge_weight, size)

    def _fused(self, x, edge_index, edge_weight=None, size=None):
        edge_weight = edge_vector(edge_weight, x)
        reduce = reduce_of(self.aggr)
        if self.combine_root != "self_loop":
            x_src, x_dst, edges, structure = _prepare(x, edge_index, reduce, size)
            weight = _weights(edges, edge_weight, reduce)
        else:
            if not isinstance(x, torch.Tensor) or (size is not None and size[0] != size[1]):
                raise Unsupported("combine_root='self_loop' with bipartite input")
            check_features(x)
            x_src = x_dst = x
            edges = as_edges(edge_index)
            if edges.is_sparse:
                raise Unsupported("combine_root='self_loop' with a sparse adjacency")
            n = x.size(0)
            structure = resolve(edges, n, n, "append", n)
            check_device(structure.graph.device, x)
            weight = _weights(edges, edge_weight, reduce)
            weight = structure.per_edge(edges, "edge_weight", weight,
                                        lambda w: torch.cat([w, w.new_ones(n)]))
        out = _reduce(structure, x_src, reduce, weight)
        if x_dst is not None and self.combine_root == "sum":
            out = out + x_dst
        elif x_dst is not None and self.combine_root == "cat":
            out = torch.cat([x_dst, out], dim=-1)
        return out
