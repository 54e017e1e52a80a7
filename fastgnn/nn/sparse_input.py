"""Sparse input features: a first linear layer that multiplies bag-of-words or one-hot
features as a sparse matrix (Morphling's dense/sparse switch, decided by measurement).

``SparseInputLinear`` (a ``torch.nn.Linear``) and ``SparseInputPygLinear`` (a PyG
``Linear``) keep their stock class's parameters and ``state_dict`` keys. On a call whose
input is the same tensor object, unmodified (same ``_version``), as on the previous call
(the dataset's features, passed every epoch), they store it once in CSR as a
:class:`fastgnn.Graph` whose rows are nodes and whose sources are feature columns, and
compute ``X W^T`` and the weight gradient ``X^T dY`` with ``fastgnn.ops.spmm`` (native CPU
and CUDA kernels; the transposed CSR serves the backward). Whether that beats the stock dense
GEMM is measured once per (shape, non-zeros, output width, dtype, device, training or not)
by ``fastgnn.tuning.choose``; features more than ``MAX_DENSITY`` non-zero skip the
measurement and stay dense (a sparse product cannot win there). Inputs seen for the first
time, or built fresh on each call (hidden activations), take the stock path: converting
them every call would cost as much as it saves.
"""
from __future__ import annotations

import math
import weakref
from typing import Optional

import torch
import torch.nn.functional as F

from fastgnn import tuning
from fastgnn.graph import Graph
from fastgnn.ops.spmm import spmm

MAX_DENSITY = 0.5  # above it the layer stays dense without measuring
CONVERSION_BLOCK = 1 << 24  # feature entries converted to CSR at a time
DENSITY_BLOCK = 1 << 20  # feature entries counted at a time (CUDA: 9 MiB of transients)


def feature_density(x: torch.Tensor) -> float:
    """Fraction of non-zero entries of ``x`` (for data modules deciding on ``sparse_inputs``)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.is_sparse or x.layout != torch.strided:
        raise TypeError(f"x must be a dense (strided) tensor, got layout {x.layout}")
    if x.numel() == 0:
        return 0.0
    # By small row blocks: CUDA's count_nonzero holds 9 bytes per entry of transients (a bool
    # mask and its int64 copy for the sum): 144 MiB for a conversion block of 2^24 entries in
    # the zoo's Coauthor-CS fit, 1 GiB for the whole matrix.
    blocks = x.split(_block_rows(x, DENSITY_BLOCK)) if x.dim() else (x,)
    nonzeros = sum(torch.count_nonzero(block) for block in blocks)  # one host sync, below
    return int(nonzeros) / x.numel()


def _block_rows(x: torch.Tensor, entries: int) -> int:
    """Rows (along dim 0) of ``x`` per block of at most ``entries`` entries, at least one."""
    return max(1, entries // max(1, math.prod(x.shape[1:])))


class SparseFeatures:
    """A feature matrix ``[N, F]`` in CSR: ``graph`` (N destination rows, F sources, one edge
    per non-zero) and ``values`` (the non-zeros in CSR order)."""

    def __init__(self, graph: Graph, values: torch.Tensor):
        self.graph = graph
        self.values = values

    @classmethod
    def from_dense(cls, x: torch.Tensor) -> "SparseFeatures":
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
            raise ValueError("x must be a 2-D floating-point tensor [num_nodes, num_features]")
        x = x.detach()
        # A block of rows at a time: a whole-matrix mask and nonzero() would hold transients
        # of several times the features' own size (Coauthor-CS: 476 MiB of features).
        counts, columns, values = [], [], []
        for block in x.split(_block_rows(x, CONVERSION_BLOCK)):
            index = (block != 0).nonzero()  # row-major: already in CSR order
            counts.append(torch.bincount(index[:, 0], minlength=block.shape[0]))
            columns.append(index[:, 1])
            values.append(block[index[:, 0], index[:, 1]])
        rowptr = torch.zeros(x.shape[0] + 1, dtype=torch.int64, device=x.device)
        if counts:
            torch.cumsum(torch.cat(counts), 0, out=rowptr[1:])
        col = torch.cat(columns) if columns else rowptr.new_empty(0)
        index_dtype = torch.int32 if max(col.numel(), x.shape[0], x.shape[1]) < 2**31 \
            else torch.int64
        graph = Graph(rowptr.to(index_dtype), col.to(index_dtype), x.shape[1], _trusted=True)
        return cls(graph, torch.cat(values) if values else x.new_empty(0))

    @property
    def density(self) -> float:
        g = self.graph
        total = g.num_dst_nodes * g.num_src_nodes
        return g.num_edges / total if total else 0.0

    def matmul_t(self, weight: torch.Tensor) -> torch.Tensor:
        """``X W^T`` for ``weight [out, F]``, differentiable in ``weight``."""
        return spmm(self.graph, weight.t(), edge_values=self.values)


class _DenseInputGrad(torch.autograd.Function):
    """Passes the sparse product through and gives ``x`` its gradient ``dY W`` (the sparse
    product only differentiates the weight)."""

    @staticmethod
    def forward(ctx, out, x, weight):
        ctx.save_for_backward(weight)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        weight, = ctx.saved_tensors
        return grad, grad @ weight.to(grad.dtype), None


def sparse_linear(features: SparseFeatures, x: torch.Tensor, weight: torch.Tensor,
                  bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed from ``features`` (the CSR of ``x``)."""
    out = features.matmul_t(weight)
    if bias is not None:
        out = out + bias
    if x.requires_grad and torch.is_grad_enabled():
        out = _DenseInputGrad.apply(out, x, weight)
    return out


