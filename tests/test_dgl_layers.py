"""fastgnn.dgl.nn layers against the stock DGL layers they replace: outputs and every gradient
(inputs and parameters), on homogeneous, bipartite and block graphs, int64 and int32 ids."""
from __future__ import annotations

import copy
import io

import pytest
import torch

dgl = pytest.importorskip("dgl")

import fastgnn  # noqa: E402
import fastgnn.dgl.nn as fnn  # noqa: E402
from dgl_cases import (GRAPH_KINDS, assert_close, exact_grads, grads, libxsmm,  # noqa: E402
                       make_graph, no_fallback, node_counts, tied_leaves, with_shuffled_twins)

IN, OUT, HEADS = 12, 6, 3


def is_bipartite(graph) -> bool:
    """A graph on two node types that is not a block: layers take a feature pair."""
    return not graph.is_block and graph.num_src_nodes() != graph.num_dst_nodes()


@pytest.fixture(autouse=True)
def _fresh_warnings():
    from fastgnn import _adapter
    _adapter._warned.clear()
    yield


def _features(graph, width=IN, pair=False, seed=0, dtype=torch.float32):
    """The layer input for ``graph``: a pair on bipartite graphs (or when asked)."""
    gen = torch.Generator().manual_seed(seed)
    num_src, num_dst = node_counts(graph)
    pair = pair or is_bipartite(graph)
    src = torch.randn(num_src, width, generator=gen, dtype=dtype).requires_grad_()
    if not pair:
        return src, [src]
    dst = torch.randn(num_dst, width, generator=gen, dtype=dtype).requires_grad_()
    return (src, dst), [src, dst]


def check_layer(stock: torch.nn.Module, graph, feat, leaves, *args, fused=True, seed=0,
                **kwargs):
    """Runs the stock layer and an enabled deep copy on the same inputs; compares the output
    and the gradients of every input and parameter."""
    fast = fastgnn.enable(copy.deepcopy(stock))
    assert type(fast) is not type(stock) and isinstance(fast, type(stock))
    torch.manual_seed(seed)
    want = stock(graph, feat, *args, **kwargs)
    torch.manual_seed(seed)
    if fused:
        with no_fallback():
            got = fast(graph, feat, *args, **kwargs)
    else:
        with pytest.warns(fnn.FallbackWarning):
            got = fast(graph, feat, *args, **kwargs)
    assert got.shape == want.shape
    extra = [a for a in list(args) + list(kwargs.values())
             if isinstance(a, torch.Tensor) and a.requires_grad]
    assert_close(got, want)
    stock_params = [p for p in stock.parameters() if p.requires_grad]
    fast_params = [p for p in fast.parameters() if p.requires_grad]
    for g_fast, g_stock in zip(grads(got, leaves + extra + fast_params),
                               grads(want, leaves + extra + stock_params)):
        assert_close(g_fast, g_stock)
    return fast


# ---- GraphConv ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("norm", ["both", "right", "left", "none"])
@pytest.mark.parametrize("in_out", [(IN, OUT), (OUT, IN)])  # W before / after the aggregation
def test_graphconv(kind, norm, in_out):
    graph = make_graph(kind)
    torch.manual_seed(0)
    stock = dgl.nn.GraphConv(*in_out, norm=norm, allow_zero_in_degree=True,
                             activation=torch.relu)
    feat, leaves = _features(graph, in_out[0])
    check_layer(stock, graph, feat, leaves)


@pytest.mark.parametrize("kind", ["homogeneous", "block-int32", "bipartite"])
@pytest.mark.parametrize("shape", [(), (1,)])
def test_graphconv_edge_weight(kind, shape):
    graph = make_graph(kind, seed=1)
    torch.manual_seed(0)
    stock = dgl.nn.GraphConv(IN, OUT, norm="both", bias=False, allow_zero_in_degree=True)
    feat, leaves = _features(graph)
    edge_weight = torch.rand((graph.num_edges(),) + shape).requires_grad_()
    check_layer(stock, graph, feat, leaves, edge_weight=edge_weight)


