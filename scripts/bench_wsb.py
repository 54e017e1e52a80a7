"""The block-sparse Tensor Core SpMM (WSB) against the tuned CSR path, per graph and node order:
the layout's density and build time, forward ms of each format (medians of back-to-back
batches, ``fastgnn.bench.measure``), and what the tuner picks in ``auto`` mode.

    python3 scripts/bench_wsb.py [--graphs tolokers,flickr] [--orders stored,rcm] [--widths 256]

--tiles-per-piece and --min-tiles-per-warp override the CUDA kernel's plan (fastgnn/ops/wsb.py)
to compare splits of the windows over warps and blocks.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn import tuning  # noqa: E402
from fastgnn.bench import graphs, measure, report  # noqa: E402
from fastgnn.ops import wsb  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _forward_ms(g, x, fmt: str) -> float:
    g.spmm_format = fmt
    try:
        return measure.time_forward(lambda: fastgnn.ops.spmm(g, x, norm="both"), x.device,
                                    warmup=3, repeats=9)
    finally:
        g.spmm_format = None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--orders", default="stored,rcm")
    p.add_argument("--widths", default="256")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--tiles-per-piece", type=int, default=wsb.TILES_PER_PIECE)
    p.add_argument("--min-tiles-per-warp", type=int, default=wsb.MIN_TILES_PER_WARP)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    wsb.TILES_PER_PIECE, wsb.MIN_TILES_PER_WARP = args.tiles_per_piece, args.min_tiles_per_warp
    device = torch.device("cuda")
    print(f"{report.describe_run(device)}; GCN SpMM (norm both) forward ms; WSB plan: pieces of "
          f"at most {wsb.TILES_PER_PIECE} tiles, {wsb.MIN_TILES_PER_WARP}+ tiles a warp\n")
    print("| graph | order | density | padding | WSB MB | build s | dtype | width | CSR | WSB | "
          "speedup | auto picks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.graphs.split(","):
        stored = graphs.load(name).graph
        for order in args.orders.split(","):
            g = stored if order == "stored" else fastgnn.reorder(stored, order)[0]
            g = g.to(device)
            layout = g.wsb()
            for dtype_name in args.dtypes.split(","):
                dtype = DTYPES[dtype_name]
                for width in (int(w) for w in args.widths.split(",")):
                    x = torch.randn(g.num_src_nodes, width, device=device, dtype=dtype)
                    csr, tiles = _forward_ms(g, x, "csr"), _forward_ms(g, x, "wsb")
                    fastgnn.ops.spmm(g, x, norm="both")  # auto: the tuner's pick
                    pick = tuning.choices(g).get(wsb.choice_key(g, width, dtype), "csr")
                    print(f"| {name} | {order} | {layout.density:.3f} | "
                          f"{layout.padding_ratio:.2f} | {layout.memory_bytes(dtype) / 2**20:.1f} "
                          f"| {layout.build_seconds:.2f} | {dtype_name} | {width} | {csr:.3f} | "
                          f"{tiles:.3f} | {csr / tiles:.2f}x | {pick} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
