"""Mini-batch loading: seeds split into batches (shuffled per epoch, sharded per rank), their
neighbourhoods sampled, features and labels gathered, the next batches prepared while the
current step runs.
"""
from __future__ import annotations

import atexit
import importlib.util
import math
import queue
import threading
import weakref
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch

from fastgnn import _validate
from fastgnn.graph import Graph
from fastgnn.sampling.sampler import Block, NeighborSampler

LAYOUTS = ("blocks", "subgraph")


@dataclass
class MiniBatch:
    """One mini-batch. ``seeds`` are the output nodes (global ids) and ``y`` their labels.

    ``layout="blocks"``: ``blocks`` holds one bipartite Graph per layer (input layer first) and
    ``x`` the features of ``blocks[0].src_ids``. ``layout="subgraph"`` (PyG's mini-batches):
    ``graph`` is every hop's edges over ``node_ids`` (seeds first), ``x`` their features; run
    the whole model on it and keep the first ``batch_size`` outputs.

    ``edge_attr`` holds the sampled edges' features when the loader has ``edge_features``: one
    tensor aligned with ``edge_index`` (subgraph), or one per block, input layer first, aligned
    with each block's CSR edges (blocks).
    """
    seeds: torch.Tensor
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    blocks: List[Block] = field(default_factory=list)
    graph: Optional[Graph] = None
    node_ids: Optional[torch.Tensor] = None
    edge_ids: Optional[torch.Tensor] = None
    edge_attr: Union[torch.Tensor, List[torch.Tensor], None] = None
    # (graph, its registered edge_index): a field, so that Lightning's batch transfer, which
    # deep-copies a dataclass's other attributes, keeps it as it is (init=False: not moved).
    _edge_index_of: Optional[Tuple[Graph, torch.Tensor]] = field(
        default=None, init=False, repr=False, compare=False)

    @property
    def batch_size(self) -> int:
        return self.seeds.numel()

    @property
    def input_nodes(self) -> torch.Tensor:
        return self.blocks[0].src_ids if self.blocks else self.node_ids

    @property
    def edge_index(self) -> torch.Tensor:
        """The subgraph's ``[2, E]`` edges (local ids, CSR order), registered with fastgnn's
        PyG structure cache so that enabled layers use ``graph`` without building it again."""
        if self.graph is None:
            raise AttributeError("edge_index exists for layout='subgraph' only")
        memo = self._edge_index_of
        if memo is None or memo[0] is not self.graph:  # a copy moved to another device
            memo = (self.graph, _edge_index_for_layers(self.graph))
            self._edge_index_of = memo
        return memo[1]


_HAS_PYG = importlib.util.find_spec("torch_geometric") is not None


def _edge_index_for_layers(graph: Graph) -> torch.Tensor:
    if not _HAS_PYG:
        return graph.edge_index()  # no PyG layer could read a registration
    from fastgnn.pyg.sampler import registered_edge_index
    return registered_edge_index(graph)


def gather(storage: Optional[torch.Tensor], index: torch.Tensor, device: torch.device,
           pin: bool = False) -> Optional[torch.Tensor]:
    """``storage[index]`` on ``device``: gathered where ``storage`` lives (GPU storage: on the
    GPU; CPU or pinned storage: on the CPU, through a pinned buffer with an asynchronous copy
    when ``pin``)."""
    if storage is None:
        return None
    rows = storage.index_select(0, index.to(storage.device))
    if rows.device.type == "cpu" and pin and device.type == "cuda":
        rows = rows.pin_memory()
    return rows.to(device, non_blocking=pin)  # a no-op for rows already there


def _resolve_rank(rank: Optional[int], world_size: Optional[int]):
    if rank is None and world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError("give both rank and world_size, or neither")
    world_size = _validate.count("world_size", world_size)
    rank = _validate.count("rank", rank)
    if world_size < 1 or rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank}, "
                         f"world_size={world_size}")
    return rank, world_size


