#!/usr/bin/env python3
"""The fastgnn.dgl drop-ins for copy_u_min/copy_u_max against DGL's ops on CPU, forward plus
backward, in one process: the two alternate round by round (order reversed every round) so
that a shared, noisy CPU affects both alike; medians are reported, of wall time and of the
process's CPU time (all threads; less disturbed by other jobs than the wall time). With
--weights, u_mul_e_min/u_mul_e_max, one weight per edge ("edge": [E, 1]) or per edge and head
("head": [E, H, 1] against [N, H, width / H]), the backward giving both gradients. The block's
edge ids follow the CSR order, or with --shuffle-edges a random order (as a graph built from an
edge list has: the kernels then read DGL's edge ids through a permutation).

  OMP_NUM_THREADS=2 scripts/bench_minmax_dgl.py --graph tolokers --width 128 --reduce min
  OMP_NUM_THREADS=2 scripts/bench_minmax_dgl.py --weights head --heads 4 --reduce max
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fastgnn.bench import graphs  # noqa: E402
from fastgnn.tuning import median  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--graph", default="tolokers")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--reduce", default="min", choices=("min", "max"))
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--weights", default="none", choices=("none", "edge", "head"))
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--shuffle-edges", action="store_true")
    args = p.parse_args(argv)
    import dgl

    import fastgnn.dgl as fastgnn_dgl
    g = graphs.load(args.graph).graph
    src, dst = g.col.long(), g.row.long()
    if args.shuffle_edges:
        order = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(0))
        src, dst = src[order], dst[order]
    block = dgl.create_block((src, dst), num_src_nodes=g.num_src_nodes,
                             num_dst_nodes=g.num_dst_nodes)
    heads = args.heads if args.weights == "head" else 1
    feat = (args.width,) if args.weights != "head" else (heads, args.width // heads)
    x = torch.randn((g.num_src_nodes,) + feat, requires_grad=True)
    inputs = [x]
    if args.weights == "none":
        op_name = f"copy_u_{args.reduce}"
    else:
        w_shape = (g.num_edges, 1) if heads == 1 else (g.num_edges, heads, 1)
        inputs.append(torch.rand(w_shape, requires_grad=True))
        op_name = f"u_mul_e_{args.reduce}"
    fns = {"fastgnn": lambda: getattr(fastgnn_dgl, op_name)(block, *inputs),
           "dgl": lambda: getattr(dgl.ops, op_name)(block, *inputs)}
    grad = torch.randn((g.num_dst_nodes,) + feat)
    samples = {name: {"fwd": [], "bwd": [], "cpu": []} for name in fns}
    for r in range(args.rounds + 2):  # two warm-up rounds
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            c0, t0 = time.process_time(), time.perf_counter()
            out = fns[name]()
            t1 = time.perf_counter()
            torch.autograd.grad(out, inputs, grad)
            t2, c2 = time.perf_counter(), time.process_time()
            if r >= 2:
                samples[name]["fwd"].append((t1 - t0) * 1e3)
                samples[name]["bwd"].append((t2 - t1) * 1e3)
                samples[name]["cpu"].append((c2 - c0) * 1e3)
    print(f"{args.graph} width {args.width} {args.reduce}, weights {args.weights} "
          f"({heads} heads), edge ids {'shuffled' if args.shuffle_edges else 'in CSR order'}, "
          f"{torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, dgl {dgl.__version__}, {args.rounds} rounds (medians, ms)")
    for name, s in samples.items():
        total = [f + b for f, b in zip(s["fwd"], s["bwd"])]
        print(f"  {name:8s} fwd {median(s['fwd']):7.2f}  bwd {median(s['bwd']):7.2f}  "
              f"fwd+bwd {median(total):7.2f}  (CPU time fwd+bwd {median(s['cpu']):7.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
