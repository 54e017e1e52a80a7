"""Min/max aggregation's edge-id tie rules (``aggregate(..., ties="first-edge"|"last-edge")``,
DGL's picks, run on the CSR with each row's edges in edge-id order): the winning edge among
equal messages, the values and both gradients against an independent scatter over the edges in
input order, on graphs whose input edge order is not their CSR order (duplicates, self-loops,
isolated nodes, a hub), with and without weights, on every backward path (CPU; GPU atomic and
deterministic pull, against the CPU)."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops import minmax
from conftest import devices, hub_graph, minmax_opcheck_plans, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("minmax_aggregate"),
                                reason="native extension not built")

OP = torch.ops.fastgnn.minmax_aggregate
EDGE_TIES = ("first-edge", "last-edge")


def _small_ints(shape, device, seed, low=-1, high=3):
    """ReLU'd small integers: mostly ties (many zeros); sums of products stay exact."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=gen).clamp(min=0).double().to(device)


def _winners(edge_index, num_dst, messages, reduce, ties):
    """The input edge id winning each (destination, feature) among equal extreme messages
    ([E, F], input order): the smallest or largest id; -1 where there is none."""
    src, dst = edge_index
    num_edges, width = messages.shape
    index = dst.view(-1, 1).expand(-1, width)
    extreme = torch.full((num_dst, width), float("-inf") if reduce == "max" else float("inf"),
                         dtype=messages.dtype, device=messages.device)
    extreme = extreme.scatter_reduce(0, index, messages, "amax" if reduce == "max" else "amin")
    ids = torch.arange(num_edges, device=messages.device).view(-1, 1).expand(-1, width)
    last = ties == "last-edge"
    none = -1 if last else num_edges
    cand = torch.where(messages == extreme[dst], ids, torch.full_like(ids, none))
    won = torch.full((num_dst, width), none, dtype=torch.int64, device=messages.device)
    won = won.scatter_reduce(0, index, cand, "amax" if last else "amin")
    return torch.where((won >= 0) & (won < num_edges), won, torch.full_like(won, -1))


def _expected(edge_index, num_dst, x, w, reduce, ties, grad):
    """Values, winning input edges and the gradients of x and w ([E] or None) from _winners."""
    src, _ = edge_index
    weight = torch.ones(src.numel(), dtype=x.dtype, device=x.device) if w is None else w
    messages = x[src] * weight.view(-1, 1)
    won = _winners(edge_index, num_dst, messages, reduce, ties)
    rows, feats = torch.nonzero(won >= 0, as_tuple=True)
    e = won[rows, feats]
    out = torch.zeros(num_dst, x.shape[1], dtype=x.dtype, device=x.device)
    out[rows, feats] = messages[e, feats]
    grad_x = torch.zeros_like(x).index_put_((src[e], feats), grad[rows, feats] * weight[e],
                                            accumulate=True)
    grad_w = torch.zeros_like(weight).index_put_((e,), grad[rows, feats] * x[src[e], feats],
                                                 accumulate=True)
    return out, won, grad_x, grad_w


def _run(g, x, w, reduce, ties, grad):
    xg = x.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    out = fastgnn.ops.aggregate(g, xg, reduce, edge_weight=wg, ties=ties)
    out.backward(grad)
    return out, xg.grad, None if w is None else wg.grad


def _check(g, edge_index, x, w, reduce, ties):
    """Native and reference against the independent scatter, bit for bit (small integers)."""
    gen = torch.Generator().manual_seed(5)
    grad = torch.randint(-3, 4, (g.num_dst_nodes, x.shape[1]), generator=gen)
    grad = grad.to(x.dtype).to(x.device)
    want_out, won, want_gx, want_gw = _expected(edge_index, g.num_dst_nodes, x.double(),
                                                None if w is None else w.double(), reduce, ties,
                                                grad.double())
    for backend in ("native", "reference"):
        with fastgnn.backend(backend):
            out, gx, gw = _run(g, x, w, reduce, ties, grad)
        assert torch.equal(out.double(), want_out), backend
        assert torch.equal(gx.double(), want_gx), backend
        if w is not None:
            assert torch.equal(gw.double(), want_gw), backend
    # the recorded winner: the source (unweighted) or the winning edge's position in the CSR
    # whose rows hold their edges in edge-id order
    col, perm = minmax.csr_in_edge_order(g)
    position = torch.argsort(perm) if perm is not None else \
        torch.arange(g.num_edges, device=x.device)
    weight = None if w is None else minmax.weight_matrix(g, w, x.dtype)
    _, arg = OP(g.rowptr, col, x, reduce == "max", None, None, 0, 0, None, None, 0, weight,
                None if w is None else perm, ties == "last-edge")
    picked = won.clamp(min=0)
    want_arg = edge_index[0][picked] if w is None else position[picked]
    assert torch.equal(arg.long(), torch.where(won >= 0, want_arg, -1))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("ties", EDGE_TIES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [1, 7, 64])
def test_edge_ties_match_an_independent_scatter(device, reduce, ties, weighted, dtype,
                                                index_dtype, width):
    g, ei = random_graph(60, 400, seed=21)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=60, index_dtype=index_dtype).to(device)
    assert g.edge_perm is not None  # input edge order is not CSR order
    x = _small_ints((60, width), device, seed=22).to(dtype)
    w = _small_ints((g.num_edges,), device, seed=23, low=1).to(dtype) if weighted else None
    _check(g, ei.to(device), x, w, reduce, ties)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("ties", EDGE_TIES)
