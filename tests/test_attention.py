"""Fused GATv2 and dot-product attention: forward and every gradient against the reference."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops import attention as attention_ops
from conftest import devices, load_dataset, random_edge_index, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("gatv2_forward"),
                                reason="native attention ops not built")

KINDS = ("gatv2", "transformer")


def make_inputs(kind, g, heads, dim, dtype=torch.float32, device="cpu", edge_term=False,
                seed=0, spread=1.0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        t = torch.randn(*shape, generator=gen, dtype=torch.float64) * spread
        return t.to(device=device, dtype=dtype).requires_grad_()

    a = rand(g.num_dst_nodes, heads, dim)
    b = rand(g.num_src_nodes, heads, dim)
    c = rand(heads, dim) if kind == "gatv2" else rand(g.num_src_nodes, heads, dim)
    e = rand(g.num_edges, heads, dim) if edge_term else None
    return [a, b, c, e]


def attend(kind, g, inputs, impl=None, dropout=0.0, dropout_mask=None):
    a, b, c, e = inputs
    if impl == "reference":
        fn = reference.gatv2_attention if kind == "gatv2" else reference.graph_attention
        return fn(g, a, b, c, dropout=dropout, edge_term=e, dropout_mask=dropout_mask)
    fn = fastgnn.ops.gatv2_attention if kind == "gatv2" else fastgnn.ops.graph_attention
    with fastgnn.backend("native"):
        return fn(g, a, b, c, dropout=dropout, edge_term=e)


def forward_and_grads(kind, g, inputs, impl=None, seed=3, **kw):
    out = attend(kind, g, inputs, impl, **kw)
    gen = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out)
    wrt = [t for t in inputs if t is not None]
    return [out] + list(torch.autograd.grad(out, wrt, grad_out))


def assert_matches_reference(kind, g, inputs, atol, rtol, **kw):
    ours = forward_and_grads(kind, g, inputs, **kw)
    mask = kw.pop("dropout_mask", None)
    ref_inputs = [None if t is None else t.detach().to(ours[0].dtype if t.dtype == torch.float64
                                                       else torch.float32).requires_grad_()
                  for t in inputs]
    if inputs[0].dtype == torch.float64:
        ref_inputs = inputs
    theirs = forward_and_grads(kind, g, ref_inputs, "reference", dropout_mask=mask, **kw)
    names = ["out", "grad_dst", "grad_src", "grad_third", "grad_edge_term"]
    for name, x, y in zip(names, ours, theirs):
        torch.testing.assert_close(x.to(y.dtype), y, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


def symmetric_graph(num_nodes=40, num_edges=160, seed=3, device="cpu"):
    ei = random_edge_index(num_nodes, num_nodes, num_edges, seed=seed)
    ei = torch.cat([ei, ei.flip(0)], 1).to(device)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=num_nodes)
    assert g.is_symmetric
    return g


# ---- correctness against the reference --------------------------------------------------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("edge_term", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_reference_float64(graph_case, kind, edge_term, device):
    g, _ = graph_case
    g = g.to(device)
    inputs = make_inputs(kind, g, 2, 5, torch.float64, device, edge_term)
    assert_matches_reference(kind, g, inputs, atol=1e-10, rtol=1e-10)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("edge_term", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_symmetric_graph_fused_backward(kind, edge_term, device):
    g = symmetric_graph(device=device)
    inputs = make_inputs(kind, g, 3, 4, torch.float64, device, edge_term)
    assert_matches_reference(kind, g, inputs, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("heads", [1, 2, 4])
# The fast path (D = 16 to 256, powers of two; GATv2's backward keeps z's signs there) runs
# under compute-sanitizer too, at the widths of each of its lane layouts.
@pytest.mark.parametrize("dim", [1, 3, pytest.param(16, marks=pytest.mark.sanitize), 32,
                                 pytest.param(64, marks=pytest.mark.sanitize), 100, 128,
                                 pytest.param(256, marks=pytest.mark.sanitize)])
@pytest.mark.parametrize("kind", KINDS)
def test_head_dims_float32(kind, dim, heads, device):
    nodes = 24 if dim >= 100 else 40
    g, _ = random_graph(nodes, 4 * nodes, seed=dim + heads, device=device)
    inputs = make_inputs(kind, g, heads, dim, torch.float32, device, edge_term=(dim == 16))
    assert_matches_reference(kind, g, inputs, atol=2e-4, rtol=2e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="launch plans are CUDA-only")
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("dim", [64, 100, 128])
@pytest.mark.parametrize("plan", list(attention_ops.LAUNCH_PLANS))
@pytest.mark.parametrize("kind", KINDS)
def test_every_launch_plan(kind, plan, dim, symmetric, monkeypatch):
    """Every plan the tuner can pick, on rows long enough to span several 32-edge windows and
    to split over 8 warps: the fast (64, 128) and general (100) paths, both backward passes."""
    monkeypatch.setenv("FASTGNN_TUNE", "0")
    monkeypatch.setattr(attention_ops, "DEFAULT_PLAN", plan)
    if symmetric:
        g = symmetric_graph(300, 3000, seed=dim).to("cuda")
    else:
        g, _ = random_graph(300, 4000, seed=dim, device="cuda")
    assert int(g.in_degree.max()) > 8 * 32
    inputs = make_inputs(kind, g, 2, dim, torch.float32, "cuda", edge_term=(dim == 64))
    assert_matches_reference(kind, g, inputs, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dim", [32, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", KINDS)
def test_half_precision(kind, dtype, dim, device):
    g, _ = random_graph(40, 200, seed=4, device=device)
    # logits of the same order at both widths
    inputs = make_inputs(kind, g, 2, dim, dtype, device, spread=0.5 * (32 / dim) ** 0.5)
    ours = forward_and_grads(kind, g, inputs)
    ref_inputs = [None if t is None else t.detach().float().requires_grad_() for t in inputs]
    theirs = forward_and_grads(kind, g, ref_inputs, "reference")
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    for x, y in zip(ours, theirs):
        assert x.dtype == dtype
        if dim == 32:
            torch.testing.assert_close(x.float(), y, atol=tol, rtol=tol)
        else:  # GATv2's grad_dst sums terms that nearly cancel, so half-precision rounding
            # is large beside a few of its elements (the CPU kernel alike): whole tensors
            assert float((x.float() - y).norm() / y.norm()) < tol


@pytest.mark.parametrize("edge_term", [False, True])
@pytest.mark.parametrize("dim", [5, 16, 40])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_half_is_the_float32_kernel_on_the_same_values(kind, dtype, dim, edge_term):
    """The CPU forward and backward read half inputs as they are and compute in float32: against
    the float32 run on the same values rounded to the half dtype, the output and the Graph
    Transformer's value gradient (sums of the gradient rows) are one unit in the last place off
    at most, and every gradient within two units by norm (they subtract <grad_out, out>, whose
    half `out` is itself rounded)."""
    g, _ = random_graph(40, 200, seed=4)
    half = make_inputs(kind, g, 2, dim, dtype, edge_term=edge_term, spread=0.5)
    single = [None if t is None else t.detach().float().requires_grad_() for t in half]
    grad_out = torch.randn(g.num_dst_nodes, 2, dim, generator=torch.Generator().manual_seed(2))
    grad_out = grad_out.to(dtype)
    runs = []
    for inputs, dy in ((half, grad_out), (single, grad_out.float())):
        out = attend(kind, g, inputs)
        runs.append((out, *torch.autograd.grad(out, [t for t in inputs if t is not None], dy)))
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    names = ["out", "grad_dst", "grad_src", "grad_third", "grad_edge_term"]
    for name, ours, theirs in zip(names, runs[0], runs[1]):
        assert ours.dtype == dtype, name
        ours, rounded = ours.detach(), theirs.detach().to(dtype).float()
        if name == "out" or (kind == "transformer" and name == "grad_third"):
            torch.testing.assert_close(ours.float(), rounded, rtol=ulp, atol=1e-7,
                                       msg=lambda m: f"{name}: {m}")
        assert float((ours.float() - rounded).norm() / rounded.norm()) < 2 * ulp, name


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_int64_index_graph(kind, device):
    g32, _ = random_graph(30, 120, seed=5, device=device)
    g = fastgnn.Graph(g32.rowptr.long(), g32.col.long(), g32.num_src_nodes,
                      None if g32.edge_perm is None else g32.edge_perm)
    inputs = make_inputs(kind, g, 2, 8, torch.float64, device, edge_term=True)
    assert_matches_reference(kind, g, inputs, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_large_logits_do_not_overflow(kind, device):
    g, _ = random_graph(30, 150, seed=6, device=device)
    inputs = make_inputs(kind, g, 2, 16, torch.float32, device, spread=1.0)
    with torch.no_grad():  # logits of order 1e4
        inputs[2].mul_(1e4 if kind == "gatv2" else 1.0)
        inputs[0].mul_(1.0 if kind == "gatv2" else 1e3)
    ours = forward_and_grads(kind, g, inputs)
    assert all(torch.isfinite(t).all() for t in ours)
    theirs = forward_and_grads(kind, g, inputs, "reference")
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-3, rtol=1e-3)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_isolated_destinations_get_zeros(kind, device):
    g, _ = random_graph(30, 120, seed=7, device=device)
    isolated = (g.in_degree == 0).nonzero().flatten()
    assert isolated.numel() > 0
    inputs = make_inputs(kind, g, 2, 8, torch.float32, device)
    out = attend(kind, g, inputs)
    assert torch.equal(out[isolated], torch.zeros_like(out[isolated]))


# ---- gradcheck and opcheck --------------------------------------------------------------------
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck(kind, symmetric):
    g = symmetric_graph(12, 30) if symmetric else random_graph(12, 40, num_dst=9, seed=8)[0]
    inputs = make_inputs(kind, g, 2, 3, torch.float64, edge_term=True)
    fn = fastgnn.ops.gatv2_attention if kind == "gatv2" else fastgnn.ops.graph_attention
    with fastgnn.backend("native"):
        assert torch.autograd.gradcheck(lambda a, b, c, e: fn(g, a, b, c, edge_term=e), inputs)


def _op_args(kind, g, inputs, dropout=0.0, seed=0, seed_tensor=None):
    a, b, c, e = inputs
    coef = 0.2 if kind == "gatv2" else 0.5
    t_rowptr, t_col, t_perm = g.transpose()
    perm = None if g.edge_perm is None else g.edge_perm.to(g.index_dtype)
    structure = (g.rowptr, g.col, perm, t_rowptr, t_col, t_perm)
    return structure, (a, b, c, e, coef, dropout, seed, seed_tensor, 0, None, None, 4)


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="torch.library.opcheck needs torch 2.4")
@pytest.mark.parametrize("seed_tensor", [None, torch.tensor([11])], ids=["host-seed",
                                                                       "seed-tensor"])
@pytest.mark.parametrize("kind", KINDS)
def test_opcheck(kind, graph_case, seed_tensor):
    g, _ = graph_case
    name = "gatv2" if kind == "gatv2" else "graph_attention"
    forward = getattr(torch.ops.fastgnn, f"{name}_forward")
    backward = getattr(torch.ops.fastgnn, f"{name}_backward")
    inputs = make_inputs(kind, g, 2, 4, torch.float32, edge_term=True)
    structure, rest = _op_args(kind, g, inputs, dropout=0.25, seed=11, seed_tensor=seed_tensor)
    torch.library.opcheck(forward, structure + rest)
    out, lse = forward(*structure, *rest)
    grad_out = torch.randn_like(out)
    detached = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in rest)
    torch.library.opcheck(backward, (grad_out, out.detach(), lse.detach()) + structure + detached)
    torch.library.opcheck(torch.ops.fastgnn.attention_dropout_mask, (g.col, 2, 0.3, 5, 0))


def test_saves_no_edge_sized_float_tensors():
    g, _ = random_graph(60, 400, seed=9)
    heads = 2
    saved = []
    inputs = make_inputs("gatv2", g, heads, 8)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        attend("gatv2", g, inputs)
    edge_sized = [t for t in saved if t.is_floating_point() and t.dim() and t.shape[0] == g.num_edges]
    assert not edge_sized, [tuple(t.shape) for t in edge_sized]


# ---- dropout ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_dropout_matches_reference_with_same_mask(kind, device):
    g, _ = random_graph(50, 300, seed=10, device=device)
    inputs = make_inputs(kind, g, 2, 8, torch.float64, device, edge_term=True)
    p = 0.4
    torch.manual_seed(1234)
    ours = forward_and_grads(kind, g, inputs, dropout=p)
    torch.manual_seed(1234)
    seed, _, offset = attention_ops._draw_seed(p, torch.device(device))
    mask = attention_ops.dropout_mask(g, 2, p, seed, offset)
    theirs = forward_and_grads(kind, g, inputs, "reference", dropout=p, dropout_mask=mask)
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
def test_dropout_same_seed_same_result(device):
    g, _ = random_graph(50, 300, seed=11, device=device)
    inputs = make_inputs("gatv2", g, 2, 8, torch.float32, device)
    torch.manual_seed(7)
    first = forward_and_grads("gatv2", g, inputs, dropout=0.5)
    torch.manual_seed(7)
    second = forward_and_grads("gatv2", g, inputs, dropout=0.5)
    third = forward_and_grads("gatv2", g, inputs, dropout=0.5)
    for x, y in zip(first, second):
        assert torch.equal(x, y)
    assert not torch.equal(first[0], third[0])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_are_bitwise_reproducible(kind, symmetric, device):
    """The backward uses no atomics: two runs give identical bits, also with rows long enough
    to split over several warps, on both source-pass traversals and the two-heads-a-warp path."""
    if symmetric:
        g = symmetric_graph(300, 3000, seed=21).to(device)
    else:
        g, _ = random_graph(300, 4000, seed=21, device=device)
    inputs = make_inputs(kind, g, 2, 64, torch.float32, device)
    first = forward_and_grads(kind, g, inputs)
    second = forward_and_grads(kind, g, inputs)
    for x, y in zip(first, second):
        assert torch.equal(x, y)


def test_dropout_mask_kept_fraction_and_zero_dropout():
    g, _ = random_graph(200, 4000, seed=12)
    for p in (0.1, 0.5, 0.8):
        mask = attention_ops.dropout_mask(g, 4, p, seed=99, offset=0)
        assert mask.shape == (g.num_edges, 4)
        assert abs(mask.mean().item() - (1 - p)) < 0.03
    assert attention_ops.dropout_mask(g, 4, 0.0, seed=99).all()
    a = attention_ops.dropout_mask(g, 4, 0.5, seed=1)
    b = attention_ops.dropout_mask(g, 4, 0.5, seed=2)
    assert not torch.equal(a, b)


# ---- inputs and real data ---------------------------------------------------------------------
def test_bad_inputs_raise():
    g, _ = random_graph(20, 60, seed=13)
    a, b, c, _ = make_inputs("gatv2", g, 2, 4)
    with pytest.raises(ValueError, match="att"):
        fastgnn.ops.gatv2_attention(g, a, b, c[:1])
    with pytest.raises(ValueError, match="dropout"):
        fastgnn.ops.gatv2_attention(g, a, b, c, dropout=1.0)
    with pytest.raises(ValueError, match="edge_term"):
        fastgnn.ops.graph_attention(g, a, b, b, edge_term=torch.zeros(3, 2, 4))


def test_mixed_feature_dtypes_raise_type_error():
    g, _ = random_graph(20, 60, seed=13)
    a, b, c, _ = make_inputs("gatv2", g, 2, 4)
    with pytest.raises(TypeError, match="x_dst has dtype torch.float64"):
        fastgnn.ops.gatv2_attention(g, a.double(), b, c)
    with pytest.raises(TypeError, match="att has dtype torch.float16"):
        fastgnn.ops.gatv2_attention(g, a, b, c.half())
    with pytest.raises(TypeError, match="edge_term"):
        fastgnn.ops.gatv2_attention(g, a, b, c, edge_term=torch.zeros(g.num_edges, 2, 4,
                                                                     dtype=torch.float64))
    with pytest.raises(TypeError, match="q has dtype torch.float64"):
        fastgnn.ops.graph_attention(g, a.double(), b, b)
    with pytest.raises(TypeError, match="v has dtype torch.bfloat16"):
        fastgnn.ops.graph_attention(g, a, b, b.bfloat16())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_graphs_without_edges(kind, device):
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    for g in (fastgnn.Graph.from_edge_index(empty, num_nodes=5),
              fastgnn.Graph.from_edge_index(empty, num_src_nodes=4, num_dst_nodes=0)):
        inputs = make_inputs(kind, g, 2, 4, torch.float64, device, edge_term=True)
        ours = forward_and_grads(kind, g, inputs)
        assert torch.equal(ours[0], torch.zeros_like(ours[0]))
        assert all(torch.equal(t, torch.zeros_like(t)) for t in ours[1:])


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_tolokers(kind, device):
    data = load_dataset("tolokers")
    g = fastgnn.Graph.from_edge_index(data.edge_index.to(device), num_nodes=data.num_nodes)
    inputs = make_inputs(kind, g, 2, 8, torch.float32, device)
    assert_matches_reference(kind, g, inputs, atol=1e-4, rtol=1e-4)
