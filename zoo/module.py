"""The LightningModule for node-property prediction: a zoo model on one of three backends, the
task's loss and metrics, and the OGB ``Evaluator`` for OGB datasets.

Steps take the full graph (the ``{stage}_mask`` selects the nodes scored) or a mini-batch
following PyG's ``NeighborLoader`` convention: a batch with ``batch_size`` scores its first
``batch_size`` nodes, the seeds. Metrics are logged per epoch as ``{stage}_{metric}``
(``train_loss``, ``val_acc``, ``test_roc_auc``, ...). bf16 autocast is Lightning's
``trainer.precision: bf16-mixed``; ``compile: true`` runs the model through ``torch.compile``;
``cuda_graph: true`` replays full-batch steps as CUDA graphs (``fastgnn.zoo.cuda_graphs``).
"""
from __future__ import annotations

import importlib.util
import inspect
from typing import Dict, Optional

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
import torchmetrics
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

import fastgnn
from fastgnn._adapter import StructureCache
from fastgnn.pyg import structure
from fastgnn.zoo.cuda_graphs import StepGraphs
from fastgnn.zoo.data.base import TASKS
from fastgnn.zoo.models import MODELS

#: backend name -> the fastgnn backend that ``fastgnn.enable`` runs the swapped layers on
BACKENDS = {"pyg": None, "fastgnn": "auto", "reference": "reference"}
#: the metric that picks the best epoch, per task (higher is better for all)
PRIMARY = {"multiclass": "acc", "binary": "roc_auc", "multilabel": "roc_auc", "regression": "r2"}
OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
STAGES = ("train", "val", "test")
# Model options that only some architectures take; None leaves the architecture's default.
_ARCH_OPTIONS = ("aggr", "k", "train_eps", "beta", "root_weight", "edge_dim", "cached",
                 "add_self_loops", "activation", "attention_dropout", "conv_init")


def _choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")


def _accepted_options(cls) -> set:
    """Keyword arguments of ``cls`` and of the model classes it forwards ``**options`` to."""
    names = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass is not torch.nn.Module:
            names |= set(inspect.signature(vars(klass)["__init__"]).parameters)
    return names


def build_model(arch: str, num_features: int, num_outputs: int, backend: str = "pyg",
                sparse_inputs: bool = False, reorder: Optional[str] = None,
                **options) -> torch.nn.Module:
    """The zoo model ``arch`` from stock PyG layers, then swapped by ``fastgnn.enable`` for the
    ``fastgnn`` and ``reference`` backends (same parameters and ``state_dict`` keys), with
    ``sparse_inputs`` and ``reorder`` passed on to it."""
    _choice("model", arch, tuple(MODELS))
    _choice("backend", backend, tuple(BACKENDS))
    if reorder is not None:
        fastgnn.reordering.check_method("reorder", reorder)
    for name, value in (("sparse_inputs", sparse_inputs), ("reorder", reorder)):
        if value and BACKENDS[backend] is None:
            raise ValueError(f"{name} needs the fastgnn or reference backend, not {backend!r}")
    cls = MODELS[arch]
    options = {name: value for name, value in options.items()
               if value is not None or name not in _ARCH_OPTIONS}
    unknown = sorted(set(options) - _accepted_options(cls))
    if unknown:
        raise ValueError(f"model {arch!r} does not take {', '.join(unknown)}")
    model = cls(num_features, num_outputs, **options)
    if BACKENDS[backend] is not None:
        model = fastgnn.enable(model, backend=BACKENDS[backend], sparse_inputs=sparse_inputs,
                               reorder=reorder)
    return model


def _wants_sparse_inputs(sparse_inputs: Optional[bool], backend: str,
                         feature_density: Optional[float]) -> bool:
    """``sparse_inputs`` as given, or (None) on for the fastgnn backend when the data module
    reports features sparse enough for the sparse product to have a chance."""
    if sparse_inputs is not None:
        if not isinstance(sparse_inputs, bool):
            raise TypeError(f"sparse_inputs must be a bool or None, got {sparse_inputs!r}")
        return sparse_inputs
    from fastgnn.nn.sparse_input import MAX_DENSITY
    return backend == "fastgnn" and feature_density is not None and \
        feature_density <= MAX_DENSITY


