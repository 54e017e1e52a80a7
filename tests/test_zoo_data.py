"""The zoo's data modules: each on its local copy (staged by scripts/stage_zoo_data.py into the
loader's raw layout, read with download off), and on small fixtures written in the exact raw
layouts of the datasets that have no local copy (OGB, GraphLand)."""
from __future__ import annotations

import gzip
import importlib.util
import os
import sys
import zipfile

import numpy as np
import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")

from fastgnn.datasets import data_root  # noqa: E402
from fastgnn.zoo.data import (  # noqa: E402
    Amazon, Coauthor, GraphLand, Heterophilous, OGBNodeProp, Planetoid)
from fastgnn.zoo.data import graphland as graphland_module  # noqa: E402
from fastgnn.zoo.data import ogb as ogb_module  # noqa: E402
from fastgnn.zoo.data.shchur import TRAIN_PER_CLASS, VAL_PER_CLASS, pitfalls_split  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

needs_graphland = pytest.mark.skipif(graphland_module.GraphLandDataset is None,
                                     reason="this torch_geometric has no GraphLandDataset")
ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stage_script():
    spec = importlib.util.spec_from_file_location(
        "stage_zoo_data", os.path.join(ROOT_DIR, "scripts", "stage_zoo_data.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A root holding every local copy in its loader's raw layout (staged once)."""
    source = data_root()
    if not os.path.isdir(source):
        pytest.skip(f"datasets folder {source} absent (set FASTGNN_DATA)")
    root = str(tmp_path_factory.mktemp("zoo_data"))
    staged, _ = _stage_script().stage(source, root)
    return root, staged


def _need(staged, what):
    root, available = staged
    if what not in available:
        pytest.skip(f"{what}: no local copy under {data_root()}")
    return root


def check_masks(data, splits_sum_to_all=True):
    masks = [data.train_mask, data.val_mask, data.test_mask]
    for mask in masks:
        assert mask.dtype == torch.bool and mask.shape == (data.num_nodes,) and mask.any()
    assert not (masks[0] & masks[1]).any()
    assert not (masks[0] & masks[2]).any()
    assert not (masks[1] & masks[2]).any()
    if splits_sum_to_all:
        assert (masks[0] | masks[1] | masks[2]).all()


def check_module(module, nodes, edges, features, outputs, task):
    data = module.data
    assert module.task == task
    assert (data.num_nodes, data.edge_index.shape, data.x.shape) == (
        nodes, (2, edges), (nodes, features))
    assert data.edge_index.dtype == torch.long and data.y.shape[0] == nodes
    assert int(data.edge_index.min()) >= 0 and int(data.edge_index.max()) < nodes
    assert (module.num_features, module.num_outputs) == (features, outputs)
    if task in ("multiclass", "binary"):
        assert data.y.dtype == torch.long and data.y.dim() == 1
    return data


# --- local copies -------------------------------------------------------------------------

# published counts: PyG's dataset tables (PyG's edge counts are directed, both directions)
PLANETOID = {"Cora": (2708, 10556, 1433, 7, (140, 500, 1000)),
             "CiteSeer": (3327, 9104, 3703, 6, (120, 500, 1000))}


@pytest.mark.data
@pytest.mark.parametrize("name", PLANETOID)
def test_planetoid_public_split(staged, name):
    root = _need(staged, f"Planetoid {name}")
    nodes, edges, features, classes, sizes = PLANETOID[name]
    data = check_module(Planetoid(root, name.lower(), download=False),
                        nodes, edges, features, classes, "multiclass")
    check_masks(data, splits_sum_to_all=False)
    assert (int(data.train_mask.sum()), int(data.val_mask.sum()),
            int(data.test_mask.sum())) == sizes
    assert torch.bincount(data.y[data.train_mask]).tolist() == [20] * classes
    rows = data.x.sum(1)
    assert torch.allclose(rows[rows > 0], torch.ones(())), "features are row-normalized"
    raw = Planetoid(root, name, download=False, normalize_features=False).data
    assert torch.equal(raw.x > 0, data.x > 0) and set(raw.x.unique().tolist()) <= {0.0, 1.0}


SHCHUR = {("Amazon", "Computers"): (13752, 491722, 767, 10),
          ("Amazon", "Photo"): (7650, 238162, 745, 8),
          ("Coauthor", "CS"): (18333, 163788, 6805, 15),
          ("Coauthor", "Physics"): (34493, 495924, 8415, 5)}
SHCHUR_CLASSES = {"Amazon": Amazon, "Coauthor": Coauthor}
SLOW_TO_PROCESS = {"Physics", "CS"}  # PyG densifies their large bag-of-words features


@pytest.mark.data
@pytest.mark.parametrize("family,name", [
    pytest.param(f, n, marks=[pytest.mark.slow] if n in SLOW_TO_PROCESS else [])
    for f, n in SHCHUR])
def test_shchur_pitfalls_splits(staged, family, name):
    root = _need(staged, f"{family} {name}")
    nodes, edges, features, classes = SHCHUR[(family, name)]
    cls = SHCHUR_CLASSES[family]
    data = check_module(cls(root, name, split=3, download=False),
                        nodes, edges, features, classes, "multiclass")
    assert torch.equal(data.train_mask, pitfalls_split(data.y, 3)[0])
    train_masks = []
    for split in range(10):  # the split seeds on the real labels (each load reads the graph)
        train, val, test = pitfalls_split(data.y, split)
        check_masks(Data(train_mask=train, val_mask=val, test_mask=test, num_nodes=nodes))
        assert torch.bincount(data.y[train], minlength=classes).tolist() == \
            [TRAIN_PER_CLASS] * classes
        assert torch.bincount(data.y[val], minlength=classes).tolist() == \
            [VAL_PER_CLASS] * classes
        train_masks.append(tuple(train.nonzero().flatten().tolist()))
    assert len(set(train_masks)) == 10
    again = cls(root, name, split=3, download=False).data
    assert torch.equal(again.train_mask, data.train_mask), "a split is the same on every load"
    other = cls(root, name, split=4, download=False).data
    assert not torch.equal(other.train_mask, data.train_mask)


@pytest.mark.data
def test_shchur_largest_connected_component(staged):
    root = _need(staged, "Amazon Photo")
    data = Amazon(root, "Photo", download=False, largest_connected_component=True).data
    assert data.num_nodes == 7487  # the Pitfalls paper's Table 1
    check_masks(data)


HETEROPHILOUS = {  # nodes, undirected edges, features, outputs, task (Platonov et al. 2023)
    "actor": (7600, 26659, 932, 5, "multiclass"),
    "squirrel-filtered": (2223, 46998, 2089, 5, "multiclass"),
    "chameleon-filtered": (890, 8854, 2325, 5, "multiclass"),
    "minesweeper": (10000, 39402, 7, 1, "binary"),
    "tolokers": (11758, 519000, 10, 1, "binary"),
}


@pytest.mark.data
@pytest.mark.parametrize("name", HETEROPHILOUS)
def test_heterophilous_ten_splits(staged, name):
    file = name.replace("-", "_")
    root = _need(staged, f"Heterophilous {file}")
    nodes, edges, features, outputs, task = HETEROPHILOUS[name]
    raw = np.load(os.path.join(root, file, "raw", f"{file}.npz"))
    train_masks = []
    for split in range(10):
        data = check_module(Heterophilous(root, name, split=split, download=False),
                            nodes, 2 * edges, features, outputs, task)
        check_masks(data)
        assert torch.equal(data.train_mask, torch.from_numpy(raw["train_masks"][split]))
        assert torch.equal(data.test_mask, torch.from_numpy(raw["test_masks"][split]))
        train_masks.append(tuple(data.train_mask.nonzero().flatten().tolist()))
    assert len(set(train_masks)) == 10
    if task == "binary":
        assert set(data.y.unique().tolist()) == {0, 1}


@pytest.mark.data
def test_ogbn_arxiv_structure_with_random_features(staged, monkeypatch):
    root = _need(staged, "ogbn-arxiv structure (random_features only)")
    _no_stdin(monkeypatch)
    module = OGBNodeProp(root, "ogbn-arxiv", download=False, random_features=32,
                         to_undirected=False)
    data = check_module(module, 169343, 1166243, 32, 40, "multiclass")
    assert module.ogb_name == "ogbn-arxiv"
    check_masks(data)
    assert [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)] == \
        [90941, 29799, 48603]  # OGB's time split
    undirected = OGBNodeProp(root, "ogbn-arxiv", download=False, random_features=32).data
    assert undirected.edge_index.shape == (2, 2315598)
    assert torch.equal(undirected.x, data.x), "random features are seeded"
    with pytest.raises(FileNotFoundError, match="node-feat.csv.gz"):
        OGBNodeProp(root, "ogbn-arxiv", download=False).data


# --- fixtures in the raw layouts ----------------------------------------------------------

def _no_stdin(monkeypatch):
    """Any prompt (ogb asks before large downloads) fails the test instead of waiting."""
    class NoStdin:
        def read(self, *args):
            raise AssertionError("read stdin")

        readline = read

        def isatty(self):
            return False

    monkeypatch.setattr(sys, "stdin", NoStdin())
    monkeypatch.setattr("builtins.input", NoStdin().read)


def _write_csv_gz(path, array, fmt):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.asarray(array).reshape(len(array), -1), delimiter=",", fmt=fmt)


