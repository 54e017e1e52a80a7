"""Shared pieces of the zoo tests: a tiny CSBM, options for every architecture and a quiet fit +
test."""
from __future__ import annotations

import lightning.pytorch as pl

from fastgnn.zoo.data import CSBM
from fastgnn.zoo.module import NodePropertyModule

TINY = dict(num_nodes=80, num_classes=3, num_channels=8, avg_degree=4.0)

# Options that exercise each architecture's own arguments and the backbone's options (one entry
# per fastgnn.zoo.models.MODELS; test_zoo_models checks that every model has one).
ARCH_OPTIONS = {
    "mlp": {},
    "gcn": {"norm": "batch", "add_self_loops": False, "feed_forward": True},
    "sage": {"aggr": "max", "residual": True, "input_mlp": True, "norm": "layer",
             "feed_forward": True},
    "gin": {"train_eps": True},
    "gat": {"heads": 2, "hidden_channels": 16, "input_dropout": 0.3, "activation": "elu"},
    "gatv2": {"heads": 2, "hidden_channels": 16},
    "gt": {"heads": 2, "hidden_channels": 16, "beta": True, "output_mlp": True},
    "maxk-sage": {"k": 4, "hidden_channels": 16},
    "maxk-gcn": {"k": 4, "hidden_channels": 16},
    "maxk-gin": {"k": 4, "hidden_channels": 16},
    "gcn-gru": {"hidden_channels": 16},
}


def tiny_csbm(**overrides) -> CSBM:
    return CSBM(**{**TINY, **overrides})


def quiet_trainer(max_epochs: int = 2, device: str = "cpu", **kwargs) -> pl.Trainer:
    accelerator = "gpu" if device == "cuda" else device
    return pl.Trainer(max_epochs=max_epochs, accelerator=accelerator, devices=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, **kwargs)


def fit_test(data, arch: str, backend: str, seed: int = 0, max_epochs: int = 2,
             device: str = "cpu", **options):
    """(module, test metrics) after ``max_epochs`` of full-batch training from ``seed``."""
    pl.seed_everything(seed, verbose=False)
    module = NodePropertyModule(arch, backend, num_features=data.num_features,
                                num_outputs=data.num_outputs, task=data.task, **options)
    trainer = quiet_trainer(max_epochs, device)
    trainer.fit(module, data)
    return module, trainer.test(module, data, verbose=False)[0]
