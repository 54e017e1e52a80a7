"""Several mini-batches per sampling call: ``sample_blocks_many``, ``sample_subgraph_many`` and
the ``sample_neighbors_many`` op give each batch exactly what sampling it alone gives (on the
CPU, and on the GPU with deterministic numbering), and the loader's batches do not depend on
``batches_per_call``."""
from __future__ import annotations

import pytest
import torch

from fastgnn.sampling import NeighborLoader, NeighborSampler, SampledBlocks
from tests.conftest import devices, random_graph
from tests.test_sampling import (_check_blocks, _graph, _hub_graph, _large_graph,
                                 _sample_neighbors, _subgraph_on_cpu, _subgraphs_equal)

# A last short batch, an empty one, a single node.
SIZES = [300, 300, 300, 57, 0, 1]


def _seed_batches(num_nodes, sizes, seed=0):
    """Batches of unique nodes; different batches may share nodes."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randperm(num_nodes, generator=gen)[:size] for size in sizes]


def _one_at_a_time(sample, seeds, seed, **kwargs):
    """[sample(s, generator) for s in seeds] and the generator afterwards."""
    gen = torch.Generator().manual_seed(seed)
    return [sample(s, gen, **kwargs) for s in seeds], gen


def _assert_blocks_equal(want, got):
    """Lists of SampledBlocks: the same tensors, dtypes included (``got`` may be on the GPU)."""
    assert len(want) == len(got)
    for a, b in zip(want, got):
        assert len(a.blocks) == len(b.blocks)
        for x, y in zip(a.blocks, b.blocks):
            assert x.fanout == y.fanout and x.num_src_nodes == y.num_src_nodes
            assert x.num_dst_nodes == y.num_dst_nodes and x.num_edges == y.num_edges
            assert y.src_ids.numel() == y.num_src_nodes and y.edge_ids.numel() == y.num_edges
            for t, u in ((x.rowptr, y.rowptr), (x.col, y.col), (x.src_ids, y.src_ids),
                         (x.dst_ids, y.dst_ids), (x.edge_ids, y.edge_ids)):
                assert t.dtype == u.dtype and torch.equal(t.cpu(), u.cpu())


def _assert_same_draws(gen_a, gen_b):
    """Both generators made the same number of draws."""
    assert torch.equal(torch.randint(0, 2**62, (4,), generator=gen_a),
                       torch.randint(0, 2**62, (4,), generator=gen_b))


def _weight(g, weighted):
    if not weighted:
        return None
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(2))
    weight[::3] = 0  # never drawn
    return weight


def _on(weight, device):
    return None if weight is None else weight.to(device)


# ---- blocks and subgraphs: each batch as it is sampled alone -----------------------------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("fanouts", [[5, 10], [3, 0, 4], [4, -1], [600, 2]])
@pytest.mark.parametrize("replace,weighted", [(False, False), (True, False), (False, True),
                                              (True, True)])
def test_blocks_many_equal_one_at_a_time(device, fanouts, replace, weighted):
    """Mixed batch sizes (a short last batch, an empty and a one-node batch); fanout -1 and 600
    (rows past the GPU's warp sort: one batch at a time there); one generator draw per batch, in
    order; on the GPU also equal to the CPU's."""
    g, _ = _hub_graph()
    weight = _weight(g, weighted)
    seeds = _seed_batches(2000, SIZES)
    cpu = NeighborSampler(g, fanouts, replace=replace, weight=weight)
    want, want_gen = _one_at_a_time(cpu.sample_blocks, seeds, 9)
    sampler = NeighborSampler(g.to(device), fanouts, replace=replace,
                              weight=_on(weight, device))
    gen = torch.Generator().manual_seed(9)
    got = sampler.sample_blocks_many([s.to(device) for s in seeds], gen)
    _assert_blocks_equal(want, got)
    _assert_same_draws(want_gen, gen)
    if device != "cpu":
        alone, _ = _one_at_a_time(sampler.sample_blocks, seeds, 9)
        _assert_blocks_equal(alone, got)


@pytest.mark.gpu
@pytest.mark.parametrize("fanouts,deterministic", [
    pytest.param([5, 10], True, marks=pytest.mark.sanitize), ([32, 3], True), ([5, 10], False),
    ([32, 3], False)])
def test_gpu_rows_by_lane_equal_the_cpu(fanouts, deterministic):
    """Enough batches a call that the outer layer's rows fill the GPU a lane each (a lane per
    row there; the seeds' layer keeps a warp per row): every batch as the CPU samples it alone
    (deterministic numbering), or valid blocks with the CPU's edge counts (unordered: a node's
    draws follow its id, so the outer layer reaches other nodes)."""
    g, ei = _hub_graph()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    resident = props.multi_processor_count * props.max_threads_per_multi_processor
    size = 300
    outer_rows = size * (1 + fanouts[-1])  # the host's bound on the outer layer's seeds
    count = 2 * resident // outer_rows + 1
    assert size * count < resident <= outer_rows * count  # seeds' layer by warp, outer by lane
    seeds = [torch.randperm(2000, generator=torch.Generator().manual_seed(b))[:size]
             for b in range(count)]
    want, _ = _one_at_a_time(NeighborSampler(g, fanouts).sample_blocks, seeds, 3)
    sampler = NeighborSampler(g.cuda(), fanouts, deterministic=deterministic)
    got = sampler.sample_blocks_many([s.cuda() for s in seeds], torch.Generator().manual_seed(3))
    if deterministic:
        _assert_blocks_equal(want, got)
        return
    for a, b in zip(want, got):
        # The seeds' rows keep their order: their sizes are the CPU's.
        assert torch.equal(a.blocks[-1].rowptr.long(), b.blocks[-1].rowptr.long().cpu())
        for x, y in zip(a.blocks, b.blocks):
            assert x.num_edges == y.num_edges and x.num_dst_nodes == y.num_dst_nodes
            assert torch.unique(y.src_ids).numel() == y.num_src_nodes
            rowptr, ids = y.rowptr.long().cpu(), y.edge_ids.cpu()
            assert torch.equal(ei[0][ids], y.src_ids.cpu()[y.col.long().cpu()])  # real edges
            assert torch.equal(ei[1][ids], torch.repeat_interleave(y.dst_ids.cpu(), rowptr.diff()))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("fanouts", [[4, 6], [3, -1]])
def test_blocks_many_out_edges(device, fanouts):
    g, ei = _hub_graph()
    seeds = _seed_batches(2000, [200, 13, 0])
    want, _ = _one_at_a_time(NeighborSampler(g, fanouts, edge_dir="out").sample_blocks, seeds, 4)
    sampler = NeighborSampler(g.to(device), fanouts, edge_dir="out")
    got = sampler.sample_blocks_many(seeds, torch.Generator().manual_seed(4))
    _assert_blocks_equal(want, got)
    for batch, s in zip(got, seeds):
        _check_blocks(g, ei, batch.to("cpu").blocks, s, fanouts, False, "out")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("fanouts", [[5, 3], [2, -1, 3]])
def test_subgraph_many_equal_one_at_a_time(device, fanouts):
    g, _ = _hub_graph()
    seeds = _seed_batches(2000, SIZES)
    want, want_gen = _one_at_a_time(NeighborSampler(g, [1]).sample_subgraph, seeds, 5,
                                    hops=fanouts)
    gen = torch.Generator().manual_seed(5)
    got = NeighborSampler(g.to(device), [1]).sample_subgraph_many(seeds, gen, hops=fanouts)
    assert len(got) == len(want)
    assert all(_subgraphs_equal(w, _subgraph_on_cpu(s)) for w, s in zip(want, got))
    _assert_same_draws(want_gen, gen)


def test_many_thread_count_does_not_change_blocks():
    """A batch per thread (several batches) or each batch's loops in parallel (one)."""
    g, _ = random_graph(3000, 30000, seed=4)
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(0))
    seeds = _seed_batches(3000, [2500, 1200, 2500, 7])
    sampler = NeighborSampler(g, [8, 10], weight=weight)
    want, _ = _one_at_a_time(sampler.sample_blocks, seeds, 5)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            _assert_blocks_equal(want, sampler.sample_blocks_many(
                seeds, torch.Generator().manual_seed(5)))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("device", devices())
