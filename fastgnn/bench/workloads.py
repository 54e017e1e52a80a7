"""The workload registry: one build function per workload, returning the prepared inputs, the
oracle and every implementation to measure on one graph, width and device.

Op-level oracles are ``fastgnn.reference``; layer-level ones are the stock PyG layer. Every
implementation is guarded: a missing library, op or adapter gives an implementation with a
``skip`` reason instead of a function. fastgnn implementations are one per registered backend
of the op (``fastgnn-native``, ``fastgnn-reference``, ...), each forced with
``fastgnn.backend(name)``; the reference backend runs only on small inputs.
To add a workload, write ``@register("name", level) def build(ctx) -> Case``.
"""
from __future__ import annotations

import functools
import importlib
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional

import torch

import fastgnn
from fastgnn import backends, reference, reordering
from fastgnn._adapter import FallbackWarning
from fastgnn.bench import measure
from fastgnn.bench.graphs import BenchGraph
from fastgnn.graph import Graph

FASTGNN, BASELINE = "fastgnn", "baseline"
# The reference backend runs only when edges x width is at most this (it materialises several
# such tensors): larger on GPUs, whose memory and speed make it worth a row.
SMALL_EDGE_ELEMENTS = {"cpu": 1 << 24, "cuda": 1 << 28}
HEADS = 4


@dataclass
class Implementation:
    name: str
    kind: str  # FASTGNN or BASELINE
    forward: Optional[Callable[[], torch.Tensor]] = None
    backend: str = ""  # the fastgnn backend that runs, or the library
    skip: Optional[str] = None  # why it was not run
    # how the gradients are checked: measure.GRAD_CHECKS says which and why
    grad_check: str = "elementwise"
    setup_ms: Optional[float] = None  # one-off preparation before the timed calls, if any


@dataclass
class Case:
    """One workload prepared on one graph: differentiated inputs, oracle, implementations."""
    inputs: List[torch.Tensor]
    oracle: Callable[[], torch.Tensor]
    implementations: List[Implementation]
    oracle_name: str = "fastgnn.reference"
    rtol: float = 1e-3


