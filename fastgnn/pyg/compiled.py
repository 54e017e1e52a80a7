"""The PyG adapters' propagation under torch.compile, with no graph break.

In eager mode a layer looks its Structure up in ``structure.cache`` (keyed by the edge_index
object) and calls the ops on it. torch.compile cannot trace that lookup (weak references,
host syncs), so it would break the graph at every layer. Under compilation the layers call
the custom ops below instead: they take the edge_index tensor itself and look the Structure
up when they run, so the compiled graph holds one opaque op per layer. Their fake kernels
give the output shapes; their autograd formulas call a backward op that looks the Structure
up again (a cache hit) and runs the native backward under the forward's plan, so compiled
results equal eager ones.

The lookup runs on every call, on the tensor the compiled code is handed, which is the
caller's edge_index object: an in-place change or another graph is seen there as in eager
mode. Outputs are always fresh tensors, never cached ones.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from fastgnn import _library, _native, backends
from fastgnn.ops import attention
from fastgnn.ops.spmm import native_product
from fastgnn.ops._common import acc_dtype, wants_grad
from fastgnn.pyg._base import cast, common_dtype
from fastgnn.pyg.structure import Edges, Structure, _resolve, gcn_normalised, is_edge_tensor

AVAILABLE = hasattr(torch.library, "register_fake") and _native.has_op("spmm") and \
    _native.has_op("gatv2_forward") and _native.has_op("gat_forward")
_INDEX_DTYPES = (torch.int32, torch.int64)


class Pending(NamedTuple):
    """A plain edge_index whose Structure the op looks up when it runs. ``gcn``: the dtype of
    GCNConv's coefficients (with ``self_loops``), None for the plain structure."""
    edge_index: torch.Tensor
    num_src: int
    num_dst: int
    gcn: Optional[torch.dtype] = None
    self_loops: bool = False


def applies(edge_index, op: str, device: torch.device) -> bool:
    """Whether a layer's call goes through these ops: under torch.compile, for a plain
    ``[2, E]`` integer edge_index, when ``op`` runs on the native backend."""
    return (AVAILABLE and _library.is_compiling() and is_edge_tensor(edge_index)
            and edge_index.dim() == 2 and edge_index.size(0) == 2
            and edge_index.dtype in _INDEX_DTYPES
            and backends.select(op, device).backend == "native")


def _structure(edge_index: torch.Tensor, num_src: int, num_dst: int,
               self_loops: bool) -> Structure:
    """The plain Structure, or with ``self_loops`` the GAT layers' (existing loops replaced
    by one per node below min(S, T)), from the shared cache."""
    edges = Edges(edge_index, edge_index, None)
    if self_loops:
        return _resolve(edges, num_src, num_dst, "replace", min(num_src, num_dst))
    return _resolve(edges, num_src, num_dst)


def spmm(pending: Pending, x: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """``A x`` over the pending structure (GCN coefficients or ``reduce`` "sum"/"mean"). ``x``
    goes in the autocast dtype, as the native op's autocast kernel would cast it, so that the
    op's fake and real outputs agree."""
    x = cast(x, common_dtype(x))
    return _spmm_op(pending.edge_index, x, pending.num_src, pending.num_dst, reduce,
                    pending.gcn, pending.self_loops, wants_grad(x), False)


def attention_op(op: str, edge_index: torch.Tensor, features: Tuple[torch.Tensor, ...],
                 coef: float, self_loops: bool, dropout: float = 0.0) -> torch.Tensor:
    """Op ``op`` ("gatv2_attention", "gat_attention", "graph_attention") on its three features
    in the native op's order, without edge term. With attention dropout the seed is drawn here,
    in the compiled graph, so that each call draws a new one (a host seed would be a constant
    of the graph, and drawing it a graph break)."""
    attention.check_dropout(dropout)
    seed_tensor = attention.draw_seed_tensor(features[1].device) if dropout > 0 else None
    return _attention_op(edge_index, *features, op, float(coef), self_loops,
                         wants_grad(*features), float(dropout), seed_tensor)[0]


# ---- the ops ----------------------------------------------------------------------------------
# Defined on a Library rather than with torch.library.custom_op, and given a lean autograd
# kernel rather than torch.library.register_autograd's: their Python wrappers cost about 25 us
# a call on CPU, paid by every call of the compiled code (the graph calls the ops through
# their autograd kernel); these cost about 4.
_SCHEMAS = {
    "pyg_spmm": "(Tensor edge_index, Tensor x, SymInt num_src, SymInt num_dst, str reduce, "
                "ScalarType? gcn, bool self_loops, bool grad, bool transpose) -> Tensor",
    "pyg_attention": "(Tensor edge_index, Tensor a, Tensor b, Tensor c, str op, float coef, "
                     "bool self_loops, bool grad, float dropout, Tensor? seed_tensor) "
                     "-> (Tensor, Tensor)",
    "pyg_attention_backward": "(Tensor edge_index, Tensor grad_out, Tensor out, Tensor lse, "
                              "Tensor a, Tensor b, Tensor c, str op, float coef, "
                              "bool self_loops, float dropout, Tensor? seed_tensor) "
                              "-> (Tensor, Tensor, Tensor)",
}


def _spmm_impl(edge_index, x, num_src, num_dst, reduce, gcn, self_loops, grad, transpose):
    """``A x`` (``transpose``: ``A^T x``, the backward) on ``edge_index``'s Structure;
    ``grad``: under the plan of a forward that a backward follows."""
    if gcn is None:
        structure, values = _structure(edge_index, num_src, num_dst, False), None
    else:
        structure, values = gcn_normalised(edge_index, num_src, self_loops, gcn)
    return native_product(structure.graph, x, "none", None, reduce, values, grad, transpose)


def _spmm_fake(edge_index, x, num_src, num_dst, reduce, gcn, self_loops, grad, transpose):
    return x.new_empty((num_src if transpose else num_dst,) + tuple(x.shape[1:]))


class _Spmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, edge_index, x, *options):
        ctx.save_for_backward(edge_index)
        ctx.options = options
        with torch._C._AutoDispatchBelowAutograd():
            return _spmm_op(edge_index, x, *options)

    @staticmethod
    def backward(ctx, grad_out):
        *structure, _, transpose = ctx.options
        grad_x = _spmm_op(ctx.saved_tensors[0], grad_out, *structure, True, not transpose)
        return (None, grad_x) + (None,) * 7


