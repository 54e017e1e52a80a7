"""The zoo's data modules: one per dataset family, each a :class:`GraphDataModule`."""
from .base import TASKS, GraphDataModule
from .heterophilous import Heterophilous
from .planetoid import Planetoid
from .shchur import Amazon, Coauthor

__all__ = ["TASKS", "GraphDataModule", "Planetoid", "Amazon", "Coauthor", "Heterophilous"]
