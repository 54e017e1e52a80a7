"""GAT's projection, scores and attention as one autograd node (fastgnn._gat_layer): the output
and every gradient against the separate stock-form computation on the reference op, over one
and many source ranges; grad_x written over the projection; second backwards; fallbacks; and
the two-step backward ops against the whole backward op."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import fastgnn
from fastgnn import _gat_layer, _native, reference
from fastgnn._gat_layer import gat_layer
from fastgnn.ops import attention as attention_ops
from conftest import devices, random_edge_index, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("gat_source_backward"),
                                reason="native GAT attention ops not built")


def symmetric_graph(num_nodes, num_edges, seed, device="cpu"):
    ei = random_edge_index(num_nodes, num_nodes, num_edges, seed=seed)
    ei = torch.cat([ei, ei.flip(0)], 1).to(device)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=num_nodes)
    assert g.is_symmetric
    return g


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    """The node asked for (FASTGNN_GAT_LOW_MEMORY=1), with ranges of 1000 bytes unless a test
    sets its own: it applies only to projections above one range, and these graphs are small."""
    monkeypatch.setattr(_gat_layer, "LOW_MEMORY", "1")
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 1000)


GRAPHS = {
    "directed": lambda device: random_graph(60, 400, seed=1, device=device)[0],
    "symmetric": lambda device: symmetric_graph(60, 300, seed=2, device=device),
    "bipartite": lambda device: random_graph(50, 400, num_dst=30, seed=3, device=device)[0],
}


class Layer(torch.nn.Module):
    """A GAT layer's parameters: projection, source and destination attention vectors."""

    def __init__(self, in_width, heads, channels, dtype):
        super().__init__()
        gen = torch.Generator().manual_seed(in_width + heads)
        self.lin = torch.nn.Linear(in_width, heads * channels, bias=False, dtype=dtype)
        for name in ("att_src", "att_dst"):
            self.register_parameter(name, torch.nn.Parameter(
                torch.randn(1, heads, channels, generator=gen, dtype=dtype)))
        self.heads = heads


def separate(layer, g, x, alpha_dst, slope, dropout_mask, alpha_edge):
    """The stock form: projection, elementwise scores, the reference attention."""
    h = layer.lin(x).view(x.shape[0], layer.heads, -1)
    alpha_src = (h * layer.att_src).sum(-1)
    if alpha_dst is None:
        alpha_dst = (h * layer.att_dst).sum(-1)[:g.num_dst_nodes]
    return reference.gat_attention(g, h, alpha_src, alpha_dst, slope, 0.0 if dropout_mask is
                                   None else 0.5, alpha_edge=alpha_edge,
                                   dropout_mask=dropout_mask)


def fused(layer, g, x, alpha_dst, slope, dropout, alpha_edge):
    atts = (layer.att_src, layer.att_dst) if alpha_dst is None else (layer.att_src,)
    out = gat_layer(g, x, layer.lin, layer.heads, atts, alpha_dst, slope, dropout, alpha_edge)
    assert out is not None, "the one-node path did not apply"
    return out


def run(fn, layer, g, x, alpha_dst, alpha_edge, grad_seed=5, **kw):
    """The output and the gradients of every input and parameter that requires one."""
    out = fn(layer, g, x, alpha_dst, alpha_edge=alpha_edge, **kw)
    gen = torch.Generator().manual_seed(grad_seed)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out)
    wrt = [t for t in (x, alpha_dst, alpha_edge, *layer.parameters())
           if t is not None and t.requires_grad]
    return [out] + list(torch.autograd.grad(out, wrt, grad_out, allow_unused=True))


def make_case(kind, device, in_width, heads, channels, dtype=torch.float64, pair=False,
              edge=False, x_grad=True):
    g = GRAPHS[kind](device)
    gen = torch.Generator().manual_seed(7)
    layer = Layer(in_width, heads, channels, dtype).to(device)
    x = torch.randn(g.num_src_nodes, in_width, generator=gen, dtype=dtype).to(device)
    x.requires_grad_(x_grad)
    alpha_dst = torch.randn(g.num_dst_nodes, heads, generator=gen, dtype=dtype).to(device) \
        .requires_grad_() if pair else None
    alpha_edge = torch.randn(g.num_edges, heads, generator=gen, dtype=dtype).to(device) \
        .requires_grad_() if edge else None
    return layer, g, x, alpha_dst, alpha_edge


