"""GraphLand (Bazhenov et al. 2025, "GraphLand: evaluating graph machine learning models on
diverse industrial data") through PyG's ``GraphLandDataset``."""
from __future__ import annotations

from torch_geometric.utils import remove_self_loops

try:
    from torch_geometric.datasets import GraphLandDataset
except ImportError:  # an older torch_geometric
    GraphLandDataset = None

from .base import GraphDataModule
from .common import check_split, pick, pyg_dataset

_TASKS = {"multiclass_classification": "multiclass", "binary_classification": "binary",
          "regression": "regression"}
#: the transductive split types; THI (inductive: three graphs) does not fit one full graph
SPLIT_TYPES = ("RL", "RH", "TH")
#: the datasets without a temporal split (per the GraphLand code and PyG's loader)
NO_TEMPORAL_SPLIT = ("city-reviews", "city-roads-M", "city-roads-L", "web-traffic")


class GraphLand(GraphDataModule):
    """One GraphLand dataset with split type ``split_type``: ``RL`` (random 10/10/80), ``RH``
    (random 50/25/25) or ``TH`` (temporal 50/25/25); each has one split, 0.

    Files: ``root/<name>/raw/<name>/{info.yaml, features.csv, targets.csv, edgelist.csv,
    split_masks_<RL|RH|TH>.csv}``, downloaded and unpacked there from Zenodo as PyG does.
    Features are prepared as the GraphLand baselines (and PyG's loader, by default) do:
    numerical features quantile-transformed to a normal distribution, NaNs filled with the
    most frequent value, fraction features as they are (quantile-transformed for
    ``avazu-ctr`` and ``artnet-views``), categorical features one-hot; the graph made
    undirected and, as the baselines do, without self-loops. ``data.x_numerical_mask``,
    ``x_fraction_mask`` and ``x_categorical_mask`` say which columns are which.

    Tasks: multi-class (``y`` class ids), binary (``y`` 0/1 ids; the paper scores AP) or
    regression (``y`` ``[N, 1]``, standardized with the train nodes' mean and std, as the
    baselines train; R² is unchanged by that, RMSE is in standard deviations). Nodes without
    a target are in no mask (their ``y`` is 0).

    Needs pandas, scikit-learn and PyYAML (PyG's loader imports them).
    """

    NAMES = tuple(GraphLandDataset.GRAPHLAND_DATASETS) if GraphLandDataset else ()

    def __init__(self, root: str, name: str, split_type: str = "RL", split: int = 0,
                 download: bool = True, **options):
        if GraphLandDataset is None:
            raise ImportError("this torch_geometric has no GraphLandDataset; GraphLand needs "
                              "a newer torch_geometric")
        super().__init__(root, check_split(split, 1), download, **options)
        self.name = pick(name, self.NAMES)
        self.split_type = pick(split_type, SPLIT_TYPES, "split_type")
        if self.split_type == "TH" and self.name in NO_TEMPORAL_SPLIT:
            raise ValueError(f"split_type 'TH': {self.name} has no temporal split; use RL or RH")

    @property
    def task(self) -> str:
        return _TASKS[GraphLandDataset.GRAPHLAND_DATASETS[self.name]]

    def load(self):
        try:
            dataset = pyg_dataset(GraphLandDataset, self.root, self.download, name=self.name,
                                  split=self.split_type)
        except ImportError as exc:
            raise ImportError(f"GraphLand needs pandas, scikit-learn and PyYAML "
                              f"(pip install pandas scikit-learn pyyaml): {exc}") from exc
        data = dataset[0]
        data.edge_index, _ = remove_self_loops(data.edge_index)
        y = data.y.nan_to_num(0.0)  # unlabeled nodes: PyG leaves them out of every mask
        data.y = y.unsqueeze(1) if self.task == "regression" else y.long()
        return data
