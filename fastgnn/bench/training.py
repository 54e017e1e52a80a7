"""End-to-end training-step workloads: forward, loss, backward and an Adam step of a 3-layer
PyG model, stock against ``fastgnn.enable``, in float32 and under bfloat16 autocast.

The models: three convolutions of hidden width 256 (attention: 4 heads x 64, concatenated),
ReLU between them, then a linear classifier over ``CLASSES`` random labels; the input is
``[num_nodes, width]`` seeded random features, full batch. Each implementation trains its own
copy of one seeded initialisation. Before timing, its logits are checked against the stock
model's at the same precision. On CUDA a third row replays the enabled model's whole step as a
CUDA graph (:func:`make_graphed_step`), the way to take the host out of small graphs' steps.
With ``Context.compile`` (``scripts/bench.py --compile``) one more row runs the enabled model
under ``torch.compile``; it compiles during the logits check and the warmup.

A row reports, per step: ``wall_ms`` (timed as :mod:`fastgnn.bench.measure` times calls:
median of samples, a sample being ``BATCH`` back-to-back steps on CUDA, one step on CPU),
``busy_ms`` (CUDA: the summed duration of the device's kernels, copies and memsets over the
``repeats`` profiled steps, by ``torch.profiler``; CPU: the process's CPU time over all threads, by
``time.process_time``, so on n threads it can reach n times the wall time) and ``peak_mb``
(growth of allocated memory during one step, as for the other workloads).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch

import fastgnn
from fastgnn.bench import measure
from fastgnn.bench.workloads import BASELINE, FASTGNN, Context, register

HIDDEN, HEADS, CLASSES, LAYERS = 256, 4, 16, 3
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}  # name: autocast dtype (None: off)
# Logits of fastgnn and stock agree within this fraction of their largest magnitude.
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2}
BUSY_CUDA, BUSY_CPU = "cuda_kernel_time", "cpu_process_time"


class StepModel(torch.nn.Module):
    """``LAYERS`` convolutions with ReLU between them and a linear classifier."""

    def __init__(self, convs: List[torch.nn.Module]):
        super().__init__()
        self.convs = torch.nn.ModuleList(convs)
        self.classifier = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = torch.relu(conv(x, edge_index))
        return self.classifier(x)


def _convs(name: str, width: int) -> List[torch.nn.Module]:
    from torch_geometric import nn
    dims = [width] + [HIDDEN] * LAYERS
    pairs = list(zip(dims[:-1], dims[1:]))
    if name == "gcn":
        return [nn.GCNConv(i, o) for i, o in pairs]
    if name == "sage-max":
        return [nn.SAGEConv(i, o, aggr="max") for i, o in pairs]
    if name == "gatv2":
        return [nn.GATv2Conv(i, o // HEADS, heads=HEADS) for i, o in pairs]
    if name == "gt":
        return [nn.TransformerConv(i, o // HEADS, heads=HEADS) for i, o in pairs]
    raise KeyError(name)


MODELS = ("gcn", "sage-max", "gatv2", "gt")


@dataclass
class StepImplementation:
    name: str
    kind: str
    model: Optional[torch.nn.Module] = None
    skip: Optional[str] = None
    cuda_graph: bool = False  # the whole step captured as a CUDA graph (make_graphed_step)
    compiled: bool = False  # the model wrapped in torch.compile (default mode)


@dataclass
class StepCase:
    """One model on one graph: the inputs and the stock and enabled implementations."""
    x: torch.Tensor
    edge_index: torch.Tensor
    labels: torch.Tensor
    implementations: List[StepImplementation]


def build(ctx: Context, model: str) -> StepCase:
    """The step case of ``model`` on ``ctx``'s graph (ImportError without PyG)."""
    g = ctx.graph
    torch.manual_seed(ctx.seed)
    stock = StepModel(_convs(model, ctx.width)).to(ctx.device)
    x = ctx.features(g.num_src_nodes, ctx.width).detach()
    gen = torch.Generator().manual_seed(ctx.seed)
    labels = torch.randint(CLASSES, (g.num_dst_nodes,), generator=gen).to(ctx.device)
    impls = [StepImplementation("pyg-stock", BASELINE, stock)]
    if g.is_bipartite:
        reason = "full-graph training steps take square graphs"
        impls = [StepImplementation("pyg-stock", BASELINE, skip=reason),
                 StepImplementation("pyg+fastgnn.enable", FASTGNN, skip=reason)]
    else:
        fast = fastgnn.enable(copy.deepcopy(stock))
        impls.append(StepImplementation("pyg+fastgnn.enable", FASTGNN, fast))
        if ctx.device.type == "cuda":
            impls.append(StepImplementation("pyg+fastgnn.enable+cuda-graph", FASTGNN, fast,
                                            cuda_graph=True))
        if ctx.compile:
            impls.append(StepImplementation("pyg+fastgnn.enable+torch.compile", FASTGNN, fast,
                                            compiled=True))
    return StepCase(x, ctx.edge_index, labels, impls)


