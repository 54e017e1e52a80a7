#!/usr/bin/env python3
"""fastgnn beside the io-aware kernels paper's own release (``turbo_gnn``, from
github.com/yandex-research/On-Efficient-Scaling-Of-GNNs), in one process on one GPU: min/max
aggregation, GATv2 and the Graph Transformer, forward and forward + backward through autograd,
each library under its own tuner (the release's ``autotune=True``, which times the forward).

    python3 scripts/bench_vs_release.py [--graphs tolokers,ogbn-arxiv,flickr]
        [--minmax 128,256,512] [--reduce max,min]
        [--attention gatv2:4x64,gatv2:8x128,dot:4x64,dot:8x128] [--backward-kernels]

The release is not a dependency: build it yourself (``TURBO_GNN_FORCE_BUILD=TRUE pip install
--no-build-isolation <its checkout>``); without it the script says so and exits 2. Each pair
is also checked for equal outputs (max abs difference printed), so a faster but different op
cannot pass unnoticed. Times are medians of back-to-back batches (``fastgnn.bench.measure``),
the two libraries alternating row by row on the same inputs. ``--backward-kernels`` times
the backward's GPU kernels alone instead (``torch.profiler``, summed per call of
``torch.autograd.grad`` from a fixed output gradient, so no gradient accumulation): the
device work of each library, free of the host time that hides it at small sizes.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Callable, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn.bench import graphs, measure, report  # noqa: E402

Op = Callable[[], torch.Tensor]


def release_graph(turbo, g, device):
    """The release's dual-CSR graph of the same edges (its own bucketing, default quantile)."""
    return turbo.AdjacencyForwardBackwardWithNodeBuckets.from_edge_list(
        g.edge_index().to(device), num_nodes=g.num_dst_nodes, index_dtype=torch.int32)


def time_pair(op: Op, leaves, device) -> Tuple[float, float]:
    """(forward ms, forward + backward ms) of ``op`` through autograd."""
    out = op()
    grad = torch.randn_like(out)

    def step():
        for leaf in leaves:
            leaf.grad = None
        op().backward(grad)

    fwd = measure.time_forward(op, device, warmup=5, repeats=15)
    both = measure.time_forward(step, device, warmup=5, repeats=15)
    return fwd, both


def time_backward_kernels(op: Op, leaves, device) -> float:
    """GPU kernel ms of one backward through autograd, from one forward's graph."""
    out = op()
    grad = torch.randn_like(out)

    def backward():
        return torch.autograd.grad(out, leaves, grad, retain_graph=True)
    for _ in range(5):  # warm-up: caches, allocator
        backward()
    return measure.busy_ms(backward, device, calls=20)


def minmax_ops(turbo, tuned: dict, g, tg, width: int, reduce: str, device):
    x = torch.randn(g.num_src_nodes, width, device=device, requires_grad=True)
    ours = lambda: fastgnn.ops.aggregate(g, x, reduce)  # noqa: E731
    theirs = lambda: turbo.reduction_aggr(tg, x, reduce=reduce, **tuned)  # noqa: E731
    return ours, theirs, [x]


def attention_ops(turbo, tuned: dict, g, tg, kind: str, heads: int, dim: int, device):
    def leaf(rows, *shape):
        return (torch.randn(rows, *shape, device=device) * 0.5).requires_grad_()
    t, s = g.num_dst_nodes, g.num_src_nodes
    if kind == "gatv2":
        x_dst, x_src, att = leaf(t, heads, dim), leaf(s, heads, dim), leaf(heads, dim)
        ours = lambda: fastgnn.ops.gatv2_attention(g, x_dst, x_src, att, 0.2)  # noqa: E731
        theirs = lambda: turbo.gatv2_aggr(  # noqa: E731
            tg, x_dst, x_src, att, 0.2, **tuned).view(t, heads, dim)
        return ours, theirs, [x_dst, x_src, att]
    q, k, v = leaf(t, heads, dim), leaf(s, heads, dim), leaf(s, heads, dim)
    flat = q.detach().view(t, heads * dim)  # the release's tuner reads the width off x
    ours = lambda: fastgnn.ops.graph_attention(g, q, k, v)  # noqa: E731
    # The release names the source side Q and the destination side K: same scores.
    theirs = lambda: turbo.graph_transformer_aggr(  # noqa: E731
        tg, flat, k, q, v, dim ** -0.5, **tuned)
    return ours, theirs, [q, k, v]


