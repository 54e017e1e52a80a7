"""The built-in CSBM data module and the OGB Evaluator path of the zoo module."""
import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import torch  # noqa: E402
from zoo_helpers import quiet_trainer, tiny_csbm  # noqa: E402

from fastgnn.zoo.data import CSBM  # noqa: E402
from fastgnn.zoo.module import NodePropertyModule  # noqa: E402


def test_csbm_graph():
    dm = tiny_csbm(homophily=0.9, num_nodes=400)
    data = dm.data
    assert data.x.shape == (400, 8) and data.y.shape == (400,)
    assert (dm.num_features, dm.num_outputs, dm.task, dm.ogb_name) == (8, 3, "multiclass", None)
    src, dst = data.edge_index
    assert not bool((src == dst).any())
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert all((d, s) in pairs for s, d in pairs)  # undirected
    assert len(pairs) == data.num_edges  # no duplicates
    homophily = (data.y[src] == data.y[dst]).float().mean().item()
    assert homophily == pytest.approx(0.9, abs=0.05)
    masks = torch.stack([data.train_mask, data.val_mask, data.test_mask])
    assert bool((masks.sum(0) == 1).all())
    assert data.train_mask.sum().item() == 40 and data.val_mask.sum().item() == 40


def test_csbm_seeds_and_splits():
    a, b = tiny_csbm().data, tiny_csbm().data
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.train_mask, b.train_mask)
    other_split = tiny_csbm(split=1).data
    assert torch.equal(a.edge_index, other_split.edge_index)
    assert not torch.equal(a.train_mask, other_split.train_mask)
    other_seed = tiny_csbm(seed=1).data
    assert not torch.equal(a.x, other_seed.x)


def test_csbm_heavy_tailed_degrees():
    """degree_exponent > 0 keeps the average degree and the homophily but grows hubs; 0 keeps
    the Poisson graph (the default, unchanged by the option's existence)."""
    kw = dict(num_nodes=20000, avg_degree=12.0, homophily=0.8, num_channels=4)
    flat, skewed = CSBM(**kw).load(), CSBM(degree_exponent=0.7, **kw).load()
    assert torch.equal(CSBM(degree_exponent=0.0, **kw).load().edge_index, flat.edge_index)
    for data in (flat, skewed):
        degree = torch.bincount(data.edge_index[1], minlength=20000).double()
        assert degree.mean().item() == pytest.approx(12.0, rel=0.1)
        src, dst = data.edge_index
        assert (data.y[src] == data.y[dst]).float().mean().item() == pytest.approx(0.8, abs=0.05)
    flat_max = torch.bincount(flat.edge_index[1]).max().item()
    skewed_degree = torch.bincount(skewed.edge_index[1], minlength=20000).double()
    assert flat_max < 40 and skewed_degree.max().item() > 50 * skewed_degree.median().item()


@pytest.mark.parametrize("option, value", [
    ("num_nodes", 1), ("num_classes", 1), ("homophily", 1.5), ("avg_degree", -1.0),
    ("val_ratio", 0.95), ("seed", -1), ("num_channels", 2.5), ("degree_exponent", -0.5),
    ("degree_exponent", 3.0),
])
def test_csbm_bad_options(option, value):
    with pytest.raises(ValueError, match=option):
        CSBM(**{option: value})


class FakeEvaluator:
    """OGB's documented Evaluator.eval: y_true [n, 1], y_pred class ids [n, 1] -> {"acc"}."""

    def __init__(self):
        self.calls = []

    def eval(self, input_dict):
        y_true, y_pred = input_dict["y_true"], input_dict["y_pred"]
        assert y_true.dim() == 2 and y_true.shape[1] == 1 and y_pred.shape == y_true.shape
        self.calls.append(y_true.shape[0])
        return {"acc": (y_true == y_pred).float().mean().item()}


def _tested(module, data):
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(module, data)
    return trainer.test(module, data, verbose=False)[0]


def test_ogb_evaluator_is_logged():
    data = tiny_csbm()
    module = NodePropertyModule("gcn", num_features=8, num_outputs=3)
    module.evaluator = FakeEvaluator()
    metrics = _tested(module, data)
    assert metrics["test_ogb_acc"] == pytest.approx(metrics["test_acc"])
    assert module.evaluator.calls[-1] == int(data.data.test_mask.sum())


def test_real_ogb_evaluator():
    pytest.importorskip("ogb")
    data = tiny_csbm()
    module = NodePropertyModule("gcn", num_features=8, num_outputs=3, ogb_name="ogbn-arxiv")
    assert module.evaluator is not None
    metrics = _tested(module, data)
    assert metrics["test_ogb_acc"] == pytest.approx(metrics["test_acc"])


@pytest.mark.parametrize("task, metric", [("binary", "test_roc_auc"),
                                          ("multilabel", "test_roc_auc"),
                                          ("regression", "test_r2")])
def test_other_tasks(task, metric):
    dm = tiny_csbm()
    data = dm.data
    gen = torch.Generator().manual_seed(0)
    if task == "binary":
        data.y = (data.y == 0).long()
        outputs = 1
    elif task == "multilabel":
        data.y = torch.nn.functional.one_hot(data.y, 3)
        data.y[:, 2] = torch.randint(0, 2, (data.num_nodes,), generator=gen)
        outputs = 3
    else:
        data.y = data.x[:, :2].sum(1, keepdim=True) + 0.1 * torch.randn(data.num_nodes, 1,
                                                                         generator=gen)
        outputs = 1
    module = NodePropertyModule("sage", num_features=8, num_outputs=outputs, task=task)
    metrics = _tested(module, dm)
    assert metric in metrics
    if task == "binary":
        assert "test_ap" in metrics
    if task == "regression":
        assert "test_rmse" in metrics
