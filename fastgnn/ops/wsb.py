"""WSB, the weighted block-sparse layout for Tensor Cores, and SpMM over it.

Destinations are cut into windows of 16 rows. Each window's distinct source columns, in
ascending order, are packed 16 at a time into tiles; a tile holds its 16 column ids (-1 pads
the last one) and the dense 16 x 16 block of edge values (duplicate edges summed). A CUDA
product then multiplies each block by the 16 gathered feature rows on Tensor Cores (float16 or
bfloat16 operands, float accumulation). It pays where windows are dense enough that the
padded slots cost less than the Tensor Cores save: ``WSB.density`` says how full the tiles are.

The structure (tiles and the slot of every edge) is built once per Graph on its device, cached
on it and freed with it; ``Graph.wsb(path=...)`` also keeps it on disk, keyed by a fingerprint
of the structure, so the build is paid once per dataset. Values are laid out per (norm, dtype)
and cached as well.

SpMM gradients take the CSR route (the cached transpose), which on directed graphs beats
scattering into many windows' columns. The Graph Transformer attention runs its forward and
its backward's destination pass on the layout (``fastgnn.ops.wsb_attention``).
"""
from __future__ import annotations

import hashlib
import os
import time
from typing import Optional

import torch

from fastgnn import _library, _native

WINDOW = 16  # destination rows per window (the Tensor Core tile's M)
TILE = 16    # source columns per tile (two of the paper's 8-column blocks: the tile's K)
FORMAT_VERSION = 1
# Fewer true edges than this per 256-slot tile, and WSB is not even tried (the structural
# pre-filter): the product would be mostly padding. The pipelined kernel beat CSR at 14.8
# (ogbn-arxiv, 1.44x on an H100, docs/wsb.md), so the bar sits well under that.
MIN_EDGES_PER_TILE = 8
# The CUDA kernel's plan (WSB.plan): a block of WARPS warps (kWsbWarps in
# csrc/cuda/wsb_kernels.h) walks pieces of windows, a piece being up to TILES_PER_PIECE tiles of
# one window; longer windows are cut into pieces on separate blocks, summed by a second kernel.
# A piece gets 1, 2, 4 or 8 warps, at least MIN_TILES_PER_WARP tiles each where it has that
# many, so that a warp's walk outweighs the cost of its partial. Both sizes are first guesses:
# scripts/bench_wsb.py --tiles-per-piece / --min-tiles-per-warp compares others.
WARPS = 8
TILES_PER_PIECE = 128
MIN_TILES_PER_WARP = 4
# The attention kernel's plan (WSB.attention_plan): one warp per head walks a piece of at most
# this many tiles of a window; longer windows are cut into pieces whose softmax states a second
# kernel merges. Each piece starts with an exposed gather and ends with a partial: on the H100
# (4x128 float16 forward) 8, 16, 32, 64 and 128 tiles gave Flickr (RCM) 0.90x, 1.23x, 1.39x,
# 1.51x and 1.59x CSR's speed, tolokers (RCM) 0.55x, 0.77x, 0.90x, 1.03x and 1.04x, and 128
# beat 64 on ogbn-arxiv too (2.02x against 1.91x), whose hub window has over 800 tiles
# (benchmarks/results/2026-11-27-nvidia-h100-wsb-attention-81d5b29.md).
ATTENTION_TILES_PER_PIECE = 128
# Calls a WSB build is expected to serve (a few hundred epochs of a few layers): its build time
# divided by this is charged to every WSB call when the tuner compares it with CSR.
EXPECTED_CALLS = int(os.environ.get("FASTGNN_WSB_EXPECTED_CALLS", "1000"))


