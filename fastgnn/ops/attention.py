"""Fused graph attention: GAT, GATv2 and dot-product (Graph Transformer) attention.

The native ops stream each destination's in-edges once with an online softmax and save only
the per-(destination, head) log-sum-exp; nothing edge-sized is saved for the backward, and no
E x H x D tensor is ever built. The backward recomputes the logits from the log-sum-exp. On
CUDA it keeps an E x H scalar scratch between its two passes, freed on return: GATv2's and the
Graph Transformer's destination pass leaves each (edge, head)'s logit gradient and weight
(8 bytes) for the source pass over the transposed CSR, and GAT's source pass leaves each
edge's pre-activation gradient for its destination pass (on the CPU too; the CPU kernels of
GATv2 and the Graph Transformer recompute the logits, in one fused pass on symmetric graphs).
Attention dropout uses a counter-based hash of (seed, offset, CSR edge, head), so the backward
regenerates the mask; ``dropout_mask`` returns it.
Eager calls draw the seed on the host; while a CUDA graph is captured or torch.compile traces,
it is drawn on the device and the kernels read it (see ``_draw_seed``).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from fastgnn import _library, _native, _validate, backends, reference, reordering, tuning
from fastgnn.graph import Graph
from fastgnn.ops import wsb_attention
from fastgnn.ops._common import (acc_dtype, check_graph, edge_perm_index, forward_fake,
                                   wants_grad)


def _check_heads(name: str, value: torch.Tensor, rows: int, g: Graph, rows_name: str,
                 heads: Optional[int] = None, dim: Optional[int] = None) -> None:
    _validate.node_features(name, value, rows, g.device, rows_name, dim=3)
    if (heads is not None and value.shape[1] != heads) or (dim is not None and value.shape[2] != dim):
        raise ValueError(f"{name} must have shape [{rows}, {heads}, {dim}], got {list(value.shape)}")


def _check_edge_term(edge_term, g: Graph, heads: int, dim: int) -> None:
    if edge_term is None:
        return
    _validate.float_tensor("edge_term", edge_term)
    if edge_term.device != g.device:
        raise ValueError(f"edge_term is on {edge_term.device} but the graph is on {g.device}")
    if tuple(edge_term.shape) != (g.num_edges, heads, dim):
        raise ValueError(f"edge_term must have shape [{g.num_edges}, {heads}, {dim}], got "
                         f"{list(edge_term.shape)}")


def check_dropout(dropout: float) -> None:
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")


@reordering.in_caller_order("x_dst", "x_src")
def gatv2_attention(g: Graph, x_dst: torch.Tensor, x_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2, dropout: float = 0.0, *,
                    edge_term: Optional[torch.Tensor] = None) -> torch.Tensor:
    """GATv2 attention, PyG's GATv2Conv semantics, fused: ``[T,H,D], [S,H,D], [H,D] -> [T,H,D]``.

    ``e_ij = att_h . LeakyReLU(x_dst[i,h] + x_src[j,h] (+ edge_term[e,h]))``, softmax over the
    in-edges of i, ``out[i,h] = sum_j alpha_ij x_src[j,h]``. Attention dropout applies when
    ``dropout > 0`` (callers pass 0 in eval mode). ``edge_term``: ``[E,H,D]``, input edge order.
    """
    check_graph(g)
    _validate.node_features("x_src", x_src, g.num_src_nodes, g.device, "num_src_nodes", dim=3)
    heads, dim = x_src.shape[1], x_src.shape[2]
    _check_heads("x_dst", x_dst, g.num_dst_nodes, g, "num_dst_nodes", heads, dim)
    _validate.float_tensor("att", att)
    if tuple(att.shape) != (heads, dim) or att.device != g.device:
        raise ValueError(f"att must have shape [{heads}, {dim}] on {g.device}, got "
                         f"{list(att.shape)} on {att.device}")
    _check_edge_term(edge_term, g, heads, dim)
    _check_same_dtype("x_src", x_src, x_dst=x_dst, att=att, edge_term=edge_term)
    check_dropout(dropout)
    _check_negative_slope(negative_slope)
    impl = backends.select("gatv2_attention", x_src.device)
    return impl.fn(g, x_dst, x_src, att, negative_slope=float(negative_slope),
                   dropout=float(dropout), edge_term=edge_term)


def _check_same_dtype(reference_name: str, reference_value: torch.Tensor, **others) -> None:
    """Features combined in one kernel share a dtype: a TypeError naming the odd one out."""
    for name, value in others.items():
        if value is not None and value.dtype != reference_value.dtype:
            raise TypeError(f"{name} has dtype {value.dtype} but {reference_name} has "
                            f"{reference_value.dtype}; cast them to one dtype")


def _check_negative_slope(negative_slope) -> None:
    if not isinstance(negative_slope, (int, float)) or isinstance(negative_slope, bool):
        raise TypeError(f"negative_slope must be a float, got {type(negative_slope).__name__}")


def _check_node_scores(name: str, value, rows: int, heads: int, g: Graph, rows_name: str) -> None:
    _validate.node_features(name, value, rows, g.device, rows_name, dim=2)
    if value.shape[1] != heads:
        raise ValueError(f"{name} must have shape [{rows}, {heads}], got {list(value.shape)}")


@reordering.in_caller_order("x_src", "alpha_src", "alpha_dst")
def gat_attention(g: Graph, x_src: torch.Tensor, alpha_src: torch.Tensor,
                  alpha_dst: torch.Tensor, negative_slope: float = 0.2, dropout: float = 0.0, *,
                  alpha_edge: Optional[torch.Tensor] = None) -> torch.Tensor:
    """GAT (v1) attention, PyG's GATConv semantics, fused: ``[S,H,D], [S,H], [T,H] -> [T,H,D]``.

    ``e_ij = LeakyReLU(alpha_src[j,h] + alpha_dst[i,h] (+ alpha_edge[e,h]))``, softmax over the
    in-edges of i, ``out[i,h] = sum_j a_ij x_src[j,h]``; destinations without in-edges get 0.
    ``alpha_src``/``alpha_dst`` are the per-node attention scores (``a_l . W h_j`` and
    ``a_r . W h_i``); ``alpha_edge [E,H]`` (input edge order) is PyG's edge_dim term.
    Attention dropout applies when ``dropout > 0`` (callers pass 0 in eval mode).
    """
    check_graph(g)
    _validate.node_features("x_src", x_src, g.num_src_nodes, g.device, "num_src_nodes", dim=3)
    heads = x_src.shape[1]
    _check_node_scores("alpha_src", alpha_src, g.num_src_nodes, heads, g, "num_src_nodes")
    _check_node_scores("alpha_dst", alpha_dst, g.num_dst_nodes, heads, g, "num_dst_nodes")
    if alpha_edge is not None:
        _validate.float_tensor("alpha_edge", alpha_edge)
        if alpha_edge.device != g.device:
            raise ValueError(f"alpha_edge is on {alpha_edge.device} but the graph is on {g.device}")
        if tuple(alpha_edge.shape) != (g.num_edges, heads):
            raise ValueError(f"alpha_edge must have shape [{g.num_edges}, {heads}], got "
                             f"{list(alpha_edge.shape)}")
    _check_same_dtype("x_src", x_src, alpha_src=alpha_src, alpha_dst=alpha_dst,
                      alpha_edge=alpha_edge)
    check_dropout(dropout)
    _check_negative_slope(negative_slope)
    impl = backends.select("gat_attention", x_src.device)
    return impl.fn(g, x_src, alpha_src, alpha_dst, negative_slope=float(negative_slope),
                   dropout=float(dropout), alpha_edge=alpha_edge)


@reordering.in_caller_order("q", "k", "v")
def graph_attention(g: Graph, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: Optional[float] = None, dropout: float = 0.0, *,
                    edge_term: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Dot-product graph attention, PyG's TransformerConv semantics, fused.

    ``q [T,H,D]`` on destinations, ``k, v [S,H,D]`` on sources; ``e_ij = scale * q[i].k[j]``
    (scale defaults to 1/sqrt(D)), softmax over the in-edges of i, ``out[i] = sum alpha v[j]``.
    ``edge_term [E,H,D]`` (input edge order) is added to keys and values.
    """
    check_graph(g)
    _validate.node_features("k", k, g.num_src_nodes, g.device, "num_src_nodes", dim=3)
    heads, dim = k.shape[1], k.shape[2]
    _check_heads("v", v, g.num_src_nodes, g, "num_src_nodes", heads, dim)
    _check_heads("q", q, g.num_dst_nodes, g, "num_dst_nodes", heads, dim)
    _check_edge_term(edge_term, g, heads, dim)
    _check_same_dtype("k", k, q=q, v=v, edge_term=edge_term)
    check_dropout(dropout)
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if scale is None and dim == 0:
        scale = 1.0  # no features: every logit is 0 whatever the scale (1/sqrt(0) is not one)
    impl = backends.select("graph_attention", q.device)
    return impl.fn(g, q, k, v, scale=scale, dropout=float(dropout), edge_term=edge_term)


