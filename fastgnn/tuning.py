"""Timed choice of launch parameters, shared by every kernel.

``choose(op, graph, width, dtype, device, candidates, default)`` times each candidate once per
key (op, graph signature, feature width, dtype, device name), keeps the fastest (a candidate
other than the default must win a second race against it) in memory and,
unless disabled, in a JSON file under the cache directory. ``FASTGNN_TUNE=0`` always returns
the default; ``FASTGNN_TUNE_CACHE=0`` keeps choices in memory only; ``FASTGNN_CACHE_DIR``
moves the file (default ``~/.cache/fastgnn``). No tuning happens while ``torch.compile``
traces or a CUDA graph is being captured: the cached choice, or the default, is used.

Graph signatures are exact (sizes and degree shape) for the first ``EXACT_STRUCTURES``
structures of one size class (sizes rounded up to powers of two) timed per (op, width, dtype,
device) in a process; later new structures of that class, and mini-batch graphs from the start
(``Graph.tuned_by_size``), are keyed by the class, so that a loader's stream of batches is not
timed batch by batch.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable, Dict, Mapping, Optional, Union

import torch

from fastgnn import _library

_memory: Dict[str, str] = {}
_loaded_disk = False
_lock = threading.Lock()
WARMUP, REPEATS = 2, 7
# Calls per CUDA sample, back to back: a training loop's steady state, where the host launches
# ahead of the GPU. One call alone would also time the host's launch work, which on a slow
# host favours single-launch kernels over faster multi-launch ones.
BATCH = 5
_TUNED = "tuned choices"  # the Graph.cached key of a graph's {(op, width, dtype, device): name}


def enabled() -> bool:
    return os.environ.get("FASTGNN_TUNE", "1") != "0"


def cache_path() -> Optional[str]:
    if os.environ.get("FASTGNN_TUNE_CACHE", "1") == "0":
        return None
    root = os.environ.get("FASTGNN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "fastgnn")
    return os.path.join(root, "tuning.json")


def _load_disk() -> None:
    global _loaded_disk
    _loaded_disk = True
    path = cache_path()
    if path and os.path.exists(path):
        try:
            with open(path) as f:
                stored = json.load(f)
            _memory.update({k: v for k, v in stored.items() if k not in _memory})
        except (OSError, ValueError):
            pass  # a damaged cache only costs a re-tune


def _store_disk() -> None:
    path = cache_path()
    if not path:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(_memory, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # read-only home: keep the choice in memory


def device_name(device: torch.device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(" ", "_")
    return f"cpu{torch.get_num_threads()}"


#: Structures of one size class timed one by one per (op, width, dtype, device) before further
#: new ones of that class are keyed by the class instead: a stream of new graphs of about the
#: same size (mini-batches from a loader fastgnn does not see, such as PyG's own NeighborLoader)
#: would otherwise time the candidates again for every batch, while different graphs (or one
#: graph in a few node orders) rarely share a class. fastgnn's sampled batches and DGL's blocks
#: are keyed by size from the start.
EXACT_STRUCTURES = 16
_raced: Dict[tuple, int] = {}  # (op, width, dtype, device, size classes) -> structures


def keyed_by_size(op: str, graph, width: int, dtype: torch.dtype, device) -> bool:
    """Whether the choices for ``graph`` go by its size class: a mini-batch's graph
    (``Graph.tuned_by_size``) from the start, any other new structure once ``EXACT_STRUCTURES``
    of its class were timed one by one. Such graphs come in a stream, each serving a step or a
    few, so a candidate that prepares something per graph (a work list read back from the
    GPU) pays for it every time, which timing the candidates alone does not show."""
    return _by_size(graph, (op, width, dtype, torch.device(device), graph.size_classes()))


def _by_size(graph, kind: tuple) -> bool:
    return graph.tuned_by_size or _raced.get(kind, 0) >= EXACT_STRUCTURES


def make_key(op: str, graph, width: int, dtype: torch.dtype, device,
             by_size: bool = False) -> str:
    signature = ("size",) + graph.size_classes() if by_size else graph.signature()
    signature = "x".join(str(v) for v in signature)
    return f"{op}|{signature}|{width}|{str(dtype).replace('torch.', '')}|{device_name(device)}"


def can_time(device) -> bool:
    """False while torch.compile traces or a CUDA graph is captured: no timing then."""
    return not _library.is_recording(device)


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one run of ``fn`` (device time on CUDA)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def time_calls(fn: Callable[[], object], calls: int, device: torch.device) -> float:
    """Milliseconds per call of ``calls`` back-to-back calls of ``fn`` (see time_once)."""
    def run() -> None:
        for _ in range(calls):
            fn()
    return time_once(run, device) / calls


def measure(fn: Callable[[], object], device: torch.device, warmup: int = WARMUP,
            repeats: int = REPEATS) -> float:
    """Median milliseconds of ``fn`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    return median([time_once(fn, device) for _ in range(repeats)])


def median(times) -> float:
    """The middle value (the upper one of an even count)."""
    return sorted(times)[len(times) // 2]


def _race(candidates: Mapping[str, Callable[[], object]], device: torch.device) -> Dict[str, float]:
    """Median milliseconds of each candidate that can run this shape. The candidates take
    turns run by run, so clocks ramping up or caches warming favour none of them."""
    runnable = {}
    for name, fn in candidates.items():
        try:
            for _ in range(WARMUP):
                fn()
        except (RuntimeError, ValueError):
            continue  # a candidate that cannot run this shape is simply not chosen
        runnable[name] = fn
    calls = BATCH if device.type == "cuda" else 1
    samples = {name: [] for name in runnable}
    for _ in range(REPEATS):
        for name, fn in runnable.items():
            samples[name].append(time_calls(fn, calls, device))
    return {name: median(times) for name, times in samples.items()}


def choose(op: str, graph, width: int, dtype: torch.dtype, device,
           candidates: Union[Mapping[str, Callable[[], object]],
                             Callable[[], Mapping[str, Callable[[], object]]]],
           default: str, penalties: Optional[Mapping[str, float]] = None) -> str:
    """The name of the fastest candidate for this key (timed on first use).

    ``candidates`` maps names to runs, or is a function returning that mapping, built only
    when a choice must be made. ``penalties`` adds milliseconds per call to a candidate's time
    (a one-off cost spread over the calls expected); it is read after ``candidates()`` runs,
    which may fill it in. The choice is remembered on ``graph``, so every later call for the
    same (op, width, dtype, device) is one lookup.
    """
    device = torch.device(device)

    def decide() -> str:
        return _decide(op, graph, width, dtype, device,
                       candidates() if callable(candidates) else candidates, default,
                       penalties or {})

    memo = graph.cached(_TUNED, dict)
    key = (op, width, dtype, device)
    choice = memo.get(key)
    if choice is None:
        choice = decide()
        if can_time(device):  # a fallback default must not be remembered
            memo[key] = choice
    return choice


def choices(graph) -> Dict[str, str]:
    """The choices made on ``graph`` so far, as ``"op/width/dtype": choice`` (bench rows)."""
    return {f"{op}/{width}/{str(dtype).replace('torch.', '')}": choice
            for (op, width, dtype, _), choice in graph.cached(_TUNED, dict).items()}


def _decide(op: str, graph, width: int, dtype: torch.dtype, device: torch.device,
            candidates: Mapping[str, Callable[[], object]], default: str,
            penalties: Mapping[str, float]) -> str:
    if default not in candidates:
        raise ValueError(f"default {default!r} is not among the candidates {list(candidates)}")
    if not enabled() or len(candidates) == 1:
        return default
    kind = (op, width, dtype, device, graph.size_classes())  # counted per process
    by_size = _by_size(graph, kind)
    # a mini-batch's own signature is already its size class (and kind)
    key = make_key(op, graph, width, dtype, device, by_size=by_size and not graph.tuned_by_size)
    with _lock:
        if not _loaded_disk:
            _load_disk()
        cached = _memory.get(key)
    if cached in candidates:
        return cached
    if not can_time(device):
        return default
    if not by_size:
        _raced[kind] = _raced.get(kind, 0) + 1
    best = _fastest(_race(candidates, device), penalties, default)
    if best != default:
        # Leaving the default takes a second win against it: a race disturbed once (another
        # process on the GPU, a clock change) then keeps the default instead of a slower pick.
        rematch = _race({best: candidates[best], default: candidates[default]}, device)
        if default in rematch:
            best = _fastest(rematch, penalties, default)
    with _lock:
        _memory[key] = best
        _store_disk()
    return best


def _fastest(timings: Mapping[str, float], penalties: Mapping[str, float], default: str) -> str:
    if not timings:
        return default
    return min(timings, key=lambda name: timings[name] + penalties.get(name, 0.0))


def clear(memory: bool = True, disk: bool = False) -> None:
    """Forgets tuned choices (for tests and after hardware changes)."""
    global _loaded_disk
    with _lock:
        if memory:
            _memory.clear()
            _raced.clear()
            _loaded_disk = False
        path = cache_path()
        if disk and path and os.path.exists(path):
            os.remove(path)
