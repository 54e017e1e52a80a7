"""Neighbour sampling throughput: fastgnn's sampler against DGL's ``NeighborSampler`` (when
DGL is installed) on the same graph, seeds and fanouts, in the same process, back to back.

    OMP_NUM_THREADS=2 python scripts/bench_sampling.py --graph ogbn-arxiv           # CPU vs DGL
    python scripts/bench_sampling.py --graph ogbn-arxiv --device cuda --cpu-threads 16
    python scripts/bench_sampling.py --graph power-law:10000000:10 --device cuda    # 100M edges
    python scripts/bench_sampling.py --graph ogbn-arxiv --device cuda --cpu-threads 16 \
        --batches-per-call 1,4,8,16 --no-dgl                       # several batches per call

Reports sampled edges per second (the edges of every block of a batch), batches per second
and, on the GPU, peak memory; medians over ``--repeats`` rounds of ``--batches`` batches.
``--batches-per-call N,...`` times ``sample_blocks_many`` on N batches a call for each N (1:
``sample_blocks``, one batch a call), on the device and, with ``--cpu-threads``, on the CPU in
a process of its own, and prints the GPU's rate over the CPU's for each N: against the CPU at
1 batch a call, at the same N, and at its best N.
Results are appended to ``benchmarks/results/<date>-<device>-sampling.jsonl``.
"""
from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn import datasets  # noqa: E402
from fastgnn.bench.report import device_name, device_tag, git_commit  # noqa: E402
from fastgnn.sampling import NeighborSampler  # noqa: E402


def load_graph(spec: str, device: torch.device) -> fastgnn.Graph:
    """A dataset name (edges as stored: in-edges of each destination), or
    ``power-law:<nodes>:<average degree>`` built on ``device`` (Zipf destinations, skew 0.7)."""
    if spec.startswith("power-law:"):
        _, nodes, degree = spec.split(":")
        n, num_edges = int(nodes), int(int(nodes) * float(degree))
        gen = torch.Generator(device).manual_seed(0)
        cdf = torch.arange(1, n + 1, dtype=torch.float64, device=device).pow(-0.7).cumsum(0)
        cdf /= cdf[-1].clone()
        ranks = torch.searchsorted(cdf, torch.rand(num_edges, generator=gen, dtype=torch.float64,
                                                   device=device)).clamp_(max=n - 1)
        del cdf
        dst = torch.randperm(n, generator=gen, device=device)[ranks]
        del ranks
        src = torch.randint(0, n, (num_edges,), generator=gen, device=device)
        return fastgnn.Graph.from_edge_index(torch.stack([src, dst]), num_nodes=n)
    data = datasets.load(spec)
    return fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes).to(device)


def seed_batches(num_nodes: int, batch_size: int, count: int, seed: int):
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(count)]


def time_fastgnn(sampler: NeighborSampler, batches, device: torch.device, per_call: int = 1):
    """``per_call`` batches a call: sample_blocks for 1, sample_blocks_many for more."""
    # Seeds already where the sampler runs, as the loader keeps them (one copy an epoch).
    batches = [seeds.to(device) for seeds in batches]
    calls = [batches[i:i + per_call] for i in range(0, len(batches), per_call)]
    gen = torch.Generator().manual_seed(0)
    edges = 0
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for group in calls:
        sampled = ([sampler.sample_blocks(group[0], gen)] if per_call == 1
                   else sampler.sample_blocks_many(group, gen))
        edges += sum(b.num_edges for batch in sampled for b in batch.blocks)
    sync()
    return edges, time.perf_counter() - start


def time_dgl(dgl_graph, fanouts, batches):
    import dgl
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    edges = 0
    start = time.perf_counter()
    for seeds in batches:
        edges += sum(b.num_edges() for b in sampler.sample_blocks(dgl_graph, seeds)[2])
    return edges, time.perf_counter() - start


def summarise(name, runs, num_batches, extra):
    """Medians over rounds of (sampled edges, seconds) for ``num_batches`` batches each."""
    row = {"sampler": name, "edges_per_s": statistics.median(e / s for e, s in runs),
           "batches_per_s": statistics.median(num_batches / s for _, s in runs),
           "edges_per_batch": runs[0][0] / num_batches, "rounds": len(runs), **extra}
    print(f"{name:>28}: {row['edges_per_s'] / 1e6:9.2f} M sampled edges/s, "
          f"{row['batches_per_s']:9.1f} batches/s, {row['edges_per_batch']:.0f} edges/batch")
    return row


def print_ratios(rows, gpu_name: str, cpu_name: str, per_calls) -> None:
    """The GPU's rate over the CPU's for each number of batches a call: against the CPU at the
    first number (1: its usual path), at the same number (like with like) and at its best."""
    rate = {row["sampler"]: row["edges_per_s"] for row in rows}
    cpu_rates = {n: rate[contender_name(cpu_name, n)] for n in per_calls}
    first, best = per_calls[0], max(cpu_rates, key=cpu_rates.get)
    print(f"GPU / {cpu_name} sampled edges/s, by batches a call (xN):")
    for n in per_calls:
        gpu = rate[contender_name(gpu_name, n)]
        print(f"  GPU x{n:<3} {gpu / 1e6:8.2f} M/s: / CPU x{first} {gpu / cpu_rates[first]:6.2f}, "
              f"/ CPU x{n} {gpu / cpu_rates[n]:6.2f}, / CPU best (x{best}) "
              f"{gpu / cpu_rates[best]:6.2f}")


