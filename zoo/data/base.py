"""The contract every zoo data module keeps, so that any model trains on any dataset.

A data module holds one graph for node-property prediction: ``self.data``, a PyG ``Data``
with ``x [N, F]``, ``y`` (``[N]`` class ids for multi-class and binary tasks, ``[N, C]`` for
multi-label and regression), ``edge_index`` (row 0 sources) and, where the dataset has them,
``edge_attr``; plus boolean ``train_mask``, ``val_mask`` and ``test_mask`` of the selected
split. Full-batch loaders yield that one ``Data`` per step.

``num_features``, ``num_outputs``, ``task`` and ``ogb_name`` are readable right after
``__init__`` (reading one may load the dataset): LightningCLI links them to the model's
constructor arguments, so that checkpoints record them.

Options every data module takes (keyword arguments, after its own):

- ``batch_size`` and ``fanouts``: mini-batch training through fastgnn's native neighbour
  sampler (``fastgnn.sampling.NeighborLoader``, PyG's subgraph layout: the first
  ``batch_size`` nodes of a batch are its seeds). ``fanouts`` lists the neighbours drawn per
  layer, input layer first (-1: all). Under DDP each rank draws its own share of the seeds.
  Batches carry their sampled edges' ``edge_attr`` where the dataset has one.
  ``sample_on_gpu`` keeps the graph on the training GPU and samples there; the features,
  labels and edge features go there too when they take at most half of its free memory (else
  they stay in host memory, with a warning), so that a batch never leaves the GPU. Under DDP
  every rank holds its own copy on its own GPU. When everything fits there, the process runs
  with one CPU thread unless ``OMP_NUM_THREADS`` is set (idle OpenMP threads slow the loop).
- ``reorder``: relabel the nodes once at load (``fastgnn.reorder``: "rcm", "degree" or
  "metis") so that neighbours get nearby ids; ``data.n_id`` keeps each node's original id, and
  predictions are written under it.
"""
from __future__ import annotations

import os
from typing import List, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

import fastgnn
from fastgnn.nn import sparse_input

TASKS = ("multiclass", "binary", "multilabel", "regression")


