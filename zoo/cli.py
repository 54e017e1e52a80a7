"""``fastgnn-zoo`` / ``python -m fastgnn.zoo``: LightningCLI's ``fit``, ``validate``, ``test``
and ``predict`` on the zoo's module and data modules, plus ``compare``.

Configuration mistakes (an unknown model, dataset or backend, a missing dataset root with
downloads off, an option the model does not take, a previous run's ``config.yaml`` where this
run would write its own) end with one line on stderr and exit status 2; errors while training
keep their traceback.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from typing import List, Optional

from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from fastgnn.zoo.callbacks import PredictionWriter
from fastgnn.zoo.data.base import GraphDataModule
from fastgnn.zoo.module import NodePropertyModule

PROG = "fastgnn-zoo"
#: data-module attributes the model's constructor receives (recorded in checkpoints)
LINKED = ("num_features", "num_outputs", "task", "ogb_name", "feature_density")
DESCRIPTION = ("fastgnn model zoo. Subcommands: fit, validate, test, predict (LightningCLI) and "
               "compare (`fastgnn-zoo compare --help`).")
_SEED_LOG = logging.getLogger("lightning.fabric.utilities.seed")


class ConfigError(Exception):
    """A configuration mistake: reported as one line, without a traceback."""


def _dataset_names() -> List[str]:
    """The data modules ``fastgnn.zoo.data`` exports, by class path."""
    import fastgnn.zoo.data as datasets
    return sorted(f"{datasets.__name__}.{name}" for name, value in vars(datasets).items()
                  if isinstance(value, type) and issubclass(value, GraphDataModule)
                  and value is not GraphDataModule)


def _one_line(exc: BaseException) -> str:
    """jsonargparse's message for a subclass argument lists every Union member it tried;
    keep the reason that concerns the user's class."""
    text = " ".join(str(exc).split())
    bad_class = re.search(r"class_path '([^']+)'|dot import path string: (\S+)", text)
    if text.startswith('Parser key "data"') and bad_class:
        name = bad_class.group(1) or bad_class.group(2)
        return f"unknown dataset {name!r}; choose one of {', '.join(_dataset_names())}"
    reason = re.search(r"Errors: - (.*?) - Expected a <class 'NoneType'>", text)
    if reason:
        return reason.group(1)
    return text or type(exc).__name__


class _SaveConfig(SaveConfigCallback):
    """Lightning's saving of the run's configuration, whose refusal to overwrite an earlier
    run's ``config.yaml`` (in the working directory when the logger is off) is one line."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        try:
            super().setup(trainer, pl_module, stage)
        except RuntimeError as exc:
            path = os.path.join(trainer.log_dir or "", self.config_filename)
            if self.overwrite or not os.path.isfile(path):
                raise
            raise ConfigError(f"{path} exists, from an earlier run: remove it or give this run "
                              f"another --trainer.default_root_dir") from exc


class ZooCLI(LightningCLI):
    """LightningCLI with the data module's shape and task linked into the model, CSV logs by
    default and a prediction writer (``--predictions.output_path``)."""

    def __init__(self, args=None, run: bool = True, **kwargs):
        import fastgnn.zoo.data  # noqa: F401  (registers the data modules' short names)

        kwargs.setdefault("trainer_defaults", {
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                       "init_args": {"save_dir": "."}},
        })
        kwargs.setdefault("seed_everything_default", 0)
        kwargs.setdefault("save_config_callback", _SaveConfig)
        super().__init__(NodePropertyModule, GraphDataModule, subclass_mode_data=True,
                         auto_configure_optimizers=False, args=args, run=run,
                         parser_kwargs={"prog": PROG, "exit_on_error": False,
                                        "description": DESCRIPTION}, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        for name in LINKED:
            parser.link_arguments(f"data.{name}", f"model.{name}", apply_on="instantiate")
        parser.add_lightning_class_args(PredictionWriter, "predictions")
        parser.set_defaults({"data": {"class_path": "fastgnn.zoo.data.CSBM"}})

    def parse_arguments(self, parser, args) -> None:
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as exc:
            raise ConfigError(_one_line(exc)) from exc

    def _set_seed(self) -> None:
        # Lightning logs "Seed set to N" here; say it once the configuration has proved valid,
        # so that a configuration error stays the only line on stderr.
        level = _SEED_LOG.level
        _SEED_LOG.setLevel(logging.WARNING)
        try:
            super()._set_seed()
        finally:
            _SEED_LOG.setLevel(level)

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except (ValueError, TypeError, FileNotFoundError, ArgumentError) as exc:
            raise ConfigError(_one_line(exc)) from exc
        seed = self._get(self.config, "seed_everything")
        if seed is not False:
            _SEED_LOG.info(f"Seed set to {seed}")


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "compare":
            from fastgnn.zoo.compare import main as compare_main
            compare_main(args[1:])
        else:
            ZooCLI(args=argv)  # None: LightningCLI reads sys.argv itself
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(2)


