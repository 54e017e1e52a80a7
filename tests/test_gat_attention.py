"""Fused GAT (v1) attention: forward and every gradient against the reference."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops import attention as attention_ops
from conftest import devices, load_dataset, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("gat_forward"),
                                reason="native GAT attention op not built")


def make_inputs(g, heads, dim, dtype=torch.float32, device="cpu", alpha_edge=False, seed=0,
                spread=1.0):
    """[x_src, alpha_src, alpha_dst, alpha_edge or None], leaves that require grad."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        t = torch.randn(*shape, generator=gen, dtype=torch.float64) * spread
        return t.to(device=device, dtype=dtype).requires_grad_()

    x_src = rand(g.num_src_nodes, heads, dim)
    alpha_src = rand(g.num_src_nodes, heads)
    alpha_dst = rand(g.num_dst_nodes, heads)
    return [x_src, alpha_src, alpha_dst, rand(g.num_edges, heads) if alpha_edge else None]


def attend(g, inputs, impl=None, dropout=0.0, dropout_mask=None, negative_slope=0.2):
    x_src, alpha_src, alpha_dst, alpha_edge = inputs
    if impl == "reference":
        return reference.gat_attention(g, x_src, alpha_src, alpha_dst, negative_slope, dropout,
                                       alpha_edge=alpha_edge, dropout_mask=dropout_mask)
    with fastgnn.backend("native"):
        return fastgnn.ops.gat_attention(g, x_src, alpha_src, alpha_dst, negative_slope, dropout,
                                         alpha_edge=alpha_edge)


def forward_and_grads(g, inputs, impl=None, seed=3, **kw):
    out = attend(g, inputs, impl, **kw)
    gen = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out)
    wrt = [t for t in inputs if t is not None]
    return [out] + list(torch.autograd.grad(out, wrt, grad_out))


def assert_matches_reference(g, inputs, atol, rtol, **kw):
    ours = forward_and_grads(g, inputs, **kw)
    mask = kw.pop("dropout_mask", None)
    theirs = forward_and_grads(g, inputs, "reference", dropout_mask=mask, **kw)
    names = ["out", "grad_x_src", "grad_alpha_src", "grad_alpha_dst", "grad_alpha_edge"]
    for name, x, y in zip(names, ours, theirs):
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


def symmetric_graph(num_nodes=40, num_edges=160, seed=3, device="cpu"):
    from conftest import random_edge_index
    ei = random_edge_index(num_nodes, num_nodes, num_edges, seed=seed)
    ei = torch.cat([ei, ei.flip(0)], 1).to(device)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=num_nodes)
    assert g.is_symmetric
    return g


# ---- correctness against the reference --------------------------------------------------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("alpha_edge", [False, True])
def test_matches_reference_float64(graph_case, alpha_edge, device):
    g, _ = graph_case
    g = g.to(device)
    inputs = make_inputs(g, 2, 5, torch.float64, device, alpha_edge)
    assert_matches_reference(g, inputs, atol=1e-10, rtol=1e-10)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("alpha_edge", [False, True])
