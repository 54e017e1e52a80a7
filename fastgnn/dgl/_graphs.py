"""The fastgnn.Graph of a DGLGraph or block, built once per structure.

Entries are keyed by the identity of the DGLGraph's structure object (``graph._graph``, the
immutable index that ``local_scope``/``local_var`` copies share and that ``add_edges``,
``.to(device)``, ``.int()`` or a new block replace) and held through a weak reference to it: an
entry dies with its graph, nothing here keeps a graph alive, and a recycled address never
matches. No ``data_ptr`` is involved.
"""
from __future__ import annotations

import threading
import weakref
from typing import Dict, Tuple

import torch

from fastgnn.graph import Graph


class Unsupported(Exception):
    """An input the fused path does not handle; the message names the option."""


class GraphCache:
    """``{id(structure): (weak reference, fastgnn.Graph)}``; entries leave with the structure."""

    def __init__(self):
        self.builds = 0  # how many Graphs were built (tests watch it)
        self._entries: Dict[int, Tuple[weakref.ref, Graph]] = {}
        self._lock = threading.Lock()

    def get(self, dgl_graph) -> Graph:
        index = dgl_graph._graph
        key = id(index)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is index:
            return entry[1]
        graph = Graph.from_dgl(dgl_graph)
        ref = weakref.ref(index, lambda dead, key=key: self._forget(key, dead))
        with self._lock:
            self.builds += 1
            self._entries[key] = (ref, graph)
        return graph

    def _forget(self, key: int, dead_ref) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is dead_ref:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


cache = GraphCache()


def fastgnn_graph(dgl_graph) -> Graph:
    """The cached :class:`fastgnn.Graph` of a DGLGraph, block (MFG) or bipartite graph with one
    edge type; edge ids follow DGL's (``edge_perm`` maps CSR positions to them).

    Raises :class:`Unsupported` for graphs with several edge types."""
    if len(dgl_graph.canonical_etypes) != 1:
        raise Unsupported("a heterograph with several edge types")
    return cache.get(dgl_graph)


def to_edge_order(graph: Graph, csr_values: torch.Tensor) -> torch.Tensor:
    """Per-edge values in CSR order put back in DGL's edge-id order (differentiable)."""
    if graph.edge_perm is None:
        return csr_values
    return csr_values[graph.cached("inverse_edge_perm", lambda: torch.argsort(graph.edge_perm))]


def endpoints(graph: Graph) -> Tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) of every edge in DGL's edge-id order, int64, cached."""
    return graph.cached("endpoints", lambda: (to_edge_order(graph, graph.col.to(torch.int64)),
                                              to_edge_order(graph, graph.row.to(torch.int64))))
