"""Result rows and what is generated from them: JSON lines, the markdown speedup table, PNG
plots (speedup and memory per graph) and the README performance section.

Speedups and memory ratios compare each fastgnn row with the best baseline of the same graph,
workload and width: the successful baseline with the smallest forward + backward time.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from collections import Counter, defaultdict
from typing import Dict, Iterable, List, Optional, Tuple

import torch

ROW_FIELDS = ("graph", "workload", "level", "width", "heads", "implementation", "kind", "backend",
              "device", "device_name", "threads", "torch", "fastgnn_commit", "date", "fwd_ms",
              "bwd_ms", "peak_mb", "mem_kind", "check", "status", "error", "nodes", "edges",
              "tuned", "precision", "wall_ms", "busy_ms", "busy_kind", "setup_ms")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- environment and rows ----------------------------------------------------------------------
def git_commit(path: str = _PROJECT) -> str:
    """Short commit of the checkout holding fastgnn (``+dirty`` with local changes), or
    ``FASTGNN_COMMIT`` where the tree is a copy (a device machine), else "unknown"."""
    if os.environ.get("FASTGNN_COMMIT"):
        return os.environ["FASTGNN_COMMIT"]
    try:
        commit = subprocess.run(["git", "-C", path, "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit.strip() + ("+dirty" if dirty.strip() else "")


def describe_run(device: torch.device) -> str:
    """"<device name>, torch <version>, fastgnn commit <commit>": the first line of a table."""
    return f"{device_name(device)}, torch {torch.__version__}, fastgnn commit {git_commit()}"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform
    return platform.processor() or platform.machine() or "cpu"


def device_tag(device: torch.device) -> str:
    """Short file-name tag: "cpu", or the GPU's name in lower case with dashes."""
    if device.type != "cuda":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def environment(device: torch.device) -> Dict[str, object]:
    """The fields shared by every row of one run."""
    return {
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "fastgnn_commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


_MULTI_HEAD = ("gatv2", "graph-attention", "transformerconv", "gat-attention", "gatconv")


def shape(row: Dict[str, object]) -> str:
    """The feature shape a row ran at: the width, or heads x head dim for attention, followed
    by the precision of an op row whose features were not float32."""
    width, heads = row.get("width"), row.get("heads")
    if width and heads and any(key in (row.get("workload") or "") for key in _MULTI_HEAD):
        text = f"{heads}x{max(1, width // heads)}"
    else:
        text = str(width)
    half = row.get("level") == "op" and row.get("precision") not in (None, "fp32")
    return f"{text} {row['precision']}" if half else text


def make_row(env: Dict[str, object], **fields) -> Dict[str, object]:
    row = {name: None for name in ROW_FIELDS}
    row.update(env)
    row.update(fields)
    unknown = set(row) - set(ROW_FIELDS)
    if unknown:
        raise ValueError(f"unknown result fields: {sorted(unknown)}")
    return row


def append_jsonl(path: str, row: Dict[str, object]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=False) + "\n")


