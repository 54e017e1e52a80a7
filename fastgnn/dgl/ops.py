"""Drop-ins for ``dgl.ops``: the same names, signatures, broadcasting and gradients.

Fused on fastgnn kernels (no edge-sized feature tensor):
  - ``copy_u`` with sum/mean/max/min (``gspmm(g, "copy_lhs", ...)``): ``fastgnn.ops.spmm`` and
    ``fastgnn.ops.aggregate``;
  - ``u_mul_e`` with sum/mean/max/min when the edge data holds one scalar per edge (``[E]``,
    ``[E, 1]``, ...) or one per edge and head (``[E, H, 1, ...]`` against ``[N, H, ...]``):
    ``fastgnn.ops.aggregate`` with edge weights (sum/mean: SpMM per head; max/min: one
    min/max kernel that records the winning edge, so both gradients follow DGL's even with
    duplicate edges);
  - ``u_dot_v`` / ``v_dot_u`` on features of the same shape: the SDDMM kernel, per head;
  - ``edge_softmax`` over every edge (``eids=ALL``), ``norm_by`` dst or src:
    ``fastgnn.ops.edge_softmax``, whose output feeds ``u_mul_e_sum`` as per-head weights.
Max/min keep the tied message DGL keeps (the first or last by edge id, as DGL's kernel for that
call does: see ``fastgnn.dgl._ties``), skip NaN messages, and, as DGL does, send the gradient of
the ``-inf``/``+inf`` entries no message won (no in-edges, only NaN messages) to node 0 and
edge 0 (``fastgnn.dgl._extremes``).
Everything else (other operators and reducers, edge softmax over a subset of the edges,
broadcasting that widens the features, heterographs with several edge types, the segment and
gather ops) runs DGL's own op, with a one-time :class:`fastgnn.FallbackWarning` naming it:
results never differ from DGL's beyond float rounding. Logits DGL would misread (a wrong
number of rows, an unknown ``norm_by``) raise a ValueError or TypeError naming the argument.
"""
from __future__ import annotations

import math
import sys
from itertools import product
from typing import Optional

import dgl.ops as dgl_ops
import torch
from dgl.base import ALL, is_all

from fastgnn import _adapter, _native, backends, ops
from fastgnn.dgl._extremes import dgl_extremes
from fastgnn.dgl._graphs import Unsupported, fastgnn_graph, to_edge_order
from fastgnn.dgl._ties import dgl_ties, padded_shapes
from fastgnn.graph import Graph

__all__ = ["gspmm", "gsddmm", "edge_softmax", "copy_u", "copy_v", "copy_e", "segment_reduce",
           "segment_softmax", "segment_mm", "gather_mm"]

SPMM_OPS = ("add", "sub", "mul", "div", "copy_u", "copy_e")  # dgl.ops.spmm's lists
SPMM_REDUCES = ("sum", "max", "min", "mean")
SDDMM_TARGETS = ("u", "v", "e")
SDDMM_OPS = ("add", "sub", "mul", "div", "dot")
MAX_HEADS = 64  # per-head SpMM loops (u_mul_e sum/mean, dot products) above this run DGL's op


def _fallback(name: str, reason: str, *args, **kwargs):
    _adapter.warn_fallback(f"fastgnn.dgl.{name}", reason, f"dgl.ops.{name}", stacklevel=4)
    return getattr(dgl_ops, name)(*args, **kwargs)


def _node_data(name: str, value, rows: int, graph: Graph) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
        raise Unsupported(f"{name} that is not a float tensor")
    if value.dim() < 2:
        raise Unsupported(f"1-D {name}")
    if value.shape[0] != rows or value.device != graph.device:
        raise Unsupported(f"{name} of shape {list(value.shape)} on {value.device}")
    return value


def _per_head(x_feat: tuple, e_feat: tuple) -> Optional[int]:
    """How many edge-weight columns multiply x: 1 (a scalar per edge), H (one per edge and
    head: ``e_feat == (H, 1, ...)`` against ``x_feat == (H, ...)``), None when broadcasting
    would widen or mix the features."""
    if all(size == 1 for size in e_feat):
        return 1
    if len(x_feat) >= 2 and e_feat[0] == x_feat[0] and all(s == 1 for s in e_feat[1:]):
        return e_feat[0]
    return None


