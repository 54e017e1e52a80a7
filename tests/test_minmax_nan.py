"""DGL's min/max reduction (``aggregate(..., nan="ignore")``): NaN messages never win, entries
start from the identity (-inf for max, +inf for min) that a message must beat (or equal, under
"last-edge"), and the gradient of entries no message won goes to node 0 and edge 0. Checked
bit for bit, forward and both gradients, against a direct statement of DGL 2.1's kernel and
backward (not DGL itself: that is tests/test_dgl_ops.py and test_dgl_layers.py), with NaN in
some or all of a row's messages, +-inf messages, ties, isolated destinations, per-edge and
per-head weights, on every backward path. The default (PyG's rule, NaN propagates) is
unchanged."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native
from fastgnn.ops import minmax
from conftest import devices, hub_graph, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("minmax_aggregate"),
                                reason="native extension not built")

OP = torch.ops.fastgnn.minmax_aggregate
INF, NAN = float("inf"), float("nan")
# values whose products and sums stay exact, with every special value
SPECIALS = torch.tensor([NAN, -INF, INF, -2.0, -1.0, 0.0, 0.0, 1.0, 1.0, 2.0])


def _dgl_rule(edge_index, num_dst, x, w, reduce, ties, grad, start=INF):
    """DGL 2.1's max/min kernel and backward, stated directly: every entry starts at the
    identity (``-start`` for max, ``start`` for min: infinity, or 65504 in DGL's CUDA float16
    kernels) with node 0 and edge 0 as its winners; the in-edges are scanned in edge-id order
    and a message m takes over when ``best < m`` (``best <= m`` under "last-edge"; min mirrors
    it), a float comparison, false for NaN. The backward scatter-adds the gradient at the
    recorded winners. ``w``: None, [E] or [E, H] (x [N, H * D]). Returns out and the gradients
    of x and w."""
    src, dst = edge_index.tolist()
    num_edges, width = len(src), x.shape[1]
    heads = 1 if w is None or w.dim() == 1 else w.shape[1]
    weight = torch.ones(num_edges, 1, dtype=x.dtype) if w is None else w.reshape(num_edges, heads)
    per_feature = weight.repeat_interleave(width // heads, dim=1)  # [E, F]
    last, is_max = ties == "last-edge", reduce == "max"
    best = torch.full((num_dst, width), -start if is_max else start, dtype=x.dtype)
    arg_u = torch.zeros((num_dst, width), dtype=torch.int64)
    arg_e = torch.zeros((num_dst, width), dtype=torch.int64)
    for e in range(num_edges):
        m, b = x[src[e]] * per_feature[e], best[dst[e]]
        if is_max:
            take = b <= m if last else b < m
        else:
            take = b >= m if last else b > m
        best[dst[e]] = torch.where(take, m, b)
        arg_u[dst[e]] = torch.where(take, src[e], arg_u[dst[e]])
        arg_e[dst[e]] = torch.where(take, e, arg_e[dst[e]])
    feats = torch.arange(width).expand(num_dst, width)
    grad_x = torch.zeros_like(x).index_put_((arg_u, feats), grad * per_feature[arg_e, feats],
                                            accumulate=True)
    grad_wf = torch.zeros(num_edges, width, dtype=x.dtype).index_put_(
        (arg_e, feats), grad * x[arg_u, feats], accumulate=True)
    grad_w = None if w is None else grad_wf.view(num_edges, heads, -1).sum(2).reshape(w.shape)
    return best, grad_x, grad_w


def _specials(shape, seed, finite_first_row=True):
    """Values drawn from SPECIALS; node 0 finite (it receives the gradient of the entries no
    message won, which then stays finite)."""
    gen = torch.Generator().manual_seed(seed)
    values = SPECIALS[torch.randint(0, len(SPECIALS), shape, generator=gen)]
    if finite_first_row:
        values[0] = torch.randint(-2, 3, shape[1:], generator=gen).float()
    return values


def _run(g, x, w, reduce, ties, grad, nan="ignore"):
    xg = x.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    out = fastgnn.ops.aggregate(g, xg, reduce, edge_weight=wg, ties=ties, nan=nan)
    out.backward(grad.reshape(out.shape))
    return out, xg.grad, None if w is None else wg.grad


def _assert_same(got, want, what):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=what)


def _check(g, edge_index, x, w, reduce, ties, backends=("native", "reference")):
    """Each backend's values and gradients against _dgl_rule's, bit for bit."""
    gen = torch.Generator().manual_seed(5)
    width = x[0].numel()
    grad = torch.randint(-3, 4, (g.num_dst_nodes, width), generator=gen).to(x.dtype)
    want = _dgl_rule(edge_index.cpu(), g.num_dst_nodes, x.reshape(x.shape[0], -1).cpu(),
                     None if w is None else w.cpu(), reduce, ties, grad)
    for backend in backends:
        with fastgnn.backend(backend):
            got = _run(g, x, w, reduce, ties, grad.to(x.device))
        _assert_same(got[0].reshape(g.num_dst_nodes, -1).cpu(), want[0], f"{backend} out")
        _assert_same(got[1].reshape(want[1].shape).cpu(), want[1], f"{backend} grad x")
        if w is not None:
            _assert_same(got[2].cpu(), want[2], f"{backend} grad w")


def _special_rows_graph():
    """Destination 1: NaN messages only; 2: -inf only; 3: +inf only; 4: NaN, -inf, +inf and
    finite ties mixed; 5: no in-edges. Edge ids out of CSR order."""
    src = torch.tensor([6, 7, 8, 9, 10, 11, 6, 8, 9, 12, 12, 0, 7])
    dst = torch.tensor([1, 1, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4])
    x = torch.zeros(13, 3)
    x[0] = torch.tensor([1.0, -1.0, 2.0])
    x[[6, 7]] = NAN
    x[[8, 9]] = torch.tensor([-INF, INF, -INF])
    x[10] = torch.tensor([INF, -INF, INF])
    x[11] = torch.tensor([INF, NAN, -INF])
    x[12] = torch.tensor([1.0, 1.0, NAN])
    order = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(3))
    edge_index = torch.stack([src[order], dst[order]])
    return fastgnn.Graph.from_edge_index(edge_index, num_nodes=13), edge_index, x


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("ties", minmax.TIES[1:])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_rows(device, reduce, ties, weighted, dtype):
    g, edge_index, x = _special_rows_graph()
    w = torch.tensor([1.0, 2.0, 3.0] * 4 + [1.0]) if weighted else None
    _check(g.to(device), edge_index, x.to(dtype).to(device),
           None if w is None else w.to(dtype).to(device), reduce, ties)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("ties", minmax.TIES[1:])
@pytest.mark.parametrize("weights", [None, "edge", "head"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [1, 6, 64])  # 64: whole vector tiles on the CPU
def test_random_special_values(device, reduce, ties, weights, dtype, index_dtype, width):
    """Duplicate edges, self-loops, isolated nodes, a bipartite-sized hub; per-head weights
    with two heads."""
    _, edge_index = random_graph(60, 400, seed=41)
    g = fastgnn.Graph.from_edge_index(edge_index, num_nodes=60, index_dtype=index_dtype)
    heads = 2 if weights == "head" and width % 2 == 0 else 1
    if weights == "head" and heads == 1:
        pytest.skip("one head")
    x = _specials((60, width), seed=42).to(dtype)
    w = None
    if weights is not None:
        gen = torch.Generator().manual_seed(43)
        w = torch.randint(1, 3, (g.num_edges, heads) if weights == "head" else (g.num_edges,),
                          generator=gen).to(dtype)
        x = x.view(60, heads, width // heads) if weights == "head" else x
    _check(g.to(device), edge_index, x.to(device), None if w is None else w.to(device), reduce,
           ties)


@pytest.mark.parametrize("device", devices())
def test_smallest_source_ties_take_the_first_in_csr_order(device):
    """nan="ignore" with the default ties: DGL's rule on the graph's own CSR (sources
    ascending), the native and reference backends alike."""
    g, _ = random_graph(60, 400, seed=44)
    g = g.to(device)
    csr_edges = torch.stack([g.col.long(), g.row.long()]).cpu()
    x = _specials((60, 8), seed=45).to(device)
    gen = torch.Generator().manual_seed(46)
    grad = torch.randint(-3, 4, (60, 8), generator=gen).float()
    want = _dgl_rule(csr_edges, 60, x.cpu(), None, "max", "first-edge", grad)
    for backend in ("native", "reference"):
        with fastgnn.backend(backend):
            got = _run(g, x, None, "max", "smallest-source", grad.to(device))
        for a, b in zip(got[:2], want[:2]):
            _assert_same(a.cpu(), b, backend)


@pytest.mark.parametrize("device", devices())
def test_no_edges_and_no_grad(device):
    """A graph without edges gives the identity; without autograd nothing is routed."""
    g = fastgnn.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.int64), num_nodes=4).to(device)
    x = torch.randn(4, 3, device=device, requires_grad=True)
    out = fastgnn.ops.aggregate(g, x, "min", nan="ignore")
    assert torch.equal(out, torch.full((4, 3), INF, device=device))
    out.sum().backward()
    assert torch.equal(x.grad[0], torch.full((3,), 4.0, device=device))
    assert not x.grad[1:].any()
    with torch.no_grad():
        assert torch.equal(fastgnn.ops.aggregate(g, x, "max", nan="ignore"), -out.detach())


def _half_limit_rows_graph():
    """Max messages around DGL's CUDA float16 start, -65504 (min negates them). Destination 1:
    -inf only; 2: -65504 only; 3: -inf, NaN and -65504; 4: -65504, then node 10's 1, 2,
    -65504 and -inf; 5: no in-edges; 6: ties and the specials mixed; 0: ordinary values. Edge
    ids out of CSR order."""
    src = torch.tensor([7, 7, 8, 8, 7, 9, 8, 8, 10, 10, 7, 8, 10, 0, 11, 12])
    dst = torch.tensor([1, 1, 2, 2, 3, 3, 3, 4, 4, 6, 6, 6, 6, 0, 0, 0])
    x = torch.zeros(13, 4)
    x[0] = torch.tensor([1.0, -1.0, 2.0, 0.0])
    x[7] = -INF
    x[8] = -65504.0
    x[9] = NAN
    x[10] = torch.tensor([1.0, 2.0, -65504.0, -INF])
    x[11] = torch.tensor([-2.0, 1.0, NAN, -65504.0])
    x[12] = torch.tensor([0.0, -INF, 1.0, -1.0])
    order = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(4))
    edge_index = torch.stack([src[order], dst[order]])
    return fastgnn.Graph.from_edge_index(edge_index, num_nodes=13), edge_index, x


def _half_limit_case(reduce, weighted, update_all=False):
    """The graph above in float16 (min negated), optional per-edge weights 1 and 2, an output
    gradient of -1, 0 and 1, and what DGL's CUDA kernel gives (from the limit, +-65504):
    values and both gradients, after update_all's masking of infinite results if asked."""
    g, edge_index, x = _half_limit_rows_graph()
    x = (x if reduce == "max" else -x).half()
    w = torch.tensor([1.0, 2.0] * 8).half() if weighted else None
    grad = torch.randint(-1, 2, (g.num_dst_nodes, 4),
                         generator=torch.Generator().manual_seed(6)).half()
    want = _dgl_rule(edge_index, g.num_dst_nodes, x, w, reduce, "first-edge", grad,
                     start=65504.0)
    limit = -65504.0 if reduce == "max" else 65504.0
    assert (want[0][[1, 2, 3, 5]] == limit).all() and (want[0][4, 2:] == limit).all()
    assert (want[0][4, :2].abs() < 65504).all()  # beaten by node 10's 1 and 2 (times w)
    if update_all:  # update_all masks the infinite results; the limit is finite and stays
        kept = ~want[0].isinf()
        grad = grad * kept
        want = (want[0].masked_fill(~kept, 0),) + _dgl_rule(
            edge_index, g.num_dst_nodes, x, w, reduce, "first-edge", grad, start=65504.0)[1:]
    return g, x, w, grad, want


