"""GAT's per-node attention scores, shared by the PyG and DGL GATConv adapters.

Both libraries compute ``h = x @ W.T`` (no bias), view it ``[N, H, C]`` and take
``(h * att).sum(-1)`` for the source and destination scores. The same scores are
``x @ fold(W, att).T`` with ``fold(W, att)[h] = sum_c att[h, c] * W[h, c]`` (``[H, F]``): one
thin product that reads ``x`` once, instead of two passes over ``h`` forward and four
``N x H x C`` tensors (the broadcast gradients and their sums) backward. It pays while ``x``
is no wider than ``h``, so wider inputs (a first layer on bag-of-words features) keep the
elementwise form, as do attention vectors of another dtype than ``h`` (the elementwise
product promotes them, a matrix product would refuse). Either way the scores equal the stock
layer's to rounding, in the stock layer's dtype.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F


def gat_scores(x: torch.Tensor, weight: Optional[torch.Tensor], h: torch.Tensor,
               *atts: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """``(h * att).sum(-1)`` (``[N, H]``) for each ``att`` (``[1, H, C]`` or ``[H, C]``), where
    ``h [N, H, C]`` is ``x [N, F] @ weight.T``. ``weight`` None (a projection that is not one
    bias-free linear map) takes the elementwise form."""
    heads, channels = h.shape[1], h.shape[2]
    if weight is None or x.shape[-1] > heads * channels \
            or any(att.dtype != h.dtype for att in atts):
        return tuple((h * att).sum(dim=-1) for att in atts)
    per_head = weight.view(heads, channels, -1)
    folded = torch.cat([(per_head * att.reshape(heads, channels, 1)).sum(dim=1) for att in atts])
    return F.linear(x, folded).split(heads, dim=1)


def bias_free_weight(linear: torch.nn.Module) -> Optional[torch.Tensor]:
    """The weight of a bias-free linear map (``torch.nn.Linear`` or PyG's ``Linear``), else None:
    also None when hooks may change what the map computes."""
    if linear._forward_hooks or linear._forward_pre_hooks:
        return None
    params = linear._parameters
    weight = params.get("weight")
    if not isinstance(weight, torch.Tensor) or params.get("bias") is not None \
            or isinstance(weight, torch.nn.parameter.UninitializedParameter):
        return None
    return weight