@dataclass
class Context:
    """What a build function gets: the graph on the device, the width and a seed."""
    bench_graph: BenchGraph
    width: int
    device: torch.device
    seed: int = 0
    heads: int = HEADS  # attention workloads split the width into heads x (width // heads)
    compile: bool = False  # training steps: also time the enabled model under torch.compile
    dtype: torch.dtype = torch.float32  # op workloads' features (bench.py --precisions)
    # draws rounded to this dtype first: the float32 twin of a half-precision case, whose
    # oracle then sees the half case's values (the same maxima, top-k and LeakyReLU signs)
    rounded_to: Optional[torch.dtype] = None
    _cache: Dict[str, object] = field(default_factory=dict)
    _draws: int = 0

    @property
    def graph(self) -> Graph:
        return self.cached("graph", lambda: self.bench_graph.graph.to(self.device))

    @property
    def src(self) -> torch.Tensor:
        return self.cached("src", lambda: self.graph.col.to(torch.int64))

    @property
    def dst(self) -> torch.Tensor:
        return self.cached("dst", lambda: self.graph.row.to(torch.int64))

    @property
    def edge_index(self) -> torch.Tensor:
        return self.cached("edge_index", lambda: torch.stack([self.src, self.dst]))

    @property
    def small(self) -> bool:
        return self.graph.num_edges * self.width <= SMALL_EDGE_ELEMENTS.get(self.device.type, 0)

    def has(self, key) -> bool:
        """Whether ``cached`` has built ``key`` already."""
        return key in self._cache

    def cached(self, key, build):
        """``build()`` once per context (graph conversions shared by implementations)."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def features(self, *shape: int) -> torch.Tensor:
        """Seeded random features in ``dtype`` that require grad (same values for every
        implementation; each call of a build draws the next tensor of the seeded sequence, so
        contexts that differ only in ``dtype`` draw the same values, rounded to it)."""
        self._draws += 1
        gen = torch.Generator().manual_seed(self.seed * 1000 + self._draws)
        draw = torch.randn(shape, generator=gen)
        if self.rounded_to is not None:
            draw = draw.to(self.rounded_to)
        return draw.to(self.device, self.dtype).requires_grad_()

    def float32_twin(self) -> "Context":
        """A float32 context drawing this one's values (rounded to its dtype) and sharing its
        cached structures, which no dtype changes: the oracle of a half-precision case."""
        return replace(self, dtype=torch.float32, rounded_to=self.dtype, _draws=0)


@dataclass
class Workload:
    name: str
    level: str  # "op" or "layer"
    build: Callable[[Context], Case]
    in_default_suite: bool = True  # False: run only when named with --workloads


WORKLOADS: Dict[str, Workload] = {}


def register(name: str, level: str, in_default_suite: bool = True):
    def decorate(build: Callable[[Context], Case]) -> Callable[[Context], Case]:
        WORKLOADS[name] = Workload(name, level, build, in_default_suite)
        return build
    return decorate


# ---- shared implementation helpers -------------------------------------------------------------
def _with_backend(name: str, call: Callable[[], torch.Tensor]) -> torch.Tensor:
    with fastgnn.backend(name):
        return call()


def fastgnn_implementations(op: str, ctx: Context,
                            call: Callable[[], torch.Tensor]) -> List[Implementation]:
    """One implementation per fastgnn backend registered for ``op`` on the device."""
    found = []
    for name in backends.available(op, ctx.device.type):
        skip = None
        if name == "reference" and not ctx.small:
            skip = "reference backend runs on small graphs only"
        ran = backends.select(op, ctx.device, name).backend
        found.append(Implementation(f"fastgnn-{name}", FASTGNN,
                                    functools.partial(_with_backend, name, call), ran, skip))
    if not found:
        found.append(Implementation("fastgnn", FASTGNN, skip=f"no fastgnn backend for {op} on "
                                    f"{ctx.device.type}"))
    return found


def _optional_module(name: str):
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # noqa: BLE001  (any import failure means: not available)
        return None, f"{name} not importable ({type(exc).__name__})"


def _pyg_scatter():
    module, reason = _optional_module("torch_geometric.utils")
    return (module.scatter, None) if module is not None else (None, reason)


def _dgl_graph(ctx: Context, input_order: bool = False):
    """A DGL graph of the same edges, or a skip reason. Its edge ids follow the CSR order, or
    with ``input_order`` the graph's input edge order, so that edge data lines up with
    fastgnn's (edge_perm then reorders it, as for any DGL graph)."""
    dgl, reason = _optional_module("dgl")
    if dgl is None:
        return None, reason
    g = ctx.graph

    def build():
        src, dst = ctx.src, ctx.dst
        if input_order:
            src, dst = g.edge_values_from_csr(src), g.edge_values_from_csr(dst)
        return dgl.create_block((src, dst), num_src_nodes=g.num_src_nodes,
                                num_dst_nodes=g.num_dst_nodes, device=ctx.device)
    return ctx.cached(("dgl_graph", input_order), build), None