class _Seen:
    """The last input a layer saw, and its CSR once it was seen twice (False: stays dense)."""

    __slots__ = ("ref", "version", "features", "choices")

    def __init__(self, x: torch.Tensor):
        self.ref = weakref.ref(x)
        self.version = x._version
        self.features = None
        self.choices = {}  # training or not -> "dense"/"sparse", once the tuner has chosen

    def matches(self, x: torch.Tensor) -> bool:
        return self.ref() is x and self.version == x._version


class SparseInputMixin:
    """The forward shared by both sparse-input classes (``self.weight``, ``self.bias``).

    A repeated input costs an identity and version check and a dictionary lookup: the input's
    type, shape, dtype and device were checked when it was first seen."""

    def forward(self, x):
        seen = self.__dict__.get("_fastgnn_seen")
        if seen is None or not seen.matches(x):
            # First sight: remembered if eligible; the stock path handles (or rejects) it.
            self.__dict__["_fastgnn_seen"] = _Seen(x) if self._eligible(x) else None
            return super().forward(x)
        if x.dtype is not self.weight.dtype:  # the layer was cast since: stock behaviour
            return super().forward(x)
        if seen.features is None:
            dense = x.numel() == 0 or feature_density(x) > MAX_DENSITY
            seen.features = False if dense else SparseFeatures.from_dense(x)
        if (not seen.features or self._choice(seen, x) == "dense"
                or x.device != self.weight.device):  # moved since: the stock path's error
            return super().forward(x)
        return sparse_linear(seen.features, x, self.weight, self.bias)

    def _eligible(self, x) -> bool:
        """A dense floating-point feature matrix this layer takes, whose version counter tells
        an unchanged input (inference tensors have none)."""
        return (isinstance(x, torch.Tensor) and x.dim() == 2 and x.layout == torch.strided
                and x.is_floating_point() and x.dtype == self.weight.dtype
                and x.device == self.weight.device and x.shape[1] == self.weight.shape[1]
                and not x.is_inference())

    def _choice(self, seen: _Seen, x: torch.Tensor) -> str:
        """The tuner's pick for this input, kept on the input's cache entry: after the first
        calls a dense pick costs the stock layer only a dictionary lookup more."""
        training = torch.is_grad_enabled() and self.weight.requires_grad
        choice = seen.choices.get(training)
        if choice is None:
            choice = self._measure(seen.features, x, training)
            if tuning.can_time(x.device):  # a default given while tracing is not kept
                seen.choices[training] = choice
        return choice

    def _measure(self, features: SparseFeatures, x: torch.Tensor, training: bool) -> str:
        weight, bias = self.weight, self.bias
        op = "sparse_input_linear_fwd_bwd" if training else "sparse_input_linear_fwd"

        def run(path):
            w = weight.detach().requires_grad_(training)
            b = None if bias is None else bias.detach()
            with torch.enable_grad() if training else torch.no_grad():
                out = path(w, b)
                if training:
                    torch.autograd.grad(out, w, torch.ones_like(out))

        def candidates():
            return {"dense": lambda: run(lambda w, b: F.linear(x.detach(), w, b)),
                    "sparse": lambda: run(lambda w, b: sparse_linear(features, x.detach(), w, b))}
        return tuning.choose(op, features.graph, weight.shape[0], x.dtype, x.device,
                             candidates, "dense")


class SparseInputLinear(SparseInputMixin, torch.nn.Linear):
    """``torch.nn.Linear`` with sparse input features (see the module docstring)."""


def _pyg_linear():
    try:
        from torch_geometric.nn.dense.linear import Linear
    except ImportError:
        return None
    return Linear


_PygLinear = _pyg_linear()
if _PygLinear is not None:
    class SparseInputPygLinear(SparseInputMixin, _PygLinear):
        """PyG's ``Linear`` with sparse input features (see the module docstring)."""
else:  # pragma: no cover - PyG absent
    SparseInputPygLinear = None


def sparse_input_class(module: torch.nn.Module):
    """The sparse-input class for a stock linear layer, or None."""
    if type(module) is torch.nn.Linear:
        return SparseInputLinear
    if _PygLinear is not None and type(module) is _PygLinear:
        return SparseInputPygLinear
    return None
