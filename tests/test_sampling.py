"""fastgnn.sampling: the native sampler against the Python replay of its draws, exact block
properties, sampling statistics, reproducibility, and the loader (batches, shuffle, shards)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import fastgnn
from fastgnn import _validate, reference
from fastgnn.sampling import NeighborLoader, NeighborSampler
from tests.conftest import devices, random_graph

scipy_stats = pytest.importorskip("scipy.stats")

P_VALUE_FLOOR = 1e-6  # fixed seeds make each test's outcome fixed; this only guards the design


def _graph(device="cpu"):
    """Hubs, self-loops, duplicate edges, isolated nodes."""
    g, ei = random_graph(80, 600, seed=3)
    return g.to(device), ei.to(device)


def _bipartite_structure():
    """Edges only from nodes [0, 30) to nodes [30, 60), as one node space."""
    gen = torch.Generator().manual_seed(5)
    ei = torch.stack([torch.randint(0, 30, (300,), generator=gen),
                      torch.randint(30, 60, (300,), generator=gen)])
    return fastgnn.Graph.from_edge_index(ei, num_nodes=60), ei


def _edge_set(ei):
    return set(map(tuple, ei.t().tolist()))


# ---- the kernel against the reference ---------------------------------------------------------
def _reference_layers(g, weight, edge_map, seeds, fanouts, layer_seeds, expand_all, replace):
    """sample_neighbors replayed layer by layer with reference.sample_layer."""
    outputs, nodes, begin = ([], [], [], []), seeds, 0
    for fanout, seed in zip(fanouts, layer_seeds):
        rowptr, col, pos, grown = reference.sample_layer(g.rowptr, g.col, weight, nodes, begin,
                                                         fanout, replace, seed)
        edge_ids = pos if edge_map is None else edge_map[pos]
        for out, value in zip(outputs, (rowptr, col, edge_ids, grown)):
            out.append(value)
        begin, nodes = (0 if expand_all else nodes.numel()), grown
    return outputs


def _sample_neighbors(g, weight, edge_map, seeds, fanouts, layer_seeds, expand_all, replace,
                      device, deterministic=True):
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return torch.ops.fastgnn.sample_neighbors(
        move(g.rowptr), move(g.col), move(weight), move(edge_map), move(seeds), fanouts,
        layer_seeds, expand_all, replace, deterministic)


def _assert_layers_equal(want, got):
    """``got``: the op's per-layer (rowptrs, cols, edge_ids) and its one node list, of which
    every layer's nodes in ``want`` are a prefix."""
    for want_part, got_part in zip(want[:3], got[:3]):
        assert len(want_part) == len(got_part)
        for w, t in zip(want_part, got_part):
            assert torch.equal(w, t.cpu().to(torch.int64))
    nodes = got[3].cpu()
    assert torch.equal(want[3][-1], nodes)
    assert all(torch.equal(w, nodes[:w.numel()]) for w in want[3])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("fanout", [0, 3, 7, -1])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_sample_neighbors_matches_reference(device, fanout, replace, weighted):
    """Every layer as the per-layer replay gives it, in both modes: all known nodes expanded
    (blocks) and only the previous layer's new nodes (subgraph hops, seeds_begin > 0)."""
    g, _ = _graph()
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(1))
    weight[::4] = 0  # zero weights are never drawn
    weight = weight if weighted else None
    edge_map = torch.randperm(g.num_edges, generator=torch.Generator().manual_seed(2))
    seeds = torch.tensor([5, 0, 77, 12, 40, 3, 9], dtype=torch.int64)
    for fanouts in ([fanout], [2, fanout, 3], [fanout, 2]):
        layer_seeds = [1234 + 7 * k for k in range(len(fanouts))]
        for expand_all in (True, False):
            for emap in (None, edge_map):
                want = _reference_layers(g, weight, emap, seeds, fanouts, layer_seeds,
                                         expand_all, replace)
                got = _sample_neighbors(g, weight, emap, seeds, fanouts, layer_seeds, expand_all,
                                        replace, device)
                _assert_layers_equal(want, got)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_sample_neighbors_index_dtypes(device, index_dtype):
    _, ei = _graph()
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=80, index_dtype=index_dtype)
    seeds = torch.tensor([5, 0, 77, 12], dtype=torch.int64)
    for expand_all in (True, False):
        want = _reference_layers(g, None, None, seeds, [4, -1, 2], [3, 4, 5], expand_all, False)
        got = _sample_neighbors(g, None, None, seeds, [4, -1, 2], [3, 4, 5], expand_all, False,
                                device)
        assert all(c.dtype == torch.int32 for c in got[1])  # local ids fit int32
        _assert_layers_equal(want, got)


