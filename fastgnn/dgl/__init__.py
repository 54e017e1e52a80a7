"""fastgnn for DGL: drop-ins for ``dgl.ops`` (``fastgnn.dgl.gspmm``, ``copy_u_sum``, ...), the
cached :class:`fastgnn.Graph` of a DGLGraph (:func:`fastgnn_graph`), and, in
:mod:`fastgnn.dgl.nn`, subclasses of DGL's layers that :func:`fastgnn.enable` swaps in.

Importing this package needs DGL; ``import fastgnn`` does not.
"""
from fastgnn._adapter import FallbackWarning
from fastgnn.dgl import ops as _ops
from fastgnn.dgl._graphs import cache as graph_cache
from fastgnn.dgl._graphs import fastgnn_graph
from fastgnn.dgl.ops import *  # noqa: F401,F403  (every dgl.ops name)

__all__ = list(_ops.__all__) + ["FallbackWarning", "fastgnn_graph", "graph_cache"]
