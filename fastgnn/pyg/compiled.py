"""The PyG adapters' propagation under torch.compile, with no graph break.

In eager mode a layer looks its Structure up in ``structure.cache`` (keyed by the edge_index
object) and calls the ops on it. torch.compile cannot trace that lookup (weak references,
host syncs), so it would break the graph at every layer. Under compilation the layers call
the custom ops below instead: they take the edge_index tensor itself (a PyG EdgeIndex's data)
and look the Structure up when they run, so the compiled graph holds one opaque op per layer.
Per-edge inputs (edge weights) are op arguments: the ops derive the edge values from them on
every call, with the eager code. Their fake kernels give the output shapes; their autograd
formulas call backward ops that look the Structure up again (a cache hit) and run the native
backward under the forward's plan, so compiled results equal eager ones.

The lookup runs on every call, on the tensor the compiled code is handed, which is the
caller's edge_index object: an in-place change or another graph is seen there as in eager
mode. Outputs are always fresh tensors, never cached ones.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from fastgnn import _library, _native, _validate, backends
from fastgnn.graph import narrowest_index_dtype
from fastgnn.ops import attention, minmax
from fastgnn.ops.spmm import csr_values_backward, native_product, plan_key, product_runner
from fastgnn.ops._common import wants_grad
from fastgnn.pyg._base import cast, common_dtype
from fastgnn.pyg.structure import (EdgeIndex, Edges, Structure, _gcn_structure, _resolve,
                                   gcn_normalised, gcn_weighted_values,
                                   gcn_weighted_values_backward, is_edge_tensor)

AVAILABLE = hasattr(torch.library, "register_fake") and _native.has_op("spmm") and \
    _native.has_op("minmax_aggregate") and _native.has_op("gatv2_forward") and \
    _native.has_op("gat_forward")
_INDEX_DTYPES = (torch.int32, torch.int64)
_MINMAX = ("min", "max")


class Pending(NamedTuple):
    """An edge_index whose Structure the op looks up when it runs. ``gcn``: the dtype of
    GCNConv's coefficients (with ``self_loops``, whose weight is ``loop_weight`` when there are
    edge weights), None for the plain structure."""
    edge_index: torch.Tensor
    num_src: int
    num_dst: int
    gcn: Optional[torch.dtype] = None
    self_loops: bool = False
    loop_weight: float = 1.0


def edge_tensor(edge_index) -> Optional[torch.Tensor]:
    """The plain ``[2, E]`` integer tensor of an edge_index or a PyG EdgeIndex (its data,
    which the compiled code is handed as it is), None for other structure inputs."""
    if EdgeIndex is not None and isinstance(edge_index, EdgeIndex):
        edge_index = edge_index.as_tensor()
    if is_edge_tensor(edge_index) and edge_index.dim() == 2 and edge_index.size(0) == 2 \
            and edge_index.dtype in _INDEX_DTYPES:
        return edge_index
    return None


def applies(edge_index, op: str, device: torch.device) -> bool:
    """Whether a layer's call goes through these ops: under torch.compile, for an edge_index
    tensor or an EdgeIndex, when ``op`` runs on the native backend."""
    return (AVAILABLE and _library.is_compiling() and edge_tensor(edge_index) is not None
            and backends.select(op, device).backend == "native")


def _structure(edge_index: torch.Tensor, num_src: int, num_dst: int,
               self_loops: bool) -> Structure:
    """The plain Structure, or with ``self_loops`` the GAT layers' (existing loops replaced
    by one per node below min(S, T)), from the shared cache."""
    edges = Edges(edge_index, edge_index, None)
    if self_loops:
        return _resolve(edges, num_src, num_dst, "replace", min(num_src, num_dst))
    return _resolve(edges, num_src, num_dst)


def aggregate(pending: Pending, x: torch.Tensor, reduce: str,
              edge_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``reduce`` ("sum", "mean", "min", "max") over the pending structure's in-edges, sum and
    mean with optional ``edge_weight`` multipliers."""
    if reduce in _MINMAX:
        x = cast(x, common_dtype(x))  # as the native op's autocast kernel casts it
        return _minmax_op(edge_tensor(pending.edge_index), x, pending.num_src, pending.num_dst,
                          reduce)[0]
    return spmm(pending, x, reduce, edge_weight)


