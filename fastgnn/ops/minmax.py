"""Native min/max aggregation: ``torch.ops.fastgnn.minmax_aggregate`` and its backward.

The forward returns the result and, per output entry, the winning source (``arg``, the
graph's index dtype, -1 for destinations without in-edges); autograd saves only ``arg`` and
the backward scatters the gradient to those sources.

On the GPU destinations are split by in-degree: light rows take a feature-parallel kernel,
heavy rows (above a degree quantile) a kernel tiled over edge chunks whose partial results
merge through 64-bit atomicMin/atomicMax on packed words: high half an order-preserving key
of the value (zeros share a key, NaN takes the winning extreme), low half the source (inverted
for max), so one atomic keeps the extreme value and, among ties, the smallest source. The
packed scratch borrows the output's memory when it fits. The quantile, warps per block and
edges per heavy block are timed once per (graph, width, dtype) by ``fastgnn.tuning``; float64
and more than 2^31 - 1 sources take the light kernel only.
A third kind of plan cuts every row into work items of at most 64 or 256 edges (the work
list shared with the SpMM kernels, cached per graph), so no row holds a lane group for its
whole degree: the items of a row of several merge through the same packed atomics, into a
scratch of one word per (such row, feature) that also borrows the output's memory.
The GPU backward uses atomics, except under ``torch.use_deterministic_algorithms(True)``,
where it pulls per source through the cached transposed CSR (deterministic, slower).

Ties between equal messages go to the row's earliest edge in the CSR the op is given: the
graph's, whose rows hold sources ascending (``ties="smallest-source"``). DGL's rules, the
smallest (``"first-edge"``) or largest (``"last-edge"``) input edge id, run the same kernels on
the graph's CSR with each row's edges in edge-id order (cached per graph, with its map to input
edges), the last one with a switch that lets an equal message replace the held one (GPU: light
path only). The backward ops read the CSR the forward was given, so every backward (atomic,
deterministic pull, weight gradient) sends the gradient where the forward chose.

``nan="ignore"`` is DGL's reduction (the kernels' ``ignore_nan`` switch; GPU: light path
only): each entry starts from the identity (-inf for max, +inf for min) with no winner and an
ordered comparison (strict; with ``"last-edge"`` greater or equal) takes a message, so NaN
messages never win and entries no message won keep the identity; their gradient goes where
DGL's goes (``fastgnn._minmax_unwon``).

With edge weights (``[E, H]`` in input edge order, one per edge and head, broadcast over each
head's features; the kernels read them through the graph's CSR-to-input edge map, so no
edge-sized copy is made either way) every path multiplies the messages and records the winning
CSR position instead of the source (packed words hold the position), so duplicate edges of
different weights are told apart: the x gradient goes to ``col[position]`` times the edge's
weight (the same backward kernels, reading col and the weights), and
``minmax_weight_backward`` gives the weights' gradient, rows owning their edges
(deterministic everywhere).
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch

from fastgnn import _library, _native, backends, tuning
from fastgnn._minmax_unwon import route_unwon_to_first
from fastgnn.graph import Graph
from fastgnn.ops._common import edge_perm_index, wants_grad

OP = "aggregate_minmax"
TIES = ("smallest-source", "first-edge", "last-edge")
NANS = ("propagate", "ignore")
_INT32_MAX = 2**31 - 1
_QUANTILES = (0.99, 0.999)
_WARPS = (1, 4, 16)
_EDGES_PER_BLOCK = (32, 128, 512)
_SPLIT_CHUNKS = (64, 256)
_DEFAULT_WARPS, _DEFAULT_EDGES_PER_BLOCK, _DEFAULT_QUANTILE = 4, 128, 0.99

# (light_rows, heavy_rows, max_degree, config): the launch arguments of the native op.
Plan = Tuple[Optional[torch.Tensor], Optional[torch.Tensor], int, int]
_ALL_LIGHT: Plan = (None, None, 0, 0)


def encode_config(warps: int, edges_per_block: int, split_chunk: int = 0) -> int:
    """The op's ``config`` int: warps per block in bits 0-7, edges per heavy block in bits
    8-31, edges per work item of the load-balanced path in bits 32-47 (0: not taken)."""
    return warps | (edges_per_block << 8) | (split_chunk << 32)


def _heavy_allowed(g: Graph, x: torch.Tensor) -> bool:
    # Packed words hold a float32 key and a 32-bit source index (weighted calls: a CSR
    # position, which _choose_plan bounds).
    return x.dtype != torch.float64 and g.num_src_nodes <= _INT32_MAX


def _plan_name(quantile: Optional[float], warps: int, edges_per_block: int = 0) -> str:
    if quantile is None:
        return f"light-w{warps}"
    return f"q{quantile}-w{warps}-e{edges_per_block}"


def _plans(g: Graph, x: torch.Tensor) -> Tuple[Dict[str, Plan], str]:
    """Every launch plan worth timing for this graph and input, and the untimed default
    (cached on the graph)."""
    heavy_allowed = _heavy_allowed(g, x)
    # Where choices go by size class (a stream of graphs, such as mini-batches), light plans
    # only: bucketing rows (a quantile and the maximum degree read back) and the split path's
    # work list would cost host syncs on every new graph (a mini-batch's in-degrees are
    # bounded by its fanouts anyway). Decided once per graph, so its plans stay those its
    # remembered choice was made among.
    return g.cached(("minmax_plans", heavy_allowed), lambda: _build_plans(
        g, heavy_allowed and not tuning.keyed_by_size("minmax_aggregate", g, x.shape[1],
                                                      x.dtype, x.device)))


def _build_plans(g: Graph, heavy_allowed: bool) -> Tuple[Dict[str, Plan], str]:
    plans = {_plan_name(None, w): (None, None, 0, encode_config(w, 0)) for w in _WARPS}
    default = _plan_name(None, _DEFAULT_WARPS)
    if not heavy_allowed:
        return plans, default
    plans.update({f"split{chunk}-w{w}": (None, None, 0, encode_config(w, 0, chunk))
                  for chunk in _SPLIT_CHUNKS for w in _WARPS})
    for quantile in _QUANTILES:
        _, light, heavy = g.degree_buckets(quantile)
        if heavy.numel() == 0:
            continue
        for w in _WARPS:
            for epb in _EDGES_PER_BLOCK:
                plans[_plan_name(quantile, w, epb)] = (light, heavy, g.max_in_degree,
                                                       encode_config(w, epb))
    heavy_default = _plan_name(_DEFAULT_QUANTILE, _DEFAULT_WARPS, _DEFAULT_EDGES_PER_BLOCK)
    return plans, heavy_default if heavy_default in plans else default


def _choose_plan(g: Graph, x: torch.Tensor, is_max: bool, weighted: bool = False,
                 ties: str = "smallest-source", nan: str = "propagate") -> Plan:
    """The launch plan; a weighted call takes the plan timed for unweighted calls of the same
    width (one more load per message), the light path alone past 2^31 - 1 edges and under
    DGL's rules (the packed merges order unweighted ties by source and let NaN win)."""
    if x.device.type != "cuda" or (weighted and g.num_edges > _INT32_MAX) or \
            ties != "smallest-source" or nan != "propagate":
        return _ALL_LIGHT
    plans, default = _plans(g, x)

    def runner(plan: Plan):
        def run():
            with torch.no_grad():
                torch.ops.fastgnn.minmax_aggregate(g.rowptr, g.col, x, is_max, *plan, None, None,
                                                   g.key)
        return run

    name = tuning.choose("minmax_aggregate", g, x.shape[1], x.dtype, x.device,
                         lambda: {name: runner(plan) for name, plan in plans.items()}, default)
    return plans[name]


