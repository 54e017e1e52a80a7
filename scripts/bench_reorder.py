"""Where reordering pays: the same ops on each graph in its stored node order and after
``fastgnn.reorder`` with each method, forward and backward, in ms (medians of back-to-back
batches, ``fastgnn.bench.measure``), with the one-off cost of computing the order.

    python3 scripts/bench_reorder.py [--graphs tolokers,ogbn-arxiv] [--methods rcm,degree,metis]

Ops: GCN SpMM (norm "both") at each width, and dot-product (Graph Transformer) attention with
4 heads of width // 4. Features are random; every graph is timed after its own tuning.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn.bench import graphs, measure, report  # noqa: E402


def _ops(g: fastgnn.Graph, width: int, device: torch.device):
    """(name, forward, inputs, grad_output) of each timed op on g."""
    x = torch.randn(g.num_src_nodes, width, device=device, requires_grad=True)
    heads = 4
    q, k, v = (torch.randn(g.num_src_nodes, heads, width // heads, device=device,
                           requires_grad=True) for _ in range(3))
    dy = torch.randn(g.num_dst_nodes, width, device=device)
    return [("spmm", lambda: fastgnn.ops.spmm(g, x, norm="both"), [x], dy),
            ("transformer", lambda: fastgnn.ops.graph_attention(g, q, k, v), [q, k, v],
             dy.view(-1, heads, width // heads))]


def _times(g, width, device, repeats):
    out = {}
    for name, forward, inputs, dy in _ops(g, width, device):
        out[name] = (measure.time_forward(forward, device, warmup=3, repeats=repeats),
                     measure.time_backward(forward, inputs, dy, device, warmup=3,
                                           repeats=repeats))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--methods", default="rcm,degree,metis")
    p.add_argument("--widths", default="256,512")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    device = torch.device(args.device)
    methods = [m for m in args.methods.split(",")
               if m != "metis" or importlib.util.find_spec("pymetis") is not None]
    print(f"{report.describe_run(device)}; ms forward / backward, speedup of fwd+bwd over the "
          "stored order\n")
    print("| graph | order | order time (s) | width | spmm | transformer | spmm speedup | "
          "transformer speedup |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.graphs.split(","):
        stored = graphs.load(name).graph
        variants = [("stored", stored, 0.0)]
        for method in methods:
            t0 = time.perf_counter()
            reordered, _ = fastgnn.reorder(stored, method)
            variants.append((method, reordered, time.perf_counter() - t0))
        for width in (int(w) for w in args.widths.split(",")):
            base = None
            for label, g, seconds in variants:
                times = _times(g.to(device), width, device, args.repeats)
                base = base or times
                cells = [f"{f:.3f} / {b:.3f}" for f, b in times.values()]
                speedups = [f"{sum(base[op]) / sum(times[op]):.2f}x" for op in times]
                print(f"| {name} | {label} | {seconds:.2f} | {width} | " + " | ".join(cells)
                      + " | " + " | ".join(speedups) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