def assert_same(ours, theirs, atol, rtol):
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a is None or b is None:  # an input neither computation used (att_dst of a pair)
            assert a is None and b is None, i
            continue
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol, msg=lambda m: f"result {i}: {m}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", list(GRAPHS))
@pytest.mark.parametrize("pair", [False, True], ids=["one-projection", "pair"])
@pytest.mark.parametrize("edge", [False, True], ids=["", "alpha_edge"])
@pytest.mark.parametrize("range_bytes", [2900, 700], ids=["two-ranges", "many-ranges"])
def test_matches_separate_nodes(kind, pair, edge, range_bytes, device, monkeypatch):
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", range_bytes)
    case = make_case(kind, device, 12, 3, 4, pair=pair, edge=edge)  # F = H C: grad_x over h
    ours = run(fused, *case, slope=0.2, dropout=0.0)
    theirs = run(separate, *case, slope=0.2, dropout_mask=None)
    assert_same(ours, theirs, 1e-10, 1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", list(GRAPHS))
def test_logits_that_fit_one_range_take_one_buffer(kind, device, monkeypatch):
    """Logit gradients below the range size (here 11.8-19.6 kB) stay one [E, H] buffer with
    one destination pass, while the projection (24-29 kB) still goes in ranges."""
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 21000)

    def no_groups(*args):
        raise AssertionError("logit groups built for logits that fit one range")
    monkeypatch.setattr(_gat_layer, "_logit_groups", no_groups)
    case = make_case(kind, device, 60, 3, 20)
    assert_same(run(fused, *case, slope=0.2, dropout=0.0),
                run(separate, *case, slope=0.2, dropout_mask=None), 1e-10, 1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("in_width,x_grad", [(12, True), (7, True), (20, True), (12, False)],
                         ids=["F=HC", "F<HC", "F>HC", "no-x-grad"])
def test_input_widths(in_width, x_grad, device, monkeypatch):
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 1000)
    case = make_case("symmetric", device, in_width, 3, 4, x_grad=x_grad)
    assert_same(run(fused, *case, slope=0.2, dropout=0.0),
                run(separate, *case, slope=0.2, dropout_mask=None), 1e-10, 1e-10)


def test_strided_input(monkeypatch):
    """A transposed view as x (F != H C, so grad_x is a buffer of its own)."""
    layer, g, x, _, _ = make_case("symmetric", "cpu", 7, 3, 4)
    strided = x.detach().t().contiguous().t().requires_grad_()
    assert not strided.is_contiguous()
    assert_same(run(fused, layer, g, strided, None, None, slope=0.2, dropout=0.0),
                run(separate, layer, g, strided, None, None, slope=0.2, dropout_mask=None),
                1e-10, 1e-10)


@pytest.mark.parametrize("device", devices())
def test_float32_head_dims(device, monkeypatch):
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 230)
    for heads, channels in [(1, 1), (2, 16), (4, 64), (8, 32), (2, 100)]:
        case = make_case("symmetric", device, heads * channels, heads, channels, torch.float32)
        assert_same(run(fused, *case, slope=0.2, dropout=0.0),
                    run(separate, *case, slope=0.2, dropout_mask=None), 2e-4, 2e-4)


@pytest.mark.parametrize("device", devices())
def test_second_backward_through_a_retained_graph(device):
    """The first backward writes grad_x over the projection; a second one recomputes it."""
    layer, g, x, _, _ = make_case("symmetric", device, 12, 3, 4)
    out = fused(layer, g, x, None, 0.2, 0.0, None)
    grad_out = torch.randn_like(out)
    first = torch.autograd.grad(out, [x, layer.lin.weight], grad_out, retain_graph=True)
    second = torch.autograd.grad(out, [x, layer.lin.weight], grad_out)
    assert_same(second, first, 1e-12, 1e-12)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("edge", [False, True], ids=["logit-groups", "alpha_edge"])