def write_ogb_raw(folder, name, seed=0):
    """A tiny copy of an OGB node-property dataset in OGB's unpacked layout; returns what it
    wrote."""
    spec = ogb_module.SPECS[name]
    rng = np.random.default_rng(seed)
    n = 30
    edges = np.stack([rng.integers(0, n - 2, 80), rng.integers(0, n - 2, 80)], 1)  # 2 isolated
    if spec.inverse_edges:  # OGB stores each undirected edge once
        edges = np.unique(np.sort(edges[edges[:, 0] != edges[:, 1]], 1), axis=0)
    raw = os.path.join(folder, "raw")
    _write_csv_gz(os.path.join(raw, "edge.csv.gz"), edges, "%d")
    _write_csv_gz(os.path.join(raw, "num-node-list.csv.gz"), [n], "%d")
    _write_csv_gz(os.path.join(raw, "num-edge-list.csv.gz"), [len(edges)], "%d")
    out = {"edges": edges, "n": n}
    if spec.task == "multilabel":
        out["y"] = rng.integers(0, 2, (n, 4))
    else:
        out["y"] = rng.permutation(np.arange(n) % 5)[:, None]
    _write_csv_gz(os.path.join(raw, "node-label.csv.gz"), out["y"], "%d")
    if spec.node_features:
        out["x"] = rng.normal(size=(n, 6)).astype(np.float32)
        _write_csv_gz(os.path.join(raw, "node-feat.csv.gz"), out["x"], "%.9g")
    if spec.edge_features:
        out["edge_attr"] = rng.random((len(edges), 3)).astype(np.float32)
        _write_csv_gz(os.path.join(raw, "edge-feat.csv.gz"), out["edge_attr"], "%.9g")
    extra = {"ogbn-arxiv": "node_year", "ogbn-proteins": "node_species"}.get(name)
    if extra:  # OGB's "additional node files", which ogb's reader requires
        _write_csv_gz(os.path.join(raw, f"{extra}.csv.gz"), rng.integers(0, 9, n), "%d")
    order = rng.permutation(n)
    out["split"] = {"train": order[:15], "valid": order[15:22], "test": order[22:]}
    for part, index in out["split"].items():
        _write_csv_gz(os.path.join(folder, "split", spec.split, f"{part}.csv.gz"), index, "%d")
    with open(os.path.join(folder, "RELEASE_v1.txt"), "w") as f:
        f.write("# fixture\n")
    return out