def test_many_local_ids_follow_the_largest_batch(device):
    """Three fanouts of 512 bound the last layer of a 20-seed batch past 2^31 nodes (int64
    local ids), not a 5-seed batch's: packed together, both get int64 ids, equal in value."""
    g, _ = random_graph(3000, 30000, seed=4)
    seeds = _seed_batches(3000, [5, 20])
    sampler = NeighborSampler(g.to(device), [512, 512, 512])
    want, _ = _one_at_a_time(sampler.sample_blocks, seeds, 2)
    got = sampler.sample_blocks_many(seeds, torch.Generator().manual_seed(2))
    assert want[0].blocks[0].col.dtype == torch.int32
    for a, b in zip(want, got):
        assert b.blocks[0].col.dtype == torch.int64 and b.blocks[1].col.dtype == torch.int32
        for x, y in zip(a.blocks, b.blocks):
            assert torch.equal(x.rowptr.long().cpu(), y.rowptr.long().cpu())
            assert torch.equal(x.col.long().cpu(), y.col.long().cpu())
            assert torch.equal(x.src_ids.cpu(), y.src_ids.cpu())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("edge_dir,replace,weighted", [("in", False, False), ("in", True, True),
                                                       ("out", False, True)])
def test_ids_cut_when_first_read_in_any_order(device, edge_dir, replace, weighted):
    """A packed call's blocks cut their sources and edge ids from the call's outputs when first
    read: read last batch first, after the other batches are gone, or through a move, they are
    what sampling each batch alone gives; before that, the block's tensors() (what a stream
    records) already hold their storage."""
    g, _ = _hub_graph()
    weight = _weight(g, weighted)
    fanouts = [4, -1, 3]
    seeds = _seed_batches(2000, SIZES)
    cpu = NeighborSampler(g, fanouts, replace=replace, weight=weight, edge_dir=edge_dir)
    want, _ = _one_at_a_time(cpu.sample_blocks, seeds, 3)
    sampler = NeighborSampler(g.to(device), fanouts, replace=replace, weight=_on(weight, device),
                              edge_dir=edge_dir)
    got = sampler.sample_blocks_many([s.to(device) for s in seeds],
                                     torch.Generator().manual_seed(3))
    for block in got[2].blocks:  # cut before reading, through the packed call's storage
        storages = {t.untyped_storage().data_ptr() for t in block.tensors()}
        for ids in (block.src_ids, block.edge_ids):
            assert ids.untyped_storage().data_ptr() in storages
    kept = [got[-1], SampledBlocks([b.to("cpu") for b in got[1].blocks])]
    del got  # the other batches' blocks, and the packed outputs' other references
    _assert_blocks_equal([want[-1], want[1]], kept)


