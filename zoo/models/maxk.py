"""MaxK-GNN (Peng et al., 2024): SAGE, GCN and GIN with the MaxK nonlinearity (keep each row's
``k`` largest hidden features) in place of ReLU. By default each has the paper's input and
output linear layers, so every conv aggregates MaxK-sparse hidden features; as in the paper's
models (MaxK-GNN's ``utils/models.py``), the last conv's output reaches the output linear as
it is, with no MaxK or dropout between them.

With the ``pyg`` backend the convs are stock PyG layers applied to the dense MaxK output
(``fastgnn.nn.MaxK``, then dropout). ``fastgnn.enable`` (the ``fastgnn`` and ``reference``
backends) swaps every conv whose input is a MaxK output for the fused MaxK layer of
``fastgnn.nn`` (linear -> MaxK -> CBSR aggregation, dropout on the kept entries), which takes
the pre-activation instead: same parameters and ``state_dict`` keys, so checkpoints move
between backends. Convs fed otherwise (the first one without an input MLP, every one with
residual connections, whose input is a sum) stay as they are."""
from __future__ import annotations

from torch_geometric.nn import GCNConv, GINConv, SAGEConv

from fastgnn.enable import register_swap
from fastgnn.nn import MaxK
from fastgnn.nn.maxk_conv import MaxKGCNConv, MaxKGINConv, MaxKSAGEConv
from fastgnn.pyg._base import inherit_message_types
from fastgnn.zoo.models.gcn import GCN
from fastgnn.zoo.models.gin import GIN
from fastgnn.zoo.models.sage import SAGE


class _OnMaxK:
    """A stock conv whose input the model sparsifies with MaxK(k) and dropout; keeps ``k`` and
    ``dropout`` for the fused layer that ``fastgnn.enable`` swaps in."""

    def __init__(self, *args, k: int, dropout: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.k, self.dropout = k, dropout


class MaxKInputSAGEConv(_OnMaxK, SAGEConv):
    pass


class MaxKInputGCNConv(_OnMaxK, GCNConv):
    pass


class MaxKInputGINConv(_OnMaxK, GINConv):
    pass


# what fastgnn.enable swaps them for (created by the swap, which shares the stock instance's
# state, never constructed)
class FusedSAGEConv(MaxKSAGEConv, MaxKInputSAGEConv):
    pass


class FusedGCNConv(MaxKGCNConv, MaxKInputGCNConv):
    pass


class FusedGINConv(MaxKGINConv, MaxKInputGINConv):
    pass


_FUSED = (FusedSAGEConv, FusedGCNConv, FusedGINConv)
for _stock, _fused in zip((MaxKInputSAGEConv, MaxKInputGCNConv, MaxKInputGINConv), _FUSED):
    inherit_message_types(_stock)
    inherit_message_types(_fused)
    register_swap(_stock, _fused)


class MaxKMixin:
    """Replaces the activation by :class:`MaxK`; ``k`` must not exceed ``hidden_channels``."""

    def __init__(self, in_channels: int, out_channels: int, k: int = 32, **options):
        if "activation" in options:
            raise ValueError(f"{type(self).__name__} uses MaxK as its activation; "
                             f"do not set activation")
        if options.get("feed_forward"):  # its convs take MaxK outputs, not a block's
            raise ValueError(f"{type(self).__name__} does not support feed_forward")
        self.k = k
        options.setdefault("input_mlp", True)
        options.setdefault("output_mlp", True)
        super().__init__(in_channels, out_channels, **options)

    def make_activation(self, activation):
        k, hidden = self.k, self.hidden_channels
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= hidden:
            raise ValueError(f"k must be an int in [1, hidden_channels={hidden}], got {k!r}")
        return MaxK(k)

    def _on_maxk(self) -> bool:
        """Whether the conv being built takes a MaxK output (the Backbone builds lin_in, then
        the convs in order)."""
        return not self.residual and (self.lin_in is not None or len(self.convs) > 0)

    def _conv_on(self, index: int, h, pre: bool, edge_index):
        """Conv ``index`` on ``h``: a pre-activation (``pre``) gets MaxK and dropout first,
        inside the conv when it is a fused one."""
        conv = self.convs[index]
        if pre and isinstance(conv, _FUSED):
            return conv(h, edge_index)
        return conv(self.dropout(self.act(h)) if pre else h, edge_index)

    def forward(self, x, edge_index, edge_attr=None):
        if self.residual:
            return super().forward(x, edge_index, edge_attr)
        # the Backbone's order, with MaxK and dropout deferred to the conv that consumes them
        x = self.drop_input(x)
        h, pre = (self.lin_in(x), True) if self.lin_in is not None else (x, False)
        for i, norm in enumerate(self.norms):
            h, pre = norm(self._conv_on(i, h, pre, edge_index)), True
        if self.lin_out is not None:  # the last conv's output, as it is (the paper's models)
            return self.lin_out(h)
        return self._conv_on(len(self.convs) - 1, h, pre, edge_index)


class MaxKSAGE(MaxKMixin, SAGE):
    def make_conv(self, in_channels, out_channels, last):
        if not self._on_maxk():
            return super().make_conv(in_channels, out_channels, last)
        return MaxKInputSAGEConv(in_channels, out_channels, k=self.k, dropout=self.dropout_rate,
                                 aggr=self.aggr)


class MaxKGCN(MaxKMixin, GCN):
    def make_conv(self, in_channels, out_channels, last):
        if not self._on_maxk():
            return super().make_conv(in_channels, out_channels, last)
        return MaxKInputGCNConv(in_channels, out_channels, k=self.k, dropout=self.dropout_rate,
                                cached=self.cached, add_self_loops=self.add_self_loops)


class MaxKGIN(MaxKMixin, GIN):
    def make_conv(self, in_channels, out_channels, last):
        if not self._on_maxk():
            return super().make_conv(in_channels, out_channels, last)
        stock = super().make_conv(in_channels, out_channels, last)
        return MaxKInputGINConv(stock.nn, k=self.k, dropout=self.dropout_rate,
                                train_eps=self.train_eps)
