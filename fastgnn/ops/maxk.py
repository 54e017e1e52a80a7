"""MaxK nonlinearity into CBSR, and aggregation of CBSR features (MaxK-GNN, Peng et al. 2024).

``maxk(x, k)`` returns a :class:`fastgnn.CBSR`; ``maxk_spmm(g, h)`` aggregates it into a dense
``[T, F]`` output: the forward is the row-wise-product SpGEMM (each destination row is summed
in an on-chip buffer from the k kept entries of its sources), the backward the SSpMM that
computes only the k kept entries of each source row of ``A^T dY``. Neither materialises an
E x F tensor. The edge-weight gradient (only when ``edge_weight``/``edge_values`` require
grad) is ``dw_e = sum_m h[j, m] dY[i, idx[j, m]]``, computed in PyTorch with E x k
temporaries. Double backward works in the features (the SSpMM's adjoint is the SpGEMM), not
through edge weights (NotImplementedError).

CUDA: the SpGEMM and the pulled SSpMM run over work items of at most ``chunk`` edges (the
work list shared with SpMM, cached per graph), so hub rows spread over many warps; partial
rows are summed in item order. The SpGEMM adds without atomics (each lane group of a warp
owns a row buffer), so it is deterministic. The SSpMM is either pulled per source over the
cached transpose (deterministic) or pushed per destination from its dense gradient row held
in shared memory (the paper's outer product, atomic adds): ``fastgnn.tuning`` times both once
per (graph, k, width, dtype); under ``torch.use_deterministic_algorithms(True)`` it pulls.
CPU: the SSpMM pushes into a [num_src, k] buffer per thread while those fit
``_CPU_PUSH_BUFFER_BYTES`` and pulls beyond; both are deterministic for a given thread count.
"""
from __future__ import annotations

from typing import Optional

import torch

from fastgnn import _library, _native, _validate, backends, reference, reordering, tuning
from fastgnn.cbsr import CBSR, index_dtype
from fastgnn.graph import NORMS, Graph
from fastgnn.ops._common import acc_dtype, check_graph, wants_grad
from fastgnn.ops.spmm import REDUCES, csr_values, spmm

# CUDA limits: the top-k keeps up to 32 entries per lane in registers (F <= 1024, not
# float64); the SpGEMM and pushed SSpMM keep one dense row per warp in shared memory.
_CUDA_SELECT_MAX_WIDTH = 1024
_CUDA_ROW_BUFFER_BYTES = 48 * 1024
_CHUNKS = (64, 256, 1024)  # edges per work item the tuner tries
_DEFAULT_CHUNK = 256
_CHUNK_MASK = (1 << 20) - 1  # maxk_spgemm config: bits 0-19 the edges per work item
# maxk_spgemm config bits 32-63: its backward's maxk_sspmm config (read by the C++ autograd
# formula: kBackwardShift in csrc/maxk_autograd.cpp)
_BACKWARD_SHIFT = 32
_SSPMM_PUSH = 1  # maxk_sspmm config: bit 0 push, bits 8-27 the edges per work item
_SSPMM_CHUNK_SHIFT = 8


def _sspmm_config(push: bool, chunk: int) -> int:
    return (_SSPMM_PUSH if push else 0) | chunk << _SSPMM_CHUNK_SHIFT


def _spgemm_config(chunk: int, push: bool) -> int:
    """The SpGEMM's config: ``chunk`` edges per work item, and its backward's SSpMM config
    (pushed or pulled over the same work items)."""
    return chunk | _sspmm_config(push, chunk) << _BACKWARD_SHIFT


