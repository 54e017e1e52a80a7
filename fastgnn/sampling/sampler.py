"""Neighbour sampling into blocks that are already fastgnn Graphs.

:class:`NeighborSampler` draws, layer by layer from the seeds outwards, a fixed number of
in-edges (or out-edges) per node, every layer of a mini-batch in one
``torch.ops.fastgnn.sample_neighbors`` call: OpenMP on the CPU, CUDA on the GPU (the graph in
GPU memory, or in pinned host memory read through unified addressing; one host sync a batch
unless a layer takes all neighbours). Each layer comes back as destination-major CSR with its
sources already relabelled (destination nodes first, then new nodes in the order of their
first sampled edge) and its user edge ids, so a :class:`Block` wraps the kernel's arrays as
they are: nothing is rebuilt from COO. ``sample_blocks_many`` samples several mini-batches in
one ``sample_neighbors_many`` call (on the GPU one launch per pass and one sync for all of
them; on the CPU a batch per thread), each exactly as it would be sampled alone.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch

from fastgnn import _library, _native, _validate
from fastgnn.graph import Graph

EDGE_DIRS = ("in", "out")
_SEED_BOUND = 2**62
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's stream increment


def _fake_sample_neighbors(rowptr, col, weight, edge_map, seeds, fanouts, layer_seeds,
                           expand_all, replace, deterministic):
    """Shapes of sample_neighbors' outputs for fake tensors: past the seeds, every count
    depends on the data (dynamic sizes); local ids are int32 (what any batch whose bound stays
    below 2^31 nodes gets)."""
    ctx = torch.library.get_ctx()
    dynamic = getattr(ctx, "new_dynamic_size", None) or ctx.create_unbacked_symint  # torch < 2.4
    rowptrs, cols, edge_ids = [], [], []
    num_seeds = seeds.numel()
    for _ in fanouts:
        num_edges = dynamic()
        rowptrs.append(seeds.new_empty(num_seeds + 1, dtype=torch.int32))
        cols.append(seeds.new_empty(num_edges, dtype=torch.int32))
        edge_ids.append(seeds.new_empty(num_edges))
        num_seeds = dynamic()
    return rowptrs, cols, edge_ids, seeds.new_empty(dynamic())


def _fake_sample_neighbors_many(rowptr, col, weight, edge_map, seeds, batch_sizes, fanouts,
                                layer_seeds, expand_all, replace, deterministic):
    """sample_neighbors' fake outputs packed over the batches (each batch's seed layer has its
    seeds + 1 row pointers), and the layout: a CPU row per batch."""
    rowptrs, cols, edge_ids, nodes = _fake_sample_neighbors(
        rowptr, col, weight, edge_map, seeds, fanouts, layer_seeds[:len(fanouts)], expand_all,
        replace, deterministic)
    rowptrs[0] = seeds.new_empty(seeds.numel() + len(batch_sizes), dtype=torch.int32)
    layout = torch.empty((len(batch_sizes), 4 * len(fanouts) + 2), dtype=torch.int64,
                         device="cpu")
    return rowptrs, cols, edge_ids, nodes, layout


if _native.has_op("sample_neighbors"):
    _library.register_fake("sample_neighbors", _fake_sample_neighbors)
if _native.has_op("sample_neighbors_many"):
    _library.register_fake("sample_neighbors_many", _fake_sample_neighbors_many)


class _SampledGraph(Graph):
    """A sampled graph whose tuning signature is its kind and size class (powers of two),
    built only when tuning asks: every batch has its own sizes, and ``fastgnn.tuning`` would
    otherwise time the kernels' launch choices anew for each one."""
    _kind: tuple = ()
    tuned_by_size = True

    def signature(self) -> tuple:
        return self.cached("signature", lambda: self._kind + self.size_classes())

    @staticmethod
    def of(graph: Graph, kind: tuple) -> "_SampledGraph":
        """``graph``'s arrays (edge order included) as one mini-batch's graph of ``kind``."""
        return _sampled(graph.rowptr, graph.col, graph.num_src_nodes, kind, graph.edge_perm,
                        graph.cache_transpose)

    def _moved(self, move) -> "_SampledGraph":
        return _sampled(move(self.rowptr), move(self.col), self.num_src_nodes, self._kind,
                        move(self.edge_perm), self.cache_transpose)

    def _derive(self, rowptr, col, num_src_nodes, tag) -> "_SampledGraph":
        # A layer's rebuilt structure (GCN's or GAT's self-loops) keeps the size class: with an
        # exact signature every batch would time the kernels' launch choices again.
        return _sampled(rowptr, col, num_src_nodes, self._kind + tag)


