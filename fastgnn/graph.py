"""fastgnn.Graph: one graph structure and everything derived from it.

The graph is stored destination-major (CSR over destinations, column = source), the layout
every kernel reads. Derived formats (transpose, degrees, normalised edge values, degree
buckets) are built lazily, cached on the instance and freed with it. Per-device native caches
(cuSPARSE descriptors, workspaces) are keyed by ``Graph.key``, a number never reused within a
process, and released when the Graph is collected.
"""
from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Optional, Tuple

import torch

from fastgnn import _validate

_INT32_MAX = 2**31 - 1
_KEY_MAX = 2**63 - 1  # the largest (destination, source) sort key from_edge_index may form
_keys = itertools.count(1)
_release_hooks: list = []  # called with a graph key when that graph is collected

NORMS = ("none", "left", "right", "both")
SPMM_FORMATS = ("auto", "csr", "wsb")


def add_release_hook(hook: Callable[[int], None]) -> None:
    """Registers ``hook(key)``, called when a Graph is freed (native caches drop its entries)."""
    _release_hooks.append(hook)  # atomic; a release running meanwhile may miss the new hook


class CacheKey:
    """A graph's name in the native caches, a number never reused in a process (``value``):
    held by its graph alone, it dies with it, even in a collected reference cycle, and the
    release hooks then drop that graph's entries. A tenth of ``weakref.finalize``'s host time,
    which every Graph of a sampled batch used to pay, building and freeing."""
    __slots__ = ("value",)

    def __init__(self):
        self.value = next(_keys)

    # The hooks list is bound here: module globals may be gone when the last graphs die at
    # interpreter exit.
    def __del__(self, hooks=_release_hooks):
        for hook in hooks:
            hook(self.value)


def _row_pointers(sorted_key: torch.Tensor, num_rows: int, stride: int) -> torch.Tensor:
    """Row pointers of a CSR whose edges carry sorted keys ``row * stride + column``.

    A binary search per row boundary: deterministic on every device, unlike bincount."""
    bounds = torch.arange(num_rows + 1, dtype=sorted_key.dtype, device=sorted_key.device) * stride
    return torch.searchsorted(sorted_key, bounds)


def narrowest_index_dtype(num_edges: int, num_nodes: int) -> torch.dtype:
    """The narrowest index dtype that fits: the one :meth:`Graph.from_edge_index` picks."""
    return torch.int32 if max(num_edges, num_nodes) <= _INT32_MAX else torch.int64


def derived_tensors():
    """The context in which tensors kept for later calls are built: outside inference mode,
    since a training step after an evaluation under ``torch.inference_mode`` saves them for
    its backward, which inference tensors refuse."""
    return torch.inference_mode(False)


def _checked_arrays(rowptr, col, num_src_nodes, edge_perm):
    """The arrays a caller hands ``Graph(...)`` directly, checked as the kernels need them:
    a valid CSR, one index dtype, contiguous, and ``edge_perm`` a permutation of the edges."""
    if num_src_nodes is None:
        raise TypeError("num_src_nodes must be an int, got NoneType")
    _validate.csr(rowptr, col, num_src_nodes)
    if rowptr.dtype != col.dtype:
        raise TypeError(f"rowptr ({rowptr.dtype}) and col ({col.dtype}) must have one index "
                        "dtype")
    if edge_perm is not None:
        _validate.permutation("edge_perm", edge_perm, col.numel(), col.device)
        edge_perm = edge_perm.to(torch.int64).contiguous()
    return rowptr.contiguous(), col.contiguous(), edge_perm


