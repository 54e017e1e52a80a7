"""Zoo data modules with mini-batches (fastgnn's neighbour sampler) for every zoo model and
backend, with reordering, and under Lightning DDP on two CPU processes (gloo)."""
from __future__ import annotations

import collections
import glob
import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from zoo_helpers import ARCH_OPTIONS, fit_test, quiet_trainer, tiny_csbm  # noqa: E402

from fastgnn.zoo.models import MODELS  # noqa: E402
from fastgnn.zoo.module import BACKENDS, NodePropertyModule  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("arch", list(MODELS))
def test_minibatch_training_scores_every_seed(arch, backend, monkeypatch):
    # Every architecture trains on sampled subgraphs (issue 18): a step scores its batch's
    # seeds only (the first batch_size nodes), so an epoch scores each node of its split once.
    scored = collections.Counter()
    record = NodePropertyModule._record

    def counting_record(self, stage, loss, out, y):
        scored[stage] += out.shape[0]
        record(self, stage, loss, out, y)

    monkeypatch.setattr(NodePropertyModule, "_record", counting_record)
    data = tiny_csbm(num_nodes=300, batch_size=32, fanouts=[5, 5])
    epochs = 2
    module, metrics = fit_test(data, arch, backend, max_epochs=epochs, **ARCH_OPTIONS[arch])
    assert scored["train"] == epochs * int(data.data.train_mask.sum())
    assert scored["test"] == int(data.data.test_mask.sum())
    assert 0.0 <= metrics["test_acc"] <= 1.0 and math.isfinite(metrics["test_loss"])
    predictions = quiet_trainer(1).predict(module, data)
    nodes = torch.cat([p["node"] for p in predictions])
    assert torch.equal(torch.sort(nodes).values, torch.arange(300))
    probs = torch.cat([p["pred"] for p in predictions])
    assert probs.shape == (300, data.num_outputs)
    torch.testing.assert_close(probs.sum(-1), torch.ones(300))


@pytest.mark.parametrize("arch", ["gcn", "maxk-gcn"])
def test_cached_normalisation_refuses_mini_batches(arch):
    # cached=True keeps the first graph's normalised adjacency, which every later subgraph
    # would reuse: without the check, the second batch fails deep inside the conv.
    data = tiny_csbm(num_nodes=100, batch_size=16, fanouts=[3, 3])
    with pytest.raises(ValueError, match="cached=True applies to full-batch training"):
        fit_test(data, arch, "fastgnn", max_epochs=1, cached=True,
                 **ARCH_OPTIONS[arch])


@pytest.mark.parametrize("arch,options,edge_dim", [
    ("sage", {}, None),
    # edge features, gathered for each batch by its sampled edge ids
    ("gt", {"heads": 2, "hidden_channels": 8}, 3),
])
def test_full_neighbourhood_batches_equal_full_batch_inference(arch, options, edge_dim):
    full = tiny_csbm(num_nodes=150)
    batched = tiny_csbm(num_nodes=150, batch_size=17, fanouts=[-1, -1])
    if edge_dim is not None:
        edge_attr = torch.randn(full.data.num_edges, edge_dim,
                                generator=torch.Generator().manual_seed(4))
        full.data.edge_attr = batched.data.edge_attr = edge_attr
        options = {**options, "edge_dim": edge_dim}
    pl.seed_everything(0, verbose=False)
    module = NodePropertyModule(arch, "fastgnn", num_features=full.num_features,
                                num_outputs=full.num_outputs, dropout=0.0, **options)
    module.eval()
    with torch.no_grad():
        expected = module(full.data).softmax(-1)
    predictions = quiet_trainer(1).predict(module, batched)
    nodes = torch.cat([p["node"] for p in predictions])
    probs = torch.cat([p["pred"] for p in predictions])
    torch.testing.assert_close(probs, expected[nodes], atol=1e-5, rtol=1e-4)


def test_reordered_graph_predicts_under_the_original_ids():
    plain, reordered = tiny_csbm(num_nodes=150), tiny_csbm(num_nodes=150, reorder="rcm")
    assert not torch.equal(reordered.data.edge_index, plain.data.edge_index)
    pl.seed_everything(0, verbose=False)
    module = NodePropertyModule("gcn", "fastgnn", num_features=plain.num_features,
                                num_outputs=plain.num_outputs, dropout=0.0)
    a = quiet_trainer(1).predict(module, plain)[0]
    b = quiet_trainer(1).predict(module, reordered)[0]
    order = torch.argsort(b["node"])
    torch.testing.assert_close(b["pred"][order], a["pred"][torch.argsort(a["node"])])


