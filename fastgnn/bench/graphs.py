"""Benchmark graphs: the real datasets and seeded synthetic generators, with degree statistics.

A graph is named by a spec string: a dataset name (``cora``, ``tolokers``, ``ogbn-arxiv``,
``flickr``, ``roads-ny``), a preset from :data:`PRESETS`, or a generator call
``kind:key=value,...`` with kind ``powerlaw`` (n, deg, skew, seed), ``uniform`` (n, deg, seed)
or ``block`` (a sampled input block: base=<dataset or preset>, batch, fanout=15x10x5, seed),
or ``shuffled`` (base=<spec>, seed: its nodes relabelled at random).
Generators are vectorised torch code, fast enough for tens of millions of edges.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

import torch

from fastgnn import datasets
from fastgnn.graph import Graph


@dataclass
class BenchGraph:
    """One benchmark graph on the CPU: its spec, the fastgnn Graph and its degree statistics."""
    name: str
    graph: Graph
    stats: Dict[str, float] = field(default_factory=dict)


def degree_stats(graph: Graph) -> Dict[str, float]:
    """Nodes, edges and the in-degree shape: mean, max, max/mean, std/mean and Gini."""
    deg = graph.in_degree.to(torch.float64)
    mean = float(deg.mean()) if deg.numel() else 0.0
    gini = 0.0
    if deg.numel() and deg.sum() > 0:
        ranked = deg.sort().values
        n = ranked.numel()
        weights = torch.arange(1, n + 1, dtype=torch.float64) * 2 - n - 1
        gini = float((weights * ranked).sum() / (n * ranked.sum()))
    return {
        "src_nodes": graph.num_src_nodes,
        "dst_nodes": graph.num_dst_nodes,
        "edges": graph.num_edges,
        "avg_in_degree": round(mean, 3),
        "max_in_degree": graph.max_in_degree,
        "max_over_avg": round(graph.max_in_degree / mean, 2) if mean else 0.0,
        "cv_in_degree": round(float(deg.std()) / mean, 3) if mean and deg.numel() > 1 else 0.0,
        "gini_in_degree": round(gini, 3),
    }


def describe(bench_graph: BenchGraph) -> str:
    s = bench_graph.stats
    nodes = (f"{s['src_nodes']}" if s["src_nodes"] == s["dst_nodes"]
             else f"{s['src_nodes']}->{s['dst_nodes']}")
    return (f"{bench_graph.name}: nodes {nodes}, edges {s['edges']}, in-degree avg "
            f"{s['avg_in_degree']} max {s['max_in_degree']} (max/avg {s['max_over_avg']}, "
            f"cv {s['cv_in_degree']}, gini {s['gini_in_degree']})")


# ---- generators ---------------------------------------------------------------------------------
def power_law(n: int, deg: float, skew: float, seed: int = 0) -> Graph:
    """``n * deg`` edges, uniform sources, destinations drawn with probability proportional to
    ``rank^-skew`` (Zipf) over a random ranking of the nodes. skew 0 is uniform; skew ``a``
    gives a degree tail ``P(k) ~ k^-(1 + 1/a)``, so 0.5-0.9 spans typical social/web graphs
    (1.0 already puts ~7% of all edges on the top node of a 1M-node graph)."""
    gen = torch.Generator().manual_seed(seed)
    num_edges = int(n * deg)
    weights = torch.arange(1, n + 1, dtype=torch.float64).pow(-float(skew))
    cdf = torch.cumsum(weights, 0)
    cdf /= cdf[-1].clone()
    ranks = torch.searchsorted(cdf, torch.rand(num_edges, generator=gen, dtype=torch.float64))
    ranks.clamp_(max=n - 1)
    dst = torch.randperm(n, generator=gen)[ranks]
    src = torch.randint(0, n, (num_edges,), generator=gen)
    return Graph.from_edge_index(torch.stack([src, dst]), num_nodes=n)


def uniform(n: int, deg: int, seed: int = 0) -> Graph:
    """Near-uniform low degree: each node receives ``deg - 1``, ``deg`` or ``deg + 1`` edges
    from uniform random sources (road- or mesh-like degree profile)."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(max(0, deg - 1), deg + 2, (n,), generator=gen)
    dst = torch.repeat_interleave(torch.arange(n), counts)
    src = torch.randint(0, n, (dst.numel(),), generator=gen)
    return Graph.from_edge_index(torch.stack([src, dst]), num_nodes=n)


def _sample_in_edges(graph: Graph, frontier: torch.Tensor, fanout: int,
                     gen: torch.Generator) -> torch.Tensor:
    """Up to ``fanout`` distinct in-edges (CSR positions) of each frontier node, uniformly
    without replacement: rank each row's edges by a random key and keep the first ``fanout``."""
    rowptr = graph.rowptr.to(torch.int64)
    start, count = rowptr[frontier], rowptr[frontier + 1] - rowptr[frontier]
    row_of = torch.repeat_interleave(torch.arange(frontier.numel()), count)
    first = torch.cumsum(count, 0) - count
    pos = start[row_of] + torch.arange(row_of.numel()) - first[row_of]
    key = row_of.to(torch.float64) + torch.rand(row_of.numel(), generator=gen, dtype=torch.float64)
    order = torch.argsort(key)
    rank = torch.arange(order.numel()) - first[row_of[order]]
    return pos[order[rank < fanout]]


