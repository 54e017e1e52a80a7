"""fastgnn ops: the public, checked entry points. Each picks its implementation through
``fastgnn.backends`` (native CPU/CUDA kernels, or the pure-PyTorch reference)."""
from fastgnn.ops.aggregate import aggregate
from fastgnn.ops.attention import gat_attention, gatv2_attention, graph_attention
from fastgnn.ops.edge_softmax import edge_softmax
from fastgnn.ops.maxk import maxk, maxk_spmm
from fastgnn.ops.spmm import spmm
from fastgnn.ops.snapshots import spmm_snapshots

__all__ = ["spmm", "aggregate", "gatv2_attention", "graph_attention", "maxk", "maxk_spmm",
           "gat_attention", "spmm_snapshots", "edge_softmax"]
