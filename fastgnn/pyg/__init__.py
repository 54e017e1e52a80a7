"""fastgnn layers for PyTorch Geometric: subclasses of PyG's own layers (same constructor
arguments, parameters, buffers and state_dict keys) whose propagation runs on fastgnn ops.

Importing this package registers them with :func:`fastgnn.enable`, which swaps stock PyG layer
instances for them (``fastgnn.enable`` imports it by itself when PyG is installed). Options
without a fused path run PyG's own forward, with a one-time :class:`FallbackWarning`.

Fused: edge_index tensors, EdgeIndex, fastgnn.Graph, torch sparse COO/CSR adjacencies and
torch_sparse SparseTensors (attention layers: not sparse ones); every constructor option of
SAGEConv, GraphConv, GINConv and SimpleConv with string aggregations (sum, mean, max, min), and
of GCNConv, GATConv, GATv2Conv and TransformerConv with their sum aggregation. Fallback:
return_attention_weights, GATConv's explicit size, Aggregation modules or aggregation lists,
another aggregation than sum for GCNConv and the attention layers, edge weights (or sparse
values) with min/max, sparse CSC, flow="target_to_source", node_dim other than the first,
explain, decomposed_layers > 1, MessagePassing hooks, node features that are not 2-D, and
inputs the stock layer itself rejects (it then raises its own error). torch.jit.script is
refused with an error that points to torch.compile.
"""
import torch_geometric.nn as _pyg_nn

from fastgnn.enable import register_swap as _register_swap
from fastgnn.pyg._base import FallbackWarning, inherit_message_types as _inherit_message_types
from fastgnn.pyg.attention import GATConv, GATv2Conv, TransformerConv
from fastgnn.pyg.basic import GINConv, GraphConv, SAGEConv, SimpleConv
from fastgnn.pyg.gcn import GCNConv
from fastgnn.pyg.sampler import NeighborSampler
from fastgnn.pyg.structure import cache as structure_cache

LAYERS = (GCNConv, SAGEConv, GraphConv, GINConv, SimpleConv, GATv2Conv, TransformerConv,
          GATConv)

for _layer in LAYERS:
    _inherit_message_types(_layer)
    _register_swap(getattr(_pyg_nn, _layer.__name__), _layer)

__all__ = ["GCNConv", "SAGEConv", "GraphConv", "GINConv", "SimpleConv", "GATv2Conv",
           "TransformerConv", "GATConv", "FallbackWarning", "structure_cache", "LAYERS",
           "NeighborSampler"]
