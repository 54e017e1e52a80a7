"""The fastgnn.Graph of a DGLGraph or block, built once per structure.

Entries are keyed by the identity of the DGLGraph's structure object (``graph._graph``, the
immutable index that ``local_scope``/``local_var`` copies share and that ``add_edges``,
``.to(device)``, ``.int()`` or a new block replace) and held through a weak reference to it: an
entry dies with its graph, nothing here keeps a graph alive, and a recycled address never
matches (``fastgnn._adapter.StructureCache``, the PyG adapter's cache). No ``data_ptr`` is
involved.
"""
from __future__ import annotations

from typing import Tuple

import torch

from fastgnn._adapter import StructureCache, Unsupported
from fastgnn.graph import Graph
from fastgnn.sampling.sampler import _SampledGraph


# The structure objects are immutable (DGL replaces them on change): no stamp needed.
cache = StructureCache()


def fastgnn_graph(dgl_graph) -> Graph:
    """The cached :class:`fastgnn.Graph` of a DGLGraph, block (MFG) or bipartite graph with one
    edge type; edge ids follow DGL's (``edge_perm`` maps CSR positions to them).

    Raises :class:`Unsupported` for graphs with several edge types."""
    if len(dgl_graph.canonical_etypes) != 1:
        raise Unsupported("a heterograph with several edge types")
    return cache.get(dgl_graph._graph, (), lambda: _from_dgl(dgl_graph))


def _from_dgl(dgl_graph) -> Graph:
    graph = Graph.from_dgl(dgl_graph)
    if dgl_graph.is_block:  # one mini-batch's (an MFG): tuned by size class, not once a batch
        return _SampledGraph.of(graph, ("dgl-block",))
    return graph


def to_edge_order(graph: Graph, csr_values: torch.Tensor) -> torch.Tensor:
    """Per-edge values in CSR order put back in DGL's edge-id order (differentiable)."""
    if graph.edge_perm is None:
        return csr_values
    return csr_values[graph.cached("inverse_edge_perm", lambda: torch.argsort(graph.edge_perm))]


def endpoints(graph: Graph) -> Tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) of every edge in DGL's edge-id order, int64, cached."""
    return graph.cached("endpoints", lambda: (to_edge_order(graph, graph.col.to(torch.int64)),
                                              to_edge_order(graph, graph.row.to(torch.int64))))