def _metrics(task: str, num_outputs: int) -> torchmetrics.MetricCollection:
    # No per-update argument checks: they call torch.unique on the targets, a device sync every
    # step; the data modules check the labels once when they load them.
    checks = {"validate_args": False}
    if task == "multiclass":
        metrics = {"acc": torchmetrics.classification.MulticlassAccuracy(
            num_outputs, average="micro", **checks)}
    elif task == "binary":
        metrics = {"roc_auc": torchmetrics.classification.BinaryAUROC(**checks),
                   "ap": torchmetrics.classification.BinaryAveragePrecision(**checks)}
    elif task == "multilabel":
        metrics = {"roc_auc": torchmetrics.classification.MultilabelAUROC(num_outputs, **checks)}
    else:
        metrics = {"r2": torchmetrics.R2Score(num_outputs),
                   "rmse": torchmetrics.MeanSquaredError(squared=False, num_outputs=num_outputs)}
    return torchmetrics.MetricCollection(metrics)


def _ogb_evaluator(name: Optional[str]):
    """OGB's ``Evaluator(name)`` when ``ogb`` is installed, else None (torchmetrics only)."""
    if name is None or importlib.util.find_spec("ogb") is None:
        return None
    from ogb.nodeproppred import Evaluator
    return Evaluator(name)


