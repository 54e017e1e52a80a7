"""DGL graphs with the awkward cases (isolated nodes, self-loops, duplicates, a hub) for the
fastgnn.dgl tests: homogeneous, bipartite, a block of a sampled-style MFG; int64 and int32."""
from __future__ import annotations

import contextlib
import warnings

import torch

from conftest import random_edge_index

GRAPH_KINDS = ("homogeneous", "bipartite", "block", "homogeneous-int32", "block-int32")


def make_graph(kind: str, seed: int = 0):
    import dgl

    if kind.startswith("bipartite"):
        src, dst = random_edge_index(50, 30, 300, seed=seed)
        graph = dgl.heterograph({("user", "rates", "item"): (src, dst)},
                                {"user": 50, "item": 30})
    else:
        src, dst = random_edge_index(60, 60, 300, seed=seed)
        graph = dgl.graph((src, dst), num_nodes=60)
        if kind.startswith("block"):
            # destinations: every third node (hub 0 and some isolated ones among them), with
            # their in-edges, as a neighbour sampler's frontier
            seeds = torch.arange(0, 60, 3)
            graph = dgl.to_block(dgl.in_subgraph(graph, seeds), seeds)
    return graph.int() if kind.endswith("int32") else graph


def with_shuffled_twins(graph, seed: int = 0):
    """``graph`` with every edge doubled and all edges in a random order: duplicate edges, and
    edge ids that do not follow the sources."""
    import dgl

    src, dst = graph.edges()
    order = torch.randperm(2 * src.numel(), generator=torch.Generator().manual_seed(seed))
    src, dst = torch.cat([src, src])[order], torch.cat([dst, dst])[order]
    if graph.is_block:
        return dgl.create_block((src, dst), graph.num_src_nodes(), graph.num_dst_nodes(),
                                idtype=graph.idtype)
    if len(graph.ntypes) > 1:
        return dgl.heterograph({graph.canonical_etypes[0]: (src, dst)},
                               {nt: graph.num_nodes(nt) for nt in graph.ntypes},
                               idtype=graph.idtype)
    return dgl.graph((src, dst), num_nodes=graph.num_nodes(), idtype=graph.idtype)


def tied_leaves(*shapes, seed=0, low=-1, high=3, dtype=torch.float32):
    """ReLU'd small integers: many tied messages (zeros above all); sums stay exact."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(low, high, shape, generator=gen).clamp(min=0).to(dtype)
            .requires_grad_() for shape in shapes]


def special_leaves(*shapes, seed=0, dtype=torch.float32):
    """Small integers, ties, NaN and +-inf (a sixth of the entries each): rows whose messages are
    all NaN, all -inf or hold +inf, and NaN among ties; sums stay exact."""
    pool = torch.tensor([float("nan"), float("-inf"), float("inf"), -1.0, 0.0, 1.0, 1.0, 2.0,
                         float("nan"), float("-inf"), float("inf"), 0.0], dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    return [pool[torch.randint(0, len(pool), shape, generator=gen)].requires_grad_()
            for shape in shapes]


def assert_same(actual, expected):
    """Bit for bit, NaN equal to NaN."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def exact_grads(out: torch.Tensor, inputs, seed: int = 1):
    """Gradients of a fixed small-integer projection of ``out`` (infinite entries included)
    with respect to ``inputs``."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randint(-3, 4, out.shape, generator=gen).to(out.dtype)
    return torch.autograd.grad((out * weight).sum(), inputs)


@contextlib.contextmanager
def libxsmm(enabled: bool):
    """DGL's libxsmm switch (its CPU kernels keep the last of equal messages with libxsmm on
    an AVX-512 machine, the first without)."""
    import dgl

    before = dgl.is_libxsmm_enabled()
    dgl.use_libxsmm(enabled)
    try:
        yield
    finally:
        dgl.use_libxsmm(before)


def node_counts(graph):
    return graph.num_src_nodes(), graph.num_dst_nodes()


@contextlib.contextmanager
def no_fallback():
    """Turns a FallbackWarning into an error: the call must take its fused path."""
    from fastgnn.dgl import FallbackWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        yield


def leaves(*shapes, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen, dtype=dtype).requires_grad_() for shape in shapes]


def grads(out: torch.Tensor, inputs, seed: int = 1):
    """Gradients of a fixed random projection of ``out`` with respect to ``inputs``."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    wanted = [x for x in inputs if x.requires_grad]
    found = torch.autograd.grad((out * weight).sum(), wanted, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(wanted, found)]


def assert_close(actual, expected, dtype=torch.float32):
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(actual, expected, **tol)
