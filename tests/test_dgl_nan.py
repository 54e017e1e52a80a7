"""NaN and +-inf messages in fastgnn.dgl's max/min against DGL 2.1 itself, bit for bit, forward
and every gradient: the ``dgl.ops`` drop-ins (NaN skipped, -inf/+inf where no message won, that
gradient sent to node 0 and edge 0), ``update_all``'s masking of every infinite result, and the
GINConv(max) and SAGEConv(pool) layers built on it; with DGL's libxsmm kernel and its generic
one, float32 and float64, homogeneous, bipartite and block graphs with duplicate edges in
shuffled edge order."""
from __future__ import annotations

import copy

import pytest
import torch

dgl = pytest.importorskip("dgl")

import dgl.function as fn  # noqa: E402

import fastgnn  # noqa: E402
import fastgnn.dgl as fdgl  # noqa: E402
from dgl_cases import (GRAPH_KINDS, assert_same, exact_grads, libxsmm,  # noqa: E402
                       make_graph, no_fallback, node_counts, special_leaves, with_shuffled_twins)
from fastgnn.dgl._extremes import dgl_extremes  # noqa: E402
from fastgnn.dgl._graphs import fastgnn_graph  # noqa: E402
from fastgnn.dgl._ties import dgl_ties  # noqa: E402

SHAPES = [
    ((16,), None),           # copy_u, vector tiles of the CPU kernel
    ((3, 5), None),
    ((1,), None),
    ((8,), ()),              # one weight per edge: DGL broadcasts it (its generic kernel)
    ((1,), ()),              # same shapes: no broadcasting (libxsmm where DGL has it)
    ((4, 6), (4, 1)),        # one weight per edge and head
]


def _graph(kind, seed):
    return with_shuffled_twins(make_graph(kind, seed=seed), seed=seed + 1)


def _inputs(graph, x_shape, e_shape, dtype, seed):
    num_src, _ = node_counts(graph)
    (x,) = special_leaves((num_src,) + x_shape, seed=seed, dtype=dtype)
    if e_shape is None:
        return [x]
    gen = torch.Generator().manual_seed(seed + 1)  # weights 1 and 2: finite products of x
    e = torch.randint(1, 3, (graph.num_edges(),) + e_shape, generator=gen).to(dtype)
    return [x, e.requires_grad_()]


def _assert_dgls(fast_fn, stock_fn, inputs):
    with no_fallback():
        fast = fast_fn(*inputs)
    stock = stock_fn(*inputs)
    assert_same(fast, stock)
    for got, want in zip(exact_grads(fast, inputs), exact_grads(stock, inputs)):
        assert_same(got, want)


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("x_shape,e_shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_libxsmm", [True, False])
def test_ops_skip_nan_as_dgl(kind, reduce, x_shape, e_shape, dtype, use_libxsmm):
    """``copy_u_max``/``u_mul_e_min``/``gspmm``...: NaN in some or all of a row's messages,
    +-inf messages (an all -inf row keeps -inf: with libxsmm a -inf message wins it, without
    node 0 does), ties, nodes without in-edges."""
    graph = _graph(kind, seed=31)
    inputs = _inputs(graph, x_shape, e_shape, dtype, seed=33)
    name = f"copy_u_{reduce}" if e_shape is None else f"u_mul_e_{reduce}"
    op = "copy_lhs" if e_shape is None else "mul"
    with libxsmm(use_libxsmm):
        _assert_dgls(lambda *a: getattr(fdgl, name)(graph, *a),
                     lambda *a: getattr(dgl.ops, name)(graph, *a), inputs)
        rhs = (lambda a: None) if e_shape is None else (lambda a: a[1])
        _assert_dgls(lambda *a: fdgl.gspmm(graph, op, reduce, a[0], rhs(a)),
                     lambda *a: dgl.ops.gspmm(graph, op, reduce, a[0], rhs(a)), inputs)


