"""Edge softmax (native ops) against the reference: values, gradients, special values, checks."""
from __future__ import annotations

import math

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from conftest import devices, load_dataset, random_edge_index, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("edge_softmax"),
                                reason="native extension not built")

OP = torch.ops.fastgnn.edge_softmax
BACKWARD_OP = torch.ops.fastgnn.edge_softmax_backward
NORMS = ("dst", "src")
NAN, INF = float("nan"), float("inf")
# [E], [E, 1], [E, H], [E, H, 1]; 37 and 70 columns take several passes of a CUDA warp
SHAPES = [(), (1,), (4,), (3, 1), (2, 3), (37,), (70,)]
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=5e-6), torch.float64: dict(rtol=1e-12, atol=1e-14),
             torch.float16: dict(rtol=2e-3, atol=1e-3), torch.bfloat16: dict(rtol=2e-2, atol=8e-3)}


def _logits(g, shape=(), dtype=torch.float32, device="cpu", seed=0, spread=3.0):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn((g.num_edges,) + tuple(shape), generator=gen, dtype=torch.float64) * spread
    return z.to(device=device, dtype=dtype)


def _native_softmax(g, z, norm_by="dst"):
    with fastgnn.backend("native"):
        return fastgnn.ops.edge_softmax(g, z, norm_by=norm_by)


def _forward_backward(softmax, z, grad):
    z = z.clone().requires_grad_()
    out = softmax(z)
    out.backward(grad.to(z.dtype))
    return out.detach(), z.grad


def _check(g, z, norm_by, tol=None):
    """Forward and the logits' gradient against the reference run in float64 (autograd
    through it): within the dtype's tolerance, and, below float64, no further from it than
    the reference run in ``z``'s own dtype (long rows round their sums differently)."""
    tol = tol or TOLERANCE[z.dtype]
    grad = torch.randn(z.shape, generator=torch.Generator().manual_seed(7),
                       dtype=torch.float64).to(z.device)
    ours = _forward_backward(lambda t: _native_softmax(g, t, norm_by), z, grad)
    exact = _forward_backward(lambda t: reference.edge_softmax(g, t, norm_by), z.double(), grad)
    assert ours[0].shape == z.shape and ours[0].dtype == z.dtype
    if z.dtype == torch.float64:
        for got, want in zip(ours, exact):
            torch.testing.assert_close(got, want, equal_nan=True, **tol)
        return
    same_dtype = _forward_backward(lambda t: reference.edge_softmax(g, t, norm_by), z, grad)
    for got, peer, want in zip(ours, same_dtype, exact):
        torch.testing.assert_close(got.double(), want, equal_nan=True, **tol)
        finite = torch.isfinite(want)
        error = (got.double() - want)[finite].abs().amax() if finite.any() else 0.0
        peer_error = (peer.double() - want)[finite].abs().amax() if finite.any() else 0.0
        ulps = 4 * torch.finfo(z.dtype).eps * max(1.0, float(want[finite].abs().amax())
                                                  if finite.any() else 1.0)
        assert error <= 2 * peer_error + ulps, (float(error), float(peer_error))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("norm_by", NORMS)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(graph_case, device, norm_by, shape):
    g, _ = graph_case
    assert g.edge_perm is not None  # an unsorted input edge order
    g = g.to(device)
    _check(g, _logits(g, shape, device=device, seed=len(shape)), norm_by)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm_by", NORMS)
def test_dtypes(graph_case, device, dtype, norm_by):
    """float64 exactly; halves accumulate in float32, so they are within a rounding of the
    reference, which computes in float32 from the same half logits."""
    g, _ = graph_case
    g = g.to(device)
    _check(g, _logits(g, (4, 1), dtype=dtype, device=device, seed=3), norm_by)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("sorted_edges", [False, True])
def test_index_widths_and_edge_orders(device, index_dtype, sorted_edges):
    ei = random_edge_index(50, 50, 400, seed=6)
    if sorted_edges:  # the CSR order: no edge permutation at all
        ei = ei[:, torch.argsort(ei[1] * 50 + ei[0], stable=True)]
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=50, index_dtype=index_dtype).to(device)
    assert g.index_dtype == index_dtype and (g.edge_perm is None) == sorted_edges
    for norm_by in NORMS:
        _check(g, _logits(g, (3,), device=device, seed=8), norm_by)


def _special_graph(device):
    """Destinations 1-5 each with one awkward row, in a shuffled edge order; 0 has no edges."""
    rows = {1: [-INF, -INF], 2: [-INF, 0.0, 1.0], 3: [INF, 0.0], 4: [NAN, 2.0], 5: [3.0]}
    dst = torch.tensor([d for d, values in rows.items() for _ in values])
    logits = torch.tensor([v for values in rows.values() for v in values])
    p = torch.tensor([1.0 / (1.0 + math.e), math.e / (1.0 + math.e)])
    expected = torch.tensor([NAN, NAN, 0.0, p[0], p[1], NAN, NAN, NAN, NAN, 1.0])
    order = torch.randperm(dst.numel(), generator=torch.Generator().manual_seed(0))
    ei = torch.stack([torch.arange(dst.numel()) % 6, dst])[:, order]
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=6).to(device)
    return g, logits[order].to(device), expected[order].to(device)