def _check_k(k, width: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 1 <= k <= width:
        raise ValueError(f"k must be in [1, {width}] (the feature width), got {k}")


def maxk(x: torch.Tensor, k: int) -> CBSR:
    """The MaxK nonlinearity: keeps the ``k`` largest entries of each row of ``x [N, F]``.

    Returns a :class:`fastgnn.CBSR` (values ``[N, k]``, ascending column indices ``[N, k]``,
    ``F``); ``.to_dense()`` gives the dense ``[N, F]`` view. Ties go to the smallest column;
    NaN counts as the largest value. Gradients flow to ``x`` through the kept entries only.
    """
    _validate.float_tensor("x", x)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [N, F], got shape {list(x.shape)}")
    _check_k(k, x.shape[1])
    return backends.select("maxk", x.device).fn(x, k)


def check_cbsr(name: str, h, num_rows: int, device: torch.device, rows_name: str) -> None:
    if not isinstance(h, CBSR):
        raise TypeError(f"{name} must be a fastgnn.CBSR (from fastgnn.ops.maxk), got "
                        f"{type(h).__name__}")
    _validate.node_features(f"{name}.values", h.values, num_rows, device, rows_name)


@reordering.in_caller_order("h")
def maxk_spmm(g: Graph, h: CBSR, norm: str = "none", edge_weight: Optional[torch.Tensor] = None,
              reduce: str = "sum", *, edge_values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``fastgnn.ops.spmm(g, h.to_dense(), ...)`` without densifying ``h``: ``out [T, F]``.

    ``h``: CBSR features of the ``num_src_nodes`` sources (from :func:`maxk`). ``norm``,
    ``edge_weight``, ``reduce`` and ``edge_values`` mean what they mean for ``spmm``.
    Gradients flow to ``h.values`` and to the edge inputs.
    """
    check_graph(g)
    check_cbsr("h", h, g.num_src_nodes, g.device, "num_src_nodes")
    _validate.choice("norm", norm, NORMS)
    _validate.choice("reduce", reduce, REDUCES)
    for name, values in (("edge_weight", edge_weight), ("edge_values", edge_values)):
        if values is not None:
            _validate.edge_values(name, values, g.num_edges, g.device)
    if edge_values is not None and (edge_weight is not None or norm != "none" or reduce != "sum"):
        raise ValueError("edge_values replaces norm, reduce and edge_weight: pass it alone")
    impl = backends.select("maxk_spmm", h.device)
    return impl.fn(g, h, norm=norm, edge_weight=edge_weight, reduce=reduce,
                   edge_values=edge_values)


# ---- native implementations -------------------------------------------------------------------
def _native_maxk(x: torch.Tensor, k: int) -> CBSR:
    if x.is_cuda and (x.dtype == torch.float64 or x.shape[1] > _CUDA_SELECT_MAX_WIDTH):
        return reference.maxk_cbsr(x, k)  # outside the register-resident kernel's range
    values, indices = _maxk(x, k)
    return CBSR(values, indices, x.shape[1], _trusted=True)


def _row_buffer_fits(h: CBSR) -> bool:
    return h.num_features * torch.finfo(acc_dtype(h.dtype)).bits // 8 <= _CUDA_ROW_BUFFER_BYTES


def _cuda_config(g: Graph, h: CBSR, value: Optional[torch.Tensor], transposed, grad: bool) -> int:
    """The SpGEMM's config int (edges per item, the backward's push)."""
    if torch.are_deterministic_algorithms_enabled():
        # the SpGEMM is deterministic; the SSpMM pulls
        return _spgemm_config(_DEFAULT_CHUNK, push=False)
    values, indices, width = h.values.detach(), h.indices, h.num_features
    value = None if value is None else value.detach()
    op = torch.ops.fastgnn

    def forward_candidates():
        return {f"chunk{c}": (lambda c=c: op.maxk_spgemm(
            g.rowptr, g.col, value, values, indices, width, None, None, None, None, g.key, c))
            for c in _CHUNKS}
    with torch.no_grad():
        chunk = int(tuning.choose(f"maxk_spgemm_k{h.k}", g, width, h.dtype, h.device,
                                  forward_candidates, f"chunk{_DEFAULT_CHUNK}")[5:])
    if not grad:
        return chunk
    t_rowptr, t_col, t_perm, t_value = transposed
    if value is not None and t_value is None:
        t_value = value.index_select(0, t_perm.to(torch.int64))
    stand_in = values.new_ones((g.num_dst_nodes, width))  # a stand-in gradient

    def backward_candidates():
        return {name: (lambda push=push: op.maxk_sspmm(
            g.rowptr, g.col, value, t_rowptr, t_col, t_value, stand_in, indices, g.key,
            _sspmm_config(push, chunk))) for name, push in (("pull", False), ("push", True))}
    with torch.no_grad():
        push = tuning.choose(f"maxk_sspmm_k{h.k}", g, width, h.dtype, h.device,
                             backward_candidates, "push") == "push"
    return _spgemm_config(chunk, push)


# CPU: the pushed SSpMM keeps a [num_src, k] buffer per thread; beyond this it pulls.
_CPU_PUSH_BUFFER_BYTES = 128 * 1024 * 1024


def _cpu_config(h: CBSR) -> int:
    """The backward pushes when the per-thread buffers fit (the push reads ~k entries per
    edge, the pull most cache lines of each gradient row)."""
    itemsize = torch.finfo(acc_dtype(h.dtype)).bits // 8
    buffers = torch.get_num_threads() * h.values.shape[0] * h.k * itemsize
    return _spgemm_config(0, push=buffers <= _CPU_PUSH_BUFFER_BYTES)


def _native_maxk_spmm(g: Graph, h: CBSR, norm: str, edge_weight, reduce: str,
                      edge_values) -> torch.Tensor:
    if h.values.is_cuda and not _row_buffer_fits(h):
        _warn_wide(h.num_features)
        return spmm(g, h.to_dense(), norm, edge_weight, reduce, edge_values=edge_values)
    value = csr_values(g, h.dtype, norm, reduce, edge_weight, edge_values)
    grad = wants_grad(h.values, value)
    transposed = (None,) * 4
    if grad:
        plain_norm = edge_weight is None and edge_values is None
        t_value = g.transposed_norm_values(norm, reduce, acc_dtype(h.dtype)) if plain_norm \
            else None
        transposed = g.transpose() + (t_value,)
    config = _cuda_config(g, h, value, transposed, grad) if h.values.is_cuda else \
        _cpu_config(h)
    return _spgemm(g.rowptr, g.col, value, h.values, h.indices, h.num_features, *transposed,
                   g.key, config)


_warned_widths = set()


def _warn_wide(width: int) -> None:
    if width not in _warned_widths:
        _warned_widths.add(width)
        import warnings
        warnings.warn(f"fastgnn.ops.maxk_spmm: {width} features do not fit the CUDA kernel's "
                      "shared-memory row buffer; aggregating the dense view with spmm instead")


# ---- fake kernels (the ops' autograd is in C++: csrc/maxk_autograd.cpp) -------------------------
def _maxk_fake(x, k):
    shape = (x.shape[0], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=index_dtype(x.shape[1]))


def _spgemm_fake(rowptr, col, value, values, indices, num_features, t_rowptr, t_col, t_perm,
                 t_value, graph_key, config):
    return values.new_empty((rowptr.shape[0] - 1, num_features))


def _sspmm_fake(rowptr, col, value, t_rowptr, t_col, t_value, grad_out, indices, graph_key,
                config):
    return grad_out.new_empty(indices.shape)


if _native.has_op("maxk"):
    _library.register_fake("maxk", _maxk_fake)
    _library.register_fake("maxk_spgemm", _spgemm_fake)
    _library.register_fake("maxk_sspmm", _sspmm_fake)
    _maxk = _library.op("maxk").default
    _spgemm = _library.op("maxk_spgemm").default
    backends.register("maxk", "native", _native.devices(), _native_maxk, priority=10)
    backends.register("maxk_spmm", "native", _native.devices(), _native_maxk_spmm, priority=10)

backends.register("maxk", "reference", ("cpu", "cuda"), reference.maxk_cbsr, priority=-10)
backends.register("maxk_spmm", "reference", ("cpu", "cuda"), reference.maxk_spmm, priority=-10)
