"""Regression tests from an adversarial bad-input audit of the public API: each input here
once crashed, tried a huge allocation, raised an unnamed error or gave a silent wrong answer.
The rule: a correct result, or a ValueError/TypeError naming the argument."""
import pytest
import torch

import fastgnn
from fastgnn import CBSR, Graph, SnapshotGraph, ops
from fastgnn import _validate
from fastgnn.sampling import NeighborLoader, NeighborSampler

EDGES = torch.tensor([[0, 1, 2, 3, 0, 2, 1], [1, 2, 3, 0, 2, 0, 1]])  # node 4 has no edges
N = 5
NO_EDGES = torch.empty(2, 0, dtype=torch.long)


def graph():
    return Graph.from_edge_index(EDGES, num_nodes=N)


@pytest.mark.parametrize("build, name", [
    (lambda: Graph.from_edge_index(EDGES, num_nodes=2**40), "num_nodes"),
    (lambda: Graph.from_edge_index(NO_EDGES, num_nodes=2**62), "num_nodes"),
    (lambda: Graph.from_edge_index(EDGES, num_src_nodes=2**40, num_dst_nodes=N), "num_src_nodes"),
    (lambda: Graph.from_edge_index(EDGES, num_src_nodes=N, num_dst_nodes=2**40), "num_dst_nodes"),
    (lambda: Graph.from_edge_index(torch.tensor([[0], [2**40]])), "num_nodes"),
    (lambda: Graph.from_csr(graph().rowptr, graph().col, 2**40), "num_src_nodes"),
    (lambda: fastgnn.reorder(EDGES, "degree", num_nodes=2**40), "num_nodes"),
])
def test_huge_declared_sizes_raise_instead_of_allocating(build, name):
    with pytest.raises(ValueError, match=f"{name}.*too large"):
        build()


def test_composite_key_overflow_keeps_the_csr_right(monkeypatch):
    # num_src * num_dst beyond int64 once made the (destination, source) sort key wrap: a
    # wrong CSR. A device with that much memory is mimicked so the sizes pass the check.
    monkeypatch.setattr(_validate, "_device_memory_bytes", lambda device: 2**70)
    edges = torch.tensor([[2**62 - 1, 0, 5], [3, 1, 3]])
    g = Graph.from_edge_index(edges, num_src_nodes=2**62, num_dst_nodes=4)
    assert g.rowptr.tolist() == [0, 0, 1, 1, 3]
    assert g.col.tolist() == [0, 5, 2**62 - 1]
    assert g.edge_perm.tolist() == [1, 2, 0]


@pytest.mark.parametrize("value", [torch.tensor(5.7), torch.tensor(True)])
def test_num_nodes_rejects_non_integer_tensors(value):
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        Graph.from_edge_index(EDGES, num_nodes=value)


@pytest.mark.parametrize("args, error, match", [
    ((torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([0, 1]), 2), TypeError,
     "rowptr .* and col .* one index dtype"),
    ((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), None), TypeError, "num_src_nodes"),
    ((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2, torch.tensor([5, 100])), ValueError,
     "edge_perm has index 100"),
    ((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2, torch.tensor([0, 0])), ValueError,
     "edge_perm must be a permutation"),
    ((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2, torch.tensor([0., 1.])), TypeError,
     "edge_perm must have an integer dtype"),
    ((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2, torch.tensor([0])), ValueError,
     "edge_perm must have shape"),
])
def test_graph_constructor_checks_its_arrays(args, error, match):
    with pytest.raises(error, match=match):
        Graph(*args)


@pytest.mark.parametrize("rowptr, col", [
    (torch.tensor([0, 0, 1, 1, 2, 2])[::2], torch.tensor([1, 0])),
    (torch.tensor([0, 1, 2]), torch.tensor([1, 9, 0, 9])[::2]),
])
def test_graph_constructor_takes_strided_arrays(rowptr, col):
    g = Graph(rowptr, col, 2)
    x = torch.arange(6.).view(2, 3)
    assert torch.equal(ops.spmm(g, x), x.flip(0))


@pytest.mark.parametrize("reduce", ["sum", "mean"])  # min/max checked it already
def test_aggregate_edge_weight_must_be_a_tensor(reduce):
    with pytest.raises(TypeError, match="edge_weight must be a torch.Tensor"):
        ops.aggregate(graph(), torch.ones(N, 2), reduce, edge_weight=[1.] * EDGES.shape[1])