@pytest.mark.parametrize("device", devices())
def test_sample_neighbors_bad_arguments(device):
    g, _ = _graph(device)
    seeds = torch.tensor([1, 2], device=device)
    op = torch.ops.fastgnn.sample_neighbors
    with pytest.raises(ValueError, match="fanouts"):
        op(g.rowptr, g.col, None, None, seeds, [2, -2], [1, 2], True, False, True)
    with pytest.raises(ValueError, match="layer_seeds"):
        op(g.rowptr, g.col, None, None, seeds, [2, 2], [1], True, False, True)
    with pytest.raises(ValueError, match="layer_seeds"):
        op(g.rowptr, g.col, None, None, seeds, [], [], True, False, True)
    with pytest.raises(RuntimeError, match="edge_map"):
        op(g.rowptr, g.col, None, torch.arange(3, device=device), seeds, [2], [1], True, False,
           True)
    with pytest.raises(RuntimeError, match="seeds"):
        op(g.rowptr, g.col, None, None, seeds.int(), [2], [1], True, False, True)
    for bad, match in (([0, 80], "seeds must be node ids"), ([-1, 2], "seeds must be node ids"),
                       ([3, 4, 3], "unique")):
        for fanouts in ([2, 3], [-1, 2]):
            with pytest.raises(ValueError, match=match):
                op(g.rowptr, g.col, None, None, torch.tensor(bad, device=device), fanouts,
                   [1, 2], True, False, True)


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = _graph(device)
    seeds = torch.tensor([5, 0, 77, 12], device=device)
    weight = torch.rand(g.num_edges, device=device)
    edge_map = torch.randperm(g.num_edges, device=device)
    for w, emap, fanouts, replace, expand_all in (
            (None, None, [3, 2], False, True), (None, edge_map, [-1, 2], False, False),
            (weight, None, [2], True, True)):
        torch.library.opcheck(torch.ops.fastgnn.sample_neighbors,
                              (g.rowptr, g.col, w, emap, seeds, fanouts, [7] * len(fanouts),
                               expand_all, replace, True),
                              test_utils=("test_schema", "test_faketensor"))


# ---- exact properties of blocks ---------------------------------------------------------------
def _check_blocks(graph, ei, blocks, seeds, fanouts, replace, edge_dir="in"):
    edges = _edge_set(ei)
    out_deg = torch.bincount(ei[0], minlength=graph.num_src_nodes)
    in_deg = torch.bincount(ei[1], minlength=graph.num_dst_nodes)
    assert torch.equal(blocks[-1].dst_ids.cpu(), seeds)
    for layer, (block, fanout) in enumerate(zip(blocks, fanouts)):
        _validate.csr(block.rowptr, block.col, block.num_src_nodes)
        src_ids, dst_ids = block.src_ids.cpu(), block.dst_ids.cpu()
        assert torch.equal(src_ids[: block.num_dst_nodes], dst_ids)  # destinations first
        assert torch.unique(src_ids).numel() == src_ids.numel()
        if layer + 1 < len(blocks):
            assert torch.equal(blocks[layer + 1].src_ids.cpu(), dst_ids)
        rowptr, col = block.rowptr.cpu().long(), block.col.cpu().long()
        eids = block.edge_ids.cpu()
        full = in_deg if edge_dir == "in" else out_deg
        for i in range(block.num_dst_nodes):
            row = slice(rowptr[i], rowptr[i + 1])
            srcs, rows_e = src_ids[col[row]], eids[row]
            assert bool((col[row][1:] >= col[row][:-1]).all())  # ascending local ids
            v = int(dst_ids[i])
            for s, e in zip(srcs.tolist(), rows_e.tolist()):  # every sampled edge exists
                pair = (s, v) if edge_dir == "in" else (v, s)
                assert pair in edges and tuple(ei[:, e].tolist()) == pair
            deg = int(full[v])
            k = rowptr[i + 1] - rowptr[i]
            if fanout < 0:
                assert k == deg and sorted(rows_e.tolist()) == sorted(
                    ((ei[1] if edge_dir == "in" else ei[0]) == v).nonzero().view(-1).tolist())
            elif replace:
                assert k == (fanout if deg else 0)
            else:
                assert k == min(fanout, deg)
                assert len(set(rows_e.tolist())) == k  # no duplicates


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("edge_dir", ["in", "out"])
def test_blocks_exact_properties(device, replace, edge_dir):
    for graph, ei in (_graph(), _bipartite_structure()):
        sampler = NeighborSampler(graph.to(device), [-1, 4, 2], replace=replace,
                                  edge_dir=edge_dir)
        seeds = torch.tensor([0, 7, 3, graph.num_dst_nodes - 1, 31])
        blocks = sampler.sample_blocks(seeds, torch.Generator().manual_seed(0)).blocks
        assert all(isinstance(b, fastgnn.Graph) for b in blocks)
        _check_blocks(graph, ei, blocks, seeds, [-1, 4, 2], replace, edge_dir)