# ---- native implementation ---------------------------------------------------------------------
# Degree-aware launch plans (CUDA): "rows" gives every destination one warp per head, in row
# order (neighbouring rows share sources on graphs such as road networks); q<quantile>w<warps>
# gives destinations above that in-degree quantile `warps` warps each and the others one, both
# lists ordered by falling degree. tuning.choose times each plan once per graph shape: the
# forward alone, or forward and backward when a backward will run (the backward's passes favour
# other plans, e.g. Flickr GATv2 4x64: q0.9w8 is the faster forward, q0.99w8 the faster pair).
# On the H100 "rows" won on roads-ny, q0.5-0.75 on tolokers, q0.9-0.99 on ogbn-arxiv;
# the default, used untuned, is within 10-20% of the best on all three.
LAUNCH_PLANS = {"rows": None, "q0.5w8": (0.5, 8), "q0.75w8": (0.75, 8), "q0.9w8": (0.9, 8),
                "q0.99w8": (0.99, 8)}
# GAT (v1) also splits its heaviest rows over several 8-warp blocks (32 or 64 warps a row),
# merging the blocks' partial softmax states: one block per row left ogbn-arxiv's 13,155-edge
# hub setting the length of the whole forward. Only the top 1% of rows: each split row takes
# a workspace of pieces x H x D statistics.
SPLIT_PLANS = {"q0.99w32": (0.99, 32), "q0.99w64": (0.99, 64)}
_GAT_PLANS = {**LAUNCH_PLANS, **SPLIT_PLANS}
DEFAULT_PLAN = "q0.9w8"


