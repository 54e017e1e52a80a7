"""GATv2 (Brody et al., 2022) on PyG's ``GATv2Conv``."""
from __future__ import annotations

from torch_geometric.nn import GATv2Conv

from fastgnn.zoo.models.backbone import Backbone


class GATv2(Backbone):
    """Hidden layers concatenate ``heads`` heads of ``hidden_channels // heads``; the output
    conv has one head. The attention dropout is the model's ``dropout``, as in PyG's GAT
    example."""

    attention = True

    def make_conv(self, in_channels, out_channels, last):
        heads = 1 if last else self.heads
        return GATv2Conv(in_channels, out_channels // heads, heads=heads,
                         dropout=self.dropout_rate)
