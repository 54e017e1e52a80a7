"""A whole training step of an enabled model (forward, backward, Adam) captured as a CUDA
graph and replayed gives the eager steps' losses (gpu)."""
from __future__ import annotations

import copy

import pytest
import torch

import fastgnn
from conftest import random_graph

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
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(previous)


@pytest.mark.gpu
@pytest.mark.parametrize("model_name", training.MODELS)
@pytest.mark.parametrize("precision", list(training.PRECISIONS))
def test_graphed_step_trains_like_eager(model_name, precision, deterministic):
    """Deterministic kernels, so the two runs differ only by Adam's capturable arithmetic:
    a replay that did not update the parameters would be off by about lr per step."""
    model, case = _case(model_name)
    device = torch.device("cuda")
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
    tol = 1e-5
    for (name, a), b in zip(eager_model.named_parameters(), graphed_model.parameters()):
        scale = max(float(a.abs().max()), 1.0)
        assert float((a - b).abs().max()) <= tol * scale, name