# ---- the op: packed outputs and their layout -----------------------------------------------
def _with_gaps(outputs, gap):
    """sample_neighbors_many's outputs with ``gap`` filler entries after every batch's part,
    the layout's offsets moved to match: what the GPU's packing (parts at the offsets of their
    bounds) looks like, from the CPU's gapless outputs."""
    rowptrs, cols, edge_ids, nodes, layout = outputs
    layers = len(rowptrs)
    moved = layout.clone()

    def spread(packed, offset_column, length_column, extra):
        parts = []
        for b in range(layout.size(0)):
            start = int(layout[b, offset_column])
            moved[b, offset_column] = start + b * gap
            parts += [packed[start:start + int(layout[b, length_column]) + extra],
                      torch.full((gap,), -7, dtype=packed.dtype)]
        return torch.cat(parts)
    new_rowptrs = [spread(r, 4 * l, 4 * l + 1, 1) for l, r in enumerate(rowptrs)]
    new_cols = [spread(c, 4 * l + 2, 4 * l + 3, 0) for l, c in enumerate(cols)]
    new_edge_ids = [spread(e, 4 * l + 2, 4 * l + 3, 0) for l, e in enumerate(edge_ids)]
    return new_rowptrs, new_cols, new_edge_ids, spread(nodes, 4 * layers, 4 * layers + 1, 0), moved


