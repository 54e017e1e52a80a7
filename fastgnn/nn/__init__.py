"""fastgnn layers: drop-in modules built on fastgnn ops."""
from fastgnn.nn.sparse_input import (SparseInputLinear, SparseInputPygLinear,  # noqa: F401
                                     feature_density)
from fastgnn.nn.temporal import SnapshotGCNConv, SnapshotGCNGRU  # noqa: F401
