#!/usr/bin/env python3
"""The zoo's speed rows: ``fastgnn-zoo compare`` (pyg against fastgnn, one seed) on every
config of the chosen families, in one process, then one table of time per training epoch,
peak memory, speedup and test metric of both backends.

    python scripts/bench_zoo_speed.py --out results/ --epochs 20 \\
        --families amazon,coauthor,ogbn-arxiv --data-root /tmp/zoodata --no-download

Time per epoch and memory are ``compare``'s (the median over epochs after the first; CUDA's
``max_memory_allocated`` on a GPU). Writes ``speed.json`` and ``speed.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import List, Optional

from fastgnn.zoo.compare import main as compare

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "zoo",
                       "configs")
MODELS = ("gcn", "sage", "gat", "gatv2", "gt", "maxk-sage")


def configs(families: List[str]) -> List[str]:
    """The shipped ``<model>-<family>.yaml`` configs, in MODELS order."""
    return [f"{model}-{family}.yaml" for family in families for model in MODELS
            if os.path.isfile(os.path.join(CONFIGS, f"{model}-{family}.yaml"))]


def speed_row(config: str, result: dict) -> dict:
    pyg, fast = result["summary"][0], result["summary"][1]
    metric = next(m for m in ("test_roc_auc", "test_acc") if m in pyg["metrics"])
    return {"config": config,
            "ms_per_epoch": [pyg["time_per_epoch_s"]["mean"] * 1e3,
                             fast["time_per_epoch_s"]["mean"] * 1e3],
            "speedup": fast["speedup"],
            "peak_mib": [None if s["peak_memory_bytes"] is None
                         else s["peak_memory_bytes"]["mean"] / 2**20 for s in (pyg, fast)],
            "metric": metric,
            "metric_values": [pyg["metrics"][metric]["mean"], fast["metrics"][metric]["mean"]]}


def markdown(rows: List[dict]) -> str:
    lines = ["| config | pyg ms/epoch | fastgnn ms/epoch | speedup | peak memory pyg / fastgnn "
             "(MiB) | test metric pyg / fastgnn |", "|---|---|---|---|---|---|"]
    for r in rows:
        memory = " / ".join("n/a" if m is None else f"{m:.0f}" for m in r["peak_mib"])
        lines.append(f"| {r['config']} | {r['ms_per_epoch'][0]:.2f} | {r['ms_per_epoch'][1]:.2f}"
                     f" | {r['speedup']:.2f}x | {memory} | {r['metric']} "
                     f"{r['metric_values'][0]:.4f} / {r['metric_values'][1]:.4f} |")
    if rows:
        speedups = [r["speedup"] for r in rows]
        lines += ["", f"Median speedup {statistics.median(speedups):.2f}x, slowest row "
                      f"{min(speedups):.2f}x, over {len(rows)} configs."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--families", default="amazon,coauthor,ogbn-arxiv")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--no-download", action="store_true")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "zoo_speed"),
                        help="where compare keeps each config's runs (default: a temp folder)")
    args, extra = parser.parse_known_args(argv)
    overrides = [f"--trainer.max_epochs={args.epochs}", *extra]
    if args.data_root:
        overrides.append(f"--data.init_args.root={args.data_root}")
    if args.no_download:
        overrides.append("--data.init_args.download=false")
    rows, failures = [], []
    for config in configs(args.families.split(",")):
        out = os.path.join(args.work_dir, os.path.splitext(config)[0])
        try:
            result = compare(["--config", os.path.join(CONFIGS, config), "--backends",
                              "pyg,fastgnn", "--seeds", "0", "--out", out, *overrides])
        except Exception as exc:  # noqa: BLE001  (one failing config must not lose the others)
            failures.append({"config": config, "error": f"{type(exc).__name__}: {exc}"})
            print(f"{config}: FAILED {failures[-1]['error']}", flush=True)
            continue
        rows.append({**speed_row(config, result), "device": result["device"]})
    table = markdown(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "speed.json"), "w") as f:
        json.dump({"epochs": args.epochs, "overrides": overrides, "rows": rows,
                   "failures": failures}, f, indent=2)
    with open(os.path.join(args.out, "speed.md"), "w") as f:
        f.write(table)
    print("\n" + table, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