@pytest.mark.parametrize("gap", [0, 5])
def test_packed_outputs_with_gaps_cut_into_the_batches(gap):
    """Batches cut from packed outputs with gaps between the parts (the GPU's) equal those cut
    from gapless ones (the CPU's), structure and ids."""
    from fastgnn.sampling.sampler import _per_batch
    g, _ = _hub_graph()
    sampler = NeighborSampler(g, [3, -1])
    sizes = [300, 0, 57, 1]
    seeds = torch.cat(_seed_batches(2000, sizes))
    layer_seeds = list(range(len(sizes) * 2))
    outputs = sampler._call(seeds, sizes, [-1, 3], True, layer_seeds)
    want = [sampler._blocks(*batch) for batch in _per_batch(outputs)]
    got = [sampler._blocks(*batch) for batch in _per_batch(_with_gaps(outputs, gap))]
    _assert_blocks_equal(want, got)


def _layout(starts_and_lengths):
    """A layout of one (start, length) pair a batch, in columns 0 and 1."""
    return torch.tensor(starts_and_lengths, dtype=torch.int64).reshape(-1, 2)


@pytest.mark.parametrize("device", devices())
def test_cut_packed_parts_alias_the_packed_output(device):
    """fastgnn._C.cut_packed's parts are the slices the layout names (gaps left out, a length
    plus its extra), in the packed storage and sharing its version counter."""
    from fastgnn import _native
    packed = torch.arange(30, dtype=torch.int32, device=device)[2:]
    layout = _layout([[0, 3], [7, 0], [10, 5], [20, 7]])
    parts = _native._C.cut_packed(packed, layout, 0, 1, 1)
    assert isinstance(parts, tuple) and len(parts) == 4
    for part, (start, length) in zip(parts, layout.tolist()):
        assert torch.equal(part, packed[start:start + length + 1])
        assert part.device == packed.device and part.dtype == packed.dtype
        assert part.untyped_storage().data_ptr() == packed.untyped_storage().data_ptr()
    packed.add_(100)
    assert int(parts[2][0]) == int(packed[10]) and parts[2]._version == packed._version
    with torch.inference_mode():
        frozen = torch.arange(10, device=device)
        (part,) = _native._C.cut_packed(frozen, _layout([[4, 2]]), 0, 1, 0)
    assert part.is_inference() and part.tolist() == [4, 5]


@pytest.mark.parametrize("args, error, match", [
    (("not a tensor", _layout([[0, 1]]), 0, 1, 0), TypeError, "must be tensors"),
    ((torch.zeros(2, 3), _layout([[0, 1]]), 0, 1, 0), ValueError, "1-D contiguous"),
    ((torch.zeros(4, requires_grad=True), _layout([[0, 1]]), 0, 1, 0), ValueError,
     "outside autograd"),
    ((torch.zeros(4), _layout([[0, 1]]).int(), 0, 1, 0), ValueError, "int64 CPU"),
    ((torch.zeros(4), _layout([[0, 1]]), 0, 2, 0), ValueError, "past the layout's width 2"),
    ((torch.zeros(4), _layout([[0, 1], [3, 1]]), 0, 1, 1), ValueError,
     r"batch 1's part \[3, \+2\) is outside the packed output of 4"),
    ((torch.zeros(4), _layout([[-1, 1]]), 0, 1, 0), ValueError, "batch 0's part"),
])
def test_cut_packed_rejects_bad_input(args, error, match):
    from fastgnn import _native
    with pytest.raises(error, match=match):
        _native._C.cut_packed(*args)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("fanouts", [[3, 5], [2, -1, 3]])
