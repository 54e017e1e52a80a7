"""Min/max aggregation (native ops) against the reference: values, winning sources, gradients."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops import minmax
from conftest import (devices, hub_graph, load_dataset, minmax_opcheck_plans,
                      random_edge_index, random_graph)

pytestmark = pytest.mark.skipif(not _native.has_op("minmax_aggregate"),
                                reason="native extension not built")

REDUCES = ("min", "max")
OP = torch.ops.fastgnn.minmax_aggregate
BACKWARD_OP = torch.ops.fastgnn.minmax_aggregate_backward


def _tied_features(num_rows, shape, dtype, device, seed=0, specials=True):
    """Small integers (many ties), with NaN and +-inf sprinkled in when ``specials``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (num_rows,) + tuple(shape), generator=gen).to(dtype)
    if specials and x.numel() >= 8:
        flat = x.view(-1)
        spots = torch.randperm(flat.numel(), generator=gen)[:max(3, flat.numel() // 50)]
        values = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=dtype)
        flat[spots] = values[torch.arange(spots.numel()) % 3]
    return x.to(device)


def _expected_grad(arg, grad, num_src):
    """grad_x[arg[i, f], f] += grad[i, f] for arg >= 0, in float64."""
    arg2, grad2 = arg.reshape(arg.shape[0], -1), grad.reshape(grad.shape[0], -1).double()
    out = torch.zeros(num_src, arg2.shape[1], dtype=torch.float64, device=grad.device)
    rows, feats = torch.nonzero(arg2 >= 0, as_tuple=True)
    out.index_put_((arg2[rows, feats].long(), feats), grad2[rows, feats], accumulate=True)
    return out.reshape((num_src,) + tuple(grad.shape[1:]))


def _check(g, x, reduce, *, grad_tol=None):
    """Native forward, arg and backward against the reference semantics."""
    ref_out, ref_arg = reference.aggregate_with_arg(g, x, reduce)
    xg = x.clone().requires_grad_()
    with fastgnn.backend("native"):
        out = fastgnn.ops.aggregate(g, xg, reduce)
    torch.testing.assert_close(out, ref_out, equal_nan=True, rtol=0, atol=0)
    width = x[0].numel() if x.shape[0] else 0
    flat = x.reshape(x.shape[0], width)
    _, arg = OP(g.rowptr, g.col, flat, reduce == "max", None, None, 0, 0, None, None)
    assert arg.dtype == g.index_dtype
    assert torch.equal(arg.long(), ref_arg.reshape(arg.shape))
    grad = torch.randn(out.shape, dtype=torch.float64, device=x.device).to(x.dtype)
    out.backward(grad)
    expected = _expected_grad(ref_arg, grad, x.shape[0])
    if x.dtype == torch.float32 and grad_tol is None:
        # A float32 sum of n terms, in any order, is off by about sqrt(n) roundings of the
        # terms' magnitude: a hub source of a real graph collects thousands (random grads made
        # a fixed 1e-5 fail one tolokers run in seven). A wrong or missing term is far larger.
        count = _expected_grad(ref_arg, torch.ones_like(grad), x.shape[0])
        magnitude = _expected_grad(ref_arg, grad.abs(), x.shape[0])
        bound = 1e-5 + 1e-5 * expected.abs() + 4 * 2.0 ** -24 * count.sqrt() * magnitude
        error = (xg.grad.double() - expected).abs()
        if not bool((error <= bound).all()):
            worst = (error / bound).argmax()
            pytest.fail(f"gradient off by {float(error.flatten()[worst]):.3g} where "
                        f"{float(bound.flatten()[worst]):.3g} is allowed")
        return
    tol = grad_tol or {torch.float64: {}}.get(x.dtype, dict(rtol=1e-2, atol=1e-2))
    torch.testing.assert_close(xg.grad.double(), expected, **tol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_matches_reference(graph_case, device, reduce, dtype):
    g, _ = graph_case
    g = g.to(device)
    x = _tied_features(g.num_src_nodes, (19,), dtype, device, seed=3)
    _check(g, x, reduce)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_gradient_is_float32_rounded_once(graph_case, reduce, dtype):
    """The half backward sums its messages in float32, in the float32 kernel's order, and
    writes each sum rounded once (converted per slice in the scatter, on every tail width)."""
    g, _ = graph_case
    gen = torch.Generator().manual_seed(13)
    for width in (1, 9, 16, 33, 64):
        x = torch.randn(g.num_src_nodes, width, generator=gen).to(dtype)
        dy = torch.randn(g.num_dst_nodes, width, generator=gen).to(dtype)
        grads = []
        for features, grad in ((x, dy), (x.float(), dy.float())):
            features = features.clone().requires_grad_()
            out = fastgnn.ops.aggregate(g, features, reduce)
            grads.append(torch.autograd.grad(out, features, grad)[0])
        assert grads[0].dtype == dtype
        assert torch.equal(grads[0], grads[1].to(dtype)), width


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("shape", [(), (1,), (8,), (32,), (45,), (128,), (2, 3)])
def test_feature_shapes(device, shape):
    g, _ = random_graph(40, 300, seed=4, device=device)
    x = _tied_features(g.num_src_nodes, shape, torch.float32, device, seed=5)
    for reduce in REDUCES:
        _check(g, x, reduce)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [7, 64])  # 64: the CPU's vector tiles, CUDA's 16-byte loads
def test_signed_zeros_subnormals_and_nans_of_either_sign(device, dtype, width):
    """Values that a flush-to-zero comparison or a NaN's sign bit would misorder: -0 and +0
    tie (the earliest edge wins and its own zero is the output), subnormals order apart from
    zero and from each other, and NaN wins whatever its sign."""
    tiny = torch.finfo(dtype).tiny  # the smallest normal number
    bits = torch.tensor([-4194304], dtype=torch.int32)  # 0xFFC00000: a NaN with its sign set
    negative_nan = float(bits.view(torch.float32))
    values = torch.tensor([0.0, -0.0, tiny / 4, tiny / 2, -tiny / 4, -tiny / 2, 1.0, -1.0,
                           negative_nan, float("nan")], dtype=dtype)
    if values.element_size() == 2:  # their conversion drops a NaN's sign: set the bit again
        bits = values.view(torch.int16)
        bits[8] = bits[8] | -32768
    assert torch.isnan(values[8]) and torch.signbit(values[8])
    gen = torch.Generator().manual_seed(width)
    g, _ = random_graph(40, 600, seed=11, device=device)
    for pool in (values[:8], values):  # without NaN first: NaN would win most rows
        x = pool[torch.randint(0, pool.numel(), (g.num_src_nodes, width), generator=gen)]
        x = x.to(device)
        for reduce in REDUCES:
            _check(g, x, reduce)
            with fastgnn.backend("native"):
                out = fastgnn.ops.aggregate(g, x, reduce)
            _, arg = OP(g.rowptr, g.col, x, reduce == "max", None, None, 0, 0, None, None)
            as_bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[x.element_size()]
            picked = x.gather(0, arg.long().clamp(min=0))  # the winning source's own value
            same_bits = out.view(as_bits) == picked.view(as_bits)
            if x.element_size() == 2:  # c10's conversions from float write a canonical NaN
                same_bits |= out.isnan() & picked.isnan()
            assert bool(same_bits[arg >= 0].all()), "output is not the winner's own value"
            for name, plan in minmax._plans(g, x)[0].items():  # CUDA: heavy and split plans
                plan_out, plan_arg = OP(g.rowptr, g.col, x, reduce == "max", *plan, None, None)
                assert torch.equal(plan_arg, arg), name
                assert torch.equal(plan_out.view(as_bits), out.view(as_bits)), name


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_widths(device, index_dtype):
    ei = random_edge_index(50, 50, 400, seed=6)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=50, index_dtype=index_dtype).to(device)
    assert g.index_dtype == index_dtype
    x = _tied_features(50, (24,), torch.float32, device, seed=7)
    for reduce in REDUCES:
        _check(g, x, reduce)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_hub_above_ten_thousand(device, index_dtype):
    g = hub_graph(device, index_dtype)
    assert g.max_in_degree > 10_000
    x = _tied_features(g.num_src_nodes, (40,), torch.float32, device, seed=9)
    for reduce in REDUCES:
        _check(g, x, reduce)


