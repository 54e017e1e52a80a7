"""Snapshot SpMM: every snapshot of a :class:`fastgnn.SnapshotGraph` window aggregated in one
pass (PiPAD's parallel multi-snapshot aggregation).

``torch.ops.fastgnn.spmm_snapshots`` reads each shared edge once and applies it to all T
feature slices; the other edges carry a membership mask. Each snapshot's norm is a product
of node scales (``SnapshotGraph.norm_scales``), applied to sources as they are read and to
destinations once per row, so no per-edge, per-snapshot values exist. The backward is the
same op on the transposed structure with the two scales swapped.
"""
from __future__ import annotations

import math

import torch

from fastgnn import _library, _native, _validate, backends, reference
from fastgnn.graph import NORMS
from fastgnn.ops._common import acc_dtype, wants_grad
from fastgnn.snapshots import SnapshotGraph

OP = "spmm_snapshots"


def spmm_snapshots(sg: SnapshotGraph, xs: torch.Tensor, norm: str = "none") -> torch.Tensor:
    """``out[t] = A_t xs[t]`` for every snapshot ``t`` of the window: ``xs [T, N, F]`` in,
    ``[T, N, F]`` out (any trailing shape ``[T, N, *]`` is flattened and restored).

    ``norm`` is ``fastgnn.ops.spmm``'s, computed from each snapshot's own degrees: "none",
    "left" (1/out_deg_t(j)), "right" (1/in_deg_t(i)), "both" (their square roots), zero
    degrees clamped to 1. Differentiable in ``xs``. Features shared by every snapshot (static
    node features) can come as ``x.expand(T, -1, -1)``: with its snapshot stride of 0 each
    source row is read once per edge for all snapshots.
    """
    if not isinstance(sg, SnapshotGraph):
        raise TypeError(f"sg must be a fastgnn.SnapshotGraph, got {type(sg).__name__}")
    _validate.choice("norm", norm, NORMS)
    _validate.float_tensor("xs", xs)
    if xs.dim() < 2 or xs.shape[0] != sg.num_snapshots or xs.shape[1] != sg.num_nodes:
        raise ValueError(f"xs must have shape [T={sg.num_snapshots}, N={sg.num_nodes}, F], "
                         f"got {list(xs.shape)}")
    if xs.device != sg.device:
        raise ValueError(f"xs is on {xs.device} but the snapshots are on {sg.device}")
    impl = backends.select(OP, xs.device)
    return impl.fn(sg, xs, norm)


def _native_spmm_snapshots(sg: SnapshotGraph, xs: torch.Tensor, norm: str) -> torch.Tensor:
    flat = xs.reshape(xs.shape[0], xs.shape[1], math.prod(xs.shape[2:]))  # -1 fails at N = 0
    src_scale, dst_scale = sg.norm_scales(norm, acc_dtype(xs.dtype))
    transposed = sg.transposed() if wants_grad(xs) else (None,) * 4
    out = _spmm_snapshots(*sg.structure(), flat, src_scale, dst_scale, sg.num_nodes,
                          *transposed, sg.key, False)
    return out.reshape(xs.shape)


# ---- autograd and fake kernel ------------------------------------------------------------------
def _setup(ctx, inputs, output):
    (rowptr, shared_end, col, mask, x, src_scale, dst_scale, num_out,
     t_rowptr, t_shared_end, t_col, t_mask, graph_key, transposed) = inputs
    ctx.save_for_backward(rowptr, shared_end, col, mask, src_scale, dst_scale,
                          t_rowptr, t_shared_end, t_col, t_mask)
    ctx.num_src = x.shape[1]
    ctx.graph_key, ctx.transposed = graph_key, transposed


def _backward(ctx, grad):
    (rowptr, shared_end, col, mask, src_scale, dst_scale,
     t_rowptr, t_shared_end, t_col, t_mask) = ctx.saved_tensors
    grad_x = None
    if ctx.needs_input_grad[4]:
        if t_rowptr is None:
            raise RuntimeError("spmm_snapshots: the forward ran without the transposed "
                               "structure, so it cannot be differentiated")
        # dX_t = S_src A_t^T S_dst dY_t: the forward's op on the transpose, scales swapped.
        grad_x = _spmm_snapshots(t_rowptr, t_shared_end, t_col, t_mask, grad.contiguous(),
                                 dst_scale, src_scale, ctx.num_src,
                                 rowptr, shared_end, col, mask, ctx.graph_key,
                                 not ctx.transposed)
    return (None,) * 4 + (grad_x,) + (None,) * 9


def _fake(rowptr, shared_end, col, mask, x, src_scale, dst_scale, num_out, t_rowptr,
          t_shared_end, t_col, t_mask, graph_key=0, transposed=False):
    return x.new_empty((x.shape[0], num_out, x.shape[2]))


if _native.has_op(OP):
    _library.register_fake(OP, _fake)
    _spmm_snapshots = _library.register_autograd(OP, _backward, _setup)
    backends.register(OP, "native", _native.devices(), _native_spmm_snapshots, priority=10)

backends.register(OP, "reference", ("cpu", "cuda"), reference.spmm_snapshots, priority=-10)
