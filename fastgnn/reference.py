"""Pure-PyTorch implementations of every fastgnn op: the test oracle and the ``reference``
backend. They favour clarity over speed and materialise edge-sized tensors freely.

Edge-indexed inputs (``edge_weight``, ``edge_term``, ``dropout_mask``) follow the user's edge
order, the order of the ``edge_index`` the Graph was built from.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from fastgnn._minmax_unwon import route_unwon_to_first
from fastgnn.cbsr import CBSR
from fastgnn.cbsr import index_dtype as cbsr_index_dtype
from fastgnn.graph import Graph


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _csr_edges(g: Graph) -> Tuple[torch.Tensor, torch.Tensor]:
    return g.col.to(torch.int64), g.row.to(torch.int64)


def _user_to_csr(g: Graph, values: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if values is None else g.edge_values_to_csr(values)


def spmm(g: Graph, x: torch.Tensor, norm: str = "none", edge_weight: Optional[torch.Tensor] = None,
         reduce: str = "sum", edge_values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``out[i] = sum_j c_ij * w_ij * x[j]`` over edges j->i.

    ``c_ij`` follows ``norm`` and ``reduce`` (see ``Graph.norm_values``); ``w`` is
    ``edge_weight`` (1 when None). ``edge_values`` (input edge order) replaces ``c * w``
    entirely: precomputed coefficients, used without renormalising.
    """
    src, dst = _csr_edges(g)
    acc = _acc_dtype(x.dtype)
    if edge_values is not None:
        coef = _user_to_csr(g, edge_values).to(acc)
    else:
        coef = g.norm_values(norm, reduce, dtype=acc)
        if edge_weight is not None:
            w = _user_to_csr(g, edge_weight).to(acc)
            coef = w if coef is None else coef * w
    msg = x.to(acc)[src]
    if coef is not None:
        msg = msg * coef.view(-1, *([1] * (x.dim() - 1)))
    out = torch.zeros((g.num_dst_nodes,) + tuple(x.shape[1:]), dtype=acc, device=x.device)
    return out.index_add_(0, dst, msg).to(x.dtype)


def aggregate(g: Graph, x: torch.Tensor, reduce: str = "sum",
              edge_weight: Optional[torch.Tensor] = None,
              ties: str = "smallest-source", nan: str = "propagate") -> torch.Tensor:
    """Sum, mean, min or max of in-neighbour features (times ``edge_weight``: ``[E]``, or
    ``[E, H]`` per head with ``x`` ``[N, H, ...]``, input edge order); isolated destinations
    get zeros.

    Min/max are a gather at the winning message, so the whole gradient goes to that message's
    source and edge (ties: the smallest source, then the earliest duplicate edge; with
    ``ties="first-edge"``/``"last-edge"`` the smallest/largest input edge id), not split
    among tied messages as scatter_reduce's is. ``nan="ignore"``: DGL's rule (see
    ``fastgnn.ops.aggregate``), entries no message won holding the identity.
    """
    if reduce in ("sum", "mean"):
        if edge_weight is None or edge_weight.dim() == 1:
            return spmm(g, x, reduce=reduce, edge_weight=edge_weight)
        heads = edge_weight.shape[1]
        return torch.stack([spmm(g, x[:, h], reduce=reduce, edge_weight=edge_weight[:, h])
                            for h in range(heads)], dim=1)
    with torch.no_grad():
        _, arg = _reduce_with_arg(g, _messages(g, x, edge_weight), reduce, ties, nan)
    won = _winning_messages(g, x, edge_weight, arg)
    if nan == "propagate":
        return torch.where(arg >= 0, won, torch.zeros_like(won))
    out = torch.where(arg >= 0, won, torch.full_like(won, _identity(reduce)))
    weight = None if edge_weight is None else edge_weight.reshape(g.num_edges, -1).to(x.dtype)
    flat = route_unwon_to_first(out.reshape(out.shape[0], -1), arg.reshape(out.shape[0], -1) < 0,
                                x.reshape(x.shape[0], -1), weight)
    return flat.reshape(out.shape)


def _identity(reduce: str) -> float:
    return float("-inf") if reduce == "max" else float("inf")


