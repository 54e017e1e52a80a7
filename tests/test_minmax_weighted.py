"""Weighted min/max aggregation (``aggregate(g, x, "max"|"min", edge_weight=w)``, DGL's
``u_mul_e_max/min``): values, winning CSR positions and both gradients against the reference
and an independent float64 scatter, on graphs with duplicate edges of different weights,
self-loops, isolated nodes and hubs; per-edge ``[E]`` and per-head ``[E, H]`` weights."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops import minmax
from fastgnn.ops._common import edge_perm_index
from conftest import devices, hub_graph, minmax_opcheck_plans, random_edge_index, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("minmax_aggregate"),
                                reason="native extension not built")

REDUCES = ("min", "max")
OP = torch.ops.fastgnn.minmax_aggregate
BACKWARD_OP = torch.ops.fastgnn.minmax_aggregate_backward
WEIGHT_BACKWARD_OP = torch.ops.fastgnn.minmax_weight_backward
# (x's feature shape, weight's shape after E): one weight per edge, or one per edge and head
SHAPES = [((12,), ()), ((1,), ()), ((3, 5), (3,)), ((4, 2, 3), (4,)), ((2, 1), (2,)),
          ((5, 4), ())]


def _tied(shape, dtype, device, seed, values=(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)):
    """Entries drawn from a few values: many tied messages, weights of duplicate edges equal
    or not."""
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor(values, dtype=torch.float64)
    return pool[torch.randint(0, len(values), shape, generator=gen)].to(dtype).to(device)


def _expected(g, x, w, arg, grad):
    """float64 gradients of x and of w (input edge order) for the winning CSR positions
    ``arg`` ([T, F]): grad_x[col[p], f] += grad * w[p, h], grad_w[p, h] += grad * x[col[p], f]."""
    num_src, width = x.shape[0], arg[0].numel() if arg.shape[0] else 0
    heads = 1 if w.dim() == 1 else w.shape[1]
    arg2 = arg.reshape(arg.shape[0], width).long()
    grad2 = grad.reshape(grad.shape[0], width).double()
    x2 = x.reshape(num_src, width).double()
    w_csr = g.edge_values_to_csr(w.reshape(g.num_edges, heads).double())
    col = g.col.long()
    rows, feats = torch.nonzero(arg2 >= 0, as_tuple=True)
    pos = arg2[rows, feats]
    head = feats // (width // heads)
    g_x = torch.zeros(num_src, width, dtype=torch.float64, device=x.device)
    g_x.index_put_((col[pos], feats), grad2[rows, feats] * w_csr[pos, head], accumulate=True)
    g_w = torch.zeros(g.num_edges, heads, dtype=torch.float64, device=x.device)
    g_w.index_put_((pos, head), grad2[rows, feats] * x2[col[pos], feats], accumulate=True)
    return g_x.reshape(x.shape), g.edge_values_from_csr(g_w).reshape(w.shape)


def _op_weights(g, w, dtype):
    """The op's weight arguments: ``[E, H]`` in input edge order and the CSR-to-input map."""
    return minmax.weight_matrix(g, w, dtype), edge_perm_index(g)


def _check(g, x, w, reduce, tol=None):
    """Native forward (values, positions) and both gradients against the reference."""
    ref_out, ref_arg = reference.aggregate_with_arg(g, x, reduce, edge_weight=w)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    with fastgnn.backend("native"):
        out = fastgnn.ops.aggregate(g, xg, reduce, edge_weight=wg)
    torch.testing.assert_close(out, ref_out, equal_nan=True, rtol=0, atol=0)
    width = x[0].numel() if x.shape[0] else 0
    _, arg = OP(g.rowptr, g.col, x.reshape(x.shape[0], width), reduce == "max", None, None, 0, 0,
                None, None, 0, *_op_weights(g, w, x.dtype))
    assert arg.dtype == g.index_dtype
    assert torch.equal(arg.long(), ref_arg.reshape(arg.shape))
    grad = torch.randn(out.shape, dtype=torch.float64, device=x.device).to(x.dtype)
    out.backward(grad)
    want_x, want_w = _expected(g, x, w, ref_arg, grad)
    tol = tol or {torch.float64: dict(rtol=1e-12, atol=1e-12),
                  torch.float32: dict(rtol=1e-5, atol=1e-5)}.get(x.dtype,
                                                                 dict(rtol=2e-2, atol=2e-2))
    torch.testing.assert_close(xg.grad.double(), want_x, **tol)
    torch.testing.assert_close(wg.grad.double(), want_w, **tol)
    return out, arg


