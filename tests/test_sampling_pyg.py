"""fastgnn.pyg.NeighborSampler through torch_geometric's NodeLoader: the mini-batches a stock
NeighborLoader yields, exact full-neighbourhood inference, and no second CSR build."""
from __future__ import annotations

import pytest
import torch

pyg = pytest.importorskip("torch_geometric")
from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import NeighborLoader as StockNeighborLoader, NodeLoader  # noqa: E402
import torch_geometric.typing as pyg_typing  # noqa: E402

import fastgnn  # noqa: E402
import fastgnn.pyg  # noqa: E402
from tests.conftest import random_edge_index  # noqa: E402


def _data(num_nodes=120, num_edges=900, seed=0):
    ei = random_edge_index(num_nodes, num_nodes, num_edges, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(num_nodes, 6, generator=gen), edge_index=ei,
                edge_attr=torch.randn(ei.size(1), 2, generator=gen),
                y=torch.randint(0, 3, (num_nodes,), generator=gen), num_nodes=num_nodes)


def _loader(data, num_neighbors, input_nodes, batch_size, **kw):
    sampler = fastgnn.pyg.NeighborSampler(data, num_neighbors=num_neighbors,
                                          generator=torch.Generator().manual_seed(0), **kw)
    return NodeLoader(data, node_sampler=sampler, input_nodes=input_nodes, batch_size=batch_size)


@pytest.mark.skipif(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE,
                    reason="the stock sampler runs here")
def test_stock_neighbor_loader_cannot_run_here():
    data = _data()
    with pytest.raises(ImportError, match="pyg-lib"):
        next(iter(StockNeighborLoader(data, num_neighbors=[2], batch_size=4)))


def test_node_loader_batches_follow_neighbor_loader_conventions():
    data = _data()
    input_nodes = torch.arange(0, 120, 3)
    batches = list(_loader(data, [4, 3], input_nodes, batch_size=16))
    assert [b.batch_size for b in batches] == [16, 16, 8]
    assert torch.equal(torch.cat([b.input_id for b in batches]), torch.arange(40))
    edges = set(map(tuple, data.edge_index.t().tolist()))
    for b in batches:
        assert torch.equal(b.n_id[: b.batch_size], input_nodes[b.input_id])  # seeds first
        assert torch.unique(b.n_id).numel() == b.num_nodes == sum(b.num_sampled_nodes)
        assert len(b.num_sampled_nodes) == 3 and len(b.num_sampled_edges) == 2
        assert b.edge_index.size(1) == sum(b.num_sampled_edges) == b.e_id.numel()
        glob = b.n_id[b.edge_index]  # local -> global, row 0 the sources
        assert torch.equal(glob, data.edge_index[:, b.e_id])
        assert set(map(tuple, glob.t().tolist())) <= edges
        assert torch.equal(b.x, data.x[b.n_id]) and torch.equal(b.y, data.y[b.n_id])
        assert torch.equal(b.edge_attr, data.edge_attr[b.e_id])
        # hop 1 ends at the seeds, hop 2 at the nodes hop 1 added
        first = b.num_sampled_edges[0]
        assert bool((b.edge_index[1, :first] < b.batch_size).all())
        assert bool((b.edge_index[1, first:] >= b.batch_size).all())
        in_deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
        got = torch.bincount(b.edge_index[1, :first], minlength=b.batch_size)
        assert torch.equal(got, in_deg[b.n_id[: b.batch_size]].clamp(max=4))


class _Sage(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList([pyg.nn.SAGEConv(6, 8), pyg.nn.SAGEConv(8, 8, aggr="max"),
                                          pyg.nn.SAGEConv(8, 4)])

    def forward(self, x, edge_index):
        for conv in self.convs[:-1]:
            x = conv(x, edge_index).relu()
        return self.convs[-1](x, edge_index)


def test_full_neighbourhood_batch_equals_full_graph_inference():
    data = _data()
    torch.manual_seed(0)
    model = fastgnn.enable(_Sage()).eval()
    with torch.no_grad():
        full = model(data.x, data.edge_index)
        for b in _loader(data, [-1, -1, -1], torch.randperm(120)[:50], batch_size=13):
            builds = fastgnn.pyg.structure_cache.builds
            out = model(b.x, b.edge_index)
            assert fastgnn.pyg.structure_cache.builds == builds  # the sampler's Graph is used
            torch.testing.assert_close(out[: b.batch_size], full[b.n_id[: b.batch_size]],
                                       rtol=1e-5, atol=1e-5)


def test_sampled_batch_trains_through_enabled_layers():
    data = _data()
    model = fastgnn.enable(_Sage())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for b in _loader(data, [5, 5, 5], torch.arange(120), batch_size=32):
        loss = torch.nn.functional.cross_entropy(model(b.x, b.edge_index)[: b.batch_size],
                                                 b.y[: b.batch_size])
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)


