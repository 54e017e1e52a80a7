#!/usr/bin/env python3
"""The min/max backward on its own: the raw op (``minmax_aggregate_backward``, back-to-back
calls), the backward through autograd as ``scripts/bench.py`` times it, and the GPU busy time
of one raw call (torch.profiler, kernels summed), for random features (few ties) and ReLU'd
ones (half zeros: ties, which go wholly to the smallest source).

    python3 scripts/bench_minmax_backward.py --graph tolokers --widths 128,256,512
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn.bench import graphs, measure  # noqa: E402

BACKWARD = torch.ops.fastgnn.minmax_aggregate_backward


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--graph", default="tolokers")
    p.add_argument("--widths", default="128,256,512")
    p.add_argument("--reduce", default="max", choices=("min", "max"))
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = graphs.load(args.graph).graph.to(device)
    gen = torch.Generator().manual_seed(0)
    print(f"{args.graph} ({g.num_dst_nodes} nodes, {g.num_edges} edges), {args.reduce}, "
          f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, "
          f"ms, medians of {args.repeats}")
    print("| width | features | raw backward op | autograd backward | GPU busy per op |")
    print("|---|---|---|---|---|")
    for width in (int(w) for w in args.widths.split(",")):
        base = torch.randn(g.num_src_nodes, width, generator=gen)
        grad = torch.randn(g.num_dst_nodes, width, generator=gen).to(device)
        for kind, x in (("randn", base), ("relu", base.relu())):
            x = x.to(device).requires_grad_()

            def forward():
                return fastgnn.ops.aggregate(g, x, args.reduce)

            forward()  # tuning
            flat = x.detach()
            _, arg = torch.ops.fastgnn.minmax_aggregate(g.rowptr, g.col, flat,
                                                        args.reduce == "max", None, None, 0, 0,
                                                        None, None, g.key)

            def raw():
                return BACKWARD(arg, grad, g.num_src_nodes, None, None)

            raw_ms = measure.time_forward(raw, device, warmup=3, repeats=args.repeats)
            autograd_ms = measure.time_backward(forward, [x], grad, device, warmup=3,
                                                repeats=args.repeats)
            busy = measure.busy_ms(raw, device, calls=10) if device.type == "cuda" \
                else float("nan")
            print(f"| {width} | {kind} | {raw_ms:.4f} | {autograd_ms:.4f} | {busy:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