def _attention_impl(edge_index, a, b, c, op, coef, self_loops, grad, dropout, seed_tensor):
    """``(out, lse)`` of attention op ``op`` on ``edge_index``'s Structure; ``a`` is on the
    destinations, ``b`` on the sources."""
    graph = _structure(edge_index, b.shape[0], a.shape[0], self_loops).graph
    return attention.native_forward(op, graph, (a, b, c, None), coef, dropout, grad,
                                    seed_tensor=seed_tensor)


def _attention_fake(edge_index, a, b, c, op, coef, self_loops, grad, dropout, seed_tensor):
    return (b.new_empty((a.shape[0], b.shape[1], b.shape[2])),
            a.new_empty((a.shape[0], b.shape[1]), dtype=acc_dtype(b.dtype)))


def _attention_backward_impl(edge_index, grad_out, out, lse, a, b, c, op, coef, self_loops,
                             dropout, seed_tensor):
    graph = _structure(edge_index, b.shape[0], a.shape[0], self_loops).graph
    grads = attention.native_backward(op, graph, grad_out, out, lse, (a, b, c, None), coef,
                                      dropout, seed_tensor)
    return grads[0], grads[1], grads[2]


def _attention_backward_fake(edge_index, grad_out, out, lse, a, b, c, op, coef, self_loops,
                             dropout, seed_tensor):
    return a.new_empty(a.shape), b.new_empty(b.shape), c.new_empty(c.shape)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, edge_index, a, b, c, op, coef, self_loops, grad, dropout, seed_tensor):
        with torch._C._AutoDispatchBelowAutograd():
            out, lse = _attention_op(edge_index, a, b, c, op, coef, self_loops, grad, dropout,
                                     seed_tensor)
        ctx.save_for_backward(edge_index, a, b, c, out, lse, seed_tensor)
        ctx.options = (op, coef, self_loops, dropout)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        edge_index, a, b, c, out, lse, seed_tensor = ctx.saved_tensors
        grads = _attention_backward_op(edge_index, grad_out, out, lse, a, b, c, *ctx.options,
                                       seed_tensor)
        return (None,) + tuple(grads) + (None,) * 6


def _autograd_kernel(op, function):
    """Op ``op``'s autograd kernel: ``function`` when a gradient is wanted, else the op below
    autograd."""
    def kernel(*args):
        if torch.is_grad_enabled() and any(
                isinstance(arg, torch.Tensor) and arg.requires_grad for arg in args):
            return function.apply(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)
    return kernel


if AVAILABLE:
    _lib = torch.library.Library("fastgnn", "FRAGMENT")
    for _name, _schema in _SCHEMAS.items():
        _lib.define(_name + _schema)
    for _name, _impl, _fake in (("pyg_spmm", _spmm_impl, _spmm_fake),
                                ("pyg_attention", _attention_impl, _attention_fake),
                                ("pyg_attention_backward", _attention_backward_impl,
                                 _attention_backward_fake)):
        for _device in _native.devices():
            _lib.impl(_name, _impl, _device.upper())
        _library.register_fake(_name, _fake)
    _spmm_op = _library.op("pyg_spmm").default
    _attention_op = _library.op("pyg_attention").default
    _attention_backward_op = _library.op("pyg_attention_backward").default
    _lib.impl("pyg_spmm", _autograd_kernel(_spmm_op, _Spmm), "Autograd")
    _lib.impl("pyg_attention", _autograd_kernel(_attention_op, _Attention), "Autograd")
