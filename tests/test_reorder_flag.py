"""The opt-in reordering flag: ``Graph.reordered(method)`` and ``fastgnn.enable(model,
reorder=method)``. Every op on a flagged graph, forward and backward, equals the op on the
plain graph, in the caller's node and edge order; the internal order is checked to differ
from the identity, so that the comparisons can fail."""
from __future__ import annotations

import copy
import gc
import importlib
import importlib.util
import warnings
import weakref

import pytest
import torch

import fastgnn
from fastgnn import reordering
from fastgnn._adapter import _warned
from conftest import devices, load_dataset, random_edge_index, random_graph

METHODS = ["rcm", "degree", pytest.param("metis", marks=pytest.mark.skipif(
    importlib.util.find_spec("pymetis") is None, reason="pymetis is not installed"))]
HAS_PYG = importlib.util.find_spec("torch_geometric") is not None
needs_pyg = pytest.mark.skipif(not HAS_PYG, reason="torch_geometric is not installed")
pyg_nn = importlib.import_module("torch_geometric.nn") if HAS_PYG else None
F64 = torch.float64


def _rand(gen, *shape, device="cpu", grad=True):
    t = torch.randn(*shape, generator=gen, dtype=F64).to(device)
    return t.requires_grad_() if grad else t


def _op_cases(g, device, seed=0):
    """(name, run(graph, inputs), inputs): every op family, with its per-edge inputs."""
    gen = torch.Generator().manual_seed(seed)
    n, e, heads, dim = g.num_dst_nodes, g.num_edges, 2, 4
    x = _rand(gen, n, 8, device=device)
    weight = torch.rand(e, generator=gen, dtype=F64).to(device).requires_grad_()
    values = torch.rand(e, generator=gen, dtype=F64).to(device).requires_grad_()
    q, k, v = (_rand(gen, n, heads, dim, device=device) for _ in range(3))
    att = _rand(gen, heads, dim, device=device)
    term = _rand(gen, e, heads, dim, device=device)
    alpha_src, alpha_dst = _rand(gen, n, heads, device=device), _rand(gen, n, heads, device=device)
    alpha_edge = _rand(gen, e, heads, device=device)
    ops = fastgnn.ops
    cases = [(f"spmm norm={norm} reduce={reduce}",
              lambda g, i, norm=norm, reduce=reduce: ops.spmm(g, i[0], norm, i[1], reduce),
              [x, weight])
             for norm in ("none", "left", "right", "both") for reduce in ("sum", "mean")]
    cases += [
        ("spmm edge_values", lambda g, i: ops.spmm(g, i[0], edge_values=i[1]), [x, values]),
        ("aggregate mean", lambda g, i: ops.aggregate(g, i[0], "mean"), [x]),
        ("gatv2", lambda g, i: ops.gatv2_attention(g, *i[:3], edge_term=i[3]),
         [q, k, att, term]),
        ("gat", lambda g, i: ops.gat_attention(g, *i[:3], alpha_edge=i[3]),
         [k, alpha_src, alpha_dst, alpha_edge]),
        ("graph_attention", lambda g, i: ops.graph_attention(g, *i[:3], edge_term=i[3]),
         [q, k, v, term]),
        ("maxk_spmm", lambda g, i: ops.maxk_spmm(g, ops.maxk(i[0], 3), "both", i[1]),
         [x, weight]),
    ]
    return cases


def _forward_and_grads(run, g, inputs, seed=5):
    out = run(g, inputs)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed),
                           dtype=out.dtype).to(out.device)
    return [out] + list(torch.autograd.grad(out, inputs, grad_out))


def _assert_same(flagged_results, plain_results, name):
    for ours, theirs in zip(flagged_results, plain_results):
        torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=1e-10, msg=name)


def _assert_reorders(flagged):
    _, order = reordering.internal(flagged)
    assert not torch.equal(order.perm.cpu(), torch.arange(len(order))), "identity order"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("method", METHODS)
def test_every_op_equals_the_plain_graph(method, device):
    g, _ = random_graph(60, 400, seed=1, device=device)  # hub, loops, duplicates, isolated
    flagged = g.reordered(method)
    _assert_reorders(flagged)
    for name, run, inputs in _op_cases(g, device):
        _assert_same(_forward_and_grads(run, flagged, inputs),
                     _forward_and_grads(run, g, inputs), f"{method}: {name}")


