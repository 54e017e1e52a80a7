"""Where DGL sends the gradient of the min/max entries that no message won
(``fastgnn.ops.aggregate(..., nan="ignore")``), and DGL's CUDA float16 start.

DGL 2.1 zero-fills its winner buffers before its kernels scan the messages, so an entry that
no message wins (a destination without in-edges, only NaN messages, only messages equal to the
identity under a strict comparison) keeps node 0 and edge 0 as its winners: its gradient goes
to node 0 (times edge 0's weight) and to edge 0 (times node 0's features).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

HALF_LIMIT = 65504.0  # DGL's CUDA float16 start for min (max: its negative)


class _UnwonToFirst(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out, unwon, x0, w0):
        ctx.save_for_backward(unwon, x0, w0)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        unwon, x0, w0 = ctx.saved_tensors
        unsent = torch.where(unwon, grad, torch.zeros_like(grad)).sum(0)  # per feature
        if w0 is None:
            return grad, None, unsent, None
        heads = w0.numel()
        per_head = unsent.view(heads, -1)
        grad_x0 = (per_head * w0.view(heads, 1)).view(-1)
        grad_w0 = (per_head * x0.view(heads, -1)).sum(1)
        return grad, None, grad_x0, grad_w0


def route_unwon_to_first(out: torch.Tensor, unwon: torch.Tensor, x: torch.Tensor,
                         weight: Optional[torch.Tensor]) -> torch.Tensor:
    """``out`` ([T, F]) whose gradient at the ``unwon`` entries also reaches ``x[0]`` ([N, F]:
    times ``weight[0]``) and ``weight[0]`` (``[E, H]``, input edge order, each head's weight
    over F / H features: times ``x[0]``). Nothing moves where node 0 or edge 0 does not exist
    (DGL's backward fails there)."""
    if x.shape[0] == 0 or (weight is not None and weight.shape[0] == 0) or \
            not torch.is_grad_enabled():
        return out
    return _UnwonToFirst.apply(out, unwon, x[0], None if weight is None else weight[0])


def from_half_limit(out: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor],
                    reduce: str) -> torch.Tensor:
    """``out`` (max or min by ``reduce`` of ``x`` times ``weight``, ``[E, H]`` or None, from
    -inf/+inf with NaN ignored) as if reduced from DGL's CUDA float16 start, -65504 for max
    (+65504 for min), under its strict comparison: every entry at or beyond that limit (no
    message beat it) becomes the limit, its gradient sent to node 0 and edge 0 instead of the
    message that reached it."""
    limit = -HALF_LIMIT if reduce == "max" else HALF_LIMIT
    unbeaten = out <= limit if reduce == "max" else out >= limit
    at_limit = out.masked_fill(unbeaten, limit)  # no gradient there
    rows, width = out.shape[0], math.prod(out.shape[1:])
    return route_unwon_to_first(at_limit.reshape(rows, width), unbeaten.reshape(rows, width),
                                x.reshape(x.shape[0], width), weight).reshape(out.shape)
