"""The zoo's data modules: one per dataset family, each a :class:`GraphDataModule`."""
from .base import TASKS, GraphDataModule
from .dynamic import ArxivByYear
from .graphland import GraphLand
from .heterophilous import Heterophilous
from .ogb import OGBNodeProp
from .planetoid import Planetoid
from .shchur import Amazon, Coauthor
from .synthetic import CSBM

__all__ = ["TASKS", "GraphDataModule", "CSBM", "Planetoid", "Amazon", "Coauthor",
           "Heterophilous", "OGBNodeProp", "GraphLand", "ArxivByYear"]