@pytest.mark.sanitize
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_every_gpu_plan_matches_reference(dtype, index_dtype):
    """Each launch plan the tuner may pick (light only; each quantile, warps, edge chunk)."""
    g = hub_graph("cuda", index_dtype)
    for width in (3, 40, 130, 256):  # 40 and 256: the light kernel's one load per 4 features
        x = _tied_features(g.num_src_nodes, (width,), dtype, "cuda", seed=width)
        plans, _ = minmax._plans(g, x)
        assert any(plan[1] is not None for plan in plans.values())  # heavy rows exist
        for reduce in REDUCES:
            ref_out, ref_arg = reference.aggregate_with_arg(g, x, reduce)
            for name, plan in plans.items():
                out, arg = OP(g.rowptr, g.col, x, reduce == "max", *plan, None, None)
                torch.testing.assert_close(out, ref_out, equal_nan=True, rtol=0, atol=0,
                                           msg=lambda m: f"{name}: {m}")
                assert torch.equal(arg.long(), ref_arg), name


def test_sampled_batches_are_planned_without_bucketing_their_rows():
    """A mini-batch's graph (its choices go by size class; used for one step) is offered the
    light plans only: no degree buckets (a quantile read back) and no split work list for each
    batch. A graph built once keeps the heavy and split plans."""
    from fastgnn.sampling import NeighborSampler
    g = hub_graph("cpu", torch.int32)
    x = torch.randn(g.num_src_nodes, 8)
    batch = NeighborSampler(g, [-1]).sample_subgraph(torch.arange(g.num_dst_nodes)).graph
    plans, default = minmax._plans(batch, x)
    assert default in plans and all(name.startswith("light") for name in plans)
    assert not any(isinstance(key, tuple) and key[0] == "buckets" for key in batch._derived)
    whole, _ = minmax._plans(g, x)
    assert any(name.startswith("split") for name in whole)
    assert any(plan[1] is not None for plan in whole.values())


