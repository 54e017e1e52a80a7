#!/usr/bin/env python3
"""Profile of one training-step workload (fastgnn.bench.training) from torch.profiler: the
device kernels of a few steps by total time, or with --host the host's time per step by
where it goes (which is what a compiled step loses to eager on a small graph).

  scripts/profile_training_step.py --graph ogbn-arxiv --model gcn --precision fp32
  scripts/profile_training_step.py --graph tolokers --model gatv2 --precision bf16 --stock
  scripts/profile_training_step.py --graph tolokers --model gcn --host            # eager
  scripts/profile_training_step.py --graph tolokers --model gcn --host --compile  # compiled
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fastgnn.bench import graphs, measure, training  # noqa: E402
from fastgnn.bench.workloads import Context  # noqa: E402

# Host time categories, by the profiler event that spends it (self time: nested events count
# in their own category). The first matching prefix wins; the rest is "other ops".
HOST_CATEGORIES = (
    ("fastgnn::pyg_", "fastgnn compiled-path ops (Python: lookup, dispatch)"),
    ("fastgnn::", "fastgnn native ops"),
    ("TorchDynamo Cache Lookup", "dynamo guards"),
    ("Torch-Compiled Region", "compiled-code wrappers (dynamo, AOTAutograd, Inductor)"),
    ("CompiledFunction", "compiled-code wrappers (dynamo, AOTAutograd, Inductor)"),
    ("AOTDispatcher", "compiled-code wrappers (dynamo, AOTAutograd, Inductor)"),
    ("## ", "compiled-code wrappers (dynamo, AOTAutograd, Inductor)"),
    ("Optimizer.", "optimizer (Python)"),
    ("cu", "CUDA runtime and driver (launches, copies)"),
)


def host_breakdown(prof, steps: int) -> "collections.OrderedDict[str, float]":
    """Self CPU time per step (ms) by HOST_CATEGORIES, and the profiled total."""
    totals: "collections.OrderedDict[str, float]" = collections.OrderedDict(
        (name, 0.0) for _, name in HOST_CATEGORIES)
    totals["other ops"] = 0.0
    profiled = 0.0
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CPU:
            continue
        category = next((name for prefix, name in HOST_CATEGORIES
                         if event.name.startswith(prefix)), "other ops")
        totals[category] += event.self_cpu_time_total
        if event.cpu_parent is None:
            profiled += event.cpu_time_total
    totals["profiled host time (top-level events)"] = profiled
    return collections.OrderedDict((k, v / 1e3 / steps) for k, v in totals.items())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--graph", default="tolokers")
    p.add_argument("--model", default="gcn", choices=training.MODELS)
    p.add_argument("--precision", default="fp32", choices=list(training.PRECISIONS))
    p.add_argument("--width", type=int, default=128, help="input feature width")
    p.add_argument("--stock", action="store_true", help="profile stock PyG, not fastgnn.enable")
    p.add_argument("--compile", action="store_true", help="the model under torch.compile")
    p.add_argument("--host", action="store_true",
                   help="the host's time per step by category, and the step's wall time")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rows", type=int, default=25, help="kernels listed")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ctx = Context(graphs.load(args.graph), args.width, device)
    case = training.build(ctx, args.model)
    impl = case.implementations[0 if args.stock else 1]
    model = torch.compile(impl.model) if args.compile else impl.model
    step = training.make_step(model, case, device, args.precision)
    for _ in range(3):  # tuning, caches and compilation
        step()
    name = impl.name + ("+torch.compile" if args.compile else "")
    print(f"{args.graph} {args.model} {args.precision} {name}, {args.steps} steps")
    if args.host:
        print(f"wall {measure.time_forward(step, device, 3, max(args.steps, 5)):.3f} ms/step")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    if args.host:
        for category, ms in host_breakdown(prof, args.steps).items():
            print(f"  {ms:8.3f} ms/step  {category}")
        return 0
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=args.rows, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