@pytest.mark.parametrize("device", devices())
def test_special_values_give_dgls_results(device):
    """Rows of -inf only, and rows holding +inf or NaN, are NaN (as DGL 2.1 gives); -inf next
    to finite logits is a zero weight with a zero gradient."""
    g, z, expected = _special_graph(device)
    for columns in (None, 1, 2):  # [E], [E, 1], [E, 2]
        widen = (lambda t: t) if columns is None else (lambda t: t[:, None].expand(-1, columns))
        zz = widen(z).clone().requires_grad_()
        out = _native_softmax(g, zz)
        want = widen(expected)
        torch.testing.assert_close(out, want, equal_nan=True)
        torch.testing.assert_close(out, reference.edge_softmax(g, zz), equal_nan=True)
        out.backward(torch.arange(out.numel(), device=device, dtype=out.dtype).view_as(out))
        assert torch.equal(zz.grad.isnan(), want.isnan())
        assert bool((zz.grad[want == 0] == 0).all()) and bool((zz.grad[want > 0] != 0).any())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_large_logits_are_stable(device, dtype):
    """Logits far beyond exp's range (float16 overflows at 11, float32 at 88) subtract their
    row's maximum first."""
    g, _ = random_graph(40, 300, seed=21, device=device)
    z = _logits(g, (3,), device=device, seed=21) + torch.where(
        torch.arange(g.num_edges, device=device) % 2 == 0, 4000.0, -3000.0).unsqueeze(1)
    out = _native_softmax(g, z.to(dtype))
    assert bool(out.isfinite().all())
    _check(g, z.to(dtype), "dst")


@pytest.mark.parametrize("norm_by", NORMS)
def test_gradcheck_float64(graph_case, norm_by):
    g, _ = graph_case
    z = _logits(g, (2, 1), dtype=torch.float64, seed=9).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: _native_softmax(g, t, norm_by), (z,))


@pytest.mark.parametrize("device", devices())
def test_backward_reads_the_output_not_the_logits(device):
    """Only the output is saved: the logits may change in place before the backward."""
    g, _ = random_graph(40, 200, seed=10, device=device)
    z = _logits(g, (2,), device=device, seed=10)
    grad = _logits(g, (2,), device=device, seed=11, spread=1.0)
    expected_grad = torch.autograd.functional.vjp(lambda t: reference.edge_softmax(g, t), z,
                                                  grad)[1]
    leaf = z.clone().requires_grad_()
    logits = leaf * 1.0
    out = _native_softmax(g, logits)
    logits.mul_(5.0)  # would break a backward that recomputed from the logits
    out.backward(grad)
    torch.testing.assert_close(leaf.grad, expected_grad)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_hub_above_ten_thousand(device, index_dtype):
    gen = torch.Generator().manual_seed(11)
    src = torch.randint(0, 4000, (30_000,), generator=gen)
    dst = torch.cat([torch.full((12_000,), 3), torch.randint(0, 3995, (18_000,), generator=gen)])
    order = torch.randperm(src.numel(), generator=gen)
    g = fastgnn.Graph.from_edge_index(torch.stack([src, dst])[:, order], num_nodes=4000,
                                      index_dtype=index_dtype).to(device)
    assert g.max_in_degree > 10_000
    for norm_by in NORMS:
        _check(g, _logits(g, (4, 1), device=device, seed=12, spread=10.0), norm_by)


@pytest.mark.parametrize("device", devices())
def test_empty_graphs_and_widths(device):
    g = fastgnn.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), num_nodes=5).to(device)
    for norm_by in NORMS:
        z = torch.zeros(0, 3, device=device, requires_grad=True)
        out = _native_softmax(g, z, norm_by)
        assert out.shape == (0, 3)
        out.sum().backward()
    g, _ = random_graph(20, 60, seed=13, device=device)
    z = torch.zeros(g.num_edges, 0, 2, device=device, requires_grad=True)
    assert _native_softmax(g, z).shape == z.shape


def test_source_rows_without_a_cached_transpose():
    ei = random_edge_index(30, 30, 200, seed=14)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=30, cache_transpose=False)
    _check(g, _logits(g, (2,), seed=14), "src")
    assert not {"transpose", "transposed_edge_ids"} & set(g._derived)


