"""MaxK-GNN layers: PyG's SAGEConv, GCNConv and GINConv applied to ``MaxK(x)``, with the
aggregation run on the CBSR kernels (``fastgnn.ops.maxk`` then ``fastgnn.ops.maxk_spmm``) and
never on a dense MaxK output.

Each layer is a subclass of the PyG layer (same constructor options, parameters and
``state_dict`` keys) with two more arguments, ``k`` and ``dropout`` (applied to the kept
entries in training, 0 by default); ``layer(x, edge_index)`` equals the stock
``layer(dropout(MaxK(k)(x)), edge_index)``. Stacked, ``conv_1 -> conv_2`` is the paper's
``linear -> MaxK -> SpGEMM`` dataflow: conv_1's linear output is conv_2's input, which
conv_2 sparsifies and aggregates. The linear maps run after the aggregation (equal by
linearity for GCNConv, whose stock layer applies ``lin`` first).

Structures: edge_index tensors, EdgeIndex and fastgnn.Graph (through the PyG adapters'
structure cache), plus, for SAGEConv and GINConv, torch sparse adjacencies and SparseTensors.
Fused options: SAGEConv ``aggr`` "mean"/"sum", ``normalize``, ``root_weight``, ``bias``;
GCNConv ``improved``, ``add_self_loops``, ``normalize``, ``bias``, ``cached`` (accepted; the
normalised structure is cached per edge_index in any case) and ``edge_weight``; GINConv
``eps``, ``train_eps``, the ``nn`` module. Options without a fused path (SAGEConv
``project=True`` or another aggr, GCNConv with a sparse adjacency or bipartite features,
flow="target_to_source", hooks, explain) run the stock forward on the dense MaxK output, with a
one-time :class:`fastgnn.pyg.FallbackWarning`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

from fastgnn import backends, ops
from fastgnn.cbsr import CBSR
from fastgnn.nn.maxk import check_k
from fastgnn.pyg._base import (FastLayer, check_device, check_features, inherit_message_types,
                               reduce_of, warn_fallback)
from fastgnn.pyg.basic import _prepare, _weights
from fastgnn.pyg.gcn import GCNConv as _FastGCNConv
from fastgnn.pyg.structure import Unsupported, as_edges, resolve


class _MaxKLayer(FastLayer):
    """Runs ``_maxk_fused``, or the stock forward on the dense MaxK output when an option has
    no fused path (one-time warning)."""

    _stock: type  # the PyG class

    def _init_maxk(self, k: int, dropout: float) -> None:
        self.k = check_k(k)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)

    def _maxk(self, x: torch.Tensor) -> CBSR:
        """MaxK of x, then dropout on the kept entries (training only)."""
        h = ops.maxk(x, self.k)
        if self.dropout and self.training:
            h = CBSR(F.dropout(h.values, self.dropout), h.indices, h.num_features,
                     _trusted=True)
        return h

    def _dense_maxk(self, x):
        """The stock layer's input: the dense MaxK output of a tensor or of a pair."""
        if isinstance(x, (tuple, list)):
            return tuple(None if part is None else self._maxk(part).to_dense() for part in x)
        return self._maxk(x).to_dense()

    def forward(self, x, edge_index, *args, **kwargs):
        reason = self._unsupported_state()
        if reason is None:
            try:
                # a layer swapped in by fastgnn.enable(..., backend=...) runs on that backend
                with backends.backend(self.__dict__.get("_fastgnn_backend", backends.AUTO)):
                    return self._maxk_fused(x, edge_index, *args, **kwargs)
            except Unsupported as exc:
                reason = str(exc)
        warn_fallback(type(self).__name__, reason)
        return self._stock.forward(self, self._dense_maxk(x), edge_index, *args, **kwargs)

    def __repr__(self) -> str:
        dropout = f", dropout={self.dropout}" if self.dropout else ""
        return f"{super().__repr__()[:-1]}, k={self.k}{dropout})"


class MaxKSAGEConv(_MaxKLayer, pyg_nn.SAGEConv):
    """``SAGEConv(MaxK(x))`` with the neighbour mean (or sum) on CBSR features."""

    _stock = pyg_nn.SAGEConv

    def __init__(self, in_channels, out_channels: int, k: int, dropout: float = 0.0, **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)
        self._init_maxk(k, dropout)

    def _maxk_fused(self, x, edge_index, size=None):
        reduce = reduce_of(self.aggr)
        if reduce not in ("sum", "mean"):
            raise Unsupported(f"aggr={self.aggr!r}")
        if self.project:
            raise Unsupported("project=True")
        x_src, x_dst, edges, structure = _prepare(x, edge_index, size)
        h = self._maxk(x_src)
        weight = _weights(edges, None, reduce, sparse_tensor_values=False)
        out = self.lin_l(ops.maxk_spmm(structure.graph, h, edge_weight=weight, reduce=reduce))
        if self.root_weight and x_dst is not None:
            h_dst = h.to_dense() if x_dst is x_src else self._maxk(x_dst).to_dense()
            out = out + self.lin_r(h_dst)
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out


class MaxKGCNConv(_MaxKLayer, _FastGCNConv):
    """``GCNConv(MaxK(x))`` computed as ``(A_hat MaxK(x)) W + b`` on CBSR features."""

    _stock = pyg_nn.GCNConv

    def __init__(self, in_channels: int, out_channels: int, k: int, dropout: float = 0.0,
                 **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)
        self._init_maxk(k, dropout)

    def _maxk_fused(self, x, edge_index, edge_weight=None):
        if isinstance(x, (tuple, list)):
            raise Unsupported("bipartite (tuple) node features")
        check_features(x)
        edges = as_edges(edge_index)
        if edges.is_sparse:
            raise Unsupported("a sparse adjacency")
        num_nodes = x.shape[0]
        if self.normalize:
            structure, values = self._normalised(edges, edge_weight, num_nodes, x.dtype)
            edge_weight = None
        else:
            structure, values = resolve(edges, num_nodes, num_nodes), None
        check_device(structure.graph.device, x)
        h = self._maxk(x)
        out = self.lin(ops.maxk_spmm(structure.graph, h, edge_weight=edge_weight,
                                     edge_values=values))
        return out if self.bias is None else out + self.bias


class MaxKGINConv(_MaxKLayer, pyg_nn.GINConv):
    """``GINConv(MaxK(x))``: ``nn((1 + eps) MaxK(x_i) + sum_j MaxK(x_j))`` with the sum on CBSR
    features."""

    _stock = pyg_nn.GINConv

    def __init__(self, nn: torch.nn.Module, k: int, dropout: float = 0.0, **kwargs):
        super().__init__(nn, **kwargs)
        self._init_maxk(k, dropout)

    def _maxk_fused(self, x, edge_index, size=None):
        reduce = reduce_of(self.aggr)
        if reduce != "sum":
            raise Unsupported(f"aggr={self.aggr!r}")
        x_src, x_dst, edges, structure = _prepare(x, edge_index, size)
        h = self._maxk(x_src)
        weight = _weights(edges, None, reduce, sparse_tensor_values=False)
        out = ops.maxk_spmm(structure.graph, h, edge_weight=weight)
        if x_dst is not None:
            h_dst = h.to_dense() if x_dst is x_src else self._maxk(x_dst).to_dense()
            out = out + (1 + self.eps) * h_dst
        return self.nn(out)


for _layer in (MaxKSAGEConv, MaxKGCNConv, MaxKGINConv):
    inherit_message_types(_layer)
