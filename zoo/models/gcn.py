"""GCN (Kipf and Welling, 2017) on PyG's ``GCNConv``."""
from __future__ import annotations

from torch_geometric.nn import GCNConv

from fastgnn.zoo.models.backbone import Backbone


class GCN(Backbone):
    """``cached=True`` keeps the normalised adjacency between calls (full-batch training on
    one graph only, as in PyG's GCN example)."""

    def __init__(self, in_channels: int, out_channels: int, cached: bool = False, **options):
        self.cached = cached
        super().__init__(in_channels, out_channels, **options)

    def make_conv(self, in_channels, out_channels, last):
        return GCNConv(in_channels, out_channels, cached=self.cached)