def read_jsonl(path: str) -> List[Dict[str, object]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---- comparisons -------------------------------------------------------------------------------
def _total(row) -> float:
    return row["fwd_ms"] + row["bwd_ms"]


def _ratio(numerator, denominator) -> Optional[float]:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def comparisons(rows: Iterable[Dict]) -> List[Dict]:
    """For each successful fastgnn row: the best baseline and the speedups and memory ratio."""
    groups: Dict[Tuple, List[Dict]] = defaultdict(list)
    for row in rows:
        if row.get("level") != "step":  # training steps: step_comparisons
            groups[(row["graph"], row["workload"], shape(row))].append(row)
    found = []
    for (graph, workload, width), members in groups.items():
        ok = [r for r in members if r["status"] == "ok"]
        baselines = [r for r in ok if r["kind"] == "baseline"]
        if not baselines:
            continue
        best = min(baselines, key=_total)
        for row in ok:
            if row["kind"] != "fastgnn":
                continue
            found.append({
                "graph": graph, "workload": workload, "width": width,
                "implementation": row["implementation"], "backend": row["backend"],
                "baseline": best["implementation"], "fwd_ms": row["fwd_ms"],
                "bwd_ms": row["bwd_ms"], "peak_mb": row["peak_mb"],
                "fwd_speedup": _ratio(best["fwd_ms"], row["fwd_ms"]),
                "bwd_speedup": _ratio(best["bwd_ms"], row["bwd_ms"]),
                "speedup": _ratio(_total(best), _total(row)),
                "memory_ratio": _ratio(row["peak_mb"], best["peak_mb"]),
            })
    return found


def step_comparisons(rows: Iterable[Dict]) -> List[Dict]:
    """For each successful fastgnn training-step row: the stock row of the same graph, model
    and precision, and the wall-time speedup over it."""
    stock = {(r["graph"], r["workload"], r["precision"]): r for r in rows
             if r.get("level") == "step" and r["kind"] == "baseline" and r["status"] == "ok"}
    found = []
    for row in rows:
        if row.get("level") != "step" or row["kind"] != "fastgnn" or row["status"] != "ok":
            continue
        base = stock.get((row["graph"], row["workload"], row["precision"]))
        # (older records show a CUDA-graph replay's unmeasured peak as 0)
        peak = row["peak_mb"] if not row["implementation"].endswith("cuda-graph") else None
        found.append({
            "graph": row["graph"], "workload": row["workload"], "precision": row["precision"],
            "implementation": row["implementation"],
            "stock_ms": base and base["wall_ms"], "wall_ms": row["wall_ms"],
            "busy_ms": row["busy_ms"], "speedup": _ratio(base and base["wall_ms"], row["wall_ms"]),
            "wall_over_busy": _ratio(row["wall_ms"], row["busy_ms"]),
            "memory_ratio": _ratio(peak, base and base["peak_mb"]),
        })
    return found


# ---- markdown ----------------------------------------------------------------------------------
def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _markdown(header: List[str], lines: List[List[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(v) for v in line) + " |" for line in lines]
    return "\n".join(out)


def speedup_table(rows: List[Dict]) -> str:
    """fastgnn vs the best baseline: speedups (>1 is faster) and memory ratios (<1 is less)."""
    lines = [[c["graph"], c["workload"], c["width"], c["implementation"], c["baseline"],
              c["fwd_speedup"], c["bwd_speedup"], c["speedup"], c["memory_ratio"]]
             for c in comparisons(rows)]
    if not lines:
        return "_No fastgnn row has a successful baseline to compare with._"
    return _markdown(["graph", "workload", "width", "fastgnn", "vs baseline", "fwd speedup",
                      "bwd speedup", "fwd+bwd speedup", "memory ratio"], lines)


#: A half-precision op row is marked slower when its fwd + bwd time exceeds the float32 row's
#: by more than this fraction (what repeated runs of one row move by).
HALF_SLOWER = 0.05


def precision_comparisons(rows: Iterable[Dict]) -> List[Dict]:
    """Each successful half-precision op row against the float32 row of the same graph,
    workload, shape and implementation: how many times faster it is (< 1: slower)."""
    rows = [r for r in rows if r.get("level") == "op" and r["status"] == "ok"]
    base = {(r["graph"], r["workload"], shape(r), r["implementation"]): r for r in rows
            if r.get("precision") == "fp32"}
    found = []
    for row in rows:
        if row.get("precision") in (None, "fp32"):
            continue
        width = shape(dict(row, precision="fp32"))
        fp32 = base.get((row["graph"], row["workload"], width, row["implementation"]))
        if fp32 is None:
            continue
        speedup = _ratio(_total(fp32), _total(row))
        found.append({
            "graph": row["graph"], "workload": row["workload"], "width": width,
            "precision": row["precision"], "implementation": row["implementation"],
            "fwd_speedup": _ratio(fp32["fwd_ms"], row["fwd_ms"]),
            "bwd_speedup": _ratio(fp32["bwd_ms"], row["bwd_ms"]), "speedup": speedup,
            "slower": speedup is not None and speedup < 1 / (1 + HALF_SLOWER),
        })
    return found


def precision_table(rows: List[Dict]) -> str:
    """Half precision against float32, per op row (``--precisions``)."""
    lines = [[c["graph"], c["workload"], c["width"], c["precision"], c["implementation"],
              c["fwd_speedup"], c["bwd_speedup"], c["speedup"], "**yes**" if c["slower"] else "no"]
             for c in precision_comparisons(rows)]
    if not lines:
        return "_No half-precision op row with a float32 row to compare with._"
    return _markdown(["graph", "workload", "width", "precision", "implementation",
                      "fwd speedup over fp32", "bwd speedup over fp32", "fwd+bwd speedup",
                      f"slower (by over {HALF_SLOWER:.0%})"], lines)


def step_table(rows: List[Dict]) -> str:
    """Training steps: fastgnn.enable against stock PyG, wall time per step."""
    lines = [[c["graph"], c["workload"], c["precision"], c["implementation"], c["stock_ms"],
              c["wall_ms"], c["busy_ms"], c["speedup"], c["wall_over_busy"], c["memory_ratio"]]
             for c in step_comparisons(rows)]
    if not lines:
        return "_No training-step rows._"
    return _markdown(["graph", "model", "precision", "implementation", "stock ms/step",
                      "fastgnn ms/step", "fastgnn busy ms/step", "speedup", "wall / busy",
                      "memory ratio"], lines)


def results_table(rows: List[Dict]) -> str:
    """Every row: times, memory and status (skips, mismatches, OOMs and errors included)."""
    lines = [[r["graph"], r["workload"], shape(r), r["implementation"], r["backend"] or "-",
              r["fwd_ms"], r["bwd_ms"], r["peak_mb"],
              r["status"] if r["status"] == "ok" else f"{r['status']}: {r['error'] or ''}"]
             for r in rows if r.get("level") != "step"]
    return _markdown(["graph", "workload", "width", "implementation", "backend", "fwd ms",
                      "bwd ms", "peak MB", "status"], lines)


def step_results(rows: List[Dict]) -> str:
    """Every training-step row: wall and busy time per step, memory and status."""
    lines = [[r["graph"], r["workload"], r["precision"], r["implementation"], r["wall_ms"],
              r["busy_ms"], r["busy_kind"], r["peak_mb"],
              r["status"] if r["status"] == "ok" else f"{r['status']}: {r['error'] or ''}"]
             for r in rows if r.get("level") == "step"]
    if not lines:
        return "_No training-step rows._"
    return _markdown(["graph", "model", "precision", "implementation", "ms/step", "busy ms/step",
                      "busy measured as", "peak MB", "status"], lines)


def graph_table(rows: List[Dict]) -> str:
    seen = {}
    for r in rows:
        seen.setdefault(r["graph"], (r["nodes"], r["edges"]))
    return _markdown(["graph", "nodes", "edges"], [[g, n, e] for g, (n, e) in seen.items()])


def commits(rows: List[Dict]) -> str:
    """The fastgnn commits of the rows (a merged results file can hold several runs), each
    with its number of rows."""
    counts = Counter(r.get("fastgnn_commit") for r in rows)
    if len(counts) == 1:
        return f"commit `{next(iter(counts))}`"
    return "commits " + ", ".join(f"`{c}` ({n} rows)" for c, n in counts.items())


def summary(rows: List[Dict]) -> str:
    first = rows[0] if rows else {}
    mem_kinds = sorted({r["mem_kind"] for r in rows if r.get("mem_kind")})
    return (f"Device: {first.get('device_name')} ({first.get('device')}, "
            f"{first.get('threads')} threads), torch {first.get('torch')}, fastgnn "
            f"{commits(rows)}, date {first.get('date')}. Peak memory: "
            f"{', '.join(mem_kinds) or 'not measured'} (growth above the inputs).")


def table_markdown(rows: List[Dict]) -> str:
    return "\n\n".join([
        "# fastgnn benchmark", summary(rows), "## Graphs", graph_table(rows),
        "## Layers: stock PyG against fastgnn.enable", layer_table(rows),
        "## Speedups against the best baseline", speedup_table(rows),
        "## Half precision against float32", precision_table(rows),
        "## Training steps", step_table(rows), "## Training-step results", step_results(rows),
        "## All results", results_table(rows)]) + "\n"


# ---- plots -------------------------------------------------------------------------------------
def plot(rows: List[Dict], prefix: str) -> List[str]:
    """``<prefix>-speedup.png`` and ``<prefix>-memory.png``: per graph, one bar per workload
    (best fastgnn row vs the best baseline; a run of training steps only: one bar per model
    and precision, best fastgnn step vs stock). Returns the written paths: none without
    matplotlib (the DGL environment has none; ``bench.py report`` draws them elsewhere)."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    # Per (graph, series): the fastest row's speedup, and the memory ratio of the fastest row
    # that has one (a training step's fastest row may be a CUDA-graph replay, not measured).
    ranked: Dict[Tuple[str, str], List[Dict]] = defaultdict(list)
    layers = comparisons(rows)
    for c in layers or step_comparisons(rows):
        key = (c["graph"], f"{c['workload']} " + (f"w{c['width']}" if layers else c["precision"]))
        if c["speedup"] is not None:
            ranked[key].append(c)
    best = {}
    for key, found in ranked.items():
        found.sort(key=lambda c: -c["speedup"])
        memory = [c["memory_ratio"] for c in found if c["memory_ratio"] is not None]
        best[key] = {"speedup": found[0]["speedup"], "memory_ratio": memory[0] if memory else None}
    graphs = list(dict.fromkeys(g for g, _ in best))
    series = list(dict.fromkeys(s for _, s in best))
    paths = []
    versus = "best baseline" if layers else "stock PyG"
    for metric, label, name in (("speedup", f"{'fwd+bwd' if layers else 'training-step'} "
                                 f"speedup vs {versus}", "speedup"),
                                ("memory_ratio", f"peak memory / {versus}'s", "memory")):
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(graphs) + 2), 4.5))
        width = 0.8 / max(1, len(series))
        for i, s in enumerate(series):
            xs = [gi + i * width for gi, g in enumerate(graphs) if (g, s) in best]
            ys = [best[(g, s)][metric] or 0.0 for g in graphs if (g, s) in best]
            ax.bar(xs, ys, width, label=s)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([gi + 0.4 - width / 2 for gi in range(len(graphs))])
        ax.set_xticklabels(graphs, rotation=20, ha="right")
        ax.set_ylabel(label)
        if best and metric == "speedup":
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
        if series:
            ax.legend(fontsize="small", ncol=2)
        fig.tight_layout()
        path = f"{prefix}-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# ---- files -------------------------------------------------------------------------------------
def write_outputs(rows: List[Dict], prefix: str) -> Dict[str, object]:
    """Writes ``<prefix>.md`` and the plots; returns their paths."""
    table = f"{prefix}.md"
    with open(table, "w") as f:
        f.write(table_markdown(rows))
    return {"table": table, "plots": plot(rows, prefix)}


def layer_table(rows: List[Dict]) -> str:
    """Each stock PyG layer against the same layer after ``fastgnn.enable``, without the
    reference backend's rows; the op rows when a run has no layer rows."""
    found = [c for c in comparisons(rows) if c["implementation"] != "fastgnn-reference"]
    layers = [c for c in found if c["baseline"] == "pyg-stock"] or found
    if not layers:
        return "_No fastgnn row has a successful baseline to compare with._"
    return _markdown(["graph", "layer", "width", "fwd speedup", "bwd speedup",
                      "fwd+bwd speedup", "memory ratio"],
                     [[c["graph"], c["workload"], c["width"], c["fwd_speedup"],
                       c["bwd_speedup"], c["speedup"], c["memory_ratio"]] for c in layers])


def readme_section(rows: List[Dict], outputs: Dict[str, object], readme_dir: str) -> str:
    """The speedup plot under one line naming the run; the tables stay in the linked results
    file, so that the README's performance section keeps one headline table."""
    first = rows[0] if rows else {}
    rel = lambda p: os.path.relpath(p, readme_dir).replace(os.sep, "/")  # noqa: E731
    images = "\n".join(f"![{os.path.basename(p)}]({rel(p)})" for p in outputs["plots"][:1])
    return "\n\n".join([
        f"Measured on {first.get('device_name')} ({first.get('device')}) on "
        f"{str(first.get('date', ''))[:10]} at fastgnn {commits(rows)}, "
        f"torch {first.get('torch')}. Full results (every op, width and baseline): "
        f"[{os.path.basename(outputs['table'])}]({rel(outputs['table'])}).",
        images])


def replace_section(path: str, text: str) -> None:
    """Replaces what lies between the bench markers in ``path`` with ``text``."""
    with open(path) as f:
        content = f.read()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{path} has no '{BEGIN}' ... '{END}' markers")
    content = content[:start + len(BEGIN)] + "\n" + text.strip() + "\n" + content[end:]
    with open(path, "w") as f:
        f.write(content)
