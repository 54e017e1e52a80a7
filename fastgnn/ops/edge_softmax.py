"""Edge softmax (DGL's ``edge_softmax``): ``torch.ops.fastgnn.edge_softmax`` and its backward.

Each destination's in-edges (``norm_by="dst"``, the destination-major CSR's rows) or each
source's out-edges (``"src"``, the cached transposed CSR's rows) are one softmax per trailing
entry of the logits. The logits stay in the graph's input edge order: the kernels read and
write edge ``perm[p]`` at row position ``p``. Autograd saves only the output; the backward
``out * (grad - rowsum(out * grad))`` is a kernel of its own over the same rows. On CUDA the
rows split by length at a degree quantile (the Graph's cached buckets; the source rows' own,
cached alike): the light rows take a warp each, the heavy ones (hubs) a block each.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from fastgnn import _library, _native, _validate, backends, reference
from fastgnn.graph import Graph
from fastgnn.ops._common import check_graph, edge_perm_index

OP = "edge_softmax"
NORMS = ("dst", "src")
#: rows longer than this quantile of the row lengths take a CUDA block each
HEAVY_QUANTILE = 0.99


def edge_softmax(g: Graph, logits: torch.Tensor, norm_by: str = "dst") -> torch.Tensor:
    """Softmax of per-edge ``logits`` over the in-edges of each destination
    (``norm_by="dst"``) or the out-edges of each source (``"src"``), each trailing entry on its
    own: DGL's ``edge_softmax``.

    ``logits``: ``[num_edges, *]`` (``[E]``, ``[E, H]``, ``[E, H, 1]``, ...) in the graph's input
    edge order, the order of the ``edge_index`` it was built from; the result has its shape and
    dtype. float16/bfloat16 accumulate in float32. As in DGL, a node whose edges hold a NaN
    logit, or whose largest logit is +-inf (all of them -inf included), gets NaN on those edges.
    """
    check_graph(g)
    _validate.choice("norm_by", norm_by, NORMS)
    _validate.node_features("logits", logits, g.num_edges, g.device, "num_edges")
    return backends.select(OP, logits.device).fn(g, logits, norm_by)


def _rows(g: Graph, norm_by: str) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(rowptr, perm): the rows to normalise over and the input edge at each row position."""
    if norm_by == "dst":
        return g.rowptr, edge_perm_index(g)
    return g.transpose()[0], g.transposed_edge_ids()


def _buckets(g: Graph, norm_by: str) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(light_rows, heavy_rows) of ``_rows(g, norm_by)``'s rows, longest first; (None, None) on
    CPU or without heavy rows. Cached on the graph: one host sync when first built."""
    if g.device.type != "cuda":
        return None, None
    _, light, heavy = g.degree_buckets(HEAVY_QUANTILE, by_degree=True,
                                       direction="in" if norm_by == "dst" else "out")
    return (light, heavy) if heavy.numel() else (None, None)


def native_edge_softmax(g: Graph, logits: torch.Tensor, norm_by: str) -> torch.Tensor:
    """``edge_softmax`` on the native kernels (inputs already checked)."""
    flat = logits.reshape(logits.shape[0], math.prod(logits.shape[1:]))
    return _edge_softmax(*_rows(g, norm_by), flat, *_buckets(g, norm_by)).reshape(logits.shape)


# ---- fake kernels (the op's autograd is in C++: csrc/edge_softmax_autograd.cpp) ------------------
def _fake(rowptr, edge_perm, logits, light_rows, heavy_rows):
    return logits.new_empty(logits.shape)


def _backward_fake(rowptr, edge_perm, out, grad_out, light_rows, heavy_rows):
    return out.new_empty(out.shape)


backends.register(OP, "reference", ("cpu", "cuda"), reference.edge_softmax, priority=-10)
if _native.has_op(OP):
    _library.register_fake(OP, _fake)
    _library.register_fake("edge_softmax_backward", _backward_fake)
    _edge_softmax = _library.op(OP).default
    backends.register(OP, "native", _native.devices(), native_edge_softmax, priority=10)