def test_sampled_graphs_share_tuning_signatures():
    graph, _ = random_graph(3000, 30000, seed=4)
    sampler = NeighborSampler(graph, [5, 10])
    gen = torch.Generator().manual_seed(0)
    first = sampler.sample_blocks(torch.arange(0, 1000), gen).blocks
    second = sampler.sample_blocks(torch.arange(1000, 2000), gen).blocks
    assert first[1].num_edges != second[1].num_edges  # different sizes, one tuning key
    assert [b.signature() for b in first] == [b.signature() for b in second]
    assert first[0].signature() != first[1].signature()
    subs = [sampler.sample_subgraph(torch.arange(k, k + 500), gen) for k in (0, 500)]
    assert subs[0].graph.signature() == subs[1].graph.signature()
    # Moved to another device they keep their kind: a plain Graph's signature is exact, so
    # every batch would be tuned anew.
    for sampled in (subs[0].graph, first[0]):
        moved = sampled.to("meta")
        assert type(moved) is type(sampled) and moved.device.type == "meta"
        assert moved.signature() == sampled.signature()
    block = first[0].to("meta")
    assert block.fanout == first[0].fanout and block.src_ids.device.type == "meta"
    assert first[0].to("cpu") is first[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_loader_on_cuda_keeps_sampled_graphs():
    """device="cuda" names the current device, as for tensors: the loader's batches keep the
    sampler's graphs (before, "cuda" != "cuda:0" made a plain Graph of every batch, whose exact
    signature sent each batch's spmm through tuning again: 12x slower steps on the H100)."""
    graph, _ = random_graph(3000, 30000, seed=4)
    graph = graph.to("cuda")
    assert graph.to("cuda") is graph and graph.to(torch.device("cuda", 0)) is graph
    loader = NeighborLoader(graph, [5, 10], torch.arange(3000, device="cuda"), batch_size=256,
                            features=torch.randn(3000, 4, device="cuda"), layout="subgraph",
                            device="cuda")
    batch = next(iter(loader))
    assert type(batch.graph).__name__ == "_SampledGraph"


def test_subgraph_union_of_hops():
    graph, ei = _graph()
    sampler = NeighborSampler(graph, [2, 3])
    seeds = torch.tensor([4, 0, 9])
    sub = sampler.sample_subgraph(seeds, torch.Generator().manual_seed(2))
    nodes = sub.node_ids
    assert torch.equal(nodes[:3], seeds) and torch.unique(nodes).numel() == nodes.numel()
    assert sum(sub.num_sampled_nodes) == nodes.numel()
    assert sum(sub.num_sampled_edges) == sub.graph.num_edges == sub.edge_ids.numel()
    _validate.csr(sub.graph.rowptr, sub.graph.col, nodes.numel())
    local = sub.graph.edge_index()
    glob = torch.stack([nodes[local[0]], nodes[local[1]]])
    assert torch.equal(glob, ei[:, sub.edge_ids])
    # hop 1 expands the seeds (3 neighbours each), hop 2 only the nodes hop 1 discovered
    deg = sub.graph.in_degree
    in_deg = torch.bincount(ei[1], minlength=graph.num_dst_nodes)
    n0, n1 = sub.num_sampled_nodes[:2]
    assert torch.equal(deg[:n0], in_deg[seeds].clamp(max=3))
    assert torch.equal(deg[n0:n0 + n1], in_deg[nodes[n0:n0 + n1]].clamp(max=2))
    assert int(deg[n0 + n1:].sum()) == 0


# ---- statistics -------------------------------------------------------------------------------
def _fan_graph(num_dst=3000, degree=40, weight=None):
    """num_dst destinations, each with in-edges from the same `degree` sources."""
    src = torch.arange(degree).repeat(num_dst)
    dst = torch.arange(degree, degree + num_dst).repeat_interleave(degree)
    g = fastgnn.Graph.from_edge_index(torch.stack([src, dst]), num_nodes=degree + num_dst)
    seeds = torch.arange(degree, degree + num_dst)
    return g, seeds


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("replace", [False, True])
def test_uniform_frequencies(device, replace):
    degree, fanout = 40, 6
    g, seeds = _fan_graph(degree=degree)
    blocks = NeighborSampler(g.to(device), [fanout], replace=replace).sample_blocks(
        seeds, torch.Generator().manual_seed(7)).blocks
    picked = blocks[0].src_ids[blocks[0].col.long()].cpu()
    counts = torch.bincount(picked, minlength=degree)[:degree].double()
    assert int(counts.sum()) == seeds.numel() * fanout
    p = scipy_stats.chisquare(counts.numpy()).pvalue
    assert p > P_VALUE_FLOOR, p


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("replace", [False, True])
def test_weighted_frequencies(device, replace):
    degree = 30
    g, seeds = _fan_graph(degree=degree)
    per_source = torch.arange(degree, dtype=torch.float32)  # source 0 has weight 0
    weight = per_source.repeat(seeds.numel())
    fanout = 4 if replace else 1  # without replacement, one draw is exactly proportional
    blocks = NeighborSampler(g.to(device), [fanout], replace=replace,
                             weight=weight.to(device)).sample_blocks(
        seeds, torch.Generator().manual_seed(8)).blocks
    picked = blocks[0].src_ids[blocks[0].col.long()].cpu()
    counts = torch.bincount(picked, minlength=degree)[:degree].double()
    assert counts[0] == 0
    expected = per_source.double() / per_source.sum() * counts.sum()
    p = scipy_stats.chisquare(counts[1:].numpy(), expected[1:].numpy()).pvalue
    assert p > P_VALUE_FLOOR, p


def test_weighted_without_replacement_prefers_heavy_edges():
    g, seeds = _fan_graph(degree=10)
    weight = torch.tensor([1.0] * 9 + [50.0]).repeat(seeds.numel())
    blocks = NeighborSampler(g, [3], weight=weight).sample_blocks(
        seeds, torch.Generator().manual_seed(9)).blocks
    picked = blocks[0].src_ids[blocks[0].col.long()]
    assert (picked == 9).sum() > 0.95 * seeds.numel()  # P(chosen in 3 draws) ~ 0.99


# ---- reproducibility --------------------------------------------------------------------------
def _blocks_equal(a, b):
    return all(torch.equal(x.rowptr, y.rowptr) and torch.equal(x.col, y.col) and
               torch.equal(x.src_ids, y.src_ids) and torch.equal(x.edge_ids, y.edge_ids)
               for x, y in zip(a.blocks, b.blocks))


@pytest.mark.parametrize("device", devices())
def test_same_seed_same_blocks(device):
    g, _ = random_graph(3000, 30000, seed=4)
    sampler = NeighborSampler(g.to(device), [5, 5, 5], deterministic=True)
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:1000]
    first = sampler.sample_blocks(seeds, torch.Generator().manual_seed(11))
    again = sampler.sample_blocks(seeds, torch.Generator().manual_seed(11))
    other = sampler.sample_blocks(seeds, torch.Generator().manual_seed(12))
    assert _blocks_equal(first, again)
    assert not _blocks_equal(first, other)