def _assert_half_limit(got, xg, wg, want):
    _assert_same(got.cpu(), want[0], "out")
    _assert_same(xg.grad.cpu(), want[1], "grad x")
    if wg is not None:
        _assert_same(wg.grad.cpu(), want[2], "grad w")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("weighted", [False, True])
def test_half_limit_rule_against_the_kernel_stated(device, reduce, weighted):
    """DGL's CUDA float16 max starts from -65504 (min: +65504), not -inf: an entry whose
    messages are all -inf or -65504 (or NaN, or none) is -65504, its gradient at node 0 and
    edge 0. from_half_limit on aggregate(nan="ignore")'s output, values and both gradients
    bit for bit against the kernel stated directly."""
    from fastgnn._minmax_unwon import from_half_limit
    g, x, w, grad, want = _half_limit_case(reduce, weighted)
    g = g.to(device)
    xg = x.to(device).requires_grad_()
    wg = None if w is None else w.to(device).requires_grad_()
    out = fastgnn.ops.aggregate(g, xg, reduce, edge_weight=wg, ties="first-edge", nan="ignore")
    got = from_half_limit(out, xg, None if wg is None else wg.view(-1, 1), reduce)
    got.backward(grad.to(device))
    _assert_half_limit(got, xg, wg, want)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("update_all", [False, True])