# ---- gspmm -------------------------------------------------------------------------------------
def _spmm_fused(g, op: str, reduce_op: str, lhs, rhs) -> torch.Tensor:
    graph = fastgnn_graph(g)
    extreme = reduce_op in ("max", "min")
    if op == "copy_lhs":
        x = _node_data("lhs_data", lhs, graph.num_src_nodes, graph)
        if not extreme:
            return ops.aggregate(graph, x, reduce_op)
        return dgl_extremes(graph, x, reduce_op, dgl_ties(x))
    if op != "mul":
        raise Unsupported(f"op={op!r} with reduce_op={reduce_op!r}")
    x = _node_data("lhs_data", lhs, graph.num_src_nodes, graph)
    if not isinstance(rhs, torch.Tensor) or rhs.dtype != x.dtype or rhs.device != x.device \
            or rhs.dim() == 0 or rhs.shape[0] != graph.num_edges:
        raise Unsupported("rhs_data that is not edge data of lhs_data's dtype and device")
    x_feat, e_feat = padded_shapes(x, rhs)
    heads = _per_head(x_feat, e_feat)
    if heads is None or (heads > MAX_HEADS and not extreme):
        raise Unsupported(f"lhs_data {list(x.shape)} with rhs_data {list(rhs.shape)}")
    x = x.reshape((x.shape[0],) + x_feat)
    weights = rhs.reshape(graph.num_edges) if heads == 1 else rhs.reshape(graph.num_edges, heads)
    if not extreme:
        return ops.aggregate(graph, x, reduce_op, edge_weight=weights)
    return dgl_extremes(graph, x, reduce_op, dgl_ties(x, rhs), edge_weight=weights)


def _gspmm(name: str, g, op: str, reduce_op: str, lhs_data, rhs_data):
    try:
        return _spmm_fused(g, op, reduce_op, lhs_data, rhs_data)
    except Unsupported as exc:
        reason = str(exc)
    if name == "gspmm":
        return _fallback(name, reason, g, op, reduce_op, lhs_data, rhs_data)
    data = (lhs_data, rhs_data) if op not in ("copy_lhs", "copy_rhs") else \
        ((lhs_data,) if op == "copy_lhs" else (rhs_data,))
    return _fallback(name, reason, g, *data)


def gspmm(g, op, reduce_op, lhs_data, rhs_data):
    """``dgl.ops.gspmm``: ``op`` (add, sub, mul, div, copy_lhs, copy_rhs) of source-node and
    edge data, reduced by ``reduce_op`` (sum, max, min, mean) onto the destinations."""
    return _gspmm("gspmm", g, op, reduce_op, lhs_data, rhs_data)


def _make_spmm(binary_op: str, reduce_op: str):
    if binary_op == "copy_u":
        def func(g, x):
            return _gspmm(func.__name__, g, "copy_lhs", reduce_op, x, None)
        func.__name__ = f"copy_u_{reduce_op}"
    elif binary_op == "copy_e":
        def func(g, x):
            return _gspmm(func.__name__, g, "copy_rhs", reduce_op, None, x)
        func.__name__ = f"copy_e_{reduce_op}"
    else:
        def func(g, x, y):
            return _gspmm(func.__name__, g, binary_op, reduce_op, x, y)
        func.__name__ = f"u_{binary_op}_e_{reduce_op}"
    return func


# ---- gsddmm ------------------------------------------------------------------------------------
def _node_rows(graph: Graph, target: str) -> int:
    return graph.num_src_nodes if target == "u" else graph.num_dst_nodes


def _sddmm_fused(g, op: str, lhs, rhs, lhs_target: str, rhs_target: str) -> torch.Tensor:
    if op != "dot" or {lhs_target, rhs_target} != {"u", "v"}:
        raise Unsupported(f"op={op!r} between {lhs_target!r} and {rhs_target!r}")
    graph = fastgnn_graph(g)
    if not (_native.has_op("sddmm") and graph.device.type in _native.devices()
            and backends.select("spmm", graph.device).backend == "native"):
        raise Unsupported(f"dot products without the native kernels on {graph.device}")
    lhs = _node_data("lhs_data", lhs, _node_rows(graph, lhs_target), graph)
    rhs = _node_data("rhs_data", rhs, _node_rows(graph, rhs_target), graph)
    if lhs.shape[1:] != rhs.shape[1:] or lhs.dtype != rhs.dtype:
        raise Unsupported(f"lhs_data {list(lhs.shape)} and rhs_data {list(rhs.shape)} of "
                          "different shapes or dtypes")
    src, dst = (lhs, rhs) if lhs_target == "u" else (rhs, lhs)
    feat = tuple(lhs.shape[1:])
    heads = math.prod(feat[:-1])
    if heads > MAX_HEADS:
        raise Unsupported(f"{heads} dot products per edge")
    src3 = src.reshape(src.shape[0], heads, feat[-1])
    dst3 = dst.reshape(dst.shape[0], heads, feat[-1])
    sddmm = torch.ops.fastgnn.sddmm
    dots = [sddmm(graph.rowptr, graph.col, dst3[:, h].contiguous(), src3[:, h].contiguous())
            for h in range(heads)]
    out = dots[0].unsqueeze(1) if heads == 1 else torch.stack(dots, dim=1)
    out = to_edge_order(graph, out).to(lhs.dtype)
    return out.reshape((graph.num_edges,) + feat[:-1] + (1,))