def _winning_messages(g: Graph, x: torch.Tensor, edge_weight: Optional[torch.Tensor],
                      arg: torch.Tensor) -> torch.Tensor:
    """The message of the winning CSR position ``arg[i, ...]`` at each output entry (0 where
    it is -1), computed from the winners alone, so that no gradient path runs through the
    messages that lost (a NaN or infinite one times its zero gradient would make the weight's
    gradient NaN)."""
    src, _ = _csr_edges(g)
    position = arg.clamp(min=0)
    won = torch.gather(x, 0, src[position])
    won = torch.where(arg >= 0, won, torch.zeros_like(won))
    if edge_weight is None:
        return won
    w = _user_to_csr(g, edge_weight).to(x.dtype)
    if x.dim() > 1:  # one weight per edge (and head) over the head's features
        heads = edge_weight.shape[1] if edge_weight.dim() > 1 else 1
        w = w.reshape((g.num_edges, heads) + (1,) * (x.dim() - 2))
        w = w.expand((g.num_edges,) + tuple(x.shape[1:]))
    return won * torch.gather(w, 0, position)


def _messages(g: Graph, x: torch.Tensor, edge_weight: Optional[torch.Tensor]) -> torch.Tensor:
    """Per-edge messages in CSR order: ``x[src]`` times the edge's weight (per head), in x's
    dtype."""
    src, _ = _csr_edges(g)
    msg = x[src]
    if edge_weight is None:
        return msg
    w = _user_to_csr(g, edge_weight).to(x.dtype)
    if x.dim() == 1:
        return msg * w.reshape(g.num_edges)
    heads = edge_weight.shape[1] if edge_weight.dim() > 1 else 1
    return msg * w.reshape((g.num_edges, heads) + (1,) * (x.dim() - 2))


def aggregate_with_arg(g: Graph, x: torch.Tensor, reduce: str,
                       edge_weight: Optional[torch.Tensor] = None,
                       ties: str = "smallest-source",
                       nan: str = "propagate") -> Tuple[torch.Tensor, torch.Tensor]:
    """Min or max aggregation and, per output entry, the winning source index, or with
    ``edge_weight`` the winning edge's CSR position.

    Ties go to the smallest source index (then the earliest duplicate edge: the smallest CSR
    position; ``ties="first-edge"``/``"last-edge"``: the smallest/largest input edge id); NaN
    wins (and propagates) like ``torch.scatter_reduce(..., "amin"/"amax")``. Isolated
    destinations: value 0, index -1. ``nan="ignore"``: DGL's rule, -1 where no message won
    and the identity as the value.
    """
    out, arg = _reduce_with_arg(g, _messages(g, x, edge_weight), reduce, ties, nan)
    if edge_weight is None:
        src, _ = _csr_edges(g)
        arg = torch.where(arg >= 0, src[arg.clamp(min=0)], arg)
    return out, arg


def _reduce_with_arg(g: Graph, msg: torch.Tensor, reduce: str, ties: str = "smallest-source",
                     nan: str = "propagate") -> Tuple[torch.Tensor, torch.Tensor]:
    """Min/max of CSR-ordered messages ``msg`` per destination and the winning CSR position
    (among ties the smallest, or the one of the smallest or largest input edge id; -1 and
    value 0 where there is none). ``nan="ignore"``: DGL's rule, NaN messages never win and
    an entry starts from the identity, which an equal message wins only under "last-edge";
    -1 and the identity where no message wins."""
    if reduce not in ("min", "max"):
        raise ValueError(f"reduce must be 'min' or 'max', got {reduce!r}")
    _, dst = _csr_edges(g)
    width = msg.shape[1:]
    index = dst.view(-1, *([1] * len(width))).expand_as(msg)
    kind = "amax" if reduce == "max" else "amin"
    if nan == "ignore":
        identity = _identity(reduce)
        out = torch.full((g.num_dst_nodes,) + tuple(width), identity, dtype=msg.dtype,
                         device=msg.device)
        out = out.scatter_reduce(0, index, torch.where(msg.isnan(), identity, msg), kind)
        won = msg == out[dst]  # false for NaN
        if ties != "last-edge":  # a strict comparison: a message equal to the start never wins
            won &= msg != identity
    else:
        out = torch.zeros((g.num_dst_nodes,) + tuple(width), dtype=msg.dtype, device=msg.device)
        out = out.scatter_reduce(0, index, msg, kind, include_self=False)
        # NaN matches NaN
        won = (msg == out[dst]) | (msg.isnan() & out[dst].isnan())
    # Winner: smallest position whose value equals the result. CSR rows hold their sources
    # ascending, duplicates in input order: the smallest source, then the earliest duplicate.
    pos = torch.arange(msg.shape[0], device=msg.device)
    # the rank that picks among ties: the CSR position, or the input edge id (negated for the
    # largest), and back from the picked rank to its position
    if ties == "smallest-source" or g.edge_perm is None:
        rank, position = pos, pos
    else:
        rank, position = g.edge_perm.to(torch.int64), torch.argsort(g.edge_perm)
    if ties == "last-edge":
        rank = -rank
    big = torch.iinfo(torch.int64).max
    shape = (-1,) + (1,) * len(width)
    cand = torch.where(won, rank.view(shape).expand_as(msg),
                       torch.full_like(msg, big, dtype=torch.int64))
    best = torch.full(out.shape, big, dtype=torch.int64, device=msg.device)
    best = best.scatter_reduce(0, index, cand, "amin", include_self=True)
    found = best != big
    best = torch.where(found, best.abs(), 0)  # the picked rank as a position or edge id
    return out, torch.where(found, position[best], torch.full_like(best, -1))