def test_ops_on_cora():
    data = load_dataset("cora")
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    for method in ("rcm", "degree"):
        flagged = g.reordered(method)
        _assert_reorders(flagged)
        for name, run, inputs in _op_cases(g, "cpu", seed=2):
            _assert_same(_forward_and_grads(run, flagged, inputs),
                         _forward_and_grads(run, g, inputs), f"cora {method}: {name}")


def test_min_max_run_unreordered_with_one_warning():
    g, _ = random_graph(60, 400, seed=3)
    flagged = g.reordered("rcm")
    x = torch.randint(0, 3, (60, 5)).to(F64).requires_grad_()  # many ties
    _warned.clear()
    with pytest.warns(fastgnn.FallbackWarning, match="reorder='rcm' with reduce='max'"):
        out = fastgnn.ops.aggregate(flagged, x, "max")
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastgnn.FallbackWarning)  # once only
        again = fastgnn.ops.aggregate(flagged, x, "max")
    expected = fastgnn.ops.aggregate(g, x, "max")
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(torch.autograd.grad(again.sum(), x)[0],
                               torch.autograd.grad(expected.sum(), x)[0])
    with pytest.warns(fastgnn.FallbackWarning, match="reduce='min'"):
        torch.testing.assert_close(fastgnn.ops.aggregate(flagged, x, "min"),
                                   fastgnn.ops.aggregate(g, x, "min"))
    # with edge weights (ties among duplicate edges too): the same winners, both gradients
    w = torch.randint(-1, 2, (g.num_edges,)).to(F64).requires_grad_()
    for reduce in ("max", "min"):
        got = fastgnn.ops.aggregate(flagged, x, reduce, edge_weight=w)
        want = fastgnn.ops.aggregate(g, x, reduce, edge_weight=w)
        torch.testing.assert_close(got, want)
        for a, b in zip(torch.autograd.grad(got.sum(), (x, w)),
                        torch.autograd.grad(want.sum(), (x, w))):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kind", ["gatv2", "graph_attention"])
def test_attention_dropout_mask_in_caller_edge_order(kind):
    g, _ = random_graph(50, 300, seed=4)
    flagged = g.reordered("rcm")
    gen = torch.Generator().manual_seed(6)
    q, k, v = (_rand(gen, 50, 2, 4) for _ in range(3))
    term = _rand(gen, g.num_edges, 2, 4)
    p = 0.4
    op = fastgnn.ops.gatv2_attention if kind == "gatv2" else fastgnn.ops.graph_attention
    oracle = getattr(fastgnn.reference, kind if kind != "gatv2" else "gatv2_attention")
    third = k[0] if kind == "gatv2" else v
    torch.manual_seed(11)
    ours = op(flagged, q, k, third, dropout=p, edge_term=term)
    torch.manual_seed(11)
    seed, _, offset = fastgnn.ops.attention._draw_seed(p, torch.device("cpu"))
    mask = fastgnn.ops.attention.dropout_mask(flagged, 2, p, seed, offset)
    assert not torch.equal(mask, fastgnn.ops.attention.dropout_mask(g, 2, p, seed, offset))
    theirs = oracle(g, q, k, third, dropout=p, edge_term=term, dropout_mask=mask)
    grads = torch.autograd.grad(ours.sum(), [q, k, term])
    expected = torch.autograd.grad(theirs.sum(), [q, k, term])
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(grads, expected):
        torch.testing.assert_close(a, b)


def test_gradcheck_spmm_and_attention():
    g, _ = random_graph(12, 40, seed=7)
    flagged = g.reordered("rcm")
    _assert_reorders(flagged)
    gen = torch.Generator().manual_seed(8)
    x, weight = _rand(gen, 12, 3), torch.rand(g.num_edges, generator=gen, dtype=F64)
    weight.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w: fastgnn.ops.spmm(flagged, x, "both", w, "mean"), (x, weight))
    q, k = _rand(gen, 12, 2, 3), _rand(gen, 12, 2, 3)
    att, term = _rand(gen, 2, 3), _rand(gen, g.num_edges, 2, 3)
    assert torch.autograd.gradcheck(
        lambda q, k, a, t: fastgnn.ops.gatv2_attention(flagged, q, k, a, edge_term=t),
        (q, k, att, term))