@pytest.mark.parametrize("name", list(ogb_module.SPECS))
def test_ogb_raw_layout_offline(tmp_path, monkeypatch, name):
    _no_stdin(monkeypatch)
    folder = tmp_path / name.replace("-", "_")
    wrote = write_ogb_raw(str(folder), name)
    spec = ogb_module.SPECS[name]
    module = OGBNodeProp(str(tmp_path), name, download=False)
    data = module.data
    n, edges = wrote["n"], torch.from_numpy(wrote["edges"].T)
    assert module.task == spec.task and module.ogb_name == name
    if spec.inverse_edges:  # every edge and its reverse
        assert torch.equal(data.edge_index[:, 0::2], edges)
        assert torch.equal(data.edge_index[:, 1::2], edges.flip(0))
    else:  # ogbn-arxiv, made undirected
        expected = torch.cat([edges, edges.flip(0)], 1).unique(dim=1)
        assert torch.equal(data.edge_index.unique(dim=1), expected)
    if spec.task == "multilabel":
        assert torch.equal(data.y, torch.from_numpy(wrote["y"]))
        assert module.num_outputs == 4
        # x is the mean of the incoming edges' features; the 2 isolated nodes get zeros
        attr = torch.from_numpy(wrote["edge_attr"])
        assert torch.equal(data.edge_attr[0::2], attr) and torch.equal(data.edge_attr[1::2], attr)
        for v in range(n):
            incoming = data.edge_attr[data.edge_index[1] == v]
            expected = incoming.mean(0) if len(incoming) else torch.zeros(3)
            assert torch.allclose(data.x[v], expected)
    else:
        assert torch.equal(data.y, torch.from_numpy(wrote["y"][:, 0]))
        assert torch.allclose(data.x, torch.from_numpy(wrote["x"]))
        assert module.num_outputs == 5
    for part, mask in (("train", data.train_mask), ("valid", data.val_mask),
                       ("test", data.test_mask)):
        assert torch.equal(mask.nonzero().flatten(), torch.from_numpy(np.sort(wrote["split"][part])))
    check_masks(data)

    # parsed once: the cache alone serves the next load (raw files gone, download off)
    for file in (folder / "raw").iterdir():
        file.unlink()
    again = OGBNodeProp(str(tmp_path), name, download=False).data
    assert torch.equal(again.edge_index, data.edge_index) and torch.equal(again.x, data.x)


