"""What every fastgnn PyG layer shares: dispatch between the fused path and PyG's own forward,
the one-time fallback warning, the per-layer backend, feature checks and dtypes."""
from __future__ import annotations

import operator
from typing import Optional, Tuple

import torch

from fastgnn import _adapter
# fastgnn.pyg exports FallbackWarning; tests reset _warned between cases
from fastgnn._adapter import FallbackWarning, _warned  # noqa: F401
from fastgnn._library import autocast_dtype, is_compiling
from fastgnn.pyg.structure import Unsupported

# MessagePassing's own hook tables: the fused path skips propagate, so any hook means fallback.
_HOOK_TABLES = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks",
                "_message_forward_pre_hooks", "_message_forward_hooks",
                "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
                "_message_and_aggregate_forward_pre_hooks",
                "_message_and_aggregate_forward_hooks",
                "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks")
_hook_tables_of = operator.itemgetter(*_HOOK_TABLES)

REDUCES = {"add": "sum", "sum": "sum", "mean": "mean", "max": "max", "min": "min"}


def warn_fallback(layer_name: str, option: str) -> None:
    """Warns once per (layer class, option)."""
    _adapter.warn_fallback(f"fastgnn.pyg.{layer_name}", option, "PyG's own forward")


def reduce_of(aggr) -> str:
    if not isinstance(aggr, str) or aggr not in REDUCES:
        raise Unsupported(f"aggr={aggr!r}")
    return REDUCES[aggr]


def common_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    """The dtype the fused op runs in: the one PyG's elementwise arithmetic would produce from
    these tensors, except under ``torch.autocast``, where the ops' autocast policy holds
    (``csrc/autocast.cpp``: the autocast dtype, float64 excepted), so that features already in
    it are not upcast into copies."""
    dtype, device = None, None
    for t in tensors:
        if t is not None and t.dtype != dtype:
            dtype = t.dtype if dtype is None else torch.promote_types(dtype, t.dtype)
            device = t.device
    if dtype is not None and dtype != torch.float64:
        return autocast_dtype(device.type) or dtype
    return dtype


