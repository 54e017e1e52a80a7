"""The zoo's models, by the name configs use (``model.arch``)."""
from __future__ import annotations

from fastgnn.zoo.models.backbone import Backbone
from fastgnn.zoo.models.gat import GAT
from fastgnn.zoo.models.gatv2 import GATv2
from fastgnn.zoo.models.gcn import GCN
from fastgnn.zoo.models.gcn_gru import GCNGRU
from fastgnn.zoo.models.gin import GIN
from fastgnn.zoo.models.maxk import MaxK, MaxKGCN, MaxKGIN, MaxKSAGE
from fastgnn.zoo.models.mlp import MLP
from fastgnn.zoo.models.sage import SAGE
from fastgnn.zoo.models.transformer import GraphTransformer

MODELS = {
    "mlp": MLP,
    "gcn": GCN,
    "sage": SAGE,
    "gin": GIN,
    "gat": GAT,
    "gatv2": GATv2,
    "gt": GraphTransformer,
    "maxk-sage": MaxKSAGE,
    "maxk-gcn": MaxKGCN,
    "maxk-gin": MaxKGIN,
    "gcn-gru": GCNGRU,
}

__all__ = ["MODELS", "Backbone", "MLP", "GCN", "SAGE", "GIN", "GAT", "GATv2", "GraphTransformer",
           "MaxK", "MaxKSAGE", "MaxKGCN", "MaxKGIN", "GCNGRU"]
