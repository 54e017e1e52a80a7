"""GAT's projection and per-node attention scores, shared by the PyG and DGL GATConv adapters.

Both libraries compute ``h = x @ W.T`` (no bias), view it ``[N, H, C]`` and take
``(h * att).sum(-1)`` for the source and destination scores: two passes over ``h`` forward
and, backward, broadcast ``N x H x C`` score gradients that autograd sums with the attention
op's gradient of ``h``. Here the projection and the scores are one autograd node:
- forward, the scores are one product of ``h`` with the attention vectors on a block
  diagonal;
- backward, the scores' share of ``x``'s gradient is ``grad_scores @ fold(W, att)`` with
  ``fold(W, att)[h, k] = sum_c att_k[h, c] W[h, c]`` (``[H K, F]``), added by the same GEMM
  into the projection's own ``grad_h @ W`` (beta = 1), and their share of ``W``'s and the
  attention vectors' gradients comes through ``grad_scores.T @ x`` (``[H K, F]``).
No ``N x H x C`` temporary and no separate add of two ``N x F`` gradients.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from fastgnn._library import autocast_dtype


def gat_scores(x: torch.Tensor, linear: torch.nn.Module, heads: int,
               *atts: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """``(h, *scores)``: ``h = linear(x).view(-1, heads, C)`` and ``scores[i] = (h *
    atts[i]).sum(-1)`` (``[N, H]``) for each ``att`` (``[1, H, C]`` or ``[H, C]``). A projection
    that is not one plain bias-free linear map of a 2-D input (hooks, a bias, a subclass with its
    own forward such as the sparse-input layers) runs as the module computes it, with the
    scores a product of its output; autocast and mixed dtypes (whose promotion the stock
    elementwise form does) run the stock form. Either way the results equal the stock layer's
    to rounding."""
    weight = _one_node_weight(x, linear, *atts)
    if weight is not None:
        h, scores = _ProjectWithScores.apply(x, weight, _stacked(atts, heads,
                                                                  weight.shape[0] // heads))
    else:
        h = _project(linear, x, heads)
        if any(att.dtype != h.dtype for att in atts):  # autocast, or a layer cast in part
            return (h,) + tuple((h * att).sum(dim=-1) for att in atts)
        scores = h.flatten(1) @ _block_diagonal(_stacked(atts, heads, h.shape[2]))
    return (h,) + tuple(scores.view(h.shape[0], heads, -1).unbind(dim=-1))


def destination_scores(x: torch.Tensor, linear: torch.nn.Module, heads: int,
                       att: torch.Tensor) -> torch.Tensor:
    """``(linear(x).view(-1, heads, C) * att).sum(-1)`` (``[N, H]``) for destinations whose
    projection nothing else reads (a bipartite pair's): with the one-node form's plain linear
    map, one thin product ``x @ fold(W, att).T``, never the ``N x H C`` projection."""
    weight = _one_node_weight(x, linear, att)
    if weight is None:
        return gat_scores(x, linear, heads, att)[1]
    return x @ _fold(weight, _stacked((att,), heads, weight.shape[0] // heads)).t()


def _one_node_weight(x: torch.Tensor, linear: torch.nn.Module,
                     *atts: torch.Tensor) -> Optional[torch.Tensor]:
    """The projection's weight where the scores may be computed from it: a plain bias-free
    linear map of a 2-D input, no autocast, one dtype throughout; else None."""
    weight = bias_free_weight(linear)
    if weight is not None and x.dim() == 2 and autocast_dtype(x.device.type) is None \
            and all(t.dtype == x.dtype for t in (weight, *atts)):
        return weight
    return None


def _fold(weight: torch.Tensor, atts: torch.Tensor) -> torch.Tensor:
    """``fold(W, att) [H K, F]`` with ``fold[h, k] = sum_c atts[h, c, k] W[h, c]``: the scores
    of ``h = x W.T`` are ``x @ fold.T``."""
    heads, channels, k = atts.shape
    return torch.bmm(atts.transpose(1, 2), weight.view(heads, channels, -1)).view(heads * k, -1)


def _project(linear: torch.nn.Module, x: torch.Tensor, heads: int) -> torch.Tensor:
    """``linear(x)`` viewed ``[N, H, C]``, as both libraries' GATConv view it."""
    h = linear(x)
    return h.view(-1, heads, h.shape[-1] // heads)


def _stacked(atts: Tuple[torch.Tensor, ...], heads: int, channels: int) -> torch.Tensor:
    """The attention vectors as ``[H, C, K]``."""
    return torch.stack([att.reshape(heads, channels) for att in atts], dim=-1)


def _block_diagonal(atts: torch.Tensor) -> torch.Tensor:
    """``[H C, H K]`` with head h's ``[C, K]`` block on the diagonal: ``h [N, H C]`` times it is
    every head's scores in one thin product (a batched product per head runs slower on the
    strided head slices). Two kernels whatever H (``torch.block_diag`` copies block by block:
    H + 1 launches on every call of a layer)."""
    heads, channels, k = atts.shape
    blocks = atts.new_zeros(heads, channels, heads, k)
    blocks.diagonal(dim1=0, dim2=2).copy_(atts.permute(1, 2, 0))
    return blocks.view(heads * channels, heads * k)


def bias_free_weight(linear: torch.nn.Module) -> Optional[torch.Tensor]:
    """The weight of a bias-free linear map (``torch.nn.Linear`` or PyG's ``Linear``), else None:
    also None when hooks or a subclass's own forward may change what the map computes."""
    if type(linear).forward not in _PLAIN_FORWARDS or linear._forward_hooks \
            or linear._forward_pre_hooks:
        return None
    params = linear._parameters
    weight = params.get("weight")
    if not isinstance(weight, torch.Tensor) or params.get("bias") is not None \
            or isinstance(weight, torch.nn.parameter.UninitializedParameter):
        return None
    return weight


def _plain_forwards() -> Tuple:
    forwards = [torch.nn.Linear.forward]
    try:
        from torch_geometric.nn.dense.linear import Linear
        forwards.append(Linear.forward)
    except ImportError:  # PyG absent: the DGL adapter uses torch.nn.Linear
        pass
    return tuple(forwards)


_PLAIN_FORWARDS = _plain_forwards()


class _ProjectWithScores(torch.autograd.Function):
    """``(h [N, H, C], scores [N, H, K])`` from ``x [N, F]``, ``weight [H C, F]`` and the stacked
    attention vectors ``atts [H, C, K]``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, atts: torch.Tensor):
        heads, channels, _ = atts.shape
        ctx.save_for_backward(x, weight, atts)
        h = torch.nn.functional.linear(x, weight)
        return h.view(x.shape[0], heads, channels), h @ _block_diagonal(atts)

    @staticmethod
    def backward(ctx, grad_h: Optional[torch.Tensor], grad_scores: Optional[torch.Tensor]):
        x, weight, atts = ctx.saved_tensors
        heads, channels, k = atts.shape
        need_x, need_weight, need_atts = ctx.needs_input_grad
        grad_x = grad_weight = grad_atts = None
        if grad_h is not None:
            grad_h = grad_h.reshape(x.shape[0], heads * channels)
            grad_x = grad_h @ weight if need_x else None
            grad_weight = grad_h.t() @ x if need_weight else None
        if grad_scores is None:
            return grad_x, grad_weight, None
        return score_gradients(x, weight, atts, grad_scores.reshape(x.shape[0], heads * k),
                               grad_x, grad_weight, need_x, need_weight, need_atts)


def score_gradients(x: torch.Tensor, weight: torch.Tensor, atts: torch.Tensor,
                    by_row: torch.Tensor, grad_x: Optional[torch.Tensor],
                    grad_weight: Optional[torch.Tensor], need_x: bool, need_weight: bool,
                    need_atts: bool):
    """``(grad_x, grad_weight, grad_atts)`` with the scores' share added: ``by_row [N, H K]`` is
    the gradient of the scores ``x @ fold(weight, atts).T``; ``grad_x`` and ``grad_weight``,
    the projection's own (or None), are added to in place."""
    heads, channels, k = atts.shape
    grad_atts = None
    if need_x:
        folded = _fold(weight, atts)
        # grad_x is the caller's own product, so the scores' share goes into it in place.
        grad_x = by_row @ folded if grad_x is None else grad_x.addmm_(by_row, folded)
    if need_weight or need_atts:
        grad_folded = (by_row.t() @ x).view(heads, k, -1)
        if need_weight:
            share = torch.bmm(atts, grad_folded).view(heads * channels, -1)
            grad_weight = share if grad_weight is None else grad_weight.add_(share)
        if need_atts:
            grad_atts = torch.bmm(weight.view(heads, channels, -1), grad_folded.transpose(1, 2))
    return grad_x, grad_weight, grad_atts
