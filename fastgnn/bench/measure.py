"""Measuring one implementation: correctness against an expected result, forward and backward
time, peak memory, and failures turned into statuses.

Times are steady-state throughput, as a training loop sees it: after ``warmup`` untimed calls,
``repeats`` samples are taken and the median sample is kept. On CUDA a sample is one batch of
``BATCH`` (10) back-to-back calls between two CUDA events, divided by ``BATCH``: the CPU
launches ahead of the GPU, so per-call Python overhead shows only where it exceeds the GPU
time of a call. On CPU a sample is one call timed by ``time.perf_counter`` (the CPU baselines
take seconds a call, and there is no launch queue to fill). The device is synchronized before
each sample starts, so samples are independent. The backward time is that of
``torch.autograd.grad`` from a fixed output gradient with ``retain_graph=True``: each sample
runs one forward outside the timed region and differentiates that one graph ``BATCH`` times.
Peak memory is the growth above what was allocated before one forward+backward step:
``torch.cuda.max_memory_allocated`` on GPU, the process's resident-set growth on CPU (sampled
in a thread after returning freed heap pages to the system).
"""
from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from fastgnn.tuning import median, time_calls

Forward = Callable[[], torch.Tensor]
MB = 1024.0 * 1024.0
BATCH = 10  # back-to-back calls per timed sample on CUDA
MEM_CUDA = "cuda_max_allocated"
MEM_CPU = "cpu_rss_growth"


@dataclass
class Expected:
    """The oracle's output and gradients of ``inputs`` for the fixed output gradient."""
    output: torch.Tensor
    grads: List[Optional[torch.Tensor]]


class Mismatch(Exception):
    """An implementation's output or gradient differs from the expected one."""


def _oom_types() -> Tuple[type, ...]:
    types = [MemoryError]
    for owner, name in ((torch, "OutOfMemoryError"), (torch.cuda, "OutOfMemoryError")):
        if hasattr(owner, name):
            types.append(getattr(owner, name))
    return tuple(types)


def classify_failure(exc: BaseException) -> Tuple[str, str]:
    """``(status, message)`` for an exception raised by an implementation."""
    message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if isinstance(exc, Mismatch):
        return "mismatch", str(exc)
    if isinstance(exc, _oom_types()) or "out of memory" in str(exc).lower():
        return "oom", message
    return "error", message


def release_memory(device: torch.device, after_oom: bool = False) -> None:
    """Frees unreferenced tensors; after an OOM also returns cached blocks to the driver
    (not otherwise: re-allocating them would slow the next implementation's first runs)."""
    gc.collect()
    if after_oom and device.type == "cuda":
        torch.cuda.empty_cache()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gradients(output: torch.Tensor, inputs: Sequence[torch.Tensor], grad_output: torch.Tensor,
              retain_graph: bool = False) -> List[Optional[torch.Tensor]]:
    return list(torch.autograd.grad(output, list(inputs), grad_output,
                                    retain_graph=retain_graph, allow_unused=True))


def expected_result(forward: Forward, inputs: Sequence[torch.Tensor],
                    grad_output_seed: int = 0) -> Tuple[Expected, torch.Tensor]:
    """Runs the oracle once; returns its result and a fixed random output gradient."""
    output = forward()
    gen = torch.Generator(device=output.device).manual_seed(grad_output_seed)
    grad_output = torch.randn(output.shape, generator=gen, device=output.device,
                              dtype=output.dtype)
    grads = gradients(output, inputs, grad_output)
    detached = [None if g is None else g.detach() for g in grads]
    return Expected(output.detach(), detached), grad_output


def compare(name: str, actual: Optional[torch.Tensor], expected: Optional[torch.Tensor],
            rtol: float, by_norm: bool = False) -> None:
    """Element by element: every error within ``rtol`` times the largest expected magnitude
    (at least 1). ``by_norm``: the relative Frobenius error within ``rtol`` instead."""
    if actual is None or expected is None:
        if (actual is None) != (expected is None):
            raise Mismatch(f"{name}: gradient missing on one side")
        return
    if actual.shape != expected.shape:
        raise Mismatch(f"{name}: shape {list(actual.shape)} != expected {list(expected.shape)}")
    actual, expected = actual.detach().double(), expected.detach().double()
    err = (actual - expected).abs().nan_to_num(nan=float("inf"))
    err = err.masked_fill(actual.isnan() & expected.isnan(), 0)
    if by_norm:
        scale = float(expected.norm()) if expected.numel() else 0.0
        relative = float(err.norm()) / scale if scale > 0 else float(err.norm())
        if not relative <= rtol:
            raise Mismatch(f"{name}: relative error {relative:.3g} > tolerance {rtol:.3g}")
        return
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    tol = rtol * max(scale, 1.0)
    worst = float(err.max()) if err.numel() else 0.0
    if worst > tol:
        raise Mismatch(f"{name}: max abs error {worst:.3g} > tolerance {tol:.3g}")


#: How an implementation's gradients are checked against the oracle's: element by element;
#: by relative norm, where a float32 rounding difference may put a rare edge on the other side
#: of a LeakyReLU kink (GAT's per-node scores: one such edge moves two rows of gradient by
#: O(1), while the whole gradient stays within rounding); or not at all, where the libraries
#: legitimately differ at ties (scatter-style min/max split them among tied sources).
GRAD_CHECKS = ("elementwise", "norm", "none")