def test_cpu_deterministic_across_thread_counts():
    g, _ = random_graph(80, 3000, seed=15)
    z = _logits(g, (5,), seed=15)
    grad = torch.randn(z.shape, generator=torch.Generator().manual_seed(16))
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            zz = z.clone().requires_grad_()
            out = _native_softmax(g, zz)
            out.backward(grad)
            results.append((out.detach(), zz.grad))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(results[0][0], o) and torch.equal(results[0][1], d)
               for o, d in results[1:])


@pytest.mark.gpu
def test_gpu_deterministic():
    g, _ = random_graph(2000, 60_000, seed=17, device="cuda")
    z = _logits(g, (8,), device="cuda", seed=17)
    grad = torch.randn_like(z)
    runs = []
    for _ in range(2):
        zz = z.clone().requires_grad_()
        out = _native_softmax(g, zz)
        out.backward(grad)
        runs.append((out.detach(), zz.grad))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def _hub_graph(device, hub_edges=6000, light_edges=20_000, nodes=3000, seed=23):
    """A hub destination and a hub source of ``hub_edges`` edges each among many light rows,
    in a shuffled edge order."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.cat([torch.randint(0, nodes, (hub_edges,), generator=gen),
                     torch.full((hub_edges,), 5),
                     torch.randint(0, nodes, (light_edges,), generator=gen)])
    dst = torch.cat([torch.full((hub_edges,), 7),
                     torch.randint(0, nodes, (hub_edges + light_edges,), generator=gen)])
    order = torch.randperm(src.numel(), generator=gen)
    return fastgnn.Graph.from_edge_index(torch.stack([src, dst])[:, order],
                                         num_nodes=nodes).to(device)


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [1, 4, 64, 70])
def test_gpu_heavy_rows_take_a_block(dtype, width):
    """Hub rows (a block each) and light rows (a warp each), both norms: the reference's values
    and gradients, and the same bits run after run."""
    from fastgnn.ops.edge_softmax import _buckets
    g = _hub_graph("cuda")
    z = _logits(g, (width,), dtype=dtype, device="cuda", seed=width, spread=4.0)
    grad = _logits(g, (width,), dtype=dtype, device="cuda", seed=width + 1, spread=1.0)
    for norm_by in NORMS:
        light, heavy = _buckets(g, norm_by)
        assert heavy is not None and 0 < heavy.numel() < 100 and light.numel() > 1000
        hub = 7 if norm_by == "dst" else 5
        assert int(heavy[0]) == hub  # longest first
        # float16: where one edge takes nearly all of a row's weight, its output rounds to 1.0
        # and the backward, which reads the output (as DGL's does), loses that edge's small
        # gradient: 1.02e-3 off at width 70, the same on the CPU kernel.
        _check(g, z, norm_by, dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else None)
        runs = []
        for _ in range(3):
            zz = z.clone().requires_grad_()
            out = _native_softmax(g, zz, norm_by)
            out.backward(grad)
            runs.append((out.detach(), zz.grad))
        assert all(torch.equal(runs[0][0], o) and torch.equal(runs[0][1], d)
                   for o, d in runs[1:])
    # The source rows' split is the graph's cached out-degree buckets, not a copy of its own.
    _, light, heavy = g.degree_buckets(0.99, by_degree=True, direction="out")
    assert _buckets(g, "src")[1] is heavy and _buckets(g, "src")[0] is light


@pytest.mark.gpu
def test_gpu_split_matches_warp_per_row():
    """The block-per-row path against every row by warp (no split): same values, within the
    rounding of a different summation order."""
    from fastgnn.ops.edge_softmax import _buckets, _rows
    g = _hub_graph("cuda", hub_edges=9000, seed=24)
    z = _logits(g, (8,), device="cuda", seed=24)
    for norm_by in NORMS:
        rowptr, perm = _rows(g, norm_by)
        split = _buckets(g, norm_by)
        assert split[1] is not None
        out = OP(rowptr, perm, z, *split)
        torch.testing.assert_close(out, OP(rowptr, perm, z, None, None))
        grad = torch.randn_like(z)
        torch.testing.assert_close(BACKWARD_OP(rowptr, perm, out, grad, *split),
                                   BACKWARD_OP(rowptr, perm, out, grad, None, None))


def _unaligned_copy(t):
    """``t``'s values in a view one element into its storage: rows no longer aligned to the
    CUDA kernels' packet loads."""
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = storage[1:].view(t.shape)
    view.copy_(t)
    return view


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [4, 64])
def test_gpu_unaligned_rows(dtype, width):
    """Logits, outputs and gradients not aligned to a packet take one-column loads: the same
    values as aligned ones (within a different summation order's rounding)."""
    from fastgnn.ops.edge_softmax import _buckets, _rows
    g = _hub_graph("cuda")
    z = _logits(g, (width,), dtype=dtype, device="cuda", seed=width)
    grad = _logits(g, (width,), dtype=dtype, device="cuda", seed=width + 1, spread=1.0)
    tol = TOLERANCE[dtype]
    for norm_by in NORMS:
        rowptr, perm = _rows(g, norm_by)
        split = _buckets(g, norm_by)
        out = OP(rowptr, perm, z, *split)
        torch.testing.assert_close(OP(rowptr, perm, _unaligned_copy(z), *split), out, **tol)
        want = BACKWARD_OP(rowptr, perm, out, grad, *split)
        got = BACKWARD_OP(rowptr, perm, _unaligned_copy(out), _unaligned_copy(grad), *split)
        torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm_by", NORMS)
