"""``fastgnn-zoo compare``: trains one config under several backends and seeds, then prints and
writes (``compare.json``, ``compare.md``) each backend's test metrics (mean ± std over seeds),
training time per epoch, peak memory and speedup against the first backend.

Each run is ``fit`` (keeping the best validation epoch) then ``test`` of that checkpoint, in
this process. Time per epoch is the median over epochs after the first (which builds caches
and tunes kernels) of the training steps' wall time (forward, backward, optimizer step;
CUDA synchronised), without validation or data loading. Peak memory is, on CUDA,
``torch.cuda.max_memory_allocated`` during ``fit`` above what was allocated at its start; on
CPU the peak resident set size during ``fit`` above the one at its start, sampled every 5 ms
from ``/proc/self/statm`` (``ru_maxrss`` cannot be reset between runs of one process). Each run
first collects the earlier runs' garbage: Lightning's reference cycles would otherwise keep
their data on the GPU through the next run.

``--split_per_seed`` runs seed i on the data module's split i (the heterophilous graphs' fixed
splits, the Pitfalls random splits), so that "10 seeds" means 10 splits as in those papers.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import threading
import warnings
from typing import Dict, List, Optional

import torch

from fastgnn.zoo.callbacks import EpochTimer
from fastgnn.zoo.cli import PROG, ConfigError, ZooCLI
from fastgnn.zoo.module import BACKENDS


def _rss_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _RssSampler:
    """Peak RSS above the RSS at start, from a thread sampling every ``interval`` seconds."""

    def __init__(self, interval: float = 0.005):
        self.interval, self.peak, self.start = interval, 0, _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, _rss_bytes() or 0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes() or 0)

    @property
    def increase(self) -> Optional[int]:
        return None if self.start is None else max(0, self.peak - self.start)


def seed_overrides(seed: int, split_per_seed: bool) -> List[str]:
    """The arguments that make a run use ``seed`` (and, with ``split_per_seed``, the data
    module's split ``seed``: the heterophilous graphs' fixed split i, the Pitfalls random
    split i)."""
    return [f"--seed_everything={seed}"] + ([f"--data.init_args.split={seed}"]
                                            if split_per_seed else [])


def run_one(config: str, backend: str, seed: int, out_dir: str, overrides: List[str],
            split_per_seed: bool = False) -> dict:
    """Fits and tests ``config`` under ``backend`` and ``seed`` (on split ``seed`` with
    ``split_per_seed``); returns the run's record."""
    gc.collect()  # the earlier runs' trainers, models and data, held by reference cycles
    run_dir = os.path.join(out_dir, "runs", f"{backend}-seed{seed}")
    shutil.rmtree(run_dir, ignore_errors=True)  # a re-run replaces the run (Lightning refuses
    # to write its config over an earlier one, and old checkpoints would sit beside the new)
    with warnings.catch_warnings():
        # LightningCLI warns when it gets args while sys.argv has some: here, on purpose.
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = ZooCLI(args=["--config", config, *overrides, f"--model.backend={backend}",
                           *seed_overrides(seed, split_per_seed),
                           f"--trainer.default_root_dir={run_dir}", "--trainer.logger=false"],
                     run=False)
    timer = EpochTimer()
    cli.trainer.callbacks.append(timer)
    device = cli.trainer.strategy.root_device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.init()  # the allocator's statistics exist only once CUDA is initialised
        torch.cuda.reset_peak_memory_stats(device)
        held_before = torch.cuda.memory_allocated(device)
    with _RssSampler() as rss:
        cli.trainer.fit(cli.model, cli.datamodule)
    peak = (torch.cuda.max_memory_allocated(device) - held_before if cuda else rss.increase)
    checkpoint = cli.trainer.checkpoint_callback
    best = checkpoint.best_model_path or None
    tested = cli.trainer.test(cli.model, cli.datamodule, ckpt_path=best, verbose=False)[0]
    return {"backend": backend, "seed": seed, "split": seed if split_per_seed else None,
            "metrics": {k: float(v) for k, v in sorted(tested.items()) if k != "test_loss"},
            # the monitored validation metric of the tested checkpoint (model selection's input)
            "best_val": ({} if checkpoint.best_model_score is None
                         else {checkpoint.monitor: float(checkpoint.best_model_score)}),
            "epochs": len(timer.epoch_times), "time_per_epoch_s": timer.time_per_epoch,
            "peak_memory_bytes": peak,
            "memory_kind": "cuda_max_allocated" if cuda else "cpu_peak_rss_increase",
            "device": str(cli.trainer.strategy.root_device)}