def test_dropout_matches_reference_with_same_mask(device, edge, monkeypatch):
    seed = 4321
    monkeypatch.setattr(attention_ops, "draw_seed_tensor",
                        lambda dev: torch.tensor([seed], device=dev))
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 700)
    case = make_case("directed", device, 12, 3, 4, edge=edge)
    g = case[1]
    mask = attention_ops.dropout_mask(g, 3, 0.5, seed, 0)
    assert 0 < float(mask.mean()) < 1
    assert_same(run(fused, *case, slope=0.2, dropout=0.5),
                run(separate, *case, slope=0.2, dropout_mask=mask), 1e-10, 1e-10)


@pytest.mark.parametrize("kind", ["directed", "symmetric"])
@pytest.mark.parametrize("edge", [False, True], ids=["logit-groups", "alpha_edge"])
def test_gradcheck(kind, edge, monkeypatch):
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 200)
    g = random_graph(10, 30, seed=4)[0] if kind == "directed" else symmetric_graph(10, 20, 4)
    layer = Layer(6, 2, 3, torch.float64)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(10, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    scores = torch.randn(g.num_edges, 2, generator=gen, dtype=torch.float64,
                         requires_grad=True)

    def fn(x, weight, att_src, att_dst, *alpha_edge):
        atts = torch.stack([att_src.view(2, 3), att_dst.view(2, 3)], dim=-1)
        return _gat_layer._gat_layer(g, x, weight, atts, None, 0.2, 0.0,
                                     alpha_edge[0] if alpha_edge else None)
    assert torch.autograd.gradcheck(fn, (x, layer.lin.weight, layer.att_src, layer.att_dst,
                                         *([scores] if edge else [])))


def test_low_memory_setting_is_read_from_the_environment_at_import():
    code = "import fastgnn._gat_layer as m; print(m.LOW_MEMORY)"
    env = {**os.environ, "FASTGNN_GAT_LOW_MEMORY": "1"}
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert shown == "1"


def test_range_size_is_read_from_the_environment(monkeypatch):
    code = "import fastgnn._gat_layer as m; print(m.range_bytes())"
    env = {**os.environ, "FASTGNN_GAT_RANGE_MB": "8"}
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert shown == str(8 * 2**20)
    layer, g, x, _, _ = make_case("directed", "cpu", 12, 3, 4, dtype=torch.float32)
    for bad in ("0", "8.5", "-1", "lots"):
        monkeypatch.setattr(_gat_layer, "RANGE_MB", bad)
        with pytest.raises(ValueError, match="FASTGNN_GAT_RANGE_MB"):
            gat_layer(g, x, layer.lin, 3, (layer.att_src, layer.att_dst), None, 0.2, 0.0)


def test_other_projections_and_settings_return_none(monkeypatch):
    layer, g, x, _, _ = make_case("directed", "cpu", 12, 3, 4, dtype=torch.float32)
    atts = (layer.att_src, layer.att_dst)
    with monkeypatch.context() as patch:  # a projection that fits one range
        patch.setattr(_gat_layer, "RANGE_BYTES", x.shape[0] * 12 * 4)
        assert gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0) is None
    with monkeypatch.context() as patch:  # turned off; on by default on the CPU only
        patch.setattr(_gat_layer, "LOW_MEMORY", "0")
        assert gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0) is None
        patch.setattr(_gat_layer, "LOW_MEMORY", None)
        assert gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0) is not None
        assert _gat_layer.low_memory_requested(torch.device("cpu"))
        assert not _gat_layer.low_memory_requested(torch.device("cuda"))
        patch.setattr(_gat_layer, "LOW_MEMORY", "yes")
        with pytest.raises(ValueError, match="FASTGNN_GAT_LOW_MEMORY"):
            gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0)
    biased = torch.nn.Linear(12, 12)
    assert gat_layer(g, x, biased, 3, atts, None, 0.2, 0.0) is None
    with fastgnn.backend("reference"):
        assert gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0) is None
    assert gat_layer(g, x.double(), layer.lin, 3, atts, None, 0.2, 0.0) is None
    edge = torch.zeros(g.num_edges, 3, dtype=torch.float64)
    assert gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 0.0, edge) is None


