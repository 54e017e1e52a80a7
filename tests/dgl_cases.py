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