@pytest.mark.parametrize("slope", ["a", None, True])
def test_gatv2_negative_slope_type(slope):
    x = torch.ones(N, 2, 4)
    with pytest.raises(TypeError, match="negative_slope must be a float"):
        ops.gatv2_attention(graph(), x, x, torch.ones(2, 4), negative_slope=slope)


def test_graph_attention_scale_rejects_bool():
    x = torch.ones(N, 2, 4)
    with pytest.raises(TypeError, match="scale must be a float or None"):
        ops.graph_attention(graph(), x, x, x, scale=True)


def test_graph_attention_zero_head_dim():
    x = torch.empty(N, 2, 0)
    assert ops.graph_attention(graph(), x, x, x).shape == (N, 2, 0)


@pytest.mark.parametrize("indices, match", [
    (torch.tensor([[0, 200]] * N, dtype=torch.uint8), "column 200, out of range"),
    (torch.tensor([[0, 500]] * N, dtype=torch.int16), "column 500, out of range"),
    (torch.tensor([[-1, 3]] * N, dtype=torch.int16), "column -1, out of range"),
    (torch.tensor([[3, 1]] * N, dtype=torch.uint8), "strictly ascending"),
    (torch.tensor([[2, 2]] * N, dtype=torch.uint8), "strictly ascending"),
])
def test_cbsr_checks_columns_on_cpu(indices, match):
    num_features = 8 if indices.dtype == torch.uint8 else 400
    with pytest.raises(ValueError, match=match):
        CBSR(torch.ones(N, 2), indices, num_features)


def test_cbsr_num_features_beyond_int32():
    with pytest.raises(ValueError, match="num_features must be at most"):
        CBSR(torch.ones(N, 2), torch.tensor([[0, 1]] * N, dtype=torch.int32), 2**40)


def test_spmm_snapshots_without_nodes():
    sg = SnapshotGraph([NO_EDGES, NO_EDGES], 0)
    assert ops.spmm_snapshots(sg, torch.empty(2, 0, 3)).shape == (2, 0, 3)


@pytest.mark.parametrize("edges, num_nodes, match", [
    (EDGES, 2, "index 3, out of range for num_nodes=2"),
    (torch.tensor([[0, -1], [1, 2]]), 3, "negative index"),
    (EDGES, -1, "num_nodes must be non-negative"),
])
def test_reorder_degree_checks_ids_against_num_nodes(edges, num_nodes, match):
    # "rcm" builds a Graph, which checked them already; "degree" counted with bincount
    with pytest.raises(ValueError, match=match):
        fastgnn.reorder(edges, "degree", num_nodes=num_nodes)


def test_fanouts_beyond_int64():
    with pytest.raises(ValueError, match="fanouts must be ints in"):
        NeighborSampler(graph(), [2**63])


@pytest.mark.parametrize("name", ["features", "labels"])
def test_loader_zero_dim_node_tensors(name):
    with pytest.raises(ValueError, match=f"{name} must have one row per node"):
        NeighborLoader(graph(), [2], torch.arange(N), batch_size=2, **{name: torch.tensor(1.)})


@pytest.mark.parametrize("value", ["no", 1, None])
def test_cache_transpose_must_be_a_bool(value):
    # "no" was once read as True
    with pytest.raises(TypeError, match="cache_transpose must be a bool"):
        Graph.from_edge_index(EDGES, num_nodes=N, cache_transpose=value)


@pytest.mark.parametrize("device, error, match", [
    ("gpu", ValueError, "^device: .*gpu"),
    ("cuda:x", ValueError, "^device: Invalid device string"),
    (3.5, TypeError, "device must be a torch.device, a device string or an index, got float"),
    (True, TypeError, "device must be .* got bool"),
])
def test_public_device_arguments_name_a_bad_device(device, error, match):
    from fastgnn.temporal_signal import snapshot_windows

    with pytest.raises(error, match=match):
        NeighborSampler(graph(), [2], device=device)
    with pytest.raises(error, match=match):
        NeighborLoader(graph(), [2], torch.arange(3), device=device)
    with pytest.raises(error, match=match):
        SnapshotGraph([EDGES], N, device=device)
    with pytest.raises(error, match=match):
        snapshot_windows([EDGES, EDGES], 2, num_nodes=N, device=device)


@pytest.mark.parametrize("call", ["sample_blocks", "sample_subgraph", "load"])
@pytest.mark.parametrize("generator", [123, "seed", torch.tensor(1)])
def test_sampling_names_a_generator_that_is_not_one(call, generator):
    seeds = torch.arange(3)
    target = (NeighborLoader(graph(), [2], seeds) if call == "load"
              else NeighborSampler(graph(), [2]))
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None"):
        getattr(target, call)(seeds, generator=generator)
