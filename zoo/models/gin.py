"""GIN (Xu et al., 2019) on PyG's ``GINConv`` with a two-layer MLP per conv."""
from __future__ import annotations

from torch import nn
from torch_geometric.nn import GINConv

from fastgnn.zoo.models.backbone import Backbone


class GIN(Backbone):
    """``train_eps=False`` is GIN-0, the variant the GIN paper found as good as learned eps."""

    def __init__(self, in_channels: int, out_channels: int, train_eps: bool = False, **options):
        self.train_eps = train_eps
        super().__init__(in_channels, out_channels, **options)

    def make_conv(self, in_channels, out_channels, last):
        mlp = nn.Sequential(nn.Linear(in_channels, out_channels), nn.ReLU(),
                            nn.Linear(out_channels, out_channels))
        return GINConv(mlp, train_eps=self.train_eps)