def launch_plans(op_name: str) -> dict:
    """The launch plans op ``op_name`` (e.g. ``"gat_attention"``) is tuned over."""
    return _GAT_PLANS if op_name == "gat_attention" else LAUNCH_PLANS


_SEED_BOUND = 2**62


def draw_seed_tensor(device: torch.device) -> torch.Tensor:
    """A dropout seed for the ops' ``seed_tensor``: ``[1]`` int64 drawn on ``device`` by
    torch.randint. A captured CUDA graph draws it anew at each replay (torch registers the
    default CUDA generator with the graph) and a compiled graph at each call."""
    return torch.randint(0, _SEED_BOUND, (1,), dtype=torch.int64, device=device)


def _draw_seed(dropout: float, device: torch.device) -> Tuple[int, Optional[torch.Tensor], int]:
    """(seed, seed_tensor, offset) for one forward. Eager: the seed is drawn on the host from
    torch's default CPU generator, so torch.manual_seed makes runs reproducible without a device
    sync. While a CUDA graph is captured or torch.compile traces, a host value would be frozen
    into the graph (one mask for every replay or call): the seed is then a seed_tensor."""
    if dropout == 0:
        return 0, None, 0
    if _library.is_recording(device):
        return 0, draw_seed_tensor(device), 0
    return int(torch.randint(0, _SEED_BOUND, (), dtype=torch.int64).item()), None, 0


