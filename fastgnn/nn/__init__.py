"""fastgnn modules built on fastgnn ops: the MaxK activation, sparse-input linear layers, the
snapshot GCN models, and (with PyTorch Geometric installed) the MaxK-GNN layers MaxKSAGEConv,
MaxKGCNConv and MaxKGINConv."""
from fastgnn.nn.maxk import MaxK
from fastgnn.nn.sparse_input import SparseInputLinear, SparseInputPygLinear, feature_density
from fastgnn.nn.temporal import SnapshotGCNConv, SnapshotGCNGRU

_MAXK_CONVS = ("MaxKSAGEConv", "MaxKGCNConv", "MaxKGINConv")


def __getattr__(name):
    # The conv layers subclass PyG's: imported on first use, so that fastgnn.nn works without
    # PyG.
    if name in _MAXK_CONVS:
        from fastgnn.nn import maxk_conv
        return getattr(maxk_conv, name)
    raise AttributeError(f"module 'fastgnn.nn' has no attribute {name!r}")


__all__ = ["MaxK", "SparseInputLinear", "SparseInputPygLinear", "feature_density",
           "SnapshotGCNConv", "SnapshotGCNGRU", *_MAXK_CONVS]