def test_graph_api():
    g, _ = random_graph(40, 200, seed=9)
    flagged = g.reordered("degree")
    assert flagged.reordering == "degree" and g.reordering is None
    assert g.reordered("degree") is flagged and flagged.reordered("degree") is flagged
    assert flagged.reordered("rcm").reordering == "rcm"
    assert torch.equal(flagged.rowptr, g.rowptr) and torch.equal(flagged.col, g.col)
    assert "reordering='degree'" in repr(flagged)
    assert flagged.to("cpu") is flagged
    with pytest.raises(ValueError, match=r"method must be one of \('rcm', 'degree', 'metis'\)"):
        g.reordered("random")
    bipartite, _ = random_graph(30, 100, num_dst=20, seed=10)
    with pytest.raises(ValueError, match="reordered.*homogeneous"):
        bipartite.reordered("rcm")


def test_structure_and_order_die_with_the_graph():
    g, _ = random_graph(40, 200, seed=12)
    flagged = g.reordered("rcm")
    copy_graph, order = reordering.internal(flagged)
    refs = [weakref.ref(o) for o in (g, flagged, copy_graph, order)]
    del g, flagged, copy_graph, order
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_wrong_inputs_raise_the_plain_graphs_errors():
    g, _ = random_graph(30, 100, seed=13)
    flagged = g.reordered("rcm")
    for graph in (g, flagged):
        with pytest.raises(ValueError, match="x must have 30 rows"):
            fastgnn.ops.spmm(graph, torch.randn(29, 4))
        with pytest.raises(TypeError, match="x_src"):
            fastgnn.ops.gatv2_attention(graph, torch.randn(30, 2, 4),
                                        torch.randint(0, 3, (30, 2, 4)), torch.randn(2, 4))
        with pytest.raises(ValueError, match="edge_weight"):
            fastgnn.ops.spmm(graph, torch.randn(30, 4), edge_weight=torch.rand(3))


# ---- enabled PyG layers ------------------------------------------------------------------------
LAYERS = {
    "GCNConv": lambda: pyg_nn.GCNConv(8, 6),
    "GCNConv weighted": lambda: pyg_nn.GCNConv(8, 6, improved=True),
    "SAGEConv": lambda: pyg_nn.SAGEConv(8, 6),
    "GATConv": lambda: pyg_nn.GATConv(8, 3, heads=2, edge_dim=2),
    "GATv2Conv": lambda: pyg_nn.GATv2Conv(8, 3, heads=2, edge_dim=2),
    "TransformerConv": lambda: pyg_nn.TransformerConv(8, 3, heads=2, edge_dim=2, beta=True),
}


def _layer_inputs(name, num_nodes=40, seed=14):
    gen = torch.Generator().manual_seed(seed)
    ei = random_edge_index(num_nodes, num_nodes, 200, seed=seed)
    x = torch.randn(num_nodes, 8, generator=gen, dtype=F64).requires_grad_()
    if name == "GCNConv weighted":
        extra = torch.rand(ei.size(1), generator=gen, dtype=F64).requires_grad_()
    elif name in ("SAGEConv", "GCNConv"):
        extra = None
    else:
        extra = torch.randn(ei.size(1), 2, generator=gen, dtype=F64).requires_grad_()
    return x, ei, extra


def _run_layer(layer, x, ei, extra):
    out = layer(x, ei) if extra is None else layer(x, ei, extra)
    inputs = [x] + ([extra] if extra is not None else []) + list(layer.parameters())
    return [out] + list(torch.autograd.grad(out.square().sum(), inputs))


