"""The contract every op keeps, checked across all public ops: torch.compile(fullgraph=True)
traces through it, and on CUDA, after the first call, forward and backward neither
synchronise with the host nor break CUDA-graph capture."""
import pytest
import torch

import fastgnn
from conftest import devices, random_graph

HEADS, DIM = 2, 8


def make_inputs(device, seed=0):
    g, _ = random_graph(40, 300, seed=seed)
    g = g.to(device)
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device).requires_grad_()

    return g, {
        "x": rand(g.num_src_nodes, 16),
        "w": rand(g.num_edges),
        "h": rand(g.num_src_nodes, HEADS, DIM),
        "att": rand(HEADS, DIM),
    }


CASES = {
    "spmm": lambda g, t: fastgnn.ops.spmm(g, t["x"], norm="both", edge_weight=t["w"]),
    "aggregate_max": lambda g, t: fastgnn.ops.aggregate(g, t["x"], "max"),
    "gatv2_attention": lambda g, t: fastgnn.ops.gatv2_attention(g, t["h"], t["h"], t["att"]),
    "graph_attention": lambda g, t: fastgnn.ops.graph_attention(g, t["h"], t["h"], t["h"]),
}


def run_with_grads(fn, g, t):
    out = fn(g, t)
    leaves = [v for v in t.values() if v.requires_grad]
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out), allow_unused=True)
    return out, grads


@pytest.mark.skipif(not hasattr(torch.library, "register_fake"), reason="torch < 2.4")
@pytest.mark.parametrize("name", sorted(CASES))
def test_compile_fullgraph_matches_eager(name):
    g, t = make_inputs("cpu")
    eager_out, eager_grads = run_with_grads(CASES[name], g, t)
    torch._dynamo.reset()
    compiled = torch.compile(CASES[name], fullgraph=True, backend="aot_eager")
    out, grads = run_with_grads(compiled, g, t)
    torch.testing.assert_close(out, eager_out)
    for got, want in zip(grads, eager_grads):
        if want is not None:
            torch.testing.assert_close(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_host_sync_after_first_call(name):
    g, t = make_inputs("cuda")
    run_with_grads(CASES[name], g, t)  # first call: caches and tuning may synchronise
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run_with_grads(CASES[name], g, t)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_is_cuda_graph_capturable(name):
    g, t = make_inputs("cuda")
    fn = CASES[name]
    with torch.no_grad():
        expected = fn(g, t)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(g, t)  # warm up on the side stream, as capture requires
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = fn(g, t)
        graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, expected)


@pytest.mark.parametrize("device", devices())
def test_deterministic_mode_is_honoured(device):
    """Under torch.use_deterministic_algorithms, every op either runs deterministically
    (identical results twice) or raises an error that names it."""
    g, t = make_inputs(device)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for name, fn in CASES.items():
            try:
                first = run_with_grads(fn, g, t)
                second = run_with_grads(fn, g, t)
            except RuntimeError as exc:
                assert "determinis" in str(exc), (name, exc)
                continue
            assert torch.equal(first[0], second[0]), name
            for a, b in zip(first[1], second[1]):
                assert (a is None and b is None) or torch.equal(a, b), name
    finally:
        torch.use_deterministic_algorithms(previous)
