"""torch.compile of enabled PyG models: one graph with no break, results equal to eager
(forward and gradients), and the structure looked up per call (another graph, an in-place
change of edge_index); attention dropout draws its seed in the graph, a new one each call."""
from __future__ import annotations

import copy
import re

import pytest
import torch

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fastgnn  # noqa: E402
import fastgnn.pyg as fpyg  # noqa: E402
from fastgnn.pyg import compiled  # noqa: E402
from conftest import devices, random_edge_index  # noqa: E402
from pyg_cases import fused_only  # noqa: E402

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="torch < 2.4 or no native ops")

IN, HIDDEN, HEADS = 8, 16, 2
LAYERS = {
    "gcn": lambda i, o: pyg_nn.GCNConv(i, o),
    "gcn-noloops": lambda i, o: pyg_nn.GCNConv(i, o, add_self_loops=False),
    "sage": lambda i, o: pyg_nn.SAGEConv(i, o),
    "sage-sum-project": lambda i, o: pyg_nn.SAGEConv(i, o, aggr="sum", project=True),
    "gin": lambda i, o: pyg_nn.GINConv(torch.nn.Linear(i, o), train_eps=True),
    "graphconv-mean": lambda i, o: pyg_nn.GraphConv(i, o, aggr="mean"),
    "gatv2": lambda i, o: pyg_nn.GATv2Conv(i, o // HEADS, heads=HEADS),
    "gat": lambda i, o: pyg_nn.GATConv(i, o // HEADS, heads=HEADS),
    "transformer": lambda i, o: pyg_nn.TransformerConv(i, o // HEADS, heads=HEADS),
}


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

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = torch.relu(conv(x, edge_index))
        return x


def _models(name, device="cpu", layers=LAYERS):
    torch.manual_seed(0)
    eager = fastgnn.enable(Model(layers[name])).to(device)
    return eager, copy.deepcopy(eager)


def _inputs(num_nodes, num_edges, seed, device="cpu"):
    x = torch.randn(num_nodes, IN, generator=torch.Generator().manual_seed(seed)).to(device)
    return x, random_edge_index(num_nodes, num_nodes, num_edges, seed=seed, device=device)


def _step(model, x, edge_index):
    """The output and the gradients of x and of every parameter."""
    x = x.detach().clone().requires_grad_()
    out = model(x, edge_index)
    (out * torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out)).sum().backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


def _assert_equal(got, want, **tolerance):
    torch.testing.assert_close(got[0], want[0], **tolerance)
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, **tolerance)


@pytest.mark.parametrize("layers", [LAYERS, DROPOUT_LAYERS], ids=["", "dropout"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_no_graph_break(name, layers):
    if name not in layers:
        pytest.skip("no attention dropout")
    model, _ = _models(name, layers=layers)
    x, edge_index = _inputs(40, 200, seed=0)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x, edge_index)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), \
        [reason.reason for reason in explained.break_reasons]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_compiled_equals_eager(name, device):
    """Same kernels on the same cached structures: equal, not only close (aot_eager keeps
    torch's own ops). The second call builds nothing: the compiled code hands the ops the
    caller's edge_index, forward and backward, so the cache hits."""
    eager, model = _models(name, device)
    x, edge_index = _inputs(40, 200, seed=1, device=device)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with fused_only():
        want = _step(eager, x, edge_index)
        _assert_equal(_step(compiled_model, x, edge_index), want, rtol=0, atol=0)
        builds = fpyg.structure_cache.builds
        _assert_equal(_step(compiled_model, x, edge_index), want, rtol=0, atol=0)
    assert fpyg.structure_cache.builds == builds


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_compiled_matches_stock_pyg(name):
    """The compiled enabled model against the stock PyG model it was made from, in float64:
    forward and every gradient."""
    torch.manual_seed(0)
    stock = Model(LAYERS[name]).double()
    model = fastgnn.enable(copy.deepcopy(stock))
    x, edge_index = _inputs(40, 200, seed=2)
    x = x.double()
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with fused_only():
        _assert_equal(_step(compiled_model, x, edge_index), _step(stock, x, edge_index),
                      rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["gcn", "sage", "gatv2"])
def test_other_graphs_and_in_place_changes(name):
    """Each call sees its own edge_index: another graph of another size (a recompile at
    most, never a stale structure), then the first one changed in place."""
    eager, model = _models(name)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    first, second, third = _inputs(40, 200, seed=2), _inputs(57, 310, seed=3), \
        _inputs(33, 150, seed=4)
    for x, edge_index in (first, second, third, first):
        _assert_equal(_step(compiled_model, x, edge_index), _step(eager, x, edge_index),
                      rtol=0, atol=0)
    x, edge_index = first
    edge_index[:, :60] = edge_index[:, :60].flip(0)  # reverse some edges in place
    _assert_equal(_step(compiled_model, x, edge_index), _step(eager, x, edge_index),
                  rtol=0, atol=0)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["gcn", "sage", "gatv2", "transformer"])
def test_inductor_matches_eager(name, device):
    """Inductor fuses torch's ops around fastgnn's (close, not equal); its compiled code also
    hands the ops the caller's edge_index (no rebuild on the second call)."""
    eager, model = _models(name, device)
    x, edge_index = _inputs(40, 200, seed=5, device=device)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True)
    for _ in range(2):
        builds = fpyg.structure_cache.builds
        _assert_equal(_step(compiled_model, x, edge_index), _step(eager, x, edge_index),
                      rtol=1e-5, atol=1e-6)
    assert fpyg.structure_cache.builds == builds


@pytest.mark.parametrize("args", [
    ("sum", None, False), ("mean", None, False), ("sum", torch.float32, True),
    ("sum", torch.float64, False)], ids=["sum", "mean", "gcn", "gcn-noloops-float64"])
def test_opcheck_spmm(args):
    x = torch.randn(30, 5, dtype=args[1] or torch.float32, requires_grad=True)
    edge_index = random_edge_index(30, 30, 120, seed=9)
    torch.library.opcheck(torch.ops.fastgnn.pyg_spmm.default,
                          (edge_index, x, 30, 30, *args, True, False))


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


@pytest.mark.parametrize("name", ["gcn", "sage", "gatv2", "transformer"])
def test_autocast(name):
    eager, model = _models(name)
    x, edge_index = _inputs(40, 200, seed=6)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = _step(eager, x, edge_index), _step(compiled_model, x, edge_index)
    assert got[0].dtype == want[0].dtype
    # x feeds several bfloat16 linears: AOTAutograd sums their input gradients in another
    # order than eager autograd, which is torch's rounding, not the ops'.
    torch.testing.assert_close(got[1][0], want[1][0], rtol=2e-2, atol=5e-3)
    _assert_equal((got[0], got[1][1:]), (want[0], want[1][1:]), rtol=0, atol=0)


def test_errors_are_the_eager_ones():
    """An edge_index naming a node that has no features: the ValueError eager mode raises."""
    eager, model = _models("gcn")
    x, edge_index = _inputs(40, 200, seed=7)
    edge_index[0, 3] = 40
    torch._dynamo.reset()
    compiled_model = torch.compile(model, backend="aot_eager")
    with pytest.raises(ValueError) as expected:
        eager(x, edge_index)
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        compiled_model(x, edge_index)


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
