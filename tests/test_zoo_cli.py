"""The zoo CLI: every shipped config parses, fit -> test --ckpt_path round trip, predictions
on file, one-line configuration errors, and compare's output."""
import glob
import importlib
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import torch  # noqa: E402
import yaml  # noqa: E402
from conftest import devices, project_env  # noqa: E402

from fastgnn.zoo import cli  # noqa: E402
from fastgnn.zoo.compare import main as compare  # noqa: E402

CONFIGS = sorted(glob.glob(os.path.join(os.path.dirname(cli.__file__), "configs", "*.yaml")))
TINY = ["--data.num_nodes=80", "--data.num_classes=3", "--data.num_channels=8",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _data_class_missing(path: str):
    """The class path of the config's data module when it cannot be imported yet."""
    with open(path) as f:
        class_path = yaml.safe_load(f)["data"]["class_path"]
    module, _, name = class_path.rpartition(".")
    try:
        getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return class_path
    return None


def test_configs_shipped():
    names = {os.path.basename(p) for p in CONFIGS}
    assert "quickstart.yaml" in names
    for model in ("gcn", "sage", "gatv2", "gt"):
        for family in ("planetoid", "amazon", "coauthor", "heterophilous", "ogbn-arxiv"):
            assert f"{model}-{family}.yaml" in names
    for family in ("ogbn-arxiv", "amazon", "coauthor"):
        assert f"maxk-sage-{family}.yaml" in names
    for graph in ("tolokers", "ogbn-arxiv", "powerlaw"):  # the sampling issue's mini-batch set
        assert f"sage-{graph}-minibatch.yaml" in names


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_parses(path, capsys):
    missing = _data_class_missing(path)
    if missing:
        pytest.skip(f"{missing} is not importable yet")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--config", path, "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    with open(path) as f:
        shipped = yaml.safe_load(f)
    for key, value in shipped["model"].items():
        assert printed["model"][key] == value, key
    assert printed["data"]["class_path"] == shipped["data"]["class_path"]


def test_fit_checkpoint_round_trip_and_predict(tmp_path, capsys):
    common = ["--trainer.default_root_dir", str(tmp_path), "--trainer.logger.save_dir",
              str(tmp_path), *TINY]
    cli.main(["fit", "--trainer.max_epochs=3", *common])
    run = tmp_path / "lightning_logs" / "version_0"
    assert (run / "metrics.csv").is_file() and (run / "config.yaml").is_file()
    (ckpt,) = (run / "checkpoints").glob("*.ckpt")
    best = float(ckpt.stem.split("val_acc=")[1])
    capsys.readouterr()
    tested = cli.ZooCLI(args=["test", "--ckpt_path", str(ckpt), *common])
    first = tested.trainer.callback_metrics["test_acc"].item()
    again = cli.ZooCLI(args=["test", "--ckpt_path", str(ckpt), *common])
    assert again.trainer.callback_metrics["test_acc"].item() == first
    validated = cli.ZooCLI(args=["validate", "--ckpt_path", str(ckpt), *common])
    assert validated.trainer.callback_metrics["val_acc"].item() == pytest.approx(best, abs=1e-4)

    out = tmp_path / "pred.pt"
    cli.main(["predict", "--ckpt_path", str(ckpt), "--predictions.output_path", str(out),
              *common])
    saved = torch.load(out)
    assert saved["node"].tolist() == list(range(80))
    assert saved["pred"].shape == (80, 3)
    torch.testing.assert_close(saved["pred"].sum(1), torch.ones(80))


BAD = [
    (["--model.arch=nope"], "unknown model 'nope'"),
    (["--model.backend=cuda"], "unknown backend 'cuda'"),
    (["--data=fastgnn.zoo.data.Nope"], "unknown dataset 'fastgnn.zoo.data.Nope'"),
    (["--model.k=3"], "model 'gcn' does not take k"),
    (["--model.arch=sage", "--model.add_self_loops=false"],
     "model 'sage' does not take add_self_loops"),
    (["--data.num_nodes=1"], "num_nodes must be an int"),
    (["--model.hidden_channels=wide"], "model.hidden_channels"),
    (["--model.backend=fastgnn", "--model.reorder=random"],
     "reorder must be one of ('rcm', 'degree', 'metis')"),
    (["--model.reorder=rcm"], "reorder needs the fastgnn or reference backend, not 'pyg'"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[a[0] for a, _ in BAD])
def test_bad_config_is_one_line(args, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--trainer.default_root_dir", str(tmp_path), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fastgnn-zoo: error: ") and message in err
    assert "\n" not in err


def test_feed_forward_and_self_loops_from_the_command_line(tmp_path):
    built = cli.ZooCLI(args=["--model.feed_forward=true", "--model.add_self_loops=false",
                             "--trainer.default_root_dir", str(tmp_path), *TINY], run=False)
    assert built.model.hparams.feed_forward is True
    assert built.model.hparams.add_self_loops is False
    assert built.model.model.feed_forwards is not None
    assert not any(conv.add_self_loops for conv in built.model.model.convs)


def test_attention_dropout_from_the_command_line(tmp_path):
    built = cli.ZooCLI(args=["--model.arch=gat", "--model.heads=2", "--model.dropout=0.6",
                             "--model.attention_dropout=0.3",
                             "--trainer.default_root_dir", str(tmp_path), *TINY], run=False)
    assert built.model.hparams.attention_dropout == 0.3
    assert [conv.dropout for conv in built.model.model.convs] == [0.3, 0.3]


def test_missing_root_without_download(tmp_path, capsys):
    from fastgnn.zoo.data import base

    class Offline(base.GraphDataModule):  # what a real data module does with download off
        def load(self):
            raise FileNotFoundError(f"no dataset under {self.root!r} and download=False")

    sys.modules[__name__].Offline = Offline
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", f"--data={__name__}.Offline", f"--data.root={tmp_path}/absent",
                  "--data.download=false"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "no dataset under" in err and "\n" not in err


def test_entry_point_error_has_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "fastgnn.zoo", "fit", "--model.arch=nope"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("fastgnn-zoo: error: unknown model")


def test_an_earlier_runs_config_is_one_line(tmp_path):
    """Without a logger the run's folder is the working directory; a second run there would
    overwrite the first one's config.yaml, which Lightning refuses with a traceback."""
    args = [sys.executable, "-m", "fastgnn.zoo", "fit", "--trainer.logger=false",
            "--trainer.max_epochs=1", "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false", *TINY]
    first = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                           env=project_env())
    assert first.returncode == 0, first.stderr
    second = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env=project_env())
    assert second.returncode == 2
    assert "Traceback" not in second.stderr
    assert second.stderr.strip().splitlines()[-1] == (
        f"fastgnn-zoo: error: {tmp_path / 'config.yaml'} exists, from an earlier run: remove it "
        f"or give this run another --trainer.default_root_dir")


