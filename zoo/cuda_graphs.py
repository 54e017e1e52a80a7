"""CUDA-graph replay of the zoo's full-batch steps.

On small graphs a full-batch step is host-bound: the GPU waits while Python and the dispatcher
launch a few hundred kernels. A step captured once as a CUDA graph is then replayed with one
launch. Capture needs the step to read the same tensors every time (full-batch training on
data that stays on the device) and to never synchronise with the host; an op that does (PyG's
self-loop handling in GCNConv/GATv2Conv syncs on a boolean mask) is caught by a warm-up run
that makes synchronising ops raise, and the stage then runs eagerly with a one-time warning.

A stage runs ``warmup`` calls eagerly first (fastgnn's tuner and per-graph caches settle
there), then captures. Before every replay the graph's inputs and the model's parameters are
checked: another or an in-place-modified input tensor, or a parameter whose storage was
replaced, drops the graph and the stage warms up and captures again; after ``MAX_CAPTURES``
captures of one stage it runs eagerly for good (its inputs change between steps).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from lightning.pytorch.utilities import rank_zero_warn

Outputs = Tuple[torch.Tensor, ...]
MAX_CAPTURES = 3


def _version(t: torch.Tensor) -> int:
    """In-place change counter; inference tensors have none (and cannot be changed)."""
    return -1 if t.is_inference() else t._version


class _Guard:
    """What a captured graph reads and writes outside its own memory: the input tensors (same
    object, no in-place change since capture), the parameters (same storage) and, for a step
    with a backward, their gradients (still the graph's: anyone who drops or replaces them
    would leave the optimizer without the replay's). Holding the parameters keeps their memory
    alive, so an equal pointer means the same storage, never a recycled one."""

    def __init__(self, inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
                 backward: bool):
        self._inputs = [(t, _version(t)) for t in inputs]
        self._params = [(p, p.detach()) for p in params]
        self._grads = [p.grad for p in params] if backward else None

    def holds(self, inputs: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> bool:
        return (len(inputs) == len(self._inputs) and len(params) == len(self._params)
                and all(t is held and _version(t) == version
                        for t, (held, version) in zip(inputs, self._inputs))
                and all(p is held and p.data_ptr() == storage.data_ptr()
                        for p, (held, storage) in zip(params, self._params))
                and (self._grads is None
                     or all(p.grad is grad for p, grad in zip(params, self._grads))))


class _Captured:
    """A graph, the step it replays (whose closure holds tensors the graph reads, such as mask
    indices) and its static outputs."""

    def __init__(self, graph: torch.cuda.CUDAGraph, step: Callable[[], Outputs],
                 outputs: Outputs, guard: _Guard):
        self.graph, self.step, self.outputs, self.guard = graph, step, outputs, guard


@contextlib.contextmanager
def _syncs_raise():
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def _release_generator() -> None:
    """A capture that failed leaves the default CUDA generator in capture mode (torch does not
    unwind it), and every later random draw then raises. Its seed and offset move to a fresh
    state object that is not capturing."""
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    fresh = torch.Generator(device="cuda")
    fresh.set_state(generator.get_state())
    generator.graphsafe_set_state(fresh.graphsafe_get_state())


def _drop_grads(params: Sequence[torch.Tensor]) -> None:
    for p in params:
        p.grad = None


def _capture(step: Callable[[], Outputs], params: Sequence[torch.Tensor]) -> Tuple[
        torch.cuda.CUDAGraph, Outputs]:
    """Runs ``step`` once on a side stream, with host syncs raising (a step that syncs cannot
    be captured; the stream's library handles and workspaces are created outside the capture),
    then captures it there. For a step with a backward (``params`` given), the gradients of
    the warm-up run are dropped first, so the captured backward allocates them and every
    replay rewrites them."""
    current = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(current)
    graph = torch.cuda.CUDAGraph()
    # Lightning's bf16 autocast caches weight casts; a captured cast must run on every replay.
    try:
        with torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"),
                            enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False):
            with torch.cuda.stream(side), _syncs_raise():
                step()
            _drop_grads(params)
            try:
                with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                    outputs = step()
            except Exception:
                _release_generator()
                raise
    finally:
        current.wait_stream(side)
    return graph, outputs


class StepGraphs:
    """Per-stage captured steps. ``run`` returns the outputs of this call's replay, or None when
    the caller must run the step eagerly (warm-up, or capture impossible)."""

    def __init__(self, warmup: int = 3):
        self.warmup = warmup
        self._captured: Dict[str, _Captured] = {}
        self._eager_calls: Dict[str, int] = {}
        self._captures: Dict[str, int] = {}
        self._failed: Dict[str, str] = {}

    def release(self) -> None:
        """Drops every captured graph and its memory (the end of a fit or test: Lightning then
        moves the model off the GPU); the next calls warm up and capture again."""
        self._captured.clear()
        self._eager_calls.clear()
        self._captures.clear()

    def failure(self, stage: str) -> Optional[str]:
        """Why ``stage`` runs eagerly for good, or None."""
        return self._failed.get(stage)

    def replaying(self, stage: str) -> bool:
        return stage in self._captured

    def run(self, stage: str, make_step: Callable[[], Callable[[], Outputs]],
            inputs: Sequence[torch.Tensor], params: List[torch.Tensor],
            backward: bool) -> Optional[Outputs]:
        """``make_step()`` gives the step to capture; it is built only when capturing, so it
        may precompute what the graph must not (mask indices: a sync). ``backward``: the step
        computes the gradients of ``params`` (a forward-only step leaves them alone: they may
        be another graph's)."""
        if stage in self._failed:
            return None
        captured = self._captured.get(stage)
        if captured is not None and not captured.guard.holds(inputs, params):
            del self._captured[stage]  # another graph or data: warm up and capture again
            self._eager_calls[stage] = 0
            captured = None
        if captured is None:
            calls = self._eager_calls.get(stage, 0)
            if calls < self.warmup:
                self._eager_calls[stage] = calls + 1
                return None
            if self._captures.get(stage, 0) == MAX_CAPTURES:
                return self._give_up(stage, f"its inputs changed after {MAX_CAPTURES} captures")
            self._captures[stage] = self._captures.get(stage, 0) + 1
            step = make_step()
            try:
                graph, outputs = _capture(step, params if backward else ())
            except Exception as exc:  # noqa: BLE001  (any op that cannot be captured)
                if backward:
                    _drop_grads(params)
                text = str(exc).strip()
                return self._give_up(stage, f"{type(exc).__name__}: "
                                            f"{text.splitlines()[0] if text else repr(exc)}")
            captured = self._captured[stage] = _Captured(graph, step, outputs,
                                                         _Guard(inputs, params, backward))
        captured.graph.replay()
        return captured.outputs

    def _give_up(self, stage: str, reason: str) -> None:
        self._failed[stage] = reason
        rank_zero_warn(f"cuda_graph: the {stage} step is not replayed as a CUDA graph ({reason});"
                       " it runs eagerly.")
