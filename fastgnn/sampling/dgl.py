"""``fastgnn.sampling.dgl.NeighborSampler``: a ``dgl.dataloading.BlockSampler`` on fastgnn's
native sampler, usable where ``dgl.dataloading.NeighborSampler`` is (``DataLoader``,
``sample_blocks``): same fanout order (``fanouts[-1]`` for the seeds), ``edge_dir``,
``prob``, ``replace`` and prefetch arguments. Blocks are built from the sampled CSR (DGL's
CSC of a block) with ``dgl.NID`` on their source and destination nodes and ``dgl.EID`` on
their edges, as DGL's sampler sets them.

``exclude_eids`` falls back to DGL's own sampler with a one-time warning.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Optional, Sequence

import dgl
import torch
from dgl.dataloading import BlockSampler

from fastgnn import _validate
from fastgnn.graph import Graph
from fastgnn.sampling.sampler import NeighborSampler as _NativeSampler

_warned = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def to_dgl_block(block) -> "dgl.DGLGraph":
    """A fastgnn.sampling.Block as a DGL block: its CSR is the block's CSC as it is."""
    rowptr, col = block.rowptr.to(torch.int64), block.col.to(torch.int64)
    edge_order = torch.arange(block.num_edges, device=col.device)
    out = dgl.create_block(("csc", (rowptr, col, edge_order)), num_src_nodes=block.num_src_nodes,
                           num_dst_nodes=block.num_dst_nodes, device=col.device)
    out.srcdata[dgl.NID] = block.src_ids
    out.dstdata[dgl.NID] = block.dst_ids
    out.edata[dgl.EID] = block.edge_ids
    return out


class NeighborSampler(BlockSampler):
    """Drop-in for ``dgl.dataloading.NeighborSampler`` on homogeneous graphs.

    Args follow DGL's; ``generator`` (a CPU torch.Generator) makes sampling reproducible
    (default: torch's global generator, so ``torch.manual_seed`` applies).
    """

    def __init__(self, fanouts: Sequence[int], edge_dir: str = "in", prob: Optional[str] = None,
                 mask: Optional[str] = None, replace: bool = False,
                 prefetch_node_feats=None, prefetch_labels=None, prefetch_edge_feats=None,
                 output_device=None, generator: Optional[torch.Generator] = None):
        super().__init__(prefetch_node_feats=prefetch_node_feats,
                         prefetch_labels=prefetch_labels,
                         prefetch_edge_feats=prefetch_edge_feats, output_device=output_device)
        if mask is not None:
            raise ValueError("fastgnn's NeighborSampler takes prob (weights), not mask")
        self.fanouts = list(fanouts)
        self.edge_dir = edge_dir
        self.prob = prob
        self.replace = replace
        _validate.generator("generator", generator)
        self.generator = generator
        self._graph_ref = None
        self._native = None

    def _native_for(self, g) -> _NativeSampler:
        if self._graph_ref is None or self._graph_ref() is not g:
            if len(g.ntypes) != 1 or len(g.etypes) != 1:
                raise ValueError("fastgnn's NeighborSampler samples homogeneous graphs; use "
                                 "dgl.dataloading.NeighborSampler for heterographs")
            weight = g.edata[self.prob].to(torch.float32) if self.prob is not None else None
            graph = Graph.from_dgl(g)
            if graph.device.type == "cpu" and g.is_pinned():
                graph = graph.pin_memory()
            self._native = _NativeSampler(graph, self.fanouts, replace=self.replace,
                                          weight=weight, edge_dir=self.edge_dir)
            self._graph_ref = weakref.ref(g)
        return self._native

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        if exclude_eids is not None:
            _warn_once("fastgnn's NeighborSampler does not take exclude_eids; using DGL's "
                       "NeighborSampler for this call")
            stock = dgl.dataloading.NeighborSampler(self.fanouts, edge_dir=self.edge_dir,
                                                    prob=self.prob, replace=self.replace)
            return stock.sample_blocks(g, seed_nodes, exclude_eids)
        if isinstance(seed_nodes, dict):
            if len(seed_nodes) != 1:
                raise ValueError("fastgnn's NeighborSampler samples homogeneous graphs")
            seed_nodes = next(iter(seed_nodes.values()))
        sampled = self._native_for(g).sample_blocks(seed_nodes, self.generator)
        blocks = [to_dgl_block(b) for b in sampled.blocks]
        return sampled.input_nodes, sampled.seeds, blocks
