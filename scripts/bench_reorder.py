"""Where reordering pays: the same ops on each graph in its stored node order and after
``fastgnn.reorder`` with each method, forward and backward, in ms (medians of back-to-back
batches, ``fastgnn.bench.measure``), with the one-off cost of computing the order.

    python3 scripts/bench_reorder.py [--graphs tolokers,ogbn-arxiv] [--methods rcm,degree,metis]

Ops: GCN SpMM (norm "both") at each width, and dot-product (Graph Transformer) attention with
4 heads of width // 4. Features are random; every graph is timed after its own tuning.

``--rows-only`` adds, per method, the graph with only its destinations relabelled (sources and
their features stay in place): what processing rows in that order could gain without moving
any features. ``permute`` is the cost of moving one ``[N, width]`` feature tensor into the new
order (``NodeOrder.permute``), what reordering inside an op would pay twice per call.
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


def _permute_ms(order, width: int, device: torch.device) -> float:
    x = torch.randn(len(order), width, device=device)
    return measure.time_forward(lambda: order.permute(x), device, warmup=3, repeats=7)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--methods", default="rcm,degree,metis")
    p.add_argument("--widths", default="256,512")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rows-only", action="store_true",
                   help="also time each order applied to the destinations only")
    args = p.parse_args()
    device = torch.device(args.device)
    methods = [m for m in args.methods.split(",")
               if m != "metis" or importlib.util.find_spec("pymetis") is not None]
    print(f"{report.describe_run(device)}; ms forward / backward, speedup of fwd+bwd over the "
          "stored order\n")
    print("| graph | order | order time (s) | width | spmm | transformer | spmm speedup | "
          "transformer speedup | permute |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.graphs.split(","):
        stored = graphs.load(name).graph
        variants = [("stored", stored, 0.0, None)]
        for method in methods:
            t0 = time.perf_counter()
            reordered, order = fastgnn.reorder(stored, method)
            variants.append((method, reordered, time.perf_counter() - t0, order))
            if args.rows_only:
                src, dst = stored.edge_index()
                rows = fastgnn.Graph.from_edge_index(torch.stack([src, order.rank[dst]]),
                                                     num_nodes=stored.num_dst_nodes)
                variants.append((f"{method}, rows only", rows, 0.0, None))
        for width in (int(w) for w in args.widths.split(",")):
            base = None
            for label, g, seconds, order in variants:
                times = _times(g.to(device), width, device, args.repeats)
                base = base or times
                cells = [f"{f:.3f} / {b:.3f}" for f, b in times.values()]
                speedups = [f"{sum(base[op]) / sum(times[op]):.2f}x" for op in times]
                permute = "" if order is None else f"{_permute_ms(order, width, device):.3f}"
                print(f"| {name} | {label} | {seconds:.2f} | {width} | " + " | ".join(cells)
                      + " | " + " | ".join(speedups) + f" | {permute} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
