"""The backbone every zoo model shares: the options of the strong baselines of the heterophily
benchmark (Platonov et al., 2023) and GraphLand (Bazhenov et al.) around one PyG conv per layer.

Layout, for ``num_layers`` convs:

- input dropout (optional, GAT's): ``x -> dropout(x)`` with its own rate;
- input MLP (optional): ``x -> dropout(act(Linear(x)))`` to the hidden width;
- each hidden layer, without residual connections (PyG's ``BasicGNN`` order):
  ``h -> dropout(act(norm(conv(h))))``;
- with residual connections (pre-norm, as in the heterophily benchmark):
  ``h -> h + dropout(act(conv(norm(h))))``, and one more norm before the output; a layer whose
  input width differs from the hidden width (the first one without an input MLP) has no skip;
- with a feed-forward block (optional): ``dropout(act(.))`` after each hidden conv (and its
  norm, without residual connections) becomes ``FF = dropout -> act -> Linear -> dropout`` at
  the hidden width, so ``h -> FF(norm(conv(h)))`` or ``h -> h + FF(conv(norm(h)))``. With the
  conv's own weight as the first linear map, this is the heterophily benchmark's block
  ``Linear -> dropout -> act -> Linear -> dropout`` (GCNConv and SAGEConv: exactly, weights
  included; attention convs have the benchmark's input projection instead);
- the output: the last conv maps to ``out_channels``, or, with an output MLP, every conv is a
  hidden layer and a ``Linear`` maps to ``out_channels``.

Subclasses only say how to build a conv (:meth:`Backbone.make_conv`), and may say how its
linear maps start as one ``torch.nn.Linear`` (``conv_init="torch"``,
:meth:`Backbone.init_conv_as_linear`).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

NORMS = ("none", "layer", "batch")
CONV_INITS = ("pyg", "torch")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "elu": nn.ELU}


def _choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _norm(kind: str, width: int) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(width)
    if kind == "batch":
        return nn.BatchNorm1d(width)
    return nn.Identity()


class Backbone(nn.Module):
    """Node-level GNN: ``forward(x, edge_index, edge_attr=None) -> [N, out_channels]``."""

    #: attention models split ``hidden_channels`` into ``heads``
    attention = False
    #: models whose convs take ``edge_attr``
    takes_edge_attr = False

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 64,
                 num_layers: int = 2, heads: int = 1, dropout: float = 0.5,
                 residual: bool = False, norm: str = "none", input_mlp: bool = False,
                 output_mlp: bool = False, activation: str = "relu",
                 input_dropout: float = 0.0, feed_forward: bool = False,
                 attention_dropout: Optional[float] = None, conv_init: str = "pyg"):
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                            ("hidden_channels", hidden_channels), ("num_layers", num_layers),
                            ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        rates = [("dropout", dropout), ("input_dropout", input_dropout)]
        if attention_dropout is not None:
            rates.append(("attention_dropout", attention_dropout))
        for name, rate in rates:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
                    or not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate!r}")
        _choice("norm", norm, NORMS)
        _choice("conv_init", conv_init, CONV_INITS)
        if conv_init == "torch" and \
                type(self).init_conv_as_linear is Backbone.init_conv_as_linear:
            raise ValueError(f"conv_init='torch' applies to models whose convs are one linear "
                             f"map of an aggregate (gcn, sage), not {type(self).__name__}")
        if not isinstance(feed_forward, bool):
            raise ValueError(f"feed_forward must be a bool, got {feed_forward!r}")
        if heads != 1 and not self.attention:
            raise ValueError(f"heads applies to attention models only; "
                             f"{type(self).__name__} takes heads=1, got {heads}")
        if attention_dropout is not None and not self.attention:
            raise ValueError(f"attention_dropout applies to attention models only, not "
                             f"{type(self).__name__}")
        if hidden_channels % heads:
            raise ValueError(f"hidden_channels ({hidden_channels}) must be divisible by heads "
                             f"({heads})")
        # make_conv and make_activation may read these
        self.hidden_channels, self.heads, self.dropout_rate = hidden_channels, heads, dropout
        # the attention weights' dropout (None: the model's dropout, as in PyG's GAT example)
        self.attention_dropout_rate = dropout if attention_dropout is None else attention_dropout
        self.residual = residual
        self.dropout = nn.Dropout(dropout)
        self.input_dropout = nn.Dropout(input_dropout) if input_dropout else None
        self.act = self.make_activation(activation)
        self.lin_in = nn.Linear(in_channels, hidden_channels) if input_mlp else None
        width = hidden_channels if input_mlp else in_channels
        num_hidden = num_layers if output_mlp else num_layers - 1
        self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
        # None without the option (as lin_in, lin_out): the model is then the plain layout
        self.feed_forwards = nn.ModuleList() if feed_forward else None
        for _ in range(num_hidden):
            self.convs.append(self.make_conv(width, hidden_channels, last=False))
            self.norms.append(_norm(norm, width if residual else hidden_channels))
            if feed_forward:
                self.feed_forwards.append(nn.Sequential(
                    nn.Dropout(dropout), self.make_activation(activation),
                    nn.Linear(hidden_channels, hidden_channels), nn.Dropout(dropout)))
            width = hidden_channels
        self.norm_out = _norm(norm, width) if residual else None
        if output_mlp:
            self.lin_out = nn.Linear(width, out_channels)
        else:
            self.lin_out = None
            self.convs.append(self.make_conv(width, out_channels, last=True))
        if conv_init == "torch":
            for conv in self.convs:
                self.init_conv_as_linear(conv)

    def make_conv(self, in_channels: int, out_channels: int, last: bool) -> nn.Module:
        """One layer from ``in_channels`` to ``out_channels``; ``last`` for the output conv."""
        raise NotImplementedError

    def init_conv_as_linear(self, conv: nn.Module) -> None:
        """Starts ``conv``'s weights and bias as one ``torch.nn.Linear`` over its whole input
        would (``conv_init="torch"``: the heterophily benchmark's graph layers are such
        Linears, where PyG's start GCNConv's weight at glorot's larger bound and SAGEConv's two
        maps each over half the input). Models whose convs have that reading override it."""
        raise NotImplementedError

    def make_activation(self, activation: str) -> nn.Module:
        _choice("activation", activation, tuple(ACTIVATIONS))
        return ACTIVATIONS[activation]()

    def drop_input(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.input_dropout is None else self.input_dropout(x)

    def after_conv(self, index: int, h: torch.Tensor) -> torch.Tensor:
        """What hidden layer ``index`` applies to its conv's output: act and dropout, or the
        feed-forward block."""
        if self.feed_forwards is not None:
            return self.feed_forwards[index](h)
        return self.dropout(self.act(h))

    def conv(self, index: int, h: torch.Tensor, edge_index, edge_attr) -> torch.Tensor:
        conv = self.convs[index]
        if edge_attr is not None:
            return conv(h, edge_index, edge_attr)
        return conv(h, edge_index)

    def forward(self, x: torch.Tensor, edge_index,
                edge_attr: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not self.takes_edge_attr:
            edge_attr = None
        h = self.drop_input(x)
        if self.lin_in is not None:
            h = self.dropout(self.act(self.lin_in(h)))
        for i, norm in enumerate(self.norms):
            if self.residual:
                out = self.after_conv(i, self.conv(i, norm(h), edge_index, edge_attr))
                h = h + out if out.shape == h.shape else out
            else:
                h = self.after_conv(i, norm(self.conv(i, h, edge_index, edge_attr)))
        if self.norm_out is not None:
            h = self.norm_out(h)
        if self.lin_out is not None:
            return self.lin_out(h)
        return self.conv(len(self.convs) - 1, h, edge_index, edge_attr)


def init_as_linear(weights, bias: Optional[torch.Tensor]) -> None:
    """What ``torch.nn.Linear.reset_parameters`` draws for one map stored as ``weights``
    (``[out, in_k]`` each) side by side over their inputs: its kaiming-uniform with
    a = sqrt(5) bounds the weights, as it does the bias, by 1 / sqrt(fan_in), the summed
    inputs."""
    bound = 1.0 / math.sqrt(sum(weight.shape[1] for weight in weights))
    with torch.no_grad():
        for weight in weights:
            weight.uniform_(-bound, bound)
        if bias is not None:
            bias.uniform_(-bound, bound)
