"""The contract every zoo data module keeps, so that any model trains on any dataset.

A data module holds one graph for node-property prediction: ``self.data``, a PyG ``Data``
with ``x [N, F]``, ``y`` (``[N]`` class ids for multi-class and binary tasks, ``[N, C]`` for
multi-label and regression), ``edge_index`` (row 0 sources) and, where the dataset has them,
``edge_attr``; plus boolean ``train_mask``, ``val_mask`` and ``test_mask`` of the selected
split. Full-batch loaders yield that one ``Data`` per step.

``num_features``, ``num_outputs``, ``task`` and ``ogb_name`` are readable right after
``__init__`` (reading one may load the dataset): LightningCLI links them to the model's
constructor arguments, so that checkpoints record them.
"""
from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
from torch.utils.data import DataLoader

TASKS = ("multiclass", "binary", "multilabel", "regression")


class GraphDataModule(pl.LightningDataModule):
    """Base of the zoo's data modules: subclasses implement :meth:`load`."""

    #: one of TASKS
    task: str = "multiclass"
    #: the OGB dataset name whose ``Evaluator`` scores this task, or None
    ogb_name: Optional[str] = None

    def __init__(self, root: str, split: int = 0, download: bool = True):
        super().__init__()
        self.root = root
        self.split = split
        self.download = download
        self._data = None

    def load(self):
        """Returns the PyG ``Data`` of split ``self.split`` (masks set), downloading only when
        ``self.download`` is true; raises ``FileNotFoundError`` naming ``root`` otherwise."""
        raise NotImplementedError

    @property
    def data(self):
        if self._data is None:
            self._data = self.load()
        return self._data

    def setup(self, stage: Optional[str] = None) -> None:
        self.data  # noqa: B018  (loads once, on every rank)

    @property
    def num_features(self) -> int:
        return int(self.data.num_features)

    @property
    def num_outputs(self) -> int:
        """Classes (multi-class), 1 (binary), labels (multi-label) or targets (regression)."""
        y = self.data.y
        if self.task == "multiclass":
            return int(y.max()) + 1
        if self.task == "binary":
            return 1
        return int(y.shape[1]) if y.dim() == 2 else 1

    def _full_batch(self) -> DataLoader:
        return DataLoader([self.data], batch_size=None, shuffle=False)

    def train_dataloader(self) -> DataLoader:
        return self._full_batch()

    def val_dataloader(self) -> DataLoader:
        return self._full_batch()

    def test_dataloader(self) -> DataLoader:
        return self._full_batch()

    def predict_dataloader(self) -> DataLoader:
        return self._full_batch()