@pytest.mark.parametrize("expand_all", [True, False])
def test_op_layout_locates_each_batch(device, fanouts, expand_all):
    """Batch b's parts of the packed outputs, where layout[b] says, are sample_neighbors' for
    it alone (edge ids through an edge map); batches may share nodes."""
    g, _ = _hub_graph()
    edge_map = torch.randperm(g.num_edges, generator=torch.Generator().manual_seed(7))
    seeds = _seed_batches(2000, [40, 40, 7, 0])
    num_layers = len(fanouts)
    layer_seeds = [11 + 5 * k for k in range(len(seeds) * num_layers)]
    rowptrs, cols, edge_ids, nodes, layout = torch.ops.fastgnn.sample_neighbors_many(
        g.rowptr.to(device), g.col.to(device), None, edge_map.to(device),
        torch.cat(seeds).to(device), [s.numel() for s in seeds], fanouts, layer_seeds,
        expand_all, False, True)
    assert layout.device.type == "cpu" and layout.dtype == torch.int64
    assert layout.shape == (len(seeds), 4 * num_layers + 2)
    for b, batch in enumerate(seeds):
        want = _sample_neighbors(g, None, edge_map, batch, fanouts,
                                 layer_seeds[b * num_layers:(b + 1) * num_layers], expand_all,
                                 False, "cpu")
        row = layout[b].tolist()
        for l in range(num_layers):
            row_at, rows, edge_at, edges = row[4 * l:4 * l + 4]
            for part, (start, length) in ((0, (row_at, rows + 1)), (1, (edge_at, edges)),
                                          (2, (edge_at, edges))):
                got = (rowptrs, cols, edge_ids)[part][l][start:start + length]
                assert got.dtype == want[part][l].dtype
                assert torch.equal(got.cpu(), want[part][l])
        node_at, num_nodes = row[4 * num_layers:]
        assert torch.equal(nodes[node_at:node_at + num_nodes].cpu(), want[3])


@pytest.mark.parametrize("device", devices())
def test_op_bad_arguments(device):
    g, _ = _graph(device)
    op = torch.ops.fastgnn.sample_neighbors_many
    seeds = torch.tensor([1, 2, 3, 4], device=device)

    def call(sizes, fanouts=(2,), layer_seeds=None, s=seeds):
        layer_seeds = layer_seeds if layer_seeds is not None else [1] * len(sizes) * len(fanouts)
        return op(g.rowptr, g.col, None, None, s, sizes, list(fanouts), layer_seeds, True,
                  False, True)
    with pytest.raises(ValueError, match="add up"):
        call([2, 1])
    with pytest.raises(ValueError, match="batch_sizes"):
        call([5, -1])
    with pytest.raises(ValueError, match="batch_sizes"):
        call([], layer_seeds=[])
    with pytest.raises(ValueError, match="layer_seeds"):
        call([2, 2], layer_seeds=[1, 2, 3])
    with pytest.raises(ValueError, match="fanouts"):
        call([2, 2], fanouts=(2, -2))
    for fanouts in ((2, 3), (-1, 2)):
        with pytest.raises(ValueError, match="seeds must be node ids"):
            call([2, 2], fanouts, s=torch.tensor([1, 2, 3, 80], device=device))
        with pytest.raises(ValueError, match="unique"):
            call([2, 2], fanouts, s=torch.tensor([1, 2, 3, 3], device=device))
    call([2, 2], s=torch.tensor([1, 2, 2, 1], device=device))  # batches may share nodes