def _sampled(rowptr, col, num_src_nodes, kind: tuple, edge_perm=None,
             cache_transpose: bool = True) -> _SampledGraph:
    graph = _SampledGraph(rowptr, col, num_src_nodes, edge_perm, cache_transpose=cache_transpose,
                          _trusted=True)
    graph._kind = kind
    return graph


class Block(_SampledGraph):
    """One sampled layer: a bipartite Graph from ``src_ids`` to ``dst_ids`` (global node ids;
    the destinations are the first ``num_dst_nodes`` sources) whose edges are the global edges
    ``edge_ids`` of the sampled graph, in CSR order.

    Built by the sampler from a batch's node list, of which ``src_ids`` are the first
    ``num_src_nodes`` entries, and from its edge ids, a tensor or a packed output's part: both
    are cut when first read, so that ids nobody reads (an inner layer's sources, edge ids
    without edge features) cost a batch no views."""

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, node_list: torch.Tensor,
                 num_src_nodes: int, edge_ids: Union[torch.Tensor, _Part], fanout: int):
        super().__init__(rowptr, col, num_src_nodes, None, _trusted=True)
        self._node_list = node_list
        self._edge_ids = edge_ids
        self.fanout = fanout
        self._kind = ("block", fanout)

    @property
    def src_ids(self) -> torch.Tensor:
        ids = self._node_list
        if ids.numel() != self.num_src_nodes:
            ids = self._node_list = ids[: self.num_src_nodes]
        return ids

    @property
    def dst_ids(self) -> torch.Tensor:
        return self._node_list[: self.num_dst_nodes]

    @property
    def edge_ids(self) -> torch.Tensor:
        ids = self._edge_ids = _tensor_of(self._edge_ids)
        return ids

    def tensors(self) -> List[torch.Tensor]:
        # The ids' storage as it is, cut or not: a stream records storage, not views.
        ids = self._edge_ids
        return super().tensors() + [
            self._node_list, ids if isinstance(ids, torch.Tensor) else ids[0].packed]

    def _moved(self, move) -> "Block":
        return Block(move(self.rowptr), move(self.col), move(self.src_ids), self.num_src_nodes,
                     move(self.edge_ids), self.fanout)

    def __repr__(self) -> str:
        return (f"fastgnn.sampling.Block(num_src_nodes={self.num_src_nodes}, "
                f"num_dst_nodes={self.num_dst_nodes}, num_edges={self.num_edges}, "
                f"device={self.device})")


@dataclass
class SampledBlocks:
    """Blocks of one mini-batch, input layer first (``blocks[-1]`` ends at the seeds)."""
    blocks: List[Block]

    @property
    def input_nodes(self) -> torch.Tensor:
        """Global ids of the nodes whose features the first layer reads."""
        return self.blocks[0].src_ids

    @property
    def seeds(self) -> torch.Tensor:
        return self.blocks[-1].dst_ids

    def to(self, device, non_blocking: bool = False) -> "SampledBlocks":
        return SampledBlocks([b.to(device, non_blocking) for b in self.blocks])


@dataclass
class SampledSubgraph:
    """The union of every hop's sampled edges as one graph over ``node_ids`` (seeds first,
    then each hop's new nodes), what PyG's mini-batches hold. ``graph`` is destination-major
    CSR whose edge order is ``edge_ids``' order; hop ``h`` added ``num_sampled_nodes[h + 1]``
    nodes and ``num_sampled_edges[h]`` edges."""
    graph: Graph
    node_ids: torch.Tensor
    edge_ids: torch.Tensor
    num_sampled_nodes: List[int]
    num_sampled_edges: List[int]