@pytest.mark.parametrize("name", list(ogb_module.SPECS))
def test_ogb_reader_matches_ogb_package(tmp_path, monkeypatch, name):
    """Our reader against ogb's own (numpy) NodePropPredDataset on the same raw files."""
    ogb_dataset = pytest.importorskip("ogb.nodeproppred")
    _no_stdin(monkeypatch)
    write_ogb_raw(str(tmp_path / "ours" / name.replace("-", "_")), name)
    write_ogb_raw(str(tmp_path / "theirs" / name.replace("-", "_")), name)
    (tmp_path / "theirs" / name.replace("-", "_") / "processed").mkdir()  # ogb does not make it
    theirs = ogb_dataset.NodePropPredDataset(name, root=str(tmp_path / "theirs"))
    graph, label = theirs[0]
    split = theirs.get_idx_split()
    data = OGBNodeProp(str(tmp_path / "ours"), name, download=False, to_undirected=False).data
    assert torch.equal(data.edge_index, torch.from_numpy(graph["edge_index"]))
    assert data.num_nodes == graph["num_nodes"]
    label = torch.from_numpy(label.copy())
    assert torch.equal(data.y, label if label.shape[1] > 1 else label[:, 0])
    if graph["node_feat"] is not None:
        assert torch.equal(data.x, torch.from_numpy(graph["node_feat"]))
    if graph["edge_feat"] is not None:
        assert torch.equal(data.edge_attr, torch.from_numpy(graph["edge_feat"]))
    for part, mask in (("train", data.train_mask), ("valid", data.val_mask),
                       ("test", data.test_mask)):
        assert torch.equal(mask.nonzero().flatten(), torch.from_numpy(np.sort(split[part])))


def test_ogb_download_unpacks_into_ogb_layout(tmp_path, monkeypatch):
    """Download (a local zip standing in for OGB's server) fills in a structure-only copy."""
    _no_stdin(monkeypatch)
    wrote = write_ogb_raw(str(tmp_path / "server" / "arxiv"), "ogbn-arxiv")
    archive = tmp_path / "server" / "arxiv.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for dirpath, _, files in os.walk(tmp_path / "server" / "arxiv"):
            for file in files:
                path = os.path.join(dirpath, file)
                z.write(path, os.path.relpath(path, tmp_path / "server"))
    root = tmp_path / "root"
    write_ogb_raw(str(root / "ogbn_arxiv"), "ogbn-arxiv")
    (root / "ogbn_arxiv" / "raw" / "node-feat.csv.gz").unlink()  # the structure-only copy
    monkeypatch.setattr(ogb_module, "URL", (tmp_path / "server").as_uri() + "/{}.zip")
    data = OGBNodeProp(str(root), "ogbn-arxiv").data
    assert torch.allclose(data.x, torch.from_numpy(wrote["x"]))
    assert sorted(os.listdir(root)) == ["ogbn_arxiv"]


def test_ogb_random_features_replace_x(tmp_path):
    write_ogb_raw(str(tmp_path / "ogbn_products"), "ogbn-products")
    (tmp_path / "ogbn_products" / "raw" / "node-feat.csv.gz").unlink()
    data = OGBNodeProp(str(tmp_path), "ogbn-products", download=False, random_features=7).data
    gen = torch.Generator().manual_seed(ogb_module.RANDOM_FEATURES_SEED)
    assert torch.equal(data.x, torch.randn(30, 7, generator=gen))