class WSB:
    """The WSB structure of one Graph. Build it through ``Graph.wsb()``."""

    def __init__(self, tile_ptr: torch.Tensor, tile_cols: torch.Tensor, edge_slot: torch.Tensor,
                 num_dst: int, fingerprint: str, build_seconds: float = 0.0):
        self.tile_ptr = tile_ptr      # int32 [windows + 1]
        self.tile_cols = tile_cols    # int32 [tiles * 16]
        self.edge_slot = edge_slot    # int64 [E]: flat index of each CSR edge in the value blocks
        self.num_dst = num_dst
        self.fingerprint = fingerprint
        self.build_seconds = build_seconds
        self._values = {}
        self._plan = None
        self._attention_plan = None
        self._attention_edge_starts = None

    @property
    def num_windows(self) -> int:
        return self.tile_ptr.numel() - 1

    @property
    def num_tiles(self) -> int:
        return self.tile_cols.numel() // TILE

    @property
    def density(self) -> float:
        """Edges (with repeats) per slot of the stored tiles: 1.0 would be full tiles."""
        return self.edge_slot.numel() / max(1, self.num_tiles * WINDOW * TILE)

    @property
    def padding_ratio(self) -> float:
        """Share of the tiles' column slots that are padding."""
        return float((self.tile_cols < 0).sum()) / max(1, self.tile_cols.numel())

    def memory_bytes(self, dtype: torch.dtype = torch.float16) -> int:
        """Bytes of the structure plus one value layout in ``dtype``."""
        value_bytes = self.num_tiles * WINDOW * TILE * torch.empty((), dtype=dtype).element_size()
        return sum(t.numel() * t.element_size() for t in (self.tile_ptr, self.tile_cols,
                                                          self.edge_slot)) + value_bytes

    def values(self, csr_values: Optional[torch.Tensor], dtype: torch.dtype,
               key=None) -> torch.Tensor:
        """The dense value blocks ``[tiles * 256]`` in ``dtype`` for per-edge values in CSR
        order (None: ones), duplicates summed in float; cached under ``key`` when given."""
        if key is not None and (key, dtype) in self._values:
            return self._values[(key, dtype)]
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        blocks = torch.zeros(self.num_tiles * WINDOW * TILE, dtype=acc,
                             device=self.edge_slot.device)
        edge_values = torch.ones(self.edge_slot.numel(), dtype=acc, device=blocks.device) \
            if csr_values is None else csr_values.to(acc)
        blocks.index_add_(0, self.edge_slot, edge_values)
        blocks = blocks.to(dtype)
        if key is not None:
            self._values[(key, dtype)] = blocks
        return blocks

    def counts(self, dtype: torch.dtype) -> torch.Tensor:
        """The edge count of every slot in ``dtype``, the attention op's blocks (exact up to
        2048 duplicates of one edge in float16, 256 in bfloat16). They are the unnormalised
        SpMM's blocks, and shared with it."""
        return self.values(None, dtype, key=("none", "sum"))

    def build_charge_ms(self) -> float:
        """What the tuner adds to each WSB call's time when it races WSB against CSR: the
        layout's build, spread over ``EXPECTED_CALLS`` calls."""
        return self.build_seconds * 1e3 / EXPECTED_CALLS

    def plan(self):
        """``(work, splits)``, int32 on the layout's device: which warps of the CUDA kernel
        walk which tiles (the layout of csrc/cuda/wsb_kernels.h), derived once and cached."""
        if self._plan is None:
            self._plan = plan(self.tile_ptr)
        return self._plan

    def attention_plan(self):
        """``(work, splits)`` of the CUDA attention kernel (csrc/cuda/wsb_kernels.h), derived
        once and cached."""
        if self._attention_plan is None:
            self._attention_plan = attention_plan(self.tile_ptr)
        return self._attention_plan

    def attention_edge_starts(self) -> Optional[torch.Tensor]:
        """int32 ``[pieces * 16]`` on the layout's device, derived once and cached: per piece of
        the attention plan and row of its window, the CSR position of the row's first edge in
        the piece. The backward's destination pass walks a row's slots with a cursor from
        there, its CSR edges being in slot order (ascending source, duplicates adjacent, as
        ``Graph`` builds them). None where they are not (a CSR given in another order): the
        backward then runs on CSR."""
        if self._attention_edge_starts is None:  # a tuple: None is a result to keep too
            self._attention_edge_starts = (attention_edge_starts(self,
                                                                 self.attention_plan()[0]),)
        return self._attention_edge_starts[0]

    def save(self, path: str) -> None:
        torch.save({"version": FORMAT_VERSION, "fingerprint": self.fingerprint,
                    "num_dst": self.num_dst, "tile_ptr": self.tile_ptr.cpu(),
                    "tile_cols": self.tile_cols.cpu(), "edge_slot": self.edge_slot.cpu()}, path)

    def __repr__(self) -> str:
        return (f"WSB(windows={self.num_windows}, tiles={self.num_tiles}, "
                f"density={self.density:.3f}, padding_ratio={self.padding_ratio:.3f}, "
                f"memory_mb={self.memory_bytes() / 2**20:.1f})")


