"""GAT (Veličković et al., 2018) on PyG's ``GATConv``."""
from __future__ import annotations

from torch_geometric.nn import GATConv

from fastgnn.zoo.models.backbone import Backbone


class GAT(Backbone):
    """Hidden layers concatenate ``heads`` heads of ``hidden_channels // heads``; the output
    conv has one head. The attention weights' dropout is ``attention_dropout``, by default the
    model's ``dropout`` as in PyG's GAT example."""

    attention = True
    conv_class = GATConv

    def make_conv(self, in_channels, out_channels, last):
        heads = 1 if last else self.heads
        return self.conv_class(in_channels, out_channels // heads, heads=heads,
                               dropout=self.attention_dropout_rate)
