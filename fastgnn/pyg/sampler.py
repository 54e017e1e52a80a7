"""``fastgnn.pyg.NeighborSampler``: PyG's node sampler interface on fastgnn's native sampler,
so ``torch_geometric.loader.NodeLoader(data, node_sampler=NeighborSampler(data, [15, 10]))``
works without pyg-lib or torch-sparse and yields the mini-batches a stock ``NeighborLoader``
yields: ``n_id`` (seeds first), ``e_id``, ``batch_size``, ``input_id``,
``num_sampled_nodes``/``num_sampled_edges`` per hop, and ``edge_index`` over all sampled nodes
(sources in row 0), each hop expanding only the nodes the previous one discovered.

The batch's ``edge_index`` is the sampler's own CSR in edge order, registered in fastgnn's
structure cache with the Graph the sampler built: enabled layers use it without a second CSR
build (when the batch is assembled in the process that sampled it, i.e. ``num_workers=0`` or
``filter_per_worker=True``; otherwise they build it once, as for any edge_index).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch_geometric.data import Data
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput
from torch_geometric.sampler.base import NumNeighbors

from fastgnn import _validate
from fastgnn.graph import Graph
from fastgnn.pyg import structure
from fastgnn.sampling import sampler as _sampling


def registered_edge_index(graph: Graph) -> torch.Tensor:
    """``graph``'s ``[2, E]`` int64 edges in CSR order, registered in the structure cache so
    that layers receiving it use ``graph`` itself. The entry lives as long as the returned
    tensor (keep it, e.g. as a batch's edge_index)."""
    with torch.inference_mode(False):  # a normal tensor, whose version the cache can watch
        edge_index = graph.edge_index()
    n_src, n_dst = graph.num_src_nodes, graph.num_dst_nodes
    structure.cache.get(edge_index, ("plain", n_src, n_dst), lambda: structure.Structure(graph))
    return edge_index


class _SampledRow(torch.Tensor):
    """The sources of a sampled batch as handed to NodeLoader: PyG's filter step stacks them
    with the destinations into the batch's edge_index, and this tensor answers that stack with
    the registered edge_index (equal values). Every other operation sees a plain tensor."""

    _edge_index: torch.Tensor
    _col: torch.Tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.stack and args and isinstance(args[0], (list, tuple)) and \
                len(args[0]) == 2 and isinstance(args[0][0], _SampledRow) and \
                args[0][1] is args[0][0]._col and kwargs.get("dim", args[1] if len(args) > 1
                                                             else 0) == 0:
            return args[0][0]._edge_index
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def _sampled_row(edge_index: torch.Tensor) -> _SampledRow:
    row = edge_index[0].as_subclass(_SampledRow)
    row._edge_index = edge_index
    row._col = edge_index[1]
    return row


def _hop_fanouts(num_neighbors) -> list:
    if isinstance(num_neighbors, NumNeighbors):
        num_neighbors = num_neighbors.values
    if isinstance(num_neighbors, dict):
        raise ValueError("fastgnn.pyg.NeighborSampler samples homogeneous graphs: "
                         "num_neighbors must be a list of ints, not a dict per edge type")
    return _sampling._check_fanouts(num_neighbors)


class NeighborSampler(BaseSampler):
    """Uniform (or weighted) neighbour sampling of a homogeneous ``Data`` for PyG's
    ``NodeLoader``: ``num_neighbors[h]`` in-neighbours for each node hop ``h`` discovered
    (``-1``: all), as PyG's ``NeighborSampler``.

    Args:
        data: a homogeneous ``torch_geometric.data.Data`` with ``edge_index``.
        num_neighbors: neighbours per hop, seeds first (PyG's order).
        replace: sample with replacement.
        weight_attr: name of a per-edge weight attribute of ``data`` for biased sampling.
        generator: a CPU ``torch.Generator`` that makes the batches reproducible.
        device: "cuda" to sample on the GPU (the structure is copied there once).
    """

    def __init__(self, data, num_neighbors, *, replace: bool = False,
                 weight_attr: Optional[str] = None, subgraph_type: str = "directional",
                 disjoint: bool = False, generator: Optional[torch.Generator] = None,
                 device=None):
        if not isinstance(data, Data):
            raise TypeError("fastgnn.pyg.NeighborSampler samples homogeneous Data only, got "
                            f"{type(data).__name__}; for HeteroData or remote stores use "
                            "torch_geometric.sampler.NeighborSampler (needs pyg-lib)")
        if str(getattr(subgraph_type, "value", subgraph_type)) != "directional":
            raise ValueError("fastgnn.pyg.NeighborSampler supports subgraph_type='directional' "
                             f"only, got {subgraph_type!r}")
        if disjoint:
            raise ValueError("fastgnn.pyg.NeighborSampler does not support disjoint=True")
        if data.edge_index is None:
            raise ValueError("data has no edge_index")
        self.num_neighbors = _hop_fanouts(num_neighbors)
        self.num_nodes = data.num_nodes
        graph = Graph.from_edge_index(data.edge_index, num_nodes=self.num_nodes)
        if device is not None and _validate.device("device", device).type == "cuda":
            graph = graph.to(device)
        weight = None
        if weight_attr is not None:
            weight = getattr(data, weight_attr, None)
            if not isinstance(weight, torch.Tensor):
                raise ValueError(f"data has no attribute {weight_attr!r} (weight_attr)")
            weight = weight.to(graph.device)
        _validate.generator("generator", generator)
        self.generator = generator
        self._out_device = data.edge_index.device  # where NodeLoader puts the batch's edges
        self._sampler = _sampling.NeighborSampler(graph, self.num_neighbors[::-1],
                                                  replace=replace, weight=weight)

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if index.time is not None:
            raise ValueError("fastgnn.pyg.NeighborSampler does not do temporal sampling")
        sub = self._sampler.sample_subgraph(index.node, self.generator)
        device = self._out_device
        row = _sampled_row(registered_edge_index(sub.graph.to(device)))
        return SamplerOutput(node=sub.node_ids.to(device), row=row, col=row._col,
                             edge=sub.edge_ids.to(device),
                             batch=None, num_sampled_nodes=sub.num_sampled_nodes,
                             num_sampled_edges=sub.num_sampled_edges,
                             metadata=(index.input_id, index.time))

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError("fastgnn.pyg.NeighborSampler samples from nodes only "
                                  "(NodeLoader); link prediction needs torch_geometric's sampler")

    @property
    def edge_permutation(self):
        return None  # e_id already holds the input's edge ids
