"""SpMM convolutions: ``out[i] = sum_j c_ij * w_ij * x[j]`` (GCN, SAGE-mean, GIN-sum).

The native op ``torch.ops.fastgnn.spmm`` multiplies by the CSR or its transpose; its backward
is the same op with the transpose flag flipped (``dX = A^T dY``) and, for edge values, the
fused ``torch.ops.fastgnn.sddmm`` (``dw_e = <dY[i], x[j]>``): no E x D tensor either way.
That autograd formula is registered in C++ (``csrc/spmm_autograd.cpp``), where a call costs a
fraction of a Python ``autograd.Function``'s host time.
On CUDA each product runs our CSR kernels or cuSPARSE (descriptors and workspace cached per
graph in C++, freed with the Graph), whichever ``fastgnn.tuning`` measured fastest for the
forward and for the backward separately (``ALGOS`` below). Float16/bfloat16 forwards with
plain norms may also run on the block-sparse Tensor Core layout (``fastgnn.ops.wsb``), when
the graph's windows are dense enough and the tuner measures it faster, its build cost spread
over ``wsb.EXPECTED_CALLS`` calls; ``Graph.spmm_format`` or ``FASTGNN_SPMM_FORMAT``
(auto|csr|wsb) forces either.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

import os

from fastgnn import _library, _native, _validate, backends, reference, reordering, tuning
from fastgnn.graph import NORMS, SPMM_FORMATS, Graph, add_release_hook
from fastgnn.ops import wsb
from fastgnn.ops._common import acc_dtype, check_graph, wants_grad

REDUCES = ("sum", "mean")
_PLANS = "spmm plans"  # the Graph.cached key of {call signature: (value, transposed, algo, wsb)}
_FORMAT_FROM_ENV = os.environ.get("FASTGNN_SPMM_FORMAT", "auto")  # read once: calls are hot


def spmm(g: Graph, x: torch.Tensor, norm: str = "none", edge_weight: Optional[torch.Tensor] = None,
         reduce: str = "sum", *, edge_values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Sparse-dense product over the graph's edges (messages flow source -> destination).

    ``x``: ``[num_src_nodes, *]`` features (float16/bfloat16/float32/float64). ``norm`` picks
    ``c_ij`` as DGL's GraphConv does: "none" (1), "left" (1/out_deg(j)), "right"
    (1/in_deg(i)), "both" (1/sqrt(out_deg(j) in_deg(i))), zero degrees clamped to 1;
    ``reduce="mean"`` further divides by in_deg(i). ``edge_weight`` ([E], input edge order)
    multiplies each message and gets a gradient. ``edge_values`` ([E]) are precomputed
    coefficients used as they are (no norm applied), e.g. PyG's gcn_norm output.
    Returns ``[num_dst_nodes, *]``; destinations without in-edges get zeros.
    """
    check_graph(g)
    _validate.choice("norm", norm, NORMS)
    _validate.choice("reduce", reduce, REDUCES)
    _validate.node_features("x", x, g.num_src_nodes, g.device, "num_src_nodes")
    for name, values in (("edge_weight", edge_weight), ("edge_values", edge_values)):
        if values is not None:
            _validate.edge_values(name, values, g.num_edges, g.device)
    if edge_values is not None and (edge_weight is not None or norm != "none" or reduce != "sum"):
        raise ValueError("edge_values replaces norm, reduce and edge_weight: pass it alone")
    return spmm_unchecked(g, x, norm, edge_weight, reduce, edge_values)