def fingerprint(g) -> str:
    """A digest of the structure (sizes, CSR): what a saved WSB must match to be reused."""
    digest = hashlib.sha1(f"{g.num_src_nodes},{g.num_dst_nodes},{g.num_edges}".encode())
    for t in (g.rowptr, g.col):
        digest.update(t.to("cpu", torch.int64).numpy().tobytes())
    return digest.hexdigest()


def _window_columns(row: torch.Tensor, col: torch.Tensor, num_src: int):
    """(distinct (window, column) keys in order, each edge's index among them)."""
    key = (row // WINDOW) * max(num_src, 1) + col
    return torch.unique(key, sorted=True, return_inverse=True)


def build(g) -> WSB:
    """Builds the WSB structure of ``g`` on its device."""
    if g.index_dtype != torch.int32:
        raise ValueError("WSB needs a graph with int32 indices")
    start = time.perf_counter()
    row, col = g.row.to(torch.int64), g.col.to(torch.int64)
    windows = -(-g.num_dst_nodes // WINDOW)
    keys, edge_key = _window_columns(row, col, g.num_src_nodes)
    key_window = keys // max(g.num_src_nodes, 1)
    per_window = torch.bincount(key_window, minlength=windows)
    first_key = torch.cumsum(per_window, 0) - per_window
    tiles = (per_window + TILE - 1) // TILE
    tile_ptr = torch.zeros(windows + 1, dtype=torch.int64, device=g.device)
    tile_ptr[1:] = torch.cumsum(tiles, 0)
    position = torch.arange(keys.numel(), device=g.device) - first_key[key_window]
    key_slot = (tile_ptr[key_window] + position // TILE) * TILE + position % TILE
    num_tiles = int(tile_ptr[-1])
    tile_cols = torch.full((num_tiles * TILE,), -1, dtype=torch.int32, device=g.device)
    tile_cols[key_slot] = (keys % max(g.num_src_nodes, 1)).to(torch.int32)
    slot = key_slot[edge_key]
    edge_slot = (slot // TILE) * (WINDOW * TILE) + (row % WINDOW) * TILE + slot % TILE
    if g.device.type == "cuda":
        torch.cuda.synchronize(g.device)
    return WSB(tile_ptr.to(torch.int32), tile_cols, edge_slot, g.num_dst_nodes,
               fingerprint(g), time.perf_counter() - start)


def _pieces(tile_ptr: torch.Tensor, tiles_per_piece: int):
    """Each window's tiles cut evenly into pieces of at most ``tiles_per_piece`` (an empty
    window: one empty piece). Per piece: its window, its index in the window, its first tile,
    its size, its window's piece count and its partial row (-1: the window has one piece);
    and ``splits`` [partial rows, 2]: ``(window, pieces)`` at each split window's first piece,
    ``(-1, 0)`` at its others (the kernels' layout, csrc/cuda/wsb_kernels.h)."""
    ptr = tile_ptr.to(torch.int64)
    device = ptr.device
    count = ptr[1:] - ptr[:-1]
    pieces = ((count + tiles_per_piece - 1) // tiles_per_piece).clamp(min=1)
    window = torch.repeat_interleave(torch.arange(count.numel(), device=device), pieces)
    index = torch.arange(window.numel(), device=device) - (torch.cumsum(pieces, 0) - pieces)[window]
    n, s = count[window], pieces[window]
    begin = ptr[window] + n * index // s  # the window's tiles split evenly over its pieces
    size = ptr[window] + n * (index + 1) // s - begin
    split = s > 1
    row = torch.where(split, torch.cumsum(split.long(), 0) - 1, torch.full_like(s, -1))
    lead = split & (index == 0)
    splits = torch.stack([torch.where(lead, window, -1), torch.where(lead, s, 0)], 1)[split]
    return window, begin, size, row, splits.to(torch.int32).contiguous()


def plan(tile_ptr: torch.Tensor):
    """The CUDA SpMM kernel's plan of a layout with these window offsets (see WSB.plan).

    ``work`` [slots, 4]: per warp slot its first and end tile, ``window * 4 + log2(warps of its
    piece)`` (-1: an idle slot padding the last block) and the partial row of its piece (-1:
    the window has one piece and is written directly). ``splits``: see :func:`_pieces`."""
    window, begin, size, row, splits = _pieces(tile_ptr, TILES_PER_PIECE)
    device = window.device
    share = (size // MIN_TILES_PER_WARP).clamp(1, WARPS)
    log_warps = (share >= 2).long() + (share >= 4).long() + (share >= 8).long()
    # Pieces by warp count, largest first (window order within a count): every piece's warps
    # then start at a multiple of their count, so they share one block. Heavy pieces lead.
    order = torch.sort(log_warps, descending=True, stable=True).indices
    warps = torch.pow(2, log_warps[order])
    slot_piece = torch.repeat_interleave(order, warps)
    slot_warps = torch.repeat_interleave(warps, warps)
    rank = torch.arange(slot_piece.numel(), device=device) - torch.repeat_interleave(
        torch.cumsum(warps, 0) - warps, warps)
    first = begin[slot_piece] + size[slot_piece] * rank // slot_warps
    end = begin[slot_piece] + size[slot_piece] * (rank + 1) // slot_warps
    work = torch.stack([first, end, window[slot_piece] * 4 + log_warps[slot_piece],
                        row[slot_piece]], 1)
    idle = torch.tensor([0, 0, -1, -1], device=device).expand((-work.shape[0]) % WARPS, 4)
    return torch.cat([work, idle]).to(torch.int32).contiguous(), splits


def attention_plan(tile_ptr: torch.Tensor):
    """The CUDA attention kernel's plan of a layout with these window offsets (see
    WSB.attention_plan). ``work`` [pieces, 4]: per piece its first and end tile, its window
    and its partial row (-1: the window has one piece and is written directly), the longest
    pieces first so that they do not start last. ``splits``: see :func:`_pieces`."""
    window, begin, size, row, splits = _pieces(tile_ptr, ATTENTION_TILES_PER_PIECE)
    order = torch.sort(size, descending=True, stable=True).indices
    work = torch.stack([begin, begin + size, window, row], 1)[order]
    return work.to(torch.int32).contiguous(), splits


def attention_edge_starts(layout: WSB, work: torch.Tensor) -> Optional[torch.Tensor]:
    """See WSB.attention_edge_starts (``work``: its attention plan)."""
    device = layout.edge_slot.device
    slot = layout.edge_slot
    tile = slot // (WINDOW * TILE)
    window = torch.searchsorted(layout.tile_ptr.to(torch.int64), tile, right=True) - 1
    row = window * WINDOW + (slot // TILE) % WINDOW
    # A column slot's place in the layout: its tile, then its slot. The CSR is in slot order
    # when (row, place) never decreases along it.
    places = layout.num_tiles * TILE + 1
    rows = layout.num_windows * WINDOW
    if rows * places >= 2**62:  # the keys would overflow: not worth a slower path
        return None
    key = row * places + tile * TILE + slot % TILE
    if key.numel() > 1 and bool((key[1:] < key[:-1]).any()):
        return None
    piece = work.to(torch.int64)
    piece_rows = piece[:, 2:3] * WINDOW + torch.arange(WINDOW, device=device)
    first = piece_rows * places + piece[:, 0:1] * TILE  # the piece's first place in each row
    return torch.searchsorted(key, first.flatten()).to(torch.int32)


def _saved(path: str, device) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    saved = torch.load(path, map_location=device, weights_only=True)
    return saved if saved.get("version") == FORMAT_VERSION else None


def load_or_build(g, path: Optional[str]) -> WSB:
    """The structure saved at ``path`` when it was saved for this graph, else ``build(g)``."""
    saved = _saved(path, g.device) if path is not None else None
    if saved is not None and saved["fingerprint"] == fingerprint(g):
        return WSB(saved["tile_ptr"], saved["tile_cols"], saved["edge_slot"], saved["num_dst"],
                   saved["fingerprint"])
    return build(g)


def keep_at(layout: WSB, path: str) -> None:
    """Saves ``layout`` at ``path`` unless the file already holds this structure's (a file
    from another structure is overwritten)."""
    saved = _saved(path, "cpu")
    if saved is None or saved["fingerprint"] != layout.fingerprint:
        layout.save(path)


def tuning_op(edges_per_tile: float, family: str = "spmm_format") -> str:
    """The tuner's op name for the CSR-or-WSB choice of an op family. The tuner keys a graph
    by its sizes and degrees, which a relabelling keeps, while WSB's tiles depend on the node
    order: the estimated edges per tile tell the orders apart (a reordered graph got the
    stored order's choice before)."""
    return f"{family}@{edges_per_tile:.1f}"


def estimated_edges_per_tile(g) -> float:
    """Edges per tile over a sample of windows: the pre-filter's cheap look at density, taken
    once per graph (it reads back from the device) and shared by every op's choice."""
    return g.cached("wsb_edges_per_tile", lambda: _sampled_edges_per_tile(g, 256))


def _sampled_edges_per_tile(g, sample_windows: int) -> float:
    windows = -(-g.num_dst_nodes // WINDOW)
    if windows == 0 or g.num_edges == 0:
        return 0.0
    gen = torch.Generator().manual_seed(0)
    picked = torch.randperm(windows, generator=gen)[:sample_windows].to(g.device)
    rows = (picked[:, None] * WINDOW + torch.arange(WINDOW, device=g.device)).flatten()
    rows = rows[rows < g.num_dst_nodes]
    rowptr = g.rowptr.to(torch.int64)
    degree = rowptr[rows + 1] - rowptr[rows]
    if int(degree.sum()) == 0:
        return 0.0
    edges = torch.repeat_interleave(rowptr[rows], degree) + (
        torch.arange(int(degree.sum()), device=g.device)
        - torch.repeat_interleave(torch.cumsum(degree, 0) - degree, degree))
    edge_rows = torch.repeat_interleave(rows, degree)
    keys, _ = _window_columns(edge_rows, g.col[edges].to(torch.int64), g.num_src_nodes)
    key_window = keys // max(g.num_src_nodes, 1)
    _, counts = torch.unique(key_window, return_counts=True)
    tiles = int(((counts + TILE - 1) // TILE).sum())
    return edges.numel() / max(1, tiles)


# ---- the op's fake kernel and autograd ----------------------------------------------------------
# Inputs: tile_ptr, tile_cols, tile_vals, x, num_out, the plan (work, splits), then the CSR
# route of the backward: rowptr, col, value, t_rowptr, t_col, t_perm, t_value, graph_key, algo
# (spmm's, backward bits).
def _fake(tile_ptr, tile_cols, tile_vals, x, num_out, work, splits, rowptr, col, value,
          t_rowptr, t_col, t_perm, t_value, graph_key, algo):
    return x.new_empty((num_out, x.shape[1]))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[7:14])
    ctx.num_src = inputs[3].shape[0]
    ctx.graph_key, ctx.algo = inputs[14], inputs[15]


def _backward(ctx, grad_out):
    rowptr, col, value, t_rowptr, t_col, t_perm, t_value = ctx.saved_tensors
    grad_x = torch.ops.fastgnn.spmm(rowptr, col, value, grad_out.contiguous(), t_rowptr, t_col,
                                    t_perm, t_value, ctx.num_src, True, ctx.graph_key,
                                    ctx.algo >> 8)
    return (None,) * 3 + (grad_x,) + (None,) * 12


product = None
if _native.has_op("wsb_spmm"):
    _library.register_fake("wsb_spmm", _fake)
    product = _library.register_autograd("wsb_spmm", _backward, _setup)