def write_graphland_raw(root, name, task, split_types, n=40, seed=0):
    """A tiny GraphLand dataset in the layout PyG's GraphLandDataset unpacks from Zenodo."""
    yaml = pytest.importorskip("yaml")
    folder = os.path.join(root, name, "raw", name)
    os.makedirs(folder)
    rng = np.random.default_rng(seed)
    info = {"dataset_name": name, "task": task, "metric": "R2",
            "numerical_features_names": ["num_a", "num_b", "frac"],
            "fraction_features_names": ["frac"], "categorical_features_names": ["cat"],
            "target_name": "target", "graph_is_directed": False,
            "has_unlabeled_nodes": True, "has_nans_in_numerical_features": True}
    with open(os.path.join(folder, "info.yaml"), "w") as f:
        yaml.safe_dump(info, f)
    num_a = rng.normal(size=n)
    num_a[3] = np.nan
    with open(os.path.join(folder, "features.csv"), "w") as f:
        f.write("node_id,num_a,num_b,frac,cat\n")
        for i in range(n):
            a = "" if np.isnan(num_a[i]) else f"{num_a[i]:.6f}"
            f.write(f"{i},{a},{rng.normal():.6f},{rng.random():.6f},{i % 3}\n")
    if task == "regression":
        targets = rng.normal(size=n)
    elif task == "binary_classification":
        targets = (np.arange(n) % 2).astype(float)
    else:
        targets = (np.arange(n) % 4).astype(float)
    targets[5] = np.nan  # an unlabeled node
    with open(os.path.join(folder, "targets.csv"), "w") as f:
        f.write("node_id,target\n")
        for i in range(n):
            f.write(f"{i},{'' if np.isnan(targets[i]) else targets[i]}\n")
    for split_type in split_types:
        with open(os.path.join(folder, f"split_masks_{split_type}.csv"), "w") as f:
            f.write("node_id,train,val,test\n")
            for i in range(n):
                part = (i + len(split_type)) % 4
                f.write(f"{i},{part < 2},{part == 2},{part == 3}\n")
    with open(os.path.join(folder, "edgelist.csv"), "w") as f:
        f.write("source,target\n")
        for i in range(n):
            f.write(f"{i},{(7 * i + 1) % n}\n")
        f.write("4,4\n")  # a self-loop, which the baselines drop
    return targets


@needs_graphland
@pytest.mark.parametrize("name,task,ours,split_type", [
    ("city-roads-M", "regression", "regression", "RL"),
    ("tolokers-2", "binary_classification", "binary", "TH"),
    ("hm-categories", "multiclass_classification", "multiclass", "RH"),
])
def test_graphland_raw_layout_offline(tmp_path, name, task, ours, split_type):
    for package in ("pandas", "sklearn"):
        pytest.importorskip(package)
    targets = write_graphland_raw(str(tmp_path), name, task, ["RL", "RH", "TH"])
    module = GraphLand(str(tmp_path), name.lower(), split_type, download=False)
    data = module.data
    assert module.task == ours
    n = 40
    # 2 numerical + 1 fraction + one-hot of a 3-valued category
    assert data.x.shape == (n, 6) and module.num_features == 6
    assert data.x_categorical_mask.tolist() == [False] * 3 + [True] * 3
    assert not torch.isnan(data.x).any()
    assert not (data.edge_index[0] == data.edge_index[1]).any()
    row, col = data.edge_index
    assert set(zip(row.tolist(), col.tolist())) == set(zip(col.tolist(), row.tolist()))
    check_masks(data, splits_sum_to_all=False)
    labeled = torch.from_numpy(~np.isnan(targets))
    for key in ("train_mask", "val_mask", "test_mask"):
        assert not (data[key] & ~labeled).any(), "unlabeled nodes are in no mask"
    part = (torch.arange(n) + len(split_type)) % 4
    assert torch.equal(data.train_mask, (part < 2) & labeled)
    if ours == "regression":
        assert data.y.shape == (n, 1) and data.y.dtype == torch.float
        train = data.y[data.train_mask, 0]
        assert abs(float(train.mean())) < 1e-5  # standardized on the train nodes
        assert module.num_outputs == 1
    else:
        assert data.y.dtype == torch.long and data.y.dim() == 1
        expected = torch.from_numpy(np.nan_to_num(targets)).long()
        assert torch.equal(data.y, expected)
        assert module.num_outputs == (1 if ours == "binary" else 4)


