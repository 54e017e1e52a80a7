"""fastgnn layers for DGL: subclasses of DGL's own layers (same constructor arguments,
parameters, buffers and state_dict keys) whose message passing runs on fastgnn ops.

Importing this package registers them with :func:`fastgnn.enable`, which swaps stock DGL layer
instances for them (``fastgnn.enable`` imports it by itself when DGL is installed).

Fused: DGLGraphs, blocks (MFGs) and bipartite graphs with one edge type, int32 or int64 ids;
GraphConv (every norm, weight, bias, external weight, scalar edge_weight), SAGEConv (mean,
gcn, pool; scalar edge_weight), GINConv (sum, mean, max, learn_eps; scalar edge_weight),
GATConv, GATv2Conv (heads, feat_drop, attn_drop, residual,
share_weights, negative_slope), DotGatConv and EdgeWeightNorm. DGL's own forward runs, with a
one-time :class:`fastgnn.dgl.FallbackWarning`, for SAGEConv's lstm aggregator, GATConv's
edge_weight, get_attention=True, heterographs with several edge
types and node features that are not float tensors of the expected shape. Inputs DGL rejects
(0-in-degree nodes without allow_zero_in_degree, ...) raise DGL's own errors.
"""
import dgl.nn.pytorch as _dgl_nn

from fastgnn._adapter import FallbackWarning
from fastgnn.dgl.nn.attention import DotGatConv, GATConv, GATv2Conv
from fastgnn.dgl.nn.conv import EdgeWeightNorm, GINConv, GraphConv, SAGEConv
from fastgnn.enable import register_swap as _register_swap

LAYERS = (GraphConv, SAGEConv, GINConv, EdgeWeightNorm, GATConv, GATv2Conv, DotGatConv)

for _layer in LAYERS:
    _register_swap(getattr(_dgl_nn, _layer.__name__), _layer)

__all__ = [layer.__name__ for layer in LAYERS] + ["FallbackWarning", "LAYERS"]