def _update_all(graph, reduce, x, e=None):
    with graph.local_scope():
        graph.srcdata["h"] = x
        if e is None:
            message = fn.copy_u("h", "m")
        else:
            graph.edata["w"] = e
            message = fn.u_mul_e("h", "w", "m")
        graph.update_all(message, getattr(fn, reduce)("m", "out"))
        return graph.dstdata["out"]


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("x_shape,e_shape", [s for s in SHAPES if s[1] in (None, ())])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_libxsmm", [True, False])
def test_update_all_masks_every_infinity_as_dgl(kind, reduce, x_shape, e_shape, dtype,
                                                use_libxsmm):
    """``update_all`` with a max/min reducer (what the layers run: ``copy_u`` or ``u_mul_e``
    with one weight per edge) replaces every infinite result with 0, no gradient there: no
    in-edges, only NaN messages, and genuine +-inf results alike."""
    graph = _graph(kind, seed=35)
    inputs = _inputs(graph, x_shape, e_shape, dtype, seed=37)

    def fast(x, e=None):
        return dgl_extremes(fastgnn_graph(graph), x, reduce, dgl_ties(x, e), edge_weight=e,
                            update_all=True)

    with libxsmm(use_libxsmm):
        _assert_dgls(fast, lambda *a: _update_all(graph, reduce, *a), inputs)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_update_all_on_a_graph_without_edges_sends_the_gradient_to_node_0(reduce):
    """DGL runs no kernel: zeros, whose gradient still reaches node 0 (its zero-filled winner)."""
    graph = dgl.graph(([], []), num_nodes=3)
    (x,) = special_leaves((3, 2), seed=39)
    _assert_dgls(lambda a: dgl_extremes(fastgnn_graph(graph), a, reduce, "first-edge",
                                        update_all=True),
                 lambda a: _update_all(graph, reduce, a), [x])


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("edge_weight", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_libxsmm", [True, False])
def test_ginconv_max_as_dgl(kind, edge_weight, dtype, use_libxsmm):
    graph = _graph(kind, seed=41)
    num_src, num_dst = node_counts(graph)
    bipartite = not graph.is_block and num_src != num_dst
    leaves = special_leaves(*([(num_src, 6)] + ([(num_dst, 6)] if bipartite else [])), seed=43,
                            dtype=dtype)
    feat = tuple(leaves) if bipartite else leaves[0]
    kwargs = {}
    if edge_weight:
        gen = torch.Generator().manual_seed(44)
        kwargs["edge_weight"] = torch.randint(1, 3, (graph.num_edges(),), generator=gen) \
            .to(dtype).requires_grad_()
    stock = dgl.nn.GINConv(None, "max", learn_eps=True).to(dtype)
    _assert_layer(stock, graph, feat, leaves + list(kwargs.values()), use_libxsmm, **kwargs)


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_libxsmm", [True, False])
def test_sageconv_pool_as_dgl(kind, dtype, use_libxsmm):
    """Features that overflow fc_pool to +inf (a genuine +inf maximum, masked to 0), NaN
    features (all of a row's pooled messages NaN, or some), small integer parameters (exact
    sums)."""
    graph = _graph(kind, seed=45)
    num_src, num_dst = node_counts(graph)
    bipartite = not graph.is_block and num_src != num_dst
    gen = torch.Generator().manual_seed(46)
    big = 2.0 * torch.finfo(dtype).max / 3

    def features(rows):
        x = torch.randint(-1, 3, (rows, 5), generator=gen).to(dtype)
        picked = torch.randint(0, 6, (rows,), generator=gen)
        x[picked == 0, 1] = float("nan")
        x[picked == 1, 2] = big  # times 2: +inf
        return x.requires_grad_()

    leaves = [features(num_src)] + ([features(num_dst)] if bipartite else [])
    feat = tuple(leaves) if bipartite else leaves[0]
    stock = dgl.nn.SAGEConv(5, 4, "pool").to(dtype)
    with torch.no_grad():
        for param in stock.parameters():
            param.copy_(torch.randint(-1, 2, param.shape, generator=gen))
        stock.fc_pool.weight.zero_().diagonal().fill_(2)  # pooled: twice the features
    _assert_layer(stock, graph, feat, leaves, use_libxsmm)


def _assert_layer(stock, graph, feat, inputs, use_libxsmm, **kwargs):
    fast = fastgnn.enable(copy.deepcopy(stock))
    with libxsmm(use_libxsmm):
        want = stock(graph, feat, **kwargs)
        with no_fallback():
            got = fast(graph, feat, **kwargs)
    assert_same(got, want)
    got_grads = exact_grads(got, inputs + list(fast.parameters()))
    want_grads = exact_grads(want, inputs + list(stock.parameters()))
    for g_fast, g_stock in zip(got_grads, want_grads):
        assert_same(g_fast, g_stock)
