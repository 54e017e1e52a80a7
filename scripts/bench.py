#!/usr/bin/env python3
"""fastgnn benchmarks: op- and layer-level, fastgnn backends against PyG, torch.sparse and DGL.

  scripts/bench.py --device cpu --quick --out bench-out          # < 2 minutes on a small CPU
  scripts/bench.py --device cuda --out benchmarks/results        # the GPU suite
  scripts/bench.py --device cuda --training --out benchmarks/results  # training steps
  scripts/bench.py --device cuda --graphs tolokers --precisions fp32,bf16,fp16  # half vs fp32
  scripts/bench.py report benchmarks/results/<date>-<device>.jsonl --readme README.md

A run writes ``<out>/<date>-<device>.jsonl`` (one row per graph x workload x width x
implementation, and x precision for op workloads), ``<date>-<device>.md`` (speedup, half
against float32 and result tables) and the speedup and memory
plots. ``report`` regenerates the table and plots from a JSON lines file and, with --readme,
rewrites the README section between ``<!-- bench:begin -->`` and ``<!-- bench:end -->``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fastgnn.bench import graphs, report, suite  # noqa: E402
from fastgnn.bench.workloads import WORKLOADS  # noqa: E402


def _csv(text: str):
    return [item.strip() for item in text.split(",") if item.strip()]


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   choices=("cpu", "cuda"))
    p.add_argument("--graphs", type=graphs.split_specs,
                   help="comma-separated dataset names, presets ("
                   f"{', '.join(graphs.PRESETS)}) or specs like powerlaw:n=100000,deg=8,skew=0.8")
    p.add_argument("--workloads", type=_csv, help=f"comma-separated: {', '.join(WORKLOADS)}")
    p.add_argument("--widths", type=lambda t: [int(w) for w in _csv(t)],
                   help="feature widths (H*D for attention, H=4)")
    p.add_argument("--repeats", type=int, help="timed runs per measurement (median kept)")
    p.add_argument("--warmup", type=int, help="untimed runs before timing")
    p.add_argument("--quick", action="store_true", help="small suite, < 2 minutes on a CPU")
    p.add_argument("--training", action="store_true",
                   help="the end-to-end training-step suite (train-* workloads) instead of "
                   "the op and layer suite")
    p.add_argument("--compile", action="store_true",
                   help="training steps: add a row of the enabled model under torch.compile")
    p.add_argument("--precisions", type=_csv,
                   help="op workloads' feature dtypes, comma-separated from "
                   f"{', '.join(suite.OP_PRECISIONS)} (default fp32); the results then compare "
                   "each half-precision row with its float32 row")
    p.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    p.add_argument("--data-root",
                   help="datasets folder (default: FASTGNN_DATA or ../shared/datasets)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heads", type=int, default=4,
                   help="attention heads: attention workloads use H heads of width // H")
    p.add_argument("--readme", help="also rewrite this file's bench section from the results")
    return p


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.py report",
                                description="regenerate table, plots and README section")
    p.add_argument("jsonl", help="results file written by a run")
    p.add_argument("--out", help="folder for the table and plots (default: beside the jsonl)")
    p.add_argument("--readme", help="file whose bench section is rewritten")
    return p


def regenerate(rows, prefix: str, readme: str = None) -> None:
    outputs = report.write_outputs(rows, prefix)
    print(f"table: {outputs['table']}\nplots: {', '.join(outputs['plots'])}")
    if readme:
        section = report.readme_section(rows, outputs, os.path.dirname(os.path.abspath(readme)))
        report.replace_section(readme, section)
        print(f"README section rewritten: {readme}")


def main_report(argv) -> int:
    args = report_parser().parse_args(argv)
    rows = report.read_jsonl(args.jsonl)
    stem = os.path.splitext(os.path.basename(args.jsonl))[0]
    out = args.out or os.path.dirname(os.path.abspath(args.jsonl))
    os.makedirs(out, exist_ok=True)
    regenerate(rows, os.path.join(out, stem), args.readme)
    return 0


def main_run(argv) -> int:
    args = run_parser().parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device available", file=sys.stderr)
        return 2
    if args.data_root:
        os.environ["FASTGNN_DATA"] = args.data_root
    default_graphs, default_workloads, default_widths, warmup, repeats = \
        suite.default_suite(device, args.quick, args.training)
    workloads = args.workloads or default_workloads
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        print(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    precisions = args.precisions or ["fp32"]
    unknown = [p for p in precisions if p not in suite.OP_PRECISIONS]
    if unknown:
        print(f"unknown precisions {unknown}; known: {', '.join(suite.OP_PRECISIONS)}",
              file=sys.stderr)
        return 2
    if args.training and args.precisions:
        print("--precisions sets op workloads' dtypes; --training runs fp32 and bf16 "
              "(autocast) steps by itself", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    suffix = "-training" if args.training else ""
    prefix = os.path.join(args.out, f"{date}-{report.device_tag(device)}{suffix}")
    jsonl = f"{prefix}.jsonl"
    if os.path.exists(jsonl):
        os.remove(jsonl)  # one file per run and day: a rerun replaces it
    opts = suite.Options(device, args.graphs or default_graphs, workloads,
                         args.widths or default_widths,
                         warmup if args.warmup is None else args.warmup,
                         repeats if args.repeats is None else args.repeats, jsonl, args.seed,
                         args.heads, args.compile, precisions)
    print(f"fastgnn bench on {report.device_name(device)}; results -> {jsonl}")
    rows = suite.run(opts)
    regenerate(rows, prefix, args.readme)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "report":
        return main_report(argv[1:])
    return main_run(argv)


if __name__ == "__main__":
    sys.exit(main())