def test_cpu_half_is_float32_rounded_once(dtype, norm_by):
    """Half logits convert exactly and the sums run in float32 and double as for float32 ones
    (F16C in the AVX2 clone, c10 in the baseline one): forward and backward are the float32
    kernel's on the same values, rounded once, bit for bit, at widths with and without a tail
    of 8."""
    from fastgnn.ops.edge_softmax import _rows
    g = _hub_graph("cpu", hub_edges=500, light_edges=3000, nodes=400)
    rowptr, perm = _rows(g, norm_by)
    for width in (1, 8, 16, 37, 70):
        z = _logits(g, (width,), dtype=dtype, seed=width)
        out = OP(rowptr, perm, z, None, None)
        assert out.dtype == dtype
        assert torch.equal(out, OP(rowptr, perm, z.float(), None, None).to(dtype)), width
        grad = _logits(g, (width,), dtype=dtype, seed=width + 1, spread=1.0)
        want = BACKWARD_OP(rowptr, perm, out.float(), grad.float(), None, None).to(dtype)
        assert torch.equal(BACKWARD_OP(rowptr, perm, out, grad, None, None), want), width


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    from fastgnn.ops.edge_softmax import _buckets, _rows
    for sorted_edges in (False, True):
        ei = random_edge_index(30, 30, 200, seed=18)
        if sorted_edges:
            ei = ei[:, torch.argsort(ei[1] * 30 + ei[0], stable=True)]
        g = fastgnn.Graph.from_edge_index(ei, num_nodes=30).to(device)
        z = _logits(g, (3,), device=device, seed=18).requires_grad_()
        for norm_by in NORMS:
            rowptr, perm = _rows(g, norm_by)
            split = _buckets(g, norm_by)
            torch.library.opcheck(OP, (rowptr, perm, z, *split))
            out = OP(rowptr, perm, z.detach(), *split)
            torch.library.opcheck(BACKWARD_OP, (rowptr, perm, out, torch.randn_like(out), *split))


def test_bad_inputs():
    g, _ = random_graph(20, 60, seed=19)
    z = _logits(g, (2,))
    with pytest.raises(ValueError, match="logits must have .* rows"):
        fastgnn.ops.edge_softmax(g, z[1:])
    with pytest.raises(ValueError, match="logits"):
        fastgnn.ops.edge_softmax(g, torch.tensor(1.0))
    with pytest.raises(TypeError, match="logits must be floating point"):
        fastgnn.ops.edge_softmax(g, torch.ones(g.num_edges, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match="logits must be a torch.Tensor"):
        fastgnn.ops.edge_softmax(g, [0.0] * g.num_edges)
    with pytest.raises(ValueError, match="norm_by"):
        fastgnn.ops.edge_softmax(g, z, norm_by="edge")
    with pytest.raises(TypeError, match="fastgnn.Graph"):
        fastgnn.ops.edge_softmax(g.edge_index(), z)
    with pytest.raises(RuntimeError, match="edge_softmax: rowptr ends at"):
        OP(g.rowptr, None, z[1:], None, None)
    with pytest.raises(RuntimeError, match="edge_softmax: edge values must be 2-D"):
        OP(g.rowptr, None, z[:, 0], None, None)
    with pytest.raises(RuntimeError, match="edge_softmax: edge_perm"):
        OP(g.rowptr, g.edge_perm, z, None, None)  # int64 against int32 rows
    rows = torch.arange(g.num_dst_nodes, dtype=g.index_dtype)
    with pytest.raises(RuntimeError, match="edge_softmax: light_rows and heavy_rows come"):
        OP(g.rowptr, None, z, rows, None)
    with pytest.raises(RuntimeError, match="edge_softmax_backward: light_rows and heavy_rows must"):
        BACKWARD_OP(g.rowptr, None, z, z, rows.long(), rows.long())
    with pytest.raises(RuntimeError, match="edge_softmax_backward: grad_out"):
        BACKWARD_OP(g.rowptr, None, z, z[:, :1], None, None)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["tolokers", "ogbn-arxiv"])
def test_real_graph_structures(device, name):
    data = load_dataset(name)
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes).to(device)
    for norm_by in NORMS:
        _check(g, _logits(g, (4,), device=device, seed=20), norm_by)
