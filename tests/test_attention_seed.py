"""Attention dropout with its seed in a tensor, the path a captured CUDA graph and torch.compile
take: the kernels give the mask of the host seed of the same value, forward and backward, for
every attention family; eager calls keep the host seed; a captured training step draws a new
mask at each replay (gpu)."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops import attention as attention_ops
from conftest import devices, random_graph

pytestmark = pytest.mark.skipif(not (_native.has_op("gatv2_forward") and
                                     _native.has_op("gat_forward")),
                                reason="native attention ops not built")

HEADS, DIM, P = 2, 8, 0.4
KINDS = ("gatv2", "transformer", "gat")
# kind: (native op name, slope or scale)
OPS = {"gatv2": ("gatv2_attention", 0.2), "transformer": ("graph_attention", 0.5),
       "gat": ("gat_attention", 0.2)}


def features(kind, g, device, dtype=torch.float64):
    """The op's (a, b, c, edge term) in its native order, leaves that require grad."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(
            device, dtype).requires_grad_()

    rows, sources, edges = g.num_dst_nodes, g.num_src_nodes, g.num_edges
    if kind == "gat":  # alpha_dst, x_src, alpha_src, alpha_edge
        return (rand(rows, HEADS), rand(sources, HEADS, DIM), rand(sources, HEADS),
                rand(edges, HEADS))
    third = rand(HEADS, DIM) if kind == "gatv2" else rand(sources, HEADS, DIM)
    return rand(rows, HEADS, DIM), rand(sources, HEADS, DIM), third, rand(edges, HEADS, DIM)


def attend(kind, g, feats, impl=fastgnn.ops, **mask):
    """The public op (``impl``: fastgnn.ops or fastgnn.reference) with dropout P."""
    a, b, c, e = feats
    coef = OPS[kind][1]
    if kind == "gatv2":
        return impl.gatv2_attention(g, a, b, c, coef, P, edge_term=e, **mask)
    if kind == "transformer":
        return impl.graph_attention(g, a, b, c, coef, P, edge_term=e, **mask)
    return impl.gat_attention(g, b, c, a, coef, P, alpha_edge=e, **mask)


def native_with_seed_tensor(kind, g, feats, seed_tensor):
    """The native op with autograd, its dropout seed read from ``seed_tensor``."""
    op, coef = OPS[kind]
    return attention_ops.native_forward(op, g, feats, coef, P, True, seed_tensor=seed_tensor)[0]


def output_grad(g, device):
    """A fixed gradient of the output ([T, H, D] for every kind)."""
    return torch.randn(g.num_dst_nodes, HEADS, DIM, generator=torch.Generator().manual_seed(1),
                       dtype=torch.float64).to(device)


def with_grads(out, feats, grad_out):
    return [out] + list(torch.autograd.grad(out, feats, grad_out))


def as_seed_tensor(value, device):
    return torch.tensor([value], dtype=torch.int64, device=device)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_seed_tensor_gives_the_host_seeds_mask(kind, device):
    """A seed tensor holding s drops what the host seed s drops: equal outputs and gradients
    (the backward regenerates the forward's mask from the saved tensor)."""
    g, _ = random_graph(50, 300, seed=10, device=device)
    feats, grad_out = features(kind, g, device), output_grad(g, device)
    torch.manual_seed(1234)
    seed, _, _ = attention_ops._draw_seed(P, torch.device(device))
    torch.manual_seed(1234)  # the eager call draws the same host seed
    with fastgnn.backend("native"):
        host = with_grads(attend(kind, g, feats), feats, grad_out)
    device_seed = with_grads(native_with_seed_tensor(kind, g, feats, as_seed_tensor(seed, device)),
                             feats, grad_out)
    for x, y in zip(host, device_seed):
        assert torch.equal(x, y)
    other = native_with_seed_tensor(kind, g, feats, as_seed_tensor(seed + 1, device))
    assert not torch.equal(other, host[0])


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_with_seed_tensor(kind):
    g, _ = random_graph(12, 40, num_dst=9, seed=8)
    feats = features(kind, g, "cpu")
    seed = as_seed_tensor(5, "cpu")
    assert 0 < float(attention_ops.dropout_mask(g, HEADS, P, 5).mean()) < 1
    assert torch.autograd.gradcheck(
        lambda *f: native_with_seed_tensor(kind, g, f, seed), feats)


