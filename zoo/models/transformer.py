"""Graph Transformer (Shi et al., 2021: UniMP) on PyG's ``TransformerConv``."""
from __future__ import annotations

from typing import Optional

from torch_geometric.nn import TransformerConv

from fastgnn.zoo.models.backbone import Backbone


class GraphTransformer(Backbone):
    """``beta`` gates the root weight (UniMP's gated residual); ``root_weight`` adds the
    transformed destination features; ``edge_dim`` makes every conv take ``edge_attr`` of that
    width. Heads as in :class:`~fastgnn.zoo.models.gatv2.GATv2`."""

    attention = True

    def __init__(self, in_channels: int, out_channels: int, beta: bool = False,
                 root_weight: bool = True, edge_dim: Optional[int] = None, **options):
        self.beta, self.root_weight, self.edge_dim = beta, root_weight, edge_dim
        self.takes_edge_attr = edge_dim is not None
        super().__init__(in_channels, out_channels, **options)

    def make_conv(self, in_channels, out_channels, last):
        heads = 1 if last else self.heads
        return TransformerConv(in_channels, out_channels // heads, heads=heads, beta=self.beta,
                               root_weight=self.root_weight, edge_dim=self.edge_dim,
                               dropout=self.attention_dropout_rate)

    def forward(self, x, edge_index, edge_attr=None):
        if self.takes_edge_attr and edge_attr is None:
            raise ValueError(f"GraphTransformer was built with edge_dim={self.edge_dim} but the "
                             f"graph has no edge_attr")
        return super().forward(x, edge_index, edge_attr)