def _inputs(g, feat, w_feat, dtype, device, seed):
    x = _tied((g.num_src_nodes,) + feat, dtype, device, seed)
    w = _tied((g.num_edges,) + w_feat, dtype, device, seed + 1)
    return x, w


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("feat,w_feat", SHAPES)
def test_matches_reference(graph_case, device, reduce, dtype, feat, w_feat):
    g, _ = graph_case
    g = g.to(device)
    x, w = _inputs(g, feat, w_feat, dtype, device, seed=3)
    _check(g, x, w, reduce)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", REDUCES)
def test_duplicate_edges_get_their_own_gradient(device, reduce):
    """Destination 0 receives from source 4 twice (weights 1 and 3), from 5 and from 3: the
    winning duplicate, not its twin, gets the weight's gradient, and the source's gradient
    carries that edge's weight. Destination 1's four messages tie (sources 6, 5, 6, 5, all
    weights 2): the smallest source wins, then its earliest duplicate (edge 4, not edge 6).
    The other destinations have no in-edges: no gradient. (Sources differ from CSR positions,
    so recording one for the other fails.)"""
    src = torch.tensor([4, 5, 4, 6, 5, 6, 5, 3])
    dst = torch.tensor([0, 0, 0, 1, 1, 1, 1, 0])
    w = torch.tensor([1.0, 2.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.5], device=device,
                     requires_grad=True)
    x = torch.tensor([[0.5]] * 3 + [[1.0]] * 4, device=device, requires_grad=True)
    g = fastgnn.Graph.from_edge_index(torch.stack([src, dst]), num_nodes=7).to(device)
    with fastgnn.backend("native"):
        out = fastgnn.ops.aggregate(g, x, reduce, edge_weight=w)
    out.backward(torch.tensor([[10.0], [100.0], [1000.0], [7.0], [1.0], [1.0], [1.0]],
                              device=device))
    if reduce == "max":  # row 0: 1 * 3 from edge 2
        assert out.view(-1).tolist() == [3.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        assert w.grad.tolist() == [0.0, 0.0, 10.0, 0.0, 100.0, 0.0, 0.0, 0.0]
        assert x.grad.view(-1).tolist() == [0.0, 0.0, 0.0, 0.0, 30.0, 200.0, 0.0]
    else:  # row 0: 1 * 1 from edge 0
        assert out.view(-1).tolist() == [1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        assert w.grad.tolist() == [10.0, 0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0]
        assert x.grad.view(-1).tolist() == [0.0, 0.0, 0.0, 0.0, 10.0, 200.0, 0.0]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("reduce", REDUCES)
def test_index_widths_and_bipartite(device, index_dtype, reduce):
    for num_src, num_dst in ((50, 50), (50, 30), (20, 45)):
        ei = random_edge_index(num_src, num_dst, 400, seed=6)
        g = fastgnn.Graph.from_edge_index(ei, num_src_nodes=num_src, num_dst_nodes=num_dst,
                                          index_dtype=index_dtype).to(device)
        x, w = _inputs(g, (3, 8), (3,), torch.float32, device, seed=7)
        _check(g, x, w, reduce)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_hub_above_ten_thousand(device, index_dtype):
    g = hub_graph(device, index_dtype)
    assert g.max_in_degree > 10_000
    for feat, w_feat in (((40,), ()), ((4, 10), (4,))):
        x, w = _inputs(g, feat, w_feat, torch.float32, device, seed=9)
        for reduce in REDUCES:
            _check(g, x, w, reduce)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("w_feat", [(), (2,)])
@pytest.mark.parametrize("num_dst", [16, 9])
def test_gradcheck_float64(reduce, w_feat, num_dst):
    g, _ = random_graph(16, 60, num_dst=num_dst, seed=17)  # small: gradcheck is per input
    x = torch.randn(g.num_src_nodes, 2, 3, dtype=torch.float64, requires_grad=True)  # no ties
    w = torch.randn((g.num_edges,) + w_feat, dtype=torch.float64, requires_grad=True)
    with fastgnn.backend("native"):
        assert torch.autograd.gradcheck(
            lambda a, b: fastgnn.ops.aggregate(g, a, reduce, edge_weight=b), (x, w))


@pytest.mark.parametrize("device", devices())
def test_unit_weights_pick_the_unweighted_winners(device):
    """Weights of one: the unweighted values, and positions whose sources are the unweighted
    op's (positions ascend with sources); the unweighted op still records sources."""
    g, _ = random_graph(60, 400, seed=10, device=device)
    x = _tied((60, 16), torch.float32, device, seed=11)
    for reduce in REDUCES:
        out, src = OP(g.rowptr, g.col, x, reduce == "max", None, None, 0, 0, None, None)
        ones = torch.ones(g.num_edges, 1, device=device)
        out_w, pos = OP(g.rowptr, g.col, x, reduce == "max", None, None, 0, 0, None, None, 0,
                        ones)
        assert torch.equal(out, out_w)
        assert torch.equal(torch.where(pos >= 0, g.col[pos.clamp(min=0).long()], pos), src)
        _, ref_src = reference.aggregate_with_arg(g, x, reduce)
        assert torch.equal(src.long(), ref_src)


@pytest.mark.parametrize("device", devices())
def test_empty_rows_and_edgeless(device):
    g = fastgnn.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), num_nodes=5).to(device)
    x = torch.randn(5, 4, device=device, requires_grad=True)
    w = torch.randn(0, device=device, requires_grad=True)
    with fastgnn.backend("native"):
        out = fastgnn.ops.aggregate(g, x, "max", edge_weight=w)
    assert torch.equal(out, torch.zeros(5, 4, device=device))
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and w.grad.shape == (0,)
    g, _ = random_graph(20, 60, seed=11, device=device)
    x, w = _inputs(g, (0,), (), torch.float32, device, seed=12)
    _check(g, x, w, "min")