def test_dgl_extremes_start_at_the_half_limit_on_cuda_float16(monkeypatch, reduce, weighted,
                                                              update_all):
    """The DGL drop-ins and layers (dgl_extremes) take that start on CUDA float16, and
    update_all keeps the limit (it is finite); here on the CPU with the CUDA gate opened."""
    pytest.importorskip("dgl")
    from fastgnn.dgl import _extremes
    assert not _extremes.starts_at_half_limit(torch.zeros(1, dtype=torch.float16))
    monkeypatch.setattr(_extremes, "starts_at_half_limit",
                        lambda out: out.dtype == torch.float16)
    g, x, w, grad, want = _half_limit_case(reduce, weighted, update_all)
    xg = x.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    got = _extremes.dgl_extremes(g, xg, reduce, "first-edge", edge_weight=wg,
                                 update_all=update_all)
    got.backward(grad)
    _assert_half_limit(got, xg, wg, want)


def test_default_still_propagates_nan():
    """PyG's rule: NaN wins, isolated destinations get 0."""
    g, edge_index, x = _special_rows_graph()
    out = fastgnn.ops.aggregate(g, x, "max")
    assert out[1].isnan().all() and torch.equal(out[5], torch.zeros(3))
    assert torch.equal(out[2], torch.tensor([-INF, INF, -INF]))


