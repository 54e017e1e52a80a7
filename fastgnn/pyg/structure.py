"""PyG structure inputs (edge_index, EdgeIndex, torch sparse adjacency, torch_sparse's
SparseTensor, fastgnn.Graph) turned into fastgnn Graphs, cached per input object.

A cache entry is keyed by the input's identity (a weak reference, so entries die with their
input and a recycled address never matches) and stamped with its ``_version``, shape and
device, so an in-place change or a replacement rebuilds the Graph. The cache is bounded.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import torch

from fastgnn import _library
from fastgnn._adapter import StructureCache, Unsupported
from fastgnn.graph import Graph, derived_tensors

try:  # PyG >= 2.5
    from torch_geometric import EdgeIndex
except ImportError:  # pragma: no cover
    EdgeIndex = None
# PyG's SparseTensor is torch_sparse's when that is installed, else a placeholder class that
# no input is an instance of.
from torch_geometric.typing import SparseTensor  # noqa: E402


def _eager(fn):
    """Keeps torch.compile out of structure handling (weak references, caches, host syncs):
    compiled layers call it as an opaque step. Eager calls skip the disabled wrapper, which
    costs more than the lookups it wraps."""
    compiler = getattr(torch, "compiler", None)
    disabled = (getattr(compiler, "disable", None) or torch._dynamo.disable)(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _library.is_compiling():
            return disabled(*args, **kwargs)
        return fn(*args, **kwargs)
    return call


# ---- identity-keyed cache ---------------------------------------------------------------------
def stamp(source) -> Tuple:
    """What must be unchanged for a value derived from ``source`` (a tensor, EdgeIndex,
    SparseTensor or fastgnn.Graph) to stay valid: versions, shapes and devices."""
    if isinstance(source, torch.Tensor):
        if source.is_inference():  # no version counter to watch: never reuse its entry
            return (object(),)
        parts = (source._version, source.shape, source.device)
        if type(source) is not torch.Tensor and EdgeIndex is not None and \
                isinstance(source, EdgeIndex):
            # In-place ops on the wrapper bump its counter, on its data the data's.
            parts += (source.as_tensor()._version,)
        return parts
    if isinstance(source, SparseTensor):  # its tensors can still be changed in place
        storage = source.storage
        return tuple((t._version, tuple(t.shape), t.device) if t is not None else None
                     for t in (storage.rowptr(), storage.col(), storage.value()))
    return ()  # a fastgnn.Graph is immutable


cache = StructureCache(stamp=stamp)


@_eager
def lookup(source, options: Tuple, build: Callable[[], object]):
    """``cache.get`` for callers outside this module (a layer's own lookups)."""
    return cache.get(source, options, build)


def is_edge_tensor(value) -> bool:
    """A plain dense tensor (not a subclass such as EdgeIndex, not a sparse layout)."""
    return type(value) is torch.Tensor and value.layout == torch.strided


# ---- input formats ----------------------------------------------------------------------------
_INDEX_DTYPES = (torch.int32, torch.int64)


@dataclass
class Edges:
    """A structure input as an edge list: ``index`` ([2, E], sources then destinations) in the
    order per-edge inputs (edge weights, edge features) follow, and the sparse values if any."""
    source: object                 # the object the cache is keyed on
    index: Optional[torch.Tensor]  # None for a Graph used as it is
    values: Optional[torch.Tensor]
    graph: Optional[Graph] = None  # when the input was a fastgnn.Graph
    is_sparse: bool = False

    def check_per_edge(self, name: str, values: torch.Tensor) -> None:
        """A per-edge input (edge weights, edge features): one row per edge, on the edges'
        device. Checked before any indexing, where a wrong size would be a device assert."""
        count = self.graph.num_edges if self.index is None else self.index.size(1)
        device = self.graph.device if self.index is None else self.index.device
        if not isinstance(values, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(values).__name__}")
        if values.dim() == 0 or values.size(0) != count:
            raise ValueError(f"{name} must have one row per edge ({count}), got shape "
                             f"{list(values.shape)}")
        if values.device != device:
            raise ValueError(f"{name} is on {values.device} but the edges are on {device}")


def is_sparse_tensor(value) -> bool:
    """A torch sparse adjacency or a torch_sparse SparseTensor."""
    return isinstance(value, SparseTensor) or (isinstance(value, torch.Tensor) and value.layout in (
        torch.sparse_coo, torch.sparse_csr, torch.sparse_csc))


def _sparse_edges(adj_t) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Edges and values (None: all ones) of a transposed adjacency (row = destination, column =
    source)."""
    def build():
        if isinstance(adj_t, SparseTensor):
            dst, src, _ = adj_t.coo()
            return torch.stack([src, dst])
        if adj_t.layout == torch.sparse_coo:
            coalesced = adj_t.coalesce()
            dst, src = coalesced.indices()
            return torch.stack([src, dst])
        if adj_t.layout == torch.sparse_csr:
            ptr, src = adj_t.crow_indices(), adj_t.col_indices()
            dst = torch.repeat_interleave(torch.arange(adj_t.size(0), device=ptr.device),
                                          (ptr[1:] - ptr[:-1]).to(torch.int64))
            return torch.stack([src.to(torch.int64), dst])
        raise Unsupported(f"sparse adjacency layout {adj_t.layout}")
    index = cache.get(adj_t, ("sparse-edges",), build)
    # Values are re-read on every call: they may carry a gradient.
    if isinstance(adj_t, SparseTensor):
        return index, adj_t.storage.value()
    if adj_t.layout == torch.sparse_coo:
        return index, adj_t.coalesce().values()
    return index, adj_t.values()


def _as_edges(structure) -> Edges:
    """Normalises a layer's structure argument; raises Unsupported for other formats."""
    if is_edge_tensor(structure) and structure.dim() == 2 and structure.size(0) == 2 and \
            structure.dtype in _INDEX_DTYPES:  # the common case, checked first
        return Edges(structure, structure, None)
    if isinstance(structure, Graph):
        return Edges(structure, None, None, graph=structure)
    if is_sparse_tensor(structure):
        if not isinstance(structure, SparseTensor) and structure.layout == torch.sparse_csc:
            raise Unsupported("sparse CSC adjacency")
        index, values = _sparse_edges(structure)
        return Edges(structure, index, values, is_sparse=True)
    if isinstance(structure, torch.Tensor):
        index = structure
        if EdgeIndex is not None and isinstance(structure, EdgeIndex):
            index = structure.as_tensor()
        if index.dim() != 2 or index.size(0) != 2 or index.dtype not in _INDEX_DTYPES:
            raise Unsupported(f"edge_index of shape {list(index.shape)} and dtype {index.dtype}")
        return Edges(structure, index, None)
    raise Unsupported(f"structure of type {type(structure).__name__}")


as_edges = _eager(_as_edges)


def sparse_size(structure) -> Tuple[int, int]:
    """(num_src, num_dst) of a transposed sparse adjacency."""
    return int(structure.size(1)), int(structure.size(0))


def node_counts(edges: Edges, x_src: torch.Tensor, x_dst: Optional[torch.Tensor],
                size=None) -> Tuple[int, int]:
    """(num_src, num_dst) as PyG's propagate infers them: ``size``, then the features, then a
    sparse adjacency's shape or the Graph's sizes. Features must have the rows ``size`` gives
    (a ValueError, as PyG raises): the kernels index them by it."""
    if size is not None:
        for slot, x, side in ((0, x_src, "source"), (1, x_dst, "destination")):
            if x is not None and size[slot] is not None and x.size(0) != size[slot]:
                raise ValueError(f"size[{slot}] is {size[slot]} but the {side} features have "
                                 f"{x.size(0)} rows")
    if size is None and x_src is not None and x_dst is not None and edges.graph is None \
            and not edges.is_sparse:  # an edge list: the features say it all
        return x_src.shape[0], x_dst.shape[0]
    known = [None, None] if size is None else list(size)
    for slot, x in ((0, x_src), (1, x_dst)):
        if known[slot] is None and x is not None:
            known[slot] = x.size(0)
    structural = None
    if edges.is_sparse:
        structural = sparse_size(edges.source)
    elif edges.graph is not None:
        structural = (edges.graph.num_src_nodes, edges.graph.num_dst_nodes)
    if structural is not None:
        known = [s if k is None else k for k, s in zip(known, structural)]
    if known[1] is None:
        raise Unsupported("destination features None without size")
    return int(known[0]), int(known[1])


# ---- derived structures -----------------------------------------------------------------------
@dataclass
class Structure:
    """A Graph ready for the ops plus how per-edge inputs reach it.

    Plain structures use the input's edges as they are: per-edge inputs go to the ops in the
    user's order. Rebuilt ones list the user's edges (a Graph's in its CSR order), minus its
    self-loops when ``kept`` is set, then ``num_loops`` new self-loops; ``order`` gathers a
    tensor in that list order into the Graph's CSR order, which is also its input order.
    ``memo`` holds values derived once per structure (e.g. GCN coefficients).
    """
    graph: Graph
    rebuilt: bool = False
    order: Optional[torch.Tensor] = None
    kept: Optional[torch.Tensor] = None        # user edges that are not self-loops
    kept_dst: Optional[torch.Tensor] = None    # their destinations
    loop_at: Optional[torch.Tensor] = None     # positions of the user's self-loops
    loop_node: Optional[torch.Tensor] = None   # and their nodes
    num_loops: int = 0
    memo: Dict = field(default_factory=dict)

    def per_edge(self, edges: Edges, name: str, values: Optional[torch.Tensor],
                 extend: Optional[Callable[[torch.Tensor], torch.Tensor]] = None):
        """A per-edge input (the argument ``name``) given in the user's edge order, in the
        order the Graph takes. ``extend`` maps user-ordered values to the rebuilt edge list
        (drops, adds loops)."""
        if values is None:
            return None
        edges.check_per_edge(name, values)
        if not self.rebuilt:
            return values
        if edges.graph is not None:
            values = edges.graph.edge_values_to_csr(values)
        if extend is not None:
            values = extend(values)
        return values if self.order is None else values[self.order]

    def per_edge_backward(self, edges: Edges, grad: torch.Tensor,
                          unextend: Optional[Callable[[torch.Tensor], torch.Tensor]] = None):
        """The gradient of :meth:`per_edge` in its values given theirs: ``grad`` back in the
        user's edge order (``unextend``: the gradient of its ``extend``)."""
        if not self.rebuilt:
            return grad
        if self.order is not None:
            grad = grad.new_empty(grad.shape).index_put_((self.order,), grad)
        if unextend is not None:
            grad = unextend(grad)
        return grad if edges.graph is None else edges.graph.edge_values_from_csr(grad)


def _plain(edges: Edges, num_src: int, num_dst: int) -> Structure:
    if edges.graph is not None:
        return Structure(edges.graph)

    def build():
        return Structure(Graph.from_edge_index(edges.index, num_src_nodes=num_src,
                                               num_dst_nodes=num_dst))
    return cache.get(edges.source, ("plain", num_src, num_dst), build)


def _origin(edges: Edges, num_src: int, num_dst: int) -> Optional[Graph]:
    """The Graph ``edges`` come from: the input Graph, or the one an edge_index was registered
    with (a sampled batch's), whose kind a structure rebuilt from it keeps."""
    if edges.graph is not None:
        return edges.graph
    registered = cache.peek(edges.source, ("plain", num_src, num_dst))
    return registered.graph if registered is not None else None


def _rebuilt(edges: Edges, num_src: int, num_dst: int, loops: Optional[str],
             num_loops: int) -> Structure:
    """Self-loops on nodes ``0..num_loops-1`` appended after the user's edges: ``append``
    keeps existing loops (PyG's add_self_loops), ``replace`` drops them first
    (remove_self_loops + add_self_loops, add_remaining_self_loops)."""
    graph = edges.graph

    def build():
        index = graph.edge_index() if graph is not None else edges.index.to(torch.int64)
        kept = kept_dst = loop_at = loop_node = None
        if loops == "replace":
            is_loop = index[0] == index[1]
            kept = (~is_loop).nonzero().view(-1)
            loop_at = is_loop.nonzero().view(-1)
            loop_node = index[0, loop_at]
            index = index[:, kept]
            kept_dst = index[1]
        if loops is not None:
            new_loops = torch.arange(num_loops, device=index.device).repeat(2, 1)
            index = torch.cat([index, new_loops], 1)
        built = Graph.from_edge_index(index, num_src_nodes=num_src, num_dst_nodes=num_dst)
        origin = _origin(edges, num_src, num_dst)
        in_csr_order = (origin if origin is not None else built)._derive(
            built.rowptr, built.col, num_src, ("loops", loops))
        return Structure(in_csr_order, True, built.edge_perm, kept, kept_dst, loop_at, loop_node,
                         num_loops if loops is not None else 0)
    return cache.get(edges.source, ("rebuilt", loops, num_src, num_dst, num_loops), build)


def _resolve(edges: Edges, num_src: int, num_dst: int, loops: Optional[str] = None,
            num_loops: int = 0, rebuild: bool = False) -> Structure:
    """The cached Structure of ``edges`` on ``num_src`` sources and ``num_dst`` destinations.

    ``loops``: None, "append" or "replace" (see :func:`_rebuilt`); ``rebuild`` asks for a
    rebuilt structure even without loops (per-edge values then follow the CSR order).
    """
    if edges.graph is not None and (edges.graph.num_src_nodes, edges.graph.num_dst_nodes) != (
            num_src, num_dst):
        raise ValueError(f"the fastgnn.Graph has {edges.graph.num_src_nodes} sources and "
                         f"{edges.graph.num_dst_nodes} destinations but the features give "
                         f"{num_src} and {num_dst}")
    if loops is None and not rebuild:
        return _plain(edges, num_src, num_dst)
    return _rebuilt(edges, num_src, num_dst, loops, num_loops)


resolve = _eager(_resolve)


def _degrees(structure: Structure, weight: torch.Tensor, num_nodes: int):
    """(row, col, weighted in-degrees, their inverse square roots with zero for zero)."""
    g = structure.graph
    row, col = g.row.to(torch.int64), g.col.to(torch.int64)
    deg = _scatter_add(weight, row, num_nodes)
    inv_sqrt = deg.pow(-0.5)
    return row, col, deg, inv_sqrt.masked_fill(inv_sqrt == float("inf"), 0.0)


def _scatter_add(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    return values.new_zeros(size).index_add_(0, index, values)


def symmetric_values(structure: Structure, weight: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``w_ji / sqrt(deg_j deg_i)`` with in-degrees summed on the target side, as gcn_norm does
    for flow source_to_target; zero degrees give zero coefficients."""
    row, col, _, inv_sqrt = _degrees(structure, weight, num_nodes)
    return inv_sqrt[col] * weight * inv_sqrt[row]


def _symmetric_values_backward(structure: Structure, weight: torch.Tensor, grad: torch.Tensor,
                               num_nodes: int) -> torch.Tensor:
    """The gradient of :func:`symmetric_values` in ``weight`` (autograd's, step by step)."""
    row, col, deg, inv_sqrt = _degrees(structure, weight, num_nodes)
    at_col, at_row = inv_sqrt[col], inv_sqrt[row]
    grad_left = grad * at_row  # of inv_sqrt[col] * weight
    grad_inv_sqrt = _scatter_add(grad_left * weight, col, num_nodes) + \
        _scatter_add(grad * (at_col * weight), row, num_nodes)
    grad_inv_sqrt = grad_inv_sqrt.masked_fill(deg == 0, 0.0)  # where deg^-0.5 was inf
    grad_deg = grad_inv_sqrt * (-0.5 * deg.pow(-1.5))
    return grad_left * at_col + grad_deg.index_select(0, row)


def gcn_unit_values(structure: Structure, num_nodes: int, dtype: torch.dtype) -> torch.Tensor:
    """gcn_norm's coefficients without edge weights (weight 1 everywhere, loops included),
    computed in ``dtype`` once per structure."""
    key = ("gcn", dtype)
    if key not in structure.memo:
        graph = structure.graph
        with derived_tensors():
            ones = torch.ones(graph.num_edges, dtype=dtype, device=graph.device)
            structure.memo[key] = symmetric_values(structure, ones, num_nodes)
    return structure.memo[key]


def _loop_weights(structure: Structure, weight: torch.Tensor, fill: float) -> torch.Tensor:
    """add_remaining_self_loops on weights: the user's loops keep theirs, others get ``fill``."""
    loops = weight.new_full((structure.num_loops,), fill)
    loops[structure.loop_node] = weight[structure.loop_at]
    return torch.cat([weight[structure.kept], loops])


def _loop_weights_backward(structure: Structure, grad: torch.Tensor,
                           num_edges: int) -> torch.Tensor:
    """The gradient of :func:`_loop_weights` in the user's ``num_edges`` weights."""
    num_kept = structure.kept.numel()
    grad_loops = grad[num_kept:][structure.loop_node]
    out = _scatter_add(grad[:num_kept], structure.kept, num_edges)
    return out.index_put_((structure.loop_at,), grad_loops, accumulate=True)


def _extended_weights(structure: Structure, edges: Edges, edge_weight: torch.Tensor,
                      add_self_loops: bool, loop_weight: float) -> torch.Tensor:
    """The weights on GCNConv's ``structure``: the user's, with gcn_norm's self-loops."""
    extend = (lambda w: _loop_weights(structure, w, loop_weight)) if add_self_loops else None
    return structure.per_edge(edges, "edge_weight", edge_weight, extend)


def gcn_weighted_values(structure: Structure, edges: Edges, edge_weight: torch.Tensor,
                        num_nodes: int, add_self_loops: bool, loop_weight: float) -> torch.Tensor:
    """gcn_norm's coefficients with edge weights (given in ``edges``' order) on GCNConv's
    ``structure``: added self-loops weigh ``loop_weight`` (2 with ``improved``), the user's keep
    their own. Differentiable in ``edge_weight``; eager and compiled layers compute them per
    call."""
    weight = _extended_weights(structure, edges, edge_weight, add_self_loops, loop_weight)
    return symmetric_values(structure, weight, num_nodes)


def gcn_weighted_values_backward(structure: Structure, edges: Edges, edge_weight: torch.Tensor,
                                 grad: torch.Tensor, num_nodes: int, add_self_loops: bool,
                                 loop_weight: float) -> torch.Tensor:
    """The gradient of :func:`gcn_weighted_values` in ``edge_weight`` given the values' ``grad``:
    autograd's formula written out, for the compiled layers' backward op, whose kernel may run
    where autograd is off (under a dispatch mode)."""
    weight = _extended_weights(structure, edges, edge_weight, add_self_loops, loop_weight)
    grad = _symmetric_values_backward(structure, weight, grad, num_nodes)
    unextend = (lambda g: _loop_weights_backward(structure, g, edge_weight.shape[0])) \
        if add_self_loops else None
    return structure.per_edge_backward(edges, grad, unextend)


def _gcn_structure(edges: Edges, num_nodes: int, add_self_loops: bool) -> Structure:
    """GCNConv's structure: rebuilt (the coefficients follow its CSR order), its self-loops
    replaced by one per node with ``add_self_loops``."""
    return _resolve(edges, num_nodes, num_nodes, "replace" if add_self_loops else None,
                    num_nodes, rebuild=True)


gcn_structure = _eager(_gcn_structure)


@_eager
def gcn_normalised(edge_index: torch.Tensor, num_nodes: int, add_self_loops: bool,
                   dtype: torch.dtype) -> Tuple[Structure, torch.Tensor]:
    """GCNConv's structure and coefficients (gcn_norm, no edge weights) of a plain edge_index
    in one cache lookup: the common training call, eager and compiled."""
    def build():
        structure = _gcn_structure(_as_edges(edge_index), num_nodes, add_self_loops)
        return structure, gcn_unit_values(structure, num_nodes, dtype)
    return cache.get(edge_index, ("gcn-normalised", num_nodes, add_self_loops, dtype), build)


@_eager
def edges_and_structure(structure, x_src: torch.Tensor, x_dst: Optional[torch.Tensor],
                        size=None) -> Tuple[Edges, Structure]:
    """:func:`as_edges`, :func:`node_counts` and the plain :func:`resolve` in one step (one
    check for torch.compile instead of two): layers without self-loops."""
    edges = _as_edges(structure)
    return edges, _resolve(edges, *node_counts(edges, x_src, x_dst, size))
