"""Callbacks of the zoo CLI: the prediction writer and the epoch timer."""
from __future__ import annotations

import os
import statistics
import time
from typing import List, Optional

import torch
from lightning.pytorch.callbacks import BasePredictionWriter, Callback


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
