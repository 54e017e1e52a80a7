"""CBSR (compressed balanced sparse rows): the output format of the MaxK nonlinearity.

Every row of an ``[N, F]`` matrix keeps exactly ``k`` entries: ``values [N, k]`` (the feature
dtype, differentiable) and ``indices [N, k]``, their columns in ascending order, in the
narrowest integer dtype that holds ``F`` (uint8 up to 256 features, int16 up to 32768, int32
beyond). A balanced row length makes every row's entries contiguous and equally long, which
is what the SpGEMM/SSpMM kernels of ``fastgnn.ops.maxk_spmm`` read; the narrow index keeps
the index traffic at a quarter of an int32 one for the usual hidden widths (the MaxK-GNN
paper's uint8 ``sp_index``). Code that needs int64 indices (``torch.gather``/``scatter``)
converts them, as :meth:`CBSR.to_dense` does.
"""
from __future__ import annotations

import torch

_UINT8_MAX_FEATURES = 256
_INT16_MAX_FEATURES = 32768
_INT32_MAX = 2**31 - 1


def index_dtype(num_features: int) -> torch.dtype:
    """The CBSR column-index dtype for a width (csrc/maxk_common.h has the same rule)."""
    if num_features <= _UINT8_MAX_FEATURES:
        return torch.uint8
    if num_features <= _INT16_MAX_FEATURES:
        return torch.int16
    return torch.int32


def _check_columns(indices: torch.Tensor, num_features: int) -> None:
    """Columns in [0, num_features), strictly ascending along each row (CPU: no sync)."""
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0 or hi >= num_features:
        raise ValueError(f"indices has column {lo if lo < 0 else hi}, out of range for "
                         f"num_features={num_features}")
    wide = indices.to(torch.int64)
    if bool((wide[:, 1:] <= wide[:, :-1]).any()):
        raise ValueError("indices must be strictly ascending along each row (distinct columns)")


class CBSR:
    """``k`` kept entries per row of an ``[N, num_features]`` matrix (see the module doc).

    Built by :func:`fastgnn.ops.maxk`; construct one directly only from values and indices
    that satisfy the format (columns ascending and below ``num_features``). On the CPU the
    constructor checks that (a ValueError: the kernels would read and write out of bounds);
    on a GPU it does not, which would cost a device synchronisation.
    """

    __slots__ = ("values", "indices", "num_features")

    def __init__(self, values: torch.Tensor, indices: torch.Tensor, num_features: int, *,
                 _trusted: bool = False):
        if not isinstance(values, torch.Tensor) or not values.is_floating_point():
            raise TypeError("values must be a floating-point torch.Tensor")
        if not isinstance(indices, torch.Tensor):
            raise TypeError(f"indices must be a torch.Tensor, got {type(indices).__name__}")
        if isinstance(num_features, bool) or not isinstance(num_features, int):
            raise TypeError(f"num_features must be an int, got {type(num_features).__name__}")
        if values.dim() != 2 or indices.shape != values.shape:
            raise ValueError(f"values and indices must both be [N, k], got {list(values.shape)} "
                             f"and {list(indices.shape)}")
        if num_features > _INT32_MAX:
            raise ValueError(f"num_features must be at most {_INT32_MAX} (int32 column "
                             f"indices), got {num_features}")
        if not 1 <= values.shape[1] <= num_features:
            raise ValueError(f"k ({values.shape[1]}) must be in [1, num_features="
                             f"{num_features}]")
        if indices.dtype != index_dtype(num_features):
            raise TypeError(f"indices of {num_features} features must have dtype "
                            f"{index_dtype(num_features)}, got {indices.dtype}")
        if indices.device != values.device:
            raise ValueError(f"indices are on {indices.device} but values on {values.device}")
        if not _trusted and indices.device.type == "cpu" and indices.numel():
            _check_columns(indices, num_features)
        self.values = values
        self.indices = indices
        self.num_features = num_features

    @property
    def k(self) -> int:
        return self.values.shape[1]

    @property
    def shape(self) -> torch.Size:
        """The dense shape ``[N, num_features]``."""
        return torch.Size((self.values.shape[0], self.num_features))

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def to_dense(self) -> torch.Tensor:
        """The ``[N, num_features]`` matrix with zeros off the pattern (differentiable in
        ``values``)."""
        dense = self.values.new_zeros(self.shape)
        return dense.scatter(1, self.indices.to(torch.int64), self.values)

    def __repr__(self) -> str:
        return (f"fastgnn.CBSR(shape={list(self.shape)}, k={self.k}, dtype={self.dtype}, "
                f"index_dtype={self.indices.dtype}, device={self.device})")