def _layer_seeds(batches: int, layers: int, generator: Optional[torch.Generator]) -> List[int]:
    """One draw from ``generator`` a batch, in batch order (one tensor of draws: each call is a
    tensor round trip, host time that a GPU batch feels; a CPU generator gives the same
    numbers as one draw after another), spread over the layers by splitmix64's increment (the
    kernels mix each seed before use). Batch b's layer l seed is at ``b * layers + l``."""
    _validate.generator("generator", generator)
    bases = torch.randint(0, _SEED_BOUND, (batches,), generator=generator).tolist()
    return [(base + layer * _GOLDEN_GAMMA) % _SEED_BOUND for base in bases
            for layer in range(layers)]


def _seed_tensor(seeds, name: str) -> torch.Tensor:
    """``seeds`` as a 1-D integer tensor, where it is. Range and uniqueness are checked by the
    kernels (a ValueError), without a sync here."""
    if not isinstance(seeds, torch.Tensor):
        seeds = torch.as_tensor(seeds)
    _validate.integer_tensor(name, seeds)
    if seeds.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {list(seeds.shape)}")
    return seeds


class _PackedOutput:
    """One packed output of a native call: batch b's part where its layout row says (on the
    GPU parts sit at the offsets of their bounds, with gaps between them). Every batch's part
    is cut at once, by ``fastgnn._C.cut_packed``, when a part is first asked for: none for an
    output nobody reads."""
    __slots__ = ("packed", "layout", "columns", "parts")

    def __init__(self, packed: torch.Tensor, layout: torch.Tensor, columns: Tuple[int, int, int]):
        self.packed = packed
        self.layout = layout
        self.columns = columns
        self.parts: Optional[Tuple[torch.Tensor, ...]] = None

    def cut(self) -> Tuple[torch.Tensor, ...]:
        """Every batch's part."""
        if self.parts is None:  # two threads racing here cut the same parts
            self.parts = _native._C.cut_packed(self.packed, self.layout, *self.columns)
        return self.parts


# A batch's part of a packed output, cut when first read: (output, batch), a plain tuple (a
# class of its own would double a part's host time).
_Part = Tuple[_PackedOutput, int]


def _tensor_of(ids: Union[torch.Tensor, _Part]) -> torch.Tensor:
    if isinstance(ids, torch.Tensor):
        return ids
    output, batch = ids
    return output.cut()[batch]


def _per_batch(outputs: tuple) -> List[tuple]:
    """The batches of one native call's outputs: (rowptrs, cols, edge_ids, nodes) each, the
    edge ids of a packed call as parts cut when first read (``_Part``), the rest as tensors."""
    if len(outputs) == 4:  # sample_neighbors: one batch
        return [outputs]
    rowptrs, cols, edge_ids, nodes, layout = outputs
    layers = len(rowptrs)
    packed_outputs = [_PackedOutput(t, layout, columns) for t, columns in
                      zip([*rowptrs, *cols, *edge_ids, nodes], _packed_columns(layers))]
    read_now = packed_outputs[:2 * layers] + packed_outputs[-1:]  # structure, node lists
    cut = [output.cut() for output in read_now]
    edge_parts = packed_outputs[2 * layers:3 * layers]
    return [(part[:layers], part[layers:2 * layers], [(output, b) for output in edge_parts],
             part[-1]) for b, part in enumerate(zip(*cut))]


@functools.lru_cache(maxsize=None)
def _packed_columns(layers: int) -> List[Tuple[int, int, int]]:
    """For the packed outputs in the order rowptrs, cols, edge_ids (per layer), node list: their
    start and length columns in the layout (sampling_batches.h's Layout), and what a length
    lacks (a batch's row pointers are its rows + 1)."""
    rowptrs = [(4 * l, 4 * l + 1, 1) for l in range(layers)]
    edges = [(4 * l + 2, 4 * l + 3, 0) for l in range(layers)]
    return rowptrs + edges + edges + [(4 * layers, 4 * layers + 1, 0)]


