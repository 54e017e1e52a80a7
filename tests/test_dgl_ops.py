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
from dgl_cases import (GRAPH_KINDS, assert_close, exact_grads, grads, leaves,  # noqa: E402
                       libxsmm, make_graph, no_fallback, node_counts, tied_leaves,
                       with_shuffled_twins)


def _compare(fast_fn, stock_fn, graph, inputs, fused=True, dtype=torch.float32):
    """Outputs and input gradients of the drop-in and DGL's op (identical when DGL's op ran),
    the gradient of max/min's -inf/+inf entries (no in-edges) included."""
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
        for got, want in zip(grads(fast, inputs), grads(stock, inputs)):
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
        if name not in ("segment_reduce", "segment_softmax", "segment_mm",
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
    # DGL's backward sends the gradient to node 0 (its recorded winners start there)
    (grad_x,) = grads(out, [x])
    assert torch.equal(grad_x, grads(getattr(dgl.ops, name)(graph, x), [x])[0])
    assert torch.equal(grad_x[1:], torch.zeros(2, 2))
    (e,) = leaves((0, 1))
    name = f"u_mul_e_{reduce}"
    with no_fallback():
        out = getattr(fdgl, name)(graph, x, e)
    assert torch.equal(out, getattr(dgl.ops, name)(graph, x, e))
    assert torch.equal(out, torch.zeros(3, 2))


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("x_shape,e_shape", [
    ((16,), None),           # copy_u
    ((3, 4), None),
    ((8,), ()),              # one weight per edge: DGL broadcasts it (its generic kernel)
    ((1,), ()),              # same shapes: no broadcasting (libxsmm where DGL has it)
    ((4, 6), (4, 1)),        # one weight per edge and head
    ((3, 1), (3, 1)),
])
@pytest.mark.parametrize("values", ["relu", "equal"])
@pytest.mark.parametrize("use_libxsmm", [True, False])
def test_extremes_keep_dgls_tied_message(kind, reduce, x_shape, e_shape, values, use_libxsmm):
    """Many equal messages (ReLU'd small integers, or all ones), duplicate edges, edge ids out
    of source order, nodes without in-edges: the values and the gradients of x and the edge
    data are DGL's, bit for bit, with DGL's libxsmm kernels (the last equal message) and
    without (the first)."""
    graph = with_shuffled_twins(make_graph(kind, seed=11), seed=12)
    num_src, _ = node_counts(graph)
    shapes = [(num_src,) + x_shape] + ([] if e_shape is None else [(graph.num_edges(),) + e_shape])
    inputs = tied_leaves(*shapes, seed=13)
    if e_shape is not None:  # weights of 1 and 2: equal and unequal twins
        inputs[1] = tied_leaves(shapes[1], seed=14, low=1)[0]
    if values == "equal":
        inputs = [torch.ones_like(t).requires_grad_() for t in inputs]
    name = f"copy_u_{reduce}" if e_shape is None else f"u_mul_e_{reduce}"
    with libxsmm(use_libxsmm):
        _assert_bitwise_dgls(name, graph, inputs)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("values", ["relu", "equal"])
def test_extremes_keep_dgls_tied_message_where_libxsmm_blocks_columns(reduce, values):
    """DGL 2.1's libxsmm max/min splits the sources into column blocks of about
    LLC / (width * 4 bytes * density * 500) and runs its kernel once a block, the running
    extreme carried over: here (every source feeds every destination, 256 features) blocks of
    fewer than 4000 sources wherever the LLC is under 2 GB. Equal messages in different blocks
    still go to the last in-edge by edge id (measured on an AVX-512 host with a 320 MB LLC,
    seven blocks), as the probe on a two-edge graph says."""
    num_src, num_dst = 4000, 8
    src = torch.arange(num_src).repeat(num_dst)
    dst = torch.arange(num_dst).repeat_interleave(num_src)
    order = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(5))
    graph = dgl.create_block((src[order], dst[order]), num_src, num_dst)
    x = tied_leaves((num_src, 256), seed=6)[0]
    if values == "equal":
        x = torch.ones_like(x).requires_grad_()
    with libxsmm(True):
        _assert_bitwise_dgls(f"copy_u_{reduce}", graph, [x])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_extremes_keep_dgls_tied_message_in_other_dtypes(dtype):
    graph = with_shuffled_twins(make_graph("homogeneous-int32", seed=15), seed=16)
    x, e = tied_leaves((graph.num_nodes(), 5), (graph.num_edges(), 1), seed=17, dtype=dtype)
    for name, inputs in (("copy_u_max", [x]), ("u_mul_e_min", [x, e]), ("u_mul_e_max", [x, e])):
        _assert_bitwise_dgls(name, graph, inputs)


def _assert_bitwise_dgls(name, graph, inputs):
    """The fused drop-in ``name`` gives DGL's op's output and gradients bit for bit."""
    with no_fallback():
        fast = getattr(fdgl, name)(graph, *inputs)
    stock = getattr(dgl.ops, name)(graph, *inputs)
    assert torch.equal(fast, stock)
    for got, want in zip(exact_grads(fast, inputs), exact_grads(stock, inputs)):
        assert torch.equal(got, want)


