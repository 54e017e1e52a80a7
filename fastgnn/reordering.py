"""Graph reordering: relabel nodes so that neighbours get nearby ids.

An SpMM or attention kernel gathers its source rows by id; when the rows processed together
share sources with nearby ids, those gathers hit cache instead of DRAM. ``reorder`` computes a
node order, applies it to a ``fastgnn.Graph``, a PyG ``Data`` or an ``edge_index``, and
returns a :class:`NodeOrder` that moves node-aligned tensors into the new order and back.

Methods: ``"rcm"`` (reverse Cuthill-McKee, native), ``"degree"`` (falling in-degree, hubs
first, ties by id) and ``"metis"`` (METIS partitions through ``pymetis``, nodes grouped by
part). Orders are computed on the CPU, once per dataset, and are deterministic.

The opt-in Graph flag (``Graph.reordered(method)``, and ``fastgnn.enable(model,
reorder=method)`` for enabled layers) reorders inside the ops instead: :func:`in_caller_order`
runs an op of a flagged graph on its relabelled copy (:func:`internal`), moving node-aligned
inputs into the copy's order and the output back, so the caller never sees the new ids.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
from typing import Optional, Tuple

import torch

from fastgnn import _adapter, _library, _native, _validate
from fastgnn.cbsr import CBSR
from fastgnn.graph import Graph

METHODS = ("rcm", "degree", "metis")
_METIS_MISSING = "needs pymetis >= 2025.2: pip install 'pymetis>=2025.2'"


def check_method(name: str, method) -> None:
    """A ValueError naming ``name`` unless ``method`` is one of :data:`METHODS`; an
    ImportError for "metis" without pymetis (raised when asked, not at the first op)."""
    _validate.choice(name, method, METHODS)
    if method == "metis" and importlib.util.find_spec("pymetis") is None:
        raise ImportError(f"{name}='metis' {_METIS_MISSING}")


class _RowGather(torch.autograd.Function):
    """``x.index_select(0, index)`` for a permutation ``index``: its gradient is the gather by
    the ``inverse`` permutation (autograd's own would scatter-add into a zeroed tensor)."""

    @staticmethod
    def forward(ctx, x, index, inverse):
        ctx.save_for_backward(index, inverse)
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):
        index, inverse = ctx.saved_tensors
        return _RowGather.apply(grad, inverse, index), None, None


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
        return _RowGather.apply(x, self._on(self.perm, x.device), self._on(self.rank, x.device))

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        """Node-aligned ``x`` from the new order back to the caller's order."""
        self._check_rows("x", x)
        return _RowGather.apply(x, self._on(self.rank, x.device), self._on(self.perm, x.device))

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
        raise ImportError(f"fastgnn.reorder(method='metis') {_METIS_MISSING}") from exc
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
    # num_nodes bounds the ids (the degree order's bincount would silently widen the order
    # to the largest id) and must be allocatable (one host sync: a one-time reordering)
    num_nodes = _validate.node_counts(edge_index, num_nodes, None, None)[0]
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


# ---- the opt-in Graph flag: ops run on a relabelled copy, in the caller's order ----------------
def internal(g: Graph) -> Tuple[Graph, NodeOrder]:
    """The relabelled copy of a graph whose ``reordering`` is set, and its order, built once
    and cached on it. The copy lists its edges in ``g``'s input edge order, so per-edge
    tensors (edge weights, edge features, dropout masks) need no moving."""
    return g.cached("internal order", lambda: reorder(g, g.reordering))


def _warn_unreordered(method: str, case: str, op_name: str) -> None:
    owner = _adapter.layer_settings.owner or f"fastgnn.ops.{op_name}"
    _adapter.warn_fallback(owner, f"reorder={method!r} {case}", "the graph in its own node order")


def _flagged(g, op_name: str) -> Optional[Graph]:
    """The flagged graph an op call on ``g`` runs through: ``g`` itself when it has a
    reordering, ``g.reordered(method)`` inside an enabled layer's scope; None (unreordered)
    otherwise, and, with a warning, for the graphs the scope cannot reorder."""
    if not isinstance(g, Graph):
        return None  # the op raises its own TypeError
    if g.reordering is not None:
        return g
    method = _adapter.layer_settings.reorder
    if method is None:
        return None
    if g.is_bipartite or g.tuned_by_size:
        # a sampled mini-batch is a new graph every step: its order would cost more than it saves
        _warn_unreordered(method, "on a bipartite graph" if g.is_bipartite
                          else "on a sampled mini-batch graph", op_name)
        return None
    return g.reordered(method)


def warn_if_requested(g, case: str, op_name: str) -> None:
    """For an op that runs ``g`` in its own node order whatever its reordering (``case`` says
    why): warns once when a reordering was asked for."""
    if not isinstance(g, Graph):
        return
    method = g.reordering or _adapter.layer_settings.reorder
    if method is not None:
        _warn_unreordered(method, case, op_name)


def _to_internal(order: NodeOrder, value):
    """A node-aligned argument (tensor or CBSR with a row per node) in the copy's order; any
    other value as it is, for the op's own checks to judge."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == len(order):
        return order.permute(value)
    if isinstance(value, CBSR) and value.values.shape[0] == len(order):
        return CBSR(order.permute(value.values), order.permute(value.indices),
                    value.num_features, _trusted=True)
    return value


def in_caller_order(*node_args: str, restore: bool = True):
    """Decorates an op whose first argument is a Graph: on a flagged graph (see
    :func:`_flagged`) it runs on the relabelled copy, its arguments named in ``node_args``
    moved into the copy's node order and its output (``restore``: one row per node) moved
    back. The one place the flag acts; ops keep their per-edge arguments as they are."""
    def decorate(op):
        names = list(inspect.signature(op).parameters)[1:]
        positions = {names.index(name) for name in node_args}

        @functools.wraps(op)
        def call(g, *args, **kwargs):
            if getattr(g, "reordering", None) is None and not _adapter.open_reordering_scopes:
                return op(g, *args, **kwargs)  # every call's path: nothing asks to reorder
            flagged = _flagged(g, op.__name__)
            if flagged is None:
                return op(g, *args, **kwargs)
            copy, order = internal(flagged)
            copy.spmm_format = g.spmm_format  # the caller's graph holds the policies
            copy.attention_format = g.attention_format
            args = [_to_internal(order, value) if i in positions else value
                    for i, value in enumerate(args)]
            kwargs = {name: _to_internal(order, value) if name in node_args else value
                      for name, value in kwargs.items()}
            with _adapter.reordering_scope(None, ""):  # the copy is not reordered again inside
                out = op(copy, *args, **kwargs)
            return order.restore(out) if restore else out
        return call
    return decorate
