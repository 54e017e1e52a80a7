"""Multi-GPU scaling of zoo mini-batch training: each config and model trained with Lightning
DDP on 1, 2, 4, ... devices of one host (``fastgnn-zoo fit --trainer.strategy ddp``, one
process per device, each rank sampling its own share of the seeds).

    python scripts/bench_ddp.py --configs sage-powerlaw-minibatch,sage-ogbn-arxiv-minibatch \\
        --archs sage,gatv2 --devices 1,2,4 --epochs 4 -- --data.init_args.sample_on_gpu=true

Arguments after ``--`` go to every ``fit``. Per run: the training epoch's wall time (steps
plus the time between them, the slowest rank's, median over the epochs after the
first), the share of it spent between steps (fetching and moving batches, Lightning's hooks;
see ``fastgnn.zoo.callbacks.EpochTimer``), the share spent fetching batches alone (waiting
for data, from Lightning's SimpleProfiler, the slowest rank's over all epochs), and the best
validation metric. Scaling is the
one-device epoch time over the N-device one; efficiency is scaling / N. Each row is appended
to a ``.jsonl`` as its run ends (device counts run in rising order, so a row's scaling is known
then), and the table is written beside it as ``.md`` at the end. ``--fit-timeout`` ends a run
that takes longer (it then has no row) and goes on with the next.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from fastgnn.bench.report import device_name, device_tag, git_commit  # noqa: E402
from fastgnn.zoo.compare import _list  # noqa: E402  (its comma-separated lists)

#: per model, the options that make it the issue's 3-layer, 256-wide model
ARCH_OPTIONS = {"sage": [], "gatv2": ["--model.heads=4"], "gat": ["--model.heads=4"],
                "gcn": [], "gin": []}
TIMER = ["--trainer.callbacks+=fastgnn.zoo.callbacks.EpochTimer",
         "--trainer.callbacks.log=true"]
# Lightning's SimpleProfiler, one report per rank in the run folder: it times the batch fetch
PROFILER = ["--trainer.profiler=lightning.pytorch.profilers.SimpleProfiler",
            "--trainer.profiler.dirpath=.", "--trainer.profiler.filename=profile"]
FETCH, EPOCH = "[_TrainingEpochLoop].train_dataloader_next", "run_training_epoch"


def strategy_options(devices: int, ddp_options: Sequence[str]) -> List[str]:
    """Lightning's DDP for several devices, given DistributedDataParallel options (NAME=VALUE)
    through DDPStrategy; one device runs without a wrapper."""
    if devices == 1:
        return ["--trainer.strategy=auto"]
    if not ddp_options:
        return ["--trainer.strategy=ddp"]
    return ["--trainer.strategy=lightning.pytorch.strategies.DDPStrategy",
            *(f"--trainer.strategy.{option}" for option in ddp_options)]


def fit_command(config: str, arch: str, devices: int, epochs: int, accelerator: str,
                extra: List[str], ddp_options: Sequence[str] = ()) -> List[str]:
    return [sys.executable, "-m", "fastgnn.zoo", "fit", "--config", config,
            f"--model.arch={arch}", *ARCH_OPTIONS[arch], "--model.backend=fastgnn",
            f"--trainer.accelerator={accelerator}", f"--trainer.devices={devices}",
            *strategy_options(devices, ddp_options),
            f"--trainer.max_epochs={epochs}", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", *TIMER, *PROFILER, *extra]


def run_environment(devices: int, extra: List[str]) -> Dict[str, str]:
    """A fit's environment. With the sampler on the CPU one rank per device shares the host's
    cores (torch would give each all of them); with ``sample_on_gpu`` the zoo picks its own
    threads (one, when every batch stays on the GPU). The caller's OMP_NUM_THREADS wins."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if "OMP_NUM_THREADS" not in env and not samples_on_gpu(extra):
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // devices))
    return env


