"""MaxK family: fastgnn.ops.maxk (CBSR), fastgnn.ops.maxk_spmm and the fastgnn.nn MaxK layers,
against the reference (forward and backward) and the stock PyG layers."""
from __future__ import annotations

import importlib

import pytest
import torch

import fastgnn
import fastgnn.nn
from fastgnn import reference
from fastgnn.cbsr import CBSR, index_dtype
from fastgnn.ops import maxk, maxk_spmm
from tests.conftest import devices, load_dataset, random_graph

HALF_TOL = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
            torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _tied(rows: int, width: int, seed: int, device="cpu", dtype=torch.float32) -> torch.Tensor:
    """Features drawn from a few values, so most rows have ties at the k-th largest entry."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, (rows, width), generator=gen).to(device=device, dtype=dtype)


def _rows(kind: str, rows: int, width: int, seed: int, device="cpu") -> torch.Tensor:
    """Rows the top-k must get right: "random"; "ties" (a few values, ties at the cut); "equal"
    (one value a row, among them +-0, +-inf and NaN); "special" (random with NaN, +-inf and
    +-0 in a third of the entries)."""
    if kind == "ties":
        return _tied(rows, width, seed, device)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=gen)
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0])
    if kind == "equal":
        values = torch.cat([specials, torch.tensor([0.5, -3.0])])
        x = values[torch.arange(rows) % len(values), None].expand(rows, width).clone()
    elif kind == "special":
        mask = torch.rand(rows, width, generator=gen) < 1 / 3
        x[mask] = specials[torch.randint(len(specials), (int(mask.sum()),), generator=gen)]
    return x.to(device)


def _assert_same_cbsr(h: CBSR, expected: CBSR) -> None:
    assert h.num_features == expected.num_features
    assert h.indices.dtype == expected.indices.dtype
    torch.testing.assert_close(h.indices, expected.indices, rtol=0, atol=0)
    torch.testing.assert_close(h.values, expected.values, rtol=0, atol=0, equal_nan=True)


# ---- maxk --------------------------------------------------------------------------------------
@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("width", [16, 100, 256, 384, 1024])
@pytest.mark.parametrize("kind", ["random", "ties", "equal", "special"])
def test_maxk_matches_reference(width, kind, device):
    x = _rows(kind, 40, width, width, device).requires_grad_()
    # k = 33, 64 and 1000: past a warp's 32 lanes, with ties straddling the cut
    for k in sorted({1, 2, 8, 32, 33, 64, 1000, width - 1, width} & set(range(1, width + 1))):
        h = maxk(x, k)
        expected = reference.maxk_cbsr(x, k)
        _assert_same_cbsr(h, expected)
        assert h.indices.dtype == index_dtype(width)
        grad = torch.randn_like(h.values)
        got, = torch.autograd.grad(h.values, x, grad)
        want, = torch.autograd.grad(expected.values, x, grad)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_maxk_half_matches_reference(dtype, device):
    for width, kind in ((256, "random"), (256, "ties"), (300, "special")):
        x = _rows(kind, 40, width, 5, device).to(dtype)
        for k in (1, 8, 32, 64, width - 1):
            _assert_same_cbsr(maxk(x, k), reference.maxk_cbsr(x, k))


def test_maxk_semantics():
    x = torch.tensor([[1.0, 3.0, 3.0, -1.0, 3.0],
                      [float("nan"), 0.0, -0.0, 2.0, float("-inf")],
                      [-0.0, 0.0, -5.0, -0.0, -7.0]])
    h = maxk(x, 2)
    assert h.indices.tolist() == [[1, 2], [0, 3], [0, 1]]  # ties: smallest columns; NaN largest
    assert torch.equal(h.to_dense()[0], torch.tensor([0.0, 3.0, 3.0, 0.0, 0.0]))
    assert torch.isnan(h.values[1, 0])
    dense = fastgnn.nn.MaxK(2)(x[:1])
    assert torch.equal(dense, h.to_dense()[:1])
    assert torch.equal(reference.maxk(x[:1], 2), dense)


@pytest.mark.parametrize("device", devices())
def test_maxk_large_width_and_empty(device):
    x = torch.randn(5, 2000, device=device)  # beyond the CUDA kernel's register range
    _assert_same_cbsr(maxk(x, 40), reference.maxk_cbsr(x, 40))
    assert maxk(x, 40).indices.dtype == torch.int16
    empty = maxk(torch.randn(0, 8, device=device), 3)
    assert empty.values.shape == (0, 3) and empty.shape == (0, 8)


def test_maxk_gradcheck():
    x = torch.randn(8, 10, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda t: maxk(t, 5).values, (x,))
    torch.autograd.gradcheck(lambda t: maxk(t, 5).to_dense(), (x,))


# ---- maxk_spmm ---------------------------------------------------------------------------------
def _check_spmm(g, x, k, *, norm="none", edge_weight=None, reduce="sum", tol=None):
    tol = tol or dict(rtol=1e-5, atol=1e-5)
    out = maxk_spmm(g, maxk(x, k), norm=norm, edge_weight=edge_weight, reduce=reduce)
    expected = reference.maxk_spmm(g, reference.maxk_cbsr(x, k), norm=norm,
                                   edge_weight=edge_weight, reduce=reduce)
    assert out.shape == (g.num_dst_nodes, x.shape[1]) and out.dtype == x.dtype
    torch.testing.assert_close(out, expected, **tol)
    inputs = [t for t in (x, edge_weight) if t is not None and t.requires_grad]
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(expected, inputs, grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("width,ks", [(16, (1, 2, 16)), (100, (8, 32)), (256, (1, 8, 256)),
                                      (384, (2, 32)), (1024, (8, 32, 1024))])
def test_maxk_spmm_widths(width, ks, device, graph_case):
    g, _ = graph_case
    g = g.to(device)
    x = torch.randn(g.num_src_nodes, width, device=device, requires_grad=True)
    for k in ks:
        _check_spmm(g, x, k, norm="both")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("norm", ["none", "left", "right", "both"])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_maxk_spmm_norms_and_weights(norm, reduce, device, graph_case):
    g, ei = graph_case
    g = g.to(device)
    x = _tied(g.num_src_nodes, 48, 3, device).requires_grad_()
    weight = torch.rand(ei.shape[1], device=device, requires_grad=True)
    _check_spmm(g, x, 8, norm=norm, reduce=reduce)
    _check_spmm(g, x, 8, norm=norm, reduce=reduce, edge_weight=weight)


@pytest.mark.parametrize("num_dst", [None, 14])
def test_maxk_spmm_edge_values_and_gradcheck(num_dst):
    g, ei = random_graph(20, 70, num_dst=num_dst, seed=16)
    x = torch.randn(g.num_src_nodes, 7, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(ei.shape[1], dtype=torch.float64, requires_grad=True)
    for norm, reduce in (("both", "sum"), ("none", "mean")):
        # fast_mode: Jacobians checked through random projections (the full check takes
        # minutes on a loaded 2-core machine).
        torch.autograd.gradcheck(
            lambda t, w: maxk_spmm(g, maxk(t, 3), norm=norm, edge_weight=w, reduce=reduce),
            (x, weight), fast_mode=True)
    h = maxk(x, 4)
    torch.autograd.gradcheck(lambda w: maxk_spmm(g, h, edge_values=w), (weight,),
                             fast_mode=True)
    if num_dst is None:  # the double backward (SSpMM's adjoint is the SpGEMM), small
        small, _ = random_graph(8, 20, seed=17)
        y = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)
        torch.autograd.gradgradcheck(lambda t: maxk_spmm(small, maxk(t, 2), norm="both"), (y,))
    torch.testing.assert_close(maxk_spmm(g, h, edge_values=weight),
                               reference.spmm(g, h.to_dense(), edge_values=weight))


def test_double_backward_through_edge_weights():
    """Second-order gradients flow through the features, not the edge weights: asking for the
    edge weights' raises NotImplementedError; the features' alone are computed."""
    g, ei = random_graph(8, 20, seed=17)
    x = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(ei.shape[1], dtype=torch.float64, requires_grad=True)
    v = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)

    def grad_x(aggregate, select):
        out = aggregate(g, select(x, 2), edge_weight=weight)
        return torch.autograd.grad(out, x, v, create_graph=True)[0]
    with pytest.raises(NotImplementedError, match="double backward through edge weights"):
        torch.autograd.grad(grad_x(maxk_spmm, maxk).sum(), weight)
    got, = torch.autograd.grad(grad_x(maxk_spmm, maxk).square().sum(), v)
    want, = torch.autograd.grad(
        grad_x(reference.maxk_spmm, reference.maxk_cbsr).square().sum(), v)
    torch.testing.assert_close(got, want)


def test_maxk_spmm_without_cached_transpose():
    _, ei = random_graph(40, 300, seed=4)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=40, cache_transpose=False)
    x = torch.randn(40, 24, requires_grad=True)
    _check_spmm(g, x, 5, norm="right")


def test_opcheck():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = random_graph(12, 40, seed=5)
    x = torch.randn(12, 20, requires_grad=True)
    torch.library.opcheck(torch.ops.fastgnn.maxk, (x, 6))
    h = maxk(x.detach(), 6)
    values = h.values.clone().requires_grad_()
    t_rowptr, t_col, t_perm = g.transpose()
    value = g.norm_values("both").clone().requires_grad_()
    t_value = g.transposed_norm_values("both")
    for args in ((g.rowptr, g.col, value, values, h.indices, 20, t_rowptr, t_col, t_perm,
                  t_value, g.key, 0),
                 (g.rowptr, g.col, None, values, h.indices, 20, t_rowptr, t_col, t_perm, None,
                  0, 0)):
        torch.library.opcheck(torch.ops.fastgnn.maxk_spgemm, args)
    grad = torch.randn(12, 20)
    torch.library.opcheck(torch.ops.fastgnn.maxk_sspmm, (g.rowptr, g.col, None, t_rowptr, t_col,
                                                         t_value, grad, h.indices, g.key, 0))


@pytest.mark.skipif(not hasattr(torch.library, "register_autograd"), reason="needs torch >= 2.4")
def test_torch_compile():
    """Compiled (the C++ autograd kernels traced with the fake kernels): the same output and
    gradients. Not fullgraph: the CPU config reads torch.get_num_threads(), a graph break."""
    g, _ = random_graph(40, 200, seed=7)
    x = torch.randn(40, 16, requires_grad=True)
    weight = torch.rand(g.num_edges, requires_grad=True)
    maxk_spmm(g, maxk(x, 4), norm="both").sum().backward()  # builds the graph's caches eagerly

    @torch.compile(backend="aot_eager")
    def layer(x, weight):
        return torch.relu(maxk_spmm(g, maxk(x, 4), norm="both", edge_weight=weight))

    out = layer(x, weight)
    ref = torch.relu(reference.maxk_spmm(g, reference.maxk_cbsr(x, 4), norm="both",
                                         edge_weight=weight))
    torch.testing.assert_close(out, ref)
    for got, want in zip(torch.autograd.grad(out.sum(), (x, weight)),
                         torch.autograd.grad(ref.sum(), (x, weight))):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["tolokers"])
def test_real_graph(name):
    data = load_dataset(name)
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    x = torch.randn(data.num_nodes, 16, requires_grad=True)
    _check_spmm(g, x, 4, reduce="mean", tol=dict(rtol=1e-4, atol=1e-4))


# ---- GPU-only paths ----------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_half_precision_gpu(dtype, graph_case):
    g, ei = graph_case
    g = g.to("cuda")
    x = torch.randn(g.num_src_nodes, 256, device="cuda", dtype=dtype, requires_grad=True)
    _assert_same_cbsr(maxk(x, 32), reference.maxk_cbsr(x, 32))
    weight = torch.rand(ei.shape[1], device="cuda", requires_grad=True)
    _check_spmm(g, x, 32, norm="both", edge_weight=weight, tol=HALF_TOL[dtype])
    _check_spmm(g, x, 5, reduce="mean", tol=HALF_TOL[dtype])


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` whose data starts one element past an aligned address."""
    flat = t.new_empty(t.numel() + 1)[1:]
    return flat.copy_(t.reshape(-1)).view(t.shape)


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [8, 256])
@pytest.mark.parametrize("push", [0, 1])
# k a multiple of 4, 2 or neither (packets of 4, 2, 1 entries); k over 32 packets of 4 (two
# passes per edge); int16 indices
@pytest.mark.parametrize("width, k", [(64, 12), (64, 6), (64, 7), (256, 200), (300, 16)])
@pytest.mark.parametrize("aligned", [True, False])
def test_gpu_kernel_variants(chunk, push, width, k, aligned):
    """Every SpGEMM/SSpMM launch variant on a graph whose hub row spans several work items;
    CBSR arrays that start off the packet alignment take one-entry packets."""
    g, _ = random_graph(80, 900, seed=6, device="cuda")
    x = torch.randn(80, width, device="cuda")
    h = maxk(x, k)
    values, indices = (h.values, h.indices) if aligned else \
        (_misaligned(h.values), _misaligned(h.indices))
    value = g.norm_values("both")
    t_rowptr, t_col, t_perm = g.transpose()
    t_value = g.transposed_norm_values("both")
    dense = h.to_dense()
    runs = [torch.ops.fastgnn.maxk_spgemm(g.rowptr, g.col, value, values, indices, width, None,
                                          None, None, None, g.key, chunk) for _ in range(2)]
    torch.testing.assert_close(runs[0], reference.spmm(g, dense, norm="both"))
    assert torch.equal(runs[0], runs[1])  # no atomics: bitwise reproducible
    grad = torch.randn(80, width, device="cuda")
    got = torch.ops.fastgnn.maxk_sspmm(g.rowptr, g.col, value, t_rowptr, t_col, t_value, grad,
                                       indices, g.key, push | chunk << 8)
    full = reference.spmm(fastgnn.Graph.from_edge_index(g.edge_index()[[1, 0]], num_nodes=80),
                          grad, edge_values=value)
    torch.testing.assert_close(got, full.gather(1, h.indices.long()))