def test_symmetric_graph_fused_backward(alpha_edge, device):
    g = symmetric_graph(device=device)
    inputs = make_inputs(g, 3, 4, torch.float64, device, alpha_edge)
    assert_matches_reference(g, inputs, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("slope", [0.0, 0.2, 1.0])
def test_negative_slopes(slope, device):
    g, _ = random_graph(40, 200, seed=21, device=device)
    inputs = make_inputs(g, 2, 6, torch.float64, device, alpha_edge=True)
    assert_matches_reference(g, inputs, atol=1e-10, rtol=1e-10, negative_slope=slope)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("heads", [1, 3, 8])
@pytest.mark.parametrize("dim", [1, 3, 8, 16, 32, 64, 100, 128, 256, 300])
def test_head_dims_float32(dim, heads, device):
    nodes = 24 if dim >= 100 else 40
    g, _ = random_graph(nodes, 4 * nodes, seed=dim + heads, device=device)
    inputs = make_inputs(g, heads, dim, torch.float32, device, alpha_edge=(dim == 16))
    assert_matches_reference(g, inputs, atol=2e-4, rtol=2e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="launch plans are CUDA-only")
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("dim", [8, 64, 100])
@pytest.mark.parametrize("plan", list(attention_ops.launch_plans("gat_attention")))
def test_every_launch_plan(plan, dim, symmetric, monkeypatch):
    """Every plan the tuner can pick, on rows long enough to split over 8 warps (and, under the
    split plans, over 4 or 8 blocks)."""
    monkeypatch.setenv("FASTGNN_TUNE", "0")
    monkeypatch.setattr(attention_ops, "DEFAULT_PLAN", plan)
    if symmetric:
        g = symmetric_graph(300, 3000, seed=dim).to("cuda")
    else:
        g, _ = random_graph(300, 4000, seed=dim, device="cuda")
    assert int(g.in_degree.max()) > 8 * 32
    inputs = make_inputs(g, 4, dim, torch.float32, "cuda", alpha_edge=(dim == 64))
    assert_matches_reference(g, inputs, atol=2e-4, rtol=2e-4)


def hub_graph(hub_degree: int, num_nodes: int = 400, seed: int = 5) -> fastgnn.Graph:
    """A symmetric graph whose node 0 links to hub_degree others (duplicates included), plus
    sparse random edges: its heavy rows range from the hub down to barely above the 1% quantile,
    so split rows have empty pieces."""
    gen = torch.Generator().manual_seed(seed)
    spokes = torch.randint(1, num_nodes, (hub_degree,), generator=gen)
    ei = torch.stack([torch.zeros_like(spokes), spokes])
    rest = torch.randint(0, num_nodes, (2, 3 * num_nodes), generator=gen)
    ei = torch.cat([ei, rest], 1)
    ei = torch.cat([ei, ei.flip(0)], 1)
    return fastgnn.Graph.from_edge_index(ei, num_nodes=num_nodes)


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.skipif(not torch.cuda.is_available(), reason="launch plans are CUDA-only")
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("plan", list(attention_ops.SPLIT_PLANS))
@pytest.mark.parametrize("dtype,dim", [(torch.float64, 3), (torch.float32, 300),
                                       (torch.bfloat16, 64)])
def test_split_rows(dtype, dim, plan, symmetric, monkeypatch):
    """Rows split over several blocks (a 5,000-edge hub, heavy rows with empty pieces, D > 256
    in chunks, half precision) match the reference, and repeated runs are bitwise equal."""
    monkeypatch.setenv("FASTGNN_TUNE", "0")
    monkeypatch.setattr(attention_ops, "DEFAULT_PLAN", plan)
    g = hub_graph(5000)
    if not symmetric:  # the backward then walks the transposed CSR, unsplit
        ei = g.edge_index()
        g = fastgnn.Graph.from_edge_index(ei[:, ei[0] != ei[1] + 1], num_nodes=g.num_dst_nodes)
    g = g.to("cuda")
    assert g.is_symmetric == symmetric
    _, _, heavy = g.degree_buckets(0.99, by_degree=True)
    assert heavy.numel() > 1 and int(g.in_degree[heavy].min()) < 64  # some pieces are empty
    inputs = make_inputs(g, 3, dim, dtype, "cuda", alpha_edge=True)
    first = forward_and_grads(g, inputs)
    again = forward_and_grads(g, inputs)
    for x, y in zip(first, again):
        assert torch.equal(x, y)
    ref_inputs = [t.detach().double().requires_grad_() for t in inputs]
    theirs = forward_and_grads(g, ref_inputs, "reference")
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 3e-2}[dtype]
    for x, y in zip(first, theirs):
        # alpha gradients sum terms that nearly cancel: compare whole tensors
        assert float((x.detach().double() - y).norm() / y.norm()) < tol


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("heads,dim", [(2, 8), (4, 16), (2, 20), (2, 32), (4, 64), (2, 128)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype, heads, dim, device):
    """Half rows at several packed-row shapes (1 to 8 lanes a head), a partial last lane
    (D = 20) among them."""
    g, _ = random_graph(40, 200, seed=4, device=device)
    inputs = make_inputs(g, heads, dim, dtype, device, alpha_edge=True)
    ours = forward_and_grads(g, inputs)
    ref_inputs = [t.detach().float().requires_grad_() for t in inputs]
    theirs = forward_and_grads(g, ref_inputs, "reference")
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    for x, y in zip(ours, theirs):
        assert x.dtype == dtype
        # alpha gradients sum terms that nearly cancel: compare whole tensors
        assert float((x.detach().float() - y).norm() / y.norm()) < tol


@pytest.mark.parametrize("dim", [5, 16, 40])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_is_float32_rounded_once(dtype, dim):
    """The CPU kernels read half inputs as they are and accumulate in float32: the output and
    x_src's gradient are the float32 run's on the same values, rounded once to the half dtype
    (one unit in the last place at most: the two runs are separate compiled instances). The
    alpha gradients subtract <grad_out, out>, whose half `out` is itself rounded: the tolerance
    test above covers them."""
    g, _ = random_graph(40, 200, seed=4)
    half = make_inputs(g, 2, dim, dtype, alpha_edge=True)
    single = [t.detach().float().requires_grad_() for t in half]
    grad_out = torch.randn(g.num_dst_nodes, 2, dim, generator=torch.Generator().manual_seed(2))
    grad_out = grad_out.to(dtype)
    runs = []
    for inputs, dy in ((half, grad_out), (single, grad_out.float())):
        out = attend(g, inputs)
        runs.append((out, *torch.autograd.grad(out, inputs[0], dy)))
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    for name, ours, theirs in zip(["out", "grad_x_src"], runs[0], runs[1]):
        assert ours.dtype == dtype, name
        torch.testing.assert_close(ours.detach().float(), theirs.detach().to(dtype).float(),
                                   rtol=ulp, atol=1e-7,
                                   msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dim", [1, 7, 8, 33])
@pytest.mark.parametrize("grad_dtype,out_dtype", [
    (torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float32), (torch.float32, torch.bfloat16),
    (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_cpu_attention_delta_reads_any_feature_dtype(grad_dtype, out_dtype, dim):
    """<grad_out, out> per (row, head), as every CPU attention backward takes it: half inputs read
    as they are, summed in double, rounded once to the statistics dtype."""
    gen = torch.Generator().manual_seed(dim)
    grad_out = torch.randn(50, 3, dim, generator=gen).to(grad_dtype)
    out = torch.randn(50, 3, dim, generator=gen).to(out_dtype)
    stats = torch.float64 if out_dtype == torch.float64 else torch.float32
    delta = torch.ops.fastgnn.attention_delta_backward(grad_out, out)
    assert delta.dtype == stats
    exact = (grad_out.double() * out.double()).sum(-1).to(stats)
    torch.testing.assert_close(delta, exact, rtol=1e-13, atol=1e-13)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
def test_int64_index_graph(device):
    g32, _ = random_graph(30, 120, seed=5, device=device)
    g = fastgnn.Graph(g32.rowptr.long(), g32.col.long(), g32.num_src_nodes,
                      None if g32.edge_perm is None else g32.edge_perm)
    inputs = make_inputs(g, 2, 8, torch.float64, device, alpha_edge=True)
    assert_matches_reference(g, inputs, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
def test_large_logits_do_not_overflow(device):
    g, _ = random_graph(30, 150, seed=6, device=device)
    inputs = make_inputs(g, 2, 16, torch.float32, device)
    with torch.no_grad():  # logits of order 1e4
        inputs[1].mul_(1e4)
    ours = forward_and_grads(g, inputs)
    assert all(torch.isfinite(t).all() for t in ours)
    theirs = forward_and_grads(g, inputs, "reference")
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-3, rtol=1e-3)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
def test_isolated_destinations_get_zeros(device):
    g, _ = random_graph(30, 120, seed=7, device=device)
    isolated = (g.in_degree == 0).nonzero().flatten()
    assert isolated.numel() > 0
    out = attend(g, make_inputs(g, 2, 8, torch.float32, device))
    assert torch.equal(out[isolated], torch.zeros_like(out[isolated]))


@pytest.mark.parametrize("device", devices())
def test_graphs_without_edges(device):
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    for g in (fastgnn.Graph.from_edge_index(empty, num_nodes=5),
              fastgnn.Graph.from_edge_index(empty, num_src_nodes=4, num_dst_nodes=0)):
        ours = forward_and_grads(g, make_inputs(g, 2, 4, torch.float64, device, alpha_edge=True))
        assert all(torch.equal(t, torch.zeros_like(t)) for t in ours)


# ---- gradcheck and opcheck --------------------------------------------------------------------
@pytest.mark.parametrize("symmetric", [False, True])
def test_gradcheck(symmetric):
    g = symmetric_graph(12, 30) if symmetric else random_graph(12, 40, num_dst=9, seed=8)[0]
    inputs = make_inputs(g, 2, 3, torch.float64, alpha_edge=True)
    with fastgnn.backend("native"):
        assert torch.autograd.gradcheck(
            lambda x, s, d, e: fastgnn.ops.gat_attention(g, x, s, d, alpha_edge=e), inputs)


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"),
                    reason="torch.library.opcheck needs torch 2.4")
@pytest.mark.parametrize("seed_tensor", [None, torch.tensor([11])], ids=["host-seed",
                                                                       "seed-tensor"])
def test_opcheck(graph_case, seed_tensor):
    g, _ = graph_case
    x_src, alpha_src, alpha_dst, alpha_edge = make_inputs(g, 2, 4, alpha_edge=True)
    t_rowptr, t_col, t_perm = g.transpose()
    perm = None if g.edge_perm is None else g.edge_perm.to(g.index_dtype)
    structure = (g.rowptr, g.col, perm, t_rowptr, t_col, t_perm)
    rest = (alpha_dst, x_src, alpha_src, alpha_edge, 0.2, 0.25, 11, seed_tensor, 0, None, None,
            4)
    torch.library.opcheck(torch.ops.fastgnn.gat_forward, structure + rest)
    out, lse = torch.ops.fastgnn.gat_forward(*structure, *rest)
    detached = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in rest)
    torch.library.opcheck(torch.ops.fastgnn.gat_backward,
                          (torch.randn_like(out), out.detach(), lse.detach()) + structure
                          + detached)


def test_saves_no_edge_sized_float_tensors():
    g, _ = random_graph(60, 400, seed=9)
    saved = []
    inputs = make_inputs(g, 2, 8, alpha_edge=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        attend(g, inputs)
    edge_sized = [t for t in saved if t.is_floating_point() and t.dim()
                  and t.shape[0] == g.num_edges and t is not inputs[3]]
    assert not edge_sized, [tuple(t.shape) for t in edge_sized]


# ---- dropout ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", devices())
def test_dropout_matches_reference_with_same_mask(device):
    g, _ = random_graph(50, 300, seed=10, device=device)
    inputs = make_inputs(g, 2, 8, torch.float64, device, alpha_edge=True)
    p = 0.4
    torch.manual_seed(1234)
    ours = forward_and_grads(g, inputs, dropout=p)
    torch.manual_seed(1234)
    seed, _, offset = attention_ops._draw_seed(p, torch.device(device))
    mask = attention_ops.dropout_mask(g, 2, p, seed, offset)
    assert 0 < float(mask.mean()) < 1
    theirs = forward_and_grads(g, inputs, "reference", dropout=p, dropout_mask=mask)
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
def test_dropout_same_seed_same_result(device):
    g, _ = random_graph(50, 300, seed=11, device=device)
    inputs = make_inputs(g, 2, 8, torch.float32, device)
    torch.manual_seed(7)
    first = forward_and_grads(g, inputs, dropout=0.5)
    torch.manual_seed(7)
    second = forward_and_grads(g, inputs, dropout=0.5)
    third = forward_and_grads(g, inputs, dropout=0.5)
    for x, y in zip(first, second):
        assert torch.equal(x, y)
    assert not torch.equal(first[0], third[0])


# ---- inputs and real data ---------------------------------------------------------------------
def test_bad_inputs_raise():
    g, _ = random_graph(20, 60, seed=13)
    x_src, alpha_src, alpha_dst, _ = make_inputs(g, 2, 4)
    op = fastgnn.ops.gat_attention
    with pytest.raises(ValueError, match="alpha_src"):
        op(g, x_src, alpha_src[:, :1], alpha_dst)
    with pytest.raises(ValueError, match="alpha_dst"):
        op(g, x_src, alpha_src, alpha_dst[:3])
    with pytest.raises(ValueError, match="x_src"):
        op(g, x_src[:, 0], alpha_src, alpha_dst)
    with pytest.raises(ValueError, match="alpha_edge"):
        op(g, x_src, alpha_src, alpha_dst, alpha_edge=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="dropout"):
        op(g, x_src, alpha_src, alpha_dst, dropout=1.0)
    with pytest.raises(TypeError, match="alpha_dst"):
        op(g, x_src, alpha_src, alpha_dst.double())
    with pytest.raises(TypeError, match="alpha_src"):
        op(g, x_src, alpha_src.long(), alpha_dst)
    with pytest.raises(TypeError, match="negative_slope"):
        op(g, x_src, alpha_src, alpha_dst, negative_slope="0.2")
    with pytest.raises(TypeError, match="fastgnn.Graph"):
        op(g.rowptr, x_src, alpha_src, alpha_dst)


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("device", devices())
def test_tolokers(device):
    data = load_dataset("tolokers")
    g = fastgnn.Graph.from_edge_index(data.edge_index.to(device), num_nodes=data.num_nodes)
    inputs = make_inputs(g, 4, 8, torch.float32, device, alpha_edge=True)
    assert_matches_reference(g, inputs, atol=1e-4, rtol=1e-4)
