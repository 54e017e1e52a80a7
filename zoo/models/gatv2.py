"""GATv2 (Brody et al., 2022) on PyG's ``GATv2Conv``."""
from __future__ import annotations

from torch_geometric.nn import GATv2Conv

from fastgnn.zoo.models.gat import GAT


class GATv2(GAT):
    """:class:`~fastgnn.zoo.models.gat.GAT` with GATv2's attention."""

    conv_class = GATv2Conv