def _autocast(device: torch.device, precision: str, cache_enabled: bool = True):
    dtype = PRECISIONS[precision]
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None,
                          cache_enabled=cache_enabled)


def make_step(model: torch.nn.Module, case: StepCase, device: torch.device,
              precision: str) -> Callable[[], None]:
    """One training step of ``model`` (its own Adam optimizer)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with _autocast(device, precision):
            loss = loss_fn(model(case.x, case.edge_index).float(), case.labels)
        loss.backward()
        optimizer.step()
    return step


def make_graphed_step(model: torch.nn.Module, case: StepCase, device: torch.device,
                      precision: str) -> Callable[[], None]:
    """One training step of ``model`` captured whole (forward, backward, Adam) as a CUDA graph
    and replayed: the host launches one graph instead of every kernel. The inputs are static
    (the same tensors every step), Adam runs with ``capturable=True``, and the steps before
    the capture, on a side stream, run the tuning and fill the per-graph caches."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        with _autocast(device, precision, cache_enabled=False):  # no cast cache when captured
            loss = loss_fn(model(case.x, case.edge_index).float(), case.labels)
        loss.backward()
        optimizer.step()

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the gradients
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def _logits(model: torch.nn.Module, case: StepCase, device: torch.device,
            precision: str) -> torch.Tensor:
    with torch.no_grad(), _autocast(device, precision):
        return model(case.x, case.edge_index).float()


def measure_step(impl: StepImplementation, case: StepCase, expected: Optional[torch.Tensor],
                 device: torch.device, precision: str, warmup: int,
                 repeats: int) -> Dict[str, object]:
    """Checks, then times one implementation at one precision; returns its row fields."""
    fields: Dict[str, object] = {"precision": precision}
    try:
        # A fresh copy per precision: every row starts from the same parameters.
        model = copy.deepcopy(impl.model)
        if impl.compiled:  # compiled during the check and the warmup, not the timed steps
            model = torch.compile(model)
        if expected is not None:
            measure.compare("logits", _logits(model, case, device, precision), expected,
                            TOLERANCE[precision])
            fields["check"] = f"logits match pyg-stock ({precision})"
        make = make_graphed_step if impl.cuda_graph else make_step
        step = make(model, case, device, precision)
        fields["wall_ms"] = measure.time_forward(step, device, max(warmup, 1), repeats)
        fields["busy_ms"] = measure.busy_ms(step, device, max(repeats, 1))
        fields["busy_kind"] = BUSY_CUDA if device.type == "cuda" else BUSY_CPU
        if impl.cuda_graph:  # a replay allocates in the graph's pool, out of sight
            fields["peak_mb"] = None
        else:
            fields["peak_mb"], fields["mem_kind"] = measure.peak_growth(step, device)
        fields["status"] = "ok"
    except Exception as exc:  # noqa: BLE001  (every failure is a result)
        fields["status"], fields["error"] = measure.classify_failure(exc)
        if fields["status"] == "mismatch":
            fields["check"] = f"differs from pyg-stock ({precision})"
    measure.release_memory(device, after_oom=fields["status"] == "oom")
    return fields


def run_case(case: StepCase, device: torch.device, warmup: int, repeats: int,
             emit: Callable[..., None]) -> None:
    """Rows of every implementation at every precision."""
    stock = case.implementations[0]
    for precision in PRECISIONS:
        expected = None
        if stock.skip is None:
            try:
                expected = _logits(stock.model, case, device, precision)
            except Exception:  # noqa: BLE001  (the stock row records the failure)
                expected = None
        for impl in case.implementations:
            if impl.skip is not None:
                emit(implementation=impl.name, kind=impl.kind, precision=precision,
                     status="skipped", error=impl.skip)
                continue
            oracle = None if impl is stock else expected
            emit(implementation=impl.name, kind=impl.kind, backend=(
                "torch_geometric" if impl is stock else "fastgnn.enable"),
                **measure_step(impl, case, oracle, device, precision, warmup, repeats))


for _model in MODELS:
    register(f"train-{_model}", "step")(lambda ctx, model=_model: build(ctx, model))
