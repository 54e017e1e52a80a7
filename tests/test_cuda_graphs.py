"""A whole training step of an enabled model (forward, backward, Adam) captured as a CUDA
graph and replayed gives the eager steps' losses (gpu)."""
from __future__ import annotations

import copy

import pytest
import torch

import fastgnn
from conftest import deterministic_algorithms, random_graph

pytest.importorskip("torch_geometric")
from fastgnn.bench import training  # noqa: E402


def _case(model_name: str):
    _, edge_index = random_graph(300, 2000, seed=5)
    torch.manual_seed(0)
    model = training.StepModel(training._convs(model_name, 32)).cuda()
    gen = torch.Generator().manual_seed(0)
    case = training.StepCase(torch.randn(300, 32, generator=gen).cuda(), edge_index.cuda(),
                             torch.randint(training.CLASSES, (300,), generator=gen).cuda(), [])
    return fastgnn.enable(model), case


@pytest.fixture
def deterministic():
    with deterministic_algorithms():
        yield


def _loss(model, case, device, precision) -> float:
    logits = training._logits(model, case, device, precision)
    return float(torch.nn.functional.cross_entropy(logits, case.labels))


@pytest.mark.gpu
@pytest.mark.parametrize("model_name", training.MODELS)
@pytest.mark.parametrize("precision", list(training.PRECISIONS))
def test_graphed_step_trains_like_eager(model_name, precision, deterministic):
    """The replayed steps train as the eager ones do: after the same number of steps both
    models reach the same loss, well apart from the start. (Parameters are not compared one by
    one: Adam turns rounding-level differences in near-zero gradients, here between capturable
    and plain Adam, into steps of about lr.) A replay that updated nothing would leave the
    graphed model three steps behind."""
    model, case = _case(model_name)
    device = torch.device("cuda")
    initial = _loss(model, case, device, precision)
    eager_model, graphed_model = copy.deepcopy(model), copy.deepcopy(model)
    eager = training.make_step(eager_model, case, device, precision)
    # the graphed model takes 3 warm-up steps before its capture: the eager one takes them too
    for _ in range(3):
        eager()
    graphed = training.make_graphed_step(graphed_model, case, device, precision)
    for _ in range(3):
        eager()
        graphed()
    torch.cuda.synchronize()
    eager_loss = _loss(eager_model, case, device, precision)
    graphed_loss = _loss(graphed_model, case, device, precision)
    progress = initial - eager_loss
    assert progress > 0
    assert abs(graphed_loss - eager_loss) <= 0.05 * progress, (initial, eager_loss, graphed_loss)