def _segment_softmax(logits: torch.Tensor, dst: torch.Tensor, num_dst: int) -> torch.Tensor:
    """Softmax of [E, H] logits over the edges of each destination."""
    heads = logits.shape[1]
    index = dst.view(-1, 1).expand(-1, heads)
    peak = torch.full((num_dst, heads), float("-inf"), dtype=logits.dtype, device=logits.device)
    peak = peak.scatter_reduce(0, index, logits, "amax", include_self=True)
    weights = torch.exp(logits - peak[dst])
    total = torch.zeros((num_dst, heads), dtype=logits.dtype, device=logits.device)
    total = total.index_add_(0, dst, weights)
    return weights / total[dst]


def edge_softmax(g: Graph, logits: torch.Tensor, norm_by: str = "dst") -> torch.Tensor:
    """Softmax of ``logits`` (``[E, *]``, input edge order) over the in-edges of each
    destination (``norm_by="dst"``) or the out-edges of each source (``"src"``), per trailing
    entry, in the accumulation dtype."""
    src, dst = _csr_edges(g)
    node, count = (dst, g.num_dst_nodes) if norm_by == "dst" else (src, g.num_src_nodes)
    flat = logits.reshape(logits.shape[0], math.prod(logits.shape[1:]))
    probs = _segment_softmax(_user_to_csr(g, flat).to(_acc_dtype(logits.dtype)), node, count)
    return g.edge_values_from_csr(probs).to(logits.dtype).reshape(logits.shape)


def _attend(g: Graph, logits: torch.Tensor, values: torch.Tensor, dropout: float,
            dropout_mask: Optional[torch.Tensor], out_dtype: torch.dtype) -> torch.Tensor:
    """Softmax the [E, H] logits per destination, drop, and sum the [E, H, D] values."""
    _, dst = _csr_edges(g)
    alpha = _segment_softmax(logits, dst, g.num_dst_nodes)
    if dropout_mask is not None:
        alpha = alpha * _user_to_csr(g, dropout_mask).to(alpha.dtype) / (1.0 - dropout)
    elif dropout > 0:
        alpha = torch.nn.functional.dropout(alpha, p=dropout, training=True)
    out = torch.zeros((g.num_dst_nodes,) + tuple(values.shape[1:]), dtype=values.dtype,
                      device=values.device)
    return out.index_add_(0, dst, alpha.unsqueeze(-1) * values).to(out_dtype)