@pytest.mark.parametrize("device", devices())
def test_compare_output(tmp_path, capsys, device):
    config = tmp_path / "tiny.yaml"
    accelerator = "gpu" if device == "cuda" else "cpu"
    config.write_text(f"trainer:\n  accelerator: {accelerator}\n  max_epochs: 2\n"
                      "model:\n  arch: gcn\n  dropout: 0.0\n"
                      "data:\n  class_path: fastgnn.zoo.data.CSBM\n"
                      "  init_args: {num_nodes: 80, num_classes: 3, num_channels: 8}\n")
    out = tmp_path / "out"
    result = compare(["--config", str(config), "--backends", "pyg,fastgnn", "--seeds", "0,1",
                      "--out", str(out)])
    saved = json.loads((out / "compare.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert {"config", "backends", "seeds", "device", "summary", "runs", "memory"} <= set(saved)
    assert [row["backend"] for row in saved["summary"]] == ["pyg", "fastgnn"]
    assert len(saved["runs"]) == 4
    for row in saved["summary"]:
        assert set(row) >= {"metrics", "time_per_epoch_s", "peak_memory_bytes", "speedup"}
        assert set(row["metrics"]["test_acc"]) == {"mean", "std"}
    assert saved["summary"][0]["speedup"] == 1.0
    for run in saved["runs"]:  # the tested checkpoint's validation metric, as its name has it
        (checkpoint,) = glob.glob(str(out / "runs" / f"{run['backend']}-seed{run['seed']}" /
                                      "checkpoints" / "*.ckpt"))
        assert f"val_acc={run['best_val']['val_acc']:.4f}.ckpt" in checkpoint
    assert saved["memory"] == ("cuda_max_allocated" if device == "cuda" else
                               "cpu_peak_rss_increase")
    pyg, fast = saved["summary"]
    assert fast["metrics"]["test_acc"]["mean"] == pytest.approx(pyg["metrics"]["test_acc"]["mean"])
    table = (out / "compare.md").read_text().splitlines()
    assert table[-4].startswith("| backend | test_acc | time / epoch (ms) |")
    assert table[-2].startswith("| pyg | ") and table[-1].startswith("| fastgnn | ")
    assert "| backend | test_acc" in capsys.readouterr().out
    # the same --out again: the runs are replaced, not refused
    again = compare(["--config", str(config), "--backends", "pyg", "--seeds", "0",
                     "--out", str(out)])
    first = next(r for r in saved["runs"] if r["backend"] == "pyg" and r["seed"] == 0)
    assert again["runs"][0]["metrics"] == first["metrics"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA peak memory")
def test_compare_peak_memory_excludes_what_was_held_before(tmp_path):
    """A run's CUDA peak counts its own allocations only: not tensors something else (an
    earlier run's leftovers) holds on the GPU when it starts."""
    config = tmp_path / "tiny.yaml"
    config.write_text("trainer:\n  accelerator: gpu\n  max_epochs: 2\n"
                      "model:\n  arch: gcn\n"
                      "data:\n  class_path: fastgnn.zoo.data.CSBM\n"
                      "  init_args: {num_nodes: 80, num_classes: 3, num_channels: 8}\n")
    held = torch.empty(2**30, dtype=torch.uint8, device="cuda")  # 1 GiB
    result = compare(["--config", str(config), "--backends", "pyg", "--seeds", "0",
                      "--out", str(tmp_path / "out")])
    assert 0 < result["runs"][0]["peak_memory_bytes"] < held.numel() // 4
    del held


def test_compare_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["compare", "--config", "absent.yaml"])
    assert exit_info.value.code == 2
    assert "config file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["compare", "--config", CONFIGS[0], "--backends", "pyg,nope"])
    assert "unknown backend 'nope'" in capsys.readouterr().err


def _build_on_csbm(path, tmp_path):
    """The shipped config with a tiny CSBM in place of its dataset (so that this runs before
    the real data modules exist), built: (config dict, ZooCLI)."""
    with open(path) as f:
        config = yaml.safe_load(f)
    config["data"] = {"class_path": "fastgnn.zoo.data.CSBM",
                      "init_args": {"num_nodes": 80, "num_classes": 3, "num_channels": 8}}
    config["trainer"]["default_root_dir"] = str(tmp_path)
    swapped = tmp_path / "config.yaml"
    swapped.write_text(yaml.safe_dump(config))
    return config, cli.ZooCLI(args=["--config", str(swapped)], run=False)


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_builds_on_csbm(path, tmp_path):
    """Every shipped config's model and trainer sections instantiate."""
    config, built = _build_on_csbm(path, tmp_path)
    assert built.model.hparams.arch == config["model"]["arch"]
    assert built.trainer.max_epochs == config["trainer"]["max_epochs"]


PITFALLS_CONFIGS = [p for p in CONFIGS if p.endswith(("-amazon.yaml", "-coauthor.yaml"))]


@pytest.mark.parametrize("path", PITFALLS_CONFIGS, ids=os.path.basename)
def test_pitfalls_configs_test_the_lowest_validation_loss(path, tmp_path):
    """Shchur et al.'s gnnbench criterion: stop on the validation loss and restore its best
    epoch, so the tested checkpoint is the lowest validation loss, not the best accuracy."""
    _, built = _build_on_csbm(path, tmp_path)
    checkpoint = built.trainer.checkpoint_callback
    assert (checkpoint.monitor, checkpoint.mode) == ("val_loss", "min")
    built.model.trainer = built.trainer
    assert built.model.configure_callbacks() == []  # the module adds no val_acc checkpoint