def samples_on_gpu(extra: List[str]) -> bool:
    """Whether the fit arguments turn ``sample_on_gpu`` on (``--...sample_on_gpu=true`` or
    ``--...sample_on_gpu true``)."""
    words = " ".join(extra).replace("=", " ").split()
    return any(word.endswith("sample_on_gpu") and value.lower() in ("true", "1", "yes")
               for word, value in zip(words, words[1:]))


def read_metrics(run_dir: str) -> Dict[int, Dict[str, float]]:
    """The CSV logger's rows (rank 0's, values already reduced over ranks), merged per epoch."""
    logs = glob.glob(os.path.join(run_dir, "lightning_logs", "*", "metrics.csv"))
    if len(logs) != 1:
        raise RuntimeError(f"expected one metrics.csv under {run_dir}, found {logs}")
    epochs: Dict[int, Dict[str, float]] = {}
    with open(logs[0]) as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if v not in ("", None)}
            epochs.setdefault(int(values["epoch"]), {}).update(values)
    return epochs


def fetch_share(run_dir: str) -> float:
    """The share of the training epochs (all of them) that the slowest rank spent fetching
    batches: the data wait, from the ranks' SimpleProfiler reports."""
    shares = []
    for path in glob.glob(os.path.join(run_dir, "fit-profile*.txt")):
        totals = {}
        with open(path) as f:
            for line in f:
                cells = [cell.strip() for cell in line.split("|")]
                if len(cells) > 4 and cells[1] in (FETCH, EPOCH):
                    totals[cells[1]] = float(cells[4])
        shares.append(totals[FETCH] / totals[EPOCH])
    if not shares:
        raise RuntimeError(f"no profiler report under {run_dir}")
    return max(shares)


def summarise(epochs: Dict[int, Dict[str, float]]) -> dict:
    timed = [e for e in sorted(epochs) if "time/steps_s" in epochs[e]]
    steady = timed[1:] or timed  # the first epoch builds caches and tunes kernels
    walls = [epochs[e]["time/steps_s"] + epochs[e]["time/between_steps_s"] for e in steady]
    between = [epochs[e]["time/between_steps_s"] for e in steady]
    metric = "val_acc" if any("val_acc" in v for v in epochs.values()) else next(
        k for v in epochs.values() for k in v if k.startswith("val_") and k != "val_loss")
    return {"epoch_s": statistics.median(walls),
            "between_steps_share": statistics.median(b / t for b, t in zip(between, walls)),
            "epochs_timed": len(steady), "metric": metric,
            "best_val": max(v[metric] for v in epochs.values() if metric in v)}


def add_scaling(rows: List[dict]) -> None:
    """Scaling against the same config and model on one device (absent: no scaling)."""
    single = {(r["config"], r["arch"]): r["epoch_s"] for r in rows if r["devices"] == 1}
    for r in rows:
        base = single.get((r["config"], r["arch"]))
        r["scaling"] = None if base is None else base / r["epoch_s"]
        r["efficiency"] = None if base is None else r["scaling"] / r["devices"]


