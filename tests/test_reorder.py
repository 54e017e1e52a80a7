"""fastgnn.reorder: valid permutations, what each method promises, and round trips (permute,
run, restore equals the run on the caller's order) through every op family."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import fastgnn
from fastgnn import reordering
from tests.conftest import devices, random_graph

HAS_METIS = importlib.util.find_spec("pymetis") is not None
METHODS = ["rcm", "degree", pytest.param("metis", marks=pytest.mark.skipif(
    not HAS_METIS, reason="pymetis is not installed"))]


def _relabelled(edge_index: torch.Tensor, num_nodes: int, seed: int) -> torch.Tensor:
    labels = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return labels[edge_index]


def _undirected(edge_index: torch.Tensor) -> torch.Tensor:
    return torch.cat([edge_index, edge_index.flip(0)], dim=1)


def _bandwidth(edge_index: torch.Tensor) -> int:
    return int((edge_index[0] - edge_index[1]).abs().max())


@pytest.mark.parametrize("method", METHODS)
def test_orders_are_permutations(method):
    _, ei = random_graph(80, 500, seed=3)  # hub, self-loops, duplicates, isolated nodes
    order = reordering.node_order(ei, 80, method)
    assert torch.equal(torch.sort(order.perm).values, torch.arange(80))
    assert torch.equal(order.perm[order.rank], torch.arange(80))


def test_rcm_finds_the_band_of_a_shuffled_path_and_grid():
    path = _undirected(torch.stack([torch.arange(99), torch.arange(1, 100)]))
    shuffled = _relabelled(path, 100, seed=0)
    assert _bandwidth(shuffled) > 50
    relabelled, _ = fastgnn.reorder(shuffled, "rcm")
    assert _bandwidth(relabelled) == 1

    side = 12
    ids = torch.arange(side * side).view(side, side)
    grid = _undirected(torch.cat([torch.stack([ids[:, :-1].flatten(), ids[:, 1:].flatten()]),
                                  torch.stack([ids[:-1].flatten(), ids[1:].flatten()])], dim=1))
    shuffled = _relabelled(grid, side * side, seed=1)
    relabelled, _ = fastgnn.reorder(shuffled, "rcm", num_nodes=side * side)
    assert _bandwidth(relabelled) <= 2 * side < _bandwidth(shuffled)


def test_rcm_orders_every_component_and_isolated_node():
    ei = _undirected(torch.tensor([[0, 1, 5, 6], [1, 2, 6, 7]]))
    _, order = fastgnn.reorder(ei, "rcm", num_nodes=10)  # 3, 4, 8, 9 have no edges
    assert torch.equal(torch.sort(order.perm).values, torch.arange(10))


def test_degree_order_puts_hubs_first():
    g, _ = random_graph(70, 600, seed=4)
    g2, order = fastgnn.reorder(g, "degree")
    degree = g2.in_degree
    assert torch.all(degree[:-1] >= degree[1:])
    assert torch.equal(degree, g.in_degree[order.perm])


@pytest.mark.skipif(not HAS_METIS, reason="pymetis is not installed")
def test_metis_keeps_each_community_contiguous():
    cliques = [torch.combinations(torch.arange(c * 20, c * 20 + 20)).t() for c in range(2)]
    bridge = torch.tensor([[0], [20]])
    labels = torch.randperm(40, generator=torch.Generator().manual_seed(5))
    ei = labels[_undirected(torch.cat(cliques + [bridge], dim=1))]
    _, order = fastgnn.reorder(ei, "metis", num_parts=2)
    new_ids = order.rank[labels]  # new id of each clique member, clique by clique
    first = torch.sort(new_ids[:20]).values
    assert torch.equal(first, torch.arange(20)) or torch.equal(first, torch.arange(20, 40))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("method", METHODS)
def test_round_trip_through_every_op_family(method, device):
    g, ei = random_graph(60, 400, seed=7)
    g = g.to(device)
    g2, order = fastgnn.reorder(g, method)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(60, 16, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    weight = torch.rand(g.num_edges, generator=gen, dtype=torch.float64).to(device)
    q, k, v = (torch.randn(60, 2, 8, generator=gen, dtype=torch.float64).to(device)
               for _ in range(3))
    att = torch.randn(2, 8, generator=gen, dtype=torch.float64).to(device)

    def runs(graph, permute):
        return {
            "spmm both": fastgnn.ops.spmm(graph, permute(x), norm="both"),
            "spmm weighted mean": fastgnn.ops.spmm(graph, permute(x), edge_weight=weight,
                                                   reduce="mean"),
            "max": fastgnn.ops.aggregate(graph, permute(x), reduce="max"),
            "transformer": fastgnn.ops.graph_attention(graph, permute(q), permute(k), permute(v)),
            "gatv2": fastgnn.ops.gatv2_attention(graph, permute(q), permute(k), att),
        }

    expected = runs(g, lambda t: t)
    actual = runs(g2, order.permute)
    for name, out in actual.items():
        torch.testing.assert_close(order.restore(out), expected[name], msg=name)
    grad = torch.autograd.grad(sum(o.sum() for o in expected.values()), x)[0]
    grad2 = torch.autograd.grad(sum(o.sum() for o in actual.values()), x)[0]
    torch.testing.assert_close(grad2, grad)


def test_pyg_data_round_trip():
    tg = pytest.importorskip("torch_geometric")
    g, ei = random_graph(40, 250, seed=10, self_loops=False)
    gen = torch.Generator().manual_seed(11)
    data = tg.data.Data(x=torch.randn(40, 8, generator=gen), edge_index=ei,
                        y=torch.randint(0, 3, (40,), generator=gen),
                        train_mask=torch.rand(40, generator=gen) > 0.5,
                        edge_attr=torch.randn(ei.shape[1], 4, generator=gen))
    data2, order = fastgnn.reorder(data, "rcm")
    assert torch.equal(data2.edge_attr, data.edge_attr)
    assert torch.equal(data2.y, data.y[order.perm])
    assert torch.equal(data2.train_mask, data.train_mask[order.perm])
    assert torch.equal(data.edge_index, ei)  # the caller's Data is left as it was
    conv = tg.nn.GCNConv(8, 5)
    torch.testing.assert_close(order.restore(conv(data2.x, data2.edge_index)),
                               conv(data.x, data.edge_index))


def test_bad_inputs():
    g, ei = random_graph(30, 100, seed=12)
    with pytest.raises(ValueError, match="method"):
        fastgnn.reorder(g, "random")
    with pytest.raises(TypeError, match="graph_or_data"):
        fastgnn.reorder([[0, 1], [1, 0]])
    bipartite, _ = random_graph(30, 100, num_dst=20, seed=13)
    with pytest.raises(ValueError, match="homogeneous"):
        fastgnn.reorder(bipartite)
    _, order = fastgnn.reorder(g, "degree")
    with pytest.raises(ValueError, match="one row per node"):
        order.permute(torch.zeros(29, 3))
    with pytest.raises(ValueError, match="num_parts"):
        fastgnn.reorder(g, "metis", num_parts=0)
