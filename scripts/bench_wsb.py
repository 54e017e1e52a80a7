"""The block-sparse Tensor Core layout (WSB) against the tuned CSR path, per graph and node
order: the layout's density and build time, ms of each format (medians of back-to-back
batches, ``fastgnn.bench.measure``), and what the tuner picks in ``auto`` mode. SpMM rows
(GCN, norm both): the forward. Graph Transformer rows (``fastgnn.ops.graph_attention``, heads x
head dim): the forward, and forward plus backward (the WSB path's backward: its destination
pass on the layout, the source pass CSR's); ``auto`` picks for inference and, timed on the
pair, for training.

    python3 scripts/bench_wsb.py [--graphs tolokers,flickr] [--orders stored,rcm] [--widths 256]
        [--ops spmm,attention] [--attention-shapes 4x128,8x128]

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


def _attention_ms(g, q, k, v, fmt: str) -> tuple:
    """(forward ms, forward + backward ms) of the Graph Transformer op under format ``fmt``."""
    dout = torch.randn_like(q)
    features = [t.detach().requires_grad_() for t in (q, k, v)]

    def pair():
        out = fastgnn.ops.graph_attention(g, *features)
        torch.autograd.grad(out, features, dout)
    g.attention_format = fmt
    try:
        with torch.no_grad():
            forward = measure.time_forward(lambda: fastgnn.ops.graph_attention(g, q, k, v),
                                           q.device, warmup=3, repeats=9)
        return forward, measure.time_forward(pair, q.device, warmup=3, repeats=9)
    finally:
        g.attention_format = None


def _pick(g, family: str, width: int, dtype_name: str) -> str:
    """The tuner's CSR-or-WSB choice of ``family`` (the prefix of ``wsb.tuning_op``'s name)."""
    picks = [choice for key, choice in tuning.choices(g).items()
             if key.startswith(family + "@") and key.endswith(f"/{width}/{dtype_name}")]
    return picks[0] if picks else "csr"


def _spmm_rows(g, name, order, layout, dtypes, widths, device):
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        for width in widths:
            x = torch.randn(g.num_src_nodes, width, device=device, dtype=dtype)
            csr, tiles = _forward_ms(g, x, "csr"), _forward_ms(g, x, "wsb")
            fastgnn.ops.spmm(g, x, norm="both")  # auto: the tuner's pick
            pick = _pick(g, "spmm_format", width, dtype_name)
            print(f"| {name} | {order} | {layout.density:.3f} | "
                  f"{layout.padding_ratio:.2f} | {layout.memory_bytes(dtype) / 2**20:.1f} "
                  f"| {layout.build_seconds:.2f} | {dtype_name} | {width} | {csr:.3f} | "
                  f"{tiles:.3f} | {csr / tiles:.2f}x | {pick} |", flush=True)


def _attention_rows(g, name, order, layout, dtypes, shapes, device):
    for dtype_name in dtypes:
        for heads, dim in shapes:
            q = torch.randn(g.num_dst_nodes, heads, dim, device=device, dtype=DTYPES[dtype_name])
            k, v = (torch.randn(g.num_src_nodes, heads, dim, device=device, dtype=q.dtype)
                    for _ in range(2))
            (csr, csr_pair), (tiles, tiles_pair) = (_attention_ms(g, q, k, v, fmt)
                                                    for fmt in ("csr", "wsb"))
            with torch.no_grad():
                fastgnn.ops.graph_attention(g, q, k, v)  # auto: the tuner's pick
            # and its pick with a backward to run (timed on the pair)
            fastgnn.ops.graph_attention(g, *(t.detach().requires_grad_() for t in (q, k, v)))
            pick, pair_pick = (_pick(g, f"graph_attention_format{kind}_d{dim}", heads * dim,
                                     dtype_name) for kind in ("", "_fwd_bwd"))
            print(f"| {name} | {order} | {layout.density:.3f} | {dtype_name} | {heads}x{dim} | "
                  f"{csr:.3f} | {tiles:.3f} | {csr / tiles:.2f}x | {csr_pair:.3f} | "
                  f"{tiles_pair:.3f} | {csr_pair / tiles_pair:.2f}x | {pick} | {pair_pick} |",
                  flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="tolokers,ogbn-arxiv,flickr,roads-ny")
    p.add_argument("--orders", default="stored,rcm")
    p.add_argument("--widths", default="256")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--ops", default="spmm,attention")
    p.add_argument("--attention-shapes", default="4x128,8x128", help="heads x head dim, ...")
    p.add_argument("--tiles-per-piece", type=int, default=wsb.TILES_PER_PIECE)
    p.add_argument("--min-tiles-per-warp", type=int, default=wsb.MIN_TILES_PER_WARP)
    p.add_argument("--attention-tiles-per-piece", type=int, default=wsb.ATTENTION_TILES_PER_PIECE)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    wsb.TILES_PER_PIECE, wsb.MIN_TILES_PER_WARP = args.tiles_per_piece, args.min_tiles_per_warp
    wsb.ATTENTION_TILES_PER_PIECE = args.attention_tiles_per_piece
    device = torch.device("cuda")
    ops, dtypes = args.ops.split(","), args.dtypes.split(",")
    widths = [int(w) for w in args.widths.split(",")]
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.attention_shapes.split(",")]
    graphs_by_order = []
    for name in args.graphs.split(","):
        stored = graphs.load(name).graph
        for order in args.orders.split(","):
            g = stored if order == "stored" else fastgnn.reorder(stored, order)[0]
            graphs_by_order.append((name, order, g.to(device)))
    print(f"{report.describe_run(device)}; WSB plans: SpMM pieces of at most "
          f"{wsb.TILES_PER_PIECE} tiles, {wsb.MIN_TILES_PER_WARP}+ tiles a warp; attention "
          f"pieces of at most {wsb.ATTENTION_TILES_PER_PIECE} tiles\n")
    if "spmm" in ops:
        print("GCN SpMM (norm both) forward ms\n")
        print("| graph | order | density | padding | WSB MB | build s | dtype | width | CSR | WSB "
              "| speedup | auto picks |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, order, g in graphs_by_order:
            _spmm_rows(g, name, order, g.wsb(), dtypes, widths, device)
    if "attention" in ops:
        print("\nGraph Transformer attention ms: forward, and forward + backward\n")
        print("| graph | order | density | dtype | heads x dim | CSR fwd | WSB fwd | speedup | "
              "CSR fwd+bwd | WSB fwd+bwd | speedup | auto picks | auto picks (fwd+bwd) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, order, g in graphs_by_order:
            _attention_rows(g, name, order, g.wsb(), dtypes, shapes, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
