"""What the PyG and DGL adapters share: the Unsupported signal of a fused path, the fallback
warning, given once per (layer, option), and the cache of values derived from structure
objects (held through weak references)."""
from __future__ import annotations

import collections
import threading
import warnings
import weakref
from typing import Callable, Tuple

from fastgnn.graph import derived_tensors


class Unsupported(Exception):
    """An input an adapter's fused path does not handle; the message names the option."""


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


class StructureCache:
    """Bounded LRU of values derived from structure objects, held through weak references."""

    def __init__(self, capacity: int = 32, stamp: Callable[[object], Tuple] = lambda source: ()):
        """``stamp(source)``: what must be unchanged for an entry to stay valid (e.g. a
        tensor's ``_version``); the default suits immutable sources."""
        self.capacity = capacity
        self._stamp = stamp
        self.builds = 0  # how many entries were built (tests watch it)
        self._entries: "collections.OrderedDict[Tuple, Tuple]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, source, options: Tuple, build: Callable[[], object]):
        """``build()``'s value for ``source`` and ``options``, built once while ``source`` is
        alive and unchanged. Called from code torch.compile does not trace (the PyG adapter's
        ``structure._eager`` functions and ``structure.lookup``)."""
        key = (id(source), options)
        stamp = self._stamp(source)
        hit = self._hit(key, source, stamp)
        if hit is not None:
            return hit
        with derived_tensors():
            value = build()
        ref = weakref.ref(source, lambda dead, key=key: self._forget(key, dead))
        with self._lock:
            self.builds += 1
            self._entries[key] = (ref, stamp, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return value

    def peek(self, source, options: Tuple):
        """The value ``get`` would return for ``source`` and ``options`` without building:
        None when there is none, or when ``source`` changed since."""
        return self._hit((id(source), options), source, self._stamp(source))

    def _hit(self, key, source, stamp):
        # A hit takes no lock: dict reads and move_to_end are atomic, and a racing eviction
        # (KeyError) only makes this call a miss.
        entry = self._entries.get(key)
        if entry is None or entry[0]() is not source or entry[1] != stamp:
            return None
        try:
            self._entries.move_to_end(key)
        except KeyError:
            pass
        return entry[2]

    def _forget(self, key, dead_ref) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is dead_ref:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
