"""fastgnn.sampling.dgl.NeighborSampler against dgl.dataloading.NeighborSampler (DGL
environment only): block conventions, exact full-neighbourhood blocks and model outputs,
sampled degrees, and DGL's DataLoader."""
from __future__ import annotations

import pytest
import torch

dgl = pytest.importorskip("dgl")

from fastgnn.sampling.dgl import NeighborSampler  # noqa: E402
from tests.conftest import random_edge_index  # noqa: E402


def _graph():
    ei = random_edge_index(150, 150, 1200, seed=6)
    g = dgl.graph((ei[0], ei[1]), num_nodes=150)
    g.ndata["x"] = torch.randn(150, 5, generator=torch.Generator().manual_seed(0))
    return g


def _triples(block):
    src, dst, eid = block.edges(form="all")
    return sorted(zip(block.srcdata[dgl.NID][src].tolist(), block.dstdata[dgl.NID][dst].tolist(),
                      block.edata[dgl.EID][eid].tolist()))


def test_conventions_match_dgl():
    g = _graph()
    seeds = torch.tensor([3, 0, 77, 149, 20])
    ours = NeighborSampler([4, 3]).sample_blocks(g, seeds)
    stock = dgl.dataloading.NeighborSampler([4, 3]).sample_blocks(g, seeds)
    for (inp, out, blocks), name in ((ours, "ours"), (stock, "dgl")):
        assert torch.equal(out, seeds), name
        assert torch.equal(blocks[0].srcdata[dgl.NID], inp), name
        assert torch.equal(blocks[-1].dstdata[dgl.NID], seeds), name
        assert torch.equal(blocks[0].dstdata[dgl.NID], blocks[1].srcdata[dgl.NID]), name
        for b in blocks:
            assert b.is_block
            n = b.num_dst_nodes()
            assert torch.equal(b.srcdata[dgl.NID][:n], b.dstdata[dgl.NID]), name
            src, dst, eid = b.edges(form="all")
            gs, gd = g.find_edges(b.edata[dgl.EID][eid])
            assert torch.equal(gs, b.srcdata[dgl.NID][src]), name
            assert torch.equal(gd, b.dstdata[dgl.NID][dst]), name
    # same sampled degree per seed: min(fanout, in-degree)
    for ob, sb in zip(ours[2][1:], stock[2][1:]):
        assert torch.equal(ob.in_degrees(), sb.in_degrees())


def test_full_neighbourhood_blocks_equal_dgl():
    # (edge_dir="out" is not compared: DGL's blocks of out-edge frontiers point their edges
    # past the block's destinations; ours reverse them, see tests/test_sampling.py)
    g = _graph()
    seeds = torch.arange(0, 150, 11)
    ours = NeighborSampler([-1, -1]).sample_blocks(g, seeds)[2]
    stock = dgl.dataloading.NeighborSampler([-1, -1]).sample_blocks(g, seeds)[2]
    for ob, sb in zip(ours, stock):
        assert _triples(ob) == _triples(sb)
        assert set(ob.srcdata[dgl.NID].tolist()) == set(sb.srcdata[dgl.NID].tolist())


def test_model_on_full_blocks_equals_full_graph():
    g = _graph()
    convs = torch.nn.ModuleList([dgl.nn.SAGEConv(5, 6, "mean"), dgl.nn.SAGEConv(6, 3, "mean")])
    with torch.no_grad():
        h = g.ndata["x"]
        for conv in convs:
            h = conv(g, h)
        seeds = torch.arange(0, 150, 7)
        inp, out, blocks = NeighborSampler([-1, -1]).sample_blocks(g, seeds)
        x = g.ndata["x"][inp]
        for conv, block in zip(convs, blocks):
            x = conv(block, x)
    torch.testing.assert_close(x, h[seeds], rtol=1e-5, atol=1e-5)


def test_weighted_and_dataloader():
    g = _graph()
    src, dst = g.edges()
    g.edata["p"] = (dst == 0).float()  # only the hub's in-edges can be drawn
    _, _, blocks = NeighborSampler([2], prob="p").sample_blocks(g, torch.tensor([0, 1, 2]))
    assert blocks[0].in_degrees().tolist() == [2, 0, 0]
    sampler = NeighborSampler([3, 3], prefetch_node_feats=["x"])
    loader = dgl.dataloading.DataLoader(g, torch.arange(150), sampler, batch_size=32,
                                        shuffle=True)
    seen = []
    for inp, out, blocks in loader:
        torch.testing.assert_close(blocks[0].srcdata["x"], g.ndata["x"][inp])
        seen.append(out)
    assert sorted(torch.cat(seen).tolist()) == list(range(150))


def test_exclude_eids_falls_back_with_a_warning():
    g = _graph()
    with pytest.warns(UserWarning, match="exclude_eids"):
        NeighborSampler([2]).sample_blocks(g, torch.tensor([0, 1]), exclude_eids=torch.tensor([0]))