@needs_graphland
def test_graphland_rejects_split_types_it_lacks(tmp_path):
    with pytest.raises(ValueError, match="no temporal split"):
        GraphLand(str(tmp_path), "city-roads-M", "TH")
    with pytest.raises(ValueError, match="split_type must be one of RL, RH, TH"):
        GraphLand(str(tmp_path), "tolokers-2", "THI")


# --- errors -------------------------------------------------------------------------------

MODULES = [
    lambda root: Planetoid(root, "Cora", download=False),
    lambda root: Amazon(root, "Photo", download=False),
    lambda root: Coauthor(root, "CS", download=False),
    lambda root: Heterophilous(root, "tolokers", download=False),
    lambda root: Heterophilous(root, "actor", download=False),
    lambda root: OGBNodeProp(root, "ogbn-proteins", download=False),
    lambda root: OGBNodeProp(root, "ogbn-arxiv", download=False, random_features=8),
    pytest.param(lambda root: GraphLand(root, "tolokers-2", "RL", download=False),
                 marks=needs_graphland),
]


@pytest.mark.parametrize("make", MODULES)
def test_missing_root_with_download_off_names_root_and_files(tmp_path, monkeypatch, make):
    _no_stdin(monkeypatch)
    root = str(tmp_path / "no" / "such" / "root")
    with pytest.raises(FileNotFoundError) as info:
        make(root).data
    message = str(info.value)
    assert root in message and "download is off" in message and "expected" in message
    assert "\n" not in message


def test_bad_names_and_splits():
    with pytest.raises(ValueError, match="name must be one of Cora, CiteSeer, PubMed; got 'Core'"):
        Planetoid("unused", "Core")
    with pytest.raises(ValueError, match="split must be 0; got 1"):
        Planetoid("unused", "Cora", split=1)
    with pytest.raises(ValueError, match=r"split must be 0\.\.9; got 10"):
        Heterophilous("unused", "actor", split=10)
    with pytest.raises(ValueError, match="split must be a non-negative int"):
        Amazon("unused", "Photo", split=-1)
    with pytest.raises(TypeError, match="split must be an int"):
        Coauthor("unused", "CS", split="0")
    with pytest.raises(ValueError, match="random_features must be an int >= 0"):
        OGBNodeProp("unused", "ogbn-arxiv", random_features=-3)
    assert Heterophilous("unused", "Squirrel_Filtered").name == "squirrel-filtered"
    assert Heterophilous("unused", "questions").task == "binary"
    assert OGBNodeProp("unused", "ogbn-proteins").task == "multilabel"


@pytest.mark.parametrize("task,bad", [("multiclass", -1), ("binary", 2), ("multilabel", 3)])
def test_labels_checked_once_on_load(task, bad):
    """Labels of scored nodes must suit the task (ValueError naming the data module); labels
    outside every split (a dataset's -1 for unlabelled nodes) are accepted."""
    from torch_geometric.data import Data
    from fastgnn.zoo.data.base import GraphDataModule

    class Labels(GraphDataModule):
        def __init__(self, y, **kwargs):
            super().__init__(root=".", **kwargs)
            self.task, self.y = task, y

        def load(self):
            n = self.y.shape[0]
            masks = torch.zeros(3, n, dtype=torch.bool)
            masks[torch.arange(n - 1) % 3, torch.arange(n - 1)] = True  # the last node unscored
            return Data(x=torch.randn(n, 2), y=self.y,
                        edge_index=torch.zeros(2, 0, dtype=torch.long),
                        train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])

    shape = (7, 3) if task == "multilabel" else (7,)
    y = torch.randint(0, 2, shape)
    unscored = y.clone()
    unscored[-1] = -1
    assert Labels(unscored).data.y is unscored
    y[2] = bad
    with pytest.raises(ValueError, match=f"Labels: {task}|Labels: multi-class"):
        Labels(y).data


def test_one_cpu_thread_unless_omp_num_threads_chooses(monkeypatch):
    """With every batch on the GPU (sample_on_gpu) the zoo runs one CPU thread, unless the
    user set OMP_NUM_THREADS."""
    from fastgnn.zoo.data.base import one_cpu_thread_unless_set
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        one_cpu_thread_unless_set()
        assert torch.get_num_threads() == 2
        monkeypatch.delenv("OMP_NUM_THREADS")
        one_cpu_thread_unless_set()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
