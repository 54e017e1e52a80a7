"""The fused CUDA attention kernels timed alone (the raw ops, no Python layer) under each launch
plan: shows where each plan wins, apart from per-call overhead and the tuner's choice.

    python3 scripts/bench_attention_kernels.py [--graphs tolokers,roads-ny]
        [--configs gatv2:8x128,dot:4x128] [--plans rows,q0.75w8]

A config is ``<kind>:<heads>x<head dim>`` (kind ``gatv2``, ``gat`` (v1) or ``dot``); plans are named as in
``fastgnn.ops.attention.launch_plans`` (default: each op's own; a plan an op does not have
prints as "-"). Times are ``fastgnn.bench.measure.time_forward``'s
(medians of back-to-back batches), in ms: the forward op, and the backward op from a fixed
output gradient.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fastgnn.bench import graphs, measure, report  # noqa: E402
from fastgnn.ops.attention import launch_plans, plan_buckets, structure_args  # noqa: E402

OPS = {"gatv2": "gatv2", "gat": "gat", "dot": "graph_attention"}  # native op name prefixes
TUNED_AS = {"gatv2": "gatv2_attention", "gat": "gat_attention", "dot": "graph_attention"}


def inputs(kind: str, g, heads: int, dim: int, device):
    def rand(rows, *shape):
        return torch.randn(rows, *shape, device=device) * 0.5
    if kind == "gatv2":
        return rand(g.num_dst_nodes, heads, dim), rand(g.num_src_nodes, heads, dim), \
            rand(heads, dim), 0.2
    if kind == "gat":  # per-node scores alpha_dst [T, H], x_src [S, H, D], alpha_src [S, H]
        return rand(g.num_dst_nodes, heads), rand(g.num_src_nodes, heads, dim), \
            rand(g.num_src_nodes, heads), 0.2
    return rand(g.num_dst_nodes, heads, dim), rand(g.num_src_nodes, heads, dim), \
        rand(g.num_src_nodes, heads, dim), dim ** -0.5


def times(kind: str, g, heads: int, dim: int, plan: str, device):
    forward = getattr(torch.ops.fastgnn, f"{OPS[kind]}_forward")
    backward = getattr(torch.ops.fastgnn, f"{OPS[kind]}_backward")
    a, b, c, coef = inputs(kind, g, heads, dim, device)
    graph = structure_args(g, True)
    launch = plan_buckets(g, plan)
    args = (a, b, c, None, coef, 0.0, 0, None, 0) + launch  # no dropout: no seed
    out, lse = forward(*graph, *args)
    grad_out = torch.randn_like(out)
    fwd = measure.time_forward(lambda: forward(*graph, *args), device, warmup=3, repeats=7)
    bwd = measure.time_forward(lambda: backward(grad_out, out, lse, *graph, *args), device,
                               warmup=3, repeats=7)
    return fwd, bwd


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--configs", default="gatv2:8x128,dot:4x128,gatv2:2x64,dot:2x64")
    p.add_argument("--plans", default="",
                   help="comma-separated plan names (default: every plan of any op)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    plans = args.plans.split(",") if args.plans else list(launch_plans("gat_attention"))
    print(f"{report.describe_run(device)}; ms per call, forward / backward\n")
    print("| graph | config | " + " | ".join(plans) + " |")
    print("|---|---|" + "---|" * len(plans))
    for name in args.graphs.split(","):
        g = graphs.load(name).graph.to(device)
        for config in args.configs.split(","):
            kind, shape = config.split(":")
            heads, dim = (int(v) for v in shape.split("x"))
            own = launch_plans(TUNED_AS[kind])
            cells = ["%.3f / %.3f" % times(kind, g, heads, dim, plan, device) if plan in own
                     else "-" for plan in plans]
            print(f"| {name} | {config} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
