"""Attention layers on fastgnn's fused attention ops (no edge-sized feature tensors): GATConv,
GATv2Conv and DotGatConv."""
from __future__ import annotations

import dgl.nn.pytorch as dgl_nn
import torch

from fastgnn import ops
from fastgnn._gat_layer import gat_layer
from fastgnn._gat_scores import destination_scores, gat_scores
from fastgnn.dgl._graphs import Unsupported
from fastgnn.dgl.nn._base import (FastLayer, StockRaises, check_features, dropout_rate,
                                  graph_of)


def _dropped_inputs(graph, feat, dropout=None):
    """(h_src, h_dst): the inputs after feature dropout as DGL's attention layers take them, a
    block's destinations being the first rows of one tensor."""
    drop = dropout if dropout is not None else (lambda x: x)
    if isinstance(feat, tuple):
        return drop(feat[0]), drop(feat[1])
    h_src = drop(feat)
    return h_src, h_src[:graph.num_dst_nodes()] if graph.is_block else h_src


def _node_pair(layer, graph, feat, project_src, project_dst, dropout=None):
    """(h_src, h_dst, feat_src [S,H,D], feat_dst [T,H,D]) as DGL's attention layers derive
    them: a pair projected by two maps, else one projection whose first rows are a block's
    destinations. ``project_dst`` None: the destinations share the sources' projection."""
    heads, width = layer._num_heads, layer._out_feats
    h_src, h_dst = _dropped_inputs(graph, feat, dropout)
    feat_src = project_src(h_src).view(-1, heads, width)
    if isinstance(feat, tuple):
        return h_src, h_dst, feat_src, (project_dst or project_src)(h_dst).view(-1, heads, width)
    feat_dst = feat_src[:h_dst.shape[0]] if project_dst is None else \
        project_dst(h_dst).view(-1, heads, width)
    return h_src, h_dst, feat_src, feat_dst


def _check(layer, graph, feat, get_attention):
    if get_attention:
        raise Unsupported("get_attention=True")
    g = graph_of(layer, graph)
    if isinstance(feat, tuple):
        check_features(g, feat[0], feat[1], two_dim=True)
    elif graph.is_block:
        check_features(g, feat, feat[:g.num_dst_nodes] if isinstance(feat, torch.Tensor)
                       else feat, two_dim=True)
    else:
        check_features(g, feat, feat, two_dim=True)
    return g


class GATConv(FastLayer, dgl_nn.GATConv):
    """:class:`dgl.nn.GATConv` on ``fastgnn.ops.gat_attention``."""

    def forward(self, graph, feat, edge_weight=None, get_attention=False):
        return self._dispatch(graph, feat, edge_weight, get_attention)

    def _fused(self, graph, feat, edge_weight=None, get_attention=False):
        g = _check(self, graph, feat, get_attention)
        if edge_weight is not None:
            raise Unsupported("edge_weight (it scales the attention after the softmax)")
        modules = self._modules
        if "fc_src" in modules and not isinstance(feat, tuple):
            raise StockRaises()  # built for a pair, given one tensor: DGL's error
        fc_src, fc_dst = (modules["fc_src"], modules["fc_dst"]) if "fc_src" in modules else \
            (modules["fc"], modules["fc"] if isinstance(feat, tuple) else None)
        h_src, h_dst = _dropped_inputs(graph, feat, self.feat_drop)
        heads = self._num_heads
        if fc_dst is None:  # one projection: both scores from one product over the sources
            atts, alpha_dst = (self.attn_l, self.attn_r), None
        else:
            atts, alpha_dst = (self.attn_l,), destination_scores(h_dst, fc_dst, heads,
                                                                 self.attn_r)
        slope, dropout = self.leaky_relu.negative_slope, dropout_rate(self.attn_drop)
        out = gat_layer(g, h_src, fc_src, heads, atts, alpha_dst, slope, dropout)
        if out is None:
            feat_src, alpha_src, *dst_scores = gat_scores(h_src, fc_src, heads, *atts)
            if alpha_dst is None:
                alpha_dst = dst_scores[0][:h_dst.shape[0]]
            out = ops.gat_attention(g, feat_src, alpha_src, alpha_dst, slope, dropout)
        if self.res_fc is not None:
            out = out + self.res_fc(h_dst).view(h_dst.shape[0], -1, self._out_feats)
        if self.has_explicit_bias:
            out = out + self.bias.view(self._num_heads, self._out_feats)
        return out if not self.activation else self.activation(out)


class GATv2Conv(FastLayer, dgl_nn.GATv2Conv):
    """:class:`dgl.nn.GATv2Conv` on ``fastgnn.ops.gatv2_attention``."""

    def forward(self, graph, feat, get_attention=False):
        return self._dispatch(graph, feat, get_attention)

    def _fused(self, graph, feat, get_attention=False):
        g = _check(self, graph, feat, get_attention)
        shared = self.share_weights and not isinstance(feat, tuple)
        _, h_dst, feat_src, feat_dst = _node_pair(self, graph, feat, self.fc_src,
                                                  None if shared else self.fc_dst, self.feat_drop)
        out = ops.gatv2_attention(g, feat_dst, feat_src, self.attn.view(self._num_heads, -1),
                                  self.leaky_relu.negative_slope, dropout_rate(self.attn_drop))
        if self.res_fc is not None:
            out = out + self.res_fc(h_dst).view(h_dst.shape[0], -1, self._out_feats)
        return out if not self.activation else self.activation(out)


class DotGatConv(FastLayer, dgl_nn.DotGatConv):
    """:class:`dgl.nn.DotGatConv` on ``fastgnn.ops.graph_attention`` (scale 1/sqrt(out_feats))."""

    def forward(self, graph, feat, get_attention=False):
        return self._dispatch(graph, feat, get_attention)

    def _fused(self, graph, feat, get_attention=False):
        g = _check(self, graph, feat, get_attention)
        modules = self._modules
        if isinstance(feat, tuple):
            if "fc_src" not in modules:
                raise StockRaises()  # a pair for a layer built for one node type: DGL's error
            _, _, keys, queries = _node_pair(self, graph, feat, modules["fc_src"],
                                             modules["fc_dst"])
        else:
            if "fc" not in modules:
                raise StockRaises()  # built for a pair, given one tensor: DGL's error
            _, _, keys, queries = _node_pair(self, graph, feat, modules["fc"], None)
        return ops.graph_attention(g, queries, keys, keys, scale=self._out_feats ** -0.5)
