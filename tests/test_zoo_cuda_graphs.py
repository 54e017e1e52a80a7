"""The zoo's ``cuda_graph`` option: full-batch steps replayed as CUDA graphs give the eager
results, fall back (with one warning) where capture is impossible, and re-capture when their
inputs change."""
import warnings

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")

import torch  # noqa: E402
import lightning.pytorch as pl  # noqa: E402
from zoo_helpers import quiet_trainer, tiny_csbm  # noqa: E402

from fastgnn.zoo import cuda_graphs  # noqa: E402
from fastgnn.zoo.cuda_graphs import StepGraphs  # noqa: E402
from fastgnn.zoo.module import NodePropertyModule  # noqa: E402

gpu = pytest.mark.gpu


class _Replaying(pl.Callback):
    """Which stages replay a graph when training ends."""

    def on_train_end(self, trainer, module):
        graphs = module._graphs
        self.stages = [s for s in ("train", "eval") if graphs is not None and graphs.replaying(s)]


def _fit(arch, backend, cuda_graph, device="cpu", epochs=6, **options):
    data, replaying = tiny_csbm(), _Replaying()
    pl.seed_everything(0, verbose=False)
    module = NodePropertyModule(arch, backend, num_features=data.num_features,
                                num_outputs=data.num_outputs, task=data.task,
                                cuda_graph=cuda_graph, hidden_channels=16, **options)
    trainer = quiet_trainer(epochs, device, callbacks=[replaying])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, data)
        metrics = trainer.test(module, data, verbose=False)[0]
    module.replayed = replaying.stages
    graph_warnings = [str(w.message) for w in caught if "cuda_graph" in str(w.message)]
    return module, metrics, graph_warnings


def test_option_is_checked():
    with pytest.raises(TypeError, match="cuda_graph must be a bool"):
        NodePropertyModule("gcn", cuda_graph="yes")
    with pytest.raises(ValueError, match="cuda_graph and compile cannot both be set"):
        NodePropertyModule("gcn", cuda_graph=True, compile=True)


def test_on_cpu_it_warns_once_and_trains_as_without_it():
    """Manual optimization (the option's) steps exactly as Lightning's automatic one."""
    plain, plain_metrics, none = _fit("sage", "fastgnn", False)
    graphed, graphed_metrics, warned = _fit("sage", "fastgnn", True)
    assert none == []
    assert warned == ["cuda_graph is ignored: it needs a CUDA device, not cpu; steps run "
                      "eagerly."]
    assert graphed_metrics == plain_metrics
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(graphed.state_dict()[key], value, rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("arch, backend", [("gcn", "fastgnn"), ("sage", "pyg"),
                                           ("sage", "fastgnn"), ("gatv2", "fastgnn"),
                                           ("gt", "fastgnn"), ("maxk-sage", "fastgnn")])
def test_replay_matches_eager(arch, backend):
    options = {"dropout": 0.0, **({"k": 4} if arch.startswith("maxk") else {})}
    plain, plain_metrics, _ = _fit(arch, backend, False, "cuda", epochs=8, **options)
    graphed, graphed_metrics, warned = _fit(arch, backend, True, "cuda", epochs=8, **options)
    assert warned == []
    # (the graphed run's Adam is the fused one: equal up to rounding)
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(graphed.state_dict()[key].cpu(), value.cpu(), rtol=1e-3,
                                   atol=1e-4)
    for name, value in plain_metrics.items():
        assert graphed_metrics[name] == pytest.approx(value, rel=1e-3, abs=1e-4), name
    assert graphed.replayed == ["train", "eval"]
    assert not graphed._graphs.replaying("train")  # released at the end of the stage


@gpu
def test_a_step_that_syncs_runs_eagerly_with_one_warning():
    """Stock GCNConv adds self-loops through a boolean mask: a host sync, so no capture."""
    module, metrics, warned = _fit("gcn", "pyg", True, "cuda")
    assert len(warned) == 2  # the train and the eval step, once each
    assert all("not replayed as a CUDA graph" in w for w in warned)
    assert module._graphs.failure("train") and module._graphs.failure("eval")
    assert torch.isfinite(torch.tensor(metrics["test_loss"]))


@gpu
def test_bf16_mixed_replays():
    data = tiny_csbm()
    module = NodePropertyModule("sage", "fastgnn", num_features=data.num_features,
                                num_outputs=data.num_outputs, hidden_channels=16,
                                cuda_graph=True)
    replaying = _Replaying()
    trainer = quiet_trainer(max_epochs=6, device="cuda", precision="bf16-mixed",
                            callbacks=[replaying])
    trainer.fit(module, data)
    assert replaying.stages == ["train", "eval"]
    assert torch.isfinite(torch.tensor(trainer.test(module, data, verbose=False)[0]["test_loss"]))


@gpu
def test_mini_batches_run_eagerly_with_one_warning():
    data = tiny_csbm(batch_size=16, fanouts=[3, 3])
    module = NodePropertyModule("sage", "fastgnn", num_features=data.num_features,
                                num_outputs=data.num_outputs, hidden_channels=16,
                                cuda_graph=True)
    with pytest.warns(UserWarning, match="it needs full-batch training"):
        quiet_trainer(max_epochs=2, device="cuda").fit(module, data)
    assert not module._graphs.replaying("train")


def _dropout_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).cuda()


