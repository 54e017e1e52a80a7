"""Which of equal messages DGL's min/max kernels keep, asked of DGL itself.

DGL 2.1 scans each destination's in-edges in edge-id order. Its generic kernels (CPU and
CUDA) keep the first of equal messages; on a CPU with AVX-512, float32 features and no
broadcasting between node and edge data, its libxsmm kernels keep the last (unless
``dgl.use_libxsmm(False)``). Rather than re-derive that rule, each kind of call (device, dtype,
feature shapes, libxsmm switch) is run once through DGL's own op on two equal messages, and the
answer is cached.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import dgl
import dgl.ops as dgl_ops
import torch

_Key = Tuple[torch.device, torch.dtype, tuple, Optional[tuple], bool]
_answers: Dict[_Key, str] = {}


def _libxsmm_enabled() -> bool:
    enabled = getattr(dgl, "is_libxsmm_enabled", None)
    return bool(enabled()) if enabled is not None else False


def padded_shapes(lhs: torch.Tensor, rhs: torch.Tensor) -> Tuple[tuple, tuple]:
    """Feature shapes after DGL's alignment: the shorter one gets 1s after its first dim."""
    lf, rf = tuple(lhs.shape[1:]), tuple(rhs.shape[1:])
    ndim = max(len(lf), len(rf))
    return (1,) * (ndim - len(lf)) + lf, (1,) * (ndim - len(rf)) + rf


def dgl_ties(x: torch.Tensor, edge_data: Optional[torch.Tensor] = None) -> str:
    """The ``ties`` argument of ``fastgnn.ops.aggregate`` that gives DGL's pick for max/min of
    node features ``x`` (times ``edge_data``, as DGL's ``u_mul_e`` broadcasts them; None:
    ``copy_u``)."""
    if edge_data is None:
        x_feat, e_feat = tuple(x.shape[1:]), None
    else:
        x_feat, e_feat = padded_shapes(x, edge_data)
    if math.prod(x_feat) == 0:
        return "first-edge"  # no features, nothing to pick
    key = (x.device, x.dtype, x_feat, e_feat, _libxsmm_enabled())
    if key not in _answers:
        _answers[key] = _probe(*key[:4])
    return _answers[key]


def _probe(device: torch.device, dtype: torch.dtype, x_feat: tuple,
           e_feat: Optional[tuple]) -> str:
    # Node 2's in-edges: edge 0 from node 1, edge 1 from node 0, equal messages (ones); the
    # gradient shows which one DGL kept.
    graph = dgl.graph((torch.tensor([1, 0]), torch.tensor([2, 2])), num_nodes=3, device=device)
    with torch.inference_mode(False), torch.enable_grad():
        x = torch.ones((3,) + x_feat, dtype=dtype, device=device, requires_grad=True)
        try:
            if e_feat is None:
                out = dgl_ops.copy_u_max(graph, x)
            else:
                out = dgl_ops.u_mul_e_max(graph, x, torch.ones((2,) + e_feat, dtype=dtype,
                                                                device=device))
        except dgl.DGLError:  # a call DGL cannot run (float16 on CPU): its generic rule
            return "first-edge"
        (grad,) = torch.autograd.grad(out[2].sum(), x)
    return "last-edge" if bool(grad[0].reshape(-1)[0] != 0) else "first-edge"