class NeighborSampler:
    """Samples ``fanouts[i]`` neighbours per node for layer ``i`` of a GNN (``-1``: all of
    them), as ``dgl.dataloading.NeighborSampler`` numbers them: ``fanouts[-1]`` is drawn for
    the seeds, ``fanouts[0]`` for the nodes farthest from them.

    Args:
        graph: the fastgnn.Graph to sample from (CPU, GPU, or pinned CPU memory for a GPU
            sampler over a graph larger than the GPU).
        fanouts: neighbours per node and layer.
        replace: sample with replacement.
        weight: optional non-negative per-edge weights in the graph's input edge order;
            neighbours are then drawn proportionally to them (zero: never).
        edge_dir: ``"in"`` samples in-edges (messages flow into the seeds, the default) or
            ``"out"`` out-edges.
        device: where sampling runs; default the graph's device ("cuda" for a pinned graph).
        deterministic: on the GPU, number new nodes in first-occurrence order so that the
            same seed gives the same blocks (default); False is faster.
    """

    def __init__(self, graph: Graph, fanouts: Sequence[int], *, replace: bool = False,
                 weight: Optional[torch.Tensor] = None, edge_dir: str = "in",
                 device=None, deterministic: bool = True):
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be a fastgnn.Graph, got {type(graph).__name__}")
        _validate.choice("edge_dir", edge_dir, EDGE_DIRS)
        if graph.is_bipartite:
            raise ValueError("sampling needs a graph whose sources and destinations are the same "
                             f"nodes, got a bipartite one ({graph.num_src_nodes} sources, "
                             f"{graph.num_dst_nodes} destinations)")
        self.fanouts = _check_fanouts(fanouts)
        if not _native.has_op("sample_neighbors"):
            raise RuntimeError("fastgnn.sampling needs the native extension: "
                               f"{_native.load_error or 'sample_neighbors is not built'}")
        self.graph = graph
        self.replace = bool(replace)
        self.edge_dir = edge_dir
        self.deterministic = bool(deterministic)
        if device is None:
            device = "cuda" if graph.is_pinned() and graph.device.type == "cpu" else graph.device
        self.device = _validate.device("device", device)
        if self.device.type == "cuda" and graph.device.type == "cpu" and not graph.is_pinned():
            raise ValueError("a GPU sampler reads a CPU graph through unified addressing: pass "
                             "graph.pin_memory() (or graph.cuda())")
        if self.device.type == "cpu" and graph.device.type != "cpu":
            raise ValueError(f"a CPU sampler needs a CPU graph, got one on {graph.device}")
        if edge_dir == "in":
            self._rowptr, self._col = graph.rowptr, graph.col
            position_to_edge = graph.edge_perm
        else:
            rowptr_t, col_t, _ = graph.transpose()
            self._rowptr, self._col = self._readable(rowptr_t), self._readable(col_t)
            position_to_edge = graph.transposed_edge_ids()
        # Maps a sampled CSR position to the user's edge id (None: they agree); the kernels
        # read it where they read the graph.
        self._edge_of_position = (None if position_to_edge is None
                                  else self._readable(position_to_edge.to(torch.int64)))
        self._weight = None if weight is None else self._weights_by_position(weight)

    def _weights_by_position(self, weight: torch.Tensor) -> torch.Tensor:
        _validate.float_tensor("weight", weight)
        if weight.dim() != 1 or weight.numel() != self.graph.num_edges:
            raise ValueError(f"weight must have one entry per edge ({self.graph.num_edges}), "
                             f"got shape {list(weight.shape)}")
        if weight.device != self.graph.device:
            raise ValueError(f"weight is on {weight.device} but the graph on {self.graph.device}")
        if not bool(torch.isfinite(weight).all()) or bool((weight < 0).any()):
            raise ValueError("weight must be finite and non-negative")
        weight = weight.to(torch.float32)
        if self._edge_of_position is not None:
            weight = weight[self._edge_of_position.to(weight.device)]
        return self._readable(weight)

    def _readable(self, per_edge: torch.Tensor) -> torch.Tensor:
        per_edge = per_edge.contiguous()
        return per_edge.pin_memory() if self.graph.is_pinned() else per_edge

    def _seeds(self, seeds, name: str = "seeds") -> torch.Tensor:
        return _seed_tensor(seeds, name).to(self.device, torch.int64).contiguous()

    def _seed_batches(self, seeds) -> Tuple[Optional[torch.Tensor], List[int]]:
        """A list of seed tensors, one per batch, packed on the sampler's device (None for
        none) and the batches' sizes."""
        if isinstance(seeds, torch.Tensor) or not isinstance(seeds, (list, tuple)):
            raise TypeError(f"seeds must be a list of 1-D seed tensors (one per batch), got "
                            f"{type(seeds).__name__}")
        parts = [_seed_tensor(batch, f"seeds[{b}]") for b, batch in enumerate(seeds)]
        if not parts:
            return None, []
        if len({part.device for part in parts}) > 1:
            parts = [part.to(self.device) for part in parts]
        # One move for the call: a move per batch cost more host time than its share of this.
        packed = torch.cat(parts) if len(parts) > 1 else parts[0]
        return packed.to(self.device, torch.int64).contiguous(), [part.numel() for part in parts]

    def _sample(self, seeds: torch.Tensor, sizes: List[int], fanouts: List[int],
                expand_all: bool, generator: Optional[torch.Generator]) -> List[tuple]:
        """Every layer of every batch (``seeds`` packed, ``sizes[b]`` of them batch b's) in one
        native call. Per batch: (rowptrs, cols, edge_ids) per layer and the node list whose
        prefixes are the layers' nodes, as sampling the batch alone gives them (one generator
        draw per batch, in order)."""
        layer_seeds = _layer_seeds(len(sizes), len(fanouts), generator)
        return _per_batch(self._call(seeds, sizes, fanouts, expand_all, layer_seeds))

    def _call(self, seeds: torch.Tensor, sizes: List[int], fanouts: List[int], expand_all: bool,
              layer_seeds: List[int]) -> tuple:
        """The native call: sample_neighbors' outputs for one batch, sample_neighbors_many's
        (packed, with their layout) for more."""
        args = (self._rowptr, self._col, self._weight, self._edge_of_position, seeds)
        options = (expand_all, self.replace, self.deterministic)
        if len(sizes) == 1:
            return torch.ops.fastgnn.sample_neighbors(*args, fanouts, layer_seeds, *options)
        return torch.ops.fastgnn.sample_neighbors_many(*args, sizes, fanouts, layer_seeds,
                                                       *options)

    def sample_blocks(self, seeds, generator: Optional[torch.Generator] = None) -> SampledBlocks:
        """One block per layer, input layer first; ``seeds`` (unique node ids) are the last
        block's destinations. ``generator`` (a CPU torch.Generator) makes it reproducible."""
        seeds = self._seeds(seeds)
        return self._blocks_many(seeds, [seeds.numel()], generator)[0]

    def sample_blocks_many(self, seeds: Sequence[torch.Tensor],
                           generator: Optional[torch.Generator] = None) -> List[SampledBlocks]:
        """``sample_blocks`` for each seed tensor of ``seeds`` (batches of any sizes, each its
        own local numbering) in one native call: equal to ``[sample_blocks(s, generator) for s
        in seeds]``, which draws once from ``generator`` per batch, in order (on the GPU with
        ``deterministic=True``)."""
        packed, sizes = self._seed_batches(seeds)
        return self._blocks_many(packed, sizes, generator) if sizes else []

    def _blocks_many(self, seeds: torch.Tensor, sizes: List[int],
                     generator: Optional[torch.Generator]) -> List[SampledBlocks]:
        """sample_blocks_many of packed seeds on the sampler's device (the loader's shard)."""
        return [self._blocks(*sampled)
                for sampled in self._sample(seeds, sizes, self.fanouts[::-1], True, generator)]

    def _blocks(self, rowptrs, cols, edge_ids, nodes) -> SampledBlocks:
        # Sampled layer l (from the seeds outwards) is block L - 1 - l. Its sources are the
        # first nodes of the list, as many as layer l + 1's rows (every node known then), the
        # outermost layer's all of them. (One loop: the zips it replaces cost a batch 1 us.)
        blocks = []
        num_src = nodes.numel()
        for l in range(len(rowptrs) - 1, -1, -1):
            blocks.append(Block(rowptrs[l], cols[l], nodes, num_src, edge_ids[l],
                                self.fanouts[len(blocks)]))
            num_src = rowptrs[l].numel() - 1
        return SampledBlocks(blocks)

    def sample_subgraph(self, seeds, generator: Optional[torch.Generator] = None,
                        hops: Optional[Sequence[int]] = None) -> SampledSubgraph:
        """PyG's mini-batch: hop ``h`` draws ``hops[h]`` neighbours (default: the fanouts from
        the seeds outwards) for the nodes hop ``h - 1`` discovered only, and every hop's edges
        form one graph over all sampled nodes."""
        seeds = self._seeds(seeds)
        return self._subgraphs_many(seeds, [seeds.numel()], generator, hops)[0]

    def sample_subgraph_many(self, seeds: Sequence[torch.Tensor],
                             generator: Optional[torch.Generator] = None,
                             hops: Optional[Sequence[int]] = None) -> List[SampledSubgraph]:
        """``sample_subgraph`` for each seed tensor of ``seeds`` in one native call, as
        ``sample_blocks_many`` does for blocks."""
        packed, sizes = self._seed_batches(seeds)
        return self._subgraphs_many(packed, sizes, generator, hops) if sizes else []

    def _subgraphs_many(self, seeds: torch.Tensor, sizes: List[int],
                        generator: Optional[torch.Generator],
                        hops: Optional[Sequence[int]] = None) -> List[SampledSubgraph]:
        hops = list(reversed(self.fanouts)) if hops is None else _check_fanouts(hops)
        return [_subgraph(*sampled, hops)
                for sampled in self._sample(seeds, sizes, hops, False, generator)]


