"""The WSB layout and its SpMM: the structure against the CSR, the op forward and backward
against fastgnn's CSR SpMM (CPU scalar twin everywhere, Tensor Cores on the GPU), the format
choice, and the saved layout's invalidation."""
from __future__ import annotations

import pytest
import torch

import fastgnn
from fastgnn import _native, tuning
from fastgnn.ops import wsb
from tests.conftest import random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("wsb_spmm"), reason="native extension not built")

NORMS = ("none", "left", "right", "both")


def _graphs():
    """Dense and sparse windows, empty windows, a hub, duplicates, a bipartite block, a
    destination count that is not a multiple of 16."""
    yield "homogeneous", random_graph(70, 900, seed=1)[0]
    yield "bipartite", random_graph(90, 700, num_dst=37, seed=2)[0]
    banded = torch.stack([torch.arange(200) // 2, torch.arange(200) % 100])  # dense band
    yield "banded", fastgnn.Graph.from_edge_index(banded, num_nodes=100)
    few = torch.tensor([[0, 5, 63], [64, 64, 3]])  # most windows empty
    yield "empty windows", fastgnn.Graph.from_edge_index(few, num_nodes=100)


GRAPHS = dict(_graphs())


def _hub_windows_graph():
    """Windows of every size the CUDA plan treats apart: two hub windows cut into pieces (251
    and 375 tiles), 73 tiles (one piece, 8 warps), 20 (4 warps), 9 (2 warps), 3 (1 warp), a
    window with no edges and sparse windows (2 tiles); the destination count is not a
    multiple of 16. Node 0 and the last nodes send nothing."""
    gen = torch.Generator().manual_seed(7)
    n = 6001
    src, dst = [], []
    # rows first..first+15 get `degree` distinct sources each; rows 64..79 get none
    for first, degree in ((0, 400), (16, 80), (32, 20), (48, 3), (80, 3000), (96, 9)):
        for row in range(first, first + 16):
            src.append(torch.randperm(n - 11, generator=gen)[:degree] + 1)
            dst.append(torch.full((degree,), row))
    rest = torch.arange(112, n)
    for _ in range(2):
        src.append(torch.randint(1, n - 10, (rest.numel(),), generator=gen))
        dst.append(rest)
    edge_index = torch.stack([torch.cat(src), torch.cat(dst)])
    return fastgnn.Graph.from_edge_index(edge_index, num_nodes=n)


HUB = _hub_windows_graph()


def _wsb_spmm(g, x, norm="none", reduce="sum"):
    layout = g.wsb()
    value = g.norm_values(norm, reduce, dtype=torch.float64 if x.dtype == torch.float64
                          else torch.float32)
    blocks = layout.values(value, x.dtype, key=(norm, reduce))  # the same blocks every call
    t_rowptr, t_col, t_perm = g.transpose()
    t_value = g.transposed_norm_values(norm, reduce, value.dtype) if value is not None else None
    return wsb.product(layout.tile_ptr, layout.tile_cols, blocks, x, g.num_dst_nodes,
                       *layout.plan(), g.rowptr, g.col, value, t_rowptr, t_col, t_perm, t_value,
                       g.key, 0)


@pytest.mark.parametrize("name", GRAPHS)
def test_layout_holds_every_edge_once(name):
    g = GRAPHS[name]
    layout = g.wsb()
    dense = torch.zeros(layout.num_windows * 16, g.num_src_nodes, dtype=torch.float64)
    cols = layout.tile_cols.long().view(-1, 16)
    blocks = layout.values(None, torch.float64).view(-1, 16, 16)
    for w in range(layout.num_windows):
        for t in range(int(layout.tile_ptr[w]), int(layout.tile_ptr[w + 1])):
            for s in range(16):
                if cols[t, s] >= 0:
                    dense[w * 16:(w + 1) * 16, cols[t, s]] += blocks[t, :, s]
                else:
                    assert torch.all(blocks[t, :, s] == 0)
    expected = torch.zeros_like(dense)
    expected.index_put_((g.row.long(), g.col.long()), torch.ones(g.num_edges, dtype=torch.float64),
                        accumulate=True)
    assert torch.equal(dense, expected)
    assert 0 < layout.density <= 1 or g.num_edges == 0
    assert 0 <= layout.padding_ratio < 1
    assert layout.memory_bytes(torch.float16) > layout.num_tiles * 512


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cpu_op_matches_csr_spmm_forward_and_backward(name, norm, dtype):
    g = GRAPHS[name]
    x = torch.randn(g.num_src_nodes, 24, dtype=dtype, requires_grad=True)
    dy = torch.randn(g.num_dst_nodes, 24, dtype=dtype)
    out = _wsb_spmm(g, x, norm)
    expected = fastgnn.ops.spmm(g, x, norm=norm)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, expected, **tol)
    grad, = torch.autograd.grad(out, x, dy)
    expected_grad, = torch.autograd.grad(expected, x, dy)
    torch.testing.assert_close(grad, expected_grad, **tol)


def test_gradcheck_float64():
    g = GRAPHS["bipartite"]
    x = torch.randn(g.num_src_nodes, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _wsb_spmm(g, t, "both"), (x,))


def test_opcheck():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    g = GRAPHS["homogeneous"]
    layout = g.wsb()
    x = torch.randn(g.num_src_nodes, 8, requires_grad=True)
    t_rowptr, t_col, t_perm = g.transpose()
    args = (layout.tile_ptr, layout.tile_cols, layout.values(None, x.dtype), x, g.num_dst_nodes,
            *layout.plan(), g.rowptr, g.col, None, t_rowptr, t_col, t_perm, None, g.key, 0)
    torch.library.opcheck(torch.ops.fastgnn.wsb_spmm.default, args)


def _check_plan(layout):
    """The plan's invariants that the CUDA kernel relies on; returns its pieces' warp counts
    and its split windows."""
    work, splits = (t.tolist() for t in layout.plan())
    ptr = layout.tile_ptr.tolist()
    assert len(work) % wsb.WARPS == 0
    covered = [0] * layout.num_tiles
    pieces = {}  # window -> {partial row (-1: none): (slot, warps)}
    warp_counts = set()
    slot = 0
    while slot < len(work):
        first, end, code, row = work[slot]
        if code < 0:  # idle slots only pad the last block
            assert all(w[2] < 0 for w in work[slot:]) and len(work) - slot < wsb.WARPS
            break
        window, warps = code >> 2, 1 << (code & 3)
        assert slot % warps == 0  # aligned, hence inside one block
        group = work[slot:slot + warps]
        assert all(w[2] == code and w[3] == row for w in group)
        assert all(a[1] == b[0] for a, b in zip(group, group[1:]))  # contiguous in warp order
        assert ptr[window] <= group[0][0] and group[-1][1] <= ptr[window + 1]
        for w in group:
            assert w[1] - w[0] <= wsb.TILES_PER_PIECE // wsb.WARPS
            for t in range(w[0], w[1]):
                covered[t] += 1
        assert row not in pieces.get(window, {})
        pieces.setdefault(window, {})[row] = (slot, warps)
        warp_counts.add(warps)
        slot += warps
    assert covered == [1] * layout.num_tiles
    assert sorted(pieces) == list(range(layout.num_windows))  # empty windows are written too
    split = {}
    for window, rows in pieces.items():
        if -1 in rows:
            assert len(rows) == 1
        else:
            first = min(rows)
            assert sorted(rows) == list(range(first, first + len(rows)))
            split[window] = (first, len(rows))
    assert len(splits) == sum(count for _, count in split.values())
    for window, (first, count) in split.items():
        assert splits[first:first + count] == [[window, count]] + [[-1, 0]] * (count - 1)
    return warp_counts, split


@pytest.mark.parametrize("name", list(GRAPHS) + ["hub windows"])
def test_plan_covers_every_tile_once_in_aligned_warp_groups(name):
    g = HUB if name == "hub windows" else GRAPHS[name]
    warp_counts, split = _check_plan(g.wsb())
    if name == "hub windows":
        assert warp_counts == {1, 2, 4, 8} and len(split) == 2


def _emulate_plan(layout, blocks, x):
    """The CUDA kernel's arithmetic in float64, slot by slot as the plan directs it: warp
    partials summed in warp order, piece partials in piece order."""
    work, splits = layout.plan()
    cols = layout.tile_cols.long().view(-1, 16)
    vals = blocks.double().view(-1, 16, 16)
    xd = torch.cat([x.double(), x.new_zeros(1, x.shape[1]).double()])  # -1 reads zeros

    def walk(first, end):
        acc = xd.new_zeros(16, x.shape[1])
        for t in range(first, end):
            acc += vals[t] @ xd[cols[t]]
        return acc

    out = xd.new_full((layout.num_windows * 16, x.shape[1]), float("nan"))
    partials = xd.new_full((splits.shape[0] * 16, x.shape[1]), float("nan"))
    for slot in range(work.shape[0]):
        first, end, code, row = work[slot].tolist()
        warps = 1 << (code & 3)
        if code < 0 or slot % warps:
            continue
        total = sum((walk(*work[s, :2].tolist()) for s in range(slot, slot + warps)), 0)
        target = out if row < 0 else partials
        index = (code >> 2) if row < 0 else row
        target[index * 16:index * 16 + 16] = total
    for row, (window, count) in enumerate(splits.tolist()):
        if window >= 0:
            out[window * 16:window * 16 + 16] = partials[row * 16:(row + count) * 16].view(
                count, 16, -1).sum(0)
    return out[:layout.num_dst]


def test_plan_emulation_matches_the_cpu_op():
    layout = HUB.wsb()
    x = torch.randn(HUB.num_src_nodes, 3, dtype=torch.float64)
    blocks = layout.values(HUB.norm_values("both", "sum", dtype=torch.float64), torch.float64)
    torch.testing.assert_close(_emulate_plan(layout, blocks, x), _wsb_spmm(HUB, x, "both"))


def test_saved_layout_is_reused_only_for_the_same_structure(tmp_path):
    path = str(tmp_path / "graph.wsb")
    g = GRAPHS["homogeneous"]
    built = g.wsb(path)
    again = random_graph(70, 900, seed=1)[0].wsb(path)  # same structure, a new Graph
    assert again.build_seconds == 0.0  # loaded, not built
    assert torch.equal(again.tile_cols, built.tile_cols)
    other = random_graph(70, 900, seed=3)[0]
    rebuilt = other.wsb(path)
    assert rebuilt.fingerprint == wsb.fingerprint(other) != built.fingerprint
    assert torch.load(path, weights_only=True)["fingerprint"] == rebuilt.fingerprint


def test_prefilter_sees_dense_and_sparse_windows():
    assert wsb.estimated_edges_per_tile(GRAPHS["banded"]) >= wsb.MIN_EDGES_PER_TILE
    assert wsb.estimated_edges_per_tile(GRAPHS["empty windows"]) < wsb.MIN_EDGES_PER_TILE


def test_tuning_key_tells_node_orders_apart():
    """The CSR-or-WSB choice of a relabelled graph is its own: the tuner's graph signature (sizes
    and degrees) is the same for both orders, the tiles are not."""
    g = GRAPHS["banded"]
    relabel = torch.randperm(100, generator=torch.Generator().manual_seed(0))
    shuffled = fastgnn.Graph.from_edge_index(relabel[g.edge_index()], num_nodes=100)
    assert g.signature() == shuffled.signature()
    ops = {wsb.tuning_op(wsb.estimated_edges_per_tile(h)) for h in (g, shuffled)}
    assert len(ops) == 2, ops


def test_tuner_charges_the_build_cost(monkeypatch):
    monkeypatch.setattr(tuning, "_race", lambda candidates, device: {"csr": 1.0, "wsb": 0.9})
    g = random_graph(40, 200, seed=4)[0]
    fast = tuning.choose("format-test", g, 8, torch.float16, "cpu",
                         {"csr": lambda: None, "wsb": lambda: None}, "csr", {"wsb": 0.05})
    g2 = random_graph(40, 200, seed=5)[0]
    slow = tuning.choose("format-test-2", g2, 8, torch.float16, "cpu",
                         {"csr": lambda: None, "wsb": lambda: None}, "csr", {"wsb": 0.5})
    assert (fast, slow) == ("wsb", "csr")


def test_bad_format_policy():
    g = random_graph(30, 100, seed=6)[0]
    with pytest.raises(ValueError, match="spmm_format"):
        g.spmm_format = "tiles"
    g.spmm_format = "wsb"
    assert g.spmm_format == "wsb"


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("name", list(GRAPHS) + ["hub windows"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
# 16, 40, 64, 200: the cp.async path (200: a partial last chunk); 7, 100: the plain loads
@pytest.mark.parametrize("width", [7, 16, 40, 64, 100, 200])
def test_tensor_core_spmm_matches_csr(name, dtype, width):
    g = (HUB if name == "hub windows" else GRAPHS[name]).to("cuda")
    for norm in NORMS:
        x = torch.randn(g.num_src_nodes, width, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(g.num_dst_nodes, width, device="cuda", dtype=dtype)
        g.spmm_format = "wsb"
        out = fastgnn.ops.spmm(g, x, norm=norm)
        assert g.wsb()._plan is not None  # planned for the kernel: the forward ran on WSB
        grad, = torch.autograd.grad(out, x, dy)
        g.spmm_format = "csr"
        expected = fastgnn.ops.spmm(g, x, norm=norm)
        expected_grad, = torch.autograd.grad(expected, x, dy)
        reference = fastgnn.ops.spmm(g.cpu(), x.detach().double().cpu(), norm=norm)
        # half-precision tiles: no further from the float64 result than the CSR path, give or
        # take the rounding of the values themselves
        err = (out.double().cpu() - reference).norm() / reference.norm().clamp(min=1e-30)
        csr_err = (expected.double().cpu() - reference).norm() / reference.norm().clamp(min=1e-30)
        bound = 4e-3 if dtype == torch.float16 else 3e-2
        assert err <= max(2 * csr_err, bound), (norm, float(err), float(csr_err))
        torch.testing.assert_close(grad, expected_grad)
    g.spmm_format = None


@pytest.mark.gpu
def test_auto_format_on_a_dense_graph_is_measured():
    g = GRAPHS["banded"].to("cuda")
    x = torch.randn(g.num_src_nodes, 64, device="cuda", dtype=torch.float16)
    fastgnn.ops.spmm(g, x, norm="both")
    assert any(key.startswith("spmm_format@") and key.endswith("/64/float16")
               for key in tuning.choices(g))


def _tensor_core_and_csr(g, x, norm="both"):
    """(the WSB op's output, run twice, and the CSR product) on CUDA graph g."""
    g.spmm_format = "csr"
    try:
        csr = fastgnn.ops.spmm(g, x, norm=norm)
    finally:
        g.spmm_format = None
    return _wsb_spmm(g, x, norm), _wsb_spmm(g, x, norm), csr


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [36, 64, 72])
def test_tensor_core_padding_reads_zeros(dtype, width):
    """Padding slots and never-read rows hold inf and NaN: the output stays finite. x starts one
    row into its storage, so a padding column read as row -1 would find inf; node 0, which
    sends nothing, would be a padding column read as row 0."""
    g = HUB.to("cuda")
    senders = torch.zeros(g.num_src_nodes, dtype=torch.bool)
    senders[HUB.col.long()] = True
    assert not senders[0] and not senders[-1] and (HUB.wsb().tile_cols < 0).any()
    storage = torch.randn(g.num_src_nodes + 1, width, device="cuda", dtype=dtype)
    storage[0] = float("inf")
    x = storage[1:]
    x[~senders.cuda()] = float("nan")
    x[0] = float("inf")
    out, again, csr = _tensor_core_and_csr(g, x)
    assert torch.isfinite(out).all() and torch.isfinite(csr).all()
    torch.testing.assert_close(out, csr, atol=2e-2, rtol=2e-2)
    assert torch.equal(out, again)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [64, 256])
def test_tensor_core_unaligned_features_take_the_plain_path(dtype, width):
    g = HUB.to("cuda")
    storage = torch.randn(g.num_src_nodes * width + 1, device="cuda", dtype=dtype)
    x = storage[1:].view(g.num_src_nodes, width)  # 2 bytes off a 16-byte boundary
    out, again, csr = _tensor_core_and_csr(g, x)
    torch.testing.assert_close(out, csr, atol=2e-2, rtol=2e-2)
    # the same products on the same staged operands as the cp.async path: bitwise equal
    assert torch.equal(out, _wsb_spmm(g, x.clone(), "both"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [8, 200, 256])
def test_tensor_core_spmm_is_deterministic_and_combines_every_piece(dtype, width):
    """Split hub windows and multi-warp pieces: bitwise equal over runs, and every row within
    half-precision rounding of the float64 product, as the CSR path is (a dropped or doubled
    warp or piece partial would be off by a good part of the row)."""
    g = HUB.to("cuda")
    x = torch.randn(g.num_src_nodes, width, device="cuda", dtype=dtype)
    out, again, csr = _tensor_core_and_csr(g, x, norm="none")
    for _ in range(3):
        assert torch.equal(out, again)
        again = _wsb_spmm(g, x, "none")
    reference = fastgnn.ops.spmm(HUB, x.double().cpu(), norm="none").to(out.device)
    scale = reference.abs().amax(1, keepdim=True).clamp(min=1)
    bound = 1e-2 if dtype == torch.float16 else 4e-2
    assert ((out.double() - reference).abs() / scale).max() < bound
    assert ((csr.double() - reference).abs() / scale).max() < bound
