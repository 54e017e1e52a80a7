"""fastgnn.ops.spmm and its native ops (spmm, sddmm, per-graph caches) against the reference."""
from __future__ import annotations

import gc

import pytest
import torch

import fastgnn
from fastgnn import _native, reference
from fastgnn.ops.spmm import ALGOS
from tests.conftest import devices, load_dataset, random_graph

pytestmark = pytest.mark.skipif(not _native.has_op("spmm"), reason="native ops not built")

NORMS = ("none", "left", "right", "both")
REDUCES = ("sum", "mean")


@pytest.fixture(autouse=True)
def _tuning_in_memory(monkeypatch):
    monkeypatch.setenv("FASTGNN_TUNE_CACHE", "0")  # never write the user's tuning file


def _on(graph_case, device):
    g, ei = graph_case
    return g.to(device), ei.to(device)


def _check_against_reference(g, x, *, rtol=1e-4, atol=1e-5, grad_rtol=None, grad_atol=None,
                             **kwargs):
    """Forward and gradients (x and every differentiable edge input) vs the reference."""
    out = fastgnn.ops.spmm(g, x, **kwargs)
    with fastgnn.backend("reference"):
        ref = fastgnn.ops.spmm(g, x, **kwargs)
    assert out.dtype == x.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    inputs = [x] + [v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.requires_grad]
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, grad_out)
    want = torch.autograd.grad(ref, inputs, grad_out)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=grad_rtol or rtol, atol=grad_atol or atol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("width", [1, 3, 16, 64, 130])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_reference(graph_case, device, width, norm, reduce, weighted):
    g, ei = _on(graph_case, device)
    x = torch.randn(g.num_src_nodes, width, device=device, requires_grad=True)
    weight = torch.rand(ei.shape[1], device=device, requires_grad=True) if weighted else None
    _check_against_reference(g, x, norm=norm, reduce=reduce, edge_weight=weight)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
def test_multi_head_features(graph_case, device):
    g, _ = _on(graph_case, device)
    x = torch.randn(g.num_src_nodes, 4, 8, device=device, requires_grad=True)
    _check_against_reference(g, x, norm="both")


@pytest.mark.parametrize("device", devices())
def test_edge_values_used_as_given(graph_case, device):
    g, ei = _on(graph_case, device)
    x = torch.randn(g.num_src_nodes, 16, device=device, requires_grad=True)
    values = torch.randn(ei.shape[1], device=device, requires_grad=True)
    _check_against_reference(g, x, edge_values=values)
    # a norm is not applied on top of precomputed values
    plain = fastgnn.ops.spmm(g, x, edge_weight=values)
    torch.testing.assert_close(fastgnn.ops.spmm(g, x, edge_values=values), plain)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
def test_int64_indices(device):
    _, ei = random_graph(60, 400, seed=3)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=60, index_dtype=torch.int64).to(device)
    assert g.index_dtype == torch.int64
    x = torch.randn(60, 24, device=device, requires_grad=True)
    weight = torch.rand(ei.shape[1], device=device, requires_grad=True)
    _check_against_reference(g, x, norm="both", edge_weight=weight)


@pytest.mark.sanitize
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("norm", ["none", "both"])
def test_without_cached_transpose(device, norm):
    _, ei = random_graph(50, 400, num_dst=30, seed=4)
    g = fastgnn.Graph.from_edge_index(ei, num_src_nodes=50, num_dst_nodes=30,
                                      cache_transpose=False).to(device)
    x = torch.randn(50, 40, device=device, requires_grad=True)
    weight = torch.rand(ei.shape[1], device=device, requires_grad=True)
    _check_against_reference(g, x, norm=norm, edge_weight=weight)


def test_empty_graph_and_zero_width():
    g = fastgnn.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), num_nodes=5)
    x = torch.randn(5, 3, requires_grad=True)
    out = fastgnn.ops.spmm(g, x, norm="both")
    assert torch.equal(out, torch.zeros(5, 3))
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros(5, 3))
    g2, _ = random_graph(20, 50)
    assert fastgnn.ops.spmm(g2, torch.randn(20, 0)).shape == (20, 0)


