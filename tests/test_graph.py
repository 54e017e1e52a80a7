"""fastgnn.Graph: construction, derived formats, caches and input validation."""
import gc

import pytest
import torch

import fastgnn
from fastgnn import graph as graph_module
from conftest import random_graph


def tiny_edge_index():
    # edges (src -> dst): 0->1, 2->1, 1->0, 1->2, 2->2, 0->1 (duplicate); node 3 isolated
    return torch.tensor([[0, 2, 1, 1, 2, 0], [1, 1, 0, 2, 2, 1]])


def test_csr_is_destination_major_and_sorted():
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    assert g.num_src_nodes == g.num_dst_nodes == 4 and g.num_edges == 6
    assert g.rowptr.tolist() == [0, 1, 4, 6, 6]
    assert g.col.tolist() == [1, 0, 0, 2, 1, 2]  # sources ascending within each destination
    assert g.index_dtype == torch.int32 and g.rowptr.dtype == torch.int32
    assert g.in_degree.tolist() == [1, 3, 2, 0]
    assert g.out_degree.tolist() == [2, 2, 2, 0]
    assert g.has_self_loops and not g.is_bipartite


def test_edge_perm_maps_csr_positions_to_input_order():
    ei = tiny_edge_index()
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=4)
    pairs = torch.stack([g.col.long(), g.row.long()])
    assert torch.equal(pairs, ei[:, g.edge_perm])
    weights = torch.arange(6.0)
    assert torch.equal(g.edge_values_to_csr(weights), weights[g.edge_perm])


def test_sorted_input_has_identity_perm():
    ei = torch.tensor([[1, 0, 1], [0, 1, 1]])
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=2)
    assert g.edge_perm is None


def test_transpose_is_source_major_with_perm():
    g, _ = random_graph(40, 200, seed=3)
    rowptr_t, col_t, perm_t = g.transpose()
    assert rowptr_t.numel() == g.num_src_nodes + 1
    dst_of_t = col_t.long()
    src_of_t = torch.repeat_interleave(torch.arange(g.num_src_nodes), g.out_degree)
    assert torch.equal(g.col.long()[perm_t.long()], src_of_t)
    assert torch.equal(g.row.long()[perm_t.long()], dst_of_t)
    assert g.transpose()[0] is rowptr_t  # cached


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")])])
@pytest.mark.parametrize("num_dst", [None, 17])
def test_transpose_orders_by_source_then_destination_then_csr_position(device, num_dst):
    """The backward passes walk this order, so it must be unique: duplicates (multi-edges)
    keep their CSR order."""
    g, _ = random_graph(40, 600, num_dst=num_dst, seed=5, device=device)  # many duplicates
    _, col_t, perm_t = g.transpose()
    src, dst = g.col.long().cpu(), g.row.long().cpu()
    expected = sorted(range(g.num_edges), key=lambda p: (int(src[p]), int(dst[p]), p))
    assert perm_t.long().cpu().tolist() == expected
    assert torch.equal(col_t.long().cpu(), dst[expected])


def test_transposed_edge_ids_name_the_input_edges():
    g, edge_index = random_graph(40, 200, seed=3)
    assert g.edge_perm is not None  # an input order other than the CSR's
    rowptr_t, col_t, _ = g.transpose()
    ids = g.transposed_edge_ids().long()
    src_of_t = torch.repeat_interleave(torch.arange(g.num_src_nodes), g.out_degree)
    assert torch.equal(edge_index[0, ids], src_of_t)
    assert torch.equal(edge_index[1, ids], col_t.long())
    assert g.transposed_edge_ids() is g.transposed_edge_ids()  # cached


def test_transpose_not_cached_when_disabled():
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4, cache_transpose=False)
    assert g.transpose()[0] is not g.transpose()[0]


def test_bipartite_block():
    ei = torch.tensor([[0, 4, 2], [0, 1, 1]])
    g = fastgnn.Graph.from_edge_index(ei, num_src_nodes=5, num_dst_nodes=2)
    assert g.is_bipartite and g.num_src_nodes == 5 and g.num_dst_nodes == 2
    assert g.rowptr.tolist() == [0, 1, 3] and g.col.tolist() == [0, 2, 4]
    assert not g.is_symmetric


