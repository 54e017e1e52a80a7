"""Shared fixtures: devices, random graphs with the awkward cases, real datasets."""
from __future__ import annotations

import contextlib
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fastgnn
from fastgnn import datasets


def pytest_configure(config):
    # pytest-xdist workers share the cores. Each with an all-core OpenMP pool oversubscribes
    # them, and gradcheck's many tiny parallel regions then crawl (a GPU host's whole suite
    # with -n 8 stalled at 30%); subprocesses inherit the share through OMP_NUM_THREADS.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project_env(**extra) -> dict:
    """The environment for a subprocess that imports this checkout: the project root ahead of
    the caller's PYTHONPATH, which is kept (packages installed with --target live there)."""
    path = os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def devices():
    """CPU always; CUDA (marked gpu) when present."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def random_edge_index(num_src: int, num_dst: int, num_edges: int, *, seed: int = 0,
                      hub: bool = True, self_loops: bool = True, duplicates: bool = True,
                      isolated: bool = True, device="cpu") -> torch.Tensor:
    """Random edges with the cases kernels get wrong: a hub destination, self-loops,
    duplicate edges, and destinations/sources with no edges at all."""
    gen = torch.Generator().manual_seed(seed)
    hi_src = max(1, num_src - 2) if isolated else num_src  # last sources never send
    hi_dst = max(1, num_dst - 3) if isolated else num_dst  # last destinations never receive
    src = torch.randint(0, hi_src, (num_edges,), generator=gen)
    dst = torch.randint(0, hi_dst, (num_edges,), generator=gen)
    parts_src, parts_dst = [src], [dst]
    if hub:  # destination 0 receives from many sources
        k = max(1, min(num_src, num_edges // 3))
        parts_src.append(torch.randint(0, hi_src, (k,), generator=gen))
        parts_dst.append(torch.zeros(k, dtype=torch.long))
    if self_loops and num_src == num_dst:
        loops = torch.arange(0, min(hi_src, hi_dst), 3)
        parts_src.append(loops)
        parts_dst.append(loops)
    if duplicates:
        parts_src.append(src[: num_edges // 10])
        parts_dst.append(dst[: num_edges // 10])
    src, dst = torch.cat(parts_src), torch.cat(parts_dst)
    perm = torch.randperm(src.numel(), generator=gen)
    return torch.stack([src[perm], dst[perm]]).to(device)


def random_graph(num_nodes=60, num_edges=300, *, num_dst=None, seed=0, device="cpu", **kw):
    num_dst = num_nodes if num_dst is None else num_dst
    ei = random_edge_index(num_nodes, num_dst, num_edges, seed=seed, device=device, **kw)
    if num_dst == num_nodes:
        return fastgnn.Graph.from_edge_index(ei, num_nodes=num_nodes), ei
    return fastgnn.Graph.from_edge_index(ei, num_src_nodes=num_nodes, num_dst_nodes=num_dst), ei


@pytest.fixture(params=["homogeneous", "bipartite"])
def graph_case(request):
    """(graph, edge_index) on CPU: homogeneous with every awkward case, or a bipartite block."""
    if request.param == "homogeneous":
        return random_graph(60, 400, seed=1)
    return random_graph(50, 400, num_dst=30, seed=2)


def load_dataset(name: str) -> datasets.GraphData:
    try:
        return datasets.load(name)
    except datasets.DatasetUnavailable as exc:
        pytest.skip(f"dataset {name} unavailable: {exc}")


def hub_graph(device, index_dtype=None, hub_degree=12_000, num_nodes=4_000, extra=18_000):
    """A destination with hub_degree in-edges (repeated sources: duplicate edges) plus
    ordinary edges."""
    gen = torch.Generator().manual_seed(8)
    hub_src = torch.randint(0, num_nodes, (hub_degree,), generator=gen)
    src = torch.cat([hub_src, torch.randint(0, num_nodes, (extra,), generator=gen)])
    dst = torch.cat([torch.full((hub_degree,), 3), torch.randint(0, num_nodes - 5, (extra,),
                                                                   generator=gen)])
    return fastgnn.Graph.from_edge_index(torch.stack([src, dst]), num_nodes=num_nodes,
                                         index_dtype=index_dtype).to(device)


def minmax_opcheck_plans(g, device):
    """A few launch plans of the native min/max op to opcheck (each is slow): every row light;
    on the GPU also heavy rows above the 0.9 degree quantile, and every row in work items."""
    from fastgnn.ops import minmax
    plans = [(None, None, 0, 0)]
    if device == "cuda":
        _, light, heavy = g.degree_buckets(0.9)
        plans.append((light, heavy, g.max_in_degree, minmax.encode_config(4, 32)))
        plans.append((None, None, 0, minmax.encode_config(4, 0, split_chunk=8)))
    return plans


@contextlib.contextmanager
def deterministic_algorithms():
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` inside, the previous
    setting after: fastgnn's GPU backwards then pull instead of adding with atomics."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


# ops that make zero-filled tensors: what autograd runs to materialise a missing gradient
ZERO_FILLS = {torch.ops.aten.zeros, torch.ops.aten.zeros_like, torch.ops.aten.new_zeros,
              torch.ops.aten.zero_, torch.ops.aten.fill_}


class ZeroFills(TorchDispatchMode):
    """The (shape, dtype) of every tensor a zero-filling op returns while active."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in ZERO_FILLS and isinstance(out, torch.Tensor):
            self.made.append((tuple(out.shape), out.dtype))
        return out
