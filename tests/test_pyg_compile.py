"""torch.compile of enabled PyG models: one graph with no break, results equal to eager
(forward and gradients), and the structure looked up per call (another graph, an in-place
change of edge_index or of the edge weights); attention dropout draws its seed in the graph, a
new one each call."""
from __future__ import annotations

import contextlib
import copy
import re

import pytest
import torch
import torch._dynamo.testing

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fastgnn  # noqa: E402
import fastgnn.pyg as fpyg  # noqa: E402
from fastgnn.pyg import compiled  # noqa: E402
from fastgnn.pyg.structure import EdgeIndex  # noqa: E402
from conftest import deterministic_algorithms, devices, random_edge_index  # noqa: E402
from pyg_cases import edge_extra, fused_only  # noqa: E402

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="torch < 2.4 or no native ops")

IN, HIDDEN, HEADS = 8, 16, 2
LAYERS = {
    "gcn": lambda i, o: pyg_nn.GCNConv(i, o),
    "gcn-noloops": lambda i, o: pyg_nn.GCNConv(i, o, add_self_loops=False),
    "gcn-unnormalised": lambda i, o: pyg_nn.GCNConv(i, o, normalize=False),
    "sage": lambda i, o: pyg_nn.SAGEConv(i, o),
    "sage-sum-project": lambda i, o: pyg_nn.SAGEConv(i, o, aggr="sum", project=True),
    "sage-max": lambda i, o: pyg_nn.SAGEConv(i, o, aggr="max"),
    "sage-min": lambda i, o: pyg_nn.SAGEConv(i, o, aggr="min"),
    "gin": lambda i, o: pyg_nn.GINConv(torch.nn.Linear(i, o), train_eps=True),
    "gin-max": lambda i, o: pyg_nn.GINConv(torch.nn.Linear(i, o), aggr="max"),
    "graphconv-mean": lambda i, o: pyg_nn.GraphConv(i, o, aggr="mean"),
    "graphconv-max": lambda i, o: pyg_nn.GraphConv(i, o, aggr="max"),
    "gatv2": lambda i, o: pyg_nn.GATv2Conv(i, o // HEADS, heads=HEADS),
    "gat": lambda i, o: pyg_nn.GATConv(i, o // HEADS, heads=HEADS),
    "transformer": lambda i, o: pyg_nn.TransformerConv(i, o // HEADS, heads=HEADS),
}
# Layers called with edge weights, which require grad (eager mode differentiates them too).
WEIGHTED = {
    "gcn-weighted": lambda i, o: pyg_nn.GCNConv(i, o),
    "gcn-improved-weighted": lambda i, o: pyg_nn.GCNConv(i, o, improved=True),
    "gcn-noloops-weighted": lambda i, o: pyg_nn.GCNConv(i, o, add_self_loops=False),
    "gcn-unnormalised-weighted": lambda i, o: pyg_nn.GCNConv(i, o, normalize=False),
    "graphconv-weighted": lambda i, o: pyg_nn.GraphConv(i, o),
    "graphconv-mean-weighted": lambda i, o: pyg_nn.GraphConv(i, o, aggr="mean"),
    "simpleconv-mean-weighted": lambda i, o: pyg_nn.SimpleConv(aggr="mean"),  # keeps i
}
CASES = {**LAYERS, **WEIGHTED}


# The attention layers with attention dropout.
DROPOUT_LAYERS = {
    "gatv2": lambda i, o: pyg_nn.GATv2Conv(i, o // HEADS, heads=HEADS, dropout=0.5),
    "gat": lambda i, o: pyg_nn.GATConv(i, o // HEADS, heads=HEADS, dropout=0.5),
    "transformer": lambda i, o: pyg_nn.TransformerConv(i, o // HEADS, heads=HEADS, dropout=0.5),
}


class Model(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.convs = torch.nn.ModuleList([layer(IN, HIDDEN), layer(HIDDEN, HIDDEN),
                                          layer(HIDDEN, HIDDEN)])

    def forward(self, x, edge_index, *edge_inputs):
        for conv in self.convs:
            x = torch.relu(conv(x, edge_index, *edge_inputs))
        return x


def _models(name, device="cpu", layers=CASES):
    torch.manual_seed(0)
    eager = fastgnn.enable(Model(layers[name])).to(device)
    return eager, copy.deepcopy(eager)


def _inputs(num_nodes, num_edges, seed, device="cpu", name=None):
    """x, edge_index and, for a WEIGHTED case ``name``, the edge weights."""
    x = torch.randn(num_nodes, IN, generator=torch.Generator().manual_seed(seed)).to(device)
    edge_index = random_edge_index(num_nodes, num_nodes, num_edges, seed=seed, device=device)
    if name not in WEIGHTED:
        return x, edge_index
    return x, edge_index, edge_extra("weight", edge_index.size(1), seed).to(device)


def _step(model, x, edge_index, *edge_inputs):
    """The output and the gradients of x, of the edge inputs and of every parameter."""
    leaves = [t.detach().clone().requires_grad_() for t in (x,) + edge_inputs]
    out = model(leaves[0], edge_index, *leaves[1:])
    (out * torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out)).sum().backward()
    grads = [t.grad for t in leaves] + [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


def _assert_equal(got, want, **tolerance):
    torch.testing.assert_close(got[0], want[0], **tolerance)
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, **tolerance)


def _assert_one_graph(model, *inputs):
    """explain counts one graph and no break; fullgraph=True compiles too, as explain does not
    count calls of the torch.compiler.disable'd eager structure code as breaks."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(*inputs)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), \
        [reason.reason for reason in explained.break_reasons]
    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, backend="eager")(*inputs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_graph_break(name):
    model, _ = _models(name)
    _assert_one_graph(model, *_inputs(40, 200, seed=0, name=name))


@pytest.mark.parametrize("name", sorted(DROPOUT_LAYERS))
def test_no_graph_break_with_attention_dropout(name):
    model, _ = _models(name, layers=DROPOUT_LAYERS)
    _assert_one_graph(model, *_inputs(40, 200, seed=0, name=name))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_equals_eager(name, device):
    """Same kernels on the same cached structures: equal, not only close (aot_eager keeps
    torch's own ops). The second call builds nothing: the compiled code hands the ops the
    caller's edge_index, forward and backward, so the cache hits. On CUDA, gcn_norm with edge
    weights sums the degrees with index_add_'s atomics, in an order that varies between any
    two calls, eager ones too: there the results agree to rounding. The min/max backward's
    atomics vary so too: its layers run under deterministic algorithms there (the pull)."""
    eager, model = _models(name, device)
    inputs = _inputs(40, 200, seed=1, device=device, name=name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    atomic_degrees = device == "cuda" and name.startswith("gcn") and name in WEIGHTED \
        and "unnormalised" not in name
    tolerance = dict(rtol=1e-5, atol=1e-6) if atomic_degrees else dict(rtol=0, atol=0)
    pull = device == "cuda" and name.endswith(("-max", "-min"))
    with fused_only(), deterministic_algorithms() if pull else contextlib.nullcontext():
        want = _step(eager, *inputs)
        _assert_equal(_step(compiled_model, *inputs), want, **tolerance)
        builds = fpyg.structure_cache.builds
        _assert_equal(_step(compiled_model, *inputs), want, **tolerance)
    assert fpyg.structure_cache.builds == builds


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_stock_pyg(name):
    """The compiled enabled model against the stock PyG model it was made from, in float64:
    forward and every gradient (the edge weights' included)."""
    torch.manual_seed(0)
    stock = Model(CASES[name]).double()
    model = fastgnn.enable(copy.deepcopy(stock))
    inputs = [t.double() if t.is_floating_point() else t
              for t in _inputs(40, 200, seed=2, name=name)]
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with fused_only():
        _assert_equal(_step(compiled_model, *inputs), _step(stock, *inputs),
                      rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["gcn", "sage", "sage-max", "gatv2", "gcn-weighted",
                                  "graphconv-weighted"])
def test_other_graphs_and_in_place_changes(name):
    """Each call sees its own edge_index: another graph of another size (a recompile at
    most, never a stale structure), then the first one changed in place."""
    eager, model = _models(name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    first, second, third = (_inputs(40, 200, seed=2, name=name),
                            _inputs(57, 310, seed=3, name=name),
                            _inputs(33, 150, seed=4, name=name))
    for inputs in (first, second, third, first):
        _assert_equal(_step(compiled_model, *inputs), _step(eager, *inputs), rtol=0, atol=0)
    edge_index = first[1]
    edge_index[:, :60] = edge_index[:, :60].flip(0)  # reverse some edges in place
    _assert_equal(_step(compiled_model, *first), _step(eager, *first), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["gcn-weighted", "gcn-unnormalised-weighted",
                                  "graphconv-mean-weighted"])
def test_edge_weight_changed_in_place(name):
    """The ops derive the edge values from the weights they are handed on every call: an
    in-place change of the weights is seen."""
    eager, model = _models(name)
    x, edge_index, weight = _inputs(40, 200, seed=12, name=name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        before = compiled_model(x, edge_index, weight)
        torch.testing.assert_close(before, eager(x, edge_index, weight), rtol=0, atol=0)
        weight[::3] *= 4.0
        after = compiled_model(x, edge_index, weight)
        torch.testing.assert_close(after, eager(x, edge_index, weight), rtol=0, atol=0)
    assert not torch.equal(before, after)


@pytest.mark.parametrize("name", ["gcn", "gcn-weighted", "sage", "sage-max", "gatv2"])
def test_edge_index_input(name):
    """A PyG EdgeIndex compiles to the same single graph (the ops take its data): results
    equal eager mode's on the EdgeIndex and the stock layer's in float64, and the second
    call builds nothing."""
    torch.manual_seed(0)
    stock = Model(CASES[name]).double()
    eager = fastgnn.enable(copy.deepcopy(stock))
    model = copy.deepcopy(eager)
    x, edge_index, *weights = _inputs(40, 200, seed=13, name=name)
    inputs = (x.double(), EdgeIndex(edge_index, sparse_size=(40, 40)),
              *(w.double() for w in weights))
    _assert_one_graph(model, *inputs)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with fused_only():
        want = _step(eager, *inputs)
        _assert_equal(_step(compiled_model, *inputs), want, rtol=0, atol=0)
        builds = fpyg.structure_cache.builds
        _assert_equal(_step(compiled_model, *inputs), want, rtol=0, atol=0)
    assert fpyg.structure_cache.builds == builds
    _assert_equal(want, _step(stock, *inputs), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["gcn", "sage", "gatv2", "transformer", "gcn-weighted",
                                  "graphconv-weighted", "sage-max"])
def test_inductor_matches_eager(name, device):
    """Inductor fuses torch's ops around fastgnn's (close, not equal); its compiled code also
    hands the ops the caller's edge_index (no rebuild on the second call)."""
    eager, model = _models(name, device)
    inputs = _inputs(40, 200, seed=5, device=device, name=name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True)
    for _ in range(2):
        builds = fpyg.structure_cache.builds
        _assert_equal(_step(compiled_model, *inputs), _step(eager, *inputs),
                      rtol=1e-5, atol=1e-6)
    assert fpyg.structure_cache.builds == builds


@pytest.mark.parametrize("name", ["gcn", "gcn-weighted", "sage-max", "gatv2"])
def test_training_steps_compile_once(name):
    """Compiled before any eager call (an empty backend memo, which the trace must neither
    read nor fill: its guard failed on the second call), the model compiles once for every
    training step, and an in-place change of edge_index is seen without a recompilation."""
    eager, model = _models(name)
    inputs = _inputs(40, 200, seed=14, name=name)
    torch._dynamo.reset()
    fastgnn.backends._selected.clear()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled_model = torch.compile(model, fullgraph=True, backend=counter)
    steps = [_step(compiled_model, *inputs) for _ in range(3)]
    inputs[1][:, :60] = inputs[1][:, :60].flip(0)  # reverse some edges in place
    steps.append(_step(compiled_model, *inputs))
    assert counter.frame_count == 1
    _assert_equal(steps[0], steps[2], rtol=0, atol=0)
    _assert_equal(steps[3], _step(eager, *inputs), rtol=0, atol=0)
    assert not torch.equal(steps[3][0], steps[0][0])


@pytest.mark.parametrize("name", ["gcn", "gcn-weighted", "sage-max", "gatv2"])
def test_compiled_step_calls_the_kernel_twins(name):
    """The compiled forward and backward call the differentiable ops' twins without autograd
    kernel (fastgnn::pyg_spmm_kernel, ...), never the ops themselves, whose Python autograd
    kernel would run on every call."""
    _, model = _models(name)
    inputs = _inputs(40, 200, seed=15, name=name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    _step(compiled_model, *inputs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        _step(compiled_model, *inputs)
    called = {event.name for event in profile.events() if event.name.startswith("fastgnn::pyg_")}
    assert called & {"fastgnn::pyg_spmm_kernel", "fastgnn::pyg_minmax_kernel",
                     "fastgnn::pyg_attention_kernel"}
    assert not called & {"fastgnn::pyg_spmm", "fastgnn::pyg_minmax", "fastgnn::pyg_attention"}
    if hasattr(torch.Tag, "cudagraph_unsafe"):  # Inductor's CUDA graphs leave them out
        for op_name in called:
            op = getattr(torch.ops.fastgnn, op_name.split("::")[1]).default
            assert torch.Tag.cudagraph_unsafe in op.tags, op_name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
@pytest.mark.parametrize("name", ["gcn", "sage-max", "gatv2"])
def test_reduce_overhead_runs_the_ops_on_every_call(name):
    """Under mode="reduce-overhead" the ops (cudagraph_unsafe) run outside Inductor's CUDA
    graphs: results equal eager ones after the graphs are recorded, and an in-place change of
    edge_index is seen, which a replayed structure lookup would miss (an O(1) difference).
    Inductor's generated kernels round differently from eager ones (1.2e-6 on one SAGE-max
    gradient entry on an H100), hence torch's default float32 tolerance."""
    eager, model = _models(name, "cuda")
    inputs = _inputs(40, 200, seed=16, device="cuda", name=name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, mode="reduce-overhead")

    def check():
        torch.compiler.cudagraph_mark_step_begin()  # one training step per iteration
        _assert_equal(_step(compiled_model, *inputs), _step(eager, *inputs))
    for _ in range(3):  # warmup, recording, replay
        check()
    inputs[1][:, :60] = inputs[1][:, :60].flip(0)  # reverse some edges in place
    check()


def _opcheck_inputs(num_src, num_dst, seed, dtype=torch.float32):
    """edge_index, x (requires grad) and edge weights (require grad) for an opcheck."""
    edge_index = random_edge_index(num_src, num_dst, 4 * num_src, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num_src, 5, generator=gen).to(dtype).requires_grad_()
    weight = (torch.rand(edge_index.size(1), generator=gen) + 0.1).to(dtype).requires_grad_()
    return edge_index, x, weight


# reduce, GCN coefficients' dtype, self_loops, loop_weight, with edge weights
SPMM_OPTIONS = {
    "sum": ("sum", None, False, 1.0, False),
    "mean": ("mean", None, False, 1.0, False),
    "gcn": ("sum", torch.float32, True, 1.0, False),
    "gcn-noloops-float64": ("sum", torch.float64, False, 1.0, False),
    "sum-weighted": ("sum", None, False, 1.0, True),
    "mean-weighted": ("mean", None, False, 1.0, True),
    "gcn-improved-weighted": ("sum", torch.float32, True, 2.0, True),
    "gcn-noloops-weighted-float64": ("sum", torch.float64, False, 1.0, True),
}


@pytest.mark.parametrize("transpose", [False, True], ids=["forward", "transposed"])
@pytest.mark.parametrize("name", sorted(SPMM_OPTIONS))
def test_opcheck_spmm(name, transpose):
    reduce, gcn, self_loops, loop_weight, weighted = SPMM_OPTIONS[name]
    edge_index, x, weight = _opcheck_inputs(30, 30, 9, gcn or torch.float32)
    options = (30, 30, reduce, gcn, self_loops, loop_weight)
    torch.library.opcheck(torch.ops.fastgnn.pyg_spmm.default,
                          (edge_index, x, weight if weighted else None, *options, True,
                           transpose))
    if weighted:
        torch.library.opcheck(torch.ops.fastgnn.pyg_spmm_weight_backward.default,
                              (edge_index, torch.randn_like(x), x.detach(), weight.detach(),
                               *options, transpose))


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_opcheck_minmax(reduce):
    """On a bipartite block (30 sources, 20 destinations, some without in-edges)."""
    edge_index, x, _ = _opcheck_inputs(30, 20, 14)
    torch.library.opcheck(torch.ops.fastgnn.pyg_minmax.default,
                          (edge_index, x, 30, 20, reduce))
    out, arg = torch.ops.fastgnn.pyg_minmax(edge_index, x.detach(), 30, 20, reduce)
    torch.library.opcheck(torch.ops.fastgnn.pyg_minmax_backward.default,
                          (edge_index, arg, torch.randn_like(out), 30, 20))


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("op", ["gatv2_attention", "gat_attention", "graph_attention"])
def test_opcheck_attention(op, dropout):
    gen = torch.Generator().manual_seed(10)
    h = [torch.randn(30, 2, 4, generator=gen).requires_grad_() for _ in range(3)]
    if op == "gatv2_attention":
        h[2] = torch.randn(2, 4, generator=gen).requires_grad_()  # att
    if op == "gat_attention":  # alpha_dst, x_src, alpha_src
        h[0], h[2] = h[0][:, :, 0].detach().requires_grad_(), h[2][:, :, 0].detach() \
            .requires_grad_()
    edge_index = random_edge_index(30, 30, 120, seed=11)
    seed_tensor = torch.tensor([9]) if dropout else None
    torch.library.opcheck(torch.ops.fastgnn.pyg_attention.default,
                          (edge_index, *h, op, 0.2, op != "graph_attention", True, dropout,
                           seed_tensor))


@pytest.mark.parametrize("name", ["gcn", "sage", "gatv2", "transformer", "gcn-weighted",
                                  "graphconv-weighted", "sage-max"])
def test_autocast(name):
    eager, model = _models(name)
    inputs = _inputs(40, 200, seed=6, name=name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = _step(eager, *inputs), _step(compiled_model, *inputs)
    assert got[0].dtype == want[0].dtype
    # x feeds several bfloat16 linears: AOTAutograd sums their input gradients in another
    # order than eager autograd, which is torch's rounding, not the ops'.
    torch.testing.assert_close(got[1][0], want[1][0], rtol=2e-2, atol=5e-3)
    _assert_equal((got[0], got[1][1:]), (want[0], want[1][1:]), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["gcn", "gcn-weighted", "graphconv-weighted"])
def test_errors_are_the_eager_ones(name):
    """An edge_index naming a node that has no features, or edge weights one short: the
    ValueError eager mode raises."""
    eager, model = _models(name)
    x, edge_index, *weights = _inputs(40, 200, seed=7, name=name)
    if weights:
        weights = [weights[0][1:]]
    else:
        edge_index[0, 3] = 40
    torch._dynamo.reset()
    compiled_model = torch.compile(model, backend="aot_eager")
    with pytest.raises(ValueError) as expected:
        eager(x, edge_index, *weights)
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        compiled_model(x, edge_index, *weights)


def test_edge_features_compile_through_the_eager_structure():
    """Edge features keep the eager path (breaks, same results, with attention dropout under
    the same torch.manual_seed too)."""
    torch.manual_seed(0)
    layer = fastgnn.enable(pyg_nn.GATv2Conv(IN, 4, heads=HEADS, edge_dim=3, dropout=0.5))
    x, edge_index = _inputs(40, 200, seed=8)
    edge_attr = torch.randn(edge_index.size(1), 3)
    torch._dynamo.reset()
    compiled_layer = torch.compile(layer, backend="aot_eager")
    with fused_only():
        torch.manual_seed(1)
        want = layer(x, edge_index, edge_attr)
        torch.manual_seed(1)
        torch.testing.assert_close(compiled_layer(x, edge_index, edge_attr), want)


@pytest.mark.parametrize("name", sorted(DROPOUT_LAYERS))
def test_compiled_attention_dropout_equals_eager(name):
    """With aot_eager on the CPU the graph's seed draw (torch.randint on the CPU generator) is
    the eager call's host draw: under the same torch.manual_seed, equal outputs and gradients
    (the backward uses its forward's seed); the next call draws another mask."""
    eager, model = _models(name, layers=DROPOUT_LAYERS)
    x, edge_index = _inputs(40, 200, seed=1)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with fused_only():
        torch.manual_seed(5)
        want = _step(eager, x, edge_index)
        torch.manual_seed(5)
        _assert_equal(_step(compiled_model, x, edge_index), want, rtol=0, atol=0)
        assert not torch.equal(_step(compiled_model, x, edge_index)[0], want[0])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_attention_dropout_draws_a_new_mask_each_call(backend, device):
    """The seed is not a constant of the compiled graph: two calls drop different edges."""
    _, model = _models("gatv2", device, layers=DROPOUT_LAYERS)
    x, edge_index = _inputs(40, 200, seed=2, device=device)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend=backend)
    with fused_only():
        first, second = (_step(compiled_model, x, edge_index) for _ in range(2))
    assert not torch.equal(first[0], second[0])
    assert not torch.equal(first[1][0], second[1][0])