def test_graphconv_external_weight():
    graph = make_graph("homogeneous")
    stock = dgl.nn.GraphConv(IN, OUT, weight=False, allow_zero_in_degree=True)
    feat, leaves = _features(graph)
    weight = torch.randn(IN, OUT).requires_grad_()
    check_layer(stock, graph, feat, leaves, weight=weight)
    with_weight = fastgnn.enable(dgl.nn.GraphConv(IN, OUT, allow_zero_in_degree=True))
    with pytest.raises(dgl.DGLError, match="External weight"):
        with_weight(graph, feat, weight=weight)


def test_zero_in_degree_error_stays():
    graph = make_graph("homogeneous")
    for layer in (dgl.nn.GraphConv(IN, OUT), dgl.nn.GATConv(IN, OUT, HEADS),
                  dgl.nn.GATv2Conv(IN, OUT, HEADS), dgl.nn.DotGatConv(IN, OUT, HEADS)):
        fast = fastgnn.enable(layer)
        with pytest.raises(dgl.DGLError, match="0-in-degree"):
            fast(graph, torch.randn(60, IN))
    # and without 0-in-degree nodes the default layer runs fused
    looped = dgl.add_self_loop(dgl.remove_self_loop(graph))
    torch.manual_seed(0)
    feat, leaves = _features(looped)
    check_layer(dgl.nn.GraphConv(IN, OUT), looped, feat, leaves)


# ---- SAGEConv ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("aggregator", ["mean", "gcn", "pool"])
@pytest.mark.parametrize("in_out", [(IN, OUT), (OUT, IN)])
def test_sageconv(kind, aggregator, in_out):
    graph = make_graph(kind, seed=2)
    torch.manual_seed(0)
    stock = dgl.nn.SAGEConv(in_out[0], in_out[1], aggregator, activation=torch.tanh,
                            norm=torch.nn.LayerNorm(in_out[1]))
    feat, leaves = _features(graph, in_out[0])
    check_layer(stock, graph, feat, leaves)


@pytest.mark.parametrize("aggregator", ["mean", "gcn", "pool"])
def test_sageconv_edge_weight_and_feat_drop(aggregator):
    graph = make_graph("block", seed=3)
    torch.manual_seed(0)
    stock = dgl.nn.SAGEConv(IN, OUT, aggregator, feat_drop=0.3).train()
    feat, leaves = _features(graph)
    edge_weight = torch.rand(graph.num_edges()).requires_grad_()
    check_layer(stock, graph, feat, leaves, edge_weight=edge_weight)


def test_sageconv_fallbacks_match_dgl():
    graph = make_graph("homogeneous", seed=4)
    torch.manual_seed(0)
    feat, leaves = _features(graph)
    check_layer(dgl.nn.SAGEConv(IN, OUT, "lstm"), graph, feat, leaves, fused=False,
                edge_weight=torch.rand(graph.num_edges()))


def test_sageconv_fallback_in_training_draws_dgls_dropout():
    """Nothing random is drawn before the fallback decision: the masks are DGL's."""
    graph = make_graph("homogeneous", seed=4)
    torch.manual_seed(0)
    feat, leaves = _features(graph)
    check_layer(dgl.nn.SAGEConv(IN, OUT, "lstm", feat_drop=0.5).train(), graph, feat, leaves,
                fused=False, seed=3, edge_weight=torch.rand(graph.num_edges()))


# ---- GINConv -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("aggregator", ["sum", "mean", "max"])
@pytest.mark.parametrize("learn_eps", [False, True])
def test_ginconv(kind, aggregator, learn_eps):
    graph = make_graph(kind, seed=5)
    torch.manual_seed(0)
    stock = dgl.nn.GINConv(torch.nn.Linear(IN, OUT), aggregator, init_eps=0.25,
                           learn_eps=learn_eps, activation=torch.relu)
    feat, leaves = _features(graph)
    check_layer(stock, graph, feat, leaves)


