"""GraphSAGE (Hamilton et al., 2017) on PyG's ``SAGEConv``, mean or max aggregation."""
from __future__ import annotations

from torch_geometric.nn import SAGEConv

from fastgnn.zoo.models.backbone import Backbone, _choice, init_as_linear

AGGRS = ("mean", "max")


class SAGE(Backbone):
    def __init__(self, in_channels: int, out_channels: int, aggr: str = "mean", **options):
        _choice("aggr", aggr, AGGRS)
        self.aggr = aggr
        super().__init__(in_channels, out_channels, **options)

    def make_conv(self, in_channels, out_channels, last):
        return SAGEConv(in_channels, out_channels, aggr=self.aggr)

    def init_conv_as_linear(self, conv):
        # the benchmark's SAGE: one Linear on [x, mean of the neighbours]
        weights = [conv.lin_l.weight] + ([conv.lin_r.weight] if conv.root_weight else [])
        init_as_linear(weights, conv.lin_l.bias)
