"""Graph reordering: relabel nodes so that neighbours get nearby ids.

An SpMM or attention kernel gathers its source rows by id; when the rows processed together
share sources with nearby ids, those gathers hit cache instead of DRAM. ``reorder`` computes a
node order, applies it to a ``fastgnn.Graph``, a PyG ``Data`` or an ``edge_index``, and
returns a :class:`NodeOrder` that moves node-aligned tensors into the new order and back.

Methods: ``"rcm"`` (reverse Cuthill-McKee, native), ``"degree"`` (falling in-degree, hubs
first, ties by id) and ``"metis"`` (METIS partitions through ``pymetis``, nodes grouped by
part). Orders are computed on the CPU, once per dataset, and are deterministic.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from fastgnn import _library, _native, _validate
from fastgnn.graph import Graph

METHODS = ("rcm", "degree", "metis")


class NodeOrder:
    """A node permutation: ``perm[new_id] = old_id`` and its inverse ``rank[old_id] = new_id``."""

    def __init__(self, perm: torch.Tensor):
        self.perm = perm
        self.rank = torch.empty_like(perm)
        self.rank[perm] = torch.arange(perm.numel(), device=perm.device)

    def __len__(self) -> int:
        return self.perm.numel()

    def _on(self, index: torch.Tensor, device: torch.device) -> torch.Tensor:
        return index if index.device == device else index.to(device)

    def permute(self, x: torch.Tensor) -> torch.Tensor:
        """Node-aligned ``x`` (first dimension = nodes) from the caller's order to the new one."""
        self._check_rows("x", x)
        return x[self._on(self.perm, x.device)]

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        """Node-aligned ``x`` from the new order back to the caller's order."""
        self._check_rows("x", x)
        return x[self._on(self.rank, x.device)]

    def relabel(self, edge_index: torch.Tensor) -> torch.Tensor:
        """``edge_index`` with the caller's node ids replaced by the new ones (same edge order)."""
        return self._on(self.rank, edge_index.device)[edge_index]

    def _check_rows(self, name: str, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] != len(self):
            shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must have one row per node ({len(self)}), got {shape}")

    def __repr__(self) -> str:
        return f"NodeOrder(num_nodes={len(self)})"


def _symmetric_csr(edge_index: torch.Tensor, num_nodes: int) -> Graph:
    """The undirected view (both directions, CPU) whose CSR rows are adjacency lists."""
    ei = edge_index.to("cpu", torch.int64)
    return Graph.from_edge_index(torch.cat([ei, ei.flip(0)], dim=1), num_nodes=num_nodes,
                                 cache_transpose=False)


if _native.has_op("reorder_rcm"):
    _library.register_fake("reorder_rcm",
                           lambda rowptr, col: rowptr.new_empty(rowptr.shape[0] - 1,
                                                                dtype=torch.int64))