@pytest.mark.gpu
@pytest.mark.parametrize("plan_name", ["split64-w4", "q0.99-w4-e128"])
def test_gpu_forward_needs_no_memory_beyond_its_outputs(plan_name):
    """The packed scratch of the heavy and load-balanced paths lives in out's memory: the
    forward's peak is out and arg (each rounded to the allocator's 512-byte blocks)."""
    g = hub_graph("cuda")
    x = torch.randn(g.num_src_nodes, 64, device="cuda")
    plan = minmax._plans(g, x)[0][plan_name]
    OP(g.rowptr, g.col, x, True, *plan, None, None, g.key)  # builds the cached work list
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out, arg = OP(g.rowptr, g.col, x, True, *plan, None, None, g.key)
    torch.cuda.synchronize()
    rounded = sum(-(-t.nbytes // 512) * 512 for t in (out, arg))
    assert torch.cuda.max_memory_allocated() - before <= rounded


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_unaligned_rows(dtype):
    """A view starting one element into its storage (rows not aligned to the 4-feature load)
    takes the light kernel's feature-by-feature loads."""
    g = hub_graph("cuda")
    storage = _tied_features(g.num_src_nodes * 16 + 1, (), dtype, "cuda", seed=17)
    x = storage[1:].view(g.num_src_nodes, 16)
    for reduce in REDUCES:
        ref_out, ref_arg = reference.aggregate_with_arg(g, x, reduce)
        out, arg = OP(g.rowptr, g.col, x, reduce == "max", None, None, 0, 0, None, None)
        torch.testing.assert_close(out, ref_out, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(arg.long(), ref_arg)


@pytest.mark.gpu
def test_gpu_float64_and_deterministic_backward():
    g = hub_graph("cuda")
    x = _tied_features(g.num_src_nodes, (33,), torch.float64, "cuda", seed=10)
    for reduce in REDUCES:
        _check(g, x, reduce)
    x32 = x.float()
    grads = []
    g.transpose()  # built (and cached) first: Graph.out_degree's bincount alerts on CUDA
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2):
            xg = x32.clone().requires_grad_()
            out = fastgnn.ops.aggregate(g, xg, "max")
            grad = torch.linspace(-1, 1, out.numel(), device="cuda").view_as(out)
            out.backward(grad)
            grads.append(xg.grad)
    finally:
        torch.use_deterministic_algorithms(previous)
    assert torch.equal(grads[0], grads[1])
    _, ref_arg = reference.aggregate_with_arg(g, x32, "max")
    # float32 gradients summed in the pull's order: float32 tolerances against the float64 sum
    torch.testing.assert_close(grads[0].double(), _expected_grad(ref_arg, grad, x.shape[0]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_atomic_backward_alerts_when_deterministic():
    g = hub_graph("cuda")
    x = torch.randn(g.num_src_nodes, 8, device="cuda")
    _, arg = OP(g.rowptr, g.col, x, False, None, None, 0, 0, None, None)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="minmax_aggregate"):
            BACKWARD_OP(arg, torch.ones_like(x), x.shape[0], None, None)
    finally:
        torch.use_deterministic_algorithms(previous)


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_float64(graph_case, reduce):
    g, _ = graph_case
    x = torch.randn(g.num_src_nodes, 6, dtype=torch.float64, requires_grad=True)  # no ties
    with fastgnn.backend("native"):
        assert torch.autograd.gradcheck(lambda t: fastgnn.ops.aggregate(g, t, reduce), (x,))


@pytest.mark.parametrize("device", devices())
def test_empty_and_edgeless(device):
    g = fastgnn.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), num_nodes=5).to(device)
    x = torch.randn(5, 4, device=device, requires_grad=True)
    with fastgnn.backend("native"):
        out = fastgnn.ops.aggregate(g, x, "max")
    assert torch.equal(out, torch.zeros(5, 4, device=device))
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    g, _ = random_graph(20, 60, seed=11, device=device)
    for width in (0,):
        _check(g, torch.randn(20, width, device=device), "min")


def test_cpu_deterministic_across_thread_counts():
    g, _ = random_graph(80, 2000, seed=12)
    x = _tied_features(80, (40,), torch.float32, "cpu", seed=13, specials=False)
    grad = torch.randn(80, 40)
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            xg = x.clone().requires_grad_()
            fastgnn.ops.aggregate(g, xg, "min").backward(grad)
            results.append(xg.grad)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(results[0], r) for r in results[1:])


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g, _ = random_graph(30, 200, seed=14, device=device)
    x = torch.randn(30, 9, device=device, requires_grad=True)
    t_rowptr, t_col, _ = g.transpose()
    plans = minmax_opcheck_plans(g, device)
    for plan in plans:
        for is_max in (False, True):
            torch.library.opcheck(OP, (g.rowptr, g.col, x, is_max, *plan, None, None))
            torch.library.opcheck(OP, (g.rowptr, g.col, x, is_max, *plan, t_rowptr, t_col,
                                       g.key))
    _, arg = OP(g.rowptr, g.col, x.detach(), True, None, None, 0, 0, None, None)
    grad = torch.randn(arg.shape, device=device)
    torch.library.opcheck(BACKWARD_OP, (arg, grad, 30, None, None))
    torch.library.opcheck(BACKWARD_OP, (arg, grad, 30, t_rowptr, t_col))