def test_bad_inputs_raise(monkeypatch):
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 100)
    layer, g, x, _, _ = make_case("directed", "cpu", 12, 3, 4)
    atts = (layer.att_src, layer.att_dst)
    with pytest.raises(ValueError, match="x must have one row per source"):
        gat_layer(g, x[:-1], layer.lin, 3, atts, None, 0.2, 0.0)
    with pytest.raises(ValueError, match="dropout"):
        gat_layer(g, x, layer.lin, 3, atts, None, 0.2, 1.0)
    block = fastgnn.Graph.from_edge_index(torch.tensor([[0, 1], [2, 3]]), num_src_nodes=2,
                                          num_dst_nodes=4)
    with pytest.raises(ValueError, match="first sources"):
        gat_layer(block, x[:2], layer.lin, 3, atts, None, 0.2, 0.0)


# ---- the two-step backward ops ----------------------------------------------------------------
def whole_and_steps(g, heads, dim, edge, ranges):
    """gat_backward's gradients, and the same from gat_source_backward over `ranges` source
    ranges plus gat_destination_backward."""
    gen = torch.Generator().manual_seed(9)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    x, alpha_src, alpha_dst = rand(g.num_src_nodes, heads, dim), rand(g.num_src_nodes, heads), \
        rand(g.num_dst_nodes, heads)
    alpha_edge = rand(g.num_edges, heads) if edge else None
    graph = attention_ops.structure_args(g, True)
    rowptr, col, perm, t_rowptr, t_col, t_perm = graph
    launch = (0.2, 0.0, 0, None, 0, None, None, 1)
    out, lse = torch.ops.fastgnn.gat_forward(*graph, alpha_dst, x, alpha_src, alpha_edge,
                                             *launch[:5], None, None, 1)
    grad_out = rand(*out.shape)
    whole = torch.ops.fastgnn.gat_backward(grad_out, out, lse, *graph, alpha_dst, x, alpha_src,
                                           alpha_edge, *launch)
    delta = (grad_out * out).sum(-1)
    walked = (rowptr, col) if t_rowptr is None else (t_rowptr, t_col)
    grad_logit = torch.empty(g.num_edges, heads, dtype=torch.float64)
    grad_x, grad_src = torch.empty_like(x), torch.empty_like(alpha_src)
    bounds = torch.linspace(0, g.num_src_nodes, ranges + 1).long().tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        grad_x[begin:end], grad_src[begin:end] = torch.ops.fastgnn.gat_source_backward(
            grad_out, lse, delta, *walked, t_perm, perm, alpha_dst, x[begin:end],
            alpha_src[begin:end], alpha_edge, 0.2, 0.0, 0, None, 0, begin, None, None, 1,
            grad_logit)
    grad_dst, grad_edge = torch.ops.fastgnn.gat_destination_backward(
        rowptr, grad_logit, perm, edge, torch.float64, None, None, 1)
    steps = (grad_dst, grad_x, grad_src, grad_edge)
    return whole, steps, (grad_out, lse, delta, walked, t_perm, perm, alpha_dst, x, alpha_src,
                          alpha_edge, rowptr, grad_logit)


@pytest.mark.parametrize("kind", list(GRAPHS))
@pytest.mark.parametrize("edge", [False, True])
def test_two_steps_equal_the_whole_backward(kind, edge):
    g = GRAPHS[kind]("cpu")
    whole, steps, _ = whole_and_steps(g, 3, 5, edge, ranges=4)
    for a, b in zip(steps, whole):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"),
                    reason="torch.library.opcheck needs torch 2.4")