def test_dgls_tie_rule_is_asked_of_dgl():
    """Without libxsmm (and for float64 always) DGL keeps the first equal message."""
    from fastgnn.dgl._ties import dgl_ties

    x = torch.ones(4, 8)
    with libxsmm(False):
        assert dgl_ties(x) == "first-edge"
        assert dgl_ties(x[:, :1], torch.ones(3)) == "first-edge"
    assert dgl_ties(x.double()) == "first-edge"
    assert dgl_ties(x, torch.ones(3)) == "first-edge"  # DGL broadcasts: its generic kernel
    with torch.inference_mode():
        assert dgl_ties(x.double()) == "first-edge"


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
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
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
    _compare(lambda g, a, b: fdgl.gspmm(g, "mul", reduce, a, b),
             lambda g, a, b: dgl.ops.gspmm(g, "mul", reduce, a, b), graph, [x, e])


@pytest.mark.parametrize("kind", ["homogeneous", "block-int32"])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_u_mul_e_extremes_on_duplicate_edges(kind, reduce):
    """Every edge doubled, the twin with another weight: the winning edge of each output entry,
    not its twin, gets the weight's gradient, as in DGL."""
    graph = make_graph(kind, seed=9)
    src, dst = graph.edges()
    if kind.startswith("block"):
        doubled = dgl.create_block((torch.cat([src, src]), torch.cat([dst, dst])),
                                   graph.num_src_nodes(), graph.num_dst_nodes(),
                                   idtype=graph.idtype)
    else:
        doubled = dgl.graph((torch.cat([src, src]), torch.cat([dst, dst])),
                            num_nodes=graph.num_nodes(), idtype=graph.idtype)
    x, e = leaves((doubled.num_src_nodes(), 3, 4), (doubled.num_edges(), 3, 1), seed=4)
    name = f"u_mul_e_{reduce}"
    _compare(getattr(fdgl, name), getattr(dgl.ops, name), doubled, [x, e])
    # the gradient reaches both twins somewhere (each wins some entries)
    with no_fallback():
        out = getattr(fdgl, name)(doubled, x, e)
    grad_e = grads(out * out.isfinite(), [x, e])[1].abs().sum(dim=(1, 2))
    half = graph.num_edges()
    assert bool((grad_e[:half] > 0).any()) and bool((grad_e[half:] > 0).any())


def test_u_mul_e_extremes_with_many_heads_fused():
    """Max/min take every head in one kernel: no per-head limit."""
    graph = make_graph("homogeneous", seed=10)
    x, e = leaves((60, 80, 2), (graph.num_edges(), 80, 1))
    _compare(fdgl.u_mul_e_max, dgl.ops.u_mul_e_max, graph, [x, e])
    x, e = leaves((60, 80, 2), (graph.num_edges(), 1))
    _compare(fdgl.u_mul_e_sum, dgl.ops.u_mul_e_sum, graph, [x, e])
    x, e = leaves((60, 80, 2), (graph.num_edges(), 80, 1))
    _compare(fdgl.u_mul_e_sum, dgl.ops.u_mul_e_sum, graph, [x, e], fused=False)


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
    for name in ("u_mul_e_max", "u_mul_e_min"):
        _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, [x, e], dtype=torch.float64)
        _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, [x, e[:, 0, 0]],
                 dtype=torch.float64)
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
        weighted_max = lambda a, b: fdgl.u_mul_e_max(graph, a, b).nan_to_num(  # noqa: E731
            neginf=0.0)
        assert torch.autograd.gradcheck(weighted_max, (x, e))
        weighted_min = lambda a, b: fdgl.gspmm(graph, "mul", "min", a, b).nan_to_num(  # noqa
            posinf=0.0)
        assert torch.autograd.gradcheck(weighted_min, (x, e[:, :1]))


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


@pytest.mark.parametrize("name", ["u_mul_e_sum", "u_mul_e_max", "u_mul_e_min"])
def test_broadcast_that_widens_falls_back(name):
    graph = make_graph("homogeneous", seed=8)
    x, e = leaves((60, 1, 5), (graph.num_edges(), 3, 1))  # output [N, 3, 5]
    _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, [x, e], fused=False)
    x, e = leaves((60, 4), (graph.num_edges(), 4))  # one weight per feature
    _compare(getattr(fdgl, name), getattr(dgl.ops, name), graph, [x, e], fused=False)


def test_edge_data_of_another_dtype_gets_dgls_error():
    graph = make_graph("homogeneous", seed=8)
    x, e = leaves((60, 4), (graph.num_edges(), 1))
    with pytest.warns(fdgl.FallbackWarning), pytest.raises(dgl.DGLError, match="data type"):
        fdgl.u_mul_e_max(graph, x, e.double())