def test_thread_count_does_not_change_blocks():
    g, _ = random_graph(3000, 30000, seed=4)
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(0))
    # past the kernel's serial thresholds (1024 seeds, 16384 edges) in every pass
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:2500]
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            for w in (None, weight):
                results.append(NeighborSampler(g, [8, 10], weight=w).sample_blocks(
                    seeds, torch.Generator().manual_seed(5)))
    finally:
        torch.set_num_threads(threads)
    for k in (2, 4):
        assert _blocks_equal(results[0], results[k])
        assert _blocks_equal(results[1], results[k + 1])


@pytest.mark.gpu
def test_gpu_matches_cpu_and_pinned():
    g, _ = random_graph(3000, 30000, seed=4)
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:1000]
    cpu = NeighborSampler(g, [5, 10]).sample_blocks(seeds, torch.Generator().manual_seed(3))
    gpu = NeighborSampler(g.cuda(), [5, 10]).sample_blocks(seeds, torch.Generator().manual_seed(3))
    pinned = NeighborSampler(g.pin_memory(), [5, 10]).sample_blocks(
        seeds, torch.Generator().manual_seed(3))
    assert pinned.blocks[0].device.type == "cuda"
    assert _blocks_equal(cpu, gpu.to("cpu")) and _blocks_equal(cpu, pinned.to("cpu"))


@pytest.mark.gpu
def test_gpu_unordered_numbering_gives_the_same_edges():
    g, ei = random_graph(3000, 30000, seed=4)
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:500]
    fast = NeighborSampler(g.cuda(), [5, 10], deterministic=False).sample_blocks(
        seeds, torch.Generator().manual_seed(3)).to("cpu")
    _check_blocks(g, ei, fast.blocks, seeds, [5, 10], False)
    exact = NeighborSampler(g, [5, 10]).sample_blocks(seeds, torch.Generator().manual_seed(3))
    # The seed layer draws the same edges; it numbers its new nodes in another order, and the
    # next layer's draws follow each destination's position, so from there only the node sets
    # agree (each layer's edges are checked against the graph above).
    seed_layer, exact_seed_layer = fast.blocks[-1], exact.blocks[-1]
    assert torch.equal(seed_layer.in_degree, exact_seed_layer.in_degree)
    assert set(seed_layer.edge_ids.tolist()) == set(exact_seed_layer.edge_ids.tolist())
    for a, b in zip(fast.blocks, exact.blocks):
        assert set(a.dst_ids.tolist()) == set(b.dst_ids.tolist())


def _hub_graph():
    """Five hubs of in-degree ~1500 among 2000 nodes: rows longer than a warp's 32 lanes,
    than the warp row sort's limit, and than any fanout below."""
    gen = torch.Generator().manual_seed(8)
    hubs = torch.stack([torch.randint(0, 2000, (7500,), generator=gen),
                        torch.arange(5).repeat_interleave(1500)])
    rest = torch.randint(0, 2000, (2, 20000), generator=gen)
    ei = torch.cat([hubs, rest], 1)
    return fastgnn.Graph.from_edge_index(ei, num_nodes=2000), ei


@pytest.mark.gpu
@pytest.mark.parametrize("fanout,replace,weighted", [
    (40, False, False), (40, True, False), (600, False, False), (-1, False, False),
    (40, False, True), (40, True, True)])