@reordering.in_caller_order("x")
def spmm_unchecked(g: Graph, x: torch.Tensor, norm: str = "none",
                   edge_weight: Optional[torch.Tensor] = None, reduce: str = "sum",
                   edge_values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`spmm` without its argument checks, for callers that built ``g`` and the edge
    inputs themselves and checked that ``x`` is a float tensor on ``g``'s device with
    ``g.num_src_nodes`` rows (the PyG adapters): they cost as much as the rest of a small
    call's Python."""
    impl = backends.select("spmm", x.device)
    return impl.fn(g, x, norm=norm, edge_weight=edge_weight, reduce=reduce,
                   edge_values=edge_values)


def csr_values(g: Graph, dtype: torch.dtype, norm: str, reduce: str,
               edge_weight: Optional[torch.Tensor],
               edge_values: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Per-edge values in CSR order (None: all ones); differentiable in the edge inputs."""
    acc = acc_dtype(dtype)
    if edge_values is not None:
        return g.edge_values_to_csr(edge_values.to(acc))
    value = g.norm_values(norm, reduce, dtype=acc)
    if edge_weight is not None:
        weight = g.edge_values_to_csr(edge_weight.to(acc))
        value = weight if value is None else value * weight
    return value


def csr_values_backward(g: Graph, dtype: torch.dtype, norm: str, reduce: str,
                        grad: torch.Tensor, edge_weight: bool) -> torch.Tensor:
    """The gradient of :func:`csr_values` in its edge input (``edge_weight`` when set, else
    ``edge_values``) given the values' ``grad``: in input edge order, in the accumulation
    dtype (the caller casts it to the input's)."""
    if edge_weight:
        value = g.norm_values(norm, reduce, dtype=acc_dtype(dtype))
        grad = grad if value is None else grad * value
    return g.edge_values_from_csr(grad)


# ---- CUDA algorithm choice ---------------------------------------------------------------------
# The op's ``algo`` int: bits 0-7 pick the kernel of this call, bits 8-15 the kernel of its
# backward (read by the C++ autograd formula: kBackwardShift in csrc/spmm_autograd.cpp). CPU
# ignores it (one kernel).
ALGOS = {
    "csr_auto": 0,          # our CSR kernel, variant picked from the feature width
    "csr_warp": 1,          # one warp per row, vector loads over the features
    "csr_subwarp": 2,       # several rows per warp (narrow features)
    "csr_block": 3,         # one block per row, edges split across its warps (heavy rows)
    "csr_split64": 4,       # rows cut into items of <= 64 edges, partial sums added in order
    "csr_split256": 5,      # the same with <= 256 edges per item
    "csr_split1024": 6,     # ... and <= 1024
    "cusparse_default": 16,  # cusparseSpMM, CUSPARSE_SPMM_ALG_DEFAULT
    "cusparse_alg1": 17,    # CUSPARSE_SPMM_CSR_ALG1
}  # CSR_ALG2/ALG3 are left out: on an H100 (cuSPARSE 13) they faulted at widths such as 8 and 40
_BACKWARD_SHIFT = 8
_CUSPARSE_MIN_WIDTH = 32  # below it our kernels are the untuned default


def _usable(name: str, g: Graph, dtype: torch.dtype) -> bool:
    """cuSPARSE only with 32-bit indices (with 64-bit ones it faults rather than failing
    cleanly; the C++ op refuses them too) and float32/float64 features: its float16/bfloat16
    products lose precision at hub rows (ogbn-arxiv, bf16, width 256: max error 0.10 against
    0.016 for ours, one rounding), enough to turn a 3-layer GCN's logits (6.1 off at 24)."""
    return not name.startswith("cusparse") or (
        g.index_dtype == torch.int32 and dtype in (torch.float32, torch.float64))


def algo_candidates(op: str, g: Graph, width: int, dtype: torch.dtype, device) -> list:
    """The kernels the tuner races for ``op`` on ``g``: the usable ones, without the split
    kernels where choices go by size class (``tuning.keyed_by_size``: a stream of graphs,
    such as mini-batches): their per-graph work list costs two host syncs and about 20
    launches on every new graph."""
    stream = tuning.keyed_by_size(op, g, width, dtype, device)
    return [name for name in ALGOS if _usable(name, g, dtype)
            and not (stream and name.startswith("csr_split"))]


def _choose_algo(op: str, g: Graph, x: torch.Tensor, run) -> int:
    """The tuned kernel (an ``ALGOS`` value) for ``run(algo)``, timed once per key."""
    width = x.shape[1]
    default = "cusparse_default" if width >= _CUSPARSE_MIN_WIDTH and _usable(
        "cusparse_default", g, x.dtype) else "csr_auto"

    def candidates():
        return {name: (lambda code=ALGOS[name]: run(code))
                for name in algo_candidates(op, g, width, x.dtype, x.device)}
    with torch.no_grad():
        name = tuning.choose(op, g, width, x.dtype, x.device, candidates, default)
    return ALGOS[name]


def _cuda_algos(g: Graph, value, flat: torch.Tensor, transposed, backward: bool) -> int:
    spmm_op = torch.ops.fastgnn.spmm
    rowptr, col, key = g.rowptr, g.col, g.key
    forward = _choose_algo("spmm_fwd", g, flat, lambda algo: spmm_op(
        rowptr, col, value, flat, None, None, None, None, g.num_dst_nodes, False, key, algo))
    if not backward:
        return forward
    op = "spmm_bwd" if transposed[0] is not None else "spmm_bwd_optranspose"
    grad_algo = _choose_algo(op, g, flat, lambda algo: spmm_op(  # timed on a stand-in gradient
        rowptr, col, value, flat.new_ones((g.num_dst_nodes, flat.shape[1])), *transposed,
        g.num_src_nodes, True, key, algo))
    return forward | grad_algo << _BACKWARD_SHIFT


def _transpose_for_backward(g: Graph, x: torch.Tensor, norm: str, reduce: str, plain_norm: bool):
    """``(t_rowptr, t_col, t_perm, t_value)`` for the backward's walk, or Nones for the
    device's transposed product.

    Without a cached transpose CUDA uses cuSPARSE's transposed operation, which may sum in a
    varying order; under ``torch.use_deterministic_algorithms(True)`` the transpose is built
    for the call instead. ``t_value`` (the norm coefficients in transposed order, cached on the
    graph) is given when the values are the plain norm, without per-call edge inputs.
    """
    if g.cache_transpose or (x.is_cuda and torch.are_deterministic_algorithms_enabled()):
        t_value = g.transposed_norm_values(norm, reduce, acc_dtype(x.dtype)) if plain_norm \
            else None
        return g.transpose() + (t_value,)
    return None, None, None, None


def _wsb_applies(g: Graph, flat: torch.Tensor, plain_norm: bool, policy: str) -> bool:
    """Where the Tensor Core layout can run: CUDA half features, values without gradients."""
    return (policy != "csr" and wsb.product is not None and flat.is_cuda and plain_norm
            and flat.dtype in (torch.float16, torch.bfloat16) and g.index_dtype == torch.int32)


def _choose_wsb(g: Graph, flat: torch.Tensor, value, norm: str, reduce: str, transposed,
                algo: int, policy: str) -> Optional[torch.Tensor]:
    """The WSB value blocks when the forward should run on WSB, else None."""
    if policy == "auto":
        edges_per_tile = wsb.estimated_edges_per_tile(g)
        if edges_per_tile < wsb.MIN_EDGES_PER_TILE:
            return None  # sparse windows: never pay the build
    penalties = {}

    def blocks():
        layout = g.wsb()
        layout.plan()  # the kernel's plan: built while planning, not in a timed or captured call
        return layout, layout.values(value, flat.dtype, key=(norm, reduce))

    def candidates():
        layout, vals = blocks()
        work, splits = layout.plan()
        penalties["wsb"] = layout.build_charge_ms()
        csr = lambda: _spmm(g.rowptr, g.col, value, flat, *transposed, g.num_dst_nodes, False,  # noqa: E731
                            g.key, algo)
        tiles = lambda: wsb.product(layout.tile_ptr, layout.tile_cols, vals, flat,  # noqa: E731
                                    g.num_dst_nodes, work, splits, g.rowptr, g.col, value,
                                    *transposed, g.key, algo)
        return {"csr": csr, "wsb": tiles}
    if policy == "auto":
        with torch.no_grad():
            choice = tuning.choose(wsb.tuning_op(edges_per_tile), g, flat.shape[1], flat.dtype,
                                   flat.device, candidates, "csr", penalties)
        if choice != "wsb":
            return None
    return blocks()[1]


def _plan(g: Graph, flat: torch.Tensor, value: Optional[torch.Tensor], norm: str, reduce: str,
          plain_norm: bool, grad: bool, policy: str):
    """``(transposed, algo, wsb_values)``: the backward's walk, the tuned kernels (timed with
    ``value``, the call's edge values in CSR order) and the WSB blocks when WSB runs."""
    _validate.choice("FASTGNN_SPMM_FORMAT", policy, SPMM_FORMATS)
    transposed = _transpose_for_backward(g, flat, norm, reduce, plain_norm) if grad \
        else (None,) * 4
    algo, blocks = 0, None
    if flat.is_cuda:
        detached = None if value is None else value.detach()
        algo = _cuda_algos(g, detached, flat.detach(), transposed, grad)
        if _wsb_applies(g, flat, plain_norm, policy):
            blocks = _choose_wsb(g, flat.detach(), detached, norm, reduce, transposed, algo,
                                 policy)
    return transposed, algo, blocks


def _native_spmm(g: Graph, x: torch.Tensor, norm: str, edge_weight, reduce: str,
                 edge_values) -> torch.Tensor:
    return native_product(g, x, norm, edge_weight, reduce, edge_values, wants_grad(x))


def native_product(g: Graph, x: torch.Tensor, norm: str, edge_weight, reduce: str, edge_values,
                   grad: bool, transpose: bool = False) -> torch.Tensor:
    """The native product under the plan of a forward that does (``grad``) or does not need
    a backward. ``transpose``: ``A^T x`` (``x`` on the destinations) as that forward's autograd
    formula runs it, same walk and kernel: for callers that run the backward themselves
    (fastgnn.pyg.compiled, whose ops see no autograd inside)."""
    flat = x if x.dim() == 2 else x.reshape(x.shape[0], -1)
    key = plan_key(g, flat, norm, reduce, edge_weight is None and edge_values is None, grad)
    value, plan, _ = _planned(g, flat, key, edge_weight, edge_values, transpose)
    out = _run(g, flat, value, plan, transpose)
    return out if x.dim() == 2 else out.reshape((out.shape[0],) + tuple(x.shape[1:]))


def plan_key(g: Graph, flat: torch.Tensor, norm: str, reduce: str, plain_norm: bool,
             grad: bool) -> tuple:
    """What a product's plan depends on besides the graph (``plain_norm``: no edge inputs)."""
    policy = (g.spmm_format or _FORMAT_FROM_ENV) if flat.is_cuda else "csr"
    return (norm, reduce, plain_norm, flat.shape[1], flat.dtype, flat.device, grad,
            torch.are_deterministic_algorithms_enabled(), policy)


def _planned(g: Graph, flat: torch.Tensor, key: tuple, edge_weight, edge_values,
             transpose: bool):
    """``(value, plan, kept)``: the call's edge values in CSR order, its plan ``(plain norm
    values, transposed, algo, wsb blocks)`` and whether the graph keeps that plan. Only the
    edge inputs change from call to call; the rest depends on ``key``, so a repeated call is
    one lookup (plus its edge values' reorder into CSR order)."""
    norm, reduce, plain_norm, _, dtype, _, grad, _, policy = key
    plans = g.cached(_PLANS, dict)
    plan = plans.get(key)
    if plan is not None:
        value = plan[0] if plain_norm else csr_values(g, dtype, norm, reduce, edge_weight,
                                                      edge_values)
        return value, plan, True
    value = csr_values(g, dtype, norm, reduce, edge_weight, edge_values)
    # The plan is timed on the forward's operand: a stand-in when this call is transposed.
    operand = flat.new_zeros((g.num_src_nodes, flat.shape[1])) if transpose else flat
    plan = (value if plain_norm else None,) + _plan(g, operand, value, norm, reduce, plain_norm,
                                                    grad, policy)
    # A transpose built per call (cache_transpose=False) is not kept alive by the plan.
    kept = (g.cache_transpose or not grad) and tuning.can_time(flat.device)
    if kept:
        plans[key] = plan
    return value, plan, kept


def _run(g: Graph, flat: torch.Tensor, value, plan, transpose: bool) -> torch.Tensor:
    """The planned product of 2-D ``flat``."""
    _, transposed, algo, blocks = plan
    rows = g.num_src_nodes if transpose else g.num_dst_nodes
    if transpose:
        return _spmm(g.rowptr, g.col, value, flat.contiguous(), *transposed, rows, True, g.key,
                     algo >> _BACKWARD_SHIFT)
    if blocks is not None:
        layout = g.wsb()
        return wsb.product(layout.tile_ptr, layout.tile_cols, blocks, flat, rows,
                           *layout.plan(), g.rowptr, g.col, value, *transposed, g.key, algo)
    return _spmm(g.rowptr, g.col, value, flat, *transposed, rows, False, g.key, algo)


def product_runner(g: Graph, flat: torch.Tensor, key: tuple, edge_values,
                   transpose: bool) -> Tuple[Callable[[torch.Tensor], torch.Tensor], bool]:
    """``native_product`` without edge weights as a function of 2-D features with ``key``'s
    signature (:func:`plan_key` of ``flat``), planned once, and whether the graph keeps that
    plan (not with a transpose built per call, nor during a CUDA graph capture): only then
    may a caller keep the runner (under ``key``) to repeat a product whose edge values are
    fixed (the graph's norm coefficients, or ``edge_values`` kept with it)."""
    value, plan, kept = _planned(g, flat, key, None, edge_values, transpose)
    return (lambda x: _run(g, x, value, plan, transpose)), kept


# ---- fake kernels of the native ops (their autograd is in C++: csrc/spmm_autograd.cpp) --------
def _spmm_fake(rowptr, col, value, x, t_rowptr, t_col, t_perm, t_value, num_out, transpose, key,
               algo):
    return x.new_empty((num_out, x.shape[1]))


def _sddmm_fake(rowptr, col, a, b):
    return a.new_empty((col.shape[0],), dtype=acc_dtype(a.dtype))


if _native.has_op("spmm"):
    _library.register_fake("spmm", _spmm_fake)
    _library.register_fake("sddmm", _sddmm_fake)
    _spmm = torch.ops.fastgnn.spmm.default
    backends.register("spmm", "native", _native.devices(), _native_spmm, priority=10)

if _native.available:
    add_release_hook(_native._C.release_graph_cache)  # a freed Graph frees its cuSPARSE state

backends.register("spmm", "reference", ("cpu", "cuda"), reference.spmm, priority=-10)
