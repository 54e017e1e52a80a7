"""Input checks shared by Graph construction and the ops: clear errors naming the argument.

Checks on values (index ranges) synchronise with the device, so they run once, when a Graph
is built; per-call checks look only at shapes, dtypes and devices.
"""
from __future__ import annotations

import os
from typing import Iterable, Optional, Tuple

import torch

_INDEX_DTYPES = (torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def choice(name: str, value, allowed: Iterable) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def tensor(name: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def integer_tensor(name: str, value) -> None:
    tensor(name, value)
    if value.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (int32 or int64), got {value.dtype}")


def float_tensor(name: str, value) -> None:
    tensor(name, value)
    if value.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must be floating point (float16, bfloat16, float32 or "
                        f"float64), got {value.dtype}")


def device(name: str, value) -> torch.device:
    """``value`` (a torch.device, a device string or a CUDA index) as a torch.device."""
    if isinstance(value, bool) or not isinstance(value, (torch.device, str, int)):
        raise TypeError(f"{name} must be a torch.device, a device string or an index, "
                        f"got {type(value).__name__}")
    try:
        return torch.device(value)
    except RuntimeError as error:  # torch's message ("Invalid device string") names no argument
        raise ValueError(f"{name}: {error}") from None


def generator(name: str, value) -> None:
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {type(value).__name__}")


def count(name: str, value) -> int:
    # a one-element tensor counts only with an integer dtype: int(tensor(5.7)) would be 5
    if isinstance(value, bool) or not isinstance(value, int) and not (
            isinstance(value, torch.Tensor) and value.numel() == 1
            and value.dtype in _INDEX_DTYPES):
        kind = (f"Tensor of dtype {value.dtype}" if isinstance(value, torch.Tensor)
                else type(value).__name__)
        raise TypeError(f"{name} must be an int, got {kind}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return value


def _device_memory_bytes(device: torch.device) -> int:
    """Total memory of ``device`` (host RAM for the CPU); no device synchronisation."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # pragma: no cover - no sysconf
        return 2**63 - 1


def node_count(name: str, value, device: torch.device) -> int:
    """A node count whose per-node index arrays (CSR row pointers, degrees: 8 bytes a node)
    fit the device's memory: a ValueError naming the argument rather than an allocator
    error, or a silent overflow, for declared sizes such as 2**40."""
    value = count(name, value)
    needed = (value + 1) * 8
    total = _device_memory_bytes(torch.device(device))
    if needed > total:
        raise ValueError(f"{name}={value} is too large: its per-node index arrays alone take "
                         f"{needed} bytes, more than the {total} bytes of {device} memory")
    return value


def _index_range(name: str, index: torch.Tensor, upper: int, bound_name: str) -> None:
    if index.numel() == 0:
        return
    lo, hi = int(index.min()), int(index.max())
    if lo < 0:
        raise ValueError(f"{name} has a negative index ({lo})")
    if hi >= upper:
        raise ValueError(f"{name} has index {hi}, out of range for {bound_name}={upper}")


def permutation(name: str, value, size: int, device: torch.device) -> None:
    """``value`` a permutation of ``range(size)`` on ``device`` (one host sync)."""
    integer_tensor(name, value)
    if value.dim() != 1 or value.numel() != size:
        raise ValueError(f"{name} must have shape [{size}], got {list(value.shape)}")
    if value.device != device:
        raise ValueError(f"{name} is on {value.device}, expected {device}")
    _index_range(name, value, size, "its length")
    if not bool(torch.bincount(value, minlength=size).eq(1).all()):
        raise ValueError(f"{name} must be a permutation (each of 0..{size - 1} once)")


def edge_index(value) -> None:
    integer_tensor("edge_index", value)
    if value.dim() != 2 or value.size(0) != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(value.shape)}")


def node_counts(edge_index_: torch.Tensor, num_nodes: Optional[int], num_src_nodes: Optional[int],
                num_dst_nodes: Optional[int]) -> Tuple[int, int]:
    """Resolves (num_src, num_dst) and checks every index against them (one host sync)."""
    if num_nodes is not None and (num_src_nodes is not None or num_dst_nodes is not None):
        raise ValueError("give either num_nodes or num_src_nodes/num_dst_nodes, not both")
    if (num_src_nodes is None) != (num_dst_nodes is None):
        raise ValueError("num_src_nodes and num_dst_nodes must be given together")
    if num_src_nodes is not None:
        num_src = node_count("num_src_nodes", num_src_nodes, edge_index_.device)
        num_dst = node_count("num_dst_nodes", num_dst_nodes, edge_index_.device)
        _index_range("edge_index[0] (sources)", edge_index_[0], num_src, "num_src_nodes")
        _index_range("edge_index[1] (destinations)", edge_index_[1], num_dst, "num_dst_nodes")
        return num_src, num_dst
    if num_nodes is None:
        if edge_index_.numel() and int(edge_index_.min()) < 0:
            raise ValueError(f"edge_index has a negative index ({int(edge_index_.min())})")
        n = int(edge_index_.max()) + 1 if edge_index_.numel() else 0
        n = node_count("num_nodes (edge_index's largest index + 1)", n, edge_index_.device)
        return n, n
    n = node_count("num_nodes", num_nodes, edge_index_.device)
    _index_range("edge_index", edge_index_, n, "num_nodes")
    return n, n


def csr(indptr: torch.Tensor, indices: torch.Tensor, num_src_nodes: Optional[int]) -> None:
    integer_tensor("indptr", indptr)
    integer_tensor("indices", indices)
    if indptr.dim() != 1 or indptr.numel() < 1:
        raise ValueError(f"indptr must be 1-D with at least one entry, got {list(indptr.shape)}")
    if indices.dim() != 1:
        raise ValueError(f"indices must be 1-D, got {list(indices.shape)}")
    if indptr.device != indices.device:
        raise ValueError(f"indptr is on {indptr.device} but indices is on {indices.device}")
    if int(indptr[0]) != 0 or int(indptr[-1]) != indices.numel():
        raise ValueError(f"indptr must start at 0 and end at len(indices)={indices.numel()}, "
                         f"got {int(indptr[0])} and {int(indptr[-1])}")
    if indptr.numel() > 1 and bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError("indptr must be non-decreasing")
    if num_src_nodes is not None:
        _index_range("indices", indices, node_count("num_src_nodes", num_src_nodes, indices.device),
                     "num_src_nodes")
    elif indices.numel() and int(indices.min()) < 0:
        raise ValueError(f"indices has a negative index ({int(indices.min())})")


def node_features(name: str, value, num_rows: int, device: torch.device, rows_name: str,
                  dim: Optional[int] = None) -> None:
    """Per-call check of a feature tensor: dtype, device and leading size (no sync)."""
    float_tensor(name, value)
    if dim is not None and value.dim() != dim:
        raise ValueError(f"{name} must be {dim}-D, got shape {list(value.shape)}")
    if value.device != device:
        raise ValueError(f"{name} is on {value.device} but the graph is on {device}")
    if value.dim() == 0 or value.size(0) != num_rows:
        raise ValueError(f"{name} must have {num_rows} rows ({rows_name}), got shape "
                         f"{list(value.shape)}")


def edge_values(name: str, value, num_edges: int, device: torch.device) -> None:
    float_tensor(name, value)
    if value.device != device:
        raise ValueError(f"{name} is on {value.device} but the graph is on {device}")
    if value.dim() != 1 or value.numel() != num_edges:
        raise ValueError(f"{name} must have shape [{num_edges}] (one value per edge), got "
                         f"{list(value.shape)}")