def structure_args(g: Graph, needs_grad: bool):
    """Graph tensors the ops take: CSR, edge_perm and the transpose (when a backward will run;
    on a symmetric graph only t_perm, the CSR being its own transpose)."""
    transposed = (None, None, None)
    if needs_grad:
        t_rowptr, t_col, t_perm = g.transpose()
        transposed = (None, None, t_perm) if g.is_symmetric else (t_rowptr, t_col, t_perm)
    return (g.rowptr, g.col, edge_perm_index(g)) + transposed


def plan_buckets(g: Graph, plan: str, direction: str = "in"):
    """(light_rows, heavy_rows, heavy_warps) for a launch plan over the destinations by
    in-degree, or (``direction="out"``) over the sources by out-degree; no buckets on CPU."""
    spec = _GAT_PLANS[plan]  # every op's plans are among the GAT op's
    if spec is None or g.device.type != "cuda":
        return None, None, 1
    quantile, warps = spec
    _, light, heavy = g.degree_buckets(quantile, by_degree=True, direction=direction)
    return (light, heavy, warps) if heavy.numel() else (None, None, 1)


def _launch(op_name: str, g: Graph, graph: tuple, args: tuple):
    """The tuned launch arguments of op ``op_name``'s native forward ``(*graph, *args,
    *launch)``: ``plan_buckets`` of :func:`launch_plan`."""
    return plan_buckets(g, launch_plan(op_name, g, graph, args))


def launch_plan(op_name: str, g: Graph, graph: tuple, args: tuple) -> str:
    """The tuned launch plan of op ``op_name``'s native forward ``(*graph, *args, *launch)``:
    its three features are ``args[:3]`` and its width ``args[1]``'s heads x head dim. With the
    transposed graph in ``graph`` (a backward will run) the plans are timed forward and
    backward."""
    if g.device.type != "cuda":
        return DEFAULT_PLAN
    training = graph[5] is not None  # t_perm
    forward, backward = _NATIVE[op_name]

    def candidate(plan):
        launch = plan_buckets(g, plan)

        def go():
            with torch.no_grad():
                out, lse = forward(*graph, *args, *launch)
                if training:
                    backward(torch.ones_like(out), out, lse, *graph, *args, *launch)
        return go
    width = args[1].shape[1] * args[1].shape[2]
    timed_op = op_name + ("_fwd_bwd" if training else "")
    return tuning.choose(timed_op, g, width, args[1].dtype, args[1].device,
                         lambda: {name: candidate(name) for name in launch_plans(op_name)},
                         DEFAULT_PLAN)


def native_forward(op_name: str, g: Graph, features: tuple, coef: float, dropout: float,
                   grad: bool, seed_tensor: Optional[torch.Tensor] = None):
    """``(out, lse)`` of op ``op_name``'s native forward on ``features`` (the three features
    and the edge term, in the op's order) under the tuned launch plan; ``grad``: a backward
    will run. ``seed_tensor``: the dropout seed, drawn by the caller (see
    :func:`draw_seed_tensor`); None: drawn here."""
    seed, seed_tensor, offset = (_draw_seed(dropout, features[1].device) if seed_tensor is None
                                 else (0, seed_tensor, 0))
    graph = structure_args(g, grad)
    args = features + (coef, dropout, seed, seed_tensor, offset)
    launch = _launch(op_name, g, graph, args)
    return _NATIVE[op_name][0](*graph, *args, *launch)


