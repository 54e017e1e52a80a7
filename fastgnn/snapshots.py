"""fastgnn.SnapshotGraph: a window of T graph snapshots over one node set (PiPAD's
overlap-aware organisation, for discrete-time dynamic GNNs).

Every distinct edge of the window is stored once, with an int64 membership mask (bit t: the
edge is in snapshot t). In the destination-major CSR the kernels read, each row lists first
its shared edges (in every snapshot: their mask is never read), then its other edges: the
shared structure once plus the exclusive edges, in the spirit of PiPAD's sliced CSR; an edge
in several but not all snapshots is stored once, not once per snapshot. Duplicate edges are
kept (the k-th copy of j->i is its own edge), as ``fastgnn.Graph`` keeps them.

Sliding the window by one (:meth:`SnapshotGraph.slide`) computes on the host what changed
against the newest snapshot (edges that left it or came back, edges new to the window) and
copies only that to the device, where the window's edge pool is updated and re-sorted: the
``bytes_uploaded`` counter of each SnapshotGraph says how much crossed. Per-snapshot degrees,
norms and the transposed structure (for the backward) are derived on the device, lazily, and
cached on the instance, as ``fastgnn.Graph`` does.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch

from fastgnn import _validate
from fastgnn.graph import NORMS, CacheKey, Graph

MAX_SNAPSHOTS = 63  # bits of the int64 membership mask


def _identities(edge_index: torch.Tensor, num_nodes: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sorted ``dst * N + src`` of every edge and its copy number among equal edges."""
    pair = torch.sort(edge_index[1].to(torch.int64) * num_nodes + edge_index[0].to(torch.int64)).values
    rank = torch.arange(pair.numel(), dtype=torch.int64, device=pair.device) - \
        torch.searchsorted(pair, pair)
    return pair, rank


def _composite(pair: torch.Tensor, rank: torch.Tensor, copies: int) -> torch.Tensor:
    return pair * copies + rank


class _Pool:
    """The window's distinct edges in (destination, source, copy) order, with their masks."""

    __slots__ = ("pair", "rank", "mask")

    def __init__(self, pair: torch.Tensor, rank: torch.Tensor, mask: torch.Tensor):
        self.pair, self.rank, self.mask = pair, rank, mask

    def to(self, device) -> "_Pool":
        return _Pool(self.pair.to(device), self.rank.to(device), self.mask.to(device))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.pair, self.rank, self.mask))

    def slid(self, flips: torch.Tensor, added_pair: torch.Tensor, added_rank: torch.Tensor,
             snapshots: int, copies: int) -> "_Pool":
        """The pool after dropping snapshot 0 and appending a snapshot that is the newest one
        with the membership of the edges at ``flips`` toggled, plus the ``added`` edges. Runs
        the same way on the host mirror and on the device, so both keep the same order."""
        newest = snapshots - 1
        in_new = (self.mask >> newest) & 1
        in_new[flips] ^= 1
        mask = torch.cat([(self.mask >> 1) | (in_new << newest),
                          torch.full_like(added_pair, 1 << newest)])
        pair = torch.cat([self.pair, added_pair])
        rank = torch.cat([self.rank, added_rank])
        keep = mask != 0
        pair, rank, mask = pair[keep], rank[keep], mask[keep]
        order = torch.sort(_composite(pair, rank, copies)).indices
        return _Pool(pair[order], rank[order], mask[order])


def _copies(*ranks: torch.Tensor) -> int:
    return 1 + max((int(r.max()) for r in ranks if r.numel()), default=0)


def _check_key_range(num_nodes: int, copies: int) -> None:
    if num_nodes * num_nodes * copies >= 2**62:
        raise ValueError(f"num_nodes={num_nodes} with {copies} copies of an edge is too many "
                         "for the 64-bit edge keys")


