#!/usr/bin/env python3
"""Kernel profile of one training-step workload (fastgnn.bench.training): the device kernels
of a few steps, by total time, from torch.profiler.

  scripts/profile_training_step.py --graph ogbn-arxiv --model gcn --precision fp32
  scripts/profile_training_step.py --graph tolokers --model gatv2 --precision bf16 --stock
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fastgnn.bench import graphs, training  # noqa: E402
from fastgnn.bench.workloads import Context  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--graph", default="tolokers")
    p.add_argument("--model", default="gcn", choices=training.MODELS)
    p.add_argument("--precision", default="fp32", choices=list(training.PRECISIONS))
    p.add_argument("--width", type=int, default=128, help="input feature width")
    p.add_argument("--stock", action="store_true", help="profile stock PyG, not fastgnn.enable")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rows", type=int, default=25, help="kernels listed")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ctx = Context(graphs.load(args.graph), args.width, device)
    case = training.build(ctx, args.model)
    impl = case.implementations[0 if args.stock else 1]
    step = training.make_step(impl.model, case, device, args.precision)
    for _ in range(3):  # tuning and caches
        step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"{args.graph} {args.model} {args.precision} {impl.name}, {args.steps} steps")
    print(prof.key_averages().table(sort_by=key, row_limit=args.rows, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