def native_backward(op_name: str, g: Graph, grad_out, out, lse, features: tuple, coef: float,
                    dropout: float = 0.0, seed_tensor: Optional[torch.Tensor] = None):
    """The native backward of a :func:`native_forward` with ``grad`` (and, with dropout, the
    ``seed_tensor`` it was given), for callers that run it themselves (fastgnn.pyg.compiled):
    the gradients of the features."""
    graph = structure_args(g, True)
    args = features + (coef, dropout, 0, seed_tensor, 0)
    launch = _launch(op_name, g, graph, args)  # the forward's plan, remembered by the tuner
    return _NATIVE[op_name][1](grad_out.contiguous(), out, lse, *graph, *args, *launch)


def _native_gatv2(g: Graph, x_dst, x_src, att, negative_slope: float, dropout: float,
                  edge_term) -> torch.Tensor:
    features = (x_dst, x_src, att, edge_term)
    return native_forward("gatv2_attention", g, features, negative_slope, dropout,
                          wants_grad(*features))[0]


def _native_gat(g: Graph, x_src, alpha_src, alpha_dst, negative_slope: float, dropout: float,
                alpha_edge) -> torch.Tensor:
    features = (alpha_dst, x_src, alpha_src, alpha_edge)
    return native_forward("gat_attention", g, features, negative_slope, dropout,
                          wants_grad(*features))[0]


def _native_graph_attention(g: Graph, q, k, v, scale: Optional[float], dropout: float,
                            edge_term) -> torch.Tensor:
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    features = (q, k, v, edge_term)
    grad = wants_grad(*features)
    if wsb_attention.applies(g, q, k, v, edge_term, dropout):
        out = _wsb_graph_attention(g, q, k, v, scale, grad)
        if out is not None:
            return out
    return native_forward("graph_attention", g, features, scale, dropout, grad)[0]


def _wsb_graph_attention(g: Graph, q, k, v, scale: float, grad: bool) -> Optional[torch.Tensor]:
    """The forward on the WSB layout (the backward's destination pass too, its source pass on
    CSR) when the graph's attention format policy picks it (``fastgnn.ops.wsb_attention``),
    else None."""
    args = (q, k, v, None, scale, 0.0, 0, None, 0)
    graph = structure_args(g, grad)
    # The CSR source pass (and the CSR backward where the layout cannot serve) runs under the
    # plan tuned for the CSR pair, as it would after a CSR forward.
    launch = _launch("graph_attention", g, graph, args) if grad else (None, None, 1)

    def csr_pass():  # what the tuner times WSB against: this call's CSR forward (and backward)
        forward, backward = _NATIVE["graph_attention"]
        csr_launch = _launch("graph_attention", g, graph, args)
        out, lse = forward(*graph, *args, *csr_launch)
        if grad:
            backward(torch.ones_like(out), out, lse, *graph, *args, *csr_launch)
    if not wsb_attention.chosen(g, q, k, v, scale, graph, launch, csr_pass):
        return None
    return wsb_attention.forward(g, q, k, v, scale, graph, launch)


@reordering.in_caller_order(restore=False)
def dropout_mask(g: Graph, heads: int, dropout: float, seed: int, offset: int = 0) -> torch.Tensor:
    """The [E, H] 0/1 keep-mask (input edge order, float32) the native kernels apply for this
    seed and offset: ``reference.*_attention(..., dropout_mask=...)`` then matches them."""
    mask_csr = _library.op("attention_dropout_mask")(g.col.cpu(), heads, float(dropout), seed,
                                                     offset).to(g.device, torch.float32)
    if g.edge_perm is None:
        return mask_csr
    mask = torch.empty_like(mask_csr)
    mask[g.edge_perm.to(torch.int64)] = mask_csr
    return mask