def cast(value: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    return value if value is None or value.dtype == dtype else value.to(dtype)


def parameter(layer: torch.nn.Module, name: str) -> Optional[torch.Tensor]:
    """``layer.<name>`` for a registered parameter (or None), read from ``_parameters``: the
    Module attribute lookup costs about as much as a small op's Python. A parametrized one
    is no longer there and goes through the attribute."""
    params = layer._parameters
    return params[name] if name in params else getattr(layer, name)


def check_features(*xs: Optional[torch.Tensor]) -> None:
    """2-D float tensors, or the stock layer handles them (and raises its own errors)."""
    for x in xs:
        if x is not None and (not isinstance(x, torch.Tensor) or x.dim() != 2):
            raise Unsupported("node features that are not a 2-D tensor")
        if x is not None and not x.dtype.is_floating_point:
            raise Unsupported(f"node features of dtype {x.dtype}")


def check_device(device: torch.device, *xs: Optional[torch.Tensor]) -> None:
    """Features on the structure's ``device`` (paths that skip the ops' own checks)."""
    for x in xs:
        if x is not None and x.device != device:
            raise ValueError(f"node features are on {x.device} but the edges are on {device}")


def split_pair(x) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(x_src, x_dst) from a tensor or a (x_src, x_dst) pair."""
    if isinstance(x, torch.Tensor):
        return x, x
    if isinstance(x, (tuple, list)) and len(x) == 2:
        return x[0], x[1]
    raise Unsupported(f"node features of type {type(x).__name__}")


def inherit_message_types(fast_cls: type) -> None:
    """Gives ``fast_cls`` its stock class's ``propagate_type``/``edge_updater_type``.

    PyG generates a class's ``propagate`` from ``# propagate_type:`` comments in the source of
    the classes in its MRO, cached by class name; our same-named subclass would hide the
    stock source and get an argument-less propagate (used by the fallback path and by copies).
    Declared type dictionaries take precedence, so we declare the stock ones on our class.
    """
    from torch_geometric.inspector import Inspector

    stock_cls = next(c for c in fast_cls.__mro__[1:] if c.__module__.startswith("torch_geometric"))
    inspector = Inspector(stock_cls)
    for func in ("propagate", "edge_updater"):
        if func + "_type" in vars(fast_cls):
            continue
        params = inspector.get_params_from_method_call(func, exclude=[0, "edge_index", "size"])
        if params:
            setattr(fast_cls, func + "_type", {name: p.type for name, p in params.items()})


def edge_vector(edge_weight: Optional[torch.Tensor], x) -> Optional[torch.Tensor]:
    """``edge_weight`` as PyG's messages use it (``edge_weight.view(-1, 1) * x_j``): an
    ``[E, 1]`` one as the ``[E]`` one it equals, and integer or bool weights promoted to the
    features' floating dtype, as that product promotes them; any other value unchanged, for the
    ops' own checks."""
    if not isinstance(edge_weight, torch.Tensor):
        return edge_weight
    if edge_weight.dim() == 2 and edge_weight.size(1) == 1:
        edge_weight = edge_weight.view(-1)
    features = x[0] if isinstance(x, (tuple, list)) else x
    if not edge_weight.is_floating_point() and not edge_weight.is_complex() and \
            isinstance(features, torch.Tensor) and features.is_floating_point():
        edge_weight = edge_weight.to(features.dtype)
    return edge_weight


class FastLayer:
    """Mixin placed before a PyG layer class: ``forward`` runs ``_fused`` and falls back to the
    PyG forward (with a one-time warning naming the option) when it raises Unsupported."""

    #: the aggregations a layer whose fused path sums its messages runs (None: the layer reads
    #: ``aggr`` itself)
    summing_aggrs: Optional[Tuple[str, ...]] = None

    def _fused(self, *args, **kwargs):  # pragma: no cover - every layer defines it
        raise NotImplementedError

    def _unsupported_state(self) -> Optional[str]:
        # Read from __dict__, where MessagePassing keeps these: Module attribute lookups cost
        # more than the rest of this check, which runs on every call.
        state = self.__dict__
        if state.get("_explain"):
            return "explain=True"
        if state.get("_decomposed_layers", 1) != 1:
            return "decomposed_layers > 1"
        if is_compiling():  # torch.compile does not trace itemgetter
            hooked = any(state.get(table) for table in _HOOK_TABLES)
        else:
            try:
                hooked = any(_hook_tables_of(state))  # the ten tables in one C-level call
            except KeyError:  # a MessagePassing without some of them
                hooked = any(map(state.get, _HOOK_TABLES))
        if hooked:
            table = next(t for t in _HOOK_TABLES if state.get(t))
            return f"a registered {table.strip('_')[:-1]}"
        if state.get("flow", "source_to_target") != "source_to_target":
            return f"flow={state['flow']!r}"
        if state.get("node_dim", -2) not in (0, -2):  # the fused paths take nodes on dim 0
            return f"node_dim={state['node_dim']!r}"
        if self.summing_aggrs is not None and state.get("aggr") not in self.summing_aggrs:
            # a string is kept in __dict__; an Aggregation module is not, and falls back too
            return f"aggr={state.get('aggr', getattr(self, 'aggr', None))!r}"
        return None

    def __prepare_scriptable__(self):
        # torch.jit.script calls this before compiling. Handing it a stock layer instead would
        # also put that stock layer into the user's eager model (torch writes the result back
        # into the parent module), so scripting stops here with an error that says what to do.
        name = type(self).__name__
        raise RuntimeError(
            f"torch.jit.script cannot compile fastgnn.pyg.{name}: fastgnn's fused layers run "
            "Python code that TorchScript does not support. Use torch.compile(model), which "
            "compiles through fastgnn's ops, or call fastgnn.disable(model) first to script "
            "the stock PyG layers.")

    def _dispatch(self, *args, **kwargs):
        reason = self._unsupported_state()
        if reason is None:
            try:
                return _adapter.run_fused(self, "fastgnn.pyg", *args, **kwargs)
            except Unsupported as exc:
                reason = str(exc)
        warn_fallback(type(self).__name__, reason)
        return super().forward(*args, **kwargs)
