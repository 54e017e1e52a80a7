"""MaxK-GNN (Peng et al., 2024): SAGE, GCN and GIN with the MaxK nonlinearity (keep each row's
``k`` largest hidden features) in place of ReLU. By default each has the paper's input and
output linear layers, so every conv aggregates MaxK-sparse hidden features. The activation
is ``fastgnn.nn.MaxK`` (fastgnn's top-k kernels, dense output) under every backend."""
from __future__ import annotations

from fastgnn.nn import MaxK
from fastgnn.zoo.models.gcn import GCN
from fastgnn.zoo.models.gin import GIN
from fastgnn.zoo.models.sage import SAGE


class MaxKMixin:
    """Replaces the activation by :class:`MaxK`; ``k`` must not exceed ``hidden_channels``."""

    def __init__(self, in_channels: int, out_channels: int, k: int = 32, **options):
        if "activation" in options:
            raise ValueError(f"{type(self).__name__} uses MaxK as its activation; "
                             f"do not set activation")
        self.k = k
        options.setdefault("input_mlp", True)
        options.setdefault("output_mlp", True)
        super().__init__(in_channels, out_channels, **options)

    def make_activation(self, activation):
        k, hidden = self.k, self.hidden_channels
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= hidden:
            raise ValueError(f"k must be an int in [1, hidden_channels={hidden}], got {k!r}")
        return MaxK(k)


class MaxKSAGE(MaxKMixin, SAGE):
    pass


class MaxKGCN(MaxKMixin, GCN):
    pass


class MaxKGIN(MaxKMixin, GIN):
    pass