def test_gpu_matches_cpu_on_long_rows(fanout, replace, weighted):
    g, ei = _hub_graph()
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(2)) \
        if weighted else None
    seeds = torch.cat([torch.arange(5), torch.randperm(1995)[:300] + 5])
    blocks = []
    for graph in (g, g.cuda()):
        w = None if weight is None else weight.to(graph.device)
        blocks.append(NeighborSampler(graph, [fanout], replace=replace, weight=w).sample_blocks(
            seeds, torch.Generator().manual_seed(6)).to("cpu"))
    assert _blocks_equal(blocks[0], blocks[1])
    if not weighted:
        _check_blocks(g, ei, blocks[1].blocks, seeds, [fanout], replace)


def _subgraphs_equal(a, b):
    return (torch.equal(a.graph.rowptr, b.graph.rowptr) and torch.equal(a.graph.col, b.graph.col)
            and torch.equal(a.node_ids, b.node_ids) and torch.equal(a.edge_ids, b.edge_ids)
            and a.num_sampled_nodes == b.num_sampled_nodes
            and a.num_sampled_edges == b.num_sampled_edges)


@pytest.mark.gpu
@pytest.mark.parametrize("fanouts", [[5, 10], [3, -1, 4], [-1, 2], [2, -1], [2, 600, 3],
                                     [33, 32]])
@pytest.mark.parametrize("edge_dir", ["in", "out"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gpu_layers_match_cpu(fanouts, edge_dir, index_dtype):
    """Every layer in one GPU call, in runs split at the layers no host bound sizes (-1, rows
    past the warp sort): the CPU's blocks and hops, from GPU memory and pinned memory. Rows of
    at most 32 edges are a lane's, longer ones a warp's ([33, 32] has both)."""
    _, ei = _hub_graph()
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=2000, index_dtype=index_dtype)
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(2))
    seeds = torch.cat([torch.arange(5), torch.randperm(1995)[:60] + 5])
    for w, replace in ((None, False), (None, True), (weight, False)):
        options = dict(replace=replace, edge_dir=edge_dir)
        cpu = NeighborSampler(g, fanouts, weight=w, **options)
        for graph in (g.cuda(), g.pin_memory()):
            gpu = NeighborSampler(graph, fanouts, weight=None if w is None else w.to(
                graph.device), **options)
            want = cpu.sample_blocks(seeds, torch.Generator().manual_seed(6))
            got = gpu.sample_blocks(seeds.cuda(), torch.Generator().manual_seed(6))
            assert got.blocks[0].device.type == "cuda"
            assert _blocks_equal(want, got.to("cpu"))
            hops = cpu.sample_subgraph(seeds, torch.Generator().manual_seed(7))
            got_hops = gpu.sample_subgraph(seeds, torch.Generator().manual_seed(7))
            assert _subgraphs_equal(hops, _subgraph_on_cpu(got_hops))


def _subgraph_on_cpu(sub):
    return type(sub)(sub.graph.to("cpu"), sub.node_ids.cpu(), sub.edge_ids.cpu(),
                     sub.num_sampled_nodes, sub.num_sampled_edges)


@pytest.mark.gpu
@pytest.mark.parametrize("fanouts", [[4, 6, 3], [3, -1, 2]])
def test_gpu_unordered_layers_sample_valid_blocks(fanouts):
    g, ei = random_graph(3000, 30000, seed=4)
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:300]
    fast = NeighborSampler(g.cuda(), fanouts, deterministic=False)
    blocks = fast.sample_blocks(seeds, torch.Generator().manual_seed(3)).to("cpu")
    _check_blocks(g, ei, blocks.blocks, seeds, fanouts, False)
    sub = fast.sample_subgraph(seeds, torch.Generator().manual_seed(3))
    nodes = sub.node_ids.cpu()
    assert torch.equal(nodes[:300], seeds) and torch.unique(nodes).numel() == nodes.numel()
    local = sub.graph.edge_index().cpu()
    assert torch.equal(torch.stack([nodes[local[0]], nodes[local[1]]]),
                       ei[:, sub.edge_ids.cpu()])


@pytest.mark.gpu
def test_gpu_bad_seeds_raise():
    g, _ = _graph("cuda")
    for fanouts in ([3], [3, 2], [-1, 2], [2, -1]):
        sampler = NeighborSampler(g, fanouts)
        for sample in (sampler.sample_blocks, sampler.sample_subgraph):
            with pytest.raises(ValueError, match="seeds"):
                sample(torch.tensor([0, 80], device="cuda"))
            with pytest.raises(ValueError, match="unique"):
                sample(torch.tensor([1, 1], device="cuda"))


# ---- GPU paths: in-pass scans over many tiles, long warp-sorted rows, empty layers ----------
def _ops_equal(want, got):
    """Two sample_neighbors results (``got`` from the GPU): the same tensors and dtypes."""
    for want_part, got_part in zip(want[:3], got[:3]):
        assert len(want_part) == len(got_part)
        for w, t in zip(want_part, got_part):
            assert w.dtype == t.dtype and torch.equal(w, t.cpu())
    assert torch.equal(want[3], got[3].cpu())


def _gpu_against_cpu(g, weight, seeds, fanouts, expand_all, replace, edge_map=None):
    layer_seeds = [31 + 7 * k for k in range(len(fanouts))]
    args = (g, weight, edge_map, seeds, fanouts, layer_seeds, expand_all, replace)
    got = _sample_neighbors(*args, "cuda")
    _ops_equal(_sample_neighbors(*args, "cpu"), got)
    return got