def test_cpu_result_independent_of_thread_count():
    g, ei = random_graph(200, 3000, seed=9)
    x = torch.randn(200, 70, requires_grad=True)
    weight = torch.rand(ei.shape[1], requires_grad=True)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            out = fastgnn.ops.spmm(g, x, norm="both", edge_weight=weight)
            results.append((out,) + torch.autograd.grad(out.square().sum(), [x, weight]))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)  # each output sums its edges in one fixed order


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_cpu(graph_case, dtype):
    g, ei = graph_case
    x = torch.randn(g.num_src_nodes, 20).to(dtype).requires_grad_()
    weight = torch.rand(ei.shape[1], requires_grad=True)
    _check_against_reference(g, x, norm="both", edge_weight=weight, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("weighted", [False, True])
def test_half_precision_cpu_is_float32_rounded_once(graph_case, dtype, weighted):
    """Half features accumulate in float32 in the float32 kernel's order, and their loads and
    stores are exact or round once (F16C's conversions in the AVX2/AVX-512 clones, c10's in
    the baseline one): forward and x gradient are the float32 run's on the same values, rounded
    to the half dtype, bit for bit, at every tile and tail width."""
    g, ei = graph_case
    gen = torch.Generator().manual_seed(11)
    weight = torch.rand(ei.shape[1], generator=gen) if weighted else None
    for width in (1, 7, 8, 16, 17, 40, 64, 129, 300):
        x = torch.randn(g.num_src_nodes, width, generator=gen).to(dtype)
        dy = torch.randn(g.num_dst_nodes, width, generator=gen).to(dtype)
        runs = []
        for features, grad in ((x, dy), (x.float(), dy.float())):
            features = features.clone().requires_grad_()
            out = fastgnn.ops.spmm(g, features, norm="both", edge_weight=weight)
            runs.append((out, *torch.autograd.grad(out, features, grad)))
        for half, single in zip(runs[0], runs[1]):
            assert half.dtype == dtype
            assert torch.equal(half, single.to(dtype)), width


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_cpu_rounds_special_values_as_torch(dtype):
    """The vector stores round infinities, overflow, zeros, subnormals and ties as torch's
    conversion of the float32 result does, bit for bit, and keep NaN a NaN (its bits are the
    kernel's: c10's 0x7fc0 for bfloat16, where ATen's vector conversion gives 0xffff)."""
    info = torch.finfo(dtype)
    special = [float("nan"), float("inf"), -float("inf"), info.max, -info.max, -0.0, 0.0,
               info.tiny / 3, -info.tiny / 5, 1.0 + info.eps / 2, 1.0 + 1.5 * info.eps]
    width = 24  # three 8-lane vectors: every value lands in a vector store
    x = torch.tensor(special * 3)[:width].repeat(2, 1).to(dtype)
    g = fastgnn.Graph.from_edge_index(torch.tensor([[0, 1], [0, 1]]), num_nodes=2)
    for weight in (1.0, 3.0, 1 / 3):  # 3.0 overflows info.max
        w = torch.full((2,), weight)
        half = fastgnn.ops.spmm(g, x, edge_weight=w)
        single = fastgnn.ops.spmm(g, x.float(), edge_weight=w).to(dtype)
        nan = single.isnan()
        assert torch.equal(half.isnan(), nan), weight
        assert torch.equal(half[~nan].view(torch.int16), single[~nan].view(torch.int16)), weight


@pytest.mark.parametrize("norm", NORMS)
def test_gradcheck_float64(norm):
    g, ei = random_graph(12, 40, seed=5)
    x = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(ei.shape[1], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w: fastgnn.ops.spmm(g, x, norm=norm, edge_weight=w), (x, weight))
    assert torch.autograd.gradcheck(
        lambda x, w: fastgnn.ops.spmm(g, x, reduce="mean", edge_weight=w), (x, weight))


def test_second_derivatives_float64():
    """The C++ autograd formula calls the ops through the dispatcher: differentiable again."""
    g, ei = random_graph(12, 40, seed=5)
    x = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(ei.shape[1], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(
        lambda x, w: fastgnn.ops.spmm(g, x, norm="both", edge_weight=w), (x, weight))
    assert torch.autograd.gradgradcheck(lambda x: fastgnn.ops.spmm(g, x, norm="right"), (x,))


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="torch.library.opcheck missing")
@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    g, _ = random_graph(30, 120, seed=6, device=device)
    value = g.norm_values("both").requires_grad_()
    x = torch.randn(g.num_src_nodes, 8, device=device, requires_grad=True)
    t_rowptr, t_col, t_perm = g.transpose()
    spmm_op, sddmm_op = torch.ops.fastgnn.spmm.default, torch.ops.fastgnn.sddmm.default
    t_value = g.transposed_norm_values("both")
    torch.library.opcheck(spmm_op, (g.rowptr, g.col, value, x, t_rowptr, t_col, t_perm, None,
                                    g.num_dst_nodes, False, 0, 0))
    torch.library.opcheck(spmm_op, (g.rowptr, g.col, value, x, t_rowptr, t_col, t_perm, t_value,
                                    g.num_dst_nodes, False, 0, 0))
    torch.library.opcheck(spmm_op, (g.rowptr, g.col, None, x, None, None, None, None,
                                    g.num_dst_nodes, False, 0, 0))
    a = torch.randn(g.num_dst_nodes, 8, device=device, requires_grad=True)
    torch.library.opcheck(sddmm_op, (g.rowptr, g.col, a, x))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["tolokers", "ogbn-arxiv"])