@pytest.mark.parametrize("aggregator", ["sum", "mean", "max"])
@pytest.mark.parametrize("kind", ["bipartite", "block-int32"])
def test_ginconv_edge_weight(aggregator, kind):
    graph = make_graph(kind, seed=6)
    stock = dgl.nn.GINConv(None, aggregator)
    feat, leaves = _features(graph)
    edge_weight = torch.randn(graph.num_edges(), 1).requires_grad_()  # signs: max and min mix
    check_layer(stock, graph, feat, leaves, edge_weight=edge_weight)


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("layer", ["gin-max", "sage-pool"])
@pytest.mark.parametrize("edge_weight_shape", [None, (), (1,)])
@pytest.mark.parametrize("width", [IN, 1])
@pytest.mark.parametrize("use_libxsmm", [True, False])
def test_max_layers_keep_dgls_tied_message(kind, layer, edge_weight_shape, width, use_libxsmm):
    """GINConv(max) and SAGEConv(pool) on ReLU'd small integers (SAGEConv's parameters small
    integers too, so every sum is exact): many equal messages, duplicate edges, edge ids out of
    source order. The output and the gradients of the features, the edge weights and the
    parameters are DGL's, bit for bit, whichever of its kernels (first or last equal message)
    DGL runs."""
    graph = with_shuffled_twins(make_graph(kind, seed=7), seed=8)
    num_src, num_dst = node_counts(graph)
    pair = is_bipartite(graph)
    feat_leaves = tied_leaves(*([(num_src, width)] + ([(num_dst, width)] if pair else [])),
                              seed=9)
    feat = tuple(feat_leaves) if pair else feat_leaves[0]
    if layer == "gin-max":
        stock = dgl.nn.GINConv(None, "max")
    else:
        stock = dgl.nn.SAGEConv(width, OUT, "pool")
        gen = torch.Generator().manual_seed(11)
        with torch.no_grad():
            for param in stock.parameters():
                param.copy_(torch.randint(-1, 2, param.shape, generator=gen))
            stock.fc_pool.weight.abs_().diagonal().fill_(1)  # pooled features mostly above 0
    fast = fastgnn.enable(copy.deepcopy(stock))
    kwargs = {}
    if edge_weight_shape is not None:  # weights of 1 and 2: equal and unequal twins
        kwargs["edge_weight"] = tied_leaves((graph.num_edges(),) + edge_weight_shape, seed=10,
                                            low=1)[0]
    with libxsmm(use_libxsmm):
        want = stock(graph, feat, **kwargs)
        with no_fallback():
            got = fast(graph, feat, **kwargs)
    assert torch.equal(got, want)
    extra = list(kwargs.values())
    got_grads = exact_grads(got, feat_leaves + extra + list(fast.parameters()))
    want_grads = exact_grads(want, feat_leaves + extra + list(stock.parameters()))
    for g_fast, g_stock in zip(got_grads, want_grads):
        assert torch.equal(g_fast, g_stock)


# ---- attention ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("share_weights", [False, True])
def test_gatv2conv(kind, residual, share_weights):
    graph = make_graph(kind, seed=7)
    torch.manual_seed(0)
    in_feats = (IN, IN + 2) if is_bipartite(graph) else IN
    stock = dgl.nn.GATv2Conv(in_feats, OUT, HEADS, negative_slope=0.1, residual=residual,
                             share_weights=share_weights, allow_zero_in_degree=True,
                             activation=torch.nn.functional.elu)
    if isinstance(in_feats, tuple):
        gen = torch.Generator().manual_seed(0)
        src = torch.randn(graph.num_src_nodes(), IN, generator=gen).requires_grad_()
        dst = torch.randn(graph.num_dst_nodes(), IN + 2, generator=gen).requires_grad_()
        check_layer(stock, graph, (src, dst), [src, dst])
    else:
        feat, leaves = _features(graph)
        check_layer(stock, graph, feat, leaves)


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("residual,bias", [(False, True), (True, True), (True, False)])
def test_gatconv(kind, residual, bias):
    graph = make_graph(kind, seed=8)
    torch.manual_seed(0)
    bipartite = is_bipartite(graph)
    in_feats = (IN, IN + 2) if bipartite else IN
    stock = dgl.nn.GATConv(in_feats, OUT, HEADS, negative_slope=0.3, residual=residual,
                           bias=bias, allow_zero_in_degree=True)
    if bipartite:
        gen = torch.Generator().manual_seed(0)
        src = torch.randn(graph.num_src_nodes(), IN, generator=gen).requires_grad_()
        dst = torch.randn(graph.num_dst_nodes(), IN + 2, generator=gen).requires_grad_()
        check_layer(stock, graph, (src, dst), [src, dst])
    else:
        feat, leaves = _features(graph)
        check_layer(stock, graph, feat, leaves)