def test_sample_on_gpu_needs_a_cuda_trainer():
    data = tiny_csbm(num_nodes=100, batch_size=16, fanouts=[3], sample_on_gpu=True)
    with pytest.raises(ValueError, match="sample_on_gpu needs a trainer on a CUDA device"):
        fit_test(data, "sage", "fastgnn", max_epochs=1, hidden_channels=8)


def test_features_too_large_for_the_gpu_stay_in_host_memory(monkeypatch):
    from fastgnn.zoo.data.base import _storage_on
    x, y = torch.randn(100, 8), torch.arange(100)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2 * x.nbytes, 2**40))
    with pytest.warns(UserWarning, match="stay in host memory"):
        kept = _storage_on(torch.device("cuda", 0), x, y, None)
    assert kept[0] is x and kept[1] is y and kept[2] is None
    assert _storage_on(torch.device("cpu"), x, y, None)[0] is x


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("backend", ["pyg", "fastgnn"])
def test_sample_on_gpu_trains_and_scores_every_seed(backend, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    data = tiny_csbm(num_nodes=300, batch_size=32, fanouts=[5, 5], sample_on_gpu=True)
    try:
        module, metrics = fit_test(data, "sage", backend, max_epochs=3, device="cuda",
                                   hidden_channels=16)
        # batches never leave the GPU, so the process runs one CPU thread
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert data._sampling_graph.device.type == "cuda"
    assert all(t is None or t.is_cuda for t in data._storage)
    assert 0.0 <= metrics["test_acc"] <= 1.0
    predictions = quiet_trainer(1, "cuda").predict(module, data)
    nodes = torch.cat([p["node"].cpu() for p in predictions])
    assert torch.equal(torch.sort(nodes).values, torch.arange(300))


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=8), "batch_size and fanouts"),
    (dict(batch_size=0, fanouts=[2]), "batch_size"),
    (dict(reorder="random"), "reorder"),
    (dict(reorder="rcm", batch_size=8, fanouts=[2]), "reorder"),
])
def test_bad_loader_options(options, message):
    with pytest.raises(ValueError, match=message):
        tiny_csbm(**options)


def _fit_cli(tmp_path, name: str, devices: int):
    """The quickstart, mini-batched, on ``devices`` CPU processes; returns (metrics, ckpts)."""
    out = tmp_path / name
    out.mkdir()
    command = [sys.executable, "-m", "fastgnn.zoo", "fit",
               "--config", os.path.join(ROOT, "zoo", "configs", "quickstart.yaml"),
               "--trainer.accelerator=cpu", f"--trainer.devices={devices}",
               "--trainer.strategy=" + ("ddp" if devices > 1 else "auto"),
               "--trainer.max_epochs=8", "--trainer.enable_progress_bar=false",
               f"--trainer.default_root_dir={out}", "--data.init_args.batch_size=64",
               "--data.init_args.fanouts=[10, 10]", "--data.init_args.num_nodes=600"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                            cwd=out)
    assert result.returncode == 0, result.stderr[-3000:]
    logs = sorted(glob.glob(str(out / "**" / "metrics.csv"), recursive=True))
    assert len(logs) == 1, logs  # one logger, written by rank 0
    rows = [line.split(",") for line in open(logs[0]).read().splitlines()]
    column = rows[0].index("val_acc")
    best = max(float(r[column]) for r in rows[1:] if r[column])
    checkpoints = glob.glob(str(out / "**" / "*.ckpt"), recursive=True)
    return best, checkpoints


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_matches_one(tmp_path):
    one, one_ckpts = _fit_cli(tmp_path, "one", devices=1)
    two, two_ckpts = _fit_cli(tmp_path, "two", devices=2)
    assert len(one_ckpts) == 1 and len(two_ckpts) == 1, (one_ckpts, two_ckpts)  # written once
    assert two == pytest.approx(one, abs=0.08), json.dumps({"one": one, "two": two})
