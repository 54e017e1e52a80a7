"""Helpers the data modules share: name and split checks, the download-off file check, and
building a PyG dataset that raises instead of downloading."""
from __future__ import annotations

import functools
import os
from typing import Iterable, Sequence

import torch


def pick(value: str, choices: Sequence[str], argument: str = "name") -> str:
    """The entry of ``choices`` that ``value`` names, ignoring case and ``-``/``_``."""
    def key(s):
        return s.lower().replace("_", "-")

    for choice in choices:
        if key(choice) == key(str(value)):
            return choice
    raise ValueError(f"{argument} must be one of {', '.join(choices)}; got {value!r}")


def check_split(split, num_splits=None) -> int:
    """``split`` as an int in ``[0, num_splits)`` (any ``>= 0`` when ``num_splits`` is None)."""
    if isinstance(split, bool) or not isinstance(split, int):
        raise TypeError(f"split must be an int; got {type(split).__name__}")
    if split < 0 or (num_splits is not None and split >= num_splits):
        allowed = "0" if num_splits == 1 else (
            f"0..{num_splits - 1}" if num_splits is not None else "a non-negative int")
        raise ValueError(f"split must be {allowed}; got {split}")
    return split


def missing_files(root: str, paths: Iterable[str]) -> FileNotFoundError:
    """The error a data module raises when downloading is off and files are absent."""
    listed = ", ".join(os.path.relpath(p, root) for p in paths)
    return FileNotFoundError(
        f"dataset files not found under root {root!r} and download is off: expected {listed}")


def require_files(root: str, paths: Iterable[str]) -> None:
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise missing_files(root, missing)


def _refuse_download(self) -> None:
    raise missing_files(self.root, [p for p in self.raw_paths if not os.path.exists(p)])


@functools.lru_cache(maxsize=None)
def _offline(cls: type) -> type:
    # PyG calls ``download`` only when a raw file is missing; this subclass raises there.
    return type(f"{cls.__name__}Offline", (cls,), {"download": _refuse_download,
                                                    "__module__": __name__})


def pyg_dataset(cls: type, root: str, download: bool, **kwargs):
    """``cls(root, **kwargs)`` for a PyG ``Dataset`` class; with ``download`` false, missing
    raw files raise ``FileNotFoundError`` naming ``root`` and the files instead."""
    return (cls if download else _offline(cls))(root, **kwargs)


def index_mask(index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[index] = True
    return mask
