"""Neighbour sampling and mini-batch loading whose blocks are fastgnn Graphs.

``NeighborSampler`` samples blocks (one bipartite Graph per layer) or PyG-style subgraphs on
the CPU (OpenMP) or the GPU; ``NeighborLoader`` batches seeds, gathers features and labels and
prefetches in the background, one share of seeds per rank under DDP. The PyG and DGL
interfaces are ``fastgnn.pyg.NeighborSampler`` and ``fastgnn.sampling.dgl.NeighborSampler``.
"""
from fastgnn.sampling.loader import MiniBatch, NeighborLoader, gather
from fastgnn.sampling.sampler import (Block, NeighborSampler, SampledBlocks, SampledSubgraph)

__all__ = ["NeighborSampler", "NeighborLoader", "MiniBatch", "Block", "SampledBlocks",
           "SampledSubgraph", "gather"]
