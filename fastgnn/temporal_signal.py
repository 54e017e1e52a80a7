"""Sliding windows of snapshots from a dynamic-graph signal: PyTorch Geometric Temporal's
``DynamicGraphTemporalSignal`` shape, or a plain list of ``edge_index`` tensors.

``torch_geometric_temporal`` itself is not a dependency (its releases require
``torch_sparse`` and ``torch_scatter``, which have no builds for current torch): any object
with its attributes is accepted, duck-typed: ``edge_indices`` (a sequence of ``[2, E_t]``
NumPy arrays or tensors), ``edge_weights``, ``features`` and ``targets`` (sequences of the
same length, entries may be None).
"""
from __future__ import annotations

from typing import Iterator, List, NamedTuple, Optional, Sequence

import numpy as np
import torch

from fastgnn import _validate
from fastgnn.snapshots import MAX_SNAPSHOTS, SnapshotGraph


class SnapshotWindow(NamedTuple):
    """One window: its :class:`SnapshotGraph`, the node features of its snapshots stacked
    ``[T, N, F]`` (None without features), the target of its last snapshot (None without
    targets) and that snapshot's index in the signal."""

    graph: SnapshotGraph
    features: Optional[torch.Tensor]
    target: Optional[torch.Tensor]
    end: int


def _as_tensor(value, name: str, dtype=None) -> Optional[torch.Tensor]:
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a NumPy array or a torch.Tensor, got "
                        f"{type(value).__name__}")
    return value if dtype is None else value.to(dtype)


def _sequence(signal, name: str, count: int) -> Optional[list]:
    values = getattr(signal, name, None)
    if values is None:
        return None
    if len(values) != count:
        raise ValueError(f"signal.{name} has {len(values)} entries, but signal.edge_indices has "
                         f"{count}")
    return list(values)


def _unweighted(weights: Optional[list], ignore: bool) -> None:
    for t, w in enumerate(weights or ()):
        w = _as_tensor(w, f"signal.edge_weights[{t}]")
        if w is not None and not ignore and not bool((w == 1).all()):
            raise ValueError(
                f"signal.edge_weights[{t}] is not all ones: SnapshotGraph aggregates unweighted "
                "edges (with each snapshot's degree norm); pass ignore_edge_weights=True to drop "
                "the weights")


def snapshot_windows(signal, window: int, *, num_nodes: Optional[int] = None, device=None,
                     ignore_edge_weights: bool = False) -> Iterator[SnapshotWindow]:
    """Every window of ``window`` consecutive snapshots of ``signal``, oldest first, each a
    :class:`SnapshotWindow`. Consecutive windows come from :meth:`SnapshotGraph.slide`, so
    only each new snapshot's difference crosses to ``device``.

    ``signal``: a ``DynamicGraphTemporalSignal`` (or any object with its ``edge_indices``,
    ``edge_weights``, ``features`` and ``targets``), or a list or tuple of ``[2, E]``
    ``edge_index`` tensors. ``num_nodes`` defaults to the features' rows, else to one more
    than the largest node index of all snapshots. Edge weights other than all ones are an
    error unless ``ignore_edge_weights``.
    """
    if isinstance(signal, (list, tuple)):
        edge_lists: Sequence = signal
        weights = features = targets = None
    elif hasattr(signal, "edge_indices"):
        edge_lists = list(signal.edge_indices)
        weights = _sequence(signal, "edge_weights", len(edge_lists))
        features = _sequence(signal, "features", len(edge_lists))
        targets = _sequence(signal, "targets", len(edge_lists))
    else:
        raise TypeError("signal must be a list of edge_index tensors or have edge_indices "
                        f"(a DynamicGraphTemporalSignal), got {type(signal).__name__}")
    if isinstance(window, bool) or not isinstance(window, int) or \
            not 1 <= window <= min(MAX_SNAPSHOTS, len(edge_lists)):
        raise ValueError(f"window must be an int from 1 to {min(MAX_SNAPSHOTS, len(edge_lists))} "
                         f"(the signal has {len(edge_lists)} snapshots), got {window!r}")
    _unweighted(weights, ignore_edge_weights)
    edges: List[torch.Tensor] = []
    for t, edge_index in enumerate(edge_lists):
        edge_index = _as_tensor(edge_index, f"edge_indices[{t}]")
        if edge_index is None:
            raise ValueError(f"edge_indices[{t}] is None: every snapshot needs its edges")
        edges.append(edge_index.to(torch.int64))
    xs = None
    if features is not None and all(x is not None for x in features):
        xs = [_as_tensor(x, f"signal.features[{t}]", torch.float32) for t, x in
              enumerate(features)]
    if num_nodes is None:
        num_nodes = xs[0].shape[0] if xs else 1 + max(
            (int(e.max()) for e in edges if e.numel()), default=-1)
    device = _validate.device("device", device) if device is not None else edges[0].device
    if xs is not None:
        xs = torch.stack(xs).to(device)
    return _windows(edges, xs, targets, window, num_nodes, device)


def _windows(edges, xs, targets, window, num_nodes, device) -> Iterator[SnapshotWindow]:
    graph = None
    for end in range(window - 1, len(edges)):
        if graph is None:
            graph = SnapshotGraph(edges[:window], num_nodes, device=device)
        else:
            graph = graph.slide(edges[end])
        target = _as_tensor(targets[end], f"signal.targets[{end}]") if targets else None
        yield SnapshotWindow(graph, None if xs is None else xs[end - window + 1:end + 1],
                             None if target is None else target.to(device), end)