def spmm(pending: Pending, x: torch.Tensor, reduce: str = "sum",
         edge_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``A x`` over the pending structure (GCN coefficients or ``reduce`` "sum"/"mean"), with
    ``edge_weight`` in the user's edge order. ``x`` goes in the dtype eager mode multiplies in:
    PyG's promotion with the weights, else the autocast dtype the native op's autocast kernel
    would cast it to, so that the op's fake and real outputs agree."""
    x = cast(x, common_dtype(x, edge_weight))
    return _spmm_op(edge_tensor(pending.edge_index), x, edge_weight, pending.num_src,
                    pending.num_dst, reduce, pending.gcn, pending.self_loops,
                    pending.loop_weight, wants_grad(x), False)


def attention_op(op: str, edge_index: torch.Tensor, features: Tuple[torch.Tensor, ...],
                 coef: float, self_loops: bool, dropout: float = 0.0) -> torch.Tensor:
    """Op ``op`` ("gatv2_attention", "gat_attention", "graph_attention") on its three features
    in the native op's order, without edge term. With attention dropout the seed is drawn here,
    in the compiled graph, so that each call draws a new one (a host seed would be a constant
    of the graph, and drawing it a graph break)."""
    attention.check_dropout(dropout)
    seed_tensor = attention.draw_seed_tensor(features[1].device) if dropout > 0 else None
    return _attention_op(edge_tensor(edge_index), *features, op, float(coef), self_loops,
                         wants_grad(*features), float(dropout), seed_tensor)[0]


# ---- the ops ----------------------------------------------------------------------------------
# Defined on a Library rather than with torch.library.custom_op, and given a lean autograd
# kernel rather than torch.library.register_autograd's: their Python wrappers cost about 25 us
# a call on CPU; these cost about 4. The differentiable ops (_DIFFERENTIABLE) have a twin op,
# ``<name>_kernel``, with the same kernels and no autograd kernel, which their autograd
# formulas and their calls without gradient run: the compiled graphs hold the twins, which
# AOTAutograd calls with autograd already taken out, so that each call of the compiled code
# goes from the dispatcher straight to the Python kernel (2 us a call less on CPU).
# All are tagged cudagraph_unsafe where torch has the tag: a CUDA graph replay would skip their
# structure lookup, so under mode="reduce-overhead" Inductor records CUDA graphs only between
# them (graph partitions) and runs them on every call.
_SCHEMAS = {
    "pyg_spmm": "(Tensor edge_index, Tensor x, Tensor? edge_weight, SymInt num_src, "
                "SymInt num_dst, str reduce, ScalarType? gcn, bool self_loops, float loop_weight, "
                "bool grad, bool transpose) -> Tensor",
    "pyg_spmm_weight_backward": "(Tensor edge_index, Tensor grad_out, Tensor x, "
                                "Tensor edge_weight, SymInt num_src, SymInt num_dst, str reduce, "
                                "ScalarType? gcn, bool self_loops, float loop_weight, "
                                "bool transpose) -> Tensor",
    "pyg_minmax": "(Tensor edge_index, Tensor x, SymInt num_src, SymInt num_dst, str reduce) "
                  "-> (Tensor, Tensor)",
    "pyg_minmax_backward": "(Tensor edge_index, Tensor arg, Tensor grad_out, SymInt num_src, "
                           "SymInt num_dst) -> Tensor",
    "pyg_attention": "(Tensor edge_index, Tensor a, Tensor b, Tensor c, str op, float coef, "
                     "bool self_loops, bool grad, float dropout, Tensor? seed_tensor) "
                     "-> (Tensor, Tensor)",
    "pyg_attention_backward": "(Tensor edge_index, Tensor grad_out, Tensor out, Tensor lse, "
                              "Tensor a, Tensor b, Tensor c, str op, float coef, "
                              "bool self_loops, float dropout, Tensor? seed_tensor) "
                              "-> (Tensor, Tensor, Tensor)",
}


_DIFFERENTIABLE = ("pyg_spmm", "pyg_minmax", "pyg_attention")
_TAGS = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()


def _spmm_structure(edges: Edges, num_src: int, num_dst: int, gcn, self_loops: bool):
    """The Structure a ``pyg_spmm`` call multiplies on: the plain one, or GCNConv's (``gcn``
    set), on whose edges any edge weights are given."""
    if gcn is None:
        return _resolve(edges, num_src, num_dst)
    return _gcn_structure(edges, num_src, self_loops)


def _product_inputs(edge_index, edge_weight, num_src, num_dst, gcn, self_loops,
                    loop_weight) -> Tuple[Structure, Optional[torch.Tensor],
                                          Optional[torch.Tensor]]:
    """``(structure, edge_weight, edge_values)`` for ``native_product`` on the structure's
    graph, as the eager layers give them: the plain structure with the user's weights, or
    GCNConv's with its coefficients (derived from ``edge_weight`` when given)."""
    if gcn is not None and edge_weight is None:
        structure, values = gcn_normalised(edge_index, num_src, self_loops, gcn)
        return structure, None, values
    edges = Edges(edge_index, edge_index, None)
    structure = _spmm_structure(edges, num_src, num_dst, gcn, self_loops)
    if gcn is not None:
        return structure, None, gcn_weighted_values(structure, edges, edge_weight, num_src,
                                                    self_loops, loop_weight)
    if edge_weight is not None:  # eager mode's fastgnn.ops.spmm check
        _validate.edge_values("edge_weight", edge_weight, structure.graph.num_edges,
                              structure.graph.device)
    return structure, edge_weight, None


def _spmm_impl(edge_index, x, edge_weight, num_src, num_dst, reduce, gcn, self_loops,
               loop_weight, grad, transpose):
    """``A x`` (``transpose``: ``A^T x``, the backward) on ``edge_index``'s Structure;
    ``grad``: under the plan of a forward that a backward follows."""
    structure, weight, values = _product_inputs(edge_index, edge_weight, num_src, num_dst, gcn,
                                                self_loops, loop_weight)
    if edge_weight is None and x.dim() == 2:  # the layers' features are 2-D
        return _runner(structure, x, reduce, values, gcn, grad, transpose)(x)
    return native_product(structure.graph, x, "none", weight, reduce, values, grad, transpose)


def _runner(structure: Structure, x: torch.Tensor, reduce: str, values, gcn, grad: bool,
            transpose: bool):
    """The product without edge weights, kept with the structure as its edge values are:
    planned on its first call, later calls skip native_product's lookups (about 5 us of the
    op's 19 on a small graph on a 2-core CPU, paid twice per layer: forward and backward)."""
    key = plan_key(structure.graph, x, "none", reduce, values is None, grad)
    memo_key = ("pyg_spmm", gcn, transpose, key)
    runner = structure.memo.get(memo_key)
    if runner is None:
        runner, kept = product_runner(structure.graph, x, key, values, transpose)
        if kept:
            structure.memo[memo_key] = runner
    return runner


def _spmm_fake(edge_index, x, edge_weight, num_src, num_dst, reduce, gcn, self_loops,
               loop_weight, grad, transpose):
    return x.new_empty((num_src if transpose else num_dst,) + tuple(x.shape[1:]))


def _spmm_weight_backward_impl(edge_index, grad_out, x, edge_weight, num_src, num_dst, reduce,
                               gcn, self_loops, loop_weight, transpose):
    """edge_weight's gradient: the edge values' (the sddmm of the product's two sides, as in
    the native op's autograd formula) carried back through their derivation from the weights.
    Written out rather than left to autograd, which may be off where a kernel runs (under a
    dispatch mode)."""
    edges = Edges(edge_index, edge_index, None)
    structure = _spmm_structure(edges, num_src, num_dst, gcn, self_loops)
    graph = structure.graph
    grad_out = grad_out.contiguous()
    sides = (x.contiguous(), grad_out) if transpose else (grad_out, x)
    grad_values = torch.ops.fastgnn.sddmm.default(graph.rowptr, graph.col, *sides)
    grad = csr_values_backward(graph, x.dtype, "none", reduce, grad_values, gcn is None)
    grad = grad.to(edge_weight.dtype)
    if gcn is None:
        return grad
    return gcn_weighted_values_backward(structure, edges, edge_weight, grad, num_src,
                                        self_loops, loop_weight)


def _spmm_weight_backward_fake(edge_index, grad_out, x, edge_weight, num_src, num_dst, reduce,
                               gcn, self_loops, loop_weight, transpose):
    return edge_weight.new_empty(edge_weight.shape)


class _Spmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, edge_index, x, edge_weight, *options):
        # x only for edge_weight's gradient (learned edge weights): else not kept alive
        ctx.save_for_backward(edge_index, x if ctx.needs_input_grad[2] else None, edge_weight)
        ctx.options = options
        return _spmm_kernel(edge_index, x, edge_weight, *options)

    @staticmethod
    def backward(ctx, grad_out):
        edge_index, x, edge_weight = ctx.saved_tensors
        *structure, _, transpose = ctx.options
        grad_x = grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_x = _spmm_kernel(edge_index, grad_out, edge_weight, *structure, True,
                                  not transpose)
        if ctx.needs_input_grad[2]:
            grad_weight = _spmm_weight_backward_op(edge_index, grad_out, x, edge_weight,
                                                   *structure, transpose)
        return (None, grad_x, grad_weight) + (None,) * 8


