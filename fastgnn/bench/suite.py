"""Running a benchmark: graphs x widths x workloads x implementations -> result rows.

Each implementation is checked against the workload's oracle (output and input gradients)
before it is timed; mismatches, OOMs and errors become rows with that status, never crashes.
Rows are appended to the JSON lines file as they are produced, so an interrupted run keeps
what it measured.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from fastgnn import datasets, tuning
from fastgnn.bench import graphs as graph_specs
from fastgnn.bench import measure, report, training
from fastgnn.bench.workloads import WORKLOADS, Case, Context, Implementation

# Suites: (graphs, workloads, widths, warmup, repeats)
KERNELS = [name for name, w in WORKLOADS.items() if w.level != "step" and w.in_default_suite]
STEPS = [name for name, w in WORKLOADS.items() if w.level == "step"]
QUICK = (["cora", "powerlaw-50k", "block-small"],
         ["spmm-both", "aggregate-max", "gatv2-attention", "gatv2conv"], [32], 1, 3)
CPU_DEFAULT = (["cora", "tolokers", "flickr", "powerlaw-200k", "uniform-100k", "block-small"],
               KERNELS, [64], 2, 5)
CUDA_DEFAULT = (["cora", "tolokers", "ogbn-arxiv", "flickr", "roads-ny", "powerlaw-16M",
                 "powerlaw-8M-flat", "uniform-8M", "block-powerlaw"],
                KERNELS, [64], 3, 10)
# Training steps (--training): input width 128, hidden 256 (fastgnn.bench.training).
TRAINING_QUICK = (["cora"], STEPS, [128], 1, 3)
TRAINING = (["tolokers", "ogbn-arxiv", "flickr", "roads-ny"], STEPS, [128], 2, 10)
# Feature dtypes of op workloads (--precisions); layers and training steps run float32 (steps
# add bf16 under autocast themselves). A half-precision case is checked against the float32
# oracle on the same values, within HALF_RTOL of the largest expected magnitude.
OP_PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
HALF_RTOL = {torch.bfloat16: 5e-2, torch.float16: 1e-2}


@dataclass
class Options:
    device: torch.device
    graphs: Sequence[str]
    workloads: Sequence[str]
    widths: Sequence[int]
    warmup: int
    repeats: int
    jsonl: str
    seed: int = 0
    heads: int = 4
    compile: bool = False  # training steps: add a torch.compile row
    precisions: Sequence[str] = ("fp32",)  # op workloads' feature dtypes (OP_PRECISIONS)


def default_suite(device: torch.device, quick: bool, steps: bool = False):
    if steps:
        return TRAINING_QUICK if quick else TRAINING
    if quick:
        return QUICK
    return CUDA_DEFAULT if device.type == "cuda" else CPU_DEFAULT


_CHECK_NOTES = {"elementwise": "", "norm": " (gradients by relative norm: LeakyReLU kinks)",
                "none": " (output; gradients split ties)"}


def _measure(impl: Implementation, case: Case, expected: Optional[measure.Expected],
             grad_output: torch.Tensor, opts: Options, rtol: float,
             oracle_note: str = "") -> Dict[str, object]:
    """Checks then times one implementation; returns the row fields it determines."""
    fields: Dict[str, object] = {}
    try:
        if expected is not None:
            measure.check(impl.forward, case.inputs, grad_output, expected, rtol,
                          impl.grad_check)
            fields["check"] = (f"matches {case.oracle_name}{oracle_note}"
                               + _CHECK_NOTES[impl.grad_check])
        fields["fwd_ms"] = measure.time_forward(impl.forward, opts.device, opts.warmup,
                                                opts.repeats)
        fields["bwd_ms"] = measure.time_backward(impl.forward, case.inputs, grad_output,
                                                 opts.device, opts.warmup, opts.repeats)
        fields["peak_mb"], fields["mem_kind"] = measure.peak_memory(
            impl.forward, case.inputs, grad_output, opts.device)
        fields["status"] = "ok"
    except Exception as exc:  # noqa: BLE001  (every failure is a result)
        fields["status"], fields["error"] = measure.classify_failure(exc)
        if fields["status"] == "mismatch":
            fields["check"] = f"differs from {case.oracle_name}"
    measure.release_memory(opts.device, after_oom=fields["status"] == "oom")
    return fields


@dataclass
class _Oracle:
    expected: Optional[measure.Expected] = None
    grad_output: Optional[torch.Tensor] = None
    check: Optional[str] = None  # what the rows' check field says when nothing is checked
    failure: Optional[Tuple[str, str]] = None  # (status, message) when nothing could run


def _oracle(case: Case, runnable: List[Implementation]) -> _Oracle:
    """The expected result and a fixed output gradient. When the oracle fails (e.g. OOM), the
    gradient is shaped like the output of the first implementation that runs, and the rows
    say they were not verified; when nothing runs, every row gets the last failure."""
    device = case.inputs[0].device
    try:
        expected, grad_output = measure.expected_result(case.oracle, case.inputs)
        return _Oracle(expected, grad_output)
    except Exception as exc:  # noqa: BLE001
        status, message = measure.classify_failure(exc)
    measure.release_memory(device, after_oom=status == "oom")
    unverified = f"unverified: oracle {case.oracle_name} {status} ({message})"
    for impl in runnable:
        try:
            with torch.no_grad():
                output = impl.forward()
            return _Oracle(grad_output=torch.randn_like(output), check=unverified)
        except Exception as exc:  # noqa: BLE001  (its own row records the failure)
            status, message = measure.classify_failure(exc)
            measure.release_memory(device, after_oom=status == "oom")
    return _Oracle(failure=(status, f"nothing ran, oracle included (last: {message})"))


def run_case(case: Case, opts: Options, emit: Callable[..., None],
             reference: Optional[Case] = None) -> None:
    """Checks and times every implementation of ``case``. A half-precision case is checked
    within HALF_RTOL, against ``reference``'s oracle where given: the same workload built in
    float32 on the same values."""
    runnable = [impl for impl in case.implementations if impl.skip is None]
    oracle = _oracle(reference or case, runnable) if runnable else _Oracle()
    rtol, note, grad_output = case.rtol, "", oracle.grad_output
    dtype = case.inputs[0].dtype
    if dtype in HALF_RTOL:
        rtol = max(rtol, HALF_RTOL[dtype])
        note = f" ({'float32, ' if reference is not None else ''}within {HALF_RTOL[dtype]:g})"
        if grad_output is not None:
            grad_output = grad_output.to(dtype)
    for impl in case.implementations:
        if impl.skip is not None:
            fields = dict(status="skipped", error=impl.skip)
        elif oracle.failure is not None:
            fields = dict(status=oracle.failure[0], error=oracle.failure[1])
        else:
            fields = dict(check=oracle.check, setup_ms=impl.setup_ms)
            fields.update(_measure(impl, case, oracle.expected, grad_output, opts, rtol, note))
        emit(implementation=impl.name, kind=impl.kind, backend=impl.backend, **fields)


def _build(name: str, ctx: Context, emit: Callable[..., None]) -> Optional[Case]:
    """The workload's case, or None after emitting why it could not be built."""
    try:
        return WORKLOADS[name].build(ctx)
    except ImportError as exc:
        emit(status="skipped", error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001
        status, message = measure.classify_failure(exc)
        emit(status=status, error=f"building inputs: {message}")
    return None


def run_graph(spec: str, opts: Options, emit: Callable[..., None],
              log: Callable[[str], None]) -> None:
    """Every width and workload of one graph."""
    try:
        bench_graph = graph_specs.load(spec)
    except (datasets.DatasetUnavailable, ValueError, KeyError) as exc:
        emit(graph=spec, status="skipped", error=f"graph unavailable: {exc}")
        return
    log(graph_specs.describe(bench_graph))
    on_graph = dict(graph=spec, nodes=bench_graph.stats["src_nodes"],
                    edges=bench_graph.stats["edges"])
    for width in opts.widths:
        for name in opts.workloads:
            op = WORKLOADS[name].level == "op"
            for precision in opts.precisions if op else [None]:
                context = Context(bench_graph, width, opts.device, opts.seed, opts.heads,
                                  opts.compile, OP_PRECISIONS[precision or "fp32"])
                tag = {"precision": precision} if op else {}

                def case_emit(context=context, name=name, width=width, tag=tag, **fields):
                    # the kernels the native fastgnn ops tuned on this case's graph
                    native = fields.get("backend") == "native" and context.has("graph")
                    tuned = tuning.choices(context.graph) if native else {}
                    emit(**on_graph, workload=name, level=WORKLOADS[name].level, width=width,
                         heads=opts.heads, tuned=tuned or None, **tag, **fields)
                case = _build(name, context, case_emit)
                if isinstance(case, training.StepCase):
                    training.run_case(case, opts.device, opts.warmup, opts.repeats, case_emit)
                elif case is not None:
                    run_case(case, opts, case_emit, _float32_twin(name, context))
                    del case
                measure.release_memory(opts.device)


def _float32_twin(name: str, context: Context) -> Optional[Case]:
    """For a half-precision context, the workload built again on its float32 twin (its
    oracle checks the half case's arithmetic on the same values); None in float32 or when it
    cannot be built."""
    if context.dtype == torch.float32:
        return None
    return _build(name, context.float32_twin(), lambda **fields: None)


def run(opts: Options, log: Callable[[str], None] = print) -> List[Dict[str, object]]:
    """Runs the suite; returns the rows (also appended to ``opts.jsonl`` one by one)."""
    env = report.environment(opts.device)
    rows: List[Dict[str, object]] = []

    def emit(**fields) -> None:
        row = report.make_row(env, **fields)
        rows.append(row)
        report.append_jsonl(opts.jsonl, row)
        log(_describe_row(row))

    with warnings.catch_warnings():  # PyG's advice to install torch-scatter, once per call
        warnings.filterwarnings("ignore", message=".*can be accelerated via the 'torch-scatter'")
        for spec in opts.graphs:
            started = time.perf_counter()
            run_graph(spec, opts, emit, log)
            log(f"  ({spec}: {time.perf_counter() - started:.0f} s)")
    return rows


def _describe_row(row: Dict[str, object]) -> str:
    if row["status"] != "ok":
        times = ""
    elif row["level"] == "step":
        times = (f" {row['precision']} step {row['wall_ms']:.3f} ms  busy {row['busy_ms']:.3f} ms"
                 f"  peak {_fmt_mb(row['peak_mb'])}")
    else:
        times = (f" fwd {row['fwd_ms']:.3f} ms  bwd {row['bwd_ms']:.3f} ms  peak "
                 f"{_fmt_mb(row['peak_mb'])}")
    detail = f"  ({row['error']})" if row["error"] else ""
    return (f"  {row['workload'] or '':<16} w{row['width'] or '-':<4} "
            f"{row['implementation'] or '':<20} {row['status']:<8}{times}{detail}")


def _fmt_mb(value) -> str:
    return "-" if value is None else f"{value:.1f} MB"
