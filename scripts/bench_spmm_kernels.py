"""Every CUDA SpMM kernel the tuner can pick, timed alone (the raw op, no Python layer), beside
torch.sparse.mm on the same CSR: shows which kernel wins where, apart from per-call overhead.

    python3 scripts/bench_spmm_kernels.py [--graphs tolokers,flickr] [--widths 64,128,512]

Times are ``fastgnn.bench.measure.time_forward``'s (medians of back-to-back batches), in ms:
the product ("forward") and the product with the cached transpose ("backward walk"), with
GCN's "both" coefficients.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fastgnn.bench import graphs, measure, report  # noqa: E402
from fastgnn.ops.spmm import ALGOS  # noqa: E402


def _time(fn, device) -> str:
    try:
        return f"{measure.time_forward(fn, device, warmup=3, repeats=7):.3f}"
    except RuntimeError:  # a kernel that refuses this input (e.g. cuSPARSE with int64)
        return "-"


def _csr_tensor(rowptr, col, values, shape):
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(rowptr, col, values, size=shape, check_invariants=False)


def rows_for(name: str, width: int, device: torch.device):
    g = graphs.load(name).graph.to(device)
    op = torch.ops.fastgnn.spmm
    value = g.norm_values("both")
    transposed = g.transpose() + (g.transposed_norm_values("both", "sum", torch.float32),)
    x = torch.randn(g.num_src_nodes, width, device=device)
    dy = torch.randn(g.num_dst_nodes, width, device=device)
    adj = _csr_tensor(g.rowptr, g.col, value, (g.num_dst_nodes, g.num_src_nodes))
    adj_t = adj.t().to_sparse_csr()
    forward = {"torch.sparse.mm": _time(lambda: torch.sparse.mm(adj, x), device)}
    backward = {"torch.sparse.mm": _time(lambda: torch.sparse.mm(adj_t, dy), device)}
    for algo, code in ALGOS.items():
        forward[algo] = _time(lambda: op(g.rowptr, g.col, value, x, None, None, None, None,
                                         g.num_dst_nodes, False, g.key, code), device)
        backward[algo] = _time(lambda: op(g.rowptr, g.col, value, dy, *transposed,
                                          g.num_src_nodes, True, g.key, code), device)
    return forward, backward


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--widths", default="64,128,512")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    columns = ["torch.sparse.mm"] + list(ALGOS)
    print(f"{report.describe_run(device)}; ms per call\n")
    print("| graph | width | pass | " + " | ".join(columns) + " |")
    print("|---|---|---|" + "---|" * len(columns))
    for name in args.graphs.split(","):
        for width in (int(w) for w in args.widths.split(",")):
            forward, backward = rows_for(name, width, device)
            for label, times in (("forward", forward), ("backward walk", backward)):
                print(f"| {name} | {width} | {label} | "
                      + " | ".join(times[c] for c in columns) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
