"""Callbacks of the zoo CLI: the prediction writer, the epoch timer and the GAT paper's early
stopping."""
from __future__ import annotations

import math
import os
import statistics
import time
from typing import List, Optional

import torch
from lightning.pytorch.callbacks import BasePredictionWriter, Callback, ModelCheckpoint


class PredictionWriter(BasePredictionWriter):
    """Writes ``predict``'s output to ``output_path`` (default: ``predictions.pt`` in the
    trainer's log directory) with ``torch.save``: a dict of ``node`` (node ids) and ``pred``
    (class probabilities, positive-class probabilities or regression values)."""

    def __init__(self, output_path: Optional[str] = None):
        super().__init__(write_interval="epoch")
        self.output_path = output_path

    def path(self, trainer) -> str:
        if self.output_path is not None:
            return self.output_path
        return os.path.join(trainer.log_dir or trainer.default_root_dir, "predictions.pt")

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        if predictions and isinstance(predictions[0], list):  # one list per dataloader
            predictions = [p for loader in predictions for p in loader]
        path = self.path(trainer)
        if trainer.world_size > 1:  # one file per rank, as Lightning's own writer example
            root, ext = os.path.splitext(path)
            path = f"{root}-rank{trainer.global_rank}{ext}"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.save({"node": torch.cat([p["node"] for p in predictions]).cpu(),
                    "pred": torch.cat([p["pred"] for p in predictions]).cpu()}, path)


class EpochTimer(Callback):
    """Per training epoch, the wall time of the training steps (forward, backward, optimizer
    step) and the loop's time between them: fetching the next batch (a fastgnn loader samples
    and gathers ahead on a background thread), moving it to the device, and Lightning's own
    per-step hooks and logging. CUDA is synchronised at each step's start and end, so queued
    GPU work is counted in its step. Validation is not counted. (Lightning's
    ``--trainer.profiler simple`` reports the batch fetch alone, as ``train_dataloader_next``.)

    With ``log=True`` both go to the logger each epoch as ``time/steps_s`` and
    ``time/between_steps_s``; under DDP the slowest rank's. Add it from the command line with
    ``--trainer.callbacks+=fastgnn.zoo.callbacks.EpochTimer --trainer.callbacks.log=true``.
    """

    def __init__(self, log: bool = False):
        self.log = log
        self.epoch_times: List[float] = []
        self.between_times: List[float] = []
        self._steps = self._between = self._mark = 0.0

    @staticmethod
    def _now(pl_module) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    def on_train_epoch_start(self, trainer, pl_module):
        self._steps = self._between = 0.0
        self._mark = self._now(pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        start = self._now(pl_module)
        self._between += start - self._mark
        self._mark = start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        end = self._now(pl_module)
        self._steps += end - self._mark
        self._mark = end

    def on_train_epoch_end(self, trainer, pl_module):
        self.epoch_times.append(self._steps)
        self.between_times.append(self._between)
        if self.log:
            for name, value in (("time/steps_s", self._steps),
                                ("time/between_steps_s", self._between)):
                pl_module.log(name, value, on_epoch=True, sync_dist=True, reduce_fx="max")

    @property
    def time_per_epoch(self) -> float:
        """The median over epochs after the first (which builds caches and tunes kernels)."""
        steady = self.epoch_times[1:] or self.epoch_times
        return statistics.median(steady) if steady else float("nan")


class GATEarlyStopping(ModelCheckpoint):
    """The GAT paper's early stopping and model selection (Veličković et al. 2018, as the
    authors' ``execute_cora.py`` does it), on the zoo module's ``val_acc`` and ``val_loss``.

    After each validation, an epoch whose accuracy is at least the best so far *or* whose loss
    is at most the lowest so far resets the patience count and moves both bests; ``patience``
    epochs in a row with neither stop training. The checkpoint kept is that of the last epoch
    that matched *both* bests at once (compared with the bests before it): an epoch that
    improves only one of the two resets the count but keeps the earlier checkpoint.
    ``best_model_path`` is that checkpoint (``trainer.test(ckpt_path="best")`` and
    ``fastgnn-zoo compare`` test it) and ``best_model_score`` its ``val_acc``. In a config::

        trainer:
          callbacks:
            - class_path: fastgnn.zoo.callbacks.GATEarlyStopping
              init_args: {patience: 100}

    It takes the place of the module's best-``val_acc`` checkpoint, and of Lightning's
    ``EarlyStopping``, which watches one metric.
    """

    def __init__(self, patience: int = 100, dirpath: Optional[str] = None,
                 filename: Optional[str] = "{epoch}-{val_acc:.4f}-{val_loss:.4f}"):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be a positive integer, got {patience!r}")
        super().__init__(dirpath=dirpath, filename=filename, monitor="val_acc", mode="max",
                         save_top_k=1)
        self.patience = patience
        self.best_acc, self.best_loss, self.wait = -math.inf, math.inf, 0

    def check_monitor_top_k(self, trainer, current: Optional[torch.Tensor] = None) -> bool:
        """Whether this validation's model replaces the checkpoint (``current`` is its
        ``val_acc``); moves the bests and the patience count as well. ModelCheckpoint asks once
        per validation of ``fit``, not during the sanity check."""
        if current is None:
            return False
        if "val_loss" not in trainer.callback_metrics:
            raise RuntimeError("GATEarlyStopping needs 'val_loss' logged at validation")
        acc, loss = float(current), float(trainer.callback_metrics["val_loss"])
        acc_better, loss_better = acc >= self.best_acc, loss <= self.best_loss
        if acc_better or loss_better:
            self.best_acc, self.best_loss = max(acc, self.best_acc), min(loss, self.best_loss)
            self.wait = 0
        else:
            self.wait += 1
            # the logged metrics are reduced across ranks: every rank decides alike
            trainer.should_stop = trainer.should_stop or self.wait >= self.patience
        return trainer.strategy.reduce_boolean_decision(acc_better and loss_better)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "best_acc": self.best_acc, "best_loss": self.best_loss,
                "wait": self.wait}

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.best_acc, self.best_loss, self.wait = (state_dict[key] for key in
                                                    ("best_acc", "best_loss", "wait"))
