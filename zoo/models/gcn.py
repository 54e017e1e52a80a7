"""GCN (Kipf and Welling, 2017) on PyG's ``GCNConv``."""
from __future__ import annotations

from torch_geometric.nn import GCNConv

from fastgnn.zoo.models.backbone import Backbone, init_as_linear


class GCN(Backbone):
    """``cached=True`` keeps the normalised adjacency between calls (full-batch training on
    one graph only, as in PyG's GCN example); ``add_self_loops=False`` normalises and
    aggregates over the graph's own edges only."""

    def __init__(self, in_channels: int, out_channels: int, cached: bool = False,
                 add_self_loops: bool = True, **options):
        self.cached, self.add_self_loops = cached, add_self_loops
        super().__init__(in_channels, out_channels, **options)

    def make_conv(self, in_channels, out_channels, last):
        return GCNConv(in_channels, out_channels, cached=self.cached,
                       add_self_loops=self.add_self_loops)

    def init_conv_as_linear(self, conv):
        init_as_linear([conv.lin.weight], conv.bias)