def _rcm(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    if not _native.has_op("reorder_rcm"):
        raise RuntimeError("fastgnn.reorder(method='rcm') needs the compiled extension: "
                           f"{_native.load_error or 'fastgnn._C has no reorder_rcm'}")
    g = _symmetric_csr(edge_index, num_nodes)
    return _library.op("reorder_rcm")(g.rowptr, g.col)


def _degree(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    degree = torch.bincount(edge_index[1].to("cpu", torch.int64), minlength=num_nodes)
    return torch.sort(degree, descending=True, stable=True).indices


def _metis(edge_index: torch.Tensor, num_nodes: int, num_parts: Optional[int]) -> torch.Tensor:
    try:
        import pymetis
    except ImportError as exc:
        raise ImportError("fastgnn.reorder(method='metis') needs pymetis >= 2025.2: "
                          "pip install 'pymetis>=2025.2'") from exc
    if num_parts is None:  # parts of about 4096 nodes: a few hundred KB of features each
        num_parts = max(2, -(-num_nodes // 4096))
    ei = edge_index.to("cpu", torch.int64)
    ei = ei[:, ei[0] != ei[1]]  # METIS takes simple graphs: no loops, no repeated edges
    g = _symmetric_csr(ei, num_nodes)
    row = g.row.to(torch.int64)
    keep = torch.ones(g.num_edges, dtype=torch.bool)
    keep[1:] = (g.col[1:] != g.col[:-1]) | (row[1:] != row[:-1])
    degree = torch.bincount(row[keep], minlength=num_nodes)
    xadj = torch.cat([torch.zeros(1, dtype=torch.int64), degree.cumsum(0)])
    adjacency = pymetis.CSRAdjacency(adj_starts=xadj.numpy(),
                                     adjacent=g.col[keep].to(torch.int64).numpy())
    _, membership = pymetis.part_graph(num_parts, adjacency)
    parts = torch.as_tensor(membership, dtype=torch.int64)
    return torch.sort(parts, stable=True).indices


def node_order(edge_index: torch.Tensor, num_nodes: int, method: str = "rcm", *,
               num_parts: Optional[int] = None) -> NodeOrder:
    """The :class:`NodeOrder` of ``method`` for a graph on ``num_nodes`` nodes."""
    _validate.edge_index(edge_index)
    _validate.choice("method", method, METHODS)
    if num_parts is not None and (isinstance(num_parts, bool) or not isinstance(num_parts, int)
                                  or num_parts < 1):
        raise ValueError(f"num_parts must be a positive int, got {num_parts!r}")
    if method == "rcm":
        perm = _rcm(edge_index, num_nodes)
    elif method == "degree":
        perm = _degree(edge_index, num_nodes)
    else:
        perm = _metis(edge_index, num_nodes, num_parts)
    return NodeOrder(perm.to(edge_index.device))


def _input_order_edges(g: Graph) -> torch.Tensor:
    """The graph's edges in the order it was built from, so per-edge values stay aligned."""
    csr_edges = g.edge_index()
    if g.edge_perm is None:
        return csr_edges
    edges = torch.empty_like(csr_edges)
    edges[:, g.edge_perm.to(torch.int64)] = csr_edges
    return edges


def reorder(graph_or_data, method: str = "rcm", *, num_parts: Optional[int] = None,
            num_nodes: Optional[int] = None) -> Tuple[object, NodeOrder]:
    """Reorders the nodes of a graph; returns ``(reordered, order)``.

    ``graph_or_data`` is a homogeneous :class:`fastgnn.Graph` (a new Graph comes back; its
    per-edge values keep the old edge order), a PyG ``Data`` (a copy with ``edge_index``
    relabelled and every node-level tensor permuted; edge-level tensors keep their order), or
    an ``edge_index`` tensor (relabelled; give ``num_nodes`` unless it is the largest id + 1).
    Move other node-aligned tensors with ``order.permute(x)`` and results back to the caller's
    order with ``order.restore(out)``.
    """
    if isinstance(graph_or_data, Graph):
        g = graph_or_data
        if g.is_bipartite:
            raise ValueError("reorder needs a homogeneous graph; got a bipartite Graph "
                             f"({g.num_src_nodes} sources, {g.num_dst_nodes} destinations)")
        edges = _input_order_edges(g)
        order = node_order(edges, g.num_dst_nodes, method, num_parts=num_parts)
        return Graph.from_edge_index(order.relabel(edges), num_nodes=g.num_dst_nodes,
                                     cache_transpose=g.cache_transpose), order
    if isinstance(graph_or_data, torch.Tensor):
        _validate.edge_index(graph_or_data)
        n = num_nodes if num_nodes is not None else (
            int(graph_or_data.max()) + 1 if graph_or_data.numel() else 0)
        order = node_order(graph_or_data, n, method, num_parts=num_parts)
        return order.relabel(graph_or_data), order
    if hasattr(graph_or_data, "edge_index") and hasattr(graph_or_data, "is_node_attr"):
        data = graph_or_data
        order = node_order(data.edge_index, data.num_nodes, method, num_parts=num_parts)
        out = data.clone()
        for key, value in data.items():
            if key == "edge_index":
                out.edge_index = order.relabel(value)
            elif isinstance(value, torch.Tensor) and data.is_node_attr(key) \
                    and value.dim() > 0 and value.shape[0] == data.num_nodes:
                out[key] = order.permute(value)
        return out, order
    raise TypeError("graph_or_data must be a fastgnn.Graph, a PyG Data or an edge_index "
                    f"tensor, got {type(graph_or_data).__name__}")