@gpu
def test_dropout_draws_a_new_mask_every_replay():
    model, graphs = _dropout_model(), StepGraphs(warmup=1)
    x = torch.randn(64, 8, device="cuda")
    params = list(model.parameters())
    outputs = [graphs.run("train", lambda: lambda: (model(x),), [x], params, backward=False)
               for _ in range(4)]
    assert outputs[0] is None  # warm-up
    first = outputs[1][0].clone()
    second = graphs.run("train", lambda: None, [x], params, backward=False)[0]
    assert not torch.equal(first, second)


@gpu
def test_an_input_changed_in_place_is_captured_again(recwarn):
    linear, graphs = torch.nn.Linear(8, 8).cuda(), StepGraphs(warmup=1)
    x = torch.randn(64, 8, device="cuda")
    params = list(linear.parameters())

    def run():
        return graphs.run("eval", lambda: lambda: (linear(x),), [x], params, backward=False)

    assert run() is None
    torch.testing.assert_close(run()[0], linear(x))
    x.add_(1.0)  # the graph read x's memory, but caches derived from it would be stale
    assert run() is None  # dropped: warm-up again
    torch.testing.assert_close(run()[0], linear(x))
    for _ in range(cuda_graphs.MAX_CAPTURES):
        x.add_(1.0)
        run(), run()
    assert "its inputs changed" in graphs.failure("eval")
    assert any("its inputs changed" in str(w.message) for w in recwarn)


@gpu
def test_random_numbers_work_after_a_failed_capture():
    """A capture that fails past the warm-up left torch's CUDA generator in capture mode, and
    every later dropout raised; StepGraphs puts it back."""
    x, calls = torch.randn(64, device="cuda"), []

    def step():
        calls.append(len(calls))
        out = torch.nn.functional.dropout(x, 0.5)
        if len(calls) == 2:  # the capture itself, not the warm-up run
            torch.cuda.synchronize()
        return (out,)

    graphs = StepGraphs(warmup=0)
    with pytest.warns(UserWarning, match="not replayed as a CUDA graph"):
        assert graphs.run("train", lambda: step, [x], [], backward=False) is None
    assert len(calls) == 2
    assert torch.nn.functional.dropout(x, 0.5).isfinite().all()


@gpu
def test_gradients_dropped_by_someone_else_are_captured_again():
    """Lightning drops gradients between stages; a replay would then feed the optimizer none."""
    linear, graphs = torch.nn.Linear(8, 1).cuda(), StepGraphs(warmup=1)
    x = torch.randn(64, 8, device="cuda")
    params = list(linear.parameters())

    def step():
        linear(x).sum().backward()
        return ()

    def run():
        return graphs.run("train", lambda: step, [x], params, backward=True)

    assert run() is None
    linear.zero_grad()
    assert run() is not None
    expected = [p.grad.clone() for p in params]
    assert run() is not None  # the replay rewrites the same gradient tensors
    for p, grad in zip(params, expected):
        torch.testing.assert_close(p.grad, grad)
    linear.zero_grad(set_to_none=True)
    assert run() is None  # warm-up again, then a new capture
    assert run() is not None and all(p.grad is not None for p in params)