def test_from_csr_matches_from_edge_index():
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    h = fastgnn.Graph.from_csr(g.rowptr, g.col, num_src_nodes=4)
    assert torch.equal(h.rowptr, g.rowptr) and torch.equal(h.col, g.col)
    assert h.edge_perm is None


def test_num_nodes_inferred_and_empty_graph():
    g = fastgnn.Graph.from_edge_index(torch.tensor([[0, 5], [5, 0]]))
    assert g.num_dst_nodes == 6
    empty = fastgnn.Graph.from_edge_index(torch.empty(2, 0, dtype=torch.long), num_nodes=3)
    assert empty.num_edges == 0 and empty.rowptr.tolist() == [0, 0, 0, 0]
    assert empty.max_in_degree == 0


def test_symmetry_flag():
    sym = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    assert fastgnn.Graph.from_edge_index(sym, num_nodes=3).is_symmetric
    assert not fastgnn.Graph.from_edge_index(sym[:, :3], num_nodes=3).is_symmetric


def test_norms_without_out_degrees_do_not_sort_for_them(monkeypatch):
    """Out-degrees take a sort of every edge, which a mini-batch pays per batch: only the
    "left" and "both" norms may build them."""
    def no_sort(self):
        raise AssertionError("out_degree built")
    monkeypatch.setattr(fastgnn.Graph, "out_degree", property(no_sort))
    g, _ = random_graph(30, 100, seed=2)
    for norm, reduce in (("none", "mean"), ("right", "sum"), ("right", "mean")):
        assert g.norm_values(norm, reduce) is not None
    with pytest.raises(AssertionError, match="out_degree built"):
        g.norm_values("both")


def test_norm_values_follow_dgl_graphconv():
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    src, dst = g.col.long(), g.row.long()
    out_deg, in_deg = g.out_degree.double(), g.in_degree.double().clamp(min=1)
    expect = {
        "left": 1 / out_deg[src],
        "right": 1 / in_deg[dst],
        "both": 1 / torch.sqrt(out_deg[src] * in_deg[dst]),
    }
    for norm, values in expect.items():
        torch.testing.assert_close(g.norm_values(norm, dtype=torch.float64), values)
    assert g.norm_values("none") is None
    torch.testing.assert_close(g.norm_values("none", "mean", torch.float64), 1 / in_deg[dst])
    assert g.norm_values("both") is g.norm_values("both")  # cached


def test_degree_buckets_split_by_quantile():
    g, _ = random_graph(200, 2000, seed=4)
    threshold, light, heavy = g.degree_buckets(0.9)
    assert light.numel() + heavy.numel() == g.num_dst_nodes
    assert bool((g.in_degree[heavy.long()] > threshold).all())
    assert bool((g.in_degree[light.long()] <= threshold).all())
    assert 0 in heavy.tolist()  # the hub


def test_degree_buckets_of_sources_split_out_degrees():
    g, _ = random_graph(200, 2000, seed=4)
    threshold, light, heavy = g.degree_buckets(0.9, by_degree=True, direction="out")
    assert heavy.numel() > 0 and light.numel() + heavy.numel() == g.num_src_nodes
    assert bool((g.out_degree[heavy.long()] > threshold).all())
    assert bool((g.out_degree[light.long()] <= threshold).all())
    degrees = g.out_degree[heavy.long()]
    assert bool((degrees[:-1] >= degrees[1:]).all())  # longest first
    assert g.degree_buckets(0.9, by_degree=True) is not g.degree_buckets(
        0.9, by_degree=True, direction="out")
    with pytest.raises(ValueError, match="direction"):
        g.degree_buckets(direction="both")


def test_int64_indices_when_needed(monkeypatch):
    monkeypatch.setattr(graph_module, "_INT32_MAX", 3)
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    assert g.col.dtype == torch.int64 and g.rowptr.dtype == torch.int64


@pytest.mark.parametrize("in_cycle", [False, True])
def test_release_hook_runs_when_graph_is_freed(in_cycle):
    freed = []
    graph_module.add_release_hook(freed.append)
    try:
        g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
        key = g.key
        if in_cycle:  # then only the cycle collector frees it
            g._derived["self"] = g
        del g
        if not in_cycle:
            assert key in freed  # at once, not at the next collection
        gc.collect()  # (which may free other tests' graphs too)
        assert freed.count(key) == 1
    finally:
        graph_module._release_hooks.remove(freed.append)