def _minmax_impl(edge_index, x, num_src, num_dst, reduce):
    """``(out, arg)``: the min or max over in-edges and, per output entry, the winning source
    (-1 where there is none)."""
    graph = _structure(edge_index, num_src, num_dst, False).graph
    return torch.ops.fastgnn.minmax_aggregate.default(
        *minmax.arguments(graph, x.contiguous(), reduce, grad=False))


def _minmax_fake(edge_index, x, num_src, num_dst, reduce):
    # arg has the index dtype Graph.from_edge_index gives the plain structure
    dtype = narrowest_index_dtype(edge_index.shape[1], torch.sym_max(num_src, num_dst))
    return x.new_empty((num_dst, x.shape[1])), x.new_empty((num_dst, x.shape[1]), dtype=dtype)


def _minmax_backward_impl(edge_index, arg, grad_out, num_src, num_dst):
    """The gradient scattered to the winning sources; a deterministic CUDA backward pulls
    through the Structure's transposed CSR instead (the eager forward's choice)."""
    transposed = (None, None)
    if minmax.backward_pulls(grad_out.device):
        transposed = _structure(edge_index, num_src, num_dst, False).graph.transpose()[:2]
    return torch.ops.fastgnn.minmax_aggregate_backward.default(arg, grad_out.contiguous(),
                                                               num_src, *transposed)


