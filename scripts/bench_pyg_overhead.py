"""Adapter overhead of fastgnn.pyg: a layer swapped by fastgnn.enable against the same math
written directly on fastgnn ops (and the stock PyG layer for reference), forward + backward.

    python3 scripts/bench_pyg_overhead.py [--dataset tolokers] [--device cuda]
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch_geometric.nn as pyg_nn  # noqa: E402

import fastgnn  # noqa: E402
import fastgnn.pyg  # noqa: E402
from fastgnn import datasets  # noqa: E402
from fastgnn.tuning import median  # noqa: E402


def _timed_batch(fn, device, repeats):
    """Milliseconds per call of ``repeats`` back-to-back calls, by the wall clock from an idle
    device to an idle device (``tuning.time_calls`` reads CUDA events instead): the host
    time these host-bound steps cost a training loop."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def _compare(fns, device, repeats, rounds):
    """Per-call times of each function over ``rounds`` batches: {label: [ms per batch]}.
    The functions take turns batch by batch, so a drift in clocks or temperature touches them
    alike, and the turn order reverses every round, so each follows each other equally often
    (a batch pays for the caches its predecessor left cold)."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    labels = list(fns)
    samples = {label: [] for label in labels}
    for r in range(rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            samples[label].append(_timed_batch(fns[label], device, repeats))
    return samples


def _overhead(adapter, direct):
    """The adapter's extra time over the direct calls: the median of the per-round ratios (a
    round's two batches ran back to back, so host noise that lasts longer than a round
    cancels) and the ratio of the fastest batches (the least disturbed ones)."""
    paired = median([a / d for a, d in zip(adapter, direct)]) - 1
    return paired, min(adapter) / min(direct) - 1


def _direct_gcn(layer, graph, values):
    def run(x):
        return fastgnn.ops.spmm(graph, layer.lin(x), edge_values=values) + layer.bias
    return run


def _direct_sage(layer, graph):
    def run(x):
        return layer.lin_l(fastgnn.ops.aggregate(graph, x, "mean")) + layer.lin_r(x)
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="tolokers")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None,
                        help="calls per timed batch (default 10 on CUDA, 5 on CPU)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="batches per function (default 151 on CUDA, 31 on CPU; the "
                             "median is reported): a GPU server's host is noisy at these "
                             "sub-millisecond layers, and short batches interleave finely")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.repeats is None:
        args.repeats = 10 if device.type == "cuda" else 5
    if args.rounds is None:
        args.rounds = 151 if device.type == "cuda" else 31
    data = datasets.load(args.dataset)
    edge_index = data.edge_index.to(device)
    n = data.num_nodes
    x = (data.x.float() if data.x is not None else torch.randn(n, args.hidden)).to(device)
    x.requires_grad_(True)

    gcn = pyg_nn.GCNConv(x.size(1), args.hidden).to(device)
    fast_gcn = fastgnn.enable(copy.deepcopy(gcn))
    fast_gcn(x, edge_index)  # builds and caches the structure
    edges = fastgnn.pyg.structure.as_edges(edge_index)
    structure = fastgnn.pyg.structure.resolve(edges, n, n, "replace", n)  # the cached one
    values = structure.memo[("gcn", x.dtype)]
    sage = pyg_nn.SAGEConv(x.size(1), args.hidden).to(device)
    fast_sage = fastgnn.enable(copy.deepcopy(sage))
    fast_sage(x, edge_index)
    # The adapter's own cached Graph: each Graph tunes its CUDA kernels once, and two tunings
    # may pick different kernels, which is not the adapter's overhead.
    graph = fastgnn.pyg.structure.resolve(edges, n, n).graph

    cases = {
        "GCNConv": (lambda: gcn(x, edge_index), lambda: fast_gcn(x, edge_index),
                    _direct_gcn(fast_gcn, structure.graph, values)),
        "SAGEConv": (lambda: sage(x, edge_index), lambda: fast_sage(x, edge_index),
                     _direct_sage(fast_sage, graph)),
    }
    print(f"{args.dataset} on {device}: forward+backward, ms per call, median (fastest) of "
          f"{args.rounds} batches of {args.repeats}; adapter overhead: median of the per-round "
          "adapter/direct ratios (ratio of the fastest batches)")
    for name, (stock, adapter, direct) in cases.items():
        def step(fn):
            return lambda: fn().sum().backward()
        # The stock layer runs on its own: its edge-sized messages would leave the caches
        # cold for whichever of the two compared batches came next.
        samples = _compare({"stock": step(stock)}, device, args.repeats, args.rounds)
        samples.update(_compare({"adapter": step(adapter), "direct": step(lambda: direct(x))},
                                device, args.repeats, args.rounds))
        cells = "  ".join(f"{label} {median(times):7.3f} ({min(times):.3f})"
                          for label, times in samples.items())
        paired, fastest = _overhead(samples["adapter"], samples["direct"])
        print(f"{name:10s} {cells}  adapter overhead {paired:+.1%} ({fastest:+.1%})")


if __name__ == "__main__":
    main()