class NeighborLoader:
    """Iterates over mini-batches of ``seeds`` with their sampled neighbourhoods.

    A plain iterable with ``__len__`` (what Lightning and ``for`` loops take), like a
    ``torch.utils.data.DataLoader`` with ``batch_size``, ``shuffle`` and ``drop_last``. Under
    ``torch.distributed`` (or with explicit ``rank``/``world_size``) each rank takes a disjoint
    share of the (shuffled) seeds of equal size, as ``DistributedSampler`` does: padded by
    repeating seeds, or trimmed with ``drop_last``. The shuffle follows ``seed`` and the epoch
    (``set_epoch``, or one more per pass), so every rank agrees on it.

    Sampling and gathering of the next ``prefetch`` batches run on a background thread (on a
    side CUDA stream for GPU work) while the current batch is used; ``prefetch=0`` does it
    inline. The sampler draws ``batches_per_call`` batches at once (one native call, whose host
    work they share), then they are gathered and delivered one by one; the batches are the same
    for any ``batches_per_call``.

    Args:
        graph: the fastgnn.Graph to sample from (see :class:`NeighborSampler` for devices).
        fanouts: neighbours per layer, input layer first (``dgl.dataloading`` order).
        seeds: output node ids, or a boolean mask over the nodes.
        features, labels: node features ``[N, F]`` and labels ``[N]`` on the CPU (pinned for
            fast copies) or the GPU; gathered for each batch.
        edge_features: ``[E, *]`` edge features in the order of the edges ``graph`` was built
            from (a PyG ``edge_attr``); gathered for each batch's sampled edges into
            ``MiniBatch.edge_attr``.
        device: where batches are delivered (default: the sampler's device).
        layout: ``"blocks"`` (one Graph per layer) or ``"subgraph"`` (PyG's one graph).
        build_transpose: build each batch graph's transposed CSR with the batch (on the
            background thread when prefetching), so that the training step's backward finds
            it; turn it off for loaders used without gradients.
        batches_per_call: batches sampled by one call. A call's host work (GPU) and its
            threads' synchronisation (CPU: a batch per thread, no barrier inside a batch) are
            shared by its batches. Their outputs share memory until the last of them is freed.
        sampler_options: ``replace``, ``weight``, ``edge_dir``, ``deterministic`` and
            ``device`` of the :class:`NeighborSampler`.
    """

    def __init__(self, graph: Graph, fanouts: Sequence[int], seeds, *, batch_size: int = 1,
                 shuffle: bool = False, drop_last: bool = False,
                 features: Optional[torch.Tensor] = None, labels: Optional[torch.Tensor] = None,
                 edge_features: Optional[torch.Tensor] = None, device=None,
                 layout: str = "blocks", prefetch: int = 2, seed: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 build_transpose: bool = True, batches_per_call: int = 8,
                 **sampler_options):
        _validate.choice("layout", layout, LAYOUTS)
        # not "sampler": Lightning reads that name as a torch DataLoader's index sampler
        self.neighbor_sampler = NeighborSampler(graph, fanouts, **sampler_options)
        self.seeds = self._seed_ids(seeds, graph.num_dst_nodes)
        self.batch_size = _validate.count("batch_size", batch_size)
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.prefetch = _validate.count("prefetch", prefetch)
        for name, value in (("features", features), ("labels", labels)):
            if value is not None:
                _validate.tensor(name, value)
                if value.dim() == 0 or value.size(0) != graph.num_src_nodes:
                    raise ValueError(f"{name} must have one row per node "
                                     f"({graph.num_src_nodes}), got shape {list(value.shape)}")
        if edge_features is not None:
            _validate.tensor("edge_features", edge_features)
            if edge_features.dim() == 0 or edge_features.size(0) != graph.num_edges:
                raise ValueError(f"edge_features must have one row per edge ({graph.num_edges}), "
                                 f"got shape {list(edge_features.shape)}")
        self.features, self.labels, self.edge_features = features, labels, edge_features
        self.device = (_validate.device("device", device) if device is not None
                       else self.neighbor_sampler.device)
        self.layout = layout
        self.build_transpose = bool(build_transpose)
        self.batches_per_call = _validate.count("batches_per_call", batches_per_call)
        if self.batches_per_call < 1:
            raise ValueError("batches_per_call must be at least 1")
        self.seed = int(seed)
        self.epoch = 0
        self._rank = _resolve_rank(rank, world_size) if (rank, world_size) != (None, None) \
            else None

    @staticmethod
    def _seed_ids(seeds, num_nodes: int) -> torch.Tensor:
        seeds = torch.as_tensor(seeds)
        if seeds.dtype == torch.bool:
            if seeds.numel() != num_nodes:
                raise ValueError(f"a seed mask needs one entry per node ({num_nodes}), got "
                                 f"{seeds.numel()}")
            seeds = seeds.nonzero().view(-1)
        _validate.integer_tensor("seeds", seeds)
        if seeds.dim() != 1:
            raise ValueError(f"seeds must be 1-D, got shape {list(seeds.shape)}")
        seeds = seeds.to("cpu", torch.int64)
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= num_nodes):
            raise ValueError(f"seeds must be node ids in [0, {num_nodes})")
        return seeds

    # ---- the epoch's share of seeds ----------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch that seeds the shuffle (as ``DistributedSampler.set_epoch``)."""
        self.epoch = int(epoch)

    def _share_size(self, world_size: int) -> int:
        n = self.seeds.numel()
        return n // world_size if self.drop_last else math.ceil(n / world_size)

    def shard(self) -> torch.Tensor:
        """This rank's seeds for the current epoch, in batch order."""
        rank, world_size = self._rank or _resolve_rank(None, None)
        order = self.seeds
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + self.epoch)
            order = order[torch.randperm(order.numel(), generator=gen)]
        total = self._share_size(world_size) * world_size
        if total > order.numel():  # pad by repeating, as DistributedSampler does
            repeats = math.ceil(total / max(order.numel(), 1))
            order = order.repeat(repeats)
        return order[:total][rank::world_size]

    def __len__(self) -> int:
        _, world_size = self._rank or _resolve_rank(None, None)
        share = self._share_size(world_size)
        return share // self.batch_size if self.drop_last else math.ceil(share / self.batch_size)

    # ---- batches -----------------------------------------------------------------------------
    def _batches(self, shard: torch.Tensor, generator: torch.Generator) -> Iterator[MiniBatch]:
        starts = range(0, len(self) * self.batch_size, self.batch_size)
        for first in range(0, len(starts), self.batches_per_call):
            group = starts[first:first + self.batches_per_call]
            end = min(group[-1] + self.batch_size, shard.numel())
            sizes = [min(self.batch_size, end - start) for start in group]
            yield from self._load(shard[group[0]:end], sizes, generator)

    def load(self, seeds: torch.Tensor, generator: Optional[torch.Generator] = None) -> MiniBatch:
        """Samples and gathers the mini-batch of ``seeds`` (what iteration does per batch)."""
        seeds = self.neighbor_sampler._seeds(seeds)
        return next(self._load(seeds, [seeds.numel()], generator))

    def _load(self, seeds: torch.Tensor, sizes: List[int],
              generator: Optional[torch.Generator]) -> Iterator[MiniBatch]:
        """The mini-batches of ``seeds`` (on the sampler's device, ``sizes[b]`` of them batch
        b's), sampled in one call, then gathered one by one as they are asked for."""
        sampler = self.neighbor_sampler
        if self.layout == "blocks":
            for sampled in sampler._blocks_many(seeds, sizes, generator):
                yield self._finish(self._blocks_batch(sampled))
        else:
            for sub, size in zip(sampler._subgraphs_many(seeds, sizes, generator), sizes):
                yield self._finish(self._subgraph_batch(sub, size))

    def _blocks_batch(self, sampled) -> MiniBatch:
        pin = self.device.type == "cuda"
        blocks = sampled.to(self.device, pin).blocks
        batch = MiniBatch(blocks[-1].dst_ids, blocks=blocks)
        if self.edge_features is not None:
            batch.edge_attr = [gather(self.edge_features, b.edge_ids, self.device, pin)
                               for b in blocks]
        return batch

    def _subgraph_batch(self, sub, batch_size: int) -> MiniBatch:
        pin = self.device.type == "cuda"
        nodes = sub.node_ids.to(self.device, non_blocking=pin)
        batch = MiniBatch(nodes[:batch_size], graph=sub.graph.to(self.device, pin),
                          node_ids=nodes, edge_ids=sub.edge_ids.to(self.device))
        batch.edge_attr = gather(self.edge_features, sub.edge_ids, self.device, pin)
        return batch

    def _finish(self, batch: MiniBatch) -> MiniBatch:
        """Gathers the batch's features and labels, and prepares it for the step."""
        pin = self.device.type == "cuda"
        batch.x = gather(self.features, batch.input_nodes, self.device, pin)
        batch.y = gather(self.labels, batch.seeds, self.device, pin)
        self._prepare(batch)
        return batch

    def _prepare(self, batch: MiniBatch) -> None:
        """Builds what the training step would otherwise derive from each new batch graph
        in its own host time: the registered edge_index (subgraph layout) and the transpose."""
        if batch.graph is not None:
            _ = batch.edge_index  # registered here, with the graph that the layers then use
        if self.build_transpose:
            for graph in batch.blocks or [batch.graph]:
                if graph.cache_transpose:
                    graph.transpose()

    def __iter__(self) -> Iterator[MiniBatch]:
        # On the sampler's device once an epoch, not one host-to-GPU copy of seeds per batch;
        # contiguous, so that any run of batches is one packed tensor of seeds.
        shard = self.shard().to(self.neighbor_sampler.device).contiguous()
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        batches = self._batches(shard, generator)
        if self.prefetch == 0:
            return batches
        return _Prefetcher(batches, self.prefetch, self.device)


