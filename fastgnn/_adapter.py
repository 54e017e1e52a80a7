"""What the PyG and DGL adapters share: the fallback warning, given once per (layer, option)."""
from __future__ import annotations

import threading
import warnings


class FallbackWarning(UserWarning):
    """A fastgnn adapter ran the stock library's own code for an option without a fused path."""


_warned = set()
_warned_lock = threading.Lock()


def warn_fallback(qualified_name: str, option: str, stock_code: str, stacklevel: int = 4) -> None:
    """Warns once per (``qualified_name``, ``option``) that ``stock_code`` runs for ``option``,
    e.g. ``warn_fallback("fastgnn.pyg.SAGEConv", "aggr='lstm'", "PyG's own forward")``."""
    with _warned_lock:
        if (qualified_name, option) in _warned:
            return
        _warned.add((qualified_name, option))
    warnings.warn(f"{qualified_name}: {option} has no fused path; running {stock_code} for it",
                  FallbackWarning, stacklevel=stacklevel + 1)