def _large_graph():
    """60k nodes, 600k edges plus a hub (node 0, in-degree 200k), and 4096 seeds with the hub
    among them."""
    g, _ = random_graph(60000, 600000, seed=9)
    gen = torch.Generator().manual_seed(4)
    seeds = torch.cat([torch.tensor([0]), torch.randperm(59999, generator=gen)[:4095] + 1])
    return g, seeds


@pytest.mark.gpu
@pytest.mark.parametrize("fanouts,replace,weighted", [
    ([10, 10], False, False), ([10, 10], True, False), ([10, 10], False, True),
    ([10, 10], True, True), ([25, 2, 40], False, False), ([3, 512], False, False)])
@pytest.mark.parametrize("expand_all", [True, False])
def test_gpu_matches_cpu_on_large_frontiers(fanouts, replace, weighted, expand_all):
    """Frontiers of ~45k seeds and ~450k edges: the scans inside the count and first-edge passes
    span hundreds of 256-item tiles (look-back across many 32-tile windows); rows of 25, 40 and
    512 edges take several rounds of lanes in the warp row sort, 512 its largest shared-memory
    slice."""
    g, seeds = _large_graph()
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(3)) \
        if weighted else None
    got = _gpu_against_cpu(g, weight, seeds, fanouts, expand_all, replace)
    assert max(rowptr.numel() for rowptr in got[0]) > 20 * 256  # a row-pointer scan of 20+ tiles


@pytest.mark.gpu
@pytest.mark.parametrize("fanouts", [[10, 10], [4, 6, 3]])
def test_gpu_unordered_numbering_on_large_frontiers(fanouts):
    """The unordered numbering over many tiles: the CPU's row sizes in the seed layer, and in
    every layer valid rows (sources are the sampled edges' sources, ascending, no repeats)."""
    g, seeds = _large_graph()
    layer_seeds = [5 + k for k in range(len(fanouts))]
    args = (g, None, None, seeds, fanouts, layer_seeds, True, False)
    fast = _sample_neighbors(*args, "cuda", deterministic=False)
    exact = _sample_neighbors(*args, "cpu")
    assert torch.equal(fast[0][0].cpu(), exact[0][0])
    nodes = fast[3].cpu()
    assert torch.equal(nodes[:seeds.numel()], seeds)
    assert torch.unique(nodes).numel() == nodes.numel()
    col = g.col.long()
    for rowptr, local, pos in zip(*(part for part in fast[:3])):
        rowptr, local, pos = rowptr.cpu().long(), local.cpu().long(), pos.cpu()
        rows = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
        dst = nodes[rows]
        assert bool(((pos >= g.rowptr[dst]) & (pos < g.rowptr[dst + 1])).all())
        assert torch.equal(nodes[local], col[pos])
        assert bool((local[1:] >= local[:-1])[rows[1:] == rows[:-1]].all())
        assert torch.unique(rows * g.num_edges + pos).numel() == pos.numel()  # no repeats


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("fanouts", [[0, 3], [3, 0, 2], [4, 2], [-1, 3], [3, -1], [600, 2]])
@pytest.mark.parametrize("seeds", [[77, 78, 79], [77, 5, 0]])
@pytest.mark.parametrize("replace", [False, True])
def test_gpu_matches_cpu_on_empty_layers(fanouts, seeds, replace):
    """Seeds with no edges (77-79 receive none) and fanout 0: layers without edges, and (hops)
    layers without seeds, before and after runs of long rows."""
    g, _ = _graph()
    seeds = torch.tensor(seeds)
    for expand_all in (True, False):
        _gpu_against_cpu(g, None, seeds, fanouts, expand_all, replace)


@pytest.mark.gpu
@pytest.mark.parametrize("fanout,replace,weighted", [
    (40, False, False), pytest.param(40, True, True, marks=pytest.mark.sanitize),
    pytest.param(512, False, False, marks=pytest.mark.sanitize), (512, True, False),
    (600, True, True), (-1, False, False)])
def test_gpu_matches_cpu_with_edge_map_and_hops(fanout, replace, weighted):
    """Fanouts past most degrees (40, 512, 600) on the hub graph: user edge ids through an
    edge map, weighted counts (positive weights counted only as far as the fanout needs),
    subgraph hops after a layer of long rows."""
    g, _ = _hub_graph()
    weight = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(2))
    weight[::3] = 0
    edge_map = torch.randperm(g.num_edges, generator=torch.Generator().manual_seed(7))
    seeds = torch.cat([torch.arange(5), torch.randperm(1995)[:300] + 5])
    for fanouts in ([fanout], [2, fanout, 3]):
        for expand_all in (True, False):
            _gpu_against_cpu(g, weight if weighted else None, seeds, fanouts, expand_all, replace,
                             edge_map)