def _minmax_backward_fake(edge_index, arg, grad_out, num_src, num_dst):
    return grad_out.new_empty((num_src, grad_out.shape[1]))


class _Minmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, edge_index, x, num_src, num_dst, reduce):
        out, arg = _minmax_kernel(edge_index, x, num_src, num_dst, reduce)
        ctx.save_for_backward(edge_index, arg)
        ctx.sizes = (num_src, num_dst)
        ctx.mark_non_differentiable(arg)
        ctx.set_materialize_grads(False)  # no zero-filled [T, F] gradient for arg
        return out, arg

    @staticmethod
    def backward(ctx, grad_out, _grad_arg):
        if grad_out is None:
            return (None,) * 5
        edge_index, arg = ctx.saved_tensors
        return None, _minmax_backward_op(edge_index, arg, grad_out, *ctx.sizes), None, None, None


def _attention_impl(edge_index, a, b, c, op, coef, self_loops, grad, dropout, seed_tensor):
    """``(out, lse)`` of attention op ``op`` on ``edge_index``'s Structure; ``a`` is on the
    destinations, ``b`` on the sources."""
    graph = _structure(edge_index, b.shape[0], a.shape[0], self_loops).graph
    return attention.native_forward(op, graph, (a, b, c, None), coef, dropout, grad,
                                    seed_tensor=seed_tensor)