# ---- fake kernels of the native ops (their autograd is in C++: csrc/attention_autograd.cpp) ------
# Forward inputs: rowptr, col, edge_perm, t_rowptr, t_col, t_perm, (3 features), edge_term,
# slope|scale, dropout, seed, seed_tensor, offset, light_rows, heavy_rows, heavy_warps. GAT's
# features are (alpha_dst, x_src, alpha_src) and its edge term alpha_edge: the same layout.
def _forward_fake(rowptr, col, edge_perm, t_rowptr, t_col, t_perm, a, b, c, edge_term, coef,
                  dropout, seed, seed_tensor, offset, light, heavy, heavy_warps):
    return forward_fake(a, b)


def _backward_fake(grad_out, out, lse, rowptr, col, edge_perm, t_rowptr, t_col, t_perm, a, b, c,
                   edge_term, coef, dropout, seed, seed_tensor, offset, light, heavy,
                   heavy_warps):
    grad_edge = edge_term.new_empty(edge_term.shape) if edge_term is not None else \
        b.new_empty((0,), dtype=acc_dtype(b.dtype))
    return a.new_empty(a.shape), b.new_empty(b.shape), c.new_empty(c.shape), grad_edge


def _mask_fake(col, heads, dropout, seed, offset):
    return col.new_empty((col.shape[0], heads), dtype=torch.bool)


def _forward_and_backward(prefix: str):
    return _library.op(f"{prefix}_forward").default, _library.op(f"{prefix}_backward").default


_NATIVE = {}  # op name: its native (forward, backward)
if _native.has_op("gatv2_forward"):
    _NATIVE["gatv2_attention"] = _forward_and_backward("gatv2")
    _NATIVE["graph_attention"] = _forward_and_backward("graph_attention")
    for _name in ("gatv2", "graph_attention"):
        _library.register_fake(f"{_name}_forward", _forward_fake)
        _library.register_fake(f"{_name}_backward", _backward_fake)
    _library.register_fake("attention_dropout_mask", _mask_fake)
    backends.register("gatv2_attention", "native", _native.devices(), _native_gatv2, priority=10)
    backends.register("graph_attention", "native", _native.devices(), _native_graph_attention,
                      priority=10)


def _gat_source_fake(grad_out, lse, delta, rowptr, col, src_perm, edge_perm, alpha_dst, x_rows,
                     alpha_src_rows, alpha_edge, slope, dropout, seed, seed_tensor, offset,
                     row_begin, light, heavy, heavy_warps, grad_logit, logit_slot=None):
    return x_rows.new_empty(x_rows.shape), alpha_src_rows.new_empty(alpha_src_rows.shape)


def _gat_destination_fake(rowptr, grad_logit, edge_perm, with_edge, dtype, light, heavy,
                          heavy_warps):
    edges, heads = grad_logit.shape
    return (grad_logit.new_empty((rowptr.shape[0] - 1, heads), dtype=dtype),
            grad_logit.new_empty((edges, heads) if with_edge else (0,), dtype=dtype))


if _native.has_op("gat_forward"):
    _NATIVE["gat_attention"] = _forward_and_backward("gat")
    _library.register_fake("gat_forward", _forward_fake)
    _library.register_fake("gat_backward", _backward_fake)
    _library.register_fake("gat_source_backward", _gat_source_fake)
    _library.register_fake("gat_destination_backward", _gat_destination_fake)
    _library.register_fake("attention_delta_backward", lambda grad_out, out: out.new_empty(
        out.shape[:2], dtype=acc_dtype(out.dtype)))
    backends.register("gat_attention", "native", _native.devices(), _native_gat, priority=10)

backends.register("gatv2_attention", "reference", ("cpu", "cuda"), reference.gatv2_attention,
                  priority=-10)
backends.register("graph_attention", "reference", ("cpu", "cuda"), reference.graph_attention,
                  priority=-10)
backends.register("gat_attention", "reference", ("cpu", "cuda"), reference.gat_attention,
                  priority=-10)