def gatv2_attention(g: Graph, x_dst: torch.Tensor, x_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2, dropout: float = 0.0,
                    edge_term: Optional[torch.Tensor] = None,
                    dropout_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """GATv2 attention (PyG's GATv2Conv): ``e_ij = att . LeakyReLU(x_dst[i] + x_src[j] (+ edge))``,
    softmax over the in-edges of i, ``out[i] = sum_j alpha_ij x_src[j]``.

    Shapes: ``x_dst [T, H, D]``, ``x_src [S, H, D]``, ``att [H, D]``, ``edge_term [E, H, D]``.
    ``dropout_mask [E, H]`` (0/1, input edge order) replaces random attention dropout.
    """
    src, dst = _csr_edges(g)
    acc = _acc_dtype(x_src.dtype)
    xs = x_src.to(acc)
    hidden = x_dst.to(acc)[dst] + xs[src]
    if edge_term is not None:
        hidden = hidden + _user_to_csr(g, edge_term).to(acc)
    hidden = torch.nn.functional.leaky_relu(hidden, negative_slope)
    logits = (hidden * att.to(acc).unsqueeze(0)).sum(-1)
    return _attend(g, logits, xs[src], dropout, dropout_mask, x_src.dtype)


def gat_attention(g: Graph, x_src: torch.Tensor, alpha_src: torch.Tensor,
                  alpha_dst: torch.Tensor, negative_slope: float = 0.2, dropout: float = 0.0,
                  alpha_edge: Optional[torch.Tensor] = None,
                  dropout_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """GAT (v1) attention (PyG's GATConv): ``e_ij = LeakyReLU(alpha_src[j] + alpha_dst[i]
    (+ alpha_edge[e]))``, softmax over the in-edges of i, ``out[i] = sum_j a_ij x_src[j]``.

    Shapes: ``x_src [S, H, D]``, ``alpha_src [S, H]``, ``alpha_dst [T, H]``,
    ``alpha_edge [E, H]``. ``dropout_mask [E, H]`` (0/1, input edge order) replaces random
    attention dropout.
    """
    src, dst = _csr_edges(g)
    acc = _acc_dtype(x_src.dtype)
    logits = alpha_src.to(acc)[src] + alpha_dst.to(acc)[dst]
    if alpha_edge is not None:
        logits = logits + _user_to_csr(g, alpha_edge).to(acc)
    logits = torch.nn.functional.leaky_relu(logits, negative_slope)
    return _attend(g, logits, x_src.to(acc)[src], dropout, dropout_mask, x_src.dtype)


def graph_attention(g: Graph, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: Optional[float] = None, dropout: float = 0.0,
                    edge_term: Optional[torch.Tensor] = None,
                    dropout_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Dot-product graph attention (PyG's TransformerConv): ``e_ij = scale * q[i] . k[j]``,
    softmax over the in-edges of i, ``out[i] = sum_j alpha_ij v[j]``. ``edge_term [E, H, D]``
    is added to keys and values. ``scale`` defaults to ``1/sqrt(D)``.
    """
    src, dst = _csr_edges(g)
    acc = _acc_dtype(v.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    keys, values = k.to(acc)[src], v.to(acc)[src]
    if edge_term is not None:
        term = _user_to_csr(g, edge_term).to(acc)
        keys, values = keys + term, values + term
    logits = (q.to(acc)[dst] * keys).sum(-1) * scale
    return _attend(g, logits, values, dropout, dropout_mask, v.dtype)


def _order_key(x: torch.Tensor) -> torch.Tensor:
    """int64 keys that order like ``x``'s values, with NaN the largest and -0.0 == +0.0
    (csrc/maxk_common.h's rule)."""
    acc = x.to(_acc_dtype(x.dtype))
    acc = torch.where(torch.isnan(acc), torch.full_like(acc, float("nan")), acc) + 0.0
    wide = acc.dtype == torch.float64
    bits = acc.view(torch.int64 if wide else torch.int32).to(torch.int64)
    low_bits = 2**63 - 1 if wide else 2**31 - 1
    return torch.where(bits < 0, bits ^ low_bits, bits)  # negatives: reverse their order


def maxk_cbsr(x: torch.Tensor, k: int) -> CBSR:
    """MaxK nonlinearity into CBSR: the ``k`` largest entries of each row of ``x [N, F]``,
    ties to the smallest column, columns ascending in each row."""
    if not 1 <= k <= x.shape[-1]:
        raise ValueError(f"k must be in [1, {x.shape[-1]}], got {k}")
    # A stable descending sort keeps equal keys in column order: ties go to smaller columns.
    kept = torch.sort(_order_key(x), dim=1, descending=True, stable=True).indices[:, :k]
    columns = kept.sort(dim=1).values
    return CBSR(x.gather(1, columns), columns.to(cbsr_index_dtype(x.shape[1])), x.shape[1],
                _trusted=True)


def maxk(x: torch.Tensor, k: int) -> torch.Tensor:
    """MaxK nonlinearity, dense: keeps the ``k`` largest entries of each row, zeroes the rest
    (the dense view of :func:`maxk_cbsr`)."""
    return maxk_cbsr(x, k).to_dense()


def maxk_spmm(g: Graph, h: CBSR, norm: str = "none", edge_weight: Optional[torch.Tensor] = None,
              reduce: str = "sum", edge_values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """SpMM over CBSR features: ``spmm`` of their dense view."""
    return spmm(g, h.to_dense(), norm=norm, edge_weight=edge_weight, reduce=reduce,
                edge_values=edge_values)


def spmm_snapshots(sg, xs: torch.Tensor, norm: str = "none") -> torch.Tensor:
    """Each snapshot of a ``SnapshotGraph`` window on its own: ``spmm`` over snapshot ``t``'s
    edges (a Graph of its own, its own degrees) applied to ``xs[t]``, stacked."""
    return torch.stack([spmm(sg.snapshot(t), xs[t], norm) for t in range(sg.num_snapshots)])


# ---- neighbour sampling: the kernels' draws replayed in Python integers ----------------------
_MASK64 = 2**64 - 1


def _mix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _draw(seed: int, position: int, d: int) -> int:
    key = _mix64((seed ^ _mix64(position ^ 0x6A09E667F3BCC909)) & _MASK64)
    return _mix64((key + (d + 1) * 0x9E3779B97F4A7C15) & _MASK64)


def _unit(word: int) -> float:
    return ((word >> 11) + 1) * (1.0 / 9007199254740992.0)


def _choose(seed: int, position: int, degree: int, k: int, replace: bool, w) -> list:
    """Offsets into one row, as csrc/sampling_common.h and csrc/cpu/sampling.cpp choose them."""
    import bisect
    import math
    if w is not None and k > 0:
        if replace:
            prefix, total = [], 0.0
            for value in w:
                total += value
                prefix.append(total)
            return [min(bisect.bisect_left(prefix, _unit(_draw(seed, position, j)) * total),
                        degree - 1) for j in range(k)]
        keys = [(math.log(_unit(_draw(seed, position, o))) / w[o], o)
                for o in range(degree) if w[o] > 0]
        keys.sort(key=lambda kv: (-kv[0], kv[1]))
        return [o for _, o in keys[:k]]
    if k == degree and not replace:
        return list(range(k))
    if replace:
        return [(_draw(seed, position, j) * degree) >> 64 for j in range(k)]
    chosen = []
    for d, j in enumerate(range(degree - k, degree)):
        t = (_draw(seed, position, d) * (j + 1)) >> 64
        chosen.append(j if t in chosen else t)
    return chosen


def sample_layer(rowptr: torch.Tensor, col: torch.Tensor, weight: Optional[torch.Tensor],
                 nodes: torch.Tensor, seeds_begin: int, fanout: int, replace: bool,
                 seed: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer of ``torch.ops.fastgnn.sample_neighbors`` (deterministic numbering), its seeds
    ``nodes[seeds_begin:]``: the same draws, new nodes numbered by first sampled edge, rows
    sorted by local id, CSR positions for edge ids. Returns int64 tensors."""
    rowptr, col = rowptr.tolist(), col.tolist()
    w = None if weight is None else weight.to(torch.float64).tolist()
    known = nodes.tolist()
    local_of = {v: i for i, v in enumerate(known)}
    out_nodes = list(known)
    ptr, rows = [0], []
    for i, v in enumerate(known[seeds_begin:]):
        begin, degree = rowptr[v], rowptr[v + 1] - rowptr[v]
        row_w = None if w is None or fanout < 0 else w[begin:begin + degree]
        avail = degree if row_w is None else sum(x > 0 for x in row_w)
        k = degree if fanout < 0 else (fanout if avail else 0) if replace else min(fanout, avail)
        offsets = _choose(seed & _MASK64, i, degree, k, replace and fanout >= 0, row_w)
        rows.append([begin + o for o in offsets])
        ptr.append(ptr[-1] + k)
    positions = [p for row in rows for p in row]
    for p in positions:  # first occurrence order
        if col[p] not in local_of:
            local_of[col[p]] = len(out_nodes)
            out_nodes.append(col[p])
    local, sorted_pos = [], []
    for row in rows:
        pairs = sorted(((local_of[col[p]], p) for p in row), key=lambda lp: lp[0])
        local += [lp[0] for lp in pairs]
        sorted_pos += [lp[1] for lp in pairs]
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
    return as_tensor(ptr), as_tensor(local), as_tensor(sorted_pos), as_tensor(out_nodes)