def test_cpu_deterministic_across_thread_counts():
    g, _ = random_graph(80, 2000, seed=12)
    x, w = _inputs(g, (4, 10), (4,), torch.float32, "cpu", seed=13)
    grad = torch.randn(80, 4, 10)
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            fastgnn.ops.aggregate(g, xg, "min", edge_weight=wg).backward(grad)
            results.append((xg.grad, wg.grad))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(results[0][k], r[k]) for r in results[1:] for k in (0, 1))


def test_autocast_casts_the_weights_with_x():
    g, _ = random_graph(30, 200, seed=14)
    x, w = _inputs(g, (8,), (), torch.float32, "cpu", seed=15)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fastgnn.ops.aggregate(g, x, "max", edge_weight=w)
    assert out.dtype == torch.bfloat16
    ref = reference.aggregate(g, x.bfloat16(), "max", edge_weight=w.bfloat16())
    assert torch.equal(out, ref)


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = random_graph(30, 200, seed=14, device=device)
    x = torch.randn(30, 6, device=device, requires_grad=True)
    t_rowptr, t_col, _ = g.transpose()
    plans = minmax_opcheck_plans(g, device)
    perm = edge_perm_index(g)
    assert perm is not None  # the random edges are not in CSR order
    for heads in (1, 3):
        w = torch.randn(g.num_edges, heads, device=device, requires_grad=True)
        for plan in plans:
            for is_max in (False, True):
                torch.library.opcheck(OP, (g.rowptr, g.col, x, is_max, *plan, None, None, 0, w,
                                           perm))
                torch.library.opcheck(OP, (g.rowptr, g.col, x, is_max, *plan, t_rowptr, t_col,
                                           g.key, w, None))
        _, arg = OP(g.rowptr, g.col, x.detach(), True, None, None, 0, 0, None, None, 0,
                    w.detach(), perm)
        grad = torch.randn(arg.shape, device=device)
        w = w.detach()
        torch.library.opcheck(BACKWARD_OP, (arg, grad, 30, None, None, g.col, w, perm))
        torch.library.opcheck(BACKWARD_OP, (arg, grad, 30, t_rowptr, t_col, g.col, w, perm))
        torch.library.opcheck(WEIGHT_BACKWARD_OP,
                              (g.rowptr, g.col, arg, grad, x.detach(), heads, perm))


def test_bad_inputs():
    g, _ = random_graph(20, 60, seed=15)
    x = torch.randn(20, 4, 3)
    E = g.num_edges
    with pytest.raises(ValueError, match="edge_weight"):
        fastgnn.ops.aggregate(g, x, "max", edge_weight=torch.randn(E - 1))
    with pytest.raises(ValueError, match="edge_weight"):
        fastgnn.ops.aggregate(g, x, "max", edge_weight=torch.randn(E, 3))  # 3 heads, x has 4
    with pytest.raises(ValueError, match="edge_weight"):
        fastgnn.ops.aggregate(g, x, "max", edge_weight=torch.randn(E, 4, 1))
    with pytest.raises(TypeError, match="edge_weight"):
        fastgnn.ops.aggregate(g, x, "min", edge_weight=torch.ones(E, dtype=torch.int64))
    flat = x.reshape(20, 12)
    with pytest.raises(RuntimeError, match="weight"):
        OP(g.rowptr, g.col, flat, True, None, None, 0, 0, None, None, 0, torch.randn(E, 5))
    with pytest.raises(RuntimeError, match="weight"):
        OP(g.rowptr, g.col, flat, True, None, None, 0, 0, None, None, 0,
           torch.randn(E, 4, dtype=torch.float64))
    _, arg = OP(g.rowptr, g.col, flat, True, None, None, 0, 0, None, None, 0, torch.randn(E, 4))
    with pytest.raises(RuntimeError, match="col and weight"):
        BACKWARD_OP(arg, torch.randn(20, 12), 20, None, None, g.col, None)
    with pytest.raises(RuntimeError, match="heads"):
        WEIGHT_BACKWARD_OP(g.rowptr, g.col, arg, torch.randn(20, 12), flat, 5)
    with pytest.raises(RuntimeError, match="edge_perm"):
        OP(g.rowptr, g.col, flat, True, None, None, 0, 0, None, None, 0, torch.randn(E, 4),
           torch.arange(E))  # int64 against int32 ids