def test_keys_are_unique():
    a = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    b = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    assert a.key != b.key


def test_to_same_device_is_identity_and_repr():
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    assert g.to("cpu") is g
    assert "num_edges=6" in repr(g)


@pytest.mark.gpu
@pytest.mark.sanitize
def test_to_cuda_and_pin_memory():
    g = fastgnn.Graph.from_edge_index(tiny_edge_index(), num_nodes=4)
    gc_ = g.to("cuda")
    assert gc_.device.type == "cuda" and torch.equal(gc_.col.cpu(), g.col)
    assert g.pin_memory().is_pinned()
    built_on_gpu = fastgnn.Graph.from_edge_index(tiny_edge_index().cuda(), num_nodes=4)
    assert torch.equal(built_on_gpu.col.cpu(), g.col)


# ---- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad, error, words", [
    ([[0, 1], [1, 0]], TypeError, "torch.Tensor"),
    (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), TypeError, "integer dtype"),
    (torch.tensor([0, 1, 2]), ValueError, "shape [2, E]"),
    (torch.zeros(3, 4, dtype=torch.long), ValueError, "shape [2, E]"),
    (torch.tensor([[0, -1], [1, 0]]), ValueError, "negative"),
    (torch.tensor([[0, 9], [1, 0]]), ValueError, "out of range"),
])
def test_from_edge_index_rejects_bad_input(bad, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        fastgnn.Graph.from_edge_index(bad, num_nodes=4)


def test_inconsistent_sizes_are_rejected():
    ei = torch.tensor([[0, 4], [1, 0]])
    with pytest.raises(ValueError, match="not both"):
        fastgnn.Graph.from_edge_index(ei, num_nodes=5, num_src_nodes=5, num_dst_nodes=2)
    with pytest.raises(ValueError, match="together"):
        fastgnn.Graph.from_edge_index(ei, num_src_nodes=5)
    with pytest.raises(ValueError, match="num_dst_nodes"):
        fastgnn.Graph.from_edge_index(torch.tensor([[0], [3]]), num_src_nodes=5, num_dst_nodes=2)
    with pytest.raises(ValueError, match="non-negative"):
        fastgnn.Graph.from_edge_index(ei, num_nodes=-1)
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        fastgnn.Graph.from_edge_index(ei, num_nodes=5.0)


def test_from_csr_rejects_bad_input():
    indices = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="start at 0"):
        fastgnn.Graph.from_csr(torch.tensor([0, 1, 3]), indices)
    with pytest.raises(ValueError, match="non-decreasing"):
        fastgnn.Graph.from_csr(torch.tensor([0, 2, 1, 2]), indices)
    with pytest.raises(ValueError, match="out of range"):
        fastgnn.Graph.from_csr(torch.tensor([0, 1, 2]), torch.tensor([0, 7]), num_src_nodes=3)
    with pytest.raises(ValueError, match="on meta"):
        fastgnn.Graph.from_csr(torch.tensor([0, 1, 2]), torch.empty(2, dtype=torch.long,
                                                                     device="meta"))
    with pytest.raises(TypeError, match="indptr must have an integer dtype"):
        fastgnn.Graph.from_csr(torch.tensor([0.0, 2.0]), indices)


class FakeDGLBlock:
    """The part of DGLGraph's API that Graph.from_dgl uses (DGL is tested in its own env)."""

    def __init__(self, src, dst, num_src, num_dst):
        self._src, self._dst, self._num_src, self._num_dst = src, dst, num_src, num_dst

    def edges(self, order="eid"):
        assert order == "eid"
        return self._src, self._dst

    def formats(self):
        return {"created": ["coo"], "not created": ["csr", "csc"]}

    def num_src_nodes(self):
        return self._num_src

    def num_dst_nodes(self):
        return self._num_dst


def test_from_dgl_keeps_dgl_edge_order():
    src, dst = torch.tensor([3, 0, 1]), torch.tensor([1, 0, 1])
    g = fastgnn.Graph.from_dgl(FakeDGLBlock(src, dst, 4, 2))
    assert g.num_src_nodes == 4 and g.num_dst_nodes == 2
    assert torch.equal(g.col.long(), src[g.edge_perm]) and torch.equal(g.row.long(), dst[g.edge_perm])
