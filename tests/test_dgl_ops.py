"""fastgnn.dgl's drop-ins for dgl.ops against DGL's own ops, forward and backward, on
homogeneous, bipartite and block graphs with int64 and int32 ids."""
from __future__ import annotations

import inspect
import types
import warnings

import pytest
import torch

dgl = pytest.importorskip("dgl")

import fastgnn.dgl as fdgl  # noqa: E402
from dgl_cases import (GRAPH_KINDS, assert_close, grads, leaves, make_graph,  # noqa: E402
                       no_fallback, node_counts)


def _compare(fast_fn, stock_fn, graph, inputs, fused=True, dtype=torch.float32):
    """Outputs and input gradients of the drop-in and DGL's op (identical when DGL's op ran).

    Entries DGL's max/min leave at -inf/+inf (no in-edges) get no gradient: DGL's backward
    sends one to source 0 (its default argmax), fastgnn's to nobody; only a loss that is
    itself infinite can have a nonzero gradient there."""
    if fused:
        with no_fallback():
            fast = fast_fn(graph, *inputs)
    else:
        with pytest.warns(fdgl.FallbackWarning):
            fast = fast_fn(graph, *inputs)
    stock = stock_fn(graph, *inputs)
    assert fast.shape == stock.shape and fast.dtype == stock.dtype
    if fused:
        assert_close(fast, stock, dtype)
        finite = stock.isfinite().to(stock.dtype)
        for got, want in zip(grads(fast * finite, inputs), grads(stock * finite, inputs)):
            assert_close(got, want, dtype)
    else:  # DGL's own op ran: identical
        assert torch.equal(fast, stock)
        for got, want in zip(grads(fast, inputs), grads(stock, inputs)):
            assert torch.equal(got, want)


@pytest.fixture(autouse=True)
def _fresh_warnings():
    from fastgnn import _adapter
    _adapter._warned.clear()
    yield


def test_every_dgl_op_has_a_drop_in_with_its_signature():
    names = [n for n in dir(dgl.ops) if not n.startswith("_")
             and isinstance(getattr(dgl.ops, n), types.FunctionType)]
    assert len(names) > 60
    for name in names:
        fast = getattr(fdgl, name)
        assert fast is not getattr(dgl.ops, name), name
        if name not in ("edge_softmax", "segment_reduce", "segment_softmax", "segment_mm",
                        "gather_mm", "copy_u", "copy_v", "copy_e"):  # forwarded as *args
            assert inspect.signature(fast) == inspect.signature(getattr(dgl.ops, name)), name
        assert name in fdgl.__all__


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("feat", [(16,), (3, 5)])
def test_copy_u(kind, reduce, feat):
    graph = make_graph(kind)
    num_src, _ = node_counts(graph)
    (x,) = leaves((num_src,) + feat)
    name = f"copy_u_{reduce}"
    _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, [x])
    _compare(lambda g, x: fdgl.gspmm(g, "copy_lhs", reduce, x, None),
             lambda g, x: dgl.ops.gspmm(g, "copy_lhs", reduce, x, None), graph, [x])


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_extremes_of_a_graph_without_edges_are_dgls_zeros(reduce):
    """DGL gives destinations without in-edges -inf/+inf, except on a graph with no edges at
    all, where it skips its kernel and keeps its zero output."""
    graph = dgl.graph(([], []), num_nodes=3)
    (x,) = leaves((3, 2))
    name = f"copy_u_{reduce}"
    with no_fallback():
        out = getattr(fdgl, name)(graph, x)
    assert torch.equal(out, getattr(dgl.ops, name)(graph, x))
    assert torch.equal(out, torch.zeros(3, 2))
    # The output does not depend on x: no gradient (DGL's backward sends one to source 0,
    # its default argmax).
    assert torch.equal(grads(out, [x])[0], torch.zeros(3, 2))


@pytest.mark.parametrize("formats", ["csc", ["csc", "csr"], "csr"])
def test_graphs_restricted_to_compressed_formats(formats):
    """A DGLGraph may forbid COO (g.formats('csc')); fastgnn builds its graph from a clone
    that allows it, and the caller's graph keeps its formats. Each op runs where DGL's own
    does: its SpMM needs CSC, its SDDMM CSR (whose backward, an SpMM, then cannot run)."""
    graph = make_graph("homogeneous", seed=6).formats(formats)
    allowed = sorted(sum(graph.formats().values(), []))
    x, y = leaves((graph.num_src_nodes(), 5), (graph.num_dst_nodes(), 5))
    if "csc" in formats:
        _compare(fdgl.copy_u_sum, dgl.ops.copy_u_sum, graph, [x])
    else:
        with no_fallback():
            assert_close(fdgl.u_dot_v(graph, x, y), dgl.ops.u_dot_v(graph, x, y))
    assert sorted(sum(graph.formats().values(), [])) == allowed


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("x_shape,e_shape", [
    ((8,), ()),              # one weight per edge, DGL pads it to [E, 1]
    ((8,), (1,)),
    ((4, 6), (1,)),          # [E, 1] against [N, H, D]: padded to [E, 1, 1]
    ((4, 6), (4, 1)),        # one weight per edge and head
    ((3, 2, 5), (3, 1, 1)),
    ((8,), (1, 1)),          # the edge data is wider: the output gains a dimension
])
def test_u_mul_e_fused(kind, reduce, x_shape, e_shape):
    graph = make_graph(kind, seed=3)
    num_src, _ = node_counts(graph)
    x, e = leaves((num_src,) + x_shape, (graph.num_edges(),) + e_shape)
    name = f"u_mul_e_{reduce}"
    _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, [x, e])