def markdown(rows: List[dict]) -> str:
    lines = ["| config | model | devices | epoch (s) | waiting for data | between steps | best val "
             "| scaling | efficiency |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        scaling = "n/a" if r["scaling"] is None else f"{r['scaling']:.2f}x"
        efficiency = "n/a" if r["efficiency"] is None else f"{100 * r['efficiency']:.0f}%"
        lines.append(f"| {r['config']} | {r['arch']} | {r['devices']} | {r['epoch_s']:.3f} | "
                     f"{100 * r['data_wait_share']:.1f}% | {100 * r['between_steps_share']:.1f}% | "
                     f"{r['metric']} {r['best_val']:.4f} | "
                     f"{scaling} | {efficiency} |")
    return "\n".join(lines) + "\n"


def _fit(command: List[str], run_dir: str, env: dict, timeout) -> Optional[str]:
    """Runs one fit in its own process group (DDP ranks included). Returns None when it
    succeeds, else why not ("exit N", or "timed out" after ``timeout`` seconds, when the whole
    group is killed)."""
    with open(os.path.join(run_dir, "fit.log"), "w") as log:
        process = subprocess.Popen(command, cwd=run_dir, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return "timed out"
    return None if code == 0 else f"exit {code}"


def main(argv=None) -> List[dict]:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="sage-powerlaw-minibatch,sage-ogbn-arxiv-minibatch",
                        help="zoo config names (zoo/configs/NAME.yaml) or paths")
    parser.add_argument("--archs", default="sage,gatv2", help=f"of {', '.join(ARCH_OPTIONS)}")
    parser.add_argument("--devices", default="1,2,4")
    parser.add_argument("--epochs", type=int, default=4, help="the first is not timed")
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument("--fit-timeout", type=float, default=None,
                        help="seconds one fit may take (default: no limit)")
    parser.add_argument("--work", default="bench-out/ddp", help="run folders")
    parser.add_argument("--ddp", action="append", default=[], metavar="NAME=VALUE",
                        help="a DistributedDataParallel option for the runs on several devices "
                        "(repeatable), e.g. static_graph=true")
    parser.add_argument("--out", default=None, help="the .jsonl to append to (default: "
                        "benchmarks/results/<date>-<device>-ddp-<commit>.jsonl)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    try:
        configs, archs = _list(args.configs), _list(args.archs)
        device_counts = sorted(_list(args.devices, int))
    except ValueError as exc:
        parser.error(f"--configs, --archs and --devices take comma-separated lists: {exc}")
    unknown = [a for a in archs if a not in ARCH_OPTIONS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; choose from {', '.join(ARCH_OPTIONS)}")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    commit = git_commit()
    device = torch.device("cuda" if args.accelerator in ("gpu", "cuda") else "cpu")
    host = {"device_name": device_name(device), "device_count": torch.cuda.device_count(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__}
    out = args.out or os.path.join(ROOT, "benchmarks", "results",
                                   f"{date[:10]}-{device_tag(device)}-ddp-{commit}.jsonl")
    rows, failed = [], []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    for config in configs:
        path = config if config.endswith(".yaml") else os.path.join(
            ROOT, "zoo", "configs", config + ".yaml")
        name = os.path.splitext(os.path.basename(path))[0]
        for arch in archs:
            for devices in device_counts:
                run_dir = os.path.abspath(os.path.join(args.work, f"{name}-{arch}-{devices}"))
                shutil.rmtree(run_dir, ignore_errors=True)
                os.makedirs(run_dir)
                env = run_environment(devices, extra)
                command = fit_command(os.path.abspath(path), arch, devices, args.epochs,
                                      args.accelerator, extra, args.ddp)
                print(f"{name} {arch} devices={devices}", flush=True)
                start = time.perf_counter()
                error = _fit(command, run_dir, env, args.fit_timeout)
                if error:  # the other runs still go ahead
                    print(f"  fit failed ({error}); see {run_dir}/fit.log", flush=True)
                    failed.append(f"{name} {arch} devices={devices}")
                    continue
                row = {"config": name, "arch": arch, "devices": devices,
                       "accelerator": args.accelerator, "epochs": args.epochs,
                       "fit_wall_s": time.perf_counter() - start,
                       **summarise(read_metrics(run_dir)),
                       "data_wait_share": fetch_share(run_dir), "extra": extra,
                       "ddp_options": args.ddp, **host,
                       "fastgnn_commit": commit, "date": date}
                print(f"  epoch {row['epoch_s']:.3f} s, waiting for data "
                      f"{100 * row['data_wait_share']:.1f}%, between steps "
                      f"{100 * row['between_steps_share']:.1f}%"
                      f", best {row['metric']} {row['best_val']:.4f}", flush=True)
                rows.append(row)
                add_scaling(rows)
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    table = markdown(rows)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(f"DDP scaling on {host['device_name']} (host: {host['device_count']} GPUs, "
                f"{host['cpu_count']} cores), {date}, commit {commit}, fit arguments {extra}"
                "\n\n" + table)
    print("\n" + table + f"\nappended to {out}", flush=True)
    if failed:
        sys.exit(f"failed: {'; '.join(failed)}")
    return rows


if __name__ == "__main__":
    main()
