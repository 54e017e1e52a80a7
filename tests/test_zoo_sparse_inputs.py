"""The zoo's sparse-input wiring: data modules report their feature density, the CLI links it
into the model, and with the fastgnn backend sparse features get the sparse-input first layer
(``model.sparse_inputs``: None automatic, true, false), training as the dense one does."""
import os

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import torch  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from zoo_helpers import fit_test, tiny_csbm  # noqa: E402

from fastgnn.datasets import data_root  # noqa: E402
from fastgnn.nn import SparseInputLinear, SparseInputPygLinear  # noqa: E402
from fastgnn.zoo import cli  # noqa: E402
from fastgnn.zoo.data import GraphDataModule, Planetoid  # noqa: E402
from fastgnn.zoo.module import NodePropertyModule  # noqa: E402

SPARSE_LAYERS = (SparseInputLinear, SparseInputPygLinear)


def sparse_layers(module):
    return [m for m in module.model.modules() if isinstance(m, SPARSE_LAYERS)]


class BagOfWords(GraphDataModule):
    """A small graph with 0/1 features, 3% non-zero, labels read off the features."""

    def __init__(self, root: str = "unused", **options):
        super().__init__(root, **options)

    def load(self):
        gen = torch.Generator().manual_seed(0)
        n, f = 120, 200
        x = (torch.rand(n, f, generator=gen) < 0.03).float()
        y = x[:, :3].argmax(1)
        edge_index = torch.randint(0, n, (2, 600), generator=gen)
        order = torch.randperm(n, generator=gen)
        masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
        for mask, part in zip(masks, (order[:60], order[60:90], order[90:])):
            mask[part] = True
        return Data(x=x, y=y, edge_index=edge_index, train_mask=masks[0], val_mask=masks[1],
                    test_mask=masks[2])


def module(data, backend, sparse_inputs=None):
    return NodePropertyModule("gcn", backend, num_features=data.num_features,
                              num_outputs=data.num_outputs, task=data.task,
                              feature_density=data.feature_density, sparse_inputs=sparse_inputs)


def test_data_modules_report_feature_density():
    bag = BagOfWords()
    assert bag.feature_density == pytest.approx(float((bag.data.x != 0).float().mean()))
    assert 0.02 < bag.feature_density < 0.04
    assert tiny_csbm().feature_density > 0.99  # Gaussian features


def test_automatic_for_sparse_features_on_the_fastgnn_backend_only():
    bag, dense = BagOfWords(), tiny_csbm()
    assert len(sparse_layers(module(bag, "fastgnn"))) == 1  # the first GCNConv's lin
    assert not sparse_layers(module(dense, "fastgnn"))
    assert not sparse_layers(module(bag, "pyg"))
    assert not sparse_layers(module(bag, "reference"))
    assert not sparse_layers(module(bag, "fastgnn", sparse_inputs=False))  # turned off
    assert len(sparse_layers(module(dense, "fastgnn", sparse_inputs=True))) == 1  # forced


def test_bad_settings():
    bag = BagOfWords()
    with pytest.raises(ValueError, match="sparse_inputs needs the fastgnn or reference"):
        module(bag, "pyg", sparse_inputs=True)
    with pytest.raises(TypeError, match="sparse_inputs must be a bool or None"):
        module(bag, "fastgnn", sparse_inputs="yes")


def test_training_matches_the_dense_first_layer():
    bag = BagOfWords()
    options = dict(dropout=0.0, max_epochs=3)
    dense_module, dense = fit_test(bag, "gcn", "fastgnn", sparse_inputs=False, **options)
    sparse_module, sparse = fit_test(bag, "gcn", "fastgnn", sparse_inputs=True, **options)
    assert sparse_layers(sparse_module) and not sparse_layers(dense_module)
    for name, value in dense.items():
        assert sparse[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    for key, value in dense_module.state_dict().items():
        torch.testing.assert_close(sparse_module.state_dict()[key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("setting, swapped", [([], False), (["--model.sparse_inputs=true"], True),
                                              (["--model.sparse_inputs=false"], False)])
def test_cli_links_the_density_and_reads_the_switch(setting, swapped):
    """The CSBM's Gaussian features stay dense unless the config forces the switch."""
    run = cli.ZooCLI(args=["--model.backend=fastgnn", "--data.num_nodes=80",
                           "--data.num_classes=3", "--data.num_channels=8", *setting],
                     run=False)
    assert run.model.hparams.feature_density == pytest.approx(run.datamodule.feature_density)
    assert bool(sparse_layers(run.model)) == swapped


@pytest.mark.data
def test_cora_gets_the_sparse_first_layer(tmp_path):
    raw = os.path.join(data_root(), "planetoid", "Cora", "raw")
    if not os.path.isdir(raw):
        pytest.skip(f"no local Cora under {data_root()}")
    os.makedirs(tmp_path / "Cora")
    os.symlink(raw, tmp_path / "Cora" / "raw")
    cora = Planetoid(str(tmp_path), "Cora", download=False, normalize_features=False)
    assert cora.feature_density == pytest.approx(0.0127, abs=5e-4)  # 1.27% non-zero
    assert len(sparse_layers(module(cora, "fastgnn"))) == 1