def test_gatconv_shared_projection_on_a_pair():
    graph = make_graph("bipartite", seed=9)
    stock = dgl.nn.GATConv(IN, OUT, HEADS, allow_zero_in_degree=True)
    feat, leaves = _features(graph, pair=True)
    check_layer(stock, graph, feat, leaves)


@pytest.mark.parametrize("kind", GRAPH_KINDS)
def test_dotgatconv(kind):
    graph = make_graph(kind, seed=10)
    torch.manual_seed(0)
    bipartite = is_bipartite(graph)
    stock = dgl.nn.DotGatConv((IN, IN) if bipartite else IN, OUT, HEADS,
                              allow_zero_in_degree=True)
    feat, leaves = _features(graph, pair=bipartite)
    check_layer(stock, graph, feat, leaves)


@pytest.mark.parametrize("layer_cls", ["GATConv", "GATv2Conv"])
def test_feat_drop_matches_in_training(layer_cls):
    graph = make_graph("homogeneous", seed=11)
    torch.manual_seed(0)
    stock = getattr(dgl.nn, layer_cls)(IN, OUT, HEADS, feat_drop=0.4,
                                       allow_zero_in_degree=True).train()
    feat, leaves = _features(graph)
    check_layer(stock, graph, feat, leaves, seed=5)


@pytest.mark.parametrize("layer_cls", ["GATConv", "GATv2Conv"])
def test_attn_drop(layer_cls):
    """Attention dropout draws fastgnn's own mask, so single training runs differ from DGL's:
    in eval mode the layers agree, and in training the outputs average to DGL's eval output
    (inverted dropout keeps the expectation)."""
    graph = make_graph("homogeneous", seed=12)
    torch.manual_seed(0)
    stock = getattr(dgl.nn, layer_cls)(IN, OUT, HEADS, attn_drop=0.5,
                                       allow_zero_in_degree=True).eval()
    feat, leaves = _features(graph)
    fast = check_layer(stock, graph, feat, leaves)
    fast.train()
    torch.manual_seed(0)  # both backends draw their masks from torch's generator
    with no_fallback():
        runs = torch.stack([fast(graph, feat).detach() for _ in range(300)])
    assert not torch.equal(runs[0], runs[1])
    # inverted dropout keeps the expectation: the mean is within 5 standard errors of DGL's
    want = stock(graph, feat).detach()
    error = (runs.mean(0) - want).abs()
    assert bool((error <= 5 * runs.std(0) / len(runs) ** 0.5 + 1e-4).all())


def test_dotgatconv_pair_for_one_node_type_gets_dgls_error():
    graph = make_graph("bipartite")
    fast = fastgnn.enable(dgl.nn.DotGatConv(IN, OUT, HEADS, allow_zero_in_degree=True))
    (src, dst), _ = _features(graph, pair=True)
    with pytest.raises(AttributeError, match="fc_src"):
        fast(graph, (src, dst))


def test_get_attention_and_edge_weight_fall_back():
    graph = make_graph("homogeneous", seed=13)
    feat, leaves = _features(graph)
    torch.manual_seed(0)
    stock = dgl.nn.GATv2Conv(IN, OUT, HEADS, allow_zero_in_degree=True)
    fast = fastgnn.enable(copy.deepcopy(stock))
    with pytest.warns(fnn.FallbackWarning, match="get_attention"):
        out, attention = fast(graph, feat, get_attention=True)
    want, want_attention = stock(graph, feat, get_attention=True)
    assert torch.equal(out, want) and torch.equal(attention, want_attention)
    gat = dgl.nn.GATConv(IN, OUT, HEADS, allow_zero_in_degree=True)
    check_layer(gat, graph, feat, leaves, fused=False,
                edge_weight=torch.rand(graph.num_edges()))