def _gsddmm(name: str, g, op, lhs_data, rhs_data, lhs_target="u", rhs_target="v"):
    try:
        return _sddmm_fused(g, op, lhs_data, rhs_data, lhs_target, rhs_target)
    except Unsupported as exc:
        reason = str(exc)
    if name == "gsddmm":
        return _fallback(name, reason, g, op, lhs_data, rhs_data, lhs_target, rhs_target)
    return _fallback(name, reason, g, lhs_data, rhs_data)


def gsddmm(g, op, lhs_data, rhs_data, lhs_target="u", rhs_target="v"):
    """``dgl.ops.gsddmm``: ``op`` (add, sub, mul, div, dot, copy_lhs, copy_rhs) of the data on
    ``lhs_target`` and ``rhs_target`` (``u`` source, ``v`` destination, ``e`` edge), per edge."""
    return _gsddmm("gsddmm", g, op, lhs_data, rhs_data, lhs_target, rhs_target)


def _make_sddmm(lhs_target: str, rhs_target: str, binary_op: str):
    def func(g, x, y):
        return _gsddmm(func.__name__, g, binary_op, x, y, lhs_target, rhs_target)
    func.__name__ = f"{lhs_target}_{binary_op}_{rhs_target}"
    return func


# ---- edge_softmax ------------------------------------------------------------------------------
def _edge_softmax_fused(graph, logits, eids, norm_by: str) -> torch.Tensor:
    if not is_all(eids):
        raise Unsupported("edge softmax over a subset of the edges (eids)")
    return ops.edge_softmax(fastgnn_graph(graph), logits, norm_by)


def edge_softmax(graph, logits, eids=ALL, norm_by="dst"):
    try:
        return _edge_softmax_fused(graph, logits, eids, norm_by)
    except Unsupported as exc:
        return _fallback("edge_softmax", str(exc), graph, logits, eids, norm_by)


# ---- DGL's own ops, with the warning -----------------------------------------------------------
def _stock(name: str, reason: str):
    def func(*args, **kwargs):
        return _fallback(name, reason, *args, **kwargs)
    func.__name__ = name
    return func


copy_u = _stock("copy_u", "copying node data to edges")
copy_v = _stock("copy_v", "copying node data to edges")
copy_e = _stock("copy_e", "copy_e")
segment_reduce = _stock("segment_reduce", "segment ops")
segment_softmax = _stock("segment_softmax", "segment ops")
segment_mm = _stock("segment_mm", "segment ops")
gather_mm = _stock("gather_mm", "gather_mm")


def _register():
    """The shortcuts of ``dgl.ops``, generated from the same lists as DGL's own."""
    module = sys.modules[__name__]
    funcs = [_make_spmm(op, reduce) for op in SPMM_OPS for reduce in SPMM_REDUCES]
    funcs += [_make_sddmm(lhs, rhs, op) for lhs, rhs in product(SDDMM_TARGETS, SDDMM_TARGETS)
              if lhs != rhs for op in SDDMM_OPS]
    for func in funcs + [gspmm, gsddmm, edge_softmax, copy_u, copy_v, copy_e, segment_reduce,
                         segment_softmax, segment_mm, gather_mm]:
        stock = getattr(dgl_ops, func.__name__)
        if func not in (gspmm, gsddmm):
            func.__doc__ = stock.__doc__
        func.__qualname__ = func.__name__
        func.__module__ = __name__
        setattr(module, func.__name__, func)
        if func.__name__ not in __all__:
            __all__.append(func.__name__)


_register()