def _mean_std(values: List[float]) -> Dict[str, float]:
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def summarise(runs: List[dict], backends: List[str]) -> List[dict]:
    rows = []
    for backend in backends:
        mine = [r for r in runs if r["backend"] == backend]
        memory = [r["peak_memory_bytes"] for r in mine if r["peak_memory_bytes"] is not None]
        rows.append({
            "backend": backend, "runs": len(mine),
            "metrics": {name: _mean_std([r["metrics"][name] for r in mine])
                        for name in mine[0]["metrics"]},
            "time_per_epoch_s": _mean_std([r["time_per_epoch_s"] for r in mine]),
            "peak_memory_bytes": _mean_std(memory) if memory else None,
        })
    base = rows[0]["time_per_epoch_s"]["mean"]
    for row in rows:
        row["speedup"] = base / row["time_per_epoch_s"]["mean"]
    return rows


def markdown(summary: List[dict], memory_kind: str) -> str:
    metrics = list(summary[0]["metrics"])
    memory = "peak CUDA memory (MiB)" if memory_kind == "cuda_max_allocated" else \
        "peak RSS increase (MiB)"
    head = ["backend"] + metrics + ["time / epoch (ms)", memory, "speedup"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in summary:
        cells = [row["backend"]]
        cells += [f"{row['metrics'][m]['mean']:.4f} ± {row['metrics'][m]['std']:.4f}"
                  for m in metrics]
        t = row["time_per_epoch_s"]
        cells.append(f"{t['mean'] * 1e3:.2f} ± {t['std'] * 1e3:.2f}")
        mem = row["peak_memory_bytes"]
        cells.append("n/a" if mem is None else f"{mem['mean'] / 2**20:.1f}")
        cells.append(f"{row['speedup']:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _list(text: str, kind=str) -> list:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("an empty list")
    return [kind(item) for item in items]


def parse(argv: List[str]):
    parser = argparse.ArgumentParser(
        prog=f"{PROG} compare",
        description="Train one config under several backends and seeds; report metrics, "
                    "time per epoch, peak memory and speedup side by side. Other arguments "
                    "(e.g. --trainer.max_epochs=5) are passed to every run.")
    parser.add_argument("--config", required=True, help="a zoo YAML config")
    parser.add_argument("--backends", default="pyg,fastgnn",
                        help="comma-separated, the first is the speedup's baseline "
                             "(default: pyg,fastgnn)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated (default: 0,1,2)")
    parser.add_argument("--split_per_seed", action="store_true",
                        help="run seed i on the data module's split i (datasets with several "
                             "splits: the heterophilous graphs, Amazon and Coauthor)")
    parser.add_argument("--out", default=None,
                        help="output folder (default: zoo_compare/<config name>)")
    args, overrides = parser.parse_known_args(argv)
    try:
        args.backends = _list(args.backends)
        args.seeds = _list(args.seeds, int)
    except ValueError as exc:
        raise ConfigError(f"--backends and --seeds take comma-separated lists: {exc}") from exc
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        raise ConfigError(f"unknown backend {unknown[0]!r}; choose one of {', '.join(BACKENDS)}")
    if not os.path.isfile(args.config):
        raise ConfigError(f"config file not found: {args.config}")
    if args.out is None:
        args.out = os.path.join("zoo_compare", os.path.splitext(os.path.basename(args.config))[0])
    return args, overrides


def main(argv: List[str]) -> dict:
    args, overrides = parse(argv)
    overrides = overrides + ["--trainer.enable_progress_bar=false",
                             "--trainer.enable_model_summary=false"]
    runs = []
    for seed in args.seeds:
        for backend in args.backends:
            print(f"{PROG} compare: {args.config} backend={backend} seed={seed}", flush=True)
            runs.append(run_one(args.config, backend, seed, args.out, overrides,
                                args.split_per_seed))
    summary = summarise(runs, args.backends)
    table = markdown(summary, runs[0]["memory_kind"])
    result = {"config": args.config, "overrides": overrides[:-2], "backends": args.backends,
              "seeds": args.seeds, "split_per_seed": args.split_per_seed,
              "device": runs[0]["device"],
              "torch": torch.__version__, "time_per_epoch": "median over epochs after the "
              "first of the training steps' wall time", "memory": runs[0]["memory_kind"],
              "summary": summary, "runs": runs}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(result, f, indent=2)
    seeds = ", ".join(map(str, args.seeds)) + (" (split i for seed i)" if args.split_per_seed
                                               else "")
    header = (f"{args.config} on {result['device']}, seeds {seeds}: "
              f"test metrics at the best validation epoch (mean ± std), {result['time_per_epoch']}"
              f", speedup against {args.backends[0]}.\n\n")
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(header + table)
    print("\n" + header + table + f"\nwritten to {os.path.join(args.out, 'compare.json')} and "
          f"compare.md", flush=True)
    return result