def cpu_rows_in_child(args, cpu_name: str) -> list:
    """The CPU sampler's rows (each --batches-per-call, --cpu-threads threads) from this script
    run in a process of its own, on the same graph and seed batches: sharing the GPU's process
    slowed both (the GPU rows by 15-20%, the CPU rows by more)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cpu.jsonl")
        command = [sys.executable, os.path.abspath(__file__), "--graph", args.graph,
                   "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
                   "--batches", str(args.batches), "--repeats", str(args.repeats),
                   "--batches-per-call", args.batches_per_call, "--device", "cpu", "--no-dgl",
                   "--out", out]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.cpu_threads)}
        print(f"CPU sampler, {args.cpu_threads} threads, in its own process:", flush=True)
        subprocess.run(command, env=env, check=True)
        with open(out) as f:
            rows = [json.loads(line) for line in f]
    for row in rows:  # named as the GPU run's ratios look them up
        per_call = row["batches_per_call"]
        row["sampler"] = contender_name(cpu_name, per_call)
    return rows


def contender_name(base: str, per_call: int) -> str:
    return base if per_call == 1 else f"{base}-x{per_call}"


def profile_host(name: str, run, device: torch.device, num_batches: int) -> dict:
    """Where one round of ``name``'s batches spends the host's time: per batch, the profiled
    round's wall time and the sampling op's share of it (its C++ work, launches and the
    read-back's wait for the kernels; the rest is Python building the batches), and counts
    that do not depend on the machine's load: Python calls (cProfile) and torch ops called
    from Python (the op's own allocations and launches not counted); then the time by op,
    syncs and copies included, and on a GPU by kernel. Returns the per-batch numbers."""
    calls = cProfile.Profile()
    calls.enable()
    run()
    calls.disable()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        _, wall = run()
    host_ops = [e for e in prof.events()
                if e.cpu_parent is None and e.device_type == torch.autograd.DeviceType.CPU]
    sampling_us = sum(e.cpu_time_total for e in host_ops
                      if e.name.startswith("fastgnn::sample_neighbors"))
    row = {"us": wall / num_batches * 1e6, "sampling_op_us": sampling_us / num_batches,
           "python_calls": pstats.Stats(calls).total_calls / num_batches,
           "torch_ops": len(host_ops) / num_batches}
    print(f"{name}, per batch (profiled): {row['us']:.1f} us, {row['sampling_op_us']:.1f} us of "
          f"it in the sampling op; {row['python_calls']:.1f} Python calls, "
          f"{row['torch_ops']:.1f} torch ops from Python")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    if device.type == "cuda":  # the kernels, by device time
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="ogbn-arxiv")
    parser.add_argument("--fanouts", default="15,10", help="per layer, input layer first")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cpu-threads", type=int, default=0,
                        help="also time the CPU sampler with this many threads, in a process "
                             "of its own (GPU runs)")
    parser.add_argument("--batches-per-call", default="1",
                        help="comma-separated batches per sampling call to time (1: sample_blocks)")
    parser.add_argument("--no-dgl", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="also print where the host's time goes for each device contender "
                             "(each --batches-per-call): per batch, the sampling op against "
                             "Python, and by op")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    graph = load_graph(args.graph, device)
    per_calls = [int(n) for n in args.batches_per_call.split(",")]
    batches = seed_batches(graph.num_dst_nodes, args.batch_size, args.batches, 1)
    contenders = {}
    sampler = NeighborSampler(graph, fanouts)
    gpu_name, cpu_name = f"fastgnn-{device.type}", f"fastgnn-cpu-{args.cpu_threads}-threads"
    # moved once, so that a round (and its host profile) holds no copy of them
    device_batches = [seeds.to(device) for seeds in batches]
    for n in per_calls:
        contenders[contender_name(gpu_name, n)] = (
            lambda n=n: time_fastgnn(sampler, device_batches, device, n))
    if not args.no_dgl and device.type == "cpu":
        try:
            import dgl
            src, dst = graph.edge_index()
            dgl_graph = dgl.graph((src, dst), num_nodes=graph.num_dst_nodes)
            dgl_graph.create_formats_()
            contenders["dgl-NeighborSampler"] = lambda: time_dgl(dgl_graph, fanouts, batches)
        except ImportError:
            print("dgl not installed: fastgnn only")
    for fn in contenders.values():  # warm-up (first touches, DGL's format build)
        fn()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    runs = {name: [] for name in contenders}
    for _ in range(args.repeats):  # interleaved rounds: a shared machine's noise hits all
        for name, fn in contenders.items():
            runs[name].append(fn())
    env = {"graph": args.graph, "nodes": graph.num_dst_nodes, "edges": graph.num_edges,
           "fanouts": fanouts, "batch_size": args.batch_size, "batches": args.batches,
           "device": device.type, "device_name": device_name(device),
           "threads": torch.get_num_threads(), "torch": torch.__version__,
           "fastgnn_commit": git_commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if device.type == "cuda":
        env["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
        env["graph_gpu_mb"] = (graph.rowptr.nbytes + graph.col.nbytes) / 2**20
        print(f"peak GPU memory {env['peak_gpu_mb']:.0f} MB "
              f"(graph CSR {env['graph_gpu_mb']:.0f} MB)")
    per_call_of = {contender_name(gpu_name, n): n for n in per_calls}
    rows = [summarise(name, r, args.batches, {**env, "batches_per_call": per_call_of.get(name, 1)})
            for name, r in runs.items()]
    if args.cpu_threads and device.type == "cuda":
        rows += cpu_rows_in_child(args, cpu_name)
        print_ratios(rows, gpu_name, cpu_name, per_calls)
    if args.profile:
        for n in per_calls:
            name = contender_name(gpu_name, n)
            profile_host(name, contenders[name], device, args.batches)
    out = args.out or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
        f"{env['date'][:10]}-{device_tag(device)}-sampling.jsonl")
    with open(out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print("appended to", out)


if __name__ == "__main__":
    main()