def test_sum_and_mean_take_per_head_weights_too():
    g, _ = random_graph(40, 300, seed=16)
    x = torch.randn(40, 3, 4, dtype=torch.float64)
    w = torch.randn(g.num_edges, 3, dtype=torch.float64)
    for reduce in ("sum", "mean"):
        out = fastgnn.ops.aggregate(g, x, reduce, edge_weight=w)
        torch.testing.assert_close(out, reference.aggregate(g, x, reduce, edge_weight=w))
        torch.testing.assert_close(out[:, 1], fastgnn.ops.spmm(g, x[:, 1], edge_weight=w[:, 1],
                                                                reduce=reduce))


# ---- GPU paths -------------------------------------------------------------------------------
@pytest.mark.sanitize
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_every_gpu_plan_matches_reference(dtype, index_dtype):
    """Each launch plan the tuner may pick (light, heavy rows through packed atomics, the
    work-list split) with weights: values and winning positions."""
    g = hub_graph("cuda", index_dtype)
    for width, heads in ((3, 1), (40, 4), (256, 8)):  # scalar loads; float4 rows; heads
        x = _tied((g.num_src_nodes, width), dtype, "cuda", seed=width)
        w = _tied((g.num_edges, heads), dtype, "cuda", seed=width + 1)
        weights = _op_weights(g, w, dtype)
        plans, _ = minmax._plans(g, x)
        assert any(plan[1] is not None for plan in plans.values())  # heavy rows exist
        assert any(name.startswith("split") for name in plans)
        for reduce in REDUCES:
            ref_out, ref_arg = reference.aggregate_with_arg(
                g, x.view(-1, heads, width // heads), reduce, edge_weight=w)
            for name, plan in plans.items():
                out, arg = OP(g.rowptr, g.col, x, reduce == "max", *plan, None, None, g.key,
                              *weights)
                torch.testing.assert_close(out, ref_out.view(out.shape), equal_nan=True,
                                           rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
                assert torch.equal(arg.long(), ref_arg.view(arg.shape)), name


@pytest.mark.sanitize
@pytest.mark.gpu
@pytest.mark.parametrize("w_feat", [(), (4,)])
def test_gpu_backwards_agree_and_pull_is_deterministic(w_feat):
    """The atomic scatter and the deterministic pull over the transposed CSR give the x
    gradient (float64: to rounding), run to run identical under deterministic algorithms, and
    the weight gradient is deterministic on both."""
    g = hub_graph("cuda")
    x, w = _inputs(g, (4, 9), w_feat, torch.float64, "cuda", seed=18)
    for reduce in REDUCES:
        _check(g, x, w, reduce)
    x32, w32 = x.float(), w.float()
    g.transpose()  # built (and cached) first: Graph.out_degree's bincount alerts on CUDA
    grad = torch.linspace(-1, 1, g.num_dst_nodes * 36, device="cuda").view(-1, 4, 9)
    results = []
    previous = torch.are_deterministic_algorithms_enabled()
    for deterministic in (False, True, True):
        torch.use_deterministic_algorithms(deterministic)
        try:
            xg, wg = x32.clone().requires_grad_(), w32.clone().requires_grad_()
            fastgnn.ops.aggregate(g, xg, "max", edge_weight=wg).backward(grad)
            results.append((xg.grad, wg.grad))
        finally:
            torch.use_deterministic_algorithms(previous)
    assert torch.equal(results[1][0], results[2][0]) and torch.equal(results[1][1],
                                                                     results[2][1])
    assert torch.equal(results[0][1], results[1][1])
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    _, ref_arg = reference.aggregate_with_arg(g, x32, "max", edge_weight=w32)
    want_x, want_w = _expected(g, x32, w32, ref_arg, grad)
    torch.testing.assert_close(results[1][0].double(), want_x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[1][1].double(), want_w, rtol=1e-5, atol=1e-5)