@pytest.mark.parametrize("kind", GRAPH_KINDS)
@pytest.mark.parametrize("norm_by", ["dst", "src"])
@pytest.mark.parametrize("feat", [(), (1,), (4,), (3, 1)])
def test_edge_softmax_fused(kind, norm_by, feat):
    graph = make_graph(kind, seed=9)
    if kind == "homogeneous":  # DGL's edge ids are not in CSR order
        assert fdgl.fastgnn_graph(graph).edge_perm is not None
    (logits,) = leaves((graph.num_edges(),) + feat)
    _compare(lambda g, z: fdgl.edge_softmax(g, z, norm_by=norm_by),
             lambda g, z: dgl.ops.edge_softmax(g, z, norm_by=norm_by), graph, [logits])


def test_edge_softmax_float64_and_gradcheck():
    graph = make_graph("block", seed=10)
    (logits,) = leaves((graph.num_edges(), 2, 1), dtype=torch.float64)
    for norm_by in ("dst", "src"):
        _compare(lambda g, z: fdgl.edge_softmax(g, z, norm_by=norm_by),
                 lambda g, z: dgl.ops.edge_softmax(g, z, norm_by=norm_by), graph, [logits],
                 dtype=torch.float64)
        with no_fallback():
            assert torch.autograd.gradcheck(
                lambda z: fdgl.edge_softmax(graph, z, norm_by=norm_by), (logits,))


def test_edge_softmax_special_values_are_dgls():
    """-inf rows, +inf and NaN give NaN rows in DGL 2.1; -inf beside finite logits a zero."""
    inf, nan = float("inf"), float("nan")
    dst = torch.tensor([1, 1, 2, 2, 2, 3, 3, 4, 4, 5])
    values = torch.tensor([-inf, -inf, -inf, 0.0, 1.0, inf, 0.0, nan, 2.0, 3.0])
    order = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    graph = dgl.graph((torch.arange(10)[order] % 6, dst[order]), num_nodes=6)
    logits = values[order].view(-1, 1).expand(-1, 2).contiguous()
    fast_in, stock_in = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    with no_fallback():
        fast = fdgl.edge_softmax(graph, fast_in)
    stock = dgl.ops.edge_softmax(graph, stock_in)
    assert int(stock.isnan().sum()) == 12  # rows 1, 3 and 4: the NaNs compared below
    torch.testing.assert_close(fast, stock, equal_nan=True)
    weight = torch.arange(20.0).view(10, 2)
    (fast * weight).sum().backward()
    (stock * weight).sum().backward()
    torch.testing.assert_close(fast_in.grad, stock_in.grad, equal_nan=True)


def test_edge_softmax_then_u_mul_e_sum_is_fused_and_dgls():
    """GAT's aggregation in dgl.ops: softmax of [E, H, 1] scores, then per-head weighted sums."""
    graph = make_graph("homogeneous", seed=11)
    scores, x = leaves((graph.num_edges(), 4, 1), (60, 4, 8))

    def attend(softmax, u_mul_e_sum):
        return lambda g, s, h: u_mul_e_sum(g, h, softmax(g, s))
    _compare(attend(fdgl.edge_softmax, fdgl.u_mul_e_sum),
             attend(dgl.ops.edge_softmax, dgl.ops.u_mul_e_sum), graph, [scores, x])


def test_edge_softmax_over_some_edges_or_edge_types_runs_dgl():
    graph = make_graph("homogeneous", seed=12)
    eids = torch.arange(0, graph.num_edges(), 2)
    (logits,) = leaves((eids.numel(), 2))
    _compare(lambda g, z: fdgl.edge_softmax(g, z, eids),
             lambda g, z: dgl.ops.edge_softmax(g, z, eids), graph, [logits], fused=False)
    hetero = dgl.heterograph({("a", "x", "b"): ([0, 1], [1, 0]), ("a", "y", "b"): ([1], [1])})
    per_type = {("a", "x", "b"): torch.randn(2, 1), ("a", "y", "b"): torch.randn(1, 1)}
    with pytest.warns(fdgl.FallbackWarning, match="several edge types"):
        fast = fdgl.edge_softmax(hetero, per_type, norm_by="src")
    stock = dgl.ops.edge_softmax(hetero, per_type, norm_by="src")
    assert fast.keys() == stock.keys() and all(torch.equal(fast[k], stock[k]) for k in stock)


def test_edge_softmax_bad_input_names_the_argument():
    """DGL reads a wrong number of rows out of bounds and takes any norm_by other than "src"
    for "dst"; the drop-in raises instead."""
    graph = make_graph("homogeneous")
    with no_fallback():
        with pytest.raises(ValueError, match="logits must have"):
            fdgl.edge_softmax(graph, torch.randn(graph.num_edges() - 1, 1))
        with pytest.raises(TypeError, match="logits must be floating point"):
            fdgl.edge_softmax(graph, torch.ones(graph.num_edges(), 1, dtype=torch.int64))
        with pytest.raises(ValueError, match="norm_by"):
            fdgl.edge_softmax(graph, torch.randn(graph.num_edges(), 1), norm_by="in")


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