# uint8 indices with a runtime and a compile-time k, int16 indices
@pytest.mark.parametrize("width, k", [(64, 12), (128, 16), (300, 7)])
@pytest.mark.parametrize("threads", [1, 3])
def test_cpu_sspmm_push_and_pull(width, k, threads):
    """Both CPU backward kernels (per-thread push buffers, pull over the transpose), with and
    without edge values, on a graph with a hub and isolated nodes; the push is deterministic
    for a thread count."""
    g, _ = random_graph(70, 900, seed=7)
    h = maxk(torch.randn(70, width), k)
    t_rowptr, t_col, _ = g.transpose()
    grad = torch.randn(70, width)
    full_graph = fastgnn.Graph.from_edge_index(g.edge_index()[[1, 0]], num_nodes=70)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for value, t_value in ((None, None), (g.norm_values("both"),
                                              g.transposed_norm_values("both"))):
            expected = reference.spmm(full_graph, grad, edge_values=value)
            runs = [torch.ops.fastgnn.maxk_sspmm(g.rowptr, g.col, value, t_rowptr, t_col, t_value,
                                                 grad, h.indices, g.key, push)
                    for push in (0, 1, 1)]
            for got in runs:
                torch.testing.assert_close(got, expected.gather(1, h.indices.long()))
            assert torch.equal(runs[1], runs[2])
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width, k", [(64, 12), (128, 16), (300, 7)])
def test_cpu_half_spgemm_and_sspmm_are_float32_rounded_once(dtype, width, k):
    """Half values and gradients convert exactly (a pushed gradient row once for all its
    in-edges, SpGEMM values by F16C in the AVX2 clone) and accumulate in float32 in the float32
    kernels' order: the forward and both backward kernels are the float32 ones on the same
    values, rounded once, bit for bit."""
    g, _ = random_graph(70, 900, seed=8)
    h = maxk(torch.randn(70, width).to(dtype), k)
    t_rowptr, t_col, _ = g.transpose()
    grad = torch.randn(70, width).to(dtype)
    value, t_value = g.norm_values("both"), g.transposed_norm_values("both")
    out, want = (torch.ops.fastgnn.maxk_spgemm(g.rowptr, g.col, value, values, h.indices, width,
                                               None, None, None, None, g.key, 0)
                 for values in (h.values, h.values.float()))
    assert out.dtype == dtype and torch.equal(out, want.to(dtype))
    for push in (0, 1):
        got, want = (torch.ops.fastgnn.maxk_sspmm(g.rowptr, g.col, value, t_rowptr, t_col,
                                                  t_value, gy, h.indices, g.key, push)
                     for gy in (grad, grad.float()))
        assert got.dtype == dtype and torch.equal(got, want.to(dtype)), push