@pytest.mark.gpu
def test_gpu_matches_cpu_with_int64_local_ids():
    """Three fanouts of 512 bound the last layer past 2^31 nodes, so its local ids are int64 on
    both devices (the warp row sort then keeps 512 int64 keys per warp in shared memory)."""
    g, _ = random_graph(3000, 30000, seed=4)
    seeds = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:20]
    got = _gpu_against_cpu(g, None, seeds, [512, 512, 512], True, False)
    assert got[1][2].dtype == torch.int64 and got[1][0].dtype == torch.int32


# ---- errors -----------------------------------------------------------------------------------
def test_bad_arguments():
    g, _ = _graph()
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler(g, [3, -2])
    with pytest.raises(TypeError, match="fanouts"):
        NeighborSampler(g, 3)
    with pytest.raises(ValueError, match="edge_dir"):
        NeighborSampler(g, [3], edge_dir="both")
    with pytest.raises(ValueError, match="bipartite"):
        NeighborSampler(random_graph(50, 200, num_dst=30)[0], [3])
    with pytest.raises(ValueError, match="weight"):
        NeighborSampler(g, [3], weight=-torch.ones(g.num_edges))
    with pytest.raises(ValueError, match="weight"):
        NeighborSampler(g, [3], weight=torch.ones(3))
    sampler = NeighborSampler(g, [3])
    with pytest.raises(ValueError, match="seeds"):
        sampler.sample_blocks(torch.tensor([0, 80]))
    with pytest.raises(ValueError, match="unique"):
        sampler.sample_blocks(torch.tensor([1, 1]))
    with pytest.raises(TypeError, match="seeds"):
        sampler.sample_blocks(torch.tensor([1.0]))


# ---- the loader -------------------------------------------------------------------------------
def test_loader_batches_features_and_labels():
    g, _ = _graph()
    x = torch.randn(80, 5)
    y = torch.arange(80)
    seeds = torch.arange(0, 80, 2)
    for layout in ("blocks", "subgraph"):
        for drop_last, expect in ((False, [16, 16, 8]), (True, [16, 16])):
            loader = NeighborLoader(g, [3, 3], seeds, batch_size=16, shuffle=True,
                                    drop_last=drop_last, features=x, labels=y, layout=layout)
            batches = list(loader)
            assert [b.batch_size for b in batches] == expect == [16] * (len(expect) - 1) + \
                [expect[-1]] and len(loader) == len(expect)
            seen = torch.cat([b.seeds for b in batches])
            assert torch.unique(seen).numel() == seen.numel()
            if not drop_last:
                assert torch.equal(seen.sort().values, seeds)
            for b in batches:
                assert torch.equal(b.x, x[b.input_nodes]) and torch.equal(b.y, y[b.seeds])
        # shuffling follows the epoch
        assert not torch.equal(loader.shard(), (loader.set_epoch(5), loader.shard())[1])


def test_loader_gathers_edge_features():
    g, ei = _graph()
    edge_features = torch.stack([torch.arange(ei.shape[1], dtype=torch.float32),
                                 torch.randn(ei.shape[1])], dim=1)
    for layout in ("blocks", "subgraph"):
        loader = NeighborLoader(g, [3, 2], torch.arange(0, 80, 3), batch_size=9,
                                edge_features=edge_features, layout=layout)
        for batch in loader:
            if layout == "subgraph":
                ids, local = batch.edge_ids, batch.edge_index
                pairs = [(batch.edge_attr, ids, batch.node_ids[local[0]],
                          batch.node_ids[local[1]])]
            else:
                pairs = [(attr, b.edge_ids, b.src_ids[b.col.long()], b.dst_ids[b.row.long()])
                         for attr, b in zip(batch.edge_attr, batch.blocks)]
            for attr, ids, src, dst in pairs:
                assert torch.equal(attr, edge_features[ids])
                assert torch.equal(ei[0, ids], src) and torch.equal(ei[1, ids], dst)
    with pytest.raises(ValueError, match="edge_features"):
        NeighborLoader(g, [2], torch.arange(5), edge_features=torch.randn(3, 2))


def test_loader_prefetch_matches_inline():
    g, _ = _graph()
    common = dict(batch_size=7, shuffle=True, seed=3)
    inline = list(NeighborLoader(g, [2, 4], torch.arange(80), prefetch=0, **common))
    ahead = list(NeighborLoader(g, [2, 4], torch.arange(80), prefetch=3, **common))
    assert len(inline) == len(ahead) == 12
    for a, b in zip(inline, ahead):
        assert all(torch.equal(x.col, y.col) and torch.equal(x.src_ids, y.src_ids)
                   for x, y in zip(a.blocks, b.blocks))