def test_real_graph_structure(name, device):
    data = load_dataset(name)
    g = fastgnn.Graph.from_edge_index(data.edge_index.to(device), num_nodes=data.num_nodes)
    x = torch.randn(data.num_nodes, 8, device=device, requires_grad=True)
    weight = torch.rand(g.num_edges, device=device, requires_grad=True)
    _check_against_reference(g, x, norm="both", edge_weight=weight, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rounds_once_on_real_hubs(device, dtype):
    """Half-precision features: the tuned forward and backward are the exact product rounded
    once (plus float32 accumulation error) on ogbn-arxiv's hub rows (in-degree up to 13k).
    cuSPARSE's half products were 6x further off there and ruined a bf16 GCN's logits. CSR
    only: WSB's Tensor Core tiles also round the edge values (tests/test_wsb.py bounds them)."""
    data = load_dataset("ogbn-arxiv")
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes).to(device)
    g.spmm_format = "csr"
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(data.num_nodes, 64, generator=gen).to(device, dtype).requires_grad_()
    dy = torch.randn(data.num_nodes, 64, generator=gen).to(device, dtype)
    out = fastgnn.ops.spmm(g, x, norm="both")
    (dx,) = torch.autograd.grad(out, x, dy)
    A = torch.sparse_coo_tensor(torch.stack([g.row.long(), g.col.long()]),
                                g.norm_values("both", dtype=torch.float64),
                                (g.num_dst_nodes, g.num_src_nodes),
                                check_invariants=True).coalesce()
    half_ulp = torch.finfo(dtype).eps / 2
    for name, got, matrix, given in (("forward", out, A, x.detach()),
                                     ("backward", dx, A.t().coalesce(), dy)):
        exact = torch.sparse.mm(matrix, given.double())
        magnitude = torch.sparse.mm(matrix, given.double().abs())  # the norms are positive
        bound = exact.abs() * half_ulp + magnitude * 1e-5 + 1e-6
        excess = ((got.double() - exact).abs() - bound).max().item()
        assert excess <= 0, f"{name} is {excess:.3g} beyond one rounding"


@pytest.mark.skipif(not hasattr(torch.library, "register_autograd"), reason="needs torch >= 2.4")
@pytest.mark.parametrize("eager_first", [True, False])
def test_torch_compile_fullgraph(eager_first):
    """With the graph's caches built eagerly, or a graph no op has seen (whatever a first use
    does to the Graph, such as registering a finaliser, must trace without a break)."""
    g, _ = random_graph(40, 200, seed=7)
    x = torch.randn(40, 16, requires_grad=True)
    if eager_first:
        fastgnn.ops.spmm(g, x, norm="both").sum().backward()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def layer(x):
        return torch.relu(fastgnn.ops.spmm(g, x, norm="both"))

    out = layer(x)
    ref = torch.relu(reference.spmm(g, x, norm="both"))
    torch.testing.assert_close(out, ref)
    grad, = torch.autograd.grad(out.sum(), x)
    ref_grad, = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(grad, ref_grad)