def backward_pulls(device: torch.device) -> bool:
    """Whether the backward pulls per source through the transposed CSR (deterministic, on
    CUDA) instead of scattering with atomics."""
    return device.type == "cuda" and torch.are_deterministic_algorithms_enabled()


def csr_in_edge_order(g: Graph) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The graph's CSR (same ``rowptr``) with each row's edges in input edge order: its ``col``
    and its map from positions to input edges (None: the positions are the input order), cached
    per graph."""
    if g.edge_perm is None:
        return g.col, None

    def build():
        by_edge = torch.argsort(g.edge_perm)  # positions, in input edge order
        order = by_edge[torch.argsort(g.row[by_edge], stable=True)]
        return g.col[order].contiguous(), g.edge_perm[order].to(g.index_dtype).contiguous()
    return g.cached("csr_in_edge_order", build)


def arguments(g: Graph, flat: torch.Tensor, reduce: str, grad: bool,
              weight: Optional[torch.Tensor] = None, ties: str = "smallest-source",
              nan: str = "propagate") -> tuple:
    """The native op's arguments for a contiguous 2-D ``flat`` (``grad``: a backward follows),
    optional ``weight`` (``[E, H]``, input edge order, flat's dtype: see :func:`weight_matrix`),
    the tie rule (one of :data:`TIES`) and the NaN rule (one of :data:`NANS`)."""
    is_max = reduce == "max"
    transposed = g.transpose()[:2] if grad and backward_pulls(flat.device) else (None, None)
    plan = _choose_plan(g, flat, is_max, weight is not None, ties, nan)
    col, edge_perm = (g.col, edge_perm_index(g)) if ties == "smallest-source" else \
        csr_in_edge_order(g)
    return (g.rowptr, col, flat, is_max, *plan, *transposed, g.key, weight,
            edge_perm if weight is not None else None, ties == "last-edge", nan == "ignore")


def weight_matrix(g: Graph, edge_weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``edge_weight`` (``[E]`` or ``[E, H]``, input edge order) as the op's contiguous
    ``[E, H]`` weight in ``dtype``."""
    heads = edge_weight.shape[1] if edge_weight.dim() > 1 else 1
    return edge_weight.reshape(g.num_edges, heads).to(dtype).contiguous()


def native_aggregate(g: Graph, x: torch.Tensor, reduce: str,
                     edge_weight: Optional[torch.Tensor] = None,
                     ties: str = "smallest-source", nan: str = "propagate") -> torch.Tensor:
    """``fastgnn.ops.aggregate`` for min/max on the native kernels (inputs already checked;
    ``edge_weight``: ``[E]`` or ``[E, H]`` with ``x`` of ``[N, H, ...]``)."""
    width = math.prod(x.shape[1:])
    flat = x.reshape(x.shape[0], width).contiguous()
    weight = None if edge_weight is None else weight_matrix(g, edge_weight, x.dtype)
    grad = wants_grad(x, weight)
    out, arg = _minmax(*arguments(g, flat, reduce, grad, weight, ties, nan))
    if nan == "ignore" and grad:
        out = route_unwon_to_first(out, arg < 0, flat, weight)
    return out.reshape((g.num_dst_nodes,) + tuple(x.shape[1:]))


# ---- fake kernels (the op's autograd is in C++: csrc/minmax_autograd.cpp) ---------------------
def _fake(rowptr, col, x, is_max, light_rows, heavy_rows, max_degree, config, t_rowptr, t_col,
          graph_key=0, weight=None, edge_perm=None, last_wins=False, ignore_nan=False):
    shape = (rowptr.shape[0] - 1, x.shape[1])
    return x.new_empty(shape), x.new_empty(shape, dtype=col.dtype)


def _backward_fake(arg, grad_out, num_src, t_rowptr, t_col, col=None, weight=None,
                   edge_perm=None):
    return grad_out.new_empty((num_src, grad_out.shape[1]))


def _weight_backward_fake(rowptr, col, arg, grad_out, x, heads, edge_perm=None):
    return grad_out.new_empty((col.shape[0], heads))


if _native.has_op("minmax_aggregate"):
    _library.register_fake("minmax_aggregate", _fake)
    _library.register_fake("minmax_aggregate_backward", _backward_fake)
    _library.register_fake("minmax_weight_backward", _weight_backward_fake)
    _minmax = _library.op("minmax_aggregate").default
    backends.register(OP, "native", _native.devices(), native_aggregate, priority=10)