def test_nan_messages_follow_the_rule_too(device, ties):
    """NaN wins and is equal to NaN: the first or last NaN by edge id, as in the reference."""
    g, _ = random_graph(60, 400, seed=34)
    g = g.to(device)
    x = _small_ints((60, 6), device, seed=35).float()
    x[torch.randperm(60, generator=torch.Generator().manual_seed(36))[:20], :3] = float("nan")
    w = _small_ints((g.num_edges,), device, seed=37, low=1).float()
    grad = torch.randint(-3, 4, (60, 6)).float().to(device)
    for weight in (None, w):
        got, want = [], []
        for backend, results in (("native", got), ("reference", want)):
            with fastgnn.backend(backend):
                results.extend(_run(g, x, weight, "max", ties, grad))
        # values and x's gradient (the reference's weight gradient is NaN on every edge of a
        # NaN source, winning or not: NaN times its zero upstream gradient)
        for a, b in zip(got[:2], want[:2]):
            torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("ties", EDGE_TIES)
def test_all_equal_messages_and_bipartite(device, ties):
    g, ei = random_graph(50, 300, num_dst=30, seed=24)
    g = g.to(device)
    x = torch.ones(50, 5, device=device)
    for w in (None, torch.ones(g.num_edges, device=device)):
        _check(g, ei.to(device), x, w, "max", ties)


@pytest.mark.parametrize("device", devices())
def test_edge_ties_on_a_hub(device):
    g = hub_graph(device)
    src, dst = g.col[torch.argsort(g.edge_perm)].long(), g.row[torch.argsort(g.edge_perm)].long()
    x = _small_ints((g.num_src_nodes, 16), device, seed=25).float()
    for ties in EDGE_TIES:
        _check(g, torch.stack([src, dst]), x, None, "max", ties)


def test_first_edge_in_csr_order_is_the_default_rule():
    """Edges given in CSR order (no edge_perm): the first edge is the smallest source, and
    DGL's rules run on the graph's own CSR."""
    g, _ = random_graph(40, 200, seed=26)
    ordered = fastgnn.Graph.from_edge_index(torch.stack([g.col.long(), g.row.long()]),
                                            num_nodes=40)
    assert ordered.edge_perm is None
    assert minmax.csr_in_edge_order(ordered) == (ordered.col, None)
    x = _small_ints((40, 9), "cpu", seed=27)
    _, want = reference.aggregate_with_arg(ordered, x, "max")
    _, got = reference.aggregate_with_arg(ordered, x, "max", ties="first-edge")
    assert torch.equal(got, want)
    assert torch.equal(fastgnn.ops.aggregate(ordered, x, "max", ties="first-edge"),
                       fastgnn.ops.aggregate(ordered, x, "max"))


@pytest.mark.gpu
@pytest.mark.parametrize("ties", EDGE_TIES)
@pytest.mark.parametrize("weighted", [False, True])
def test_gpu_backwards_follow_the_cpu_winners(ties, weighted):
    """Atomic and deterministic pull backward and the weight gradient on the GPU give the CPU's
    gradients under the same tie rule (small integers: exact), float32, tolokers-like widths."""
    g = hub_graph("cpu")
    x = _small_ints((g.num_src_nodes, 32), "cpu", seed=28).float()
    w = _small_ints((g.num_edges,), "cpu", seed=29, low=1).float() if weighted else None
    grad = torch.randint(-3, 4, (g.num_dst_nodes, 32)).float()
    want = _run(g, x, w, "max", ties, grad)
    gc = g.to("cuda")
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)
        try:
            got = _run(gc, x.cuda(), None if w is None else w.cuda(), "max", ties, grad.cuda())
        finally:
            torch.use_deterministic_algorithms(False)
        for a, b in zip(got, want):
            if b is not None:
                assert torch.equal(a.cpu(), b)


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = random_graph(30, 200, seed=30, device=device)
    x = _small_ints((30, 6), device, seed=31).float().requires_grad_()
    w = _small_ints((g.num_edges, 2), device, seed=32, low=1).float().requires_grad_()
    t_rowptr, t_col, _ = g.transpose()
    col, perm = minmax.csr_in_edge_order(g)
    for weight in (None, w):
        torch.library.opcheck(OP, (g.rowptr, col, x, True, None, None, 0, 0, None, None, 0,
                                   weight, perm, True))
        torch.library.opcheck(OP, (g.rowptr, col, x, False, None, None, 0, 0, t_rowptr, t_col,
                                   g.key, weight, perm, True))


def test_bad_ties_name_the_argument():
    g, _ = random_graph(20, 60, seed=33)
    x = torch.randn(20, 4)
    with pytest.raises(ValueError, match="ties"):
        fastgnn.ops.aggregate(g, x, "max", ties="largest-edge")


@pytest.mark.gpu
@pytest.mark.parametrize("switches", [(True,), (False, True)], ids=["last_wins", "ignore_nan"])
def test_gpu_dgl_rules_refuse_the_packed_paths(switches):
    """DGL's last-edge tie rule and its NaN rule run on the light path only."""
    g = hub_graph("cuda")
    x = torch.randn(g.num_src_nodes, 8, device="cuda")
    plans = minmax_opcheck_plans(g, "cuda")[1:]  # heavy rows, work items
    assert len(plans) == 2
    for plan in plans:
        with pytest.raises(RuntimeError, match="light path"):
            OP(g.rowptr, g.col, x, True, *plan, None, None, g.key, None, None, *switches)