class SnapshotGraph:
    """A window of ``T`` snapshots (edge lists over the same ``num_nodes`` nodes).

    ``SnapshotGraph(edge_indices, num_nodes, device=None)``: ``edge_indices`` is a sequence of
    ``[2, E_t]`` integer tensors, row 0 sources, row 1 destinations (PyG's convention), at most
    63 of them. ``device`` (default: the first edge list's) is where the structure lives.
    """

    def __init__(self, edge_indices: Sequence[torch.Tensor], num_nodes: int, *, device=None):
        if isinstance(edge_indices, torch.Tensor) or not isinstance(edge_indices, (list, tuple)):
            raise TypeError("edge_indices must be a list or tuple of [2, E] edge_index tensors, "
                            f"got {type(edge_indices).__name__}")
        if not 1 <= len(edge_indices) <= MAX_SNAPSHOTS:
            raise ValueError(f"edge_indices must hold 1 to {MAX_SNAPSHOTS} snapshots, got "
                             f"{len(edge_indices)}")
        num_nodes = _validate.count("num_nodes", num_nodes)
        device = (_validate.device("device", device) if device is not None
                  else edge_indices[0].device)
        ids = []
        for t, edge_index in enumerate(edge_indices):
            _check_edges(edge_index, num_nodes, f"edge_indices[{t}]")
            ids.append(_identities(edge_index.cpu(), num_nodes))
        copies = _copies(*(rank for _, rank in ids))
        _check_key_range(num_nodes, copies)
        keys = torch.cat([_composite(pair, rank, copies) for pair, rank in ids])
        bits = torch.cat([torch.full((pair.numel(),), 1 << t, dtype=torch.int64)
                          for t, (pair, _) in enumerate(ids)])
        unique, inverse = torch.unique(keys, sorted=True, return_inverse=True)
        mask = torch.zeros(unique.numel(), dtype=torch.int64).index_add_(0, inverse, bits)
        host = _Pool(unique // copies, unique % copies, mask)
        self._init(host, len(edge_indices), num_nodes, device, None)

    def _init(self, host: _Pool, snapshots: int, num_nodes: int, device: torch.device,
              pool: Optional[_Pool], uploaded: int = 0) -> None:
        self._host = host
        self._num_snapshots = snapshots
        self._num_nodes = num_nodes
        self._device = torch.device(device)
        if pool is None:
            pool = host if self._device.type == "cpu" else host.to(self._device)
            uploaded = 0 if self._device.type == "cpu" else host.nbytes()
        self._pool = pool
        self._device = pool.mask.device  # "cuda" resolved to "cuda:0"
        self.bytes_uploaded = uploaded
        self._derived: Dict[object, object] = {}
        # Names this window's structures in native GPU caches (work lists), freed with it.
        self._cache_key = CacheKey()
        self.key = self._cache_key.value

    # ---- sliding ---------------------------------------------------------------------------
    def slide(self, edge_index: torch.Tensor) -> "SnapshotGraph":
        """The window one step later: snapshots 1..T-1 of this one, then ``edge_index``.

        Only the difference to the newest snapshot goes to the device (see
        ``bytes_uploaded``); this SnapshotGraph stays valid.
        """
        _check_edges(edge_index, self._num_nodes, "edge_index")
        host, snapshots = self._host, self._num_snapshots
        pair, rank = _identities(edge_index.cpu(), self._num_nodes)
        copies = _copies(host.rank, rank)
        _check_key_range(self._num_nodes, copies)
        pool_keys = _composite(host.pair, host.rank, copies)
        new_keys = _composite(pair, rank, copies)
        pos = torch.searchsorted(pool_keys, new_keys)
        found = torch.zeros(new_keys.numel(), dtype=torch.bool)
        if pool_keys.numel():
            found = pool_keys[pos.clamp(max=pool_keys.numel() - 1)] == new_keys
        in_new = torch.zeros(pool_keys.numel(), dtype=torch.int64)
        in_new[pos[found]] = 1
        flips = torch.nonzero(in_new != ((host.mask >> (snapshots - 1)) & 1)).view(-1)
        delta = (flips, pair[~found], rank[~found])
        new_host = host.slid(*delta, snapshots, copies)
        if self._device.type == "cpu":
            pool, uploaded = new_host, 0
        else:
            moved = [t.to(self._device, non_blocking=True) for t in delta]
            uploaded = sum(t.numel() * t.element_size() for t in delta)
            pool = self._pool.slid(*moved, snapshots, copies)
        slid = SnapshotGraph.__new__(SnapshotGraph)
        slid._init(new_host, snapshots, self._num_nodes, self._device, pool, uploaded)
        return slid

    # ---- sizes ------------------------------------------------------------------------------
    @property
    def num_snapshots(self) -> int:
        return self._num_snapshots

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def num_edges(self) -> int:
        """Distinct edges of the window (each stored once)."""
        return self._host.pair.numel()

    @property
    def num_shared_edges(self) -> int:
        """Edges present in every snapshot of the window."""
        return int((self._host.mask == self._full_mask).sum())

    @property
    def _full_mask(self) -> int:
        return (1 << self._num_snapshots) - 1

    def num_snapshot_edges(self) -> torch.Tensor:
        """Edges of each snapshot, ``[T]`` int64 (host)."""
        mask = self._host.mask
        return torch.stack([((mask >> t) & 1).sum() for t in range(self._num_snapshots)])

    def cached(self, key, build):
        value = self._derived.get(key)
        if value is None:
            value = build()
            self._derived[key] = value
        return value

    # ---- structure the kernels read ------------------------------------------------------
    def _endpoints(self) -> Tuple[torch.Tensor, torch.Tensor]:
        pair = self._pool.pair
        return pair % max(self._num_nodes, 1), pair // max(self._num_nodes, 1)  # (src, dst)

    def _index_dtype(self) -> torch.dtype:
        return torch.int32 if max(self.num_edges, self._num_nodes) < 2**31 else torch.int64

    def _csr(self, rows: torch.Tensor, cols: torch.Tensor):
        """``(rowptr, shared_end, col, mask)`` with the shared edges of each row first."""
        n = self._num_nodes
        partial = (self._pool.mask != self._full_mask).to(torch.int64)
        group = rows * 2 + partial
        order = torch.sort(group * max(n, 1) + cols, stable=True).indices
        group = group[order]
        bounds = torch.arange(n + 1, dtype=torch.int64, device=group.device) * 2
        rowptr = torch.searchsorted(group, bounds)
        shared_end = torch.searchsorted(group, bounds[:-1] + 1)
        dtype = self._index_dtype()
        return (rowptr.to(dtype), shared_end.to(dtype), cols[order].to(dtype),
                self._pool.mask[order].contiguous())

    def structure(self):
        """Destination-major ``(rowptr, shared_end, col, mask)`` (see ``spmm_snapshots``)."""
        def build():
            src, dst = self._endpoints()
            return self._csr(dst, src)
        return self.cached("structure", build)

    def transposed(self):
        """The same structure source-major (rows are sources): what the backward walks."""
        def build():
            src, dst = self._endpoints()
            return self._csr(src, dst)
        return self.cached("transposed", build)

    def degrees(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(in_degree, out_degree)`` of every node in every snapshot, ``[T, N]`` int64."""
        def build():
            src, dst = self._endpoints()
            mask, n = self._pool.mask, self._num_nodes
            ins = torch.zeros((self._num_snapshots, n), dtype=torch.int64, device=self._device)
            outs = torch.zeros_like(ins)
            for t in range(self._num_snapshots):
                bit = (mask >> t) & 1
                ins[t].index_add_(0, dst, bit)
                outs[t].index_add_(0, src, bit)
            return ins, outs
        return self.cached("degrees", build)

    def norm_scales(self, norm: str, dtype: torch.dtype = torch.float32):
        """``(src_scale, dst_scale)``, ``[T, N]`` each or None: the per-snapshot norm
        ``c_ij = src_scale[t, j] * dst_scale[t, i]`` (DGL GraphConv's, degrees clamped to 1)."""
        _validate.choice("norm", norm, NORMS)
        if norm == "none":
            return None, None

        def build():
            ins, outs = (d.clamp(min=1).to(torch.float64) for d in self.degrees())
            power = -0.5 if norm == "both" else -1.0
            src = outs.pow(power).to(dtype) if norm in ("left", "both") else None
            dst = ins.pow(power).to(dtype) if norm in ("right", "both") else None
            return src, dst
        return self.cached(("norm", norm, dtype), build)

    # ---- per-snapshot views ------------------------------------------------------------------
    def edge_index(self, t: int) -> torch.Tensor:
        """Snapshot ``t``'s edges as a ``[2, E_t]`` int64 tensor on the device (CSR order)."""
        if not isinstance(t, int) or not -self._num_snapshots <= t < self._num_snapshots:
            raise IndexError(f"snapshot {t} out of range for a window of {self._num_snapshots}")
        t %= self._num_snapshots
        src, dst = self._endpoints()
        present = ((self._pool.mask >> t) & 1).bool()
        return torch.stack([src[present], dst[present]])

    def snapshot(self, t: int) -> Graph:
        """Snapshot ``t`` as a ``fastgnn.Graph`` (built per call)."""
        return Graph.from_edge_index(self.edge_index(t), num_nodes=self._num_nodes)

    def __repr__(self) -> str:
        return (f"fastgnn.SnapshotGraph(num_snapshots={self._num_snapshots}, "
                f"num_nodes={self._num_nodes}, num_edges={self.num_edges}, "
                f"num_shared_edges={self.num_shared_edges}, device={self._device})")


def _check_edges(edge_index, num_nodes: int, name: str) -> None:
    _validate.integer_tensor(name, edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{name} must have shape [2, E], got {list(edge_index.shape)}")
    if edge_index.numel():
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(f"{name} has index {lo if lo < 0 else hi}, out of range for "
                             f"num_nodes={num_nodes}")
