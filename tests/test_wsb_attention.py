"""Graph Transformer attention on the WSB layout: the op's (out, lse) against the reference and
the CSR op (CPU scalar twin everywhere, Tensor Cores on the GPU), the gradients of its
backward (destination pass on the layout, then the CSR source pass) against the CSR backward
and the reference, the attention plan and edge starts, the format policy and its routing."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, reference, tuning
from fastgnn.ops import attention, wsb, wsb_attention
from tests.conftest import ZeroFills, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("wsb_graph_attention_forward"),
                                reason="native extension not built")

SHAPES = [(1, 32), (2, 64), (4, 128), (8, 32)]  # (heads, head dim)


def _tensor_core_cases():
    """(heads, dim, dtype) for the GPU kernels. compute-sanitizer takes float16 at each head
    dim, one per kernel template: bfloat16 differs only in its mma instruction, and 8 heads of
    32 only in the grid (the whole grid made the sanitizer steps outrun a device slot)."""
    for dtype in (torch.float16, torch.bfloat16):
        for heads, dim in SHAPES:
            sanitized = dtype == torch.float16 and (heads, dim) != (8, 32)
            yield pytest.param(heads, dim, dtype, marks=[pytest.mark.sanitize] if sanitized else [])


TENSOR_CORE_CASES = list(_tensor_core_cases())


def _graph(edges, num_nodes):
    edge_index = torch.tensor(edges, dtype=torch.int64).reshape(2, -1)
    return fastgnn.Graph.from_edge_index(edge_index, num_nodes=num_nodes)


def _graphs():
    """Random edges with a hub, self-loops, duplicates and nodes without edges; a bipartite
    block with a partial last window; a hub whose window spans many tiles (split into pieces
    on the GPU) beside destinations without in-edges; a dense band; mostly empty windows;
    heavy duplicates of a few edges; no edges at all."""
    yield "random", random_graph(70, 900, seed=1)[0]
    yield "bipartite", random_graph(90, 700, num_dst=37, seed=2)[0]
    gen = torch.Generator().manual_seed(3)
    hub_src = torch.randperm(1500, generator=gen)  # 94 tiles in the hub's window
    rest = torch.randint(0, 1500, (2, 3000), generator=gen)
    rest[1] = rest[1] % 1480 + 20  # destinations 1..19 (but the hub, 5) get nothing
    edges = torch.cat([torch.stack([hub_src, torch.full_like(hub_src, 5)]), rest], 1)
    yield "hub", fastgnn.Graph.from_edge_index(edges, num_nodes=1500)
    band = torch.stack([torch.arange(400) % 100, torch.arange(400) // 4])  # 4 sources a row
    yield "banded", fastgnn.Graph.from_edge_index(band, num_nodes=100)
    yield "empty windows", _graph([0, 5, 63, 64, 64, 3], 100)
    yield "duplicates", _graph([1, 1, 1, 1, 2, 2, 7, 9, 9, 3, 3, 3, 3, 4, 4, 0, 0, 0], 20)
    yield "no edges", _graph([], 40)


GRAPHS = dict(_graphs())


def _features(g, heads, dim, dtype, device="cpu", requires_grad=False, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def make(rows):
        t = torch.randn(rows, heads, dim, generator=gen, dtype=torch.float64)
        return t.to(device, dtype).requires_grad_(requires_grad)
    return make(g.num_dst_nodes), make(g.num_src_nodes), make(g.num_src_nodes)


def _wsb(g, q, k, v, scale=None, grad=False, wsb_backward=True):
    """The WSB forward's (out, lse), its autograd through the WSB backward (wsb_backward=False:
    the CSR one)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    layout = g.wsb()
    work, splits = layout.attention_plan()
    edge_starts = layout.attention_edge_starts() if grad and wsb_backward else None
    return wsb_attention.forward_op(layout.tile_ptr, layout.tile_cols, layout.counts(q.dtype),
                                    work, splits, edge_starts, q, k, v, scale,
                                    *attention.structure_args(g, grad), None, None, 1)


