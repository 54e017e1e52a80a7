"""SnapshotGraph and spmm_snapshots: against snapshot-by-snapshot fastgnn.ops.spmm and the
reference, forward and backward, for windows of every overlap; sliding; bad inputs."""
import pytest
import torch

import fastgnn
from fastgnn import reference
from fastgnn.graph import NORMS
from fastgnn.snapshots import SnapshotGraph

from conftest import deterministic_algorithms, devices, random_edge_index

N = 50


def window(overlap: float, snapshots: int = 4, edges: int = 300, seed: int = 0, device="cpu"):
    """Edge lists sharing about ``overlap`` of their edges: a common core (with a hub,
    self-loops, duplicates and isolated nodes) plus edges of each snapshot's own; the last
    snapshot reaches nodes the others never touch (new nodes)."""
    shared = int(edges * overlap)
    core = random_edge_index(N - 5, N - 5, shared, seed=seed) if shared else \
        torch.empty(2, 0, dtype=torch.long)
    lists = []
    for t in range(snapshots):
        own = random_edge_index(N - 5, N - 5, max(1, edges - shared), seed=seed + 100 + t,
                                hub=False, self_loops=False)
        if t == snapshots - 1:
            own = torch.cat([own, torch.tensor([[N - 4, N - 3], [N - 3, N - 4]])], dim=1)
        lists.append(torch.cat([core, own], dim=1).to(device))
    return lists


def per_snapshot(lists, xs, norm):
    return torch.stack([fastgnn.ops.spmm(fastgnn.Graph.from_edge_index(ei, num_nodes=N), x, norm)
                        for ei, x in zip(lists, xs)])