# ---- bad inputs ---------------------------------------------------------------------------------
def test_bad_inputs():
    g, ei = random_graph(30, 100, seed=8)
    x = torch.randn(30, 4)
    with pytest.raises(ValueError, match="x must have 30 rows"):
        fastgnn.ops.spmm(g, torch.randn(29, 4))
    with pytest.raises(ValueError, match="edge_weight must have shape"):
        fastgnn.ops.spmm(g, x, edge_weight=torch.rand(ei.shape[1] - 1))
    with pytest.raises(ValueError, match="norm must be one of"):
        fastgnn.ops.spmm(g, x, norm="sym")
    with pytest.raises(ValueError, match="reduce must be one of"):
        fastgnn.ops.spmm(g, x, reduce="max")
    with pytest.raises(TypeError, match="x must be floating point"):
        fastgnn.ops.spmm(g, torch.ones(30, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="g must be a fastgnn.Graph"):
        fastgnn.ops.spmm(ei, x)
    with pytest.raises(ValueError, match="edge_values replaces"):
        fastgnn.ops.spmm(g, x, norm="both", edge_values=torch.rand(ei.shape[1]))
    with pytest.raises(TypeError, match="index_dtype"):
        fastgnn.Graph.from_edge_index(ei, num_nodes=30, index_dtype=torch.int16)
    with pytest.raises(RuntimeError, match="spmm"):  # the C++ checks back the Python ones
        torch.ops.fastgnn.spmm(g.rowptr, g.col, torch.rand(3), x, None, None, None, None, 30,
                               False, 0, 0)


@pytest.mark.gpu
def test_bad_device_inputs():
    g, ei = random_graph(30, 100, seed=8, device="cuda")
    with pytest.raises(ValueError, match="edge_weight is on cpu"):
        fastgnn.ops.spmm(g, torch.randn(30, 4, device="cuda"), edge_weight=torch.rand(ei.shape[1]))
    with pytest.raises(ValueError, match="x is on cpu"):
        fastgnn.ops.spmm(g, torch.randn(30, 4))


# ---- GPU: every kernel, half precision, caches, determinism, CUDA graphs -------------------------
def _direct(g, value, x, algo, *, transposed=None):
    """One native product: forward (transposed=None) or A^T x, walking the cached transpose
    with values gathered through t_perm ("cached"), given in transposed order ("cached_values"),
    or through the device's transposed product ("optranspose")."""
    if transposed is None:
        return torch.ops.fastgnn.spmm(g.rowptr, g.col, value, x, None, None, None, None,
                                      g.num_dst_nodes, False, g.key, algo)
    t = (None,) * 4
    if transposed != "optranspose":
        t_value = None
        if transposed == "cached_values" and value is not None:
            t_value = value[g.transpose()[2].long()]
        t = g.transpose() + (t_value,)
    return torch.ops.fastgnn.spmm(g.rowptr, g.col, value, x, *t, g.num_src_nodes, True, g.key,
                                  algo)


def _dense(g, value):
    """The graph's matrix (value in CSR order) as a dense float64 tensor, duplicates summed."""
    return torch.sparse_coo_tensor(torch.stack([g.row.long(), g.col.long()]), value.double(),
                                   (g.num_dst_nodes, g.num_src_nodes)).to_dense()


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ALGOS))
@pytest.mark.parametrize("width", [1, 3, 16, 64, 130, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_every_cuda_kernel(graph_case, name, width, dtype):
    g, _ = _on(graph_case, "cuda")
    algo = ALGOS[name]
    value = g.norm_values("both", dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)
    x = torch.randn(g.num_src_nodes, width, device="cuda").to(dtype)
    dy = torch.randn(g.num_dst_nodes, width, device="cuda").to(dtype)
    A = _dense(g, value)
    out = _direct(g, value, x, algo)
    torch.testing.assert_close(out.double(), A @ x.double(), rtol=tol, atol=tol)
    for mode in ("cached", "cached_values", "optranspose"):
        if mode == "optranspose" and algo < 16:
            continue  # our kernels fall back to atomics there; covered by the ops tests
        grad = _direct(g, value, dy, algo, transposed=mode)
        torch.testing.assert_close(grad.double(), A.t() @ dy.double(), rtol=tol, atol=tol)


def test_graph_streams_leave_out_the_split_kernels(monkeypatch):
    """Graphs whose choices go by size class (a sampled batch's from the start, other new
    structures past tuning.EXACT_STRUCTURES of their class) come one per step: the split
    kernels, whose per-graph work list costs host syncs, are not among their candidates; they
    stay among those of a graph built once."""
    from fastgnn import tuning
    from fastgnn.ops.spmm import algo_candidates
    from fastgnn.sampling import NeighborSampler
    g, _ = random_graph(200, 2000, seed=8)
    batch = NeighborSampler(g, [4, 4]).sample_subgraph(torch.arange(20)).graph
    names = lambda graph: algo_candidates("spmm_fwd", graph, 64, torch.float32, "cpu")  # noqa: E731
    assert names(g) == list(ALGOS)
    assert names(batch) == [n for n in ALGOS if not n.startswith("csr_split")]
    monkeypatch.setattr(tuning, "EXACT_STRUCTURES", 0)  # as when many graphs of g's class came
    assert names(g) == names(batch)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ALGOS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rows_aligned_to_8_bytes_only(graph_case, name, dtype):
    """Half rows take 16-byte (8-scalar) packets where width and pointers allow; operands that
    start 8 bytes past a 16-byte boundary must fall back to narrower packets, not misread."""
    g, _ = _on(graph_case, "cuda")
    value = g.norm_values("both", dtype=torch.float32)
    width = 64
    flat = torch.randn(g.num_src_nodes * width + 4, device="cuda").to(dtype)
    x = flat[4:].view(g.num_src_nodes, width)  # 8 bytes past the allocation's start
    assert x.data_ptr() % 16 == 8
    A = _dense(g, value)
    out = _direct(g, value, x, ALGOS[name])
    tol = 1e-2 if dtype == torch.float16 else 5e-2
    torch.testing.assert_close(out.double(), A @ x.double(), rtol=tol, atol=tol)
    if ALGOS[name] < 16:  # ours: each feature sums its edges in the same order at any packet
        torch.testing.assert_close(out, _direct(g, value, x.clone(), ALGOS[name]), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in ALGOS if n.startswith("csr_split")])
@pytest.mark.parametrize("width", [1, 3, 64, 130, 512])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_split_kernels_on_heavy_rows(name, width, dtype):
    """Rows cut into many items both ways: a destination with 3000 in-edges and a source with
    2500 out-edges (duplicates included), beside empty rows; bitwise repeatable."""
    gen = torch.Generator().manual_seed(21)
    src = torch.cat([torch.randint(0, 200, (3000,), generator=gen), torch.full((2500,), 7),
                     torch.randint(0, 200, (1500,), generator=gen)])
    dst = torch.cat([torch.zeros(3000, dtype=torch.long),
                     torch.randint(0, 150, (2500,), generator=gen),
                     torch.randint(0, 150, (1500,), generator=gen)])
    g = fastgnn.Graph.from_edge_index(torch.stack([src, dst]), num_nodes=220).to("cuda")
    value = g.norm_values("both", dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    tol = {torch.float16: 2e-2}.get(dtype, 1e-5)
    gc.collect()
    before = torch.ops.fastgnn.graph_cache_size()
    A = _dense(g, value)
    x = torch.randn(g.num_src_nodes, width, device="cuda").to(dtype)
    out = _direct(g, value, x, ALGOS[name])
    torch.testing.assert_close(out.double(), A @ x.double(), rtol=tol, atol=tol)
    assert torch.equal(out, _direct(g, value, x, ALGOS[name]))
    for mode in ("cached", "cached_values"):
        grad = _direct(g, value, x, ALGOS[name], transposed=mode)
        torch.testing.assert_close(grad.double(), A.t() @ x.double(), rtol=tol, atol=tol)
    assert torch.ops.fastgnn.graph_cache_size() == before + 2  # the two work lists
    del g
    gc.collect()
    assert torch.ops.fastgnn.graph_cache_size() == before


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm", NORMS)
def test_half_precision_cuda(graph_case, dtype, norm):
    g, ei = _on(graph_case, "cuda")
    x = torch.randn(g.num_src_nodes, 64, device="cuda").to(dtype).requires_grad_()
    weight = torch.rand(ei.shape[1], device="cuda", requires_grad=True)
    tol = 1e-2 if dtype == torch.float16 else 5e-2
    _check_against_reference(g, x, norm=norm, edge_weight=weight, rtol=tol, atol=tol)


def _cache_size():
    return torch.ops.fastgnn.graph_cache_size()


@pytest.mark.gpu
def test_cache_entries_per_graph_and_release():
    cusparse = ALGOS["cusparse_default"]
    g1, _ = random_graph(60, 400, seed=11, device="cuda")
    g2, _ = random_graph(60, 400, seed=12, device="cuda")  # same sizes, other structure
    assert (g1.num_src_nodes, g1.num_dst_nodes) == (g2.num_src_nodes, g2.num_dst_nodes)
    x = torch.randn(60, 32, device="cuda")
    gc.collect()  # graphs of earlier tests must not leave during the count
    before = _cache_size()
    for g in (g1, g2, g1):
        out = _direct(g, None, x, cusparse)
        torch.testing.assert_close(out, reference.spmm(g, x))
    assert _cache_size() == before + 2  # one entry per graph, never shared
    del g, g1
    gc.collect()
    assert _cache_size() == before + 1  # the freed graph's entry is gone
    del g2
    gc.collect()
    assert _cache_size() == before


@pytest.mark.gpu
def test_cache_keyed_by_width_and_dtype():
    g, _ = random_graph(60, 400, seed=13, device="cuda")
    value = g.norm_values("both")
    gc.collect()
    before = _cache_size()
    for width, dtype in [(16, torch.float32), (48, torch.float32), (16, torch.float16),
                         (16, torch.float32), (300, torch.bfloat16)]:
        for name in ("cusparse_default", "cusparse_alg1"):
            x = torch.randn(60, width, device="cuda").to(dtype)
            out = _direct(g, value, x, ALGOS[name])
            want = _dense(g, value) @ x.double()
            torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    assert _cache_size() == before + 4  # (16, f32), (48, f32), (16, f16), (300, bf16)


@pytest.mark.gpu
def test_cusparse_preprocessing_follows_new_values():
    """ALG1 is preprocessed once per entry; later calls with other values stay right."""
    g, _ = random_graph(60, 400, seed=16, device="cuda")
    x = torch.randn(60, 64, device="cuda")
    for seed in range(3):
        value = torch.rand(g.num_edges, device="cuda",
                           generator=torch.Generator("cuda").manual_seed(seed))
        out = _direct(g, value, x, ALGOS["cusparse_alg1"])
        torch.testing.assert_close(out.double(), _dense(g, value) @ x.double(), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.gpu
def test_deterministic_mode_avoids_atomics():
    _, ei = random_graph(60, 400, seed=14)
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=60, cache_transpose=False).to("cuda")
    x = torch.randn(60, 32, device="cuda", requires_grad=True)
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(2):
            out = fastgnn.ops.spmm(g, x, norm="both")
            grads.append(torch.autograd.grad(out.sum(), x)[0])
        assert torch.equal(grads[0], grads[1])
        with pytest.raises(RuntimeError, match="deterministic"):
            _direct(g, None, torch.randn(60, 8, device="cuda"), 0, transposed="optranspose")
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.gpu
@pytest.mark.parametrize("width", [8, 64])
def test_cuda_graph_capture(width):
    g, ei = random_graph(60, 400, seed=15, device="cuda")
    x = torch.randn(60, width, device="cuda", requires_grad=True)
    weight = torch.rand(ei.shape[1], device="cuda", requires_grad=True)

    def step():
        out = fastgnn.ops.spmm(g, x, norm="both", edge_weight=weight)
        return torch.autograd.grad(out.sum(), [x, weight])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # tune and build every cache before capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():
        x.mul_(2)
    graph.replay()
    torch.cuda.synchronize()
    want = step()
    for a, b in zip(captured, want):
        torch.testing.assert_close(a, b)
