"""``python -m fastgnn info`` prints the build report; ``python -m fastgnn demo`` runs each op
on a small random graph, checks it against the reference and times it."""
from __future__ import annotations

import argparse
import sys

import torch


def demo(device: str) -> int:
    import fastgnn
    from fastgnn import reference, tuning

    torch.manual_seed(0)
    n, e, width, heads = 2000, 20000, 64, 4
    g = fastgnn.Graph.from_edge_index(torch.randint(0, n, (2, e), device=device), num_nodes=n)
    x = torch.randn(n, width, device=device)
    xh = torch.randn(n, heads, width // heads, device=device)
    att = torch.randn(heads, width // heads, device=device)
    cases = {
        "spmm(norm=both)": (lambda: fastgnn.ops.spmm(g, x, norm="both"),
                            lambda: reference.spmm(g, x, norm="both")),
        "aggregate(max)": (lambda: fastgnn.ops.aggregate(g, x, "max"),
                           lambda: reference.aggregate(g, x, "max")),
        "gatv2_attention": (lambda: fastgnn.ops.gatv2_attention(g, xh, xh, att),
                            lambda: reference.gatv2_attention(g, xh, xh, att)),
        "graph_attention": (lambda: fastgnn.ops.graph_attention(g, xh, xh, xh),
                            lambda: reference.graph_attention(g, xh, xh, xh)),
    }
    print(f"{g}\n{'op':<18} {'max |err|':>10} {'ms':>8}  backend")
    worst = 0.0
    for name, (run, ref) in cases.items():
        err = (run() - ref()).abs().max().item()
        worst = max(worst, err)
        ms = tuning.measure(run, torch.device(device), warmup=2, repeats=5)
        op = "spmm" if name.startswith("spmm") else name.split("(")[0]
        op = "aggregate_minmax" if op == "aggregate" else op
        chosen = fastgnn.backends.select(op, torch.device(device)).backend
        print(f"{name:<18} {err:>10.2e} {ms:>8.3f}  {chosen}")
    ok = worst < 1e-3
    print("demo:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fastgnn")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="build and op availability report")
    demo_parser = sub.add_parser("demo", help="run each op on a random graph against the reference")
    demo_parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.command == "info":
        import fastgnn
        fastgnn.info()
        return 0
    return demo(args.device)


if __name__ == "__main__":
    sys.exit(main())
