"""GAT's projection, scores and attention as one autograd node, so that a layer's backward holds
two node-sized tensors where the separate nodes hold three or more.

Separately, the attention op's backward reads the projection ``h = x W^T`` while it writes all
of ``grad_h``, and the projection's backward then holds ``grad_h`` beside ``grad_x``: with the
layer's output, three ``N x H C`` tensors are alive at once. Here the attention backward runs
on a range of sources at a time (``gat_source_backward``: each source's gradients read only its
own row of ``h``), and each range's ``grad_h`` becomes its share of ``grad_x`` and ``grad_W``
at once. Where ``grad_x`` has ``h``'s shape it is written over ``h``'s own rows, once the range
has been read: the backward then holds the output, ``h`` (turned into ``grad_x``) and one
range's ``grad_h``. Without edge scores, whose gradient is an ``[E, H]`` output anyway, the
per-edge logit gradients are bounded the same way where they do not fit one range:
consecutive source ranges whose edges' logit gradients fit the range size share a buffer of
their own edges (``logit_slot``), and ``gat_destination_backward`` adds each such group to
the destination scores' gradient, in order (deterministic). See docs/gat.md for the measured
peaks.

It runs by default on the CPU, where it is also faster (ogbn-arxiv at width 256, 2 threads:
backward 468-490 against 629 ms, the ranges reusing memory that fresh node-sized buffers
would fault in), and on CUDA only with ``FASTGNN_GAT_LOW_MEMORY=1``: there the ranges cost
time (smaller GEMMs and the backward's Python loop; on an H100, roads-ny at width 256 backward
3.82 against 2.88 ms, while ogbn-arxiv's hub sources gain from the ranges' out-degree buckets:
3.21 against 3.04 ms). ``FASTGNN_GAT_LOW_MEMORY=0`` turns it off everywhere. It takes the paths
``_gat_scores.gat_scores`` fuses (a plain bias-free linear map of a 2-D input, one dtype, no
autocast) on the native backend, outside torch.compile; callers run the separate nodes
otherwise.
"""
from __future__ import annotations

import math
import os
from typing import List, Optional, Tuple

import torch

from fastgnn import _library, backends, reordering
from fastgnn._gat_scores import _block_diagonal, _one_node_weight, _stacked, score_gradients
from fastgnn.graph import Graph
from fastgnn.ops import attention
from fastgnn.ops._common import check_graph

#: bytes of ``grad_h`` one source range may take: ranges are as few as this allows. A
#: projection that fits one range runs as separate nodes: splitting it would save little memory
#: and cost host time (each range is a few more launches and a smaller GEMM)
RANGE_BYTES = 64 * 2**20
#: FASTGNN_GAT_RANGE_MB, read once at import: RANGE_BYTES in MiB (smaller ranges hold less
#: memory and cost backward time; docs/gat.md measures the trade)
RANGE_MB = os.environ.get("FASTGNN_GAT_RANGE_MB")
#: FASTGNN_GAT_LOW_MEMORY, read once at import (every GAT layer call asks): "1" runs this node
#: everywhere, "0" nowhere, unset on the CPU only
LOW_MEMORY = os.environ.get("FASTGNN_GAT_LOW_MEMORY")