class NodePropertyModule(pl.LightningModule):
    """Node-property prediction with a zoo model.

    ``arch`` is one of ``fastgnn.zoo.models.MODELS``; ``backend`` is ``pyg`` (stock PyG
    layers), ``fastgnn`` (the same model after ``fastgnn.enable``) or ``reference``
    (``fastgnn.enable(model, backend="reference")``, fastgnn's pure-PyTorch oracle).
    ``num_features``, ``num_outputs``, ``task`` and ``ogb_name`` come from the data module (the
    CLI links them), as does ``feature_density``. ``sparse_inputs`` (None: automatic) swaps
    the first layer's linear maps for ``fastgnn.nn.SparseInputLinear``, which measures once
    whether the sparse product beats the dense one on these features; automatic turns it on
    for the fastgnn backend when the features are at most half non-zero, and ``false`` keeps
    the stock first layer. ``reorder`` ("rcm", "degree", "metis"; fastgnn and reference
    backends) runs the layers' ops on their graph reordered internally
    (``fastgnn.enable(reorder=)``), the data left in its own order. ``conv_init="torch"``
    (gcn, sage) starts each conv's linear maps as one ``torch.nn.Linear`` over its whole
    input, as the heterophily benchmark's layers do; the default ``"pyg"`` keeps PyG's own
    initialisation. Options set to None keep the architecture's default; an option the
    architecture does not take is an error.

    ``cuda_graph`` (any backend, CUDA, full batch) captures the training step (forward, loss,
    backward) and the evaluation forward as CUDA graphs after three eager calls each, and
    replays them; the optimizer is the fused Adam/AdamW, stepped by Lightning (manual
    optimization: no gradient clipping or accumulation). A step that cannot be captured, a
    mini-batch, a CPU or multi-device run, or fp16 with a gradient scaler runs eagerly, with a
    warning.
    """

    def __init__(self, arch: str = "gcn", backend: str = "pyg", hidden_channels: int = 64,
                 num_layers: int = 2, heads: int = 1, dropout: float = 0.5,
                 input_dropout: float = 0.0, residual: bool = False, norm: str = "none",
                 input_mlp: bool = False, output_mlp: bool = False, feed_forward: bool = False,
                 activation: Optional[str] = None, attention_dropout: Optional[float] = None,
                 aggr: Optional[str] = None, k: Optional[int] = None,
                 train_eps: Optional[bool] = None, beta: Optional[bool] = None,
                 root_weight: Optional[bool] = None, edge_dim: Optional[int] = None,
                 cached: Optional[bool] = None, add_self_loops: Optional[bool] = None,
                 conv_init: Optional[str] = None, optimizer: str = "adam", lr: float = 0.01,
                 weight_decay: float = 5e-4, compile: bool = False, num_features: int = 1,
                 num_outputs: int = 1, task: str = "multiclass", ogb_name: Optional[str] = None,
                 sparse_inputs: Optional[bool] = None, feature_density: Optional[float] = None,
                 cuda_graph: bool = False, reorder: Optional[str] = None):
        super().__init__()
        self.save_hyperparameters()
        _choice("task", task, TASKS)
        _choice("optimizer", optimizer, tuple(OPTIMIZERS))
        if not isinstance(cuda_graph, bool):
            raise TypeError(f"cuda_graph must be a bool, got {cuda_graph!r}")
        if cuda_graph and compile:
            raise ValueError("cuda_graph and compile cannot both be set: choose one")
        self.model = build_model(
            arch, num_features, num_outputs, backend,
            _wants_sparse_inputs(sparse_inputs, backend, feature_density), reorder,
            hidden_channels=hidden_channels,
            num_layers=num_layers, heads=heads, dropout=dropout, input_dropout=input_dropout,
            residual=residual, norm=norm, input_mlp=input_mlp, output_mlp=output_mlp,
            feed_forward=feed_forward, activation=activation,
            attention_dropout=attention_dropout, aggr=aggr, k=k,
            train_eps=train_eps, beta=beta, root_weight=root_weight, edge_dim=edge_dim,
            cached=cached, add_self_loops=add_self_loops, conv_init=conv_init)
        self.task = task
        # (a ModuleDict cannot hold the key "train": Module.train exists)
        self.train_metrics, self.val_metrics, self.test_metrics = (
            _metrics(task, num_outputs).clone(stage + "_") for stage in STAGES)
        self.evaluator = _ogb_evaluator(ogb_name)
        self._ogb_outputs: Dict[str, list] = {stage: [] for stage in STAGES}
        # Kept out of the submodules (nn.Module.__setattr__ would register it), so that the
        # state_dict holds the model's parameters once, under the same keys with or without it.
        self.__dict__["_compiled"] = torch.compile(self.model) if compile else None
        # Lightning steps the optimizer after a replayed backward only in manual optimization.
        self.automatic_optimization = not cuda_graph
        self._graphs = StepGraphs() if cuda_graph else None
        self._graphs_off: Optional[str] = None  # why this run takes no graphs (warned once)
        self._mask_indices = StructureCache(capacity=len(STAGES), stamp=structure.stamp)

    def forward(self, batch) -> torch.Tensor:
        if self.hparams.cached and getattr(batch, "batch_size", None) is not None:
            raise ValueError("cached=True applies to full-batch training: it keeps the first "
                             "graph's normalised adjacency for every later one, and each "
                             "mini-batch is a new subgraph; unset cached or batch_size")
        model = self._compiled if self._compiled is not None else self.model
        return model(batch.x, batch.edge_index, getattr(batch, "edge_attr", None))

    # -- CUDA graphs ------------------------------------------------------------------------
    def _graphable(self, batch) -> bool:
        """Whether this step may replay a graph; warns once for a run that cannot."""
        if self._graphs is None or self._graphs_off is not None:
            return False
        reason = None
        if self.device.type != "cuda":
            reason = f"it needs a CUDA device, not {self.device.type}"
        elif getattr(batch, "batch_size", None) is not None:
            reason = "it needs full-batch training (mini-batches change every step)"
        elif self._trainer is not None and self.trainer.precision == "16-mixed":
            reason = "fp16 with a gradient scaler is not supported (use bf16-mixed)"
        elif self._trainer is not None and self.trainer.world_size > 1:
            reason = "it runs on one device (DDP's gradient all-reduce is not captured)"
        if reason is not None:
            self._graphs_off = reason
            rank_zero_warn(f"cuda_graph is ignored: {reason}; steps run eagerly.")
            return False
        return True

    def _graph_inputs(self, batch) -> tuple:
        tensors = [v for v in batch.to_dict().values() if torch.is_tensor(v)]
        return tensors, [*self.model.parameters(), *self.model.buffers()]

    def _graphed_scored(self, batch, stage: str):
        """(loss, scored outputs, targets) of the training step's replay, gradients left in
        the parameters; None when it runs eagerly."""
        def make_step():
            index = self._mask_index(batch, stage)  # outside the graph: a sync
            y = batch.y[index]

            def step():
                out = self(batch).index_select(0, index)
                loss = self._loss(out, y)
                loss.backward()
                return loss.detach(), out.detach(), y
            return step
        outputs = self._graphs.run(stage, make_step, *self._graph_inputs(batch), backward=True)
        if outputs is None:
            return None
        loss, out, y = outputs
        return loss.clone(), out.clone(), y  # replays rewrite the graph's own tensors

    def _output(self, batch) -> torch.Tensor:
        """The evaluation forward: replayed from its graph when it can be."""
        if self._graphable(batch):
            outputs = self._graphs.run("eval", lambda: lambda: (self(batch),),
                                       *self._graph_inputs(batch), backward=False)
            if outputs is not None:
                return outputs[0].clone()
        return self(batch)

    # -- loss, predictions and targets per task -------------------------------------------
    def _scored(self, batch, out: torch.Tensor, stage: str):
        """(outputs, targets) of the nodes this step scores."""
        seeds = getattr(batch, "batch_size", None)
        if seeds is not None:  # NeighborLoader mini-batch: the first batch_size nodes
            return out[:seeds], batch.y[:seeds]
        index = self._mask_index(batch, stage)
        return out.index_select(0, index), batch.y.index_select(0, index)

    def _mask_index(self, batch, stage: str) -> torch.Tensor:
        """The ids of the nodes ``stage``'s mask selects, found once per mask: a boolean index
        at every step would sync the GPU (and so stall the host) mid-step."""
        mask = batch[f"{stage}_mask"]
        return self._mask_indices.get(mask, (), lambda: mask.nonzero().view(-1))

    def _loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task == "multiclass":
            return F.cross_entropy(out, y)
        if self.task == "binary":
            return F.binary_cross_entropy_with_logits(out.view(-1), y.view(-1).to(out.dtype))
        if self.task == "multilabel":
            return F.binary_cross_entropy_with_logits(out, y.to(out.dtype))
        return F.mse_loss(out, y.view_as(out).to(out.dtype))

    def _prediction(self, out: torch.Tensor) -> torch.Tensor:
        """Class probabilities, positive-class probabilities or regression values."""
        out = out.float()
        if self.task == "multiclass":
            return out.softmax(dim=-1)
        if self.task == "binary":
            return out.view(-1).sigmoid()
        if self.task == "multilabel":
            return out.sigmoid()
        return out

    def _target(self, y: torch.Tensor) -> torch.Tensor:
        if self.task == "binary":
            return y.view(-1).long()
        if self.task == "multilabel":
            return y.long()
        if self.task == "regression":
            return y.view(y.shape[0], -1).float()
        return y

    # -- steps ------------------------------------------------------------------------------
    def _step(self, batch, stage: str) -> torch.Tensor:
        out = self(batch) if stage == "train" else self._output(batch)
        out, y = self._scored(batch, out, stage)
        loss = self._loss(out, y)
        self._record(stage, loss, out, y)
        return loss

    def _record(self, stage: str, loss: torch.Tensor, out: torch.Tensor,
                y: torch.Tensor) -> None:
        """Logs the step's loss and updates its metrics."""
        num_scored = out.shape[0]
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True, batch_size=num_scored,
                 sync_dist=True, prog_bar=stage != "test")
        pred = self._prediction(out.detach())
        if self.task == "regression":
            pred = pred.view(num_scored, -1)
        getattr(self, f"{stage}_metrics").update(pred, self._target(y))
        if self.evaluator is not None:
            self._ogb_outputs[stage].append((y.detach(), pred))

    def _epoch_end(self, stage: str) -> None:
        # compute() gathers the metric states of every DDP rank; sync_dist then averages
        # values that are already equal on all ranks.
        metrics = getattr(self, f"{stage}_metrics")
        for name, value in metrics.compute().items():
            self.log(name, value, sync_dist=True, prog_bar=stage == "val")
        metrics.reset()
        if self.evaluator is not None and self._ogb_outputs[stage]:
            y_true, y_pred = (torch.cat(part) for part in zip(*self._ogb_outputs[stage]))
            for name, value in self._ogb_eval(y_true, y_pred).items():
                self.log(f"{stage}_ogb_{name}", float(value), sync_dist=True)
            self._ogb_outputs[stage].clear()

    def _ogb_eval(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> dict:
        """OGB's documented input: ``y_true`` [n, tasks]; ``y_pred`` the predicted class ids
        [n, 1] for multi-class, scores [n, tasks] otherwise."""
        if self.task == "multiclass":
            y_pred = y_pred.argmax(dim=-1, keepdim=True)
        y_true = y_true.view(y_true.shape[0], -1)
        y_pred = y_pred.view(y_pred.shape[0], -1)
        return self.evaluator.eval({"y_true": y_true.cpu(), "y_pred": y_pred.cpu()})

    def training_step(self, batch, batch_idx):
        if self.automatic_optimization:
            return self._step(batch, "train")
        optimizer = self.optimizers()
        replayed = self._graphed_scored(batch, "train") if self._graphable(batch) else None
        if replayed is None:
            optimizer.zero_grad()
            loss = self._step(batch, "train")
            self.manual_backward(loss)
        else:
            loss = replayed[0]
            self._record("train", *replayed)
        optimizer.step()
        return loss

    def teardown(self, stage: str) -> None:
        if self._graphs is not None:
            self._graphs.release()

    def on_validation_model_zero_grad(self) -> None:
        """Lightning drops the gradients before validation to free memory; a replayed training
        step's gradients are its graph's own tensors, which the next replay rewrites."""
        if self._graphs is None or not self._graphs.replaying("train"):
            super().on_validation_model_zero_grad()

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_train_epoch_end(self):
        self._epoch_end("train")

    def on_validation_epoch_end(self):
        self._epoch_end("val")

    def on_test_epoch_end(self):
        self._epoch_end("test")

    def predict_step(self, batch, batch_idx):
        """Every node of a full batch, or the seeds of a mini-batch, with their node ids."""
        out = self._output(batch)
        seeds = getattr(batch, "batch_size", None)
        if seeds is not None:  # fastgnn's MiniBatch names its seeds; PyG's batch has n_id
            nodes = batch.seeds if hasattr(batch, "seeds") else batch.n_id[:seeds]
            return {"node": nodes, "pred": self._prediction(out[:seeds])}
        nodes = getattr(batch, "n_id", None)  # a reordered graph keeps the original ids
        if nodes is None:
            nodes = torch.arange(out.shape[0], device=out.device)
        return {"node": nodes, "pred": self._prediction(out)}

    # -- optimisation and checkpoints -------------------------------------------------------
    def configure_optimizers(self):
        cls = OPTIMIZERS[self.hparams.optimizer]
        # The fused step is one launch: with the rest of the step replayed, the host's share.
        fused = {"fused": True} if self._graphs is not None and self.device.type == "cuda" else {}
        return cls(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay,
                   **fused)

    @property
    def monitor(self) -> str:
        """The logged metric that picks the best checkpoint."""
        return f"val_{PRIMARY[self.task]}"

    def configure_callbacks(self):
        """Keeps the checkpoint of the best validation epoch in place of Lightning's default
        (last epoch); leaves a trainer without checkpointing, or with a ModelCheckpoint that
        monitors something, as it is."""
        if self._trainer is None:
            return []
        checkpoints = [cb for cb in self.trainer.callbacks if isinstance(cb, ModelCheckpoint)]
        if not checkpoints or any(cb.monitor is not None for cb in checkpoints):
            return []
        return [ModelCheckpoint(monitor=self.monitor, mode="max",
                                filename="{epoch}-{" + self.monitor + ":.4f}")]