def test_cpu_backward_pulls_beyond_the_buffer_budget(monkeypatch):
    monkeypatch.setattr(importlib.import_module("fastgnn.ops.maxk"), "_CPU_PUSH_BUFFER_BYTES", 0)
    g, _ = random_graph(40, 300, seed=3)
    _check_spmm(g, torch.randn(40, 32, requires_grad=True), 5, norm="both")


@pytest.mark.gpu
def test_deterministic_mode_gpu():
    g, _ = random_graph(60, 500, seed=8, device="cuda")
    x = torch.randn(60, 128, device="cuda", requires_grad=True)
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for _ in range(2):
            out = maxk_spmm(g, maxk(x, 4), norm="both")
            grad, = torch.autograd.grad(out, x, torch.ones_like(out))
            runs.append((out, grad))
        assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.gpu
def test_wide_rows_fall_back_gpu():
    g, _ = random_graph(20, 80, seed=9, device="cuda")
    x = torch.randn(20, 16384, device="cuda", requires_grad=True)
    with pytest.warns(UserWarning, match="shared-memory row buffer"):
        _check_spmm(g, x, 3)


# ---- bad inputs --------------------------------------------------------------------------------
def test_bad_inputs():
    g, _ = random_graph(20, 60, seed=10)
    x = torch.randn(20, 8)
    for k, error in ((0, ValueError), (9, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(error, match="k must be"):
            maxk(x, k)
    with pytest.raises(ValueError, match="2-D"):
        maxk(torch.randn(4, 2, 8), 2)
    with pytest.raises(TypeError, match="floating point"):
        maxk(torch.ones(4, 8, dtype=torch.int64), 2)
    h = maxk(x, 3)
    with pytest.raises(TypeError, match="fastgnn.CBSR"):
        maxk_spmm(g, x)
    with pytest.raises(ValueError, match="num_src_nodes"):
        maxk_spmm(g, maxk(torch.randn(19, 8), 3))
    with pytest.raises(ValueError, match="norm"):
        maxk_spmm(g, h, norm="sym")
    with pytest.raises(ValueError, match="reduce"):
        maxk_spmm(g, h, reduce="max")
    with pytest.raises(ValueError, match="edge_weight"):
        maxk_spmm(g, h, edge_weight=torch.ones(3))
    with pytest.raises(ValueError, match="edge_values replaces"):
        maxk_spmm(g, h, norm="both", edge_values=torch.ones(g.num_edges))
    # A CBSR whose width does not match its indices, or k above the width.
    with pytest.raises(TypeError, match="indices of 300 features must have dtype torch.int16"):
        CBSR(h.values, h.indices, 300)
    with pytest.raises(ValueError, match="k \\(3\\) must be in"):
        CBSR(h.values, h.indices, 2)
    with pytest.raises(ValueError, match="both be \\[N, k\\]"):
        CBSR(h.values, h.indices[:, :2], 8)
    with pytest.raises(TypeError, match="floating-point"):
        CBSR(h.indices, h.indices, 8)
    # The native op refuses indices whose dtype does not match the width it is told.
    with pytest.raises(RuntimeError, match="must have dtype"):
        torch.ops.fastgnn.maxk_spgemm(g.rowptr, g.col, None, h.values, h.indices, 300, None,
                                      None, None, None, 0, 0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        fastgnn.nn.MaxK(0)


@pytest.mark.gpu
def test_bad_devices_gpu():
    g, _ = random_graph(20, 60, seed=11)
    h = maxk(torch.randn(20, 8, device="cuda"), 3)
    with pytest.raises(ValueError, match="cuda"):
        maxk_spmm(g, h)
    with pytest.raises(ValueError, match="indices are on"):
        CBSR(h.values, h.indices.cpu(), 8)


# ---- layers ------------------------------------------------------------------------------------
def _stock_and_fast(name: str, k: int):
    pyg_nn = pytest.importorskip("torch_geometric.nn")  # absent from the DGL CI environment
    torch.manual_seed(0)
    if name == "gin":
        mlp = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        fast = fastgnn.nn.MaxKGINConv(mlp, k=k, train_eps=True)
        stock = pyg_nn.GINConv(mlp, train_eps=True)
    elif name == "gcn":
        fast = fastgnn.nn.MaxKGCNConv(24, 16, k=k, improved=True)
        stock = pyg_nn.GCNConv(24, 16, improved=True)
    else:
        options = dict(aggr="sum", normalize=True) if name == "sage-sum" else {}
        fast = fastgnn.nn.MaxKSAGEConv(24, 16, k=k, **options)
        stock = pyg_nn.SAGEConv(24, 16, **options)
    stock.load_state_dict(fast.state_dict())
    return fast, stock


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["sage", "sage-sum", "gcn", "gin"])
@pytest.mark.parametrize("structure", ["edge_index", "graph"])
def test_layers_match_stock(name, structure, device):
    g, ei = random_graph(50, 300, seed=12, device=device)
    fast, stock = _stock_and_fast(name, k=6)
    fast, stock = fast.to(device), stock.to(device)
    x = torch.randn(50, 24, device=device, requires_grad=True)
    x_stock = x.detach().clone().requires_grad_()
    args = () if name != "gcn" else (torch.rand(ei.shape[1], device=device),)
    if structure == "graph" and name == "gcn":
        args = ()
    out = fast(x, g if structure == "graph" else ei, *args)
    expected = stock(fastgnn.nn.MaxK(6)(x_stock), ei, *args)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x.grad, x_stock.grad, rtol=1e-5, atol=1e-5)
    for (pname, p), q in zip(fast.named_parameters(), stock.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=pname)


def test_layer_bipartite_and_fallback():
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    from fastgnn.pyg import FallbackWarning
    g, ei = random_graph(40, 200, num_dst=25, seed=13)
    fast, stock = _stock_and_fast("sage", k=5)
    x_src, x_dst = torch.randn(40, 24), torch.randn(25, 24)
    maxk5 = fastgnn.nn.MaxK(5)
    torch.testing.assert_close(fast((x_src, x_dst), ei),
                               stock((maxk5(x_src), maxk5(x_dst)), ei), rtol=1e-5, atol=1e-5)
    projected = fastgnn.nn.MaxKSAGEConv(24, 16, k=5, project=True)
    reference_layer = pyg_nn.SAGEConv(24, 16, project=True)
    reference_layer.load_state_dict(projected.state_dict())
    x = torch.randn(40, 24)
    g2, ei2 = random_graph(40, 200, seed=14)
    with pytest.warns(FallbackWarning, match="project=True"):
        out = projected(x, ei2)
    torch.testing.assert_close(out, reference_layer(maxk5(x), ei2))
    assert "k=5" in repr(projected)


def test_layer_dropout_on_kept_entries():
    pytest.importorskip("torch_geometric.nn")
    g, ei = random_graph(50, 300, seed=15)
    fast, stock = _stock_and_fast("sage", k=6)
    fast.dropout = 0.5
    x = torch.randn(50, 24)
    torch.manual_seed(3)
    out = fast(x, ei)
    torch.manual_seed(3)
    h = maxk(x, 6)
    dropped = CBSR(torch.nn.functional.dropout(h.values, 0.5), h.indices, 24).to_dense()
    torch.testing.assert_close(out, stock(dropped, ei), rtol=1e-5, atol=1e-5)
    fast.eval()
    torch.testing.assert_close(fast(x, ei), stock(h.to_dense(), ei), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="dropout"):
        fastgnn.nn.MaxKGINConv(torch.nn.Identity(), k=2, dropout=1.0)