def _check_fused(call: Callable[[], object]) -> None:
    """Runs ``call`` once with FallbackWarning an error: a fallback would time DGL's code."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", FallbackWarning)
        call()


def _guarded(name: str, kind: str, library: str, make, grad_check: str = "elementwise"):
    """``make()`` returns ``(forward, None)`` or ``(None, reason)``; any exception is a skip."""
    try:
        forward, reason = make()
    except Exception as exc:  # noqa: BLE001
        forward, reason = None, f"{type(exc).__name__}: {exc}"
    return Implementation(name, kind, forward, library, reason, grad_check)


# ---- spmm per norm -----------------------------------------------------------------------------
def _spmm_case(ctx: Context, norm: str) -> Case:
    g = ctx.graph
    x = ctx.features(g.num_src_nodes, ctx.width)
    values = g.norm_values(norm)  # CSR order; None: all ones
    impls = fastgnn_implementations("spmm", ctx, lambda: fastgnn.ops.spmm(g, x, norm=norm))

    def torch_csr():
        ones = torch.ones(g.num_edges, device=ctx.device)
        with warnings.catch_warnings():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            adj = torch.sparse_csr_tensor(g.rowptr, g.col, ones if values is None else values,
                                          size=(g.num_dst_nodes, g.num_src_nodes),
                                          check_invariants=False)
        return (lambda: torch.sparse.mm(adj, x)), None

    def pyg_scatter():
        scatter, reason = _pyg_scatter()
        if scatter is None:
            return None, reason
        src, dst, n = ctx.src, ctx.dst, g.num_dst_nodes
        if values is None:
            return (lambda: scatter(x[src], dst, 0, n, "sum")), None
        return (lambda: scatter(x[src] * values.unsqueeze(1), dst, 0, n, "sum")), None

    def dgl_spmm():
        block, reason = _dgl_graph(ctx)
        if block is None:
            return None, reason
        import dgl
        if values is None:
            return (lambda: dgl.ops.copy_u_sum(block, x)), None
        return (lambda: dgl.ops.u_mul_e_sum(block, x, values.unsqueeze(1))), None

    impls += [_guarded("torch-sparse-csr", BASELINE, "torch.sparse.mm", torch_csr),
              _guarded("pyg-scatter", BASELINE, "torch_geometric", pyg_scatter),
              _guarded("dgl-gspmm", BASELINE, "dgl", dgl_spmm)]
    return Case([x], lambda: reference.spmm(g, x, norm=norm), impls)


for _norm in ("none", "right", "both"):
    register(f"spmm-{_norm}", "op")(functools.partial(_spmm_case, norm=_norm))


# ---- min / max aggregation ---------------------------------------------------------------------
def _minmax_case(ctx: Context, reduce: str) -> Case:
    g = ctx.graph
    x = ctx.features(g.num_src_nodes, ctx.width)
    impls = fastgnn_implementations("aggregate_minmax", ctx,
                                    lambda: fastgnn.ops.aggregate(g, x, reduce))

    def pyg_scatter():
        scatter, reason = _pyg_scatter()
        if scatter is None:
            return None, reason
        return (lambda: scatter(x[ctx.src], ctx.dst, 0, g.num_dst_nodes, reduce)), None

    def dgl_copy_u():
        block, reason = _dgl_graph(ctx)
        if block is None:
            return None, reason
        import dgl
        op = dgl.ops.copy_u_max if reduce == "max" else dgl.ops.copy_u_min
        return (lambda: op(block, x)), None

    impls += [_guarded("pyg-scatter", BASELINE, "torch_geometric", pyg_scatter,
                       grad_check="none"),
              _guarded(f"dgl-copy_u_{reduce}", BASELINE, "dgl", dgl_copy_u, grad_check="none")]
    return Case([x], lambda: reference.aggregate(g, x, reduce), impls)


for _reduce in ("min", "max"):
    register(f"aggregate-{_reduce}", "op")(functools.partial(_minmax_case, reduce=_reduce))


# ---- edge softmax: logits [E, width] (the width is the heads), input edge order ----------------
def _edge_softmax_case(ctx: Context, norm_by: str) -> Case:
    g = ctx.graph
    logits = ctx.features(g.num_edges, ctx.width)
    impls = fastgnn_implementations(
        "edge_softmax", ctx, lambda: fastgnn.ops.edge_softmax(g, logits, norm_by=norm_by))

    def dgl_ops(module_name: str):
        def make():
            block, reason = _dgl_graph(ctx, input_order=True)
            if block is None:
                return None, reason
            op = importlib.import_module(module_name).edge_softmax
            _check_fused(lambda: op(block, logits, norm_by=norm_by))
            return (lambda: op(block, logits, norm_by=norm_by)), None
        return make

    def pyg_softmax():
        utils, reason = _optional_module("torch_geometric.utils")
        if utils is None:
            return None, reason
        nodes, count = (ctx.dst, g.num_dst_nodes) if norm_by == "dst" else \
            (ctx.src, g.num_src_nodes)
        index = ctx.cached(("input_order", norm_by), lambda: g.edge_values_from_csr(nodes))
        return (lambda: utils.softmax(logits, index, num_nodes=count)), None

    impls += [_guarded("fastgnn.dgl", FASTGNN, "fastgnn.dgl", dgl_ops("fastgnn.dgl")),
              _guarded("dgl-edge_softmax", BASELINE, "dgl", dgl_ops("dgl.ops")),
              _guarded("pyg-softmax", BASELINE, "torch_geometric", pyg_softmax)]
    return Case([logits], lambda: reference.edge_softmax(g, logits, norm_by), impls)


register("edge-softmax", "op")(functools.partial(_edge_softmax_case, norm_by="dst"))
register("edge-softmax-src", "op")(functools.partial(_edge_softmax_case, norm_by="src"))


# ---- MaxK aggregation: CBSR SpGEMM/SSpMM against dense SpMM of the same MaxK output -------------
def _maxk_spmm_case(ctx: Context, k: int) -> Case:
    g = ctx.graph
    x = ctx.features(g.num_src_nodes, ctx.width)
    k = min(k, ctx.width)
    impls = fastgnn_implementations(
        "maxk_spmm", ctx, lambda: fastgnn.ops.maxk_spmm(g, fastgnn.ops.maxk(x, k)))
    impls.append(Implementation(
        "fastgnn-dense-spmm", BASELINE,
        lambda: fastgnn.ops.spmm(g, fastgnn.ops.maxk(x, k).to_dense()), "fastgnn.ops.spmm"))
    return Case([x], lambda: reference.maxk_spmm(g, reference.maxk_cbsr(x, k)), impls)


for _k in (8, 16, 32, 64):
    register(f"maxk-spmm-k{_k}", "op")(functools.partial(_maxk_spmm_case, k=_k))


# ---- attention (op level) ----------------------------------------------------------------------
def _pyg_attend(ctx: Context, logits: Callable[[], torch.Tensor],
                values: Callable[[], torch.Tensor]):
    """PyG-style message passing: edge logits, ``torch_geometric.utils.softmax``, scatter-sum."""
    utils, reason = _optional_module("torch_geometric.utils")
    if utils is None:
        return None, reason
    n = ctx.graph.num_dst_nodes

    def forward():
        alpha = utils.softmax(logits(), ctx.dst, num_nodes=n)
        return utils.scatter(alpha.unsqueeze(-1) * values(), ctx.dst, 0, n, "sum")
    return forward, None


def _heads(ctx: Context):
    return ctx.heads, max(1, ctx.width // ctx.heads)


@register("gatv2-attention", "op")
def gatv2_attention(ctx: Context) -> Case:
    g, (h, d) = ctx.graph, _heads(ctx)
    x_dst = ctx.features(g.num_dst_nodes, h, d)
    x_src = ctx.features(g.num_src_nodes, h, d)
    att = ctx.features(h, d)
    impls = fastgnn_implementations("gatv2_attention", ctx,
                                    lambda: fastgnn.ops.gatv2_attention(g, x_dst, x_src, att))

    def logits():
        hidden = torch.nn.functional.leaky_relu(x_dst[ctx.dst] + x_src[ctx.src], 0.2)
        return (hidden * att).sum(-1)

    impls.append(_guarded("pyg-ops", BASELINE, "torch_geometric",
                          lambda: _pyg_attend(ctx, logits, lambda: x_src[ctx.src])))
    return Case([x_dst, x_src, att],
                lambda: reference.gatv2_attention(g, x_dst, x_src, att), impls)


@register("gat-attention", "op")
def gat_attention(ctx: Context) -> Case:
    g, (h, d) = ctx.graph, _heads(ctx)
    x_src = ctx.features(g.num_src_nodes, h, d)
    alpha_src = ctx.features(g.num_src_nodes, h)
    alpha_dst = ctx.features(g.num_dst_nodes, h)
    impls = fastgnn_implementations(
        "gat_attention", ctx, lambda: fastgnn.ops.gat_attention(g, x_src, alpha_src, alpha_dst))

    def logits():
        return torch.nn.functional.leaky_relu(alpha_src[ctx.src] + alpha_dst[ctx.dst], 0.2)

    impls.append(_guarded("pyg-ops", BASELINE, "torch_geometric",
                          lambda: _pyg_attend(ctx, logits, lambda: x_src[ctx.src])))
    return Case([x_src, alpha_src, alpha_dst],
                lambda: reference.gat_attention(g, x_src, alpha_src, alpha_dst), impls)


@register("graph-attention", "op")
def graph_attention(ctx: Context) -> Case:
    g, (h, d) = ctx.graph, _heads(ctx)
    q = ctx.features(g.num_dst_nodes, h, d)
    k = ctx.features(g.num_src_nodes, h, d)
    v = ctx.features(g.num_src_nodes, h, d)
    impls = fastgnn_implementations("graph_attention", ctx,
                                    lambda: fastgnn.ops.graph_attention(g, q, k, v))
    impls.append(_guarded("pyg-ops", BASELINE, "torch_geometric", lambda: _pyg_attend(
        ctx, lambda: (q[ctx.dst] * k[ctx.src]).sum(-1) * d ** -0.5, lambda: v[ctx.src])))
    return Case([q, k, v], lambda: reference.graph_attention(g, q, k, v), impls)


# ---- the reordering flag: an op on the graph as stored against Graph.reordered(method) -----------
def _flagged_implementation(g: Graph, method: str, op) -> Implementation:
    """``op`` on ``g.reordered(method)``: its calls include the gathers of their inputs and
    outputs; ``setup_ms`` is the one-off build of the order and the relabelled copy (timed on
    its own: ``g`` may already cache one from an earlier workload)."""
    setup_ms = None

    def make():  # _guarded calls it at once
        nonlocal setup_ms
        started = time.perf_counter()
        reordering.reorder(g, method)
        measure.sync(g.device)
        setup_ms = (time.perf_counter() - started) * 1e3
        flagged = g.reordered(method)
        return (lambda: op(flagged)), None
    impl = _guarded(f"reordered-{method}", FASTGNN, "fastgnn.Graph.reordered", make)
    impl.setup_ms = setup_ms
    return impl


def _reorder_flag_case(ctx: Context, op_name: str) -> Case:
    """GCN SpMM ("spmm", norm "both") or Graph Transformer attention ("graph-attention") on
    the graph as stored (the baseline) and flagged with each reordering method."""
    g = ctx.graph
    if op_name == "spmm":
        x = ctx.features(g.num_src_nodes, ctx.width)
        inputs = [x]
        op = lambda graph: fastgnn.ops.spmm(graph, x, norm="both")  # noqa: E731
        oracle = lambda: reference.spmm(g, x, norm="both")  # noqa: E731
    else:
        h, d = _heads(ctx)
        inputs = [ctx.features(g.num_dst_nodes, h, d), ctx.features(g.num_src_nodes, h, d),
                  ctx.features(g.num_src_nodes, h, d)]
        op = lambda graph: fastgnn.ops.graph_attention(graph, *inputs)  # noqa: E731
        oracle = lambda: reference.graph_attention(g, *inputs)  # noqa: E731
    impls = [Implementation("stored-order", BASELINE, lambda: op(g), "fastgnn.ops")]
    impls += [_flagged_implementation(g, method, op) for method in reordering.METHODS]
    return Case(inputs, oracle, impls)


for _op in ("spmm", "graph-attention"):
    register(f"reorder-flag-{_op}", "op", in_default_suite=False)(
        functools.partial(_reorder_flag_case, op_name=_op))


# ---- layers: stock PyG vs after fastgnn.enable --------------------------------------------------
def _layer_case(ctx: Context, make_layer: Callable[[int, int], torch.nn.Module],
                bipartite_ok: bool = True, grad_check: str = "elementwise") -> Case:
    """The stock layer is the oracle and the baseline; the fastgnn row runs the same layer
    (same parameters) after ``fastgnn.enable``, and is skipped when enable swaps nothing."""
    g = ctx.graph
    torch.manual_seed(ctx.seed)
    stock = make_layer(ctx.width, ctx.heads).to(ctx.device).train()
    x = ctx.features(g.num_src_nodes, ctx.width)
    inputs = [x] + [p for p in stock.parameters() if p.requires_grad]
    if g.is_bipartite and not bipartite_ok:
        reason = f"{type(stock).__name__} does not take bipartite blocks"
        return Case(inputs, lambda: x, [Implementation("pyg-stock", BASELINE, skip=reason)],
                    oracle_name="pyg-stock")

    def layer_input():
        return (x, x[:g.num_dst_nodes]) if g.is_bipartite else x

    edge_index = ctx.edge_index
    run = lambda layer: (lambda: layer(layer_input(), edge_index))  # noqa: E731

    def enabled():
        fast = fastgnn.enable(stock)  # a new object sharing stock's parameters
        if type(fast) is type(stock):
            return None, "no fastgnn adapter"
        return run(fast), None

    impls = [Implementation("pyg-stock", BASELINE, run(stock), "torch_geometric"),
             _guarded("pyg+fastgnn.enable", FASTGNN, "fastgnn.enable", enabled, grad_check)]
    return Case(inputs, run(stock), impls, oracle_name="pyg-stock")


def _pyg_layer(class_name: str, multi_head: bool = False, **kwargs):
    def make(width: int, heads: int) -> torch.nn.Module:
        nn, reason = _optional_module("torch_geometric.nn")
        if nn is None:
            raise ImportError(reason)
        cls = getattr(nn, class_name)
        if multi_head:
            return cls(width, max(1, width // heads), heads=heads, **kwargs)
        return cls(width, width, **kwargs)
    return make


# name: (layer factory, runs on bipartite blocks, how gradients are checked: GATConv's scores
# are rounded differently by the adapter (fastgnn._gat_scores), max aggregation splits ties)
_LAYERS = {
    "gatv2conv": (_pyg_layer("GATv2Conv", multi_head=True, add_self_loops=False, bias=False),
                  True, "elementwise"),
    "transformerconv": (_pyg_layer("TransformerConv", multi_head=True, root_weight=False,
                                   bias=False), True, "elementwise"),
    "gcnconv": (_pyg_layer("GCNConv"), False, "elementwise"),
    "gatconv": (_pyg_layer("GATConv", multi_head=True, add_self_loops=False, bias=False), True,
                "norm"),
    "sageconv-max": (_pyg_layer("SAGEConv", aggr="max"), True, "none"),
}
for _name, (_make, _bipartite_ok, _grad_check) in _LAYERS.items():
    register(_name, "layer")(functools.partial(_layer_case, make_layer=_make,
                                               bipartite_ok=_bipartite_ok,
                                               grad_check=_grad_check))


# ---- layers: stock DGL vs after fastgnn.enable --------------------------------------------------
def _dgl_layer_case(ctx: Context, make_layer: Callable[[int, int], torch.nn.Module],
                    grad_check: str = "elementwise") -> Case:
    """The stock DGL layer on a block of the graph's edges is the oracle and the baseline; the
    fastgnn row runs the same layer (same parameters) after ``fastgnn.enable``."""
    x = ctx.features(ctx.graph.num_src_nodes, ctx.width)
    block, reason = _dgl_graph(ctx)
    if block is None:
        return Case([x], lambda: x, [Implementation("dgl-stock", BASELINE, skip=reason)],
                    oracle_name="dgl-stock")
    torch.manual_seed(ctx.seed)
    stock = make_layer(ctx.width, ctx.heads).to(ctx.device).train()
    run = lambda layer: (lambda: layer(block, x))  # noqa: E731

    def enabled():
        fast = fastgnn.enable(stock)  # a new object sharing stock's parameters
        if type(fast) is type(stock):
            return None, "no fastgnn adapter"
        _check_fused(lambda: fast(block, x))
        return run(fast), None

    impls = [Implementation("dgl-stock", BASELINE, run(stock), "dgl"),
             _guarded("dgl+fastgnn.enable", FASTGNN, "fastgnn.enable", enabled, grad_check)]
    return Case([x] + [p for p in stock.parameters() if p.requires_grad], run(stock), impls,
                oracle_name="dgl-stock")


def _dgl_layer(class_name: str, multi_head: bool = False, *args, **kwargs):
    def make(width: int, heads: int) -> torch.nn.Module:
        cls = getattr(importlib.import_module("dgl.nn"), class_name)
        if multi_head:
            return cls(width, max(1, width // heads), heads, *args, **kwargs)
        return cls(width, width, *args, **kwargs)
    return make


# name: (layer factory, how gradients are checked, as in _LAYERS)
_DGL_LAYERS = {
    # GraphConv without weight and bias: the normalised propagation alone
    "dgl-graphconv": (_dgl_layer("GraphConv", weight=False, bias=False,
                                 allow_zero_in_degree=True), "elementwise"),
    "dgl-gatconv": (_dgl_layer("GATConv", True, allow_zero_in_degree=True), "norm"),
    "dgl-gatv2conv": (_dgl_layer("GATv2Conv", True, allow_zero_in_degree=True), "elementwise"),
    "dgl-dotgatconv": (_dgl_layer("DotGatConv", True, allow_zero_in_degree=True), "elementwise"),
    "dgl-sageconv-pool": (_dgl_layer("SAGEConv", False, "pool"), "elementwise"),
}
for _name, (_make, _grad_check) in _DGL_LAYERS.items():
    register(_name, "layer")(functools.partial(_dgl_layer_case, make_layer=_make,
                                               grad_check=_grad_check))
