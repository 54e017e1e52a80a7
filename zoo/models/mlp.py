"""MLP baseline: the backbone with linear layers in place of convs (ignores the graph)."""
from __future__ import annotations

from torch import nn

from fastgnn.zoo.models.backbone import Backbone


class _Linear(nn.Linear):
    def forward(self, x, edge_index=None, edge_attr=None):
        return super().forward(x)


class MLP(Backbone):
    def make_conv(self, in_channels, out_channels, last):
        return _Linear(in_channels, out_channels)