def _attention_fake(edge_index, a, b, c, op, coef, self_loops, grad, dropout, seed_tensor):
    return attention.forward_fake(a, b)


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
        out, lse = _attention_kernel(edge_index, a, b, c, op, coef, self_loops, grad, dropout,
                                     seed_tensor)
        ctx.save_for_backward(edge_index, a, b, c, out, lse, seed_tensor)
        ctx.options = (op, coef, self_loops, dropout)
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # no zero-filled [T, H] gradient for lse
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        if grad_out is None:
            return (None,) * 10
        edge_index, a, b, c, out, lse, seed_tensor = ctx.saved_tensors
        grads = _attention_backward_op(edge_index, grad_out, out, lse, a, b, c, *ctx.options,
                                       seed_tensor)
        return (None,) + tuple(grads) + (None,) * 6


def _below_autograd(impl):
    """Kernel ``impl`` with autograd dispatch off for the native ops it calls: they then skip
    their autograd kernels, as under a Python autograd kernel's redispatch. The ops' own
    formulas are the autograd."""
    def kernel(*args):
        with torch._C._AutoDispatchBelowAutograd():
            return impl(*args)
    return kernel


def _autograd_kernel(twin, function):
    """An op's autograd kernel: ``function`` when a gradient is wanted, else its ``twin``."""
    def kernel(*args):
        if torch.is_grad_enabled() and any(
                isinstance(arg, torch.Tensor) and arg.requires_grad for arg in args):
            return function.apply(*args)
        return twin(*args)
    return kernel


if AVAILABLE:
    _lib = torch.library.Library("fastgnn", "FRAGMENT")
    for _name, _impl, _fake in (
            ("pyg_spmm", _spmm_impl, _spmm_fake),
            ("pyg_spmm_weight_backward", _spmm_weight_backward_impl, _spmm_weight_backward_fake),
            ("pyg_minmax", _minmax_impl, _minmax_fake),
            ("pyg_minmax_backward", _minmax_backward_impl, _minmax_backward_fake),
            ("pyg_attention", _attention_impl, _attention_fake),
            ("pyg_attention_backward", _attention_backward_impl, _attention_backward_fake)):
        for _op_name in (_name, _name + "_kernel") if _name in _DIFFERENTIABLE else (_name,):
            _lib.define(_op_name + _SCHEMAS[_name], tags=_TAGS)
            for _device in _native.devices():
                _lib.impl(_op_name, _below_autograd(_impl), _device.upper())
            _library.register_fake(_op_name, _fake)
    _spmm_op = _library.op("pyg_spmm").default
    _spmm_kernel = _library.op("pyg_spmm_kernel").default
    _spmm_weight_backward_op = _library.op("pyg_spmm_weight_backward").default
    _minmax_op = _library.op("pyg_minmax").default
    _minmax_kernel = _library.op("pyg_minmax_kernel").default
    _minmax_backward_op = _library.op("pyg_minmax_backward").default
    _attention_op = _library.op("pyg_attention").default
    _attention_kernel = _library.op("pyg_attention_kernel").default
    _attention_backward_op = _library.op("pyg_attention_backward").default
    _lib.impl("pyg_spmm", _autograd_kernel(_spmm_kernel, _Spmm), "Autograd")
    _lib.impl("pyg_minmax", _autograd_kernel(_minmax_kernel, _Minmax), "Autograd")
    _lib.impl("pyg_attention", _autograd_kernel(_attention_kernel, _Attention), "Autograd")