def test_bad_inputs():
    g, _ = random_graph(20, 60, seed=15)
    with pytest.raises(ValueError, match="reduce"):
        fastgnn.ops.aggregate(g, torch.randn(20, 3), "median")
    with pytest.raises(ValueError, match="num_src_nodes"):
        fastgnn.ops.aggregate(g, torch.randn(19, 3), "max")
    with pytest.raises(TypeError, match="floating point"):
        fastgnn.ops.aggregate(g, torch.ones(20, 3, dtype=torch.int64), "min")
    with pytest.raises(TypeError, match="fastgnn.Graph"):
        fastgnn.ops.aggregate(g.edge_index(), torch.randn(20, 3), "min")
    with pytest.raises(RuntimeError, match="minmax_aggregate"):
        OP(g.rowptr, g.col, torch.randn(20), False, None, None, 0, 0, None, None)
    with pytest.raises(RuntimeError, match="minmax_aggregate_backward"):
        BACKWARD_OP(torch.zeros(3, 2, dtype=torch.int32), torch.randn(3, 3), 5, None, None)
    with pytest.raises(TypeError, match="index_dtype"):
        fastgnn.Graph.from_edge_index(g.edge_index(), index_dtype=torch.int16)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["tolokers", "ogbn-arxiv"])
def test_real_graph_structures(device, name):
    data = load_dataset(name)
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes).to(device)
    x = _tied_features(g.num_src_nodes, (8,), torch.float32, device, seed=16)
    for reduce in REDUCES:
        _check(g, x, reduce)