class _Producer:
    """The background thread's side of a prefetcher: fills a bounded queue with
    ``(batch, event)`` pairs (then ``_DONE``, or the exception it met) until told to stop.
    It holds no reference to the prefetcher, so dropping the prefetcher closes it."""

    def __init__(self, depth: int, stream):
        self.queue: "queue.Queue" = queue.Queue(maxsize=depth)
        self.stream = stream
        self.stop = threading.Event()

    def run(self, batches: Iterator[MiniBatch]) -> None:
        try:
            if self.stream is not None:
                with torch.cuda.stream(self.stream):
                    self._fill(batches)
            else:
                self._fill(batches)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(exc)
        self._put(_DONE)

    def _fill(self, batches: Iterator[MiniBatch]) -> None:
        for batch in batches:
            event = None
            if self.stream is not None:
                event = torch.cuda.Event()
                event.record(self.stream)
            if not self._put((batch, event)):
                return

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


_DONE = object()
_live_prefetchers: "weakref.WeakSet[_Prefetcher]" = weakref.WeakSet()


@atexit.register
def _close_live_prefetchers() -> None:
    """Joins every producer thread before the interpreter finalises: a daemon thread still in
    a native kernel then is killed in the middle of C++ frames, which aborts the process
    ("terminate called without an active exception")."""
    for prefetcher in list(_live_prefetchers):
        prefetcher.close()