def test_opcheck():
    g = GRAPHS["directed"]("cpu")
    _, _, (grad_out, lse, delta, walked, t_perm, perm, alpha_dst, x, alpha_src, alpha_edge,
           rowptr, grad_logit) = whole_and_steps(g, 2, 4, True, ranges=1)
    torch.library.opcheck(torch.ops.fastgnn.gat_source_backward, (
        grad_out, lse, delta, *walked, t_perm, perm, alpha_dst, x[5:20], alpha_src[5:20],
        alpha_edge, 0.2, 0.0, 0, None, 0, 5, None, None, 1, grad_logit))
    torch.library.opcheck(torch.ops.fastgnn.gat_destination_backward,
                          (rowptr, grad_logit, perm, True, torch.float32, None, None, 1))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", list(GRAPHS))
@pytest.mark.parametrize("range_bytes", [1000, 2**30])  # a group a range; one group
def test_logit_groups_equal_the_whole_backward(kind, device, range_bytes, monkeypatch):
    """Groups of source ranges write their edges' logit gradients into a buffer of their own
    (logit_slot), and the destinations' gradient sums the groups' destination passes."""
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", range_bytes)
    g = GRAPHS[kind](device)
    heads, ranges = 3, 4
    whole, _, (grad_out, lse, delta, walked, t_perm, perm, alpha_dst, x, alpha_src, _,
               rowptr, _) = whole_and_steps(g.to("cpu"), heads, 5, False, ranges)
    on = lambda *ts: [t.to(device) for t in ts]  # noqa: E731
    grad_out, lse, delta, t_perm, perm, alpha_dst, x, alpha_src = on(
        grad_out, lse, delta, t_perm, perm, alpha_dst, x, alpha_src)
    walked = on(*walked)
    bounds = torch.linspace(0, g.num_src_nodes, ranges + 1).long().tolist()
    slot, groups = _gat_layer._logit_groups(g, attention_ops.structure_args(g, True),
                                            list(zip(bounds[:-1], bounds[1:])), heads * 8)
    assert [last for last, _, _ in groups] == ([0, 1, 2, 3] if range_bytes == 1000 else [3])
    assert sum(edges for _, _, edges in groups) == g.num_edges
    grad_x, grad_src = torch.empty_like(x), torch.empty_like(alpha_src)
    grad_dst = torch.zeros_like(alpha_dst)
    group = iter(groups)
    last, group_rowptr, edges = next(group)
    buffer = torch.full((edges, heads), float("nan"), dtype=x.dtype, device=device)
    for i, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        grad_x[begin:end], grad_src[begin:end] = torch.ops.fastgnn.gat_source_backward(
            grad_out, lse, delta, *walked, t_perm, perm, alpha_dst, x[begin:end],
            alpha_src[begin:end], None, 0.2, 0.0, 0, None, 0, begin, None, None, 1, buffer, slot)
        if i == last:
            part, _ = torch.ops.fastgnn.gat_destination_backward(
                group_rowptr, buffer, None, False, torch.float64, None, None, 1)
            grad_dst += part
            last, group_rowptr, edges = next(group, (None, None, 0))
            buffer = torch.full((edges, heads), float("nan"), dtype=x.dtype, device=device)
    for a, b in zip((grad_dst, grad_x, grad_src), whole[:3]):
        torch.testing.assert_close(a.cpu(), b, atol=1e-12, rtol=1e-12)


def _first_group(g):
    """The directed graph's logit slots over two source ranges, a group each, and the first
    group's edge count."""
    slot, groups = _gat_layer._logit_groups(g, attention_ops.structure_args(g, True),
                                            [(0, 20), (20, g.num_src_nodes)], 16)
    return slot, groups[0][2]


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"),
                    reason="torch.library.opcheck needs torch 2.4")
def test_opcheck_with_logit_slots():
    g = GRAPHS["directed"]("cpu")
    _, _, (grad_out, lse, delta, walked, t_perm, perm, alpha_dst, x, alpha_src, _, _,
           _) = whole_and_steps(g, 2, 4, False, ranges=1)
    slot, edges = _first_group(g)
    buffer = torch.empty(edges, 2, dtype=torch.float64)
    torch.library.opcheck(torch.ops.fastgnn.gat_source_backward, (
        grad_out, lse, delta, *walked, t_perm, perm, alpha_dst, x[:20], alpha_src[:20], None,
        0.2, 0.0, 0, None, 0, 0, None, None, 1, buffer, slot))


