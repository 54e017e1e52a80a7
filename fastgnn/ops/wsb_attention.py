"""Graph Transformer attention on the WSB layout (``fastgnn.ops.wsb``): the forward on Tensor
Cores; the backward's destination pass too (q's gradient and each edge's dLogit and softmax
weight, ``wsb_graph_attention_backward``), then the CSR backward's source pass over the cached
transpose for k's and v's. The WSB forward's ``out`` and ``lse`` follow the CSR forward's
conventions, so where the layout cannot serve the backward (a CSR not in slot order) the CSR
backward (``graph_attention_backward``) runs instead.

``fastgnn.ops.graph_attention`` takes it where it applies (CUDA, float16/bfloat16 features,
head dims 32/64/128, int32 ids, no edge_term, no attention dropout) and the graph's policy says
so: ``Graph.attention_format`` or ``FASTGNN_ATTENTION_FORMAT`` (auto|csr|wsb), apart from
SpMM's ``spmm_format`` because the two cross over at different densities. "auto" times CSR
against WSB on the first call of each (heads, head dim, dtype), charging the layout's build
over ``wsb.EXPECTED_CALLS`` calls, where the structural pre-filter lets WSB through (with a
backward to run, forward and backward are timed together).
"""
from __future__ import annotations

import os
from typing import Callable

import torch

from fastgnn import _library, _native, _validate, tuning
from fastgnn.graph import SPMM_FORMATS
from fastgnn.ops import wsb
from fastgnn.ops._common import forward_fake

HEAD_DIMS = (32, 64, 128)  # the CUDA kernel's instantiations (csrc/cuda/wsb_kernels.h)
_FORMAT_FROM_ENV = os.environ.get("FASTGNN_ATTENTION_FORMAT", "auto")  # read once: calls are hot
_CHOICES = "attention formats"  # the Graph.cached key of {(heads, dim, dtype, device): bool}


def policy(g) -> str:
    """The graph's attention format policy: its own, else FASTGNN_ATTENTION_FORMAT."""
    mode = g.attention_format or _FORMAT_FROM_ENV
    _validate.choice("FASTGNN_ATTENTION_FORMAT", mode, SPMM_FORMATS)
    return mode


def _aligned(t: torch.Tensor) -> bool:
    """The kernel moves 16 bytes at a time: a non-contiguous tensor is copied (aligned)."""
    return not t.is_contiguous() or t.data_ptr() % 16 == 0


def applies(g, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, edge_term,
            dropout: float) -> bool:
    """Whether the WSB forward can run this call (and the policy does not rule it out)."""
    return (forward_op is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and edge_term is None and dropout == 0 and g.index_dtype == torch.int32
            and q.shape[2] in HEAD_DIMS and policy(g) != "csr"
            and all(_aligned(t) for t in (q, k, v))
            and torch.cuda.get_device_capability(q.device)[0] >= 8)


def forward(g, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, graph: tuple,
            launch: tuple) -> torch.Tensor:
    """The attention output on the WSB layout of ``g`` (built and cached on first use), with
    autograd through the WSB backward: ``graph`` is ``attention.structure_args`` of the call
    and ``launch`` the CSR source pass's launch plan ``(light_rows, heavy_rows,
    heavy_warps)``."""
    return forward_op(*_tiles(g, q.dtype, graph), q, k, v, scale, *graph, *launch)[0]


def _tiles(g, dtype: torch.dtype, graph: tuple) -> tuple:
    """The layout arguments of the WSB ops: tile_ptr, tile_cols, tile_counts, work, splits and
    edge_starts (None without the transpose in ``graph``: no backward will run)."""
    layout = g.wsb()
    work, splits = layout.attention_plan()
    edge_starts = layout.attention_edge_starts() if graph[5] is not None else None
    return layout.tile_ptr, layout.tile_cols, layout.counts(dtype), work, splits, edge_starts


def chosen(g, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, graph: tuple,
           launch: tuple, csr_pass: Callable[[], object]) -> bool:
    """Whether the policy runs this call's forward on WSB (``applies`` being true): "wsb"
    always; "auto" as the tuner measured it against ``csr_pass`` (the CSR forward of the same
    call, and its backward when ``graph`` carries the transpose) on the first call of its
    shape, remembered on the graph. With a backward to run, the pairs are timed: the WSB
    backward gains more than its forward on some graphs (tolokers)."""
    if policy(g) == "wsb":
        return True
    training = graph[5] is not None  # t_perm
    key = (q.shape[1], q.shape[2], q.dtype, q.device, training)
    choices = g.cached(_CHOICES, dict)
    choice = choices.get(key)
    if choice is None:
        choice = _measured(g, q, k, v, scale, graph, launch, csr_pass)
        if tuning.can_time(q.device):  # a fallback default must not be remembered
            choices[key] = choice
    return choice