def _csr(g, q, k, v, scale=None):
    """The CSR forward's (out, lse)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.ops.fastgnn.graph_attention_forward(
        *attention.structure_args(g, False), q, k, v, None, scale, 0.0, 0, None, 0, None, None, 1)


def _relative_error(out, expected):
    expected = expected.double().cpu()
    return float((out.double().cpu() - expected).norm() / expected.norm().clamp(min=1e-30))


def _no_in_edges(g):
    return g.in_degree.cpu() == 0


def _symmetric(num_nodes, num_edges, seed):
    """A symmetric graph (the CSR its own transpose: the source pass walks it) with a hub."""
    gen = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    edges = torch.cat([edges, torch.stack([torch.full((300,), 3), torch.arange(300)])], 1)
    edges = torch.unique(torch.cat([edges, edges.flip(0)], 1), dim=1)
    g = fastgnn.Graph.from_edge_index(edges, num_nodes=num_nodes)
    assert g.is_symmetric
    return g


BACKWARD_GRAPHS = dict(GRAPHS, symmetric=_symmetric(400, 2500, seed=5))


def _gradients(g, q, k, v, dout, wsb_backward):
    """(dq, dk, dv) of the WSB forward through the WSB or the CSR backward."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, _ = _wsb(g, q, k, v, grad=True, wsb_backward=wsb_backward)
    return torch.autograd.grad(out, (q, k, v), dout)


def _reference_gradients(g, q, k, v, dout):
    q, k, v = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    return torch.autograd.grad(reference.graph_attention(g, q, k, v), (q, k, v),
                               dout.cpu().double())