# ---- EdgeWeightNorm ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["homogeneous", "block-int32", "bipartite"])
@pytest.mark.parametrize("norm", ["both", "right", "left", "none"])
def test_edge_weight_norm(kind, norm):
    graph = make_graph(kind, seed=14)
    stock = dgl.nn.EdgeWeightNorm(norm, eps=0.1)
    fast = fastgnn.enable(copy.deepcopy(stock))
    weight = (torch.rand(graph.num_edges()) + 0.1).requires_grad_()
    with no_fallback():
        got = fast(graph, weight)
    want = stock(graph, weight)
    assert_close(got, want)
    assert_close(*[torch.autograd.grad(out.sum(), weight)[0] for out in (got, want)])
    with pytest.raises(dgl.DGLError):
        fast(graph, -weight.detach() if norm == "both" else weight.detach().view(-1, 1))


# ---- shared behaviour --------------------------------------------------------------------------
def _stock_layers():
    return [dgl.nn.GraphConv(IN, OUT, allow_zero_in_degree=True),
            dgl.nn.SAGEConv(IN, OUT, "pool"), dgl.nn.GINConv(torch.nn.Linear(IN, OUT), "max",
                                                             learn_eps=True),
            dgl.nn.GATConv(IN, OUT, HEADS, residual=True, allow_zero_in_degree=True),
            dgl.nn.GATv2Conv(IN, OUT, HEADS, residual=True, allow_zero_in_degree=True),
            dgl.nn.DotGatConv(IN, OUT, HEADS, allow_zero_in_degree=True)]