def test_weighted_sampling_and_errors():
    data = _data()
    data.w = torch.zeros(data.edge_index.size(1))
    keep = data.edge_index[1] == 0  # only the hub's in-edges can be drawn
    data.w[keep] = 1.0
    b = next(iter(_loader(data, [3], torch.tensor([0, 1, 2]), batch_size=3, weight_attr="w")))
    assert torch.equal(torch.bincount(b.edge_index[1], minlength=3), torch.tensor([3, 0, 0]))
    with pytest.raises(TypeError, match="HeteroData"):
        fastgnn.pyg.NeighborSampler(HeteroData(), num_neighbors=[2])
    with pytest.raises(ValueError, match="dict"):
        fastgnn.pyg.NeighborSampler(data, num_neighbors={("a", "b", "c"): [2]})
    with pytest.raises(ValueError, match="disjoint"):
        fastgnn.pyg.NeighborSampler(data, num_neighbors=[2], disjoint=True)
    with pytest.raises(ValueError, match="weight_attr"):
        fastgnn.pyg.NeighborSampler(data, num_neighbors=[2], weight_attr="missing")


def test_loader_subgraph_layout_runs_enabled_models():
    data = _data()
    graph = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    model = fastgnn.enable(_Sage()).eval()
    loader = fastgnn.sampling.NeighborLoader(graph, [-1, -1, -1], torch.arange(0, 120, 7),
                                             batch_size=6, features=data.x, labels=data.y,
                                             layout="subgraph", prefetch=0)
    # prefetch=0: a background thread would register the next batches during the count
    with torch.no_grad():
        full = model(data.x, data.edge_index)
        for b in loader:
            edge_index = b.edge_index
            assert b.edge_index is edge_index
            builds = fastgnn.pyg.structure_cache.builds
            out = model(b.x, edge_index)
            assert fastgnn.pyg.structure_cache.builds == builds
            torch.testing.assert_close(out[: b.batch_size], full[b.seeds], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", ["gcn", "gatv2"])
def test_self_loop_layers_keep_a_sampled_batch_in_its_tuning_size_class(conv):
    """GCN and GAT layers rebuild a batch's structure with self-loops. The rebuilt graph must
    keep the batch's size-class signature: an exact one (sizes, degree quantiles) makes the GPU
    tuner time the kernels' launch plans again for every batch."""
    from torch_geometric.nn import GATv2Conv, GCNConv
    from fastgnn.sampling.sampler import _SampledGraph
    data = _data(num_nodes=300, num_edges=3000)
    graph = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    layer = fastgnn.enable(GCNConv(6, 8) if conv == "gcn" else GATv2Conv(6, 4, heads=2))
    loader = fastgnn.sampling.NeighborLoader(graph, [4, 4], torch.arange(300), batch_size=32,
                                             features=data.x, layout="subgraph")
    signatures = set()
    for batch in loader:
        layer(batch.x, batch.edge_index)
        n = batch.graph.num_src_nodes
        rebuilt = fastgnn.pyg.structure_cache.peek(batch.edge_index, ("rebuilt", "replace", n,
                                                                      n, n))
        assert rebuilt is not None and isinstance(rebuilt.graph, _SampledGraph)
        assert rebuilt.graph.num_edges > batch.graph.num_edges - n  # its loops are in
        signatures.add(rebuilt.graph.signature())
    assert 1 <= len(signatures) <= 3  # size classes (powers of two), not one per batch


def test_blocks_through_enabled_layers_equal_full_graph():
    data = _data()
    graph = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    model = fastgnn.enable(_Sage()).eval()
    loader = fastgnn.sampling.NeighborLoader(graph, [-1, -1, -1], torch.arange(0, 120, 5),
                                             batch_size=8, features=data.x)
    with torch.no_grad():
        full = model(data.x, data.edge_index)
        for b in loader:
            x = b.x
            for i, (conv, block) in enumerate(zip(model.convs, b.blocks)):
                x = conv((x, x[: block.num_dst_nodes]), block)
                x = x.relu() if i + 1 < len(model.convs) else x
            torch.testing.assert_close(x, full[b.seeds], rtol=1e-5, atol=1e-5)
