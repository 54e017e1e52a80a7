"""Callbacks of the zoo CLI: the prediction writer."""
from __future__ import annotations

import os
from typing import Optional

import torch
from lightning.pytorch.callbacks import BasePredictionWriter


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