class GraphDataModule(pl.LightningDataModule):
    """Base of the zoo's data modules: subclasses implement :meth:`load`."""

    #: one of TASKS
    task: str = "multiclass"
    #: the OGB dataset name whose ``Evaluator`` scores this task, or None
    ogb_name: Optional[str] = None

    def __init__(self, root: str, split: int = 0, download: bool = True,
                 batch_size: Optional[int] = None, fanouts: Optional[List[int]] = None,
                 sample_on_gpu: bool = False, reorder: Optional[str] = None):
        super().__init__()
        self.root = root
        self.split = split
        self.download = download
        if (batch_size is None) != (fanouts is None):
            raise ValueError("batch_size and fanouts go together: give both for mini-batch "
                             "training, or neither for full-batch training")
        if batch_size is not None and (isinstance(batch_size, bool) or
                                       not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if reorder is not None and batch_size is not None:
            raise ValueError("reorder applies to full-batch training: unset batch_size or "
                             "reorder")
        if reorder is not None and reorder not in fastgnn.reordering.METHODS:
            raise ValueError(f"reorder must be one of {', '.join(fastgnn.reordering.METHODS)} "
                             f"or None, got {reorder!r}")
        self.batch_size, self.fanouts = batch_size, fanouts
        self.sample_on_gpu = bool(sample_on_gpu)
        self.reorder = reorder
        self._data = None
        self._feature_density = None
        self._sampling_graph = None
        self._storage = None  # (features, labels, edge features) where batches gather them

    def load(self):
        """Returns the PyG ``Data`` of split ``self.split`` (masks set), downloading only when
        ``self.download`` is true; raises ``FileNotFoundError`` naming ``root`` otherwise."""
        raise NotImplementedError

    @property
    def data(self):
        if self._data is None:
            data = self.load()
            _check_labels(data, self.task, type(self).__name__)
            if self.reorder is not None:
                data, order = fastgnn.reorder(data, self.reorder)
                data.n_id = order.perm  # each node's id in the dataset's own order
            self._data = data
        return self._data

    def setup(self, stage: Optional[str] = None) -> None:
        self.data  # noqa: B018  (loads once, on every rank)

    @property
    def num_features(self) -> int:
        return int(self.data.num_features)

    @property
    def feature_density(self) -> float:
        """Fraction of non-zero input features (bag-of-words: about 1%): with the fastgnn
        backend, features at most ``fastgnn.nn.sparse_input.MAX_DENSITY`` dense get the
        sparse-input first layer (see ``NodePropertyModule``'s ``sparse_inputs``)."""
        if self._feature_density is None:
            self._feature_density = sparse_input.feature_density(self.data.x)
        return self._feature_density

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

    def _loader(self, seeds: torch.Tensor, training: bool):
        """The full graph, or mini-batches of ``seeds`` (a node mask) when batch_size is set:
        shuffled, with each batch's transpose for the backward, when ``training``."""
        if self.batch_size is None:
            return self._full_batch()
        from fastgnn.sampling import NeighborLoader
        data = self.data
        device = None
        if self._sampling_graph is None:
            graph = fastgnn.Graph.from_edge_index(data.edge_index, num_nodes=data.num_nodes)
            if self.sample_on_gpu:
                device = self.trainer.strategy.root_device if self.trainer else None
                if device is None or device.type != "cuda":
                    raise ValueError("sample_on_gpu needs a trainer on a CUDA device")
                graph = graph.to(device)
            self._sampling_graph = graph
            self._storage = _storage_on(graph.device, data.x, data.y,
                                        getattr(data, "edge_attr", None))
            if self.sample_on_gpu and all(t is None or t.is_cuda for t in self._storage):
                one_cpu_thread_unless_set()
        features, labels, edge_features = self._storage
        return NeighborLoader(self._sampling_graph, self.fanouts, seeds,
                              batch_size=self.batch_size, shuffle=training, features=features,
                              labels=labels, edge_features=edge_features, layout="subgraph",
                              device=self._sampling_graph.device, build_transpose=training)

    def train_dataloader(self):
        return self._loader(self.data.train_mask, training=True)

    def val_dataloader(self):
        return self._loader(self.data.val_mask, training=False)

    def test_dataloader(self):
        return self._loader(self.data.test_mask, training=False)

    def predict_dataloader(self):
        if self.batch_size is None:
            return self._full_batch()
        return self._loader(torch.ones(self.data.num_nodes, dtype=torch.bool), training=False)


def one_cpu_thread_unless_set() -> None:
    """One CPU thread for this process's parallel regions, unless ``OMP_NUM_THREADS`` chooses:
    with the graph, features and labels on the GPU no step does parallel CPU work, and idle
    OpenMP threads spinning beside the training loop slow it (each DDP rank's most of all;
    torchrun sets one thread a process for the same reason)."""
    if "OMP_NUM_THREADS" in os.environ or torch.get_num_threads() == 1:
        return
    torch.set_num_threads(1)
    rank_zero_info("sample_on_gpu: one CPU thread per process, since every batch stays on the "
                   "GPU (set OMP_NUM_THREADS to choose another number)")


def _storage_on(device: torch.device, *tensors: Optional[torch.Tensor]) -> tuple:
    """``tensors`` moved to ``device`` when it is a GPU with room for them (at most half of its
    free memory), else as they are: a GPU sampler's batches then gather on the GPU instead of
    copying their node ids to the host and their rows back."""
    if device.type != "cuda":
        return tensors
    size = sum(t.numel() * t.element_size() for t in tensors if t is not None)
    free, _ = torch.cuda.mem_get_info(device)
    if size > free // 2:
        rank_zero_warn(f"sample_on_gpu: the features ({size / 2**30:.1f} GiB) stay in host "
                       f"memory ({free / 2**30:.1f} GiB free on {device}); each batch gathers "
                       f"its rows there")
        return tensors
    return tuple(None if t is None else t.to(device) for t in tensors)


def _check_labels(data, task: str, name: str) -> None:
    """The labels the splits score are valid for the task, checked once here: the zoo's metrics
    skip torchmetrics' own per-update checks, whose ``torch.unique`` syncs the GPU every step."""
    if task == "regression":
        return
    scored = data.train_mask | data.val_mask | data.test_mask
    y = data.y[scored]
    if task == "multiclass":
        if y.is_floating_point() or (y.numel() and int(y.min()) < 0):
            raise ValueError(f"{name}: multi-class labels must be class ids >= 0 on the "
                             f"scored nodes, got {y.dtype} labels with minimum "
                             f"{y.min().item() if y.numel() else None}")
    elif y.numel() and not bool(((y == 0) | (y == 1)).all()):
        raise ValueError(f"{name}: {task} labels must be 0 or 1 on the scored nodes")