def features(snapshots, width, device, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(snapshots, N, width, generator=gen, dtype=dtype).to(device)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("overlap", [0.0, 0.5, 0.99])
def test_matches_per_snapshot_spmm(device, norm, overlap):
    lists = window(overlap, device=device)
    sg = SnapshotGraph(lists, N)
    assert sg.device.type == device
    xs = features(len(lists), 40, device).requires_grad_()
    out = fastgnn.ops.spmm_snapshots(sg, xs, norm)
    grad = torch.randn_like(out)
    got, = torch.autograd.grad(out, xs, grad)
    xs_ref = xs.detach().clone().requires_grad_()
    ref = per_snapshot(lists, xs_ref, norm)
    want, = torch.autograd.grad(ref, xs_ref, grad)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("width", [1, 33, 130])
def test_widths_many_snapshots_and_reference(device, width):
    lists = window(0.9, snapshots=11, edges=200, device=device)  # two snapshot chunks on GPU
    sg = SnapshotGraph(lists, N)
    xs = features(11, width, device)
    out = fastgnn.ops.spmm_snapshots(sg, xs, "both")
    torch.testing.assert_close(out, reference.spmm_snapshots(sg, xs, "both"), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, per_snapshot(lists, xs, "both"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("width", [3, 64, 130])
@pytest.mark.parametrize("snapshots", [4, 11])
def test_features_shared_by_every_snapshot(device, norm, width, snapshots):
    """An expanded [N, F] (snapshot stride 0: static node features) is read in place and
    gives what its materialised copy gives, forward and backward (the gradient summed)."""
    lists = window(0.9, snapshots=snapshots, edges=200, device=device)
    sg = SnapshotGraph(lists, N)
    x = features(1, width, device)[0].requires_grad_()
    xs = x.expand(snapshots, -1, -1)
    assert xs.stride(0) == 0
    out = fastgnn.ops.spmm_snapshots(sg, xs, norm)
    grad = torch.randn_like(out)
    got, = torch.autograd.grad(out, x, grad)
    x_ref = x.detach().clone().requires_grad_()
    ref = per_snapshot(lists, x_ref.expand(snapshots, -1, -1).contiguous(), norm)
    want, = torch.autograd.grad(ref, x_ref, grad)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", devices())
def test_conv_on_static_features_matches_the_stacked_copy(device):
    from fastgnn.nn import SnapshotGCNConv
    lists = window(0.9, device=device)
    sg = SnapshotGraph(lists, N)
    conv = SnapshotGCNConv(6, 5).to(device)
    x = features(1, 6, device)[0]
    torch.testing.assert_close(conv(sg, x), conv(sg, x.expand(4, -1, -1).contiguous()),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("width", [16, 70])
@pytest.mark.parametrize("shared", [False, True])
def test_hub_rows_cut_into_work_items(device, dtype, width, shared):
    """Rows of hundreds of edges, shared and not (the GPU cuts them into items of 64 edges
    that add into the row), in both directions for the backward; features of each snapshot or
    shared by all (on the GPU then 8 or 1 lane slots a warp split each item's edges)."""
    gen = torch.Generator().manual_seed(5)
    hub_in = torch.stack([torch.randint(0, N, (400,), generator=gen), torch.zeros(400, dtype=torch.long)])
    lists = [torch.cat([hub_in, hub_in.flip(0), hub_in[:, : 100 + 50 * t]], 1).to(device)
             for t in range(3)]
    x = features(1 if shared else 3, width, device, dtype=dtype)
    _check_three_snapshots(lists, x, tol=1e-5 if dtype == torch.float32 else 2e-2)


def _check_three_snapshots(lists, x, tol):
    """spmm_snapshots of three snapshots, norm "both", on ``x`` ([3, N, F], or [1, N, F]
    shared), forward and x's gradient, against the per-snapshot reference in float64; the
    output."""
    x = x.requires_grad_()
    out = fastgnn.ops.spmm_snapshots(SnapshotGraph(lists, N), x.expand(3, -1, -1), "both")
    grad = torch.randn_like(out)
    got, = torch.autograd.grad(out, x, grad)
    xs_ref = x.detach().double().requires_grad_()
    ref = per_snapshot(lists, xs_ref.expand(3, -1, -1), "both")
    want, = torch.autograd.grad(ref, xs_ref, grad.double())
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    return out


@pytest.fixture
def nan_filled_empty():
    """Deterministic algorithms on, so that torch fills the memory of every new empty tensor
    with NaN (``torch.utils.deterministic.fill_uninitialized_memory``): whatever a kernel
    leaves unwritten shows."""
    fill = torch.utils.deterministic.fill_uninitialized_memory
    with deterministic_algorithms():
        torch.utils.deterministic.fill_uninitialized_memory = True
        try:
            yield
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = fill


@pytest.mark.gpu
@pytest.mark.parametrize("shared", [False, True])
def test_every_output_row_is_written(nan_filled_empty, shared):
    """On the GPU the output starts uninitialised and only rows cut into several work items
    (hubs) are zeroed before the kernel: every other row, those without edges included, must
    be written by it, forward and backward."""
    assert torch.empty(8, device="cuda").isnan().all()  # the fill this test relies on
    gen = torch.Generator().manual_seed(11)
    hub_in = torch.stack([torch.randint(0, N - 10, (300,), generator=gen),
                          torch.zeros(300, dtype=torch.long)])
    lists = [torch.cat([hub_in[:, : 150 + 50 * t], random_edge_index(N - 10, N - 10, 80,
                                                                   seed=t)], 1).cuda()
             for t in range(3)]  # nodes N - 10 .. N - 1 have no edges
    out = _check_three_snapshots(lists, features(1 if shared else 3, 16, "cuda"), tol=1e-5)
    assert out[:, N - 10:].abs().sum() == 0


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes(device, dtype):
    lists = window(0.5, device=device)
    sg = SnapshotGraph(lists, N)
    xs = features(4, 16, device, dtype=dtype)
    out = fastgnn.ops.spmm_snapshots(sg, xs, "right")
    assert out.dtype == dtype
    want = per_snapshot(lists, xs.double(), "right")
    tol = 1e-12 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)


def test_trailing_dims_are_flattened():
    lists = window(0.5)
    sg = SnapshotGraph(lists, N)
    xs = features(4, 12, "cpu").view(4, N, 3, 4)
    out = fastgnn.ops.spmm_snapshots(sg, xs, "left")
    assert out.shape == xs.shape
    torch.testing.assert_close(out.view(4, N, 12), per_snapshot(lists, xs.view(4, N, 12), "left"))


@pytest.mark.parametrize("norm", NORMS)
def test_gradcheck_float64(norm):
    lists = [random_edge_index(12, 12, 30, seed=s) for s in range(3)]
    sg = SnapshotGraph(lists, 12)
    xs = torch.randn(3, 12, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: fastgnn.ops.spmm_snapshots(sg, x, norm), (xs,))
    if norm == "both":  # the backward is the same op: differentiable in turn
        assert torch.autograd.gradgradcheck(
            lambda x: fastgnn.ops.spmm_snapshots(sg, x, norm), (xs,))


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="opcheck needs torch 2.4")
@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    sg = SnapshotGraph(window(0.5, device=device), N)
    src, dst = sg.norm_scales("both")
    xs = features(4, 8, device).requires_grad_()
    torch.library.opcheck(torch.ops.fastgnn.spmm_snapshots.default,
                          (*sg.structure(), xs, src, dst, N, *sg.transposed()))


def test_structure_stores_shared_edges_once():
    lists = window(0.5, snapshots=4)
    sg = SnapshotGraph(lists, N)
    rowptr, shared_end, col, mask = sg.structure()
    full = (1 << 4) - 1
    counts = [ei.shape[1] for ei in lists]
    assert sg.num_snapshot_edges().tolist() == counts  # duplicates kept
    assert sg.num_edges < sum(counts)
    assert sg.num_shared_edges >= int(0.5 * 300) - 1
    for i in range(N):  # shared edges first in each row, the rest partial
        assert bool((mask[rowptr[i]:shared_end[i]] == full).all())
        assert bool((mask[shared_end[i]:rowptr[i + 1]] != full).all())
    assert int((mask == full).sum()) == sg.num_shared_edges


def sequence(steps, device="cpu"):
    """Growing graph: snapshot s holds the first edges of an arrival order, a few removed."""
    edges = random_edge_index(N - 2, N - 2, 60 * (steps + 1), seed=7, hub=True)
    out = []
    for s in range(steps):
        ei = edges[:, : 60 * (s + 2)]
        out.append(ei[:, torch.arange(ei.shape[1]) % 17 != s % 17].to(device))
    return out


@pytest.mark.parametrize("device", devices())
def test_slide_equals_a_fresh_window(device):
    seq = sequence(9, device)
    T = 4
    sg = SnapshotGraph(seq[:T], N)
    for start in range(1, len(seq) - T + 1):
        sg = sg.slide(seq[start + T - 1])
        fresh = SnapshotGraph(seq[start:start + T], N)
        for a, b in zip(sg.structure(), fresh.structure()):
            assert torch.equal(a, b)
        xs = features(T, 8, device, seed=start)
        torch.testing.assert_close(fastgnn.ops.spmm_snapshots(sg, xs, "both"),
                                   per_snapshot(seq[start:start + T], xs, "both"))


@pytest.mark.gpu
def test_slide_uploads_only_the_difference():
    seq = sequence(6)
    sg = SnapshotGraph(seq[:4], N, device="cuda")
    assert sg.bytes_uploaded == sg.num_edges * 24  # the pool: key, copy number, mask
    slid = sg.slide(seq[4])
    last, new = seq[3], seq[4]
    # new edges and the edges whose membership flipped, 8 bytes a number
    assert 0 < slid.bytes_uploaded < new.numel() * new.element_size()
    fresh = SnapshotGraph(seq[1:5], N, device="cuda")
    for a, b in zip(slid.structure(), fresh.structure()):
        assert torch.equal(a, b)
    assert last.device.type == "cpu"


def test_cpu_window_copies_nothing_and_slide_keeps_the_old_window():
    seq = sequence(6)
    sg = SnapshotGraph(seq[:4], N)
    slid = sg.slide(seq[4])
    assert sg.bytes_uploaded == slid.bytes_uploaded == 0
    assert torch.equal(sg.edge_index(0), SnapshotGraph(seq[:1], N).edge_index(0))
    assert slid.num_snapshots == 4


def test_isolated_and_new_nodes_get_zeros():
    lists = [torch.tensor([[0, 1], [1, 0]]), torch.tensor([[0, 1, 5], [1, 0, 6]])]
    sg = SnapshotGraph(lists, 10)
    xs = torch.ones(2, 10, 3)
    out = fastgnn.ops.spmm_snapshots(sg, xs, "both")
    assert out[0, 6].abs().sum() == 0 and out[1, 6].tolist() == [1.0, 1.0, 1.0]
    assert out[:, 9].abs().sum() == 0
    assert sg.degrees()[0][:, 6].tolist() == [0, 1]


def test_bad_inputs():
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(TypeError, match="edge_indices must be a list"):
        SnapshotGraph(ei, 3)
    with pytest.raises(ValueError, match="1 to 63 snapshots"):
        SnapshotGraph([], 3)
    with pytest.raises(ValueError, match="1 to 63 snapshots"):
        SnapshotGraph([ei] * 64, 3)
    with pytest.raises(ValueError, match=r"edge_indices\[1\] has index 5"):
        SnapshotGraph([ei, torch.tensor([[0], [5]])], 3)
    with pytest.raises(TypeError, match=r"edge_indices\[0\] must have an integer dtype"):
        SnapshotGraph([ei.float()], 3)
    with pytest.raises(ValueError, match=r"shape \[2, E\]"):
        SnapshotGraph([ei[0]], 3)
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        SnapshotGraph([ei], 3.0)
    sg = SnapshotGraph([ei, ei], 3)
    with pytest.raises(ValueError, match="out of range"):
        sg.slide(torch.tensor([[0], [3]]))
    with pytest.raises(TypeError, match="sg must be a fastgnn.SnapshotGraph"):
        fastgnn.ops.spmm_snapshots(fastgnn.Graph.from_edge_index(ei), torch.ones(2, 3, 1))
    with pytest.raises(ValueError, match=r"xs must have shape \[T=2, N=3, F\]"):
        fastgnn.ops.spmm_snapshots(sg, torch.ones(3, 3, 1))
    with pytest.raises(TypeError, match="xs must be floating point"):
        fastgnn.ops.spmm_snapshots(sg, torch.ones(2, 3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="norm must be one of"):
        fastgnn.ops.spmm_snapshots(sg, torch.ones(2, 3, 1), "sym")
    with pytest.raises(IndexError, match="snapshot 2 out of range"):
        sg.edge_index(2)