@pytest.mark.parametrize("device", devices())
def test_opcheck_many(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = _graph(device)
    seeds = torch.tensor([5, 0, 77, 12, 5, 9], device=device)
    for fanouts, expand_all in (([3, 2], True), ([-1, 2], False)):
        torch.library.opcheck(torch.ops.fastgnn.sample_neighbors_many,
                              (g.rowptr, g.col, None, None, seeds, [4, 2, 0], fanouts,
                               [7] * 3 * len(fanouts), expand_all, False, True),
                              test_utils=("test_schema", "test_faketensor"))


def test_many_bad_arguments():
    g, _ = _graph()
    sampler = NeighborSampler(g, [3])
    assert sampler.sample_blocks_many([]) == [] and sampler.sample_subgraph_many([]) == []
    with pytest.raises(ValueError, match=r"seeds\[1\] must be 1-D"):
        sampler.sample_blocks_many([torch.arange(3), torch.arange(6).view(2, 3)])
    with pytest.raises(TypeError, match=r"seeds\[0\]"):
        sampler.sample_blocks_many([torch.tensor([1.0])])
    with pytest.raises(TypeError, match="list"):
        sampler.sample_blocks_many(torch.arange(3))
    with pytest.raises(ValueError, match="unique"):
        sampler.sample_subgraph_many([torch.arange(3), torch.tensor([4, 4])])
    with pytest.raises(ValueError, match="seeds must be 1-D"):
        sampler.sample_blocks(torch.arange(6).view(2, 3))


# ---- the loader ------------------------------------------------------------------------------
def _loader_batches(graph, device, **options):
    n = graph.num_src_nodes
    x, y = torch.arange(3 * n, dtype=torch.float32).view(n, 3), torch.arange(n)
    loader = NeighborLoader(graph, [3, 4], torch.arange(0, graph.num_src_nodes, 2),
                            features=x.to(device), labels=y.to(device), **options)
    return [b for _ in range(2) for b in loader]  # two epochs


def _assert_batches_equal(want, got):
    assert len(want) == len(got)
    for a, b in zip(want, got):
        assert torch.equal(a.seeds.cpu(), b.seeds.cpu())
        assert torch.equal(a.x.cpu(), b.x.cpu()) and torch.equal(a.y.cpu(), b.y.cpu())
        if a.blocks:
            _assert_blocks_equal([SampledBlocks(a.blocks)], [SampledBlocks(b.blocks)])
        else:
            assert torch.equal(a.graph.rowptr.cpu(), b.graph.rowptr.cpu())
            assert torch.equal(a.graph.col.cpu(), b.graph.col.cpu())
            assert torch.equal(a.node_ids.cpu(), b.node_ids.cpu())
            assert torch.equal(a.edge_ids.cpu(), b.edge_ids.cpu())


@pytest.mark.parametrize("layout", ["blocks", "subgraph"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_batches_per_call_gives_the_same_batches(layout, drop_last):
    g, _ = _graph()
    options = dict(batch_size=7, shuffle=True, drop_last=drop_last, layout=layout, seed=3)
    want = _loader_batches(g, "cpu", batches_per_call=1, prefetch=0, **options)
    assert len(want) == 2 * (5 if drop_last else 6)
    for per_call, prefetch in ((2, 0), (4, 2), (8, 0)):
        got = _loader_batches(g, "cpu", batches_per_call=per_call, prefetch=prefetch, **options)
        _assert_batches_equal(want, got)


@pytest.mark.parametrize("world_size", [2, 3])
def test_loader_batches_per_call_keeps_shards(world_size):
    g, _ = _graph()
    for rank in range(world_size):
        options = dict(batch_size=4, shuffle=True, rank=rank, world_size=world_size, prefetch=0)
        _assert_batches_equal(_loader_batches(g, "cpu", batches_per_call=1, **options),
                              _loader_batches(g, "cpu", batches_per_call=3, **options))


def test_loader_batches_per_call_default_and_bad_values():
    g, _ = _graph()
    assert NeighborLoader(g, [2], torch.arange(5)).batches_per_call == 8
    for bad in (0, -2):
        with pytest.raises(ValueError, match="batches_per_call"):
            NeighborLoader(g, [2], torch.arange(5), batches_per_call=bad)


# ---- GPU: pinned graphs, large frontiers, unordered numbering, the loader's default ----------
@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("fanouts", [[2, 3], [3, -1], [0, 2]])
def test_gpu_many_small(fanouts):
    """A small case for compute-sanitizer: GPU and pinned graphs, both numberings."""
    g, ei = _graph()
    seeds = [torch.tensor([5, 0, 77]), torch.tensor([], dtype=torch.int64), torch.tensor([79]),
             torch.tensor([3, 5, 9, 12, 40])]
    want, _ = _one_at_a_time(NeighborSampler(g, fanouts).sample_blocks, seeds, 1)
    for graph in (g.cuda(), g.pin_memory()):
        got = NeighborSampler(graph, fanouts).sample_blocks_many(
            seeds, torch.Generator().manual_seed(1))
        assert got[0].blocks[0].device.type == "cuda"
        _assert_blocks_equal(want, got)
        fast = NeighborSampler(graph, fanouts, deterministic=False).sample_blocks_many(
            seeds, torch.Generator().manual_seed(1))
        for batch, s in zip(fast, seeds):
            _check_blocks(g, ei, batch.to("cpu").blocks, s, fanouts, False)


@pytest.mark.gpu
@pytest.mark.parametrize("fanouts,replace,weighted", [
    ([10, 10], False, False), ([10, 10], True, True), ([25, 2, 40], False, False),
    ([3, 512], False, True)])
def test_gpu_many_pinned_and_large_frontiers(fanouts, replace, weighted):
    """Batches of up to 2000 seeds on a 60k-node graph (scans of many tiles per batch, in
    grid rows side by side), from GPU memory and pinned host memory."""
    g, seeds = _large_graph()
    batches = [seeds[:2000], seeds[2000:3000], seeds[3000:3001], seeds[3001:]]
    weight = _weight(g, weighted)
    want, _ = _one_at_a_time(NeighborSampler(g, fanouts, replace=replace,
                                             weight=weight).sample_blocks, batches, 8)
    for graph in (g.cuda(), g.pin_memory()):
        sampler = NeighborSampler(graph, fanouts, replace=replace,
                                  weight=_on(weight, graph.device))
        _assert_blocks_equal(want, sampler.sample_blocks_many(
            batches, torch.Generator().manual_seed(8)))


@pytest.mark.gpu
def test_gpu_many_unordered_numbering_samples_valid_blocks():
    """deterministic=False: each batch's seed layer draws the CPU's edges, and every layer is
    a valid block."""
    g, ei = random_graph(3000, 30000, seed=4)
    seeds = _seed_batches(3000, [500, 500, 77])
    sampler = NeighborSampler(g.cuda(), [5, 10], deterministic=False)
    fast = sampler.sample_blocks_many(seeds, torch.Generator().manual_seed(3))
    exact, _ = _one_at_a_time(NeighborSampler(g, [5, 10]).sample_blocks, seeds, 3)
    for batch, want, s in zip(fast, exact, seeds):
        batch = batch.to("cpu")
        _check_blocks(g, ei, batch.blocks, s, [5, 10], False)
        assert torch.equal(batch.blocks[-1].in_degree, want.blocks[-1].in_degree)
        assert set(batch.blocks[-1].edge_ids.tolist()) == set(want.blocks[-1].edge_ids.tolist())


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["blocks", "subgraph"])
def test_gpu_loader_default_batches_per_call(layout):
    """A GPU loader draws 8 batches a call by default, as a CPU one does; its batches are
    those of one a call."""
    g, _ = random_graph(2000, 20000, seed=4)
    options = dict(batch_size=128, shuffle=True, layout=layout)
    for graph in (g.cuda(), g.pin_memory()):
        default = NeighborLoader(graph, [4, 4], torch.arange(2000), **options)
        assert default.batches_per_call == 8
        want = _loader_batches(graph, "cuda", batches_per_call=1, **options)
        _assert_batches_equal(want, _loader_batches(graph, "cuda", **options))