def _never_built():
    pytest.fail("expected the loader to have built it")


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("device", devices())
def test_loader_prepares_each_batch_for_the_step(prefetch, device):
    """Each batch comes with what the step would otherwise derive from its new graph (on the
    loader's thread when prefetching): the transpose the backward reads, equal to one built
    afterwards, and, for subgraphs, the edge_index registered with that graph."""
    g, _ = _graph(device)
    for layout in ("blocks", "subgraph"):
        loader = NeighborLoader(g, [3, 4], torch.arange(0, 80, 2), batch_size=16,
                                layout=layout, prefetch=prefetch)
        for batch in loader:
            for graph in batch.blocks or [batch.graph]:
                built = graph.cached("transpose", _never_built)
                fresh = fastgnn.Graph(graph.rowptr, graph.col, graph.num_src_nodes).transpose()
                assert all(torch.equal(a, b) for a, b in zip(built, fresh))
                assert all(any(t is u for u in graph.tensors()) for t in built)
            if layout == "subgraph":
                memo = batch._edge_index_of
                assert memo is not None and memo[0] is batch.graph
                assert batch.edge_index is memo[1]
                assert torch.equal(memo[1], batch.graph.edge_index())
    inference = NeighborLoader(g, [3], torch.arange(10), batch_size=4, build_transpose=False)
    for batch in inference:
        assert batch.blocks[0].cached("transpose", lambda: None) is None


def test_lightning_transfer_keeps_the_registered_edge_index():
    """Lightning's batch transfer rebuilds a dataclass and deep-copies its attributes that are
    not fields: the registered edge_index is a field, so the moved batch keeps the same tensor
    (no copy, no second registration) while its graph stays on the device."""
    move = pytest.importorskip("lightning.fabric.utilities.apply_func").move_data_to_device
    g, _ = _graph()
    batch = NeighborLoader(g, [3], torch.arange(20), batch_size=8, layout="subgraph").load(
        torch.arange(8))
    moved = move(batch, torch.device("cpu"))
    assert moved is not batch and moved.graph is batch.graph
    assert moved.edge_index is batch.edge_index


def test_loader_surfaces_background_errors():
    g, _ = _graph()
    loader = NeighborLoader(g, [2], torch.arange(80), batch_size=8, features=torch.randn(80, 3))
    loader.features = torch.randn(10, 3)  # too short: the background gather fails
    with pytest.raises(IndexError):
        list(loader)


@pytest.mark.parametrize("world_size,drop_last", [(2, False), (3, False), (3, True)])
def test_loader_shards_are_disjoint_and_equal(world_size, drop_last):
    g, _ = _graph()
    seeds = torch.arange(3, 80, 1)  # 77 seeds
    shards = [NeighborLoader(g, [2], seeds, batch_size=5, shuffle=True, drop_last=drop_last,
                             rank=r, world_size=world_size).shard() for r in range(world_size)]
    sizes = {s.numel() for s in shards}
    assert len(sizes) == 1
    union = torch.cat(shards)
    if drop_last:
        assert torch.unique(union).numel() == union.numel() == 77 // world_size * world_size
    else:
        assert set(union.tolist()) == set(seeds.tolist())
        padding = union.numel() - seeds.numel()
        assert padding < world_size and torch.unique(union).numel() == seeds.numel()


def test_loader_bad_arguments():
    g, _ = _graph()
    with pytest.raises(ValueError, match="seeds"):
        NeighborLoader(g, [2], torch.tensor([100]))
    with pytest.raises(ValueError, match="mask"):
        NeighborLoader(g, [2], torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="features"):
        NeighborLoader(g, [2], torch.arange(5), features=torch.randn(3, 2))
    with pytest.raises(ValueError, match="rank"):
        NeighborLoader(g, [2], torch.arange(5), rank=2, world_size=2)
    with pytest.raises(ValueError, match="layout"):
        NeighborLoader(g, [2], torch.arange(5), layout="coo")


_EXIT_WITH_BATCHES_IN_FLIGHT = """
import torch
import fastgnn
from fastgnn.sampling import NeighborLoader
edges = torch.randint(0, 20000, (2, 400000), generator=torch.Generator().manual_seed(1))
graph = fastgnn.Graph.from_edge_index(edges, num_nodes=20000)
batches = iter(NeighborLoader(graph, [-1, -1], torch.arange(20000), batch_size=2000, prefetch=2))
next(batches)  # the producer thread is now sampling the next batches, in native code
print("exiting")
"""


def test_loader_exits_cleanly_with_batches_in_flight():
    """An unfinished epoch's producer thread is joined at exit, not killed inside a kernel
    (which aborted with "terminate called without an active exception")."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _EXIT_WITH_BATCHES_IN_FLIGHT], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr
    assert "terminate called" not in done.stderr


def test_loader_close_joins_the_producer():
    g, _ = _graph()
    batches = iter(NeighborLoader(g, [2, 4], torch.arange(80), batch_size=4, prefetch=2))
    next(batches)
    batches.close()
    assert not batches._thread.is_alive()


@pytest.mark.gpu
def test_loader_gpu_side_stream():
    g, _ = random_graph(2000, 20000, seed=4)
    x = torch.randn(2000, 8).pin_memory()
    y = torch.arange(2000)
    for graph in (g.cuda(), g.pin_memory()):
        loader = NeighborLoader(graph, [4, 4], torch.arange(2000), batch_size=256, features=x,
                                labels=y, shuffle=True)
        for b in loader:
            assert b.x.is_cuda and b.blocks[0].device.type == "cuda"
            assert torch.equal(b.x.cpu(), x[b.input_nodes.cpu()])
            assert torch.equal(b.y.cpu(), y[b.seeds.cpu()])
