"""GCNConv on fastgnn's SpMM, with PyG's gcn_norm coefficients reproduced per structure."""
from __future__ import annotations

from typing import Optional

import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from fastgnn import ops
from fastgnn.ops.spmm import spmm_unchecked
from fastgnn.pyg import compiled
from fastgnn.pyg._base import (FastLayer, cast, check_device, check_features, common_dtype,
                              edge_vector, parameter)
from fastgnn.pyg.structure import (Edges, SparseTensor, Structure, Unsupported, as_edges,
                                   gcn_normalised, gcn_structure, gcn_unit_values,
                                   gcn_weighted_values, is_edge_tensor, lookup, resolve)


class GCNConv(FastLayer, pyg_nn.GCNConv):
    """:class:`torch_geometric.nn.GCNConv` running its propagation on ``fastgnn.ops.spmm``."""

    summing_aggrs = ("add", "sum")

    def forward(self, x: torch.Tensor, edge_index, edge_weight: Optional[torch.Tensor] = None):
        return self._dispatch(x, edge_index, edge_weight)

    def _fused(self, x, edge_index, edge_weight=None):
        if isinstance(x, (tuple, list)):
            raise Unsupported("bipartite (tuple) node features")
        edge_weight = edge_vector(edge_weight, x)
        check_features(x)
        if compiled.applies(edge_index, "spmm", x.device) and not self.cached:
            return self._compiled(x, edge_index, edge_weight)
        num_nodes = x.shape[0]
        if (edge_weight is None and is_edge_tensor(edge_index) and self.normalize
                and not self.cached):
            # The common training call: one lookup in the structure cache for the structure
            # and its coefficients (gcn_norm ignores `improved` without edge weights).
            structure, values = gcn_normalised(edge_index, num_nodes, self.add_self_loops,
                                               x.dtype)
            check_device(structure.graph.device, x)
            return self._propagate(structure, self._modules["lin"](x), edge_values=values,
                                   trusted=True)
        edges = as_edges(edge_index)  # first: unsupported formats must not reach the cache
        if not self.normalize:
            structure = resolve(edges, num_nodes, num_nodes)
            weight = edges.values if edges.is_sparse else edge_weight
            return self._propagate(structure, self.lin(x), edge_weight=weight)
        # PyG keeps a normalised SparseTensor in _cached_adj_t, anything else in
        # _cached_edge_index as (edge_index or sparse adjacency, weights).
        is_adj_t = isinstance(edge_index, SparseTensor)
        hit = self._cached_adj_t if is_adj_t else self._cached_edge_index
        if self.cached and hit is not None:
            cached_index, cached_values = (hit, None) if is_adj_t else hit
            cached = as_edges(cached_index)
            structure = resolve(cached, num_nodes, num_nodes)
            values = cached.values if cached.is_sparse else cached_values
            return self._propagate(structure, self.lin(x), edge_values=values)
        if edges.is_sparse:
            structure, values = self._normalised_sparse(edges, num_nodes, x.dtype)
        else:
            structure, values = self._normalised(edges, edge_weight, num_nodes, x.dtype)
            if self.cached:  # PyG's cache format, so a later disable() keeps working
                self._cached_edge_index = (structure.graph.edge_index(), values)
        return self._propagate(structure, self.lin(x), edge_values=values)

    def _compiled(self, x: torch.Tensor, edge_index, edge_weight) -> torch.Tensor:
        """Under torch.compile: one ``compiled.spmm`` op, which looks the structure up (and
        derives the coefficients) when it runs."""
        check_device(edge_index.device, x)
        num_nodes = x.shape[0]
        h = self._modules["lin"](x)
        if self.normalize:
            # The coefficients have x's dtype, or edge_weight's: h is cast as PyG's message
            # promotes.
            coefficients = x if edge_weight is None else edge_weight
            pending = compiled.Pending(edge_index, num_nodes, num_nodes, coefficients.dtype,
                                       self.add_self_loops, self._loop_weight())
            h = cast(h, common_dtype(h, coefficients))
        else:
            pending = compiled.Pending(edge_index, num_nodes, num_nodes)
        return self._add_bias(compiled.spmm(pending, h, edge_weight=edge_weight))

    def _normalised(self, edges: Edges, edge_weight, num_nodes: int, dtype: torch.dtype):
        structure = gcn_structure(edges, num_nodes, self.add_self_loops)
        if edge_weight is None:
            return structure, gcn_unit_values(structure, num_nodes, dtype)
        return structure, gcn_weighted_values(structure, edges, edge_weight, num_nodes,
                                              self.add_self_loops, self._loop_weight())

    def _loop_weight(self) -> float:
        """The weight of the self-loops gcn_norm adds to weighted edges."""
        return 2.0 if self.improved else 1.0

    def _normalised_sparse(self, edges: Edges, num_nodes: int, dtype: torch.dtype):
        adj_t = edges.source
        if edges.values is not None and edges.values.requires_grad:
            raise Unsupported("a sparse adjacency whose values require grad")

        def build():
            normalised = gcn_norm(adj_t, None, num_nodes, self.improved, self.add_self_loops,
                                  self.flow, dtype)
            # a SparseTensor comes back alone, a torch sparse tensor with weights None
            return normalised if isinstance(adj_t, SparseTensor) else normalised[0]
        normalised = lookup(adj_t, ("gcn", num_nodes, self.improved, self.add_self_loops,
                                    dtype), build)
        if self.cached and isinstance(adj_t, SparseTensor):
            self._cached_adj_t = normalised
        elif self.cached:
            self._cached_edge_index = (normalised, None)
        sparse_edges = as_edges(normalised)
        return resolve(sparse_edges, num_nodes, num_nodes), sparse_edges.values

    def _propagate(self, structure: Structure, x: torch.Tensor, edge_weight=None,
                   edge_values=None, trusted: bool = False) -> torch.Tensor:
        """``trusted``: x is on the structure's device and the edge inputs were derived from
        the structure, so the op's argument checks can be skipped."""
        multiplier = edge_values if edge_values is not None else edge_weight
        if multiplier is not None:  # as PyG's message promotes (autocast: its dtype)
            x = cast(x, common_dtype(x, multiplier))
        spmm = spmm_unchecked if trusted else ops.spmm
        return self._add_bias(spmm(structure.graph, x, edge_weight=edge_weight,
                                   edge_values=edge_values))

    def _add_bias(self, out: torch.Tensor) -> torch.Tensor:
        bias = parameter(self, "bias")
        return out if bias is None else out + bias
