"""The zoo's snapshot model (arch gcn-gru) and ogbn-arxiv by arrival year (ArxivByYear), on a
tiny fixture in OGB's raw layout and, where the local copy exists, on the real structure."""
import os

import numpy as np
import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")

import torch  # noqa: E402
from test_zoo_data import _need, _write_csv_gz, staged, write_ogb_raw  # noqa: E402,F401
from zoo_helpers import fit_test  # noqa: E402

import fastgnn  # noqa: E402
from fastgnn.nn import SnapshotGCNGRU  # noqa: E402
from fastgnn.zoo.data import ArxivByYear  # noqa: E402
from fastgnn.zoo.models import GCNGRU  # noqa: E402
from fastgnn.zoo.module import NodePropertyModule  # noqa: E402


@pytest.fixture
def arxiv_fixture(tmp_path):
    folder = tmp_path / "ogbn_arxiv"
    wrote = write_ogb_raw(str(folder), "ogbn-arxiv")
    years = np.random.default_rng(1).integers(2010, 2016, wrote["n"])
    _write_csv_gz(str(folder / "raw" / "node_year.csv.gz"), years, "%d")
    return str(tmp_path), torch.from_numpy(years)


def test_edges_get_their_first_snapshot(arxiv_fixture):
    root, node_year = arxiv_fixture
    data = ArxivByYear(root, window=3, last_year=2014, download=False, random_features=8).data
    src, dst = data.edge_index
    year = torch.maximum(node_year[src], node_year[dst])
    assert int(year.max()) <= 2014  # edges of 2015 have not arrived
    assert data.edge_attr.dtype == torch.int64
    torch.testing.assert_close(data.edge_attr, (year - 2012).clamp(min=0))
    everything = ArxivByYear(root, window=3, download=False, random_features=8).data
    assert everything.edge_index.shape[1] > data.edge_index.shape[1]
    assert int(everything.edge_attr.max()) == 2


def test_model_is_snapshot_gcn_gru_over_the_prefixes():
    torch.manual_seed(0)
    n = 30
    edge_index = torch.randint(0, n, (2, 120))
    first = torch.randint(0, 3, (120,))
    x = torch.randn(n, 5)
    model = GCNGRU(5, 4, hidden_channels=8, dropout=0.0)
    reference = SnapshotGCNGRU(5, 8, 4, 2)
    reference.load_state_dict({k.removeprefix("net."): v for k, v in model.state_dict().items()})
    sg = fastgnn.SnapshotGraph([edge_index[:, first <= t] for t in range(3)], n)
    torch.testing.assert_close(model(x, edge_index, first), reference(sg, x))
    built = model.snapshots(edge_index, first, n)
    assert built.num_snapshots == 3 and model.snapshots(edge_index, first, n) is built
    first[0] = 2 - first[0]  # changed in place: rebuilt
    assert model.snapshots(edge_index, first, n) is not built
    single = model.snapshots(edge_index, None, n)  # no edge_attr: one snapshot of every edge
    assert single.num_snapshots == 1 and single.num_edges == 120


def test_bad_model_options_and_edge_attr():
    with pytest.raises(ValueError, match="gcn-gru does not support heads=2"):
        GCNGRU(5, 4, heads=2)
    model = GCNGRU(5, 4)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="first snapshot of each edge"):
        model(torch.randn(3, 5), edge_index, torch.rand(2))
    with pytest.raises(ValueError, match="must be >= 0"):
        model(torch.randn(3, 5), edge_index, torch.tensor([0, -1]))


def test_fits_from_the_zoo(arxiv_fixture):
    root, _ = arxiv_fixture
    data = ArxivByYear(root, window=3, download=False, random_features=8)
    module, metrics = fit_test(data, "gcn-gru", "fastgnn", hidden_channels=8)
    assert isinstance(module.model, GCNGRU)
    assert 0.0 <= metrics["test_acc"] <= 1.0 and np.isfinite(metrics["test_loss"])


@pytest.mark.data
def test_real_arxiv_window(staged):  # noqa: F811
    root = _need(staged, "ogbn-arxiv structure (random_features only)")
    data = ArxivByYear(root, window=4, download=False, random_features=4).data
    assert data.num_nodes == 169343 and int(data.edge_attr.max()) == 3
    counts = torch.bincount(data.edge_attr)  # edges that arrived by 2017, then 2018, 2019, 2020
    assert counts.numel() == 4 and bool((counts > 0).all())  # every year adds edges
    model = NodePropertyModule("gcn-gru", "fastgnn", hidden_channels=8, num_features=4,
                               num_outputs=40).model
    sg = model.snapshots(data.edge_index, data.edge_attr, data.num_nodes)
    assert sg.num_snapshots == 4 and sg.num_edges == data.edge_index.shape[1]
