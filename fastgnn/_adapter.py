"""What the PyG and DGL adapters share: the Unsupported signal of a fused path, the fallback
warning, given once per (layer, option), the settings ``fastgnn.enable`` gave a layer (its
backend and node reordering) in force while its fused path runs, and the cache of values
derived from structure objects (held through weak references)."""
from __future__ import annotations

import collections
import contextlib
import threading
import warnings
import weakref
from typing import Callable, Iterator, Optional, Tuple

from fastgnn import backends
from fastgnn._library import is_compiling
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


class _LayerSettings(threading.local):
    reorder: Optional[str] = None  # enable(reorder=) of the layer running on this thread
    owner: str = ""                # that layer's class, for fallback warnings


#: read by ``fastgnn.reordering``: ops on a homogeneous graph inside a layer with ``reorder``
#: set run as if the graph were flagged (``Graph.reordered``)
layer_settings = _LayerSettings()
#: how many reordering scopes are open on any thread: while none is, ops skip reading
#: ``layer_settings`` (a thread-local read costs about as much as the rest of their check)
open_reordering_scopes = 0
_scopes_lock = threading.Lock()


@contextlib.contextmanager
def reordering_scope(method: Optional[str], owner: str) -> Iterator[None]:
    """Ops called inside reorder homogeneous graphs by ``method`` (None: they do not)."""
    global open_reordering_scopes
    saved = layer_settings.reorder, layer_settings.owner
    layer_settings.reorder, layer_settings.owner = method, owner
    with _scopes_lock:
        open_reordering_scopes += 1
    try:
        yield
    finally:
        layer_settings.reorder, layer_settings.owner = saved
        with _scopes_lock:
            open_reordering_scopes -= 1


def run_fused(layer, package: str, *args, **kwargs):
    """``layer._fused(*args, **kwargs)`` under the settings ``fastgnn.enable`` gave the layer:
    its backend and its ``reorder`` (``package``: where its class lives, for the warnings
    that name it, e.g. "fastgnn.pyg"). Under torch.compile the layer runs unreordered, with a
    fallback warning: the compiled ops look their graphs up outside this scope."""
    state = layer.__dict__
    name = state.get("_fastgnn_backend", backends.AUTO)
    method = state.get("_fastgnn_reorder")
    if name == backends.AUTO and method is None:  # no scope to enter: this runs on every call
        return layer._fused(*args, **kwargs)
    owner = f"{package}.{type(layer).__name__}"
    with contextlib.ExitStack() as scopes:
        if name != backends.AUTO:
            scopes.enter_context(backends.backend(name))
        if method is not None and is_compiling():
            warn_fallback(owner, f"reorder={method!r} under torch.compile",
                          "the graph in its own node order")
        elif method is not None:
            scopes.enter_context(reordering_scope(method, owner))
        return layer._fused(*args, **kwargs)


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