def sampled_block(base: Graph, batch: int, fanouts: List[int], seed: int = 0) -> Graph:
    """The input-layer block of fan-out neighbour sampling (as DGL/PyG loaders build them):
    ``batch`` random seeds, then per hop (``fanouts`` in order, outward from the seeds)
    ``fanout`` in-neighbours of every frontier node.
    Destinations are the last frontier; sources are those plus the newly sampled nodes, with
    destinations first (DGL's block convention). Returns a bipartite Graph."""
    gen = torch.Generator().manual_seed(seed)
    frontier = torch.randperm(base.num_dst_nodes, generator=gen)[:batch]
    col = base.col.to(torch.int64)
    for layer, fanout in enumerate(fanouts):
        edges = _sample_in_edges(base, frontier, fanout, gen)
        rows = _frontier_position(base, frontier, edges)
        sources = col[edges]
        if layer == len(fanouts) - 1:
            # Relabel: destinations keep positions 0..T-1, new sources follow in order.
            nodes = torch.cat([frontier, sources])
            unique, inverse = torch.unique(nodes, return_inverse=True)
            first_seen = torch.full((unique.numel(),), nodes.numel(), dtype=torch.int64)
            first_seen.scatter_reduce_(0, inverse, torch.arange(nodes.numel()), "amin")
            local = torch.empty_like(first_seen)
            local[torch.argsort(first_seen)] = torch.arange(unique.numel())
            src_local = local[inverse[frontier.numel():]]
            return Graph.from_edge_index(torch.stack([src_local, rows]),
                                         num_src_nodes=unique.numel(),
                                         num_dst_nodes=frontier.numel())
        frontier = torch.unique(torch.cat([frontier, sources]))
    raise ValueError("fanouts must not be empty")


def shuffled(base: Graph, seed: int = 0) -> Graph:
    """``base`` with its nodes relabelled by a seeded random permutation: the order a graph
    stored by hash or crawl order has, which reordering exists to undo."""
    if base.is_bipartite:
        raise ValueError("shuffled graphs need a homogeneous base graph")
    labels = torch.randperm(base.num_dst_nodes, generator=torch.Generator().manual_seed(seed))
    return Graph.from_edge_index(labels[base.edge_index()], num_nodes=base.num_dst_nodes)


def _frontier_position(base: Graph, frontier: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Position in ``frontier`` of each sampled edge's destination."""
    dst = base.row.to(torch.int64)[edges]
    lookup = torch.full((base.num_dst_nodes,), -1, dtype=torch.int64)
    lookup[frontier] = torch.arange(frontier.numel())
    return lookup[dst]


# ---- specs --------------------------------------------------------------------------------------
PRESETS: Dict[str, str] = {
    # small: the CPU quick suite and tests
    "powerlaw-50k": "powerlaw:n=5000,deg=10,skew=0.8,seed=0",
    "powerlaw-200k": "powerlaw:n=20000,deg=10,skew=0.8,seed=0",
    "uniform-100k": "uniform:n=25000,deg=4,seed=0",
    "block-small": "block:base=powerlaw-200k,batch=256,fanout=5x10,seed=0",
    # GPU scale: up to tens of millions of edges
    "powerlaw-16M": "powerlaw:n=1000000,deg=16,skew=0.8,seed=0",
    "powerlaw-8M-flat": "powerlaw:n=500000,deg=16,skew=0.4,seed=0",
    "uniform-8M": "uniform:n=2000000,deg=4,seed=0",
    "block-arxiv": "block:base=ogbn-arxiv,batch=4096,fanout=10x15,seed=0",
    "block-powerlaw": "block:base=powerlaw-16M,batch=16384,fanout=10x15,seed=0",
    # stored order lost: what reordering (fastgnn.reorder, Graph.reordered) is for
    "roads-ny-shuffled": "shuffled:base=roads-ny,seed=0",
    "ogbn-arxiv-shuffled": "shuffled:base=ogbn-arxiv,seed=0",
}


def split_specs(text: str) -> List[str]:
    """Splits a comma-separated list of graph specs; ``key=value`` items continue the
    generator spec before them (``cora,powerlaw:n=1000,deg=8`` is two graphs)."""
    specs: List[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if specs and "=" in item and ":" not in item:
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def _parse_params(text: str) -> Dict[str, str]:
    params = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"graph parameter {item!r} must look like key=value")
        params[key.strip()] = value.strip()
    return params


def _build(spec: str) -> Graph:
    if spec in PRESETS:
        return _build(PRESETS[spec])
    kind, sep, rest = spec.partition(":")
    if not sep:
        data = datasets.load(spec)  # raises ValueError for unknown names
        return Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
    p = _parse_params(rest)
    seed = int(p.get("seed", 0))
    if kind == "powerlaw":
        return power_law(int(p["n"]), float(p.get("deg", 10)), float(p.get("skew", 1.0)), seed)
    if kind == "uniform":
        return uniform(int(p["n"]), int(p.get("deg", 4)), seed)
    if kind == "block":
        fanouts = [int(f) for f in p.get("fanout", "15x10").split("x")]
        return sampled_block(_build(p["base"]), int(p.get("batch", 1024)), fanouts, seed)
    if kind == "shuffled":
        return shuffled(_build(p["base"]), seed)
    raise ValueError(f"unknown graph kind {kind!r} in {spec!r} (powerlaw, uniform, block, "
                     "shuffled)")


def load(spec: str) -> BenchGraph:
    """Builds the graph named by ``spec`` (see the module docstring) on the CPU; datasets are
    read from ``fastgnn.datasets.data_root()``."""
    graph = _build(spec)
    return BenchGraph(spec, graph, degree_stats(graph))
