"""Times min/max aggregation (native forward and backward) against PyG-style scatter-min.

    python3 scripts/bench_minmax.py --device cuda --widths 64 512
    python3 scripts/bench_minmax.py --device cpu --threads 2 --widths 128

On CUDA it also times every launch plan the tuner may pick, the deterministic backward, and
the forward's peak extra memory against the size of out plus arg.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import fastgnn
from fastgnn import datasets
from fastgnn.ops import minmax

OP = torch.ops.fastgnn.minmax_aggregate
BACKWARD_OP = torch.ops.fastgnn.minmax_aggregate_backward


def median_ms(fn, device, repeats):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def scatter_min_baseline(g, x, grad, device, repeats):
    """What PyG's scatter(..., reduce="min") does: gather x[src], then scatter_reduce amin."""
    src, dst = (t.to(device) for t in g.edge_index())
    xg = x.detach().clone().requires_grad_()
    index = dst.view(-1, 1).expand(-1, x.shape[1])

    def forward():
        out = torch.zeros(g.num_dst_nodes, x.shape[1], device=device, dtype=x.dtype)
        return out.scatter_reduce(0, index, xg[src], "amin", include_self=False)

    out = forward()
    fwd = median_ms(forward, device, repeats)
    bwd = median_ms(lambda: torch.autograd.grad(out, xg, grad, retain_graph=True), device,
                    repeats)
    return fwd, bwd


def bench(name, device, widths, repeats):
    data = datasets.load(name)
    g = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes).to(device)
    print(f"{name}: {g.num_dst_nodes} nodes, {g.num_edges} edges, max in-degree "
          f"{g.max_in_degree}")
    for width in widths:
        x = torch.randn(g.num_src_nodes, width, device=device)
        plans, _ = minmax._plans(g, x) if device.type == "cuda" else ({"cpu": minmax._ALL_LIGHT},
                                                                      "cpu")
        times = {plan_name: median_ms(lambda p=plan: OP(g.rowptr, g.col, x, False, *p, None, None),
                                      device, repeats)
                 for plan_name, plan in plans.items()}
        best = min(times, key=times.get)
        plan = plans[best]
        out, arg = OP(g.rowptr, g.col, x, False, *plan, None, None)
        grad = torch.randn_like(out)
        bwd = median_ms(lambda: BACKWARD_OP(arg, grad, g.num_src_nodes, None, None), device,
                        repeats)
        base_fwd, base_bwd = scatter_min_baseline(g, x, grad, device, repeats)
        line = (f"  D={width}: forward {times[best]:.3f} ms ({best}), backward {bwd:.3f} ms | "
                f"scatter-min forward {base_fwd:.3f} ms (x{base_fwd / times[best]:.1f}), "
                f"backward {base_bwd:.3f} ms (x{base_bwd / bwd:.1f})")
        if device.type == "cuda":
            t_rowptr, t_col, _ = g.transpose()
            pull = median_ms(lambda: BACKWARD_OP(arg, grad, g.num_src_nodes, t_rowptr, t_col),
                             device, repeats)
            del out, arg
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            out, arg = OP(g.rowptr, g.col, x, False, *plan, None, None)
            torch.cuda.synchronize()
            extra = torch.cuda.max_memory_allocated() - before
            outputs = out.nbytes + arg.nbytes
            line += (f" | deterministic backward {pull:.3f} ms | forward peak extra "
                     f"{extra / 2**20:.1f} MiB (out + arg {outputs / 2**20:.1f} MiB)")
            ranked = sorted(times.items(), key=lambda kv: kv[1])[:4]
            line += "\n    fastest plans: " + ", ".join(f"{k} {v:.3f}" for k, v in ranked)
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--datasets", nargs="+", default=["tolokers", "ogbn-arxiv"])
    parser.add_argument("--widths", nargs="+", type=int, default=[64, 512])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in args.datasets:
        try:
            bench(name, torch.device(args.device), args.widths, args.repeats)
        except datasets.DatasetUnavailable as exc:
            print(f"{name}: skipped ({exc})")


if __name__ == "__main__":
    main()