# The bound under which a gradient's error against float64 passes whatever the CSR backward's
# error: the rounding of the gradient itself to the features' dtype.
GRADIENT_BOUND = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _check_gradients(g, q, k, v, dout, expected):
    """The WSB backward's gradients against the CSR backward's (same forward) and float64's:
    no further from float64 than the CSR backward, give or take their rounding to q's dtype."""
    grads = _gradients(g, q, k, v, dout, True)
    csr_grads = _gradients(g, q, k, v, dout, False)
    for name, grad, csr_grad, exact in zip("qkv", grads, csr_grads, expected):
        assert grad.dtype == q.dtype and grad.shape == csr_grad.shape
        err, csr_err = _relative_error(grad, exact), _relative_error(csr_grad, exact)
        assert err <= max(2 * csr_err, GRADIENT_BOUND[q.dtype]), (name, err, csr_err)
    return grads


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("heads,dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_cpu_op_matches_reference_and_csr(name, heads, dim, dtype):
    g = GRAPHS[name]
    q, k, v = _features(g, heads, dim, dtype)
    out, lse = _wsb(g, q, k, v)
    csr_out, csr_lse = _csr(g, q, k, v)
    expected = reference.graph_attention(g, q.double(), k.double(), v.double())
    assert out.dtype == dtype and lse.dtype == csr_lse.dtype
    empty = _no_in_edges(g)
    assert torch.all(out[empty] == 0) and torch.all(lse[empty] == float("-inf"))
    if dtype == torch.float64:
        torch.testing.assert_close(out, expected)
    else:
        # no further from float64 than the CSR kernel, give or take the output's rounding
        bound = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
        assert _relative_error(out, expected) <= max(2 * _relative_error(csr_out, expected),
                                                     bound)
    torch.testing.assert_close(lse, csr_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["random", "bipartite", "duplicates"])
def test_gradients_through_the_csr_backward_match_the_reference(name):
    g = GRAPHS[name]
    q, k, v = _features(g, 2, 32, torch.float64, requires_grad=True)
    dout = torch.randn(g.num_dst_nodes, 2, 32, dtype=torch.float64)
    out, _ = _wsb(g, q, k, v, grad=True)
    expected = reference.graph_attention(g, q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    expected_grads = torch.autograd.grad(expected, (q, k, v), dout)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


def test_no_gradient_is_filled_for_lse():
    """lse is an output no loss reaches: autograd does not zero-fill a gradient for it."""
    g = GRAPHS["random"]
    q, k, v = _features(g, 2, 32, torch.float64, requires_grad=True)
    out, lse = _wsb(g, q, k, v, grad=True)
    with ZeroFills() as fills:
        torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert (tuple(lse.shape), lse.dtype) not in fills.made, fills.made


def test_gradcheck_float64():
    g = GRAPHS["bipartite"]
    q, k, v = _features(g, 2, 32, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *t: _wsb(g, *t, scale=0.3, grad=True)[0], (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_gradients_match_the_csr_path(dtype):
    g = GRAPHS["random"]
    q, k, v = _features(g, 4, 32, dtype, requires_grad=True)
    dout = torch.randn(g.num_dst_nodes, 4, 32).to(dtype)
    grads = torch.autograd.grad(_wsb(g, q, k, v, grad=True)[0], (q, k, v), dout)
    expected = torch.autograd.grad(fastgnn.ops.graph_attention(g, q, k, v), (q, k, v), dout)
    for grad, expected_grad in zip(grads, expected):
        torch.testing.assert_close(grad, expected_grad, atol=2e-2, rtol=2e-2)


def test_opcheck():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g = GRAPHS["random"]
    layout = g.wsb()
    q, k, v = _features(g, 2, 32, torch.float32, requires_grad=True)
    args = (layout.tile_ptr, layout.tile_cols, layout.counts(q.dtype), *layout.attention_plan(),
            layout.attention_edge_starts(), q, k, v, 0.25, *attention.structure_args(g, True),
            None, None, 1)
    torch.library.opcheck(torch.ops.fastgnn.wsb_graph_attention_forward.default, args)


@pytest.fixture(params=[None, 8], ids=["default pieces", "pieces of 8 tiles"])
def tiles_per_piece(request, monkeypatch):
    """The attention plan's piece length: the default, or 8 tiles, which splits the windows of
    most graphs here (a plan is derived on first use: use graphs built after this)."""
    if request.param is not None:
        monkeypatch.setattr(wsb, "ATTENTION_TILES_PER_PIECE", request.param)
    return request.param or wsb.ATTENTION_TILES_PER_PIECE


@pytest.mark.parametrize("name", list(GRAPHS))
def test_attention_plan_covers_every_tile_once(name, tiles_per_piece):
    layout = wsb.WSB(*(getattr(GRAPHS[name].wsb(), field) for field in (
        "tile_ptr", "tile_cols", "edge_slot", "num_dst", "fingerprint")))  # a fresh plan
    work, splits = (t.tolist() for t in layout.attention_plan())
    ptr = layout.tile_ptr.tolist()
    covered = [0] * layout.num_tiles
    pieces = {}  # window -> partial rows of its pieces, in tile order
    for first, end, window, row in sorted(work):
        assert ptr[window] <= first <= end <= ptr[window + 1]
        assert end - first <= tiles_per_piece
        for t in range(first, end):
            covered[t] += 1
        pieces.setdefault(window, []).append(row)
    assert covered == [1] * layout.num_tiles
    assert sorted(pieces) == list(range(layout.num_windows))  # empty windows are written too
    sizes = [end - first for first, end, _, _ in work]
    assert sizes == sorted(sizes, reverse=True)  # the longest pieces start first
    rows = 0
    for window, parts in sorted(pieces.items()):
        if parts == [-1]:
            continue
        assert parts == list(range(parts[0], parts[0] + len(parts)))  # consecutive, in order
        assert splits[parts[0]:parts[-1] + 1] == [[window, len(parts)]] + [[-1, 0]] * (
            len(parts) - 1)
        rows += len(parts)
    assert rows == len(splits)
    if name == "hub":
        assert rows >= 94 // tiles_per_piece


@pytest.mark.parametrize("name", list(BACKWARD_GRAPHS))
@pytest.mark.parametrize("heads,dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cpu_backward_matches_csr_and_reference(name, heads, dim, dtype, tiles_per_piece):
    g = _fresh(BACKWARD_GRAPHS[name])
    q, k, v = _features(g, heads, dim, dtype)
    dout = _features(g, heads, dim, dtype, seed=1)[0]
    _check_gradients(g, q, k, v, dout, _reference_gradients(g, q, k, v, dout))


@pytest.mark.parametrize("name", ["random", "hub", "symmetric"])
def test_cpu_backward_float64_is_exact(name, tiles_per_piece):
    g = _fresh(BACKWARD_GRAPHS[name])
    q, k, v = _features(g, 2, 32, torch.float64)
    dout = _features(g, 2, 32, torch.float64, seed=1)[0]
    for grad, expected in zip(_gradients(g, q, k, v, dout, True),
                              _reference_gradients(g, q, k, v, dout)):
        torch.testing.assert_close(grad, expected)


def _fresh(g):
    """A new Graph on g's structure: its layout and plans follow the current piece length."""
    return fastgnn.Graph(g.rowptr, g.col, g.num_src_nodes, g.edge_perm)


@pytest.mark.parametrize("name", list(BACKWARD_GRAPHS))
def test_edge_starts_are_each_piece_rows_first_edge(name, tiles_per_piece):
    g = _fresh(BACKWARD_GRAPHS[name])
    layout = g.wsb()
    work = layout.attention_plan()[0].tolist()
    starts = layout.attention_edge_starts().tolist()
    rowptr, col = g.rowptr.tolist(), g.col.tolist()
    cols = layout.tile_cols.tolist()
    for piece, (first, end, window, _) in enumerate(work):
        for r in range(16):
            i = window * 16 + r
            if i >= g.num_dst_nodes:
                continue
            # the row's edges whose source sits in a tile before the piece's first
            earlier = set(cols[16 * layout.tile_ptr[window]:16 * first]) - {-1}
            expected = rowptr[i] + sum(c in earlier for c in col[rowptr[i]:rowptr[i + 1]])
            assert starts[16 * piece + r] == expected


def test_csr_out_of_slot_order_takes_the_csr_backward():
    """A CSR given with a row's sources in descending order: no edge starts, and the
    gradients still match the reference (through the CSR backward)."""
    rowptr = torch.tensor([0, 3, 3, 5], dtype=torch.int32)
    col = torch.tensor([4, 2, 0, 3, 1], dtype=torch.int32)
    g = fastgnn.Graph(rowptr, col, 5)
    assert g.wsb().attention_edge_starts() is None
    q, k, v = _features(g, 2, 32, torch.float64)
    dout = _features(g, 2, 32, torch.float64, seed=1)[0]
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, _ = _wsb(g, q, k, v, grad=True)
    for grad, expected in zip(torch.autograd.grad(out, (q, k, v), dout),
                              _reference_gradients(g, q, k, v, dout)):
        torch.testing.assert_close(grad, expected)


def _backward_args(g, dtype=torch.float32):
    """The backward op's arguments for the forward of random features."""
    layout = g.wsb()
    q, k, v = _features(g, 2, 32, dtype)
    out, lse = _wsb(g, q, k, v)
    rowptr, col, _, t_rowptr, t_col, t_perm = attention.structure_args(g, True)
    return [torch.randn_like(out), out, lse, layout.tile_ptr, layout.tile_cols,
            layout.counts(dtype), *layout.attention_plan(), layout.attention_edge_starts(),
            rowptr, col, t_rowptr, t_col, t_perm, q, k, v, 0.25, None, None, 1]


def test_backward_bad_inputs():
    g = GRAPHS["random"]
    op = torch.ops.fastgnn.wsb_graph_attention_backward
    args = _backward_args(g)
    assert len(args) == 21 and args[8] is g.wsb().attention_edge_starts()
    for at, bad, message in [
            (8, args[8][:-16], "edge_starts must be the layout's"),
            (8, args[8].long(), "edge_starts must be the layout's"),
            (6, args[6][:, :3], "work must be the layout's attention plan"),
            (8, args[8] + 1, "the layout does not match the CSR")]:
        wrong = list(args)
        wrong[at] = bad
        with pytest.raises(ValueError, match=message):
            op(*wrong)


def test_backward_opcheck():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    torch.library.opcheck(torch.ops.fastgnn.wsb_graph_attention_backward.default,
                          tuple(_backward_args(GRAPHS["bipartite"])))


@pytest.fixture
def fresh_tuning(tmp_path, monkeypatch):
    """The tuner with no choice made yet, in memory or on disk."""
    monkeypatch.setenv("FASTGNN_CACHE_DIR", str(tmp_path))
    tuning.clear()
    yield
    tuning.clear()


def test_auto_times_the_pair_when_a_backward_runs(fresh_tuning, monkeypatch):
    """With a backward to run, "auto" races CSR's forward and backward against WSB's (the ops
    themselves; the CPU runs them too) and keeps that choice apart from the forward's."""
    g = _fresh(GRAPHS["banded"])
    q, k, v = _features(g, 2, 32, torch.float32)
    backward_runs = []
    wsb_backward = wsb_attention._backward_ops
    monkeypatch.setattr(wsb_attention, "_backward_ops",
                        lambda *args: backward_runs.append(1) or wsb_backward(*args))
    for grad in (True, False):  # the op's route on CUDA, run here on the CPU's kernels
        backward_runs.clear()
        out = attention._wsb_graph_attention(g, q, k, v, 0.2, grad)
        assert bool(backward_runs) == grad
        assert out is None or out.shape == q.shape  # None: CSR won
    families = sorted(key.split("@")[0] for key in tuning.choices(g))
    assert families == ["graph_attention_format_d32", "graph_attention_format_fwd_bwd_d32"]


def test_counts_are_the_unnormalised_spmm_blocks():
    layout = GRAPHS["duplicates"].wsb()
    counts = layout.counts(torch.float16)
    assert counts is layout.values(None, torch.float16, key=("none", "sum"))
    assert counts.max() == 4 and counts.sum() == GRAPHS["duplicates"].num_edges


def test_bad_inputs():
    g = GRAPHS["random"]
    with pytest.raises(ValueError, match="attention_format"):
        g.attention_format = "tiles"
    q, k, v = _features(g, 2, 32, torch.float32)
    layout = g.wsb()
    with pytest.raises(RuntimeError, match="tile_counts must have the features' dtype"):
        wsb_attention.forward_op(layout.tile_ptr, layout.tile_cols, layout.counts(torch.float64),
                                 *layout.attention_plan(), None, q, k, v, 0.2,
                                 *attention.structure_args(g, False), None, None, 1)
    with pytest.raises(RuntimeError, match=r"q must be \[T, H, D\]"):
        wsb_attention.forward_op(layout.tile_ptr, layout.tile_cols, layout.counts(q.dtype),
                                 *layout.attention_plan(), None, q, k[:, :1], v, 0.2,
                                 *attention.structure_args(g, False), None, None, 1)


def test_policy_is_apart_from_spmm():
    g = random_graph(40, 200, seed=4)[0]
    g.spmm_format = "wsb"
    assert g.attention_format is None
    g.attention_format = "csr"
    assert wsb_attention.policy(g) == "csr"
    g.attention_format = None
    assert wsb_attention.policy(g) == wsb_attention._FORMAT_FROM_ENV


def test_cpu_calls_stay_on_csr():
    g = GRAPHS["banded"]
    g.attention_format = "wsb"
    try:
        q, k, v = _features(g, 2, 32, torch.float16)
        assert not wsb_attention.applies(g, q, k, v, None, 0.0)
    finally:
        g.attention_format = None


# ---- CUDA ------------------------------------------------------------------------------------
def _forced(g, fmt, q, k, v, **kwargs):
    g.attention_format = fmt
    try:
        return fastgnn.ops.graph_attention(g, q, k, v, **kwargs)
    finally:
        g.attention_format = None


@pytest.mark.gpu
@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("heads,dim,dtype", TENSOR_CORE_CASES)
def test_tensor_core_attention_matches_cpu_and_reference(name, heads, dim, dtype,
                                                         tiles_per_piece):
    g = GRAPHS[name].to("cuda")  # a new Graph: its plan follows tiles_per_piece
    q, k, v = _features(g, heads, dim, dtype, device="cuda")
    out, lse = _wsb(g, q, k, v)
    csr_out, csr_lse = _csr(g, q, k, v)
    cpu_out, cpu_lse = _wsb(GRAPHS[name], q.cpu(), k.cpu(), v.cpu())
    expected = reference.graph_attention(GRAPHS[name], q.double().cpu(), k.double().cpu(),
                                         v.double().cpu())
    empty = _no_in_edges(g).cuda()
    assert torch.all(out[empty] == 0) and torch.all(lse[empty] == float("-inf"))
    # Half-precision tiles (the weights P rounded to q's dtype before P V): no further from
    # float64 than the CSR kernel, give or take that rounding.
    bound = 4e-3 if dtype == torch.float16 else 3e-2
    err = _relative_error(out, expected)
    assert err <= max(2 * _relative_error(csr_out, expected), bound), err
    assert _relative_error(out, cpu_out) <= bound
    torch.testing.assert_close(lse, csr_lse, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lse.cpu(), cpu_lse, rtol=1e-4, atol=1e-4)
    again, _ = _wsb(g, q, k, v)
    assert torch.equal(out, again)  # no atomics: bitwise equal run to run


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(BACKWARD_GRAPHS))
@pytest.mark.parametrize("heads,dim,dtype", TENSOR_CORE_CASES)
def test_tensor_core_backward_matches_csr_and_reference(name, heads, dim, dtype,
                                                        tiles_per_piece):
    cpu = _fresh(BACKWARD_GRAPHS[name])
    g = cpu.to("cuda")
    q, k, v = _features(g, heads, dim, dtype, device="cuda")
    dout = _features(g, heads, dim, dtype, device="cuda", seed=1)[0]
    # Held to the float64 reference as the CPU twin is (test_cpu_backward_matches_csr_and_
    # reference), not to the twin itself: the forward's out (its weights rounded to q's dtype
    # before P V) enters dLogit through delta, and on rows of two or three edges that
    # cancellation put the two 3.5% apart in bfloat16 (H200, ff6bed4) while each stayed
    # within the CSR backward's error.
    grads = _check_gradients(g, q, k, v, dout, _reference_gradients(cpu, q, k, v, dout))
    again = _gradients(g, q, k, v, dout, True)
    assert all(torch.equal(a, b) for a, b in zip(grads, again))  # no atomics


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_forced_wsb_forward_and_backward(dtype, tiles_per_piece):
    g = GRAPHS["hub"].to("cuda")
    q, k, v = _features(g, 4, 64, dtype, device="cuda", requires_grad=True)
    dout = torch.randn(g.num_dst_nodes, 4, 64, device="cuda", dtype=dtype)
    out = _forced(g, "wsb", q, k, v)
    assert g.wsb()._attention_plan is not None  # the forward ran on WSB
    assert g.wsb().attention_edge_starts() is not None  # so will the backward
    grads = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    storage = torch.empty(dout.numel() + 1, device="cuda", dtype=dtype)
    unaligned = storage[1:].view_as(dout).copy_(dout)  # 2 bytes off: the glue copies it
    for grad, again in zip(grads, torch.autograd.grad(out, (q, k, v), unaligned)):
        assert torch.equal(grad, again)
    expected = _forced(g, "csr", q, k, v)
    expected_grads = torch.autograd.grad(expected, (q, k, v), dout)
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=3e-2, rtol=3e-2)


@pytest.mark.gpu
@pytest.mark.sanitize
def test_padding_and_non_neighbours_read_no_nan():
    """Sources that send nothing hold NaN, and padding slots would read them: the output and
    the gradients stay finite."""
    g = GRAPHS["bipartite"].to("cuda")
    q, k, v = _features(g, 2, 32, torch.float16, device="cuda")
    senders = torch.zeros(g.num_src_nodes, dtype=torch.bool, device="cuda")
    senders[g.col.long()] = True
    k[~senders], v[~senders] = float("nan"), float("nan")
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, lse = _wsb(g, q, k, v, grad=True)
    assert torch.isfinite(out).all() and not torch.isnan(lse).any()
    grad_q, grad_k, grad_v = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert torch.isfinite(grad_q).all()
    assert torch.isfinite(grad_k[senders]).all() and torch.isfinite(grad_v[senders]).all()


@pytest.mark.gpu
def test_fallbacks_stay_on_csr():
    """float32, an unsupported head dim, unaligned features, an edge term or dropout: CSR,
    silently, even when WSB is forced."""
    g = GRAPHS["banded"].to("cuda")
    cases = [_features(g, 2, 32, torch.float32, device="cuda"),
             _features(g, 2, 48, torch.float16, device="cuda")]
    storage = torch.randn(g.num_src_nodes * 64 + 1, device="cuda", dtype=torch.float16)
    q, k, v = _features(g, 2, 32, torch.float16, device="cuda")
    cases.append((q, storage[1:].view(g.num_src_nodes, 2, 32), v))  # 2 bytes off
    for q, k, v in cases:
        _forced(g, "wsb", q, k, v)
    q, k, v = _features(g, 2, 32, torch.float16, device="cuda")
    term = torch.randn(g.num_edges, 2, 32, device="cuda", dtype=torch.float16)
    _forced(g, "wsb", q, k, v, edge_term=term)
    _forced(g, "wsb", q, k, v, dropout=0.5)
    assert g.wsb()._attention_plan is None


@pytest.mark.gpu
def test_auto_format_on_a_dense_graph_is_measured():
    g = GRAPHS["banded"].to("cuda")
    q, k, v = _features(g, 4, 64, torch.float16, device="cuda")
    fastgnn.ops.graph_attention(g, q, k, v)
    assert any(key.startswith("graph_attention_format_d64@") for key in tuning.choices(g))