@pytest.mark.parametrize("kind", ["homogeneous", "bipartite", "block-int32"])
@pytest.mark.parametrize("feat", [(8,), (4, 6), (2, 3, 4)])
def test_u_dot_v_and_v_dot_u(kind, feat):
    graph = make_graph(kind, seed=4)
    num_src, num_dst = node_counts(graph)
    x, y = leaves((num_src,) + feat, (num_dst,) + feat)
    _compare(fdgl.u_dot_v, dgl.ops.u_dot_v, graph, [x, y])
    _compare(fdgl.v_dot_u, dgl.ops.v_dot_u, graph, [y, x])
    _compare(lambda g, a, b: fdgl.gsddmm(g, "dot", a, b, "u", "v"),
             lambda g, a, b: dgl.ops.gsddmm(g, "dot", a, b, "u", "v"), graph, [x, y])


def test_float64_gradients_match_dgl():
    graph = make_graph("homogeneous", seed=5)
    x, e = leaves((60, 4, 3), (graph.num_edges(), 4, 1), dtype=torch.float64)
    _compare(fdgl.u_mul_e_sum, dgl.ops.u_mul_e_sum, graph, [x, e], dtype=torch.float64)
    x, y = leaves((60, 4, 3), (60, 4, 3), dtype=torch.float64)
    _compare(fdgl.u_dot_v, dgl.ops.u_dot_v, graph, [x, y], dtype=torch.float64)


def test_gradcheck_float64():
    graph = make_graph("block", seed=6)
    num_src, num_dst = node_counts(graph)
    x, e = leaves((num_src, 2, 3), (graph.num_edges(), 2, 1), dtype=torch.float64)
    y = leaves((num_dst, 2, 3), dtype=torch.float64, seed=2)[0]
    with no_fallback():
        assert torch.autograd.gradcheck(lambda a, b: fdgl.u_mul_e_mean(graph, a, b), (x, e))
        assert torch.autograd.gradcheck(lambda a, b: fdgl.u_dot_v(graph, a, b), (x, y))
        finite_max = lambda a: fdgl.copy_u_max(graph, a).nan_to_num(neginf=0.0)  # noqa: E731
        assert torch.autograd.gradcheck(finite_max, (x,))


@pytest.mark.parametrize("kind", ["homogeneous", "block-int32", "bipartite"])
@pytest.mark.parametrize("name,targets", [
    ("u_add_e_sum", "ue"), ("u_sub_e_max", "ue"), ("u_div_e_mean", "ue"), ("u_mul_e_max", "ue"),
    ("copy_e_sum", "e"), ("copy_e_max", "e"), ("u_add_v", "uv"), ("u_mul_v", "uv"),
    ("e_div_v", "ev"), ("v_sub_e", "ve"), ("e_dot_u", "eu"), ("copy_u", "u"),
])
def test_stock_ops_warn_once_and_match(kind, name, targets):
    graph = make_graph(kind, seed=7)
    num_src, num_dst = node_counts(graph)
    rows = {"u": num_src, "v": num_dst, "e": graph.num_edges()}
    inputs = leaves(*[(rows[t], 4) for t in targets])
    _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, inputs, fused=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fdgl.FallbackWarning)
        getattr(fdgl, name)(graph, *inputs)  # once only


def test_broadcast_that_widens_falls_back():
    graph = make_graph("homogeneous", seed=8)
    x, e = leaves((60, 1, 5), (graph.num_edges(), 3, 1))  # output [N, 3, 5]
    _compare(fdgl.u_mul_e_sum, dgl.ops.u_mul_e_sum, graph, [x, e], fused=False)


@pytest.mark.parametrize("norm_by", ["dst", "src"])
def test_edge_softmax_is_dgls(norm_by):
    graph = make_graph("homogeneous", seed=9)
    (logits,) = leaves((graph.num_edges(), 2, 1))
    _compare(lambda g, z: fdgl.edge_softmax(g, z, norm_by=norm_by),
             lambda g, z: dgl.ops.edge_softmax(g, z, norm_by=norm_by), graph, [logits],
             fused=False)


def test_heterograph_with_several_edge_types_runs_dgl():
    graph = dgl.heterograph({("a", "x", "b"): ([0, 1], [1, 0]), ("a", "y", "b"): ([1], [1])})
    x = (torch.randn(2, 3),)
    with pytest.warns(fdgl.FallbackWarning, match="several edge types"):
        fast = fdgl.copy_u_sum(graph, x)
    stock = dgl.ops.copy_u_sum(graph, x)
    assert len(fast) == len(stock) and all(
        (a is None and b is None) or torch.equal(a, b) for a, b in zip(fast, stock))


def test_bad_input_gets_dgls_error():
    graph = make_graph("homogeneous")
    with pytest.warns(fdgl.FallbackWarning), pytest.raises(Exception) as fast:
        fdgl.copy_u_sum(graph, torch.ones(7, 3))
    with pytest.raises(Exception) as stock:
        dgl.ops.copy_u_sum(graph, torch.ones(7, 3))
    assert type(fast.value) is type(stock.value)
