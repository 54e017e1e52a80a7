"""Module swapping: ``fastgnn.enable(model)`` replaces supported layer instances with their
fastgnn subclasses; ``fastgnn.disable(model)`` puts the stock classes back.

A swap makes a new instance of the other class that shares the old one's ``__dict__``
contents (the same parameter and buffer tensors, hooks and submodules), so optimizer state
and ``state_dict`` keys stay valid. Nothing in the stock libraries is modified: adapters
register (stock class, fastgnn class) pairs here, and ``enable`` imports the adapter of each
installed library (``fastgnn.pyg`` for PyTorch Geometric, ``fastgnn.dgl.nn`` for DGL) so that
users need not.
"""
from __future__ import annotations

import importlib.util
import types
import warnings
from typing import Dict, Optional, Type

import torch

from fastgnn import _validate, backends, reordering

_to_fast: Dict[type, type] = {}
_to_stock: Dict[type, type] = {}


def register_swap(stock_cls: Type[torch.nn.Module], fast_cls: Type[torch.nn.Module]) -> None:
    """Declares ``fast_cls`` (a subclass of ``stock_cls``) as its fastgnn counterpart."""
    if not issubclass(fast_cls, stock_cls):
        raise TypeError(f"{fast_cls.__name__} must subclass {stock_cls.__name__}")
    _to_fast[stock_cls] = fast_cls
    _to_stock[fast_cls] = stock_cls


def supported_layers() -> Dict[type, type]:
    return dict(_to_fast)


_ADAPTERS = (("torch_geometric", "fastgnn.pyg"),  # (library, adapter package)
             ("dgl", "fastgnn.dgl.nn"))


def _load_adapters() -> None:
    """Imports the adapter of each installed library, which registers its swaps."""
    for library, adapter in _ADAPTERS:
        if importlib.util.find_spec(library) is None:
            continue
        try:
            importlib.import_module(adapter)
        except ImportError as exc:
            warnings.warn(f"fastgnn: {library} is installed but {adapter} could not be "
                          f"imported ({exc}); its layers are left as they are")


def _swap(module: torch.nn.Module, cls: type) -> torch.nn.Module:
    swapped = cls.__new__(cls)
    swapped.__dict__.update(module.__dict__)
    # Methods the old instance bound to itself (PyG binds propagate) must follow the swap.
    for name, value in module.__dict__.items():
        if isinstance(value, types.MethodType) and value.__self__ is module:
            swapped.__dict__[name] = types.MethodType(value.__func__, swapped)
    return swapped


# enable()'s per-layer settings, kept in the swapped layers' __dict__ (not in the state_dict)
_SETTINGS = ("_fastgnn_backend", "_fastgnn_reorder")


def _configure(layer: torch.nn.Module, settings: Optional[Dict[str, object]]) -> None:
    """Gives a swapped layer ``enable``'s settings (instance attributes read by
    ``fastgnn._adapter.run_fused``; a None value, or ``settings`` None, removes one)."""
    for name in _SETTINGS:
        value = None if settings is None else settings[name]
        if value is None:
            layer.__dict__.pop(name, None)
        else:
            layer.__dict__[name] = value


def _walk(module: torch.nn.Module, table: Dict[type, type],
          settings: Optional[Dict[str, object]]) -> torch.nn.Module:
    for name, child in list(module._modules.items()):
        if child is not None:
            module._modules[name] = _walk(child, table, settings)
    cls = table.get(type(module))
    if cls is None:
        if settings is not None and type(module) in _to_stock:
            _configure(module, settings)  # already enabled: only the settings change
        return module
    swapped = _swap(module, cls)
    _configure(swapped, settings)
    return swapped


def enable(model: torch.nn.Module, backend: str = "auto", *, sparse_inputs: bool = False,
           reorder: Optional[str] = None) -> torch.nn.Module:
    """Swaps every supported layer in ``model`` (or ``model`` itself) for its fastgnn subclass
    running on ``backend``; returns the model (the new object when ``model`` was a layer).

    ``sparse_inputs=True`` also swaps the first layer's linear maps for their sparse-input
    versions (``fastgnn.nn.SparseInputLinear``), which multiply sparse input features in CSR
    when measuring shows it pays (see :func:`_swap_first_linears`).

    ``reorder`` ("rcm", "degree" or "metis") runs the swapped layers' ops on their graphs
    reordered internally (``Graph.reordered``): inputs, outputs and gradients stay in the
    caller's node and edge order. Bipartite and sampled mini-batch graphs, min/max
    aggregation and torch.compile run unreordered, with a one-time ``FallbackWarning``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if backend not in backends.names():
        raise ValueError(f"unknown fastgnn backend {backend!r}; available: "
                         f"{', '.join(backends.names())}")
    _validate.flag("sparse_inputs", sparse_inputs)
    if reorder is not None:
        reordering.check_method("reorder", reorder)
    _load_adapters()
    model = _walk(model, _to_fast, {"_fastgnn_backend": backend, "_fastgnn_reorder": reorder})
    return _swap_first_linears(model) if sparse_inputs else model


def disable(model: torch.nn.Module) -> torch.nn.Module:
    """Restores the stock classes swapped by :func:`enable`; returns the model."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return _walk(_restore_linears(model), _to_stock, None)


def _swap_first_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Swaps the linear maps of the model's first layer for sparse-input ones.

    The first layer is the first module, in registration order (``named_modules``), that
    directly holds a linear map (``torch.nn.Linear`` or PyG's ``Linear``): the model itself
    for an MLP, a GCNConv for its ``lin``, a SAGEConv for ``lin_l`` and ``lin_r``. Every
    linear child of it whose input width is the first one's is swapped. The swap is lazy and
    safe: a swapped layer stays on the stock path unless its input is a reused, sparse
    tensor on which the sparse product measured faster.
    """
    from fastgnn.nn.sparse_input import sparse_input_class

    if sparse_input_class(model) is not None:
        return _swap(model, sparse_input_class(model))
    for owner in model.modules():
        linears = {name: child for name, child in owner._modules.items()
                   if child is not None and sparse_input_class(child) is not None}
        if linears:
            def width(layer):  # torch's in_features or PyG's in_channels (-1: lazy)
                return getattr(layer, "in_features", getattr(layer, "in_channels", None))
            first = next(iter(linears.values()))
            for name, child in linears.items():
                if child is first or width(child) == width(first):
                    owner._modules[name] = _swap(child, sparse_input_class(child))
            break
    return model


def _restore_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Puts the stock linear classes back where :func:`_swap_first_linears` swapped them."""
    from fastgnn.nn.sparse_input import SparseInputMixin

    def stock(module):
        return next(c for c in type(module).__mro__[1:]
                    if not issubclass(c, SparseInputMixin))

    if isinstance(model, SparseInputMixin):
        return _swap(model, stock(model))
    for owner in model.modules():
        for name, child in list(owner._modules.items()):
            if isinstance(child, SparseInputMixin):
                child.__dict__.pop("_fastgnn_seen", None)
                owner._modules[name] = _swap(child, stock(child))
    return model