@needs_pyg
@pytest.mark.parametrize("method", ["rcm", "degree"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_enabled_layers_equal_without_reordering(name, method, monkeypatch):
    torch.manual_seed(0)
    stock = LAYERS[name]().double()
    plain = fastgnn.enable(copy.deepcopy(stock))
    flagged = fastgnn.enable(copy.deepcopy(stock), reorder=method)
    assert flagged.__dict__["_fastgnn_reorder"] == method
    assert list(flagged.state_dict()) == list(stock.state_dict())
    for key, value in flagged.state_dict().items():
        assert torch.equal(value, stock.state_dict()[key])
    built = []
    internal = reordering.internal
    monkeypatch.setattr(reordering, "internal", lambda g: built.append(g) or internal(g))
    x, ei, extra = _layer_inputs(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastgnn.FallbackWarning)
        ours = _run_layer(flagged, x, ei, extra)
    assert built and all(g.reordering == method for g in built)
    _assert_reorders(built[0])
    _assert_same(ours, _run_layer(plain, x, ei, extra), name)


@needs_pyg
def test_enable_settings_and_bad_values():
    model = torch.nn.Sequential(pyg_nn.SAGEConv(8, 8))
    fastgnn.enable(model, reorder="rcm")
    assert model[0].__dict__["_fastgnn_reorder"] == "rcm"
    fastgnn.enable(model)  # enabling again without reorder turns it off
    assert "_fastgnn_reorder" not in model[0].__dict__
    fastgnn.enable(model, reorder="degree")
    fastgnn.disable(model)
    assert "_fastgnn_reorder" not in model[0].__dict__
    with pytest.raises(ValueError, match=r"reorder must be one of \('rcm', 'degree', 'metis'\)"):
        fastgnn.enable(model, reorder="random")
    with pytest.raises(ValueError, match="reorder must be one of"):
        fastgnn.enable(model, reorder=True)


def _one_warning(match, run):
    _warned.clear()
    with pytest.warns(fastgnn.FallbackWarning, match=match):
        first = run()
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastgnn.FallbackWarning)
        second = run()
    torch.testing.assert_close(first, second)
    return first


@needs_pyg
def test_unsupported_graphs_fall_back_with_one_warning():
    from fastgnn.sampling.sampler import _SampledGraph

    torch.manual_seed(1)
    stock = pyg_nn.SAGEConv(8, 6).double()
    plain = fastgnn.enable(copy.deepcopy(stock))
    flagged = fastgnn.enable(copy.deepcopy(stock), reorder="rcm")
    gen = torch.Generator().manual_seed(15)
    x_src = torch.randn(40, 8, generator=gen, dtype=F64)
    x_dst = torch.randn(30, 8, generator=gen, dtype=F64)
    block = random_edge_index(40, 30, 150, seed=16)
    out = _one_warning("SAGEConv: reorder='rcm' on a bipartite graph",
                       lambda: flagged((x_src, x_dst), block))
    torch.testing.assert_close(out, plain((x_src, x_dst), block))
    g, _ = random_graph(40, 150, seed=17)
    sampled = _SampledGraph.of(g, ("test",))  # a mini-batch's graph: new every step
    out = _one_warning("on a sampled mini-batch graph", lambda: flagged(x_src, sampled))
    torch.testing.assert_close(out, plain(x_src, g))
    max_layer = fastgnn.enable(pyg_nn.SAGEConv(8, 6, aggr="max").double(), reorder="rcm")
    _one_warning("reduce='max'", lambda: max_layer(x_src, g))


@needs_pyg
def test_compiled_layer_runs_unreordered_with_one_warning():
    ei = random_edge_index(40, 40, 200, seed=18)
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(19))
    stock = pyg_nn.SAGEConv(8, 8)
    plain = fastgnn.enable(copy.deepcopy(stock))
    compiled = torch.compile(fastgnn.enable(stock, reorder="rcm"))
    torch.testing.assert_close(_one_warning("reorder='rcm' under torch.compile",
                                            lambda: compiled(x, ei)), plain(x, ei))


# ---- the zoo: --model.reorder ------------------------------------------------------------------
@needs_pyg
def test_zoo_model_reorders_without_touching_the_data(tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    cli = pytest.importorskip("fastgnn.zoo.cli")
    common = ["--data.num_nodes=80", "--data.num_classes=3", "--data.num_channels=8",
              "--model.backend=fastgnn", "--model.arch=gatv2", "--model.heads=2",
              "--trainer.default_root_dir", str(tmp_path), "--seed_everything=3"]
    plain = cli.ZooCLI(args=common, run=False)
    flagged = cli.ZooCLI(args=common + ["--model.reorder=rcm"], run=False)
    convs = [m for m in flagged.model.modules() if isinstance(m, pyg_nn.GATv2Conv)]
    assert convs and all(m.__dict__["_fastgnn_reorder"] == "rcm" for m in convs)
    flagged.datamodule.setup("fit")
    data = flagged.datamodule.data
    assert flagged.datamodule.reorder is None  # the data keep their order
    flagged.model.load_state_dict(plain.model.state_dict())
    for module in (plain.model, flagged.model):
        module.eval()
    built = []
    internal = reordering.internal
    monkeypatch.setattr(reordering, "internal", lambda g: built.append(g) or internal(g))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastgnn.FallbackWarning)
        ours = flagged.model(data)
    assert built
    _assert_reorders(built[0])
    torch.testing.assert_close(ours, plain.model(data), atol=1e-5, rtol=1e-5)