def gat_layer(g: Graph, x: torch.Tensor, linear: torch.nn.Module, heads: int,
              atts: Tuple[torch.Tensor, ...], alpha_dst: Optional[torch.Tensor],
              negative_slope: float, dropout: float,
              alpha_edge: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """``gat_attention(g, h, scores_src, alpha_dst)`` with ``h = linear(x).view(-1, heads, C)``
    and the source scores ``(h * atts[0]).sum(-1)``, as one autograd node; ``[T, H, C]``.
    With ``atts = (att_src, att_dst)`` the destination scores are ``(h * att_dst).sum(-1)`` of
    the first T rows (``alpha_dst`` None); with ``atts = (att_src,)`` they are ``alpha_dst``.
    None where the node is not asked for (``low_memory_requested``) or does not apply, or
    where the projection fits one range (``range_bytes()``): the caller runs the separate ones."""
    if not low_memory_requested(x.device):
        return None
    weight = _one_node_weight(x, linear, *atts)
    if weight is None or _library.is_compiling() \
            or backends.select("gat_attention", x.device).backend != "native" \
            or x.shape[0] * weight.shape[0] * x.element_size() <= range_bytes():
        return None
    if any(t is not None and t.dtype != x.dtype for t in (alpha_dst, alpha_edge)):
        return None
    return _gat_layer(g, x, weight, _stacked(atts, heads, weight.shape[0] // heads), alpha_dst,
                      float(negative_slope), float(dropout), alpha_edge)


def range_bytes() -> int:
    """The bytes of ``grad_h`` one source range may take: ``RANGE_MB`` MiB where it is set."""
    if RANGE_MB is None:
        return RANGE_BYTES
    if not RANGE_MB.isdigit() or int(RANGE_MB) == 0:
        raise ValueError(f"FASTGNN_GAT_RANGE_MB must be a positive whole number of MiB, got "
                         f"{RANGE_MB!r}")
    return int(RANGE_MB) * 2**20


def low_memory_requested(device: torch.device) -> bool:
    """Whether this node runs on ``device`` under ``LOW_MEMORY``."""
    if LOW_MEMORY is None:
        return device.type == "cpu"
    if LOW_MEMORY not in ("0", "1"):
        raise ValueError(f"FASTGNN_GAT_LOW_MEMORY must be 0 or 1, got {LOW_MEMORY!r}")
    return LOW_MEMORY == "1"


@reordering.in_caller_order("x", "alpha_dst")
def _gat_layer(g: Graph, x: torch.Tensor, weight: torch.Tensor, atts: torch.Tensor,
               alpha_dst: Optional[torch.Tensor], negative_slope: float, dropout: float,
               alpha_edge: Optional[torch.Tensor]) -> torch.Tensor:
    check_graph(g)
    attention.check_dropout(dropout)
    if x.shape[0] != g.num_src_nodes:
        raise ValueError(f"x must have one row per source node ({g.num_src_nodes}), got "
                         f"{x.shape[0]}")
    if alpha_dst is None and g.num_dst_nodes > g.num_src_nodes:
        raise ValueError("destination scores from the sources' projection need the "
                         "destinations to be the first sources")
    seed_tensor = attention.draw_seed_tensor(x.device) if dropout > 0 else None
    return _GatLayer.apply(x, weight, atts, alpha_dst, alpha_edge, g, negative_slope, dropout,
                           seed_tensor)


class _GatLayer(torch.autograd.Function):
    """``out [T, H, C]`` from ``x [S, F]``, ``weight [H C, F]``, ``atts [H, C, K]`` and, for
    K = 1, ``alpha_dst [T, H]``; ``alpha_edge [E, H]`` or None."""

    @staticmethod
    def forward(ctx, x, weight, atts, alpha_dst, alpha_edge, g, negative_slope, dropout,
                seed_tensor):
        heads, channels, k = atts.shape
        h = torch.nn.functional.linear(x, weight)
        scores = (h @ _block_diagonal(atts)).view(x.shape[0], heads, k)
        alpha_src = scores[:, :, 0].contiguous()
        if alpha_dst is None:
            alpha_dst = scores[:g.num_dst_nodes, :, 1].contiguous()
        features = (alpha_dst, h.view(x.shape[0], heads, channels), alpha_src, alpha_edge)
        grad = any(ctx.needs_input_grad[:5])
        out, lse = attention.native_forward("gat_attention", g, features, negative_slope,
                                            dropout, grad, seed_tensor=seed_tensor)
        if grad:
            ctx.save_for_backward(x, weight, atts, alpha_src, alpha_dst, alpha_edge, out, lse,
                                  seed_tensor)
            ctx.h = h  # not a saved tensor: the backward writes grad_x over it
            ctx.g, ctx.negative_slope, ctx.dropout = g, negative_slope, dropout
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # its gradient ops are (backward_ops_autograd.cpp)
    def backward(ctx, grad_out):
        x, weight, atts, alpha_src, alpha_dst, alpha_edge, out, lse, seed_tensor = \
            ctx.saved_tensors
        g = ctx.g
        h, ctx.h = ctx.h, None
        if h is None:  # a second backward through a retained graph: the first used h up
            h = torch.nn.functional.linear(x, weight)
        need_x, need_weight, need_atts, need_dst, need_edge = ctx.needs_input_grad[:5]
        heads, channels, k = atts.shape
        rows, width = h.shape
        grad_out = grad_out.contiguous()
        delta = _library.op("attention_delta_backward")(grad_out, out)
        graph = attention.structure_args(g, True)
        rowptr, col, edge_perm, t_rowptr, t_col, t_perm = graph
        walked = (rowptr, col) if t_rowptr is None else (t_rowptr, t_col)
        # grad_x over h's rows: h [S, H C] and grad_x [S, F] alike where F = H C
        over_h = need_x and x.shape[1] == width and h.is_contiguous()
        grad_x = h if over_h else (x.new_empty(x.shape) if need_x else None)
        grad_weight = torch.zeros_like(weight) if need_weight else None
        grad_src = torch.empty_like(alpha_src)
        args = (alpha_dst, h.view(rows, heads, channels), alpha_src, alpha_edge, ctx.negative_slope,
                ctx.dropout, 0, seed_tensor, 0)
        plan = attention.launch_plan("gat_attention", g, graph, args)
        ranges = _source_ranges(g, plan, rows, width, h.element_size())
        dst_buckets = attention.plan_buckets(g, plan)
        destination = _library.op("gat_destination_backward")
        if alpha_edge is None and g.num_edges * heads * delta.element_size() > range_bytes():
            # one buffer of a group's edges, reused by every group
            slot, groups = _logit_groups(g, graph, ranges, heads * delta.element_size())
            buffer = delta.new_empty((max(edges for _, _, edges in groups), heads))
            group = iter(groups)
            last, group_rowptr, group_edges = next(group)
        else:
            slot, grad_logit = None, delta.new_empty((g.num_edges, heads))
        grad_dst = None
        for i, (begin, end, light, heavy, warps) in enumerate(ranges):
            if slot is not None:
                grad_logit = buffer[:group_edges]
            grad_h, grad_src_rows = _library.op("gat_source_backward")(
                grad_out, lse, delta, *walked, t_perm, edge_perm, alpha_dst,
                h[begin:end].view(end - begin, heads, channels), alpha_src[begin:end], alpha_edge,
                ctx.negative_slope, ctx.dropout, 0, seed_tensor, 0, begin, light, heavy, warps,
                grad_logit, slot)
            if slot is not None and i == last:  # the group's share of the destinations' gradient
                part, _ = destination(group_rowptr, grad_logit, None, False, delta.dtype,
                                      *dst_buckets)
                grad_dst = part if grad_dst is None else grad_dst.add_(part)
                last, group_rowptr, group_edges = next(group, (None, None, None))
            grad_src[begin:end] = grad_src_rows
            grad_h = grad_h.view(end - begin, width)
            if need_weight:
                grad_weight.addmm_(grad_h.t(), x[begin:end])
            if need_x:  # h's rows [begin, end) are read: grad_x may take them
                torch.mm(grad_h, weight, out=grad_x[begin:end])
        if slot is None:
            grad_dst, grad_edge = destination(rowptr, grad_logit, edge_perm, True, x.dtype,
                                              *dst_buckets)
        else:
            grad_dst, grad_edge = grad_dst.to(x.dtype), None
        by_row = grad_src.unsqueeze(-1)
        if k == 2:  # the destinations' scores came from the first rows' projection
            by_row = torch.cat([by_row, torch.zeros_like(by_row)], dim=-1)
            by_row[:g.num_dst_nodes, :, 1] = grad_dst
        grad_x, grad_weight, grad_atts = score_gradients(
            x, weight, atts, by_row.view(rows, heads * k), grad_x, grad_weight, need_x,
            need_weight, need_atts)
        return (grad_x, grad_weight, grad_atts, grad_dst if need_dst else None,
                grad_edge if need_edge else None, None, None, None, None)


def _source_ranges(g: Graph, plan: str, rows: int, width: int,
                   element_size: int) -> List[tuple]:
    """``(begin, end, light_rows, heavy_rows, heavy_warps)`` of each source range: ranges of at
    most ``range_bytes()`` of ``grad_h``, with the launch plan's buckets of the sources by
    out-degree (hub sources get several warps: a range's launch lasts as long as its longest
    row) restricted to each range and counted from its start. Cached on the graph per plan and
    range length."""
    count = max(1, math.ceil(rows * width * element_size / range_bytes()))
    step = max(1, math.ceil(rows / count))

    def build():
        light, heavy, warps = attention.plan_buckets(g, plan, "out")
        ranges = []
        for begin in range(0, rows, step):
            end = min(rows, begin + step)
            if light is None:
                ranges.append((begin, end, None, None, 1))
                continue
            inside = [b[(b >= begin) & (b < end)] - begin for b in (light, heavy)]
            ranges.append((begin, end, inside[0], inside[1], warps))
        return ranges
    return g.cached(("gat_source_ranges", plan, step), build)


def _logit_groups(g: Graph, graph: tuple, ranges: List[tuple], bytes_per_edge: int) -> tuple:
    """``(logit_slot, groups)``: the source ranges in groups of consecutive ranges whose edges'
    logit gradients fit ``range_bytes()`` (at least one range each), as ``(last range index,
    CSR over the destinations [T + 1], edge count)``; and each walked edge's row in its group's
    buffer (``logit_slot [E]``: a buffer holds its group's edges in forward CSR order). Cached
    on the graph per range split."""
    rowptr, _, _, t_rowptr, _, t_perm = graph
    walked_rowptr = rowptr if t_rowptr is None else t_rowptr

    def build():
        bounds = walked_rowptr[[r[0] for r in ranges] + [ranges[-1][1]]].tolist()
        lasts, first = [], 0  # group ends, greedily
        for i in range(len(ranges)):
            if i + 1 == len(ranges) or \
                    (bounds[i + 2] - bounds[first]) * bytes_per_edge > range_bytes():
                lasts.append(i)
                first = i + 1
        slot = torch.empty_like(t_perm)
        groups, begin = [], 0
        for last in lasts:
            lo, hi = bounds[begin], bounds[last + 1]
            positions = t_perm[lo:hi].long()  # forward CSR positions of the group's edges
            slot[lo:hi][torch.argsort(positions)] = torch.arange(
                hi - lo, dtype=slot.dtype, device=slot.device)
            counts = torch.bincount(g.row[positions].long(), minlength=g.num_dst_nodes)
            groups.append((last, torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(
                rowptr.dtype), hi - lo))
            begin = last + 1
        return slot, groups
    key = ("gat_logit_groups", tuple(r[0] for r in ranges), bytes_per_edge, range_bytes())
    return g.cached(key, build)
