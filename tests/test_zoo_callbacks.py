"""The zoo's GATEarlyStopping: the GAT paper's stopping and checkpoint choice on a scripted
sequence of validation metrics, its arguments, and the GAT configs that train by it."""
import glob
import os

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from fastgnn.zoo import cli  # noqa: E402
from fastgnn.zoo.callbacks import GATEarlyStopping  # noqa: E402
from fastgnn.zoo.compare import run_one  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(cli.__file__), "configs")

# Per epoch (val_acc, val_loss), with patience 2. By the paper's rule (">=" and "<=" against the
# bests before the epoch): 0 and 1 improve both (saved); 2 ties the accuracy only, 3 improves the
# loss only, 4 the accuracy only (patience reset, no checkpoint); 5 ties both bests (saved);
# 6 improves the accuracy only (reset, no checkpoint); 7 and 8 neither: stop after epoch 8.
SCRIPT = [(0.50, 1.00), (0.60, 0.90), (0.60, 0.95), (0.55, 0.80), (0.70, 0.85), (0.70, 0.80),
          (0.72, 0.85), (0.65, 0.90), (0.65, 0.90), (0.99, 0.10), (0.99, 0.10)]
SAVED_EPOCH, LAST_EPOCH = 5, 8


class Scripted(pl.LightningModule):
    """Trains a real step per epoch and logs the scripted validation metrics of its epoch."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.weight - batch).pow(2).sum()

    def validation_step(self, batch, batch_idx):
        acc, loss = SCRIPT[self.current_epoch]
        self.log("val_acc", acc)
        self.log("val_loss", loss)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(1, 1))

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(1, 1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path, callback, max_epochs=len(SCRIPT)) -> pl.Trainer:
    trainer = pl.Trainer(max_epochs=max_epochs, accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback], default_root_dir=str(tmp_path))
    trainer.fit(Scripted())
    return trainer


def test_stops_and_keeps_the_last_epoch_best_on_both(tmp_path):
    callback = GATEarlyStopping(patience=2)
    trainer = _fit(tmp_path, callback)
    assert trainer.current_epoch == LAST_EPOCH + 1  # epochs 0..8 ran, then the stop
    assert trainer.checkpoint_callback is callback
    (saved,) = glob.glob(os.path.join(callback.dirpath, "*.ckpt"))  # the earlier one removed
    assert callback.best_model_path == saved
    assert os.path.basename(saved).startswith(f"epoch={SAVED_EPOCH}-val_acc=0.7000-")
    assert callback.best_model_score.item() == pytest.approx(0.70)
    assert torch.load(saved, weights_only=False)["epoch"] == SAVED_EPOCH
    assert (callback.best_acc, callback.best_loss) == (pytest.approx(0.72), pytest.approx(0.80))
    assert callback.wait == 2


def test_patience_counts_epochs_in_a_row(tmp_path):
    # patience 3 outlasts epochs 7 and 8; epoch 9 improves both and is kept
    callback = GATEarlyStopping(patience=3)
    trainer = _fit(tmp_path, callback, max_epochs=10)
    assert trainer.current_epoch == 10 and callback.wait == 0
    assert os.path.basename(callback.best_model_path).startswith("epoch=9-")


def test_resumes_with_its_bests_and_count(tmp_path):
    callback = GATEarlyStopping(patience=2)
    _fit(tmp_path, callback)
    again = GATEarlyStopping(patience=2)
    again.dirpath = callback.dirpath  # as setup() finds it in the same run directory
    again.load_state_dict(callback.state_dict())
    assert (again.best_acc, again.best_loss, again.wait) == \
        (callback.best_acc, callback.best_loss, callback.wait)
    assert again.best_model_path == callback.best_model_path


@pytest.mark.parametrize("patience", [0, -1, 1.5, True, "100"])
def test_bad_patience(patience):
    with pytest.raises(ValueError, match="patience must be a positive integer"):
        GATEarlyStopping(patience=patience)


def _on_csbm(name: str, tmp_path) -> str:
    """The shipped config with a tiny CSBM in place of Planetoid (no download here)."""
    with open(os.path.join(CONFIGS, name)) as f:
        config = yaml.safe_load(f)
    config["data"] = {"class_path": "fastgnn.zoo.data.CSBM",
                      "init_args": {"num_nodes": 80, "num_classes": 3, "num_channels": 8}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.parametrize("name", ["gat-planetoid.yaml", "gatv2-planetoid.yaml"])
def test_gat_configs_train_by_the_paper_criterion(name, tmp_path):
    config = _on_csbm(name, tmp_path)
    built = cli.ZooCLI(args=["--config", config, f"--trainer.default_root_dir={tmp_path}"],
                       run=False)
    (stopping,) = [cb for cb in built.trainer.callbacks if isinstance(cb, GATEarlyStopping)]
    assert stopping.patience == 100 and built.trainer.max_epochs == 100000
    # compare tests the callback's checkpoint (the module adds no best-val_acc one beside it)
    result = run_one(config, "pyg", 0, str(tmp_path / "out"),
                     ["--trainer.max_epochs=3", "--trainer.enable_progress_bar=false",
                      "--trainer.enable_model_summary=false"])
    assert result["epochs"] == 3 and 0.0 <= result["metrics"]["test_acc"] <= 1.0
    (checkpoint,) = glob.glob(str(tmp_path / "out" / "runs" / "pyg-seed0" / "checkpoints" /
                                  "*.ckpt"))
    name_acc = float(os.path.basename(checkpoint).split("val_acc=")[1].split("-")[0])
    assert result["best_val"]["val_acc"] == pytest.approx(name_acc, abs=1e-4)
    assert "val_loss=" in checkpoint
