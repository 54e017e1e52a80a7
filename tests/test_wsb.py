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


def _wsb_spmm(g, x, norm="none", reduce="sum"):
    layout = g.wsb()
    value = g.norm_values(norm, reduce, dtype=torch.float64 if x.dtype == torch.float64
                          else torch.float32)
    blocks = layout.values(value, x.dtype)
    t_rowptr, t_col, t_perm = g.transpose()
    t_value = g.transposed_norm_values(norm, reduce, value.dtype) if value is not None else None
    return wsb.product(layout.tile_ptr, layout.tile_cols, blocks, x, g.num_dst_nodes, g.rowptr,
                       g.col, value, t_rowptr, t_col, t_perm, t_value, g.key, 0)


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
            g.rowptr, g.col, None, t_rowptr, t_col, t_perm, None, g.key, 0)
    torch.library.opcheck(torch.ops.fastgnn.wsb_spmm.default, args)


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
@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [16, 40, 64, 200])
def test_tensor_core_spmm_matches_csr(name, dtype, width):
    g = GRAPHS[name].to("cuda")
    for norm in NORMS:
        x = torch.randn(g.num_src_nodes, width, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(g.num_dst_nodes, width, device="cuda", dtype=dtype)
        g.spmm_format = "wsb"
        out = fastgnn.ops.spmm(g, x, norm=norm)
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
    assert "spmm_format/64/float16" in tuning.choices(g)