def row(name: str, config: str, ours: Op, theirs: Op, leaves, device,
        backward_kernels: bool) -> str:
    if backward_kernels:
        theirs_ms = time_backward_kernels(theirs, leaves, device)  # its tuner runs here
        ours_ms = time_backward_kernels(ours, leaves, device)
        cells = [f"{ours_ms:.4f}", f"{theirs_ms:.4f}", f"{theirs_ms / ours_ms:.2f}x"]
    else:
        theirs_ms = time_pair(theirs, leaves, device)  # the release first: its tuner runs here
        ours_ms = time_pair(ours, leaves, device)
        cells = [f"{ours_ms[0]:.3f}", f"{theirs_ms[0]:.3f}", f"{theirs_ms[0] / ours_ms[0]:.2f}x",
                 f"{ours_ms[1]:.3f}", f"{theirs_ms[1]:.3f}", f"{theirs_ms[1] / ours_ms[1]:.2f}x"]
    with torch.no_grad():
        diff = (ours().float() - theirs().float()).abs().max().item()
    return f"| {name} | {config} | " + " | ".join(cells + [f"{diff:.1e}"]) + " |"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr")
    p.add_argument("--minmax", default="128,256,512", help="widths ('' for none)")
    p.add_argument("--reduce", default="max", help="min, max, or both as 'max,min'")
    p.add_argument("--attention", default="gatv2:4x64,gatv2:8x128,dot:4x64,dot:8x128",
                   help="<gatv2|dot>:<heads>x<head dim> ('' for none)")
    p.add_argument("--backward-kernels", action="store_true",
                   help="time the backward's GPU kernels alone (torch.profiler)")
    args = p.parse_args()
    reduces = args.reduce.split(",")
    if not set(reduces) <= {"min", "max"}:
        p.error(f"--reduce: expected min, max or both, got {args.reduce!r}")
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    try:
        import turbo_gnn as turbo
    except ImportError as exc:
        print(f"the paper's release (turbo_gnn) is not installed: {exc}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", module="turbo_gnn")  # its launch-size notices
    # The release's inline tuner (it times the forward). Its min/max grid has 6,720 points;
    # at its default 10 + 50 calls a point it takes minutes per row, so 2 + 5 there.
    tuned = dict(autotune=True)
    quick = dict(autotune=True, autotune_config=turbo.AutotuneConfig(warmup=2, iters=5))
    device = torch.device("cuda")
    if args.backward_kernels:
        print(f"{report.describe_run(device)}; GPU kernel ms per backward call "
              "(torch.profiler), float32; speedup = release / fastgnn\n")
        print("| graph | op | fastgnn bwd kernels | release bwd kernels | speedup | "
              "max abs diff |")
        print("|---|---|---|---|---|---|")
    else:
        print(f"{report.describe_run(device)}; ms per call through autograd, float32; "
              "speedup = release / fastgnn\n")
        print("| graph | op | fastgnn fwd | release fwd | speedup | fastgnn fwd+bwd | "
              "release fwd+bwd | speedup | max abs diff |")
        print("|---|---|---|---|---|---|---|---|---|")
    for name in args.graphs.split(","):
        g = graphs.load(name).graph.to(device)
        tg = release_graph(turbo, g, device)
        for reduce in reduces:
            for width in filter(None, args.minmax.split(",")):
                ours, theirs, leaves = minmax_ops(turbo, quick, g, tg, int(width), reduce, device)
                print(row(name, f"{reduce} {width}", ours, theirs, leaves, device,
                          args.backward_kernels), flush=True)
        for config in filter(None, args.attention.split(",")):
            kind, shape = config.split(":")
            heads, dim = (int(v) for v in shape.split("x"))
            ours, theirs, leaves = attention_ops(turbo, tuned, g, tg, kind, heads, dim, device)
            print(row(name, config, ours, theirs, leaves, device, args.backward_kernels),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