def test_bad_nan_names_the_argument():
    g, _ = random_graph(20, 60, seed=47)
    with pytest.raises(ValueError, match="nan"):
        fastgnn.ops.aggregate(g, torch.randn(20, 4), "max", nan="skip")


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = random_graph(30, 200, seed=48, device=device)
    # NaN (never a winner) but no infinities: opcheck compares gradients without equal_nan
    x = _specials((30, 6), seed=49).nan_to_num(nan=NAN, posinf=3.0, neginf=-3.0)
    x = x.to(device).requires_grad_()
    w = torch.ones(g.num_edges, 2, device=device).requires_grad_()
    col, perm = minmax.csr_in_edge_order(g)
    for weight in (None, w):
        for last_wins in (False, True):
            torch.library.opcheck(OP, (g.rowptr, col, x, True, None, None, 0, 0, None, None, 0,
                                       weight, perm if weight is not None else None, last_wins,
                                       True))


@pytest.mark.gpu
@pytest.mark.parametrize("ties", minmax.TIES[1:])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("deterministic", [False, True])
def test_gpu_hub_matches_the_rule_on_every_backward(ties, weighted, dtype, deterministic):
    """The light kernel on a hub (the rule forces the light path), the atomic and the
    deterministic pull backward, float32 rows of a multiple of 4 (vector loads) and float64."""
    g = hub_graph("cpu", hub_degree=3_000, num_nodes=1_000, extra=3_000)
    by_edge = torch.argsort(g.edge_perm)
    edge_index = torch.stack([g.col[by_edge].long(), g.row[by_edge].long()])
    x = _specials((g.num_src_nodes, 8), seed=50).to(dtype)
    gen = torch.Generator().manual_seed(51)
    w = torch.randint(1, 3, (g.num_edges,), generator=gen).to(dtype) if weighted else None
    torch.use_deterministic_algorithms(deterministic)
    try:
        _check(g.to("cuda"), edge_index, x.cuda(), None if w is None else w.cuda(), "max", ties,
               backends=("native",))
    finally:
        torch.use_deterministic_algorithms(False)