def _measured(g, q, k, v, scale: float, graph: tuple, launch: tuple, csr_pass) -> bool:
    # The pre-filter: sparse windows never pay the build. SpMM's bar, not measured for
    # attention yet.
    edges_per_tile = wsb.estimated_edges_per_tile(g)
    if edges_per_tile < wsb.MIN_EDGES_PER_TILE:
        return False
    penalties = {}

    def candidates():
        penalties["wsb"] = g.wsb().build_charge_ms()
        _tiles(g, q.dtype, graph)  # prepared here, not in a timed call
        return {"csr": csr_pass, "wsb": lambda: _wsb_pass(g, q, k, v, scale, graph, launch)}
    family = "graph_attention_format" + ("_fwd_bwd" if graph[5] is not None else "")
    op = wsb.tuning_op(edges_per_tile, f"{family}_d{q.shape[2]}")
    with torch.no_grad():
        return tuning.choose(op, g, q.shape[1] * q.shape[2], q.dtype, q.device, candidates,
                             "csr", penalties) == "wsb"


def _wsb_pass(g, q, k, v, scale: float, graph: tuple, launch: tuple) -> None:
    """What the tuner times of the WSB path: the forward, and with the transpose in ``graph``
    the backward (the ops themselves, without autograd)."""
    tiles = _tiles(g, q.dtype, graph)
    out, lse = torch.ops.fastgnn.wsb_graph_attention_forward(*tiles, q, k, v, scale, *graph,
                                                             *launch)
    if graph[5] is not None:
        _backward_ops(torch.ones_like(out), out, lse, tiles, q, k, v, scale, graph, launch)


def _backward_ops(grad_out, out, lse, tiles: tuple, q, k, v, scale: float, graph: tuple,
                  launch: tuple):
    """(grad_q, grad_k, grad_v): the WSB backward where the layout has edge starts (the last
    of ``tiles``), else the CSR one."""
    rowptr, col, edge_perm, t_rowptr, t_col, t_perm = graph
    if tiles[5] is not None:
        return torch.ops.fastgnn.wsb_graph_attention_backward(
            grad_out, out, lse, *tiles, rowptr, col, t_rowptr, t_col, t_perm, q, k, v, scale,
            *launch)
    return torch.ops.fastgnn.graph_attention_backward(
        grad_out, out, lse, *graph, q, k, v, None, scale, 0.0, 0, None, 0, *launch)[:3]


# ---- the ops' fake kernels and autograd ---------------------------------------------------------
# Inputs: tile_ptr, tile_cols, tile_counts, work, splits, edge_starts (None: the CSR backward),
# q, k, v, scale, then the CSR route of the backward: rowptr, col, edge_perm, t_rowptr, t_col,
# t_perm, light_rows, heavy_rows, heavy_warps (the source pass's launch plan).
def _fake(tile_ptr, tile_cols, tile_counts, work, splits, edge_starts, q, k, v, scale, rowptr,
          col, edge_perm, t_rowptr, t_col, t_perm, light_rows, heavy_rows, heavy_warps):
    return forward_fake(q, k)


def _backward_fake(grad_out, out, lse, tile_ptr, tile_cols, tile_counts, work, splits,
                   edge_starts, rowptr, col, t_rowptr, t_col, t_perm, q, k, v, scale, light_rows,
                   heavy_rows, heavy_warps):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup(ctx, inputs, output):
    out, lse = output
    q, k, v, scale = inputs[6:10]
    ctx.save_for_backward(*inputs[:6], q, k, v, *inputs[10:18], out, lse)
    ctx.scale, ctx.heavy_warps = scale, inputs[18]
    ctx.set_materialize_grads(False)  # the backward ignores lse's: no [T, H] zero fill a call


def _backward(ctx, grad_out, _grad_lse):
    if grad_out is None:
        return (None,) * 19
    (tile_ptr, tile_cols, tile_counts, work, splits, edge_starts, q, k, v, rowptr, col,
     edge_perm, t_rowptr, t_col, t_perm, light, heavy, out, lse) = ctx.saved_tensors
    if t_perm is None:
        raise RuntimeError("fastgnn attention: the forward ran without gradient tracking of its "
                           "inputs, so the transposed graph was not prepared")
    grads = _backward_ops(grad_out.contiguous(), out, lse,
                          (tile_ptr, tile_cols, tile_counts, work, splits, edge_starts), q, k, v,
                          ctx.scale, (rowptr, col, edge_perm, t_rowptr, t_col, t_perm),
                          (light, heavy, ctx.heavy_warps))
    return (None,) * 6 + tuple(grads) + (None,) * 10


forward_op = None
if _native.has_op("wsb_graph_attention_forward"):
    _library.register_fake("wsb_graph_attention_forward", _fake)
    _library.register_fake("wsb_graph_attention_backward", _backward_fake)
    forward_op = _library.register_autograd("wsb_graph_attention_forward", _backward, _setup)