def _subgraph(rowptrs, cols, edge_ids, nodes, hops: List[int]) -> SampledSubgraph:
    # Hop h's rows are the nodes hop h - 1 added (the seeds for hop 0); the last hop's new
    # nodes are the rest of the list.
    num_nodes = [rowptr.numel() - 1 for rowptr in rowptrs]
    num_nodes.append(nodes.numel() - sum(num_nodes))
    num_edges = [c.numel() for c in cols]
    graph = _union_csr(rowptrs, cols, nodes.numel(), num_edges, ("subgraph",) + tuple(hops))
    return SampledSubgraph(graph, nodes, torch.cat([_tensor_of(ids) for ids in edge_ids]),
                           num_nodes, num_edges)


def _union_csr(rowptrs: List[torch.Tensor], cols: List[torch.Tensor], num_nodes: int,
               num_edges: List[int], kind: tuple) -> _SampledGraph:
    """The hops' CSRs stacked: hop h's rows are the nodes hop h - 1 added, consecutive after
    the previous hop's, so the union is their row pointers shifted by the edges before them;
    the last hop's new nodes get empty rows."""
    total = sum(num_edges)
    dtype = torch.int32 if max(total, num_nodes) < 2**31 - 1 else torch.int64
    parts, offset, rows = [], 0, 0
    for rowptr, count in zip(rowptrs, num_edges):
        parts.append(rowptr[:-1].to(dtype) + offset)
        offset += count
        rows += rowptr.numel() - 1
    device = rowptrs[0].device
    parts.append(torch.full((num_nodes - rows + 1,), total, dtype=dtype, device=device))
    col = torch.cat([c.to(dtype) for c in cols])
    return _sampled(torch.cat(parts), col, num_nodes, kind)


_INT64_MAX = 2**63 - 1  # the native ops take fanouts as int64


def _check_fanouts(fanouts) -> List[int]:
    if isinstance(fanouts, (int, torch.Tensor)) or not hasattr(fanouts, "__iter__"):
        raise TypeError(f"fanouts must be a sequence of ints, got {type(fanouts).__name__}")
    fanouts = list(fanouts)
    if not fanouts:
        raise ValueError("fanouts must name at least one layer")
    for f in fanouts:
        if isinstance(f, bool) or not isinstance(f, int) or not -1 <= f <= _INT64_MAX:
            raise ValueError(f"fanouts must be ints in [-1, 2**63 - 1] (-1: all neighbours), "
                             f"got {fanouts}")
    return fanouts