class Graph:
    """An immutable graph on ``num_src_nodes`` sources and ``num_dst_nodes`` destinations.

    Build it with :meth:`from_edge_index`, :meth:`from_csr` or :meth:`from_dgl`. Messages flow
    from ``edge_index[0]`` (source) to ``edge_index[1]`` (destination).

    ``cache_transpose=False`` keeps the transposed CSR out of memory: backward passes then use
    the transposed operation of the forward structure (slower, less memory).
    """

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, num_src_nodes: int,
                 edge_perm: Optional[torch.Tensor] = None, *, cache_transpose: bool = True,
                 _trusted: bool = False):
        if not _trusted:
            rowptr, col, edge_perm = _checked_arrays(rowptr, col, num_src_nodes, edge_perm)
        self._rowptr = rowptr
        self._col = col
        self._num_src = int(num_src_nodes)
        self._num_dst = int(rowptr.numel() - 1)
        # edge_perm[p] = position in the user's edge order of CSR edge p (None: identity)
        self._edge_perm = edge_perm
        _validate.flag("cache_transpose", cache_transpose)
        self.cache_transpose = cache_transpose
        self._cache_key = CacheKey()
        self.key = self._cache_key.value
        self._derived: Dict[object, object] = {}
        self._spmm_format: Optional[str] = None
        self._attention_format: Optional[str] = None
        self._reordering: Optional[str] = None

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: Optional[int] = None, *,
                        num_src_nodes: Optional[int] = None, num_dst_nodes: Optional[int] = None,
                        cache_transpose: bool = True,
                        index_dtype: Optional[torch.dtype] = None) -> "Graph":
        """From a ``[2, E]`` integer tensor (row 0 sources, row 1 destinations).

        Give ``num_nodes`` for a homogeneous graph (default: largest index + 1), or
        ``num_src_nodes`` and ``num_dst_nodes`` for a bipartite block. ``index_dtype``
        (int32 or int64) overrides the narrowest dtype that fits, e.g. to test int64 kernels.
        """
        _validate.edge_index(edge_index)
        num_src, num_dst = _validate.node_counts(edge_index, num_nodes, num_src_nodes,
                                                 num_dst_nodes)
        src, dst = edge_index[0], edge_index[1]
        num_edges = src.numel()
        needed = narrowest_index_dtype(num_edges, max(num_src, num_dst))
        if index_dtype is None:
            index_dtype = needed
        elif index_dtype not in (torch.int32, torch.int64):
            raise TypeError(f"index_dtype must be torch.int32 or torch.int64, got {index_dtype}")
        elif index_dtype == torch.int32 and needed == torch.int64:
            raise ValueError("index_dtype=torch.int32 cannot index this many nodes or edges")
        # One sort on the (destination, source) key gives a canonical CSR: neighbours in
        # ascending source order, which the deterministic tie rules of min/max rely on.
        stride = max(num_src, 1)
        if num_dst * stride <= _KEY_MAX:
            key = dst.to(torch.int64) * stride + src.to(torch.int64)
            sorted_key, perm = torch.sort(key, stable=True)
            col = (sorted_key % stride).to(index_dtype)
            rowptr = _row_pointers(sorted_key, num_dst, stride)
        else:
            # the key would overflow int64 (and sort wrongly): the same order from two stable
            # sorts, by source and then by destination
            by_src = torch.sort(src.to(torch.int64), stable=True).indices
            dst64 = dst.to(torch.int64)
            perm = by_src[torch.sort(dst64[by_src], stable=True).indices]
            col = src[perm].to(index_dtype)
            rowptr = _row_pointers(dst64[perm], num_dst, 1)
        identity = torch.arange(num_edges, device=src.device)
        edge_perm = None if torch.equal(perm, identity) else perm
        return cls(rowptr.to(index_dtype), col, num_src, edge_perm,
                   cache_transpose=cache_transpose, _trusted=True)

    @classmethod
    def from_csr(cls, indptr: torch.Tensor, indices: torch.Tensor,
                 num_src_nodes: Optional[int] = None, *, cache_transpose: bool = True) -> "Graph":
        """From destination-major CSR: the sources of destination ``i`` are
        ``indices[indptr[i]:indptr[i+1]]``. Edge order (for edge weights) is ``indices`` order.
        """
        _validate.csr(indptr, indices, num_src_nodes)
        num_dst = indptr.numel() - 1
        if num_src_nodes is None:
            num_src_nodes = max(num_dst, int(indices.max()) + 1 if indices.numel() else 0)
        dst = torch.repeat_interleave(torch.arange(num_dst, device=indptr.device),
                                      indptr[1:].to(torch.int64) - indptr[:-1].to(torch.int64))
        return cls.from_edge_index(torch.stack([indices.to(torch.int64), dst]),
                                   num_src_nodes=num_src_nodes, num_dst_nodes=num_dst,
                                   cache_transpose=cache_transpose)

    @classmethod
    def from_dgl(cls, dgl_graph, *, cache_transpose: bool = True) -> "Graph":
        """From a homogeneous DGLGraph or a block (edge ids follow DGL's edge order)."""
        formats = dgl_graph.formats()
        if "coo" not in formats["created"] + formats["not created"]:
            # a graph restricted to CSR/CSC (g.formats('csc')) lists its edges by id only
            # through COO: a clone that may build it, the caller's graph left as it is
            dgl_graph = dgl_graph.formats(formats["created"] + formats["not created"] + ["coo"])
        src, dst = dgl_graph.edges(order="eid")
        return cls.from_edge_index(torch.stack([src, dst]),
                                   num_src_nodes=dgl_graph.num_src_nodes(),
                                   num_dst_nodes=dgl_graph.num_dst_nodes(),
                                   cache_transpose=cache_transpose)

    # ---- sizes and raw structure ------------------------------------------------------------
    @property
    def num_src_nodes(self) -> int:
        return self._num_src

    @property
    def num_dst_nodes(self) -> int:
        return self._num_dst

    @property
    def num_edges(self) -> int:
        return self._col.numel()

    @property
    def device(self) -> torch.device:
        return self._col.device

    @property
    def index_dtype(self) -> torch.dtype:
        return self._col.dtype

    @property
    def rowptr(self) -> torch.Tensor:
        """Destination-major CSR row pointers, ``[num_dst_nodes + 1]``."""
        return self._rowptr

    @property
    def col(self) -> torch.Tensor:
        """Source of each CSR edge, ``[num_edges]``."""
        return self._col

    @property
    def edge_perm(self) -> Optional[torch.Tensor]:
        """For each CSR edge, its position in the input edge order; None when they agree."""
        return self._edge_perm

    @property
    def is_bipartite(self) -> bool:
        return self._num_src != self._num_dst

    def cached(self, key, build):
        """``build()``'s value, computed once per key and kept for the graph's lifetime: the
        home of everything derived from the structure (formats, statistics, tuned choices)."""
        value = self._derived.get(key)
        if value is None:
            with derived_tensors():
                value = build()
            self._derived[key] = value
        return value

    def tensors(self) -> List[torch.Tensor]:
        """The structure's tensors and the derived ones cached so far (row, transpose, norm
        values, ...): what another CUDA stream reading this graph must ``record_stream``."""
        found = [t for t in (self._rowptr, self._col, self._edge_perm) if t is not None]
        for value in self._derived.values():
            items = value if isinstance(value, (tuple, list)) else (value,)
            found += [t for t in items if isinstance(t, torch.Tensor)]
        return found

    @property
    def row(self) -> torch.Tensor:
        """Destination of each CSR edge (the expanded row pointers)."""
        return self.cached("row", lambda: torch.repeat_interleave(
            torch.arange(self._num_dst, device=self.device, dtype=self.index_dtype),
            self.in_degree.to(torch.int64), output_size=self.num_edges))

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` int64 edge index in CSR order (sources, destinations)."""
        return torch.stack([self._col.to(torch.int64), self.row.to(torch.int64)])

    # ---- degrees, flags, buckets ------------------------------------------------------------
    @property
    def in_degree(self) -> torch.Tensor:
        """In-degree of each destination (int64)."""
        return self.cached("in_degree", lambda: (self._rowptr[1:] - self._rowptr[:-1]).to(torch.int64))

    @property
    def out_degree(self) -> torch.Tensor:
        """Out-degree of each source (int64)."""
        def build():
            sorted_col = torch.sort(self._col).values
            rowptr_t = _row_pointers(sorted_col, self._num_src, 1)
            return rowptr_t[1:] - rowptr_t[:-1]
        return self.cached("out_degree", build)

    @property
    def max_in_degree(self) -> int:
        return self.cached("max_in_degree", lambda: int(self.in_degree.max()) if self._num_dst else 0)

    @property
    def has_self_loops(self) -> bool:
        return self.cached("has_self_loops", lambda: bool((self._col == self.row).any()))

    @property
    def is_symmetric(self) -> bool:
        """True when every edge j->i has its reverse i->j with the same multiplicity."""
        def build():
            if self.is_bipartite:
                return False
            t_rowptr, t_col, _ = self.transpose()
            return bool(torch.equal(t_rowptr, self._rowptr) and torch.equal(t_col, self._col))
        return self.cached("is_symmetric", build)

    def degree_buckets(self, quantile: float = 0.99, by_degree: bool = False,
                       direction: str = "in") -> Tuple[int, torch.Tensor, torch.Tensor]:
        """Splits destinations by in-degree (``direction="out"``: sources by out-degree, the
        transposed CSR's rows) at the given quantile.

        Returns ``(threshold, light_rows, heavy_rows)``: rows with degree <= threshold are
        light. Row lists have the index dtype and are cached per quantile. ``by_degree``
        orders each list by falling degree (ties by row id), so that the warps of one block
        get similar work and the longest rows start first. One host sync when first built.
        """
        _validate.choice("direction", direction, ("in", "out"))

        def build():
            deg = self.in_degree if direction == "in" else self.out_degree
            if deg.numel() == 0:
                empty = torch.empty(0, dtype=self.index_dtype, device=self.device)
                return 0, empty, empty
            threshold = int(torch.quantile(deg.double(), quantile).ceil())
            heavy = deg > threshold
            rows = torch.arange(deg.numel(), device=self.device, dtype=self.index_dtype)
            if by_degree:
                order = torch.sort(deg, descending=True, stable=True).indices
                rows, heavy = rows[order], heavy[order]
            return threshold, rows[~heavy], rows[heavy]
        key = ("buckets", float(quantile), by_degree) + (() if direction == "in" else ("out",))
        return self.cached(key, build)

    #: whether ``signature`` is already the coarse ``size_classes`` (a mini-batch's graph)
    tuned_by_size = False

    def size_classes(self) -> Tuple[int, int, int]:
        """Sources, destinations and edges rounded up to powers of two (no device work)."""
        return tuple(1 << max(0, n - 1).bit_length()
                     for n in (self._num_src, self._num_dst, self.num_edges))

    def signature(self) -> Tuple:
        """A short description of the structure for tuning keys: sizes and degree shape."""
        def build():
            deg = self.in_degree.double()
            if deg.numel() == 0:
                return (self._num_src, self._num_dst, self.num_edges, 0, 0)
            q = torch.quantile(deg, torch.tensor([0.5, 0.99], dtype=torch.float64,
                                                  device=deg.device)).tolist()
            return (self._num_src, self._num_dst, self.num_edges, int(q[0]), int(q[1]),
                    self.max_in_degree)
        return self.cached("signature", build)

    # ---- transpose and normalised values ----------------------------------------------------
    def transpose(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Source-major CSR: ``(rowptr_t, col_t, perm_t)`` with ``col_t`` the destinations and
        ``perm_t[p]`` the CSR position of transposed edge ``p``. Cached unless
        ``cache_transpose`` is False, in which case it is rebuilt on each call.
        """
        def build():
            # CSR edges are in row order, so a stable sort by column alone puts them in
            # (column, row) order: half the key width of sorting on column * rows + row.
            sorted_col, perm = torch.sort(self._col, stable=True)
            col_t = self.row[perm].to(self.index_dtype)
            rowptr_t = _row_pointers(sorted_col, self._num_src, 1)
            return rowptr_t.to(self.index_dtype), col_t, perm.to(self.index_dtype)
        if not self.cache_transpose:
            return build()
        return self.cached("transpose", build)

    def transposed_edge_ids(self) -> torch.Tensor:
        """The input edge id (position in the ``edge_index`` the graph was built from) of each
        transposed-CSR position, in the index dtype; cached like the transpose."""
        def build():
            t_perm = self.transpose()[2]  # transposed position -> CSR position
            if self._edge_perm is None:
                return t_perm
            return self._edge_perm[t_perm.to(torch.int64)].to(self.index_dtype)
        if not self.cache_transpose:
            return build()
        return self.cached("transposed_edge_ids", build)

    def norm_values(self, norm: str, reduce: str = "sum",
                    dtype: torch.dtype = torch.float32) -> Optional[torch.Tensor]:
        """Per-edge coefficients ``c_ij`` in CSR order for a norm mode (DGL GraphConv's
        definitions, zero degrees clamped to 1), times ``1/in_deg(i)`` for ``reduce="mean"``.
        None when every coefficient is 1.
        """
        _validate.choice("norm", norm, NORMS)
        _validate.choice("reduce", reduce, ("sum", "mean"))
        if norm == "none" and reduce == "sum":
            return None

        def build():
            in_deg = self.in_degree.clamp(min=1).to(torch.float64)
            row, col = self.row.to(torch.int64), self._col.to(torch.int64)
            coef = torch.ones(self.num_edges, dtype=torch.float64, device=self.device)
            if norm in ("left", "both"):  # out-degrees take a sort: only the norms that use them
                out_deg = self.out_degree.clamp(min=1).to(torch.float64)
            if norm == "left":
                coef = coef / out_deg[col]
            elif norm == "right":
                coef = coef / in_deg[row]
            elif norm == "both":
                coef = coef * torch.rsqrt(out_deg[col] * in_deg[row])
            if reduce == "mean":
                coef = coef / in_deg[row]
            return coef.to(dtype)
        return self.cached(("norm", norm, reduce, dtype), build)

    def transposed_norm_values(self, norm: str, reduce: str = "sum",
                               dtype: torch.dtype = torch.float32) -> Optional[torch.Tensor]:
        """``norm_values`` in the edge order of :meth:`transpose` (what backward passes walk),
        cached with the transpose; None when every coefficient is 1 or the transpose is not
        cached.
        """
        value = self.norm_values(norm, reduce, dtype)
        if value is None or not self.cache_transpose:
            return None
        return self.cached(("norm_t", norm, reduce, dtype),
                            lambda: value[self.transpose()[2].to(torch.int64)])

    def edge_values_to_csr(self, values: torch.Tensor) -> torch.Tensor:
        """Reorders per-edge values given in input edge order into CSR order."""
        return values if self._edge_perm is None else values[self._edge_perm]

    def edge_values_from_csr(self, values: torch.Tensor) -> torch.Tensor:
        """Reorders per-edge values given in CSR order into input edge order."""
        if self._edge_perm is None:
            return values
        return values.new_empty(values.shape).index_put_((self._edge_perm,), values)

    # ---- block-sparse Tensor Core layout ------------------------------------------------------
    def wsb(self, path: Optional[str] = None):
        """The WSB layout (``fastgnn.ops.wsb.WSB``: tiles of 16 destinations x 16 sources for
        Tensor Core SpMM), built on this graph's device on first use and cached. With ``path``
        it is loaded from there when saved for this structure, else built and saved there.
        ``.density``, ``.padding_ratio`` and ``.memory_bytes()`` describe it."""
        from fastgnn.ops import wsb
        layout = self.cached("wsb", lambda: wsb.load_or_build(self, path))
        if path is not None:
            wsb.keep_at(layout, path)
        return layout

    @property
    def spmm_format(self) -> Optional[str]:
        """SpMM format policy: "auto" (the tuner measures CSR against WSB where the structural
        pre-filter lets WSB through), "csr" or "wsb" (forced wherever WSB applies: CUDA
        float16/bfloat16 features, no edge-value gradients). None: FASTGNN_SPMM_FORMAT."""
        return self._spmm_format

    @spmm_format.setter
    def spmm_format(self, value: Optional[str]) -> None:
        if value is not None:
            _validate.choice("spmm_format", value, SPMM_FORMATS)
        self._spmm_format = value

    @property
    def attention_format(self) -> Optional[str]:
        """Graph Transformer attention format policy (``fastgnn.ops.graph_attention``'s
        forward), apart from SpMM's: the two cross over at different densities. "auto" (the
        tuner measures CSR against WSB where the structural pre-filter lets WSB through),
        "csr" or "wsb" (forced wherever WSB applies: CUDA float16/bfloat16 features, head dims
        32/64/128, no edge_term, no attention dropout). None: FASTGNN_ATTENTION_FORMAT."""
        return self._attention_format

    @attention_format.setter
    def attention_format(self, value: Optional[str]) -> None:
        if value is not None:
            _validate.choice("attention_format", value, SPMM_FORMATS)
        self._attention_format = value

    # ---- internal node order ------------------------------------------------------------------
    @property
    def reordering(self) -> Optional[str]:
        """The node order the ops run this graph in internally ("rcm", "degree", "metis"), or
        None: its own. Set by :meth:`reordered`."""
        return self._reordering

    def reordered(self, method: str = "rcm") -> "Graph":
        """This graph with the opt-in internal reordering: the same structure, node and edge
        order to the caller, but every ``fastgnn.ops`` call on it runs on a copy relabelled
        by ``method`` (``fastgnn.reorder``'s methods), taking and returning node- and
        edge-aligned tensors in this graph's order (forward and backward). Each call pays a
        gather of its node inputs and of its output; min/max aggregation runs unreordered
        (its ties go to the smallest caller id), with a ``fastgnn.FallbackWarning``.

        The order and the relabelled copy are computed here, once, and cached with the
        returned graph, itself cached on this one. Homogeneous graphs only."""
        from fastgnn import reordering
        reordering.check_method("method", method)
        if self.is_bipartite:
            raise ValueError("reordered(method=...) needs a homogeneous graph; this one is "
                             f"bipartite ({self._num_src} sources, {self._num_dst} destinations)")
        if method == self._reordering:
            return self
        flagged = self.cached(("reordered", method), lambda: self._moved(lambda t: t)
                              ._with_reordering(method))
        reordering.internal(flagged)
        return flagged

    def _with_reordering(self, method: Optional[str]) -> "Graph":
        self._reordering = method
        return self

    # ---- devices ----------------------------------------------------------------------------
    def to(self, device, non_blocking: bool = False) -> "Graph":
        """A Graph on ``device`` (self when already there, as for tensors: ``"cuda"`` names
        the current CUDA device). Derived caches are rebuilt there."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device == self.device:
            return self
        return self._moved(lambda t: None if t is None else t.to(
            device, non_blocking=non_blocking))._with_reordering(self._reordering)

    def _moved(self, move: Callable[[Optional[torch.Tensor]], Optional[torch.Tensor]]) -> "Graph":
        """This graph's arrays through ``move`` (subclasses keep their own kind and fields)."""
        return Graph(move(self._rowptr), move(self._col), self._num_src, move(self._edge_perm),
                     cache_transpose=self.cache_transpose, _trusted=True)

    def _derive(self, rowptr: torch.Tensor, col: torch.Tensor, num_src_nodes: int,
                tag: tuple) -> "Graph":
        """A trusted CSR graph built from this one (e.g. with self-loops added); ``tag`` names
        the change. Subclasses keep their tuning class (a sampled batch's stays a size class);
        a homogeneous result keeps the internal reordering."""
        derived = Graph(rowptr, col, num_src_nodes, None, _trusted=True)
        return derived._with_reordering(None if derived.is_bipartite else self._reordering)

    def cuda(self, device=None) -> "Graph":
        return self.to(device if device is not None else "cuda")

    def cpu(self) -> "Graph":
        return self.to("cpu")

    def pin_memory(self) -> "Graph":
        """A CPU Graph whose structure lives in page-locked memory (fast async copies)."""
        pin = lambda t: None if t is None else t.pin_memory()  # noqa: E731
        return Graph(pin(self._rowptr), pin(self._col), self._num_src, pin(self._edge_perm),
                     cache_transpose=self.cache_transpose,
                     _trusted=True)._with_reordering(self._reordering)

    def is_pinned(self) -> bool:
        return self._col.is_pinned()

    def __repr__(self) -> str:
        kind = "bipartite " if self.is_bipartite else ""
        flag = f", reordering={self._reordering!r}" if self._reordering else ""
        return (f"fastgnn.Graph({kind}num_src_nodes={self._num_src}, "
                f"num_dst_nodes={self._num_dst}, num_edges={self.num_edges}, "
                f"index_dtype={self.index_dtype}, device={self.device}{flag})")