def check(forward: Forward, inputs: Sequence[torch.Tensor], grad_output: torch.Tensor,
          expected: Expected, rtol: float, grad_check: str = "elementwise") -> None:
    """Raises :class:`Mismatch` unless the output matches element by element and every input
    gradient matches as ``grad_check`` says (one of :data:`GRAD_CHECKS`)."""
    if grad_check not in GRAD_CHECKS:
        raise ValueError(f"grad_check must be one of {GRAD_CHECKS}, got {grad_check!r}")
    output = forward()
    compare("output", output, expected.output, rtol)
    if grad_check == "none":
        return
    for index, (grad, want) in enumerate(zip(gradients(output, inputs, grad_output),
                                             expected.grads)):
        compare(f"grad[{index}]", grad, want, rtol, by_norm=grad_check == "norm")


def _batch(device: torch.device) -> int:
    """Calls per timed sample: ``BATCH`` on CUDA, one on CPU."""
    return BATCH if device.type == "cuda" else 1


def _time_calls(run: Callable[[], object], count: int, device: torch.device) -> float:
    """Milliseconds per call of ``count`` back-to-back calls of ``run``, the device idle at
    the start. Each result is dropped as soon as the call returns."""
    sync(device)
    return time_calls(run, count, device)


def _time_batches(prepare: Callable[[], Callable[[], object]], device: torch.device,
                  warmup: int, repeats: int) -> float:
    """Median of ``repeats`` samples of :func:`_time_calls`, after ``warmup`` untimed calls.

    ``prepare()`` runs outside the timed region, once per sample and once per warmup call; it
    returns the call to time (the forward itself, or a backward through a fresh graph)."""
    for _ in range(warmup):
        prepare()()
    samples = []
    for _ in range(repeats):
        run = prepare()
        samples.append(_time_calls(run, _batch(device), device))
        del run  # frees the sample's graph before the next forward
    return median(samples)


def time_forward(forward: Forward, device: torch.device, warmup: int, repeats: int) -> float:
    return _time_batches(lambda: forward, device, warmup, repeats)


def time_kernels(fn: Callable[[], object], device: torch.device, warmup: int,
                 repeats: int) -> float:
    """Milliseconds per call of ``fn``'s device work alone, as kernel-time figures report it.

    On CUDA, ``BATCH`` calls are captured as one CUDA graph (after ``warmup`` eager calls on a
    side stream, which also fill ``fn``'s caches) and each sample is one replay, so the host's
    per-call cost never shows. Elsewhere it is :func:`time_forward`."""
    if device.type != "cuda":
        return time_forward(fn, device, warmup, repeats)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(BATCH):
            fn()
    return _time_batches(lambda: graph.replay, device, 1, repeats) / BATCH


def busy_ms(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    """Device busy time per call of ``fn`` over ``calls`` calls. CUDA: the summed duration of
    every kernel, copy and memset that ``torch.profiler`` records (no CUDA graph capture, so
    it also times code that syncs or allocates on the host); CPU: the process's CPU time over
    all threads."""
    sync(device)
    if device.type != "cuda":
        started = time.process_time()
        for _ in range(calls):
            fn()
        return (time.process_time() - started) * 1e3 / calls
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        sync(device)
    cuda = torch.autograd.DeviceType.CUDA
    total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == cuda)
    return total_us / 1e3 / calls


def time_backward(forward: Forward, inputs: Sequence[torch.Tensor], grad_output: torch.Tensor,
                  device: torch.device, warmup: int, repeats: int) -> float:
    def prepare() -> Callable[[], object]:
        output = forward()
        return lambda: gradients(output, inputs, grad_output, retain_graph=True)

    return _time_batches(prepare, device, warmup, repeats)


# ---- memory ------------------------------------------------------------------------------------
def wall_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one synchronised run of ``fn`` by the host clock (what a loop sees)."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - start) * 1e3


def alternating_medians(fns: Dict[str, Callable[[], object]], device: torch.device, rounds: int,
                        warmup: int = 1) -> Dict[str, float]:
    """Median ``wall_ms`` of each function; they take turns, the order reversed every round, so
    that warming caches and clocks favour none of them."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(wall_ms(fns[name], device))
    return {name: median(times) for name, times in samples.items()}


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim_heap() -> None:
    """Returns freed heap pages to the system so the next allocations show up in the RSS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the growth is then a lower bound


class _ResidentPeak(threading.Thread):
    def __init__(self, interval_s: float = 1e-3):
        super().__init__(daemon=True)
        self.interval_s, self.peak, self._done = interval_s, _resident_bytes(), threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self.peak = max(self.peak, _resident_bytes())

    def finish(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, _resident_bytes())


def peak_memory(forward: Forward, inputs: Sequence[torch.Tensor], grad_output: torch.Tensor,
                device: torch.device) -> Tuple[Optional[float], str]:
    """MB allocated above the current level during one forward + backward, and how measured."""
    return peak_growth(lambda: gradients(forward(), inputs, grad_output), device)


def peak_growth(run: Callable[[], object], device: torch.device) -> Tuple[Optional[float], str]:
    """MB allocated above the current level during one ``run()``, and how measured."""
    release_memory(device)
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        run()
        sync(device)
        return (torch.cuda.max_memory_allocated(device) - base) / MB, MEM_CUDA
    if not os.path.exists("/proc/self/statm"):
        return None, "unavailable"
    _trim_heap()
    sampler = _ResidentPeak()
    base = _resident_bytes()
    sampler.start()
    try:
        run()
    finally:
        peak = sampler.finish()
    return max(peak - base, 0) / MB, MEM_CPU
