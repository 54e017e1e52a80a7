"""fastgnn: compiled CPU and CUDA kernels for GCN-, reduction- and attention-style GNN layers.

Public names: Graph, CBSR, SnapshotGraph, ops, enable, disable, reorder, NodeOrder, sampling,
set_backend, get_backend, backend, info, FallbackWarning.
"""
__version__ = "0.1.0"

from fastgnn import ops  # noqa: E402  (registers every op's implementations)
from fastgnn._adapter import FallbackWarning  # noqa: E402
from fastgnn.backends import backend, get_backend, set_backend  # noqa: E402
from fastgnn.cbsr import CBSR  # noqa: E402
from fastgnn.enable import disable, enable  # noqa: E402
from fastgnn.graph import Graph  # noqa: E402
from fastgnn.info import info  # noqa: E402
from fastgnn.reordering import NodeOrder, reorder  # noqa: E402
from fastgnn import sampling  # noqa: E402  (registers the sampling op's fake kernel)
from fastgnn.snapshots import SnapshotGraph  # noqa: E402
from fastgnn.temporal_signal import snapshot_windows  # noqa: E402

__all__ = ["Graph", "ops", "enable", "disable", "set_backend", "get_backend", "backend", "info",
           "reorder", "NodeOrder", "__version__", "CBSR", "SnapshotGraph", "sampling",
           "snapshot_windows", "FallbackWarning"]
