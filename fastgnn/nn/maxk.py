"""The MaxK nonlinearity as a module (MaxK-GNN, Peng et al. 2024)."""
from __future__ import annotations

import torch
from torch import nn

from fastgnn import ops
from fastgnn.cbsr import CBSR


def check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return k


class MaxK(nn.Module):
    """Keeps the ``k`` largest entries of each row of its input and zeroes the others (ties
    to the smallest column), on ``fastgnn.ops.maxk``'s kernels.

    Returns a dense tensor of the input's shape (the last dimension is the row), so it drops
    into any model in place of ReLU; ``cbsr=True``, or :meth:`sparse`, returns the
    :class:`fastgnn.CBSR` instead (2-D inputs), for ``fastgnn.ops.maxk_spmm``.
    """

    def __init__(self, k: int, cbsr: bool = False):
        super().__init__()
        self.k = check_k(k)
        self.cbsr = bool(cbsr)

    def sparse(self, x: torch.Tensor) -> CBSR:
        return ops.maxk(x, self.k)

    def forward(self, x: torch.Tensor):
        if self.cbsr:
            return self.sparse(x)
        if not isinstance(x, torch.Tensor) or x.dim() < 1:
            raise ValueError("MaxK expects a tensor with at least one dimension")
        flat = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
        return self.sparse(flat).to_dense().reshape(x.shape)

    def extra_repr(self) -> str:
        return f"k={self.k}" + (", cbsr=True" if self.cbsr else "")
