"""The ops' autocast policy (csrc/autocast.cpp): under torch.autocast the ops run in the
autocast dtype, match the float32 result within half-precision tolerance, and add no cast or
copy around themselves when their features already come in that dtype."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from conftest import devices, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("spmm"), reason="native extension not built")

HALF = (torch.bfloat16, torch.float16)
TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 4e-3}  # relative to the largest magnitude
CASTS = ("aten::_to_copy", "aten::copy_", "aten::to")


def _graph(device):
    g, _ = random_graph(60, 400, seed=3)
    return g.to(device)


def _features(g, device, *shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((g.num_src_nodes,) + shape, generator=gen).to(device)


def _calls(g, device, seed=0):
    """name: (op call on feature tensors, float32 oracle on the same tensors, inputs)."""
    x = _features(g, device, 16, seed=seed)
    q, k, v = (_features(g, device, 2, 8, seed=seed + i) for i in (1, 2, 3))
    att = torch.randn(2, 8, generator=torch.Generator().manual_seed(seed)).to(device)
    alpha_src, alpha_dst = (_features(g, device, 2, seed=seed + i) for i in (4, 5))
    logits = torch.randn(g.num_edges, 2, generator=torch.Generator().manual_seed(seed)).to(device)
    return {
        "spmm": (lambda x: fastgnn.ops.spmm(g, x, norm="both"),
                 lambda x: reference.spmm(g, x, norm="both"), (x,)),
        "aggregate-max": (lambda x: fastgnn.ops.aggregate(g, x, "max"),
                          lambda x: reference.aggregate(g, x, "max"), (x,)),
        "gatv2": (lambda q, k, att: fastgnn.ops.gatv2_attention(g, q, k, att),
                  lambda q, k, att: reference.gatv2_attention(g, q, k, att), (q, k, att)),
        "graph-attention": (lambda q, k, v: fastgnn.ops.graph_attention(g, q, k, v),
                            lambda q, k, v: reference.graph_attention(g, q, k, v), (q, k, v)),
        "gat": (lambda x, a, b: fastgnn.ops.gat_attention(g, x, a, b),
                lambda x, a, b: reference.gat_attention(g, x, a, b), (q, alpha_src, alpha_dst)),
        "edge-softmax": (lambda z: fastgnn.ops.edge_softmax(g, z),
                         lambda z: reference.edge_softmax(g, z), (logits,)),
        "maxk": (lambda x: fastgnn.ops.maxk_spmm(g, fastgnn.ops.maxk(x, 4), norm="both"),
                 lambda x: reference.maxk_spmm(g, reference.maxk_cbsr(x, 4), norm="both"), (x,)),
    }


def _error(actual, expected):
    return float((actual.detach().double() - expected.detach().double()).abs().max())


def _close(actual, expected, dtype, half_reference=None):
    """Within the dtype's tolerance of the float32 result, or (as FlashAttention's tests
    judge half precision) within twice the error of the reference computed in ``dtype``."""
    scale = max(float(expected.detach().abs().max()), 1.0)
    allowed = TOLERANCE[dtype] * scale
    if half_reference is not None:
        allowed = max(allowed, 2 * _error(half_reference, expected))
    err = _error(actual, expected)
    assert err <= allowed, f"max abs error {err:.3g} > {allowed:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", ["spmm", "aggregate-max", "gatv2", "graph-attention", "gat",
                                  "edge-softmax", "maxk"])
def test_ops_run_in_the_autocast_dtype(device, dtype, name):
    g = _graph(device)
    op, oracle, inputs = _calls(g, device)[name]
    inputs = [t.clone().requires_grad_() for t in inputs]
    with torch.autocast(device, dtype=dtype):
        out = op(*inputs)
    assert out.dtype == dtype
    # float32 oracle on the inputs rounded as autocast rounds them, and the reference in dtype
    rounded = [t.detach().to(dtype).float().requires_grad_() for t in inputs]
    halves = [t.detach().to(dtype).requires_grad_() for t in inputs]
    expected, half = oracle(*rounded), oracle(*halves)
    _close(out, expected, dtype, half)
    grad = torch.randn_like(expected).to(dtype)
    out.backward(grad)
    expected.backward(grad.float())
    half.backward(grad)
    for t, r, h in zip(inputs, rounded, halves):
        assert t.grad.dtype == t.dtype  # gradients come back in the input's dtype
        _close(t.grad, r.grad, dtype, h.grad)


def _cast_events(run, device):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run()
        if device == "cuda":
            torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.name in CASTS]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["spmm", "aggregate-max", "gatv2", "graph-attention", "gat",
                                  "edge-softmax", "maxk"])
def test_no_casts_around_ops_fed_in_the_autocast_dtype(device, name):
    """Features arriving in bfloat16 (as a linear layer's output under autocast does) reach
    the kernels as they are: no cast or copy op is dispatched around the call."""
    g = _graph(device)
    op, _, inputs = _calls(g, device)[name]
    inputs = [t.to(torch.bfloat16) for t in inputs]
    with torch.autocast(device, dtype=torch.bfloat16), torch.no_grad():
        op(*inputs)  # first call: tuning and cached per-graph state
        assert _cast_events(lambda: op(*inputs), device) == []


@pytest.mark.parametrize("device", devices())
def test_float64_is_left_alone(device):
    g = _graph(device)
    x = _features(g, device, 8).double()
    with torch.autocast(device, dtype=torch.bfloat16):
        assert fastgnn.ops.spmm(g, x).dtype == torch.float64
        assert fastgnn.ops.aggregate(g, x, "min").dtype == torch.float64
        logits = torch.randn(g.num_edges, 2, dtype=torch.float64, device=device)
        assert fastgnn.ops.edge_softmax(g, logits).dtype == torch.float64
        assert fastgnn.ops.maxk(x, 2).values.dtype == torch.float64


@pytest.mark.parametrize("device", devices())
def test_enabled_gcn_keeps_autocast_features(device):
    """The enabled GCNConv under autocast: its propagation stays in bfloat16 (no upcast of
    the linear layer's output to the float32 edge coefficients' dtype) and matches stock."""
    nn = pytest.importorskip("torch_geometric.nn")
    g, edge_index = random_graph(60, 400, seed=4)
    edge_index = edge_index.to(device)
    torch.manual_seed(0)
    stock = nn.GCNConv(16, 16).to(device)
    fast = fastgnn.enable(nn.GCNConv(16, 16).to(device))
    fast.load_state_dict(stock.state_dict())
    x = torch.randn(60, 16, device=device)
    with torch.autocast(device, dtype=torch.bfloat16), torch.no_grad():
        expected = stock(x, edge_index)
        fast(x, edge_index)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = fast(x, edge_index)
    casts = [e for e in prof.events() if e.name == "aten::_to_copy"]
    assert len(casts) <= 2  # autocast's own casts of x and the weight for the linear layer
    _close(out.float(), expected.float(), torch.bfloat16)