class _Prefetcher:
    """Runs a batch iterator on a background thread, ``depth`` batches ahead; GPU work there
    goes to a side stream that the consumer's stream waits for. ``close`` (also on garbage
    collection and at interpreter exit) stops the thread and joins it."""

    def __init__(self, batches: Iterator[MiniBatch], depth: int, device: torch.device):
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._producer = _Producer(depth, stream)
        self._thread = threading.Thread(target=self._producer.run, args=(batches,), daemon=True)
        self._thread.start()
        _live_prefetchers.add(self)

    def __iter__(self):
        return self

    def __next__(self) -> MiniBatch:
        item = self._producer.queue.get()
        if item is _DONE:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        batch, event = item
        if event is not None:
            current = torch.cuda.current_stream(self._producer.stream.device)
            current.wait_event(event)
            _record_stream(batch, current)
        return batch

    def close(self) -> None:
        """Stops the producer and waits for it (it finishes the batch in hand)."""
        thread = getattr(self, "_thread", None)  # None: __init__ failed before starting it
        if thread is None:
            return
        self._producer.stop.set()
        if thread is not threading.current_thread():
            thread.join()

    def __del__(self):
        self.close()


def _record_stream(batch: MiniBatch, stream) -> None:
    """Tells the caching allocator that the consumer's stream uses the batch's tensors."""
    tensors = [batch.seeds, batch.x, batch.y, batch.node_ids, batch.edge_ids]
    tensors += batch.edge_attr if isinstance(batch.edge_attr, list) else [batch.edge_attr]
    if batch._edge_index_of is not None:
        tensors.append(batch._edge_index_of[1])
    for graph in batch.blocks + ([batch.graph] if batch.graph is not None else []):
        tensors += graph.tensors()  # a block's: its ids too, without cutting them
    for t in tensors:
        if t is not None and t.is_cuda:
            t.record_stream(stream)