def test_eager_calls_draw_the_seed_on_the_host():
    """Eager dropout draws one int64 from torch's CPU generator, as before seed tensors, so
    torch.manual_seed reproduces it; no dropout draws nothing."""
    cpu = torch.device("cpu")
    torch.manual_seed(7)
    expected = int(torch.randint(0, 2**62, (), dtype=torch.int64).item())
    torch.manual_seed(7)
    assert attention_ops._draw_seed(P, cpu) == (expected, None, 0)
    state = torch.get_rng_state()
    assert attention_ops._draw_seed(0.0, cpu) == (0, None, 0)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("device", devices())
def test_bad_seed_tensor_raises(device):
    g, _ = random_graph(20, 60, seed=13, device=device)
    a, b, c, _ = features("gatv2", g, device)
    structure = attention_ops.structure_args(g, False)

    def forward(bad):
        return torch.ops.fastgnn.gatv2_forward(*structure, a, b, c, None, 0.2, P, 0, bad, 0,
                                               None, None, 1)
    with pytest.raises(TypeError, match="seed_tensor must be a one-element int64"):
        forward(torch.zeros(1, dtype=torch.float32, device=device))
    with pytest.raises(TypeError, match="seed_tensor must be a one-element int64"):
        forward(torch.zeros(2, dtype=torch.int64, device=device))
    if device == "cuda":
        with pytest.raises(ValueError, match="seed_tensor is on cpu"):
            forward(as_seed_tensor(3, "cpu"))


# ---- CUDA graphs --------------------------------------------------------------------------------
def _capture(step):
    """``step`` run once eagerly on a side stream (tuning, cached structures), then captured:
    (the graph, the step's outputs in the graph's memory)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_captured_step_draws_a_new_mask_each_replay(kind, monkeypatch):
    """A forward and backward with attention dropout captured in a CUDA graph: each replay
    draws a new seed on the device, and its output and gradients are the reference's under
    that seed's mask (a host seed would have been frozen into the graph)."""
    g, _ = random_graph(50, 300, seed=10, device="cuda")
    feats, grad_out = features(kind, g, "cuda"), output_grad(g, "cuda")
    drawn = []

    def recording_draw(device, draw=attention_ops.draw_seed_tensor):
        drawn.append(draw(device))
        return drawn[-1]
    monkeypatch.setattr(attention_ops, "draw_seed_tensor", recording_draw)
    with fastgnn.backend("native"):
        graph, static = _capture(lambda: with_grads(attend(kind, g, feats), feats, grad_out))
    assert len(drawn) == 1, "the eager warm-up draws on the host, the capture on the device"
    replays = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        replays.append((int(drawn[0].item()), [t.clone() for t in static]))
    (first_seed, first), (second_seed, second) = replays
    assert first_seed != second_seed
    assert not torch.equal(first[0], second[0])
    for seed, results in replays:
        mask = attention_ops.dropout_mask(g, HEADS, P, seed)
        want = with_grads(attend(kind, g, feats, reference, dropout_mask=mask), feats, grad_out)
        for x, y in zip(results, want):
            torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("layer", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_captured_pyg_training_step_draws_a_new_mask_each_replay(layer):
    """An enabled PyG layer with attention dropout, forward and backward captured: the replays
    give different outputs and gradients from the same parameters and inputs."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    from pyg_cases import fused_only
    torch.manual_seed(0)
    conv = fastgnn.enable(getattr(pyg_nn, layer)(16, 8, heads=HEADS, dropout=0.5)).cuda()
    x = torch.randn(50, 16, device="cuda", requires_grad=True)
    _, edge_index = random_graph(50, 300, seed=10, device="cuda")

    def step():
        out = conv(x, edge_index)
        return [out] + list(torch.autograd.grad(out.square().sum(), x))
    with fused_only():
        graph, static = _capture(step)
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append([t.clone() for t in static])
    for first, second in zip(*replays):
        assert torch.isfinite(first).all()
        assert not torch.equal(first, second)