@pytest.mark.parametrize("index", range(6))
def test_state_dict_round_trip(index):
    torch.manual_seed(0)
    stock = _stock_layers()[index]
    fast = fastgnn.enable(copy.deepcopy(stock))
    assert list(fast.state_dict()) == list(stock.state_dict())
    buffer = io.BytesIO()
    torch.save(fast.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(1)
    fresh = fastgnn.enable(_stock_layers()[index])
    fresh.load_state_dict(torch.load(buffer))
    graph = make_graph("homogeneous")
    x = torch.randn(60, IN)
    torch.testing.assert_close(fresh(graph, x), stock(graph, x), rtol=1e-4, atol=1e-5)
    back = fastgnn.disable(fresh)
    assert type(back) is type(stock)
    torch.testing.assert_close(back(graph, x), stock(graph, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("index", range(6))
def test_training_after_an_inference_mode_call_on_the_same_graph(index):
    """An evaluation under torch.inference_mode, then a training step on the same DGLGraph:
    the fastgnn.Graph derived and cached during the evaluation must serve the backward."""
    torch.manual_seed(0)
    stock = _stock_layers()[index]
    fast = fastgnn.enable(copy.deepcopy(stock))
    graph = make_graph("homogeneous")
    x = torch.randn(60, IN)
    with torch.inference_mode():
        fast(graph, x)
    xs, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_s, out_f = stock(graph, xs), fast(graph, xf)
    torch.testing.assert_close(out_f, out_s, rtol=1e-4, atol=1e-5)
    grad = torch.randn_like(out_s)
    out_s.backward(grad)
    out_f.backward(grad)
    torch.testing.assert_close(xf.grad, xs.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [lambda: dgl.nn.GINConv(None, "sum"),
                                  lambda: dgl.nn.GraphConv(IN, OUT, norm="right",
                                                           allow_zero_in_degree=True),
                                  lambda: dgl.nn.SAGEConv(IN, OUT, "mean")],
                         ids=["gin", "graphconv", "sage-mean"])
def test_edge_weight_wider_than_the_features_runs_dgl(make):
    """DGL broadcasts an [E, 1, 1] weight against 2-D features into a wider output: that is
    DGL's code, with the warning, not a silently narrower fused result."""
    torch.manual_seed(0)
    stock = make()
    fast = fastgnn.enable(copy.deepcopy(stock))
    graph = make_graph("homogeneous")
    x = torch.randn(60, IN)
    weight = torch.rand(graph.num_edges(), 1, 1)
    with pytest.warns(fnn.FallbackWarning, match="edge_weight of shape"):
        out = fast(graph, x, edge_weight=weight)
    torch.testing.assert_close(out, stock(graph, x, edge_weight=weight))


@pytest.mark.parametrize("make", [
    lambda: dgl.nn.GATConv((IN, IN), OUT, HEADS, allow_zero_in_degree=True),
    lambda: dgl.nn.DotGatConv((IN, IN), OUT, HEADS, allow_zero_in_degree=True)],
    ids=["gat", "dotgat"])
def test_layer_built_for_a_pair_given_one_tensor_raises_dgls_error(make):
    stock = make()
    fast = fastgnn.enable(copy.deepcopy(stock))
    graph = make_graph("homogeneous")
    x = torch.randn(60, IN)
    with pytest.raises(AttributeError) as stock_error:
        stock(graph, x)
    with pytest.raises(AttributeError) as fast_error:
        fast(graph, x)
    assert str(fast_error.value) == str(stock_error.value)


@pytest.mark.parametrize("make", [
    lambda: dgl.nn.GraphConv(IN, OUT, norm="right", allow_zero_in_degree=True),
    lambda: dgl.nn.SAGEConv(IN, OUT, "mean"),
    lambda: dgl.nn.GINConv(torch.nn.Linear(IN, OUT), "max")], ids=["graphconv", "sage", "gin"])
def test_layers_on_a_graph_restricted_to_csc(make):
    """The layers DGL runs on a graph that allows CSC only (the others need its out-degrees
    or SDDMM, which DGL refuses there)."""
    torch.manual_seed(0)
    stock = make()
    fast = fastgnn.enable(copy.deepcopy(stock))
    graph = make_graph("homogeneous").formats("csc")
    x = torch.randn(60, IN)
    torch.testing.assert_close(fast(graph, x), stock(graph, x), rtol=1e-4, atol=1e-5)


def test_mixed_feature_dtypes_raise_type_error():
    graph = make_graph("bipartite")
    (src, dst), _ = _features(graph, pair=True)
    gin = fastgnn.enable(dgl.nn.GINConv(None, "sum"))
    with pytest.raises(TypeError, match=r"feat\[1\] has dtype torch.float64"):
        gin(graph, (src, dst.double()))
    conv = fastgnn.enable(dgl.nn.GraphConv(IN, OUT, allow_zero_in_degree=True))
    with pytest.raises(TypeError, match="edge_weight has dtype torch.float64"):
        conv(graph, (src, dst), edge_weight=torch.rand(graph.num_edges(), dtype=torch.float64))


def test_jit_script_names_fastgnn():
    layer = fastgnn.enable(dgl.nn.GraphConv(IN, OUT))
    with pytest.raises(RuntimeError, match="fastgnn.dgl.nn.GraphConv.*torch.compile"):
        torch.jit.script(layer)
    with pytest.raises(RuntimeError, match="fastgnn.dgl.nn.GATv2Conv"):
        torch.jit.script(torch.nn.Sequential(fastgnn.enable(dgl.nn.GATv2Conv(IN, OUT, 2))))


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_backend_choice(backend):
    graph = make_graph("block")
    torch.manual_seed(0)
    stock = dgl.nn.GATv2Conv(IN, OUT, HEADS, allow_zero_in_degree=True)
    fast = fastgnn.enable(copy.deepcopy(stock), backend=backend)
    feat, leaves = _features(graph)
    with no_fallback():
        assert_close(fast(graph, feat), stock(graph, feat))


# ---- accuracy against float64 ------------------------------------------------------------------
def _gin_mlp(width=32):
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width))


# name: (stock layer, whether the call takes a per-edge weight)
ACCURACY_LAYERS = {
    "GATv2Conv": (lambda: dgl.nn.GATv2Conv(32, 16, 2, allow_zero_in_degree=True), False),
    "GATConv": (lambda: dgl.nn.GATConv(32, 16, 2, allow_zero_in_degree=True), False),
    "DotGatConv": (lambda: dgl.nn.DotGatConv(32, 16, 2, allow_zero_in_degree=True), False),
    "GraphConv": (lambda: dgl.nn.GraphConv(32, 32, allow_zero_in_degree=True), False),
    "GraphConv-narrowing": (lambda: dgl.nn.GraphConv(32, 16, allow_zero_in_degree=True),
                            False),
    "GraphConv-right": (lambda: dgl.nn.GraphConv(32, 32, norm="right",
                                                 allow_zero_in_degree=True), False),
    "GraphConv-left": (lambda: dgl.nn.GraphConv(32, 32, norm="left",
                                                allow_zero_in_degree=True), False),
    "GraphConv-none-weighted": (lambda: dgl.nn.GraphConv(32, 32, norm="none",
                                                         allow_zero_in_degree=True), True),
    "GraphConv-both-weighted": (lambda: dgl.nn.GraphConv(32, 32, allow_zero_in_degree=True),
                                True),
    "EdgeWeightNorm-both": (lambda: dgl.nn.EdgeWeightNorm("both"), True),
    "EdgeWeightNorm-right": (lambda: dgl.nn.EdgeWeightNorm("right"), True),
    "SAGEConv-pool": (lambda: dgl.nn.SAGEConv(32, 32, "pool"), False),
    "SAGEConv-mean": (lambda: dgl.nn.SAGEConv(32, 32, "mean"), False),
    "SAGEConv-mean-narrowing": (lambda: dgl.nn.SAGEConv(32, 16, "mean"), False),
    "SAGEConv-mean-weighted": (lambda: dgl.nn.SAGEConv(32, 32, "mean"), True),
    "SAGEConv-gcn": (lambda: dgl.nn.SAGEConv(32, 32, "gcn"), False),
    "SAGEConv-gcn-narrowing": (lambda: dgl.nn.SAGEConv(32, 16, "gcn"), False),
    "SAGEConv-gcn-weighted": (lambda: dgl.nn.SAGEConv(32, 32, "gcn"), True),
    "GINConv-sum": (lambda: dgl.nn.GINConv(_gin_mlp(), "sum", learn_eps=True), False),
    "GINConv-sum-weighted": (lambda: dgl.nn.GINConv(_gin_mlp(), "sum", learn_eps=True), True),
    "GINConv-mean": (lambda: dgl.nn.GINConv(_gin_mlp(), "mean", learn_eps=True), False),
    "GINConv-mean-weighted": (lambda: dgl.nn.GINConv(None, "mean"), True),
    "GINConv-max": (lambda: dgl.nn.GINConv(_gin_mlp(), "max", learn_eps=True), False),
    "GINConv-max-weighted": (lambda: dgl.nn.GINConv(None, "max"), True),
    "SAGEConv-pool-weighted": (lambda: dgl.nn.SAGEConv(32, 32, "pool"), True),
}


def _check_accuracy(name, graph):
    """Against a float64 run of the stock layer, the enabled layer's float32 output and every
    input and parameter gradient are off by at most twice as much as the stock float32
    layer's (issue 16)."""
    from _accuracy import assert_within_twice_stock

    make, weighted = ACCURACY_LAYERS[name]
    gen = torch.Generator().manual_seed(5)
    inputs = {} if name.startswith("EdgeWeightNorm") else \
        {"feat": torch.randn(graph.num_nodes(), 32, generator=gen)}
    if weighted:
        inputs["edge_weight"] = torch.rand(graph.num_edges(), generator=gen) + 0.1
    torch.manual_seed(0)
    stock = make()
    with no_fallback():
        return assert_within_twice_stock(stock, fastgnn.enable(copy.deepcopy(stock)),
                                         lambda layer, **leaves: layer(graph, **leaves), inputs)


@pytest.mark.parametrize("name", ACCURACY_LAYERS)
def test_float32_error_within_twice_dgls(name):
    """On a random graph with a hub (in-degree ~13000), isolated nodes, self-loops and
    duplicate edges."""
    from conftest import random_edge_index

    src, dst = random_edge_index(2000, 2000, 40000, seed=3)
    _check_accuracy(name, dgl.graph((src, dst), num_nodes=2000))


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in ACCURACY_LAYERS
                                  if not name.startswith(("GAT", "DotGat"))])
def test_float32_error_within_twice_dgls_tolokers(name):
    """The real graph the issue measured on; the attention layers only on the random graph
    (DGL's own GAT layers take seconds per pass here)."""
    from conftest import load_dataset

    data = load_dataset("tolokers")
    src, dst = data.edge_index
    _check_accuracy(name, dgl.graph((src, dst), num_nodes=data.num_nodes))