def test_logit_slots_outside_the_buffer_raise():
    g = GRAPHS["directed"]("cpu")
    _, _, (grad_out, lse, delta, walked, t_perm, perm, alpha_dst, x, alpha_src, _, _,
           _) = whole_and_steps(g, 2, 4, False, ranges=1)
    slot, edges = _first_group(g)
    call = lambda buffer, slot: torch.ops.fastgnn.gat_source_backward(  # noqa: E731
        grad_out, lse, delta, *walked, t_perm, perm, alpha_dst, x[:20], alpha_src[:20], None,
        0.2, 0.0, 0, None, 0, 0, None, None, 1, buffer, slot)
    with pytest.raises(RuntimeError, match="outside grad_logit's"):
        call(torch.empty(edges - 1, 2, dtype=torch.float64), slot)
    with pytest.raises(RuntimeError, match="logit_slot must be"):
        call(torch.empty(edges, 2, dtype=torch.float64), slot[:-1])


def test_source_rows_outside_the_csr_raise():
    g = GRAPHS["directed"]("cpu")
    _, _, (grad_out, lse, delta, walked, t_perm, perm, alpha_dst, x, alpha_src, alpha_edge,
           _, grad_logit) = whole_and_steps(g, 2, 4, False, ranges=1)
    with pytest.raises(RuntimeError, match="outside the walked CSR"):
        torch.ops.fastgnn.gat_source_backward(
            grad_out, lse, delta, *walked, t_perm, perm, alpha_dst, x[:10], alpha_src[:10],
            None, 0.2, 0.0, 0, None, 0, g.num_src_nodes - 5, None, None, 1, grad_logit)


# ---- CUDA: launch plans over ranges, and the peak memory this node exists for -----------------
@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.skipif(not torch.cuda.is_available(), reason="launch plans are CUDA-only")
@pytest.mark.parametrize("plan", list(attention_ops.launch_plans("gat_attention")))
def test_every_launch_plan_over_ranges(plan, monkeypatch):
    """Row buckets restricted to each source range, split hub rows included."""
    monkeypatch.setenv("FASTGNN_TUNE", "0")
    monkeypatch.setattr(attention_ops, "DEFAULT_PLAN", plan)
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 64 * 64 * 4)
    g = symmetric_graph(400, 6000, seed=11, device="cuda")
    assert int(g.in_degree.max()) > 8 * 32
    layer, _, x, _, _ = make_case("symmetric", "cpu", 64, 4, 16, torch.float32)
    layer, x = layer.cuda(), torch.randn(400, 64, device="cuda", requires_grad=True)
    assert_same(run(fused, layer, g, x, None, None, slope=0.2, dropout=0.0),
                run(separate, layer, g, x, None, None, slope=0.2, dropout_mask=None), 2e-4, 2e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="peak memory measured on CUDA")
