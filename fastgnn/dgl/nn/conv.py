"""Neighbourhood-aggregation layers on fastgnn.ops.spmm / aggregate: GraphConv, SAGEConv,
GINConv, and EdgeWeightNorm without DGL's per-call graph reversal."""
from __future__ import annotations

import dgl.nn.pytorch as dgl_nn
import torch
import torch.nn.functional as F
from dgl.utils import check_eq_shape

from fastgnn import ops
from fastgnn.dgl._extremes import dgl_extremes
from fastgnn.dgl._graphs import Unsupported, endpoints, fastgnn_graph
from fastgnn.dgl._ties import dgl_ties
from fastgnn.dgl.nn._base import (FastLayer, StockRaises, check_features, graph_of,
                                  scalar_edge_weight, split_features)


class GraphConv(FastLayer, dgl_nn.GraphConv):
    """:class:`dgl.nn.GraphConv` on ``fastgnn.ops.spmm`` (its norms are DGL's)."""

    def forward(self, graph, feat, weight=None, edge_weight=None):
        return self._dispatch(graph, feat, weight, edge_weight)

    def _fused(self, graph, feat, weight=None, edge_weight=None):
        g = graph_of(self, graph)
        feat_src, feat_dst = split_features(feat, graph)
        check_features(g, feat_src, feat_dst)
        edge_weight = scalar_edge_weight(g, edge_weight, feat_src)
        if weight is not None and self.weight is not None:
            raise StockRaises()  # DGL's error: an external weight with the module's own
        weight = self.weight if weight is None else weight
        # Multiply by W first when it narrows the features, as DGL does.
        narrowing = self._in_feats > self._out_feats
        if narrowing and weight is not None:
            feat_src = torch.matmul(feat_src, weight)
        out = ops.spmm(g, feat_src, norm=self._norm, edge_weight=edge_weight)
        if not narrowing and weight is not None:
            out = torch.matmul(out, weight)
        if self.bias is not None:
            out = out + self.bias
        return out if self._activation is None else self._activation(out)


class SAGEConv(FastLayer, dgl_nn.SAGEConv):
    """:class:`dgl.nn.SAGEConv` (mean, gcn, pool) on ``fastgnn.ops``; lstm runs DGL's."""

    def forward(self, graph, feat, edge_weight=None):
        return self._dispatch(graph, feat, edge_weight)

    def _fused(self, graph, feat, edge_weight=None):
        kind = self._aggre_type
        if kind not in ("mean", "gcn", "pool"):
            raise Unsupported(f"aggregator_type={kind!r}")
        g = fastgnn_graph(graph)
        # Every check before the dropout: a fallback must draw the same random numbers as DGL.
        raw_src, raw_dst = split_features(feat, graph)
        check_features(g, raw_src, raw_dst, two_dim=True)
        user_weight = edge_weight  # as DGL broadcasts it (its pick among ties depends on it)
        edge_weight = scalar_edge_weight(g, edge_weight, raw_src)
        if isinstance(feat, tuple):
            feat_src, feat_dst = self.feat_drop(feat[0]), self.feat_drop(feat[1])
        else:
            feat_src = feat_dst = self.feat_drop(feat)
            if graph.is_block:
                feat_dst = feat_src[:g.num_dst_nodes]
        narrowing = self._in_src_feats > self._out_feats  # fc_neigh before the aggregation
        if kind == "pool":
            h_pool = F.relu(self.fc_pool(feat_src))
            h_neigh = self.fc_neigh(dgl_extremes(g, h_pool, "max", dgl_ties(h_pool, user_weight),
                                                 edge_weight=edge_weight, update_all=True))
        elif kind == "mean":
            h_src = self.fc_neigh(feat_src) if narrowing else feat_src
            h_neigh = ops.spmm(g, h_src, edge_weight=edge_weight, reduce="mean")
            if not narrowing:
                h_neigh = self.fc_neigh(h_neigh)
        else:  # gcn: (sum of neighbours + self) / (in-degree + 1)
            check_eq_shape(feat)
            h_src = self.fc_neigh(feat_src) if narrowing else feat_src
            if isinstance(feat, tuple):
                h_dst = self.fc_neigh(feat_dst) if narrowing else feat_dst
            else:
                h_dst = h_src[:g.num_dst_nodes]
            total = ops.spmm(g, h_src, edge_weight=edge_weight) + h_dst
            h_neigh = total / (g.in_degree.to(feat_dst).unsqueeze(-1) + 1)
            if not narrowing:
                h_neigh = self.fc_neigh(h_neigh)
        if kind == "gcn":
            out = h_neigh if self.bias is None else h_neigh + self.bias
        else:
            out = self.fc_self(feat_dst) + h_neigh
        if self.activation is not None:
            out = self.activation(out)
        return out if self.norm is None else self.norm(out)


class GINConv(FastLayer, dgl_nn.GINConv):
    """:class:`dgl.nn.GINConv` (sum, mean, max) on ``fastgnn.ops``."""

    def forward(self, graph, feat, edge_weight=None):
        return self._dispatch(graph, feat, edge_weight)

    def _fused(self, graph, feat, edge_weight=None):
        g = fastgnn_graph(graph)
        feat_src, feat_dst = split_features(feat, graph)
        check_features(g, feat_src, feat_dst)
        reduce = self._aggregator_type
        user_weight = edge_weight  # as DGL broadcasts it (its pick among ties depends on it)
        edge_weight = scalar_edge_weight(g, edge_weight, feat_src)
        if reduce == "max":
            neigh = dgl_extremes(g, feat_src, reduce, dgl_ties(feat_src, user_weight),
                                 edge_weight=edge_weight, update_all=True)
        else:
            neigh = ops.aggregate(g, feat_src, reduce, edge_weight=edge_weight)
        out = (1 + self.eps) * feat_dst + neigh
        if self.apply_func is not None:
            out = self.apply_func(out)
        return out if self.activation is None else self.activation(out)


class EdgeWeightNorm(FastLayer, dgl_nn.EdgeWeightNorm):
    """:class:`dgl.nn.EdgeWeightNorm` from the cached graph's edge endpoints: DGL's own
    reverses the graph (a new DGLGraph) on every call with ``norm='both'``."""

    def forward(self, graph, edge_weight):
        return self._dispatch(graph, edge_weight)

    def _fused(self, graph, edge_weight):
        g = fastgnn_graph(graph)
        if not isinstance(edge_weight, torch.Tensor) or edge_weight.dim() != 1 or \
                edge_weight.shape[0] != g.num_edges or edge_weight.device != g.device:
            raise StockRaises()  # DGL's own errors for the shapes it rejects
        if self._norm == "both" and bool((edge_weight <= 0).any()):
            raise StockRaises()
        src, dst = endpoints(g)
        src_norm = torch.ones(g.num_src_nodes, dtype=edge_weight.dtype, device=g.device)
        dst_norm = torch.ones(g.num_dst_nodes, dtype=edge_weight.dtype, device=g.device)
        if self._norm == "both":
            out_weight = edge_weight.new_zeros(g.num_src_nodes).index_add(0, src, edge_weight)
            src_norm = torch.pow(out_weight + self._eps, -0.5)
        if self._norm != "none":
            in_weight = edge_weight.new_zeros(g.num_dst_nodes).index_add(0, dst, edge_weight)
            dst_norm = in_weight + self._eps
            dst_norm = torch.pow(dst_norm, -0.5) if self._norm == "both" else 1.0 / dst_norm
        return src_norm[src] * dst_norm[dst] * edge_weight

