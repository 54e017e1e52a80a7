"""MaxK-GNN kernels timed alone (raw ops, no Python layer) against fastgnn's dense SpMM at the
full width: the forward SpGEMM and backward SSpMM speedups of the MaxK-GNN paper's Fig. 8,
and the top-k's cost relative to the SpGEMM it feeds.

    python3 scripts/bench_maxk_kernels.py [--graphs tolokers,ogbn-arxiv] [--width 256]
        [--ks 8,16,32,64] [--device cuda|cpu] [--repeats 7]

Columns, in ms per call: on CUDA the kernels' own time (``fastgnn.bench.measure.time_kernels``:
replays of a CUDA graph of 10 calls, no host launch cost, as the paper's kernel figures), on
CPU the median call (``time_forward``). "spmm fwd" is
``fastgnn.ops.spmm(g, x)`` on the dense [N, width] features (its tuned kernel), "spmm bwd"
the same op on the transposed graph (``A^T dY``, what its backward runs); "spgemm" the
tuned ``maxk_spgemm``, "sspmm" the chosen backward (pull over the transpose, or push: with
atomics on CUDA, into per-thread buffers on CPU; both shown), "top-k" ``maxk`` on the
[N, width] pre-activation. Unnormalised sums (norm "none"), float32.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn.bench import graphs, measure, report  # noqa: E402

maxk_ops = importlib.import_module("fastgnn.ops.maxk")  # the module (fastgnn.ops.maxk is the op)


def _time(fn, device, repeats) -> float:
    return measure.time_kernels(fn, device, warmup=3, repeats=repeats)


def _transposed(g: fastgnn.Graph) -> fastgnn.Graph:
    ei = g.edge_index()
    return fastgnn.Graph.from_edge_index(ei[[1, 0]], num_src_nodes=g.num_dst_nodes,
                                         num_dst_nodes=g.num_src_nodes)


def rows_for(name: str, width: int, ks, device: torch.device, repeats: int):
    g = graphs.load(name).graph.to(device)
    g_t = _transposed(g)
    x = torch.randn(g.num_src_nodes, width, device=device)
    dy = torch.randn(g.num_dst_nodes, width, device=device)
    with torch.no_grad():
        spmm_fwd = _time(lambda: fastgnn.ops.spmm(g, x), device, repeats)
        spmm_bwd = _time(lambda: fastgnn.ops.spmm(g_t, dy), device, repeats)
    op = torch.ops.fastgnn
    t_rowptr, t_col, t_perm = g.transpose()
    for k in ks:
        h = fastgnn.ops.maxk(x, k)
        if device.type == "cuda":
            config = maxk_ops._cuda_config(g, h, None, (t_rowptr, t_col, t_perm, None), True)
        else:
            config = maxk_ops._cpu_config(h)
        chunk = config & maxk_ops._CHUNK_MASK
        spgemm = _time(lambda: op.maxk_spgemm(g.rowptr, g.col, None, h.values, h.indices, width,
                                              None, None, None, None, g.key, config),
                       device, repeats)
        backward = {}
        for name_, push in (("pull", False), ("push", True)):
            backward[name_] = _time(lambda: op.maxk_sspmm(
                g.rowptr, g.col, None, t_rowptr, t_col, None, dy, h.indices, g.key,
                maxk_ops._sspmm_config(push, chunk)), device, repeats)
        chosen = "push" if config >> maxk_ops._BACKWARD_SHIFT & maxk_ops._SSPMM_PUSH else "pull"
        topk = _time(lambda: op.maxk(x, k), device, repeats)
        yield dict(graph=name, k=k, spmm_fwd=spmm_fwd, spmm_bwd=spmm_bwd, spgemm=spgemm,
                   sspmm=backward[chosen], chosen=chosen, pull=backward["pull"],
                   push=backward["push"], topk=topk)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--ks", default="8,16,32,64")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    device = torch.device(args.device)
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    timing = "kernel time (CUDA-graph replays)" if device.type == "cuda" else "median call"
    print(f"{report.describe_run(device)}{threads}; width {args.width}, float32; ms per call, "
          f"{timing}\n")
    print("| graph | k | spmm fwd | spgemm | fwd speedup | spmm bwd | sspmm (pull / push) "
          "| bwd speedup | fwd+bwd speedup | top-k | top-k / spgemm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.graphs.split(","):
        for r in rows_for(name, args.width, [int(k) for k in args.ks.split(",")], device,
                          args.repeats):
            push = f"{r['push']:.3f}"
            print(f"| {r['graph']} | {r['k']} | {r['spmm_fwd']:.3f} | {r['spgemm']:.3f} | "
                  f"{r['spmm_fwd'] / r['spgemm']:.2f}x | {r['spmm_bwd']:.3f} | "
                  f"{r['pull']:.3f} / {push} ({r['chosen']}) | "
                  f"{r['spmm_bwd'] / r['sspmm']:.2f}x | "
                  f"{(r['spmm_fwd'] + r['spmm_bwd']) / (r['spgemm'] + r['sspmm']):.2f}x | "
                  f"{r['topk']:.3f} | {100 * r['topk'] / r['spgemm']:.1f}% |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