def test_peak_memory_under_the_separate_nodes(monkeypatch):
    """Forward + backward of a width-256 layer in 5 ranges: the one node's peak stays at least
    0.6 node tensors under the separate nodes' (output, projection and its gradient at once)."""
    monkeypatch.setattr(_gat_layer, "RANGE_BYTES", 40_000 * 256 * 4 // 5 + 1)
    g = symmetric_graph(40_000, 200_000, seed=12, device="cuda")
    layer = Layer(256, 4, 64, torch.float32).cuda()
    x = torch.randn(40_000, 256, device="cuda", requires_grad=True)
    node_tensor = x.numel() * x.element_size()

    def peak(fn, **kw):
        grad_out = torch.randn(40_000, 4, 64, device="cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn(layer, g, x, None, alpha_edge=None, **kw)
        torch.autograd.grad(out, [x, layer.lin.weight], grad_out)
        del out
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    def separate_native(layer, g, x, alpha_dst, slope, alpha_edge):
        h = layer.lin(x).view(x.shape[0], 4, 64)
        return fastgnn.ops.gat_attention(g, h, (h * layer.att_src).sum(-1),
                                         (h * layer.att_dst).sum(-1), slope)
    peak(fused, slope=0.2, dropout=0.0)  # tuning and caches first
    lean, stock = peak(fused, slope=0.2, dropout=0.0), peak(separate_native, slope=0.2)
    assert lean < stock - 0.6 * node_tensor, (lean / node_tensor, stock / node_tensor)


# ---- the adapters on this node ----------------------------------------------------------------
def ran_one_node(monkeypatch):
    """A list that grows by one each time the one-node path runs."""
    calls = []
    apply = _gat_layer._GatLayer.apply
    monkeypatch.setattr(_gat_layer._GatLayer, "apply",
                        lambda *args: calls.append(1) or apply(*args))
    return calls


def compare_layers(stock, enabled, inputs, edge_index, edge_attr=None):
    """The stock and the enabled layer on copies of the inputs: outputs, input and parameter
    gradients."""
    def run_layer(layer):
        xs = [t.detach().clone().requires_grad_() for t in inputs]
        x = xs[0] if len(xs) == 1 else tuple(xs)
        out = layer(x, edge_index, edge_attr) if edge_attr is not None else layer(x, edge_index)
        out.backward(torch.ones_like(out) + out.detach())
        return [out] + [t.grad for t in xs] + [p.grad for p in layer.parameters()]
    assert_same(run_layer(enabled), run_layer(stock), 1e-10, 1e-10)


@pytest.mark.parametrize("variant", ["one-projection", "edge_dim", "residual-mean", "pair"])
def test_pyg_gatconv_on_the_node(variant, monkeypatch):
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    import copy
    calls = ran_one_node(monkeypatch)
    kwargs = {"edge_dim": 3} if variant == "edge_dim" else \
        {"residual": True, "concat": False} if variant == "residual-mean" else {}
    in_width = (12, 12) if variant == "pair" else 12
    torch.manual_seed(0)
    stock = pyg_nn.GATConv(in_width, 4, heads=3, **kwargs).double()
    enabled = fastgnn.enable(copy.deepcopy(stock))
    g_edges = random_edge_index(60, 60, 300, seed=5)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(60, 12, generator=gen, dtype=torch.float64)
    inputs = [x, x + 1] if variant == "pair" else [x]
    attr = torch.randn(g_edges.shape[1], 3, generator=gen, dtype=torch.float64) \
        if variant == "edge_dim" else None
    compare_layers(stock, enabled, inputs, g_edges, attr)
    assert calls, "the enabled layer did not run the one-node path"


@pytest.mark.parametrize("kind", ["homogeneous", "block", "pair"])
def test_dgl_gatconv_on_the_node(kind, monkeypatch):
    dgl = pytest.importorskip("dgl")
    import copy
    calls = ran_one_node(monkeypatch)
    torch.manual_seed(0)
    src, dst = random_edge_index(60, 40 if kind != "homogeneous" else 60, 300, seed=6)
    if kind == "block":
        graph = dgl.create_block((src, dst), num_src_nodes=60, num_dst_nodes=40)
    elif kind == "pair":
        graph = dgl.heterograph({("u", "e", "v"): (src, dst)}, {"u": 60, "v": 40})
    else:
        graph = dgl.graph((src, dst), num_nodes=60)
    in_feats = (12, 10) if kind == "pair" else 12
    stock = dgl.nn.GATConv(in_feats, 4, 3, allow_zero_in_degree=True).double()
    enabled = fastgnn.enable(copy.deepcopy(stock))
    gen = torch.Generator().manual_seed(2)
    feats = [torch.randn(60, 12, generator=gen, dtype=torch.float64)]
    if kind == "pair":
        feats.append(torch.randn(40, 10, generator=gen, dtype=torch.float64))

    def run_layer(layer):
        xs = [t.clone().requires_grad_() for t in feats]
        out = layer(graph, xs[0] if len(xs) == 1 else tuple(xs))
        out.backward(torch.ones_like(out) + out.detach())
        return [out] + [t.grad for t in xs] + [p.grad for p in layer.parameters()]
    assert_same(run_layer(enabled), run_layer(stock), 1e-10, 1e-10)
    assert calls, "the enabled layer did not run the one-node path"
