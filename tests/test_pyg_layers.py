"""fastgnn.pyg layers against the stock PyG layers: outputs and gradients for every option,
structure formats, the structure cache, fallbacks, dropout, autocast, torch.compile."""
from __future__ import annotations

import copy
import gc
import weakref
import warnings

import pytest
import torch

pyg_nn = pytest.importorskip("torch_geometric.nn")

import fastgnn  # noqa: E402
import fastgnn.pyg as fpyg  # noqa: E402
from fastgnn.pyg import _base  # noqa: E402
from conftest import devices, load_dataset, random_edge_index  # noqa: E402
from pyg_cases import (assert_same, edge_extra, features, fused_only, make_pair,  # noqa: E402
                       to_device)

IN, OUT, DST_IN = 8, 6, 5


def _gin(aggr="add", **kw):
    return lambda c: pyg_nn.GINConv(torch.nn.Sequential(
        torch.nn.Linear(c if isinstance(c, int) else c[0], OUT), torch.nn.ReLU()),
        aggr=aggr, **kw)


# (id, factory(in_channels), per-edge input kind, bipartite supported)
CASES = [
    ("gcn", lambda c: pyg_nn.GCNConv(c, OUT), None, False),
    ("gcn-weight", lambda c: pyg_nn.GCNConv(c, OUT), "weight", False),
    ("gcn-improved-weight", lambda c: pyg_nn.GCNConv(c, OUT, improved=True), "weight", False),
    ("gcn-improved", lambda c: pyg_nn.GCNConv(c, OUT, improved=True, bias=False), None, False),
    ("gcn-noloops", lambda c: pyg_nn.GCNConv(c, OUT, add_self_loops=False), None, False),
    ("gcn-noloops-weight", lambda c: pyg_nn.GCNConv(c, OUT, add_self_loops=False), "weight", False),
    ("gcn-nonorm-weight", lambda c: pyg_nn.GCNConv(c, OUT, normalize=False), "weight", False),
    ("gcn-nonorm", lambda c: pyg_nn.GCNConv(c, OUT, normalize=False), None, False),
    ("gcn-cached", lambda c: pyg_nn.GCNConv(c, OUT, cached=True), None, False),
    ("sage-mean", lambda c: pyg_nn.SAGEConv(c, OUT), None, True),
    ("sage-sum", lambda c: pyg_nn.SAGEConv(c, OUT, aggr="sum"), None, True),
    ("sage-max", lambda c: pyg_nn.SAGEConv(c, OUT, aggr="max"), None, True),
    ("sage-min", lambda c: pyg_nn.SAGEConv(c, OUT, aggr="min", bias=False), None, True),
    ("sage-norm-project-noroot", lambda c: pyg_nn.SAGEConv(
        c, OUT, normalize=True, project=True, root_weight=False), None, True),
    ("graphconv-add", lambda c: pyg_nn.GraphConv(c, OUT), "weight", True),
    ("graphconv-mean", lambda c: pyg_nn.GraphConv(c, OUT, aggr="mean"), "weight", True),
    ("graphconv-max", lambda c: pyg_nn.GraphConv(c, OUT, aggr="max"), None, True),
    ("gin", _gin(), None, True),
    ("gin-train-eps-mean", _gin("mean", eps=0.3, train_eps=True), None, True),
    ("simple-sum", lambda c: pyg_nn.SimpleConv(), "weight", True),
    ("simple-mean-sum", lambda c: pyg_nn.SimpleConv("mean", "sum"), "weight", True),
    ("simple-max-cat", lambda c: pyg_nn.SimpleConv("max", "cat"), None, True),
    ("simple-selfloop", lambda c: pyg_nn.SimpleConv("sum", "self_loop"), "weight", False),
    ("gatv2", lambda c: pyg_nn.GATv2Conv(c, OUT, heads=2), None, True),
    ("gatv2-mean-heads", lambda c: pyg_nn.GATv2Conv(c, OUT, heads=3, concat=False,
                                                    negative_slope=0.1), None, True),
    ("gatv2-noloops", lambda c: pyg_nn.GATv2Conv(c, OUT, heads=2, add_self_loops=False), None,
     True),
    ("gatv2-edge-mean", lambda c: pyg_nn.GATv2Conv(c, OUT, heads=2, edge_dim=3), "attr", True),
    ("gatv2-edge-fill-float", lambda c: pyg_nn.GATv2Conv(c, OUT, heads=2, edge_dim=3,
                                                         fill_value=0.5), "attr", True),
    ("gatv2-edge-fill-tensor", lambda c: pyg_nn.GATv2Conv(
        c, OUT, heads=2, edge_dim=3, fill_value=torch.tensor([1.0, -1.0, 0.5])), "attr", True),
    ("gatv2-edge-fill-max-noloops", lambda c: pyg_nn.GATv2Conv(
        c, OUT, edge_dim=3, fill_value="max", add_self_loops=False), "attr", True),
    ("gatv2-share-residual", lambda c: pyg_nn.GATv2Conv(
        c, OUT, heads=2, share_weights=True, residual=True, bias=False), None, False),
    ("gatv2-residual", lambda c: pyg_nn.GATv2Conv(c, OUT, heads=2, residual=True,
                                                  concat=False), None, True),
    ("gat", lambda c: pyg_nn.GATConv(c, OUT, heads=2), None, True),
    ("gat-mean-heads", lambda c: pyg_nn.GATConv(c, OUT, heads=3, concat=False,
                                                negative_slope=0.1), None, True),
    ("gat-noloops", lambda c: pyg_nn.GATConv(c, OUT, heads=2, add_self_loops=False), None,
     True),
    ("gat-edge-mean", lambda c: pyg_nn.GATConv(c, OUT, heads=2, edge_dim=3), "attr", True),
    ("gat-edge-fill-float", lambda c: pyg_nn.GATConv(c, OUT, heads=2, edge_dim=3,
                                                     fill_value=0.5), "attr", True),
    ("gat-edge-fill-tensor", lambda c: pyg_nn.GATConv(
        c, OUT, heads=2, edge_dim=3, fill_value=torch.tensor([1.0, -1.0, 0.5])), "attr", True),
    ("gat-edge-fill-max-noloops", lambda c: pyg_nn.GATConv(
        c, OUT, edge_dim=3, fill_value="max", add_self_loops=False), "attr", True),
    ("gat-residual-nobias", lambda c: pyg_nn.GATConv(c, OUT, heads=2, residual=True,
                                                     bias=False), None, True),
    ("gat-residual-mean", lambda c: pyg_nn.GATConv(c, OUT, heads=2, residual=True,
                                                   concat=False), None, True),
    ("transformer", lambda c: pyg_nn.TransformerConv(c, OUT, heads=2), None, True),
    ("transformer-mean-beta", lambda c: pyg_nn.TransformerConv(c, OUT, heads=2, concat=False,
                                                               beta=True), None, True),
    ("transformer-beta-edge", lambda c: pyg_nn.TransformerConv(c, OUT, heads=2, beta=True,
                                                               edge_dim=3), "attr", True),
    ("transformer-noroot", lambda c: pyg_nn.TransformerConv(c, OUT, heads=2, root_weight=False,
                                                            bias=False), None, True),
]
CASE_IDS = [case[0] for case in CASES]
BIPARTITE = [case for case in CASES if case[3]]


@pytest.fixture(autouse=True)
def _fresh_warnings():
    _base._warned.clear()
    yield


def _build(factory, in_channels):
    torch.manual_seed(0)
    return factory(in_channels)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_random_directed(case, train, device):
    _, factory, extra, _ = case
    ei = random_edge_index(60, 60, 400, seed=3)
    stock, fast = make_pair(_build(factory, IN), train, device)
    args = (features(60, 60, IN, False), ei)
    if extra is not None:
        args += (edge_extra(extra, ei.size(1)),)
    args = to_device(args, device)
    with fused_only():
        assert_same(stock, fast, args)
        assert_same(stock, fast, args, seed=1)  # second call: cached structures


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", BIPARTITE, ids=[c[0] for c in BIPARTITE])
@pytest.mark.parametrize("more_dst", [False, True], ids=["fewer-dst", "more-dst"])
def test_random_bipartite(case, train, more_dst, device):
    name, factory, extra, _ = case
    num_src, num_dst = (30, 45) if more_dst else (50, 30)
    same_width = name.startswith(("gin", "simple"))
    dst_in = IN if same_width else DST_IN
    if more_dst and name in ("gatv2-edge-mean", "gat-edge-mean"):
        pytest.skip("PyG's loop-fill scatter rejects destinations beyond min(S, T)")
    ei = random_edge_index(num_src, num_dst, 300, seed=4)
    stock, fast = make_pair(_build(factory, IN if same_width else (IN, DST_IN)), train, device)
    args = (features(num_src, num_dst, IN, True, dst_channels=dst_in), ei)
    if extra is not None:
        args += (edge_extra(extra, ei.size(1)),)
    args = to_device(args, device)
    with fused_only():
        assert_same(stock, fast, args)


CORA_CASES = ["gcn", "gcn-weight", "sage-mean", "sage-max", "graphconv-mean", "gin",
              "simple-mean-sum", "gatv2-edge-mean", "transformer-beta-edge", "gat-edge-mean"]


@pytest.mark.data
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", CORA_CASES)
def test_cora(name, device):
    data = load_dataset("cora")
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock, fast = make_pair(_build(factory, 16), True, device)
    args = (features(data.num_nodes, data.num_nodes, 16, False), data.edge_index)
    if extra is not None:
        args += (edge_extra(extra, data.edge_index.size(1)),)
    args = to_device(args, device)
    assert_same(stock, fast, args, rtol=1e-4, atol=2e-5)


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["gcn", "gcn-weight", "sage-mean", "sage-max", "gatv2",
                                  "transformer", "gat"])
def test_tolokers(name, device):
    data = load_dataset("tolokers")
    if device == "cpu" and name.startswith(("gat", "transformer", "sage-max")):
        pytest.skip("reference attention and min/max on the full graph: GPU only")
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock, fast = make_pair(_build(factory, data.x.shape[1]), True, device)
    x = data.x.float()
    if name == "sage-max":
        # tolokers' features are mostly 0/1, so a max has many tied sources: fastgnn gives the
        # gradient to the smallest one, PyG splits it evenly. Normal features on the same
        # structure have no ties (checked: one winner per row and feature; a small jitter of
        # the 0/1 values still left 183 ties at the hubs).
        x = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    args = (x, data.edge_index)
    if extra is not None:
        args += (edge_extra(extra, data.edge_index.size(1)),)
    assert_same(stock, fast, to_device(args, device), rtol=1e-4, atol=5e-5)


# ---- structure formats ------------------------------------------------------------------------
FORMAT_CASES = ["gcn", "gcn-nonorm", "sage-mean", "sage-sum", "graphconv-mean", "gin",
                "simple-mean-sum"]


def _adj_t(ei, num_src, num_dst, layout):
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor
    build = to_torch_csr_tensor if layout == "csr" else to_torch_coo_tensor
    return build(ei.flip(0), size=(num_dst, num_src))


@pytest.mark.parametrize("layout", ["csr", "coo"])
@pytest.mark.parametrize("name", FORMAT_CASES)
def test_torch_sparse_adjacency(name, layout):
    _, factory, _, _ = CASES[CASE_IDS.index(name)]
    ei = torch.unique(random_edge_index(40, 40, 200, seed=5), dim=1)
    adj = _adj_t(ei, 40, 40, layout)
    stock, fast = make_pair(_build(factory, IN))
    with fused_only():
        warnings.filterwarnings("ignore", message="Converting sparse tensor")
        assert_same(stock, fast, (features(40, 40, IN, False), adj))


SPARSE_TENSOR_CASES = FORMAT_CASES + ["gcn-cached", "sage-max", "graphconv-max"]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", SPARSE_TENSOR_CASES)
def test_torch_sparse_sparse_tensor(name, weighted):
    """torch_sparse's SparseTensor (transposed, as PyG takes it), with and without values."""
    torch_sparse = pytest.importorskip("torch_sparse")
    if weighted and name == "graphconv-max":
        pytest.skip("sparse values with max: the stock layer's own fallback, tested elsewhere")
    _, factory, _, _ = CASES[CASE_IDS.index(name)]
    ei = torch.unique(random_edge_index(40, 40, 200, seed=5), dim=1)
    value = torch.rand(ei.size(1), generator=torch.Generator().manual_seed(3)) if weighted \
        else None
    adj_t = torch_sparse.SparseTensor(row=ei[1], col=ei[0], value=value, sparse_sizes=(40, 40))
    stock, fast = make_pair(_build(factory, IN))
    with fused_only():
        assert_same(stock, fast, (features(40, 40, IN, False), adj_t))
        assert_same(stock, fast, (features(40, 40, IN, False, seed=1), adj_t))  # cached
    if name == "gcn-cached":
        assert fast._cached_adj_t is not None and fast._cached_edge_index is None


def test_sparse_tensor_changed_in_place_is_rebuilt():
    torch_sparse = pytest.importorskip("torch_sparse")
    ei = torch.unique(random_edge_index(30, 30, 150, seed=7), dim=1)
    adj_t = torch_sparse.SparseTensor(row=ei[1], col=ei[0], value=torch.rand(ei.size(1)),
                                      sparse_sizes=(30, 30))
    stock, fast = make_pair(_build(CASES[CASE_IDS.index("gcn-nonorm")][1], IN))
    x = features(30, 30, IN, False)
    assert_same(stock, fast, (x, adj_t))
    adj_t.storage.value().mul_(2.0)  # same object, new values
    assert_same(stock, fast, (x, adj_t))
    col = adj_t.storage.col()
    col[0] = (col[0] + 1) % 30  # same object, another structure: the cached Graph is stale
    assert_same(stock, fast, (x, adj_t))


@pytest.mark.parametrize("name", ["gcn", "gcn-weight", "gcn-noloops-weight", "sage-max",
                                  "graphconv-add", "simple-selfloop", "gatv2-edge-mean",
                                  "transformer-beta-edge"])
def test_edge_index_object_and_graph(name):
    from torch_geometric import EdgeIndex
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    ei = random_edge_index(50, 50, 300, seed=6)
    x = features(50, 50, IN, False)
    extra_value = () if extra is None else (edge_extra(extra, ei.size(1)),)
    stock, fast = make_pair(_build(factory, IN))
    expected = stock(x, ei, *extra_value)
    graph = fastgnn.Graph.from_edge_index(ei, num_nodes=50)
    with fused_only():
        got_index = fast(x, EdgeIndex(ei, sparse_size=(50, 50)), *extra_value)
        got_graph = fast(x, graph, *extra_value)
    torch.testing.assert_close(got_index, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_graph, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["sage-mean", "graphconv-add", "gin", "simple-mean-sum"])
def test_bipartite_without_destination_features(name):
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    ei = random_edge_index(30, 20, 100, seed=20)
    stock, fast = make_pair(_build(factory, IN))
    args = ((torch.randn(30, IN), None), ei)
    with fused_only():
        torch.testing.assert_close(fast(*args, size=(30, 20)), stock(*args, size=(30, 20)))


@pytest.mark.parametrize("name", ["sage-mean", "sage-max", "graphconv-add", "gin",
                                  "simple-mean-sum"])
@pytest.mark.parametrize("rows,size", [
    (3, (6, 3)),                # fewer source rows than size[0]: the kernels would read past x
    (6, (6, 3)),                # one tensor for both sides, size[1] differs
    ((6, 4), (6, 3)),           # destination features of the wrong size
    ((5, 3), (6, 3)),
])
def test_features_that_contradict_size_raise_as_stock(name, rows, size):
    _, factory, _, _ = CASES[CASE_IDS.index(name)]
    # source 5 lies past three rows of x: a kernel trusting size would read beyond them
    ei = torch.tensor([[0, 1, 2, 5], [0, 1, 2, 2]])
    x = tuple(torch.randn(r, IN) for r in rows) if isinstance(rows, tuple) else \
        torch.randn(rows, IN)
    stock, fast = make_pair(_build(factory, IN))
    with pytest.raises(ValueError):
        stock(x, ei, size=size)
    with pytest.raises(ValueError, match=r"size\[[01]\] is \d+ but the (source|destination) "
                                         r"features have \d+ rows"):
        fast(x, ei, size=size)


@pytest.mark.parametrize("name", ["gcn", "sage-mean", "sage-max", "graphconv-add", "gin",
                                  "simple-mean-sum", "gatv2", "gat-edge-mean",
                                  "transformer-beta-edge"])
def test_training_after_an_inference_mode_call_on_the_same_edges(name):
    """An evaluation under torch.inference_mode, then a training step on the same edge_index
    (the usual epoch loop): what the evaluation derived and cached must serve the training
    step, whose backward saves it."""
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    ei = random_edge_index(30, 30, 150, seed=21)
    x = torch.randn(30, IN)
    args = (x, ei) + (() if extra is None else (edge_extra(extra, ei.size(1)),))
    stock, fast = make_pair(_build(factory, IN))
    with torch.inference_mode():
        fast(*args)
    with fused_only():
        assert_same(stock, fast, args)


@pytest.mark.parametrize("make", [
    lambda: pyg_nn.GCNConv(IN, OUT, aggr="mean"),
    lambda: pyg_nn.GATConv(IN, OUT, heads=2, aggr="mean"),
    lambda: pyg_nn.GATv2Conv(IN, OUT, heads=2, aggr="max"),
    lambda: pyg_nn.TransformerConv(IN, OUT, heads=2, aggr="mean"),
], ids=["gcn-mean", "gat-mean", "gatv2-max", "transformer-mean"])
def test_layers_that_sum_fall_back_for_other_aggregations(make):
    """These fused paths sum their messages: another aggr runs PyG's forward, with the
    warning (it was silently summed)."""
    torch.manual_seed(0)
    stock, fast = make_pair(make())
    ei = random_edge_index(30, 30, 150, seed=22)
    x = torch.randn(30, IN)
    with pytest.warns(fpyg.FallbackWarning, match="aggr="):
        torch.testing.assert_close(fast(x, ei), stock(x, ei))


@pytest.mark.parametrize("make", [lambda: pyg_nn.SimpleConv(node_dim=1),
                                  lambda: pyg_nn.GINConv(torch.nn.Identity(), node_dim=1)],
                         ids=["simple", "gin"])
def test_nodes_on_another_dim_fall_back(make):
    stock, fast = make_pair(make())
    ei = random_edge_index(IN, IN, 40, seed=23)  # nodes on dim 1: IN of them
    x = torch.randn(5, IN)
    with pytest.warns(fpyg.FallbackWarning, match="node_dim=1"):
        torch.testing.assert_close(fast(x, ei), stock(x, ei))


@pytest.mark.parametrize("make", [
    lambda: pyg_nn.GCNConv(IN, OUT), lambda: pyg_nn.GCNConv(IN, OUT, add_self_loops=False),
    lambda: pyg_nn.GCNConv(IN, OUT, normalize=False), lambda: pyg_nn.GraphConv(IN, OUT),
    lambda: pyg_nn.SimpleConv(combine_root="self_loop"),
], ids=["gcn", "gcn-noloops", "gcn-unnormalised", "graphconv", "simple-self-loop"])
def test_edge_weight_as_a_column_is_fused_as_stock(make):
    """PyG multiplies messages by edge_weight.view(-1, 1), so [E, 1] weights equal [E] ones."""
    torch.manual_seed(0)
    stock, fast = make_pair(make())
    ei = random_edge_index(30, 30, 150, seed=24)
    args = (torch.randn(30, IN), ei, torch.rand(ei.size(1), 1))
    with fused_only():
        assert_same(stock, fast, args)


@pytest.mark.parametrize("make", [
    lambda: pyg_nn.GCNConv(IN, OUT, normalize=False), lambda: pyg_nn.GraphConv(IN, OUT),
    lambda: pyg_nn.SimpleConv(),
], ids=["gcn-unnormalised", "graphconv", "simple"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integer_edge_weights_are_promoted_as_stock(make, dtype):
    """PyG's edge_weight.view(-1, 1) * x_j promotes integer and bool weights to x's dtype; the
    fused layers take them as that product does."""
    torch.manual_seed(0)
    stock, fast = make_pair(make())
    ei = random_edge_index(30, 30, 150, seed=25)
    weight = torch.randint(0, 3, (ei.size(1),)).to(dtype)
    with fused_only():
        assert_same(stock, fast, (torch.randn(30, IN), ei, weight))


def test_graph_size_mismatch_is_an_error():
    fast = fpyg.SAGEConv(IN, OUT)
    graph = fastgnn.Graph.from_edge_index(random_edge_index(30, 30, 100), num_nodes=30)
    with pytest.raises(ValueError, match="fastgnn.Graph has 30 sources"):
        fast(torch.randn(31, IN), graph)


class _Doubled(torch.nn.Module):
    def forward(self, value):
        return 2 * value


@pytest.mark.parametrize("name", ["gcn", "gcn-weight", "sage-mean", "graphconv-add"])
def test_parametrized_parameters(name):
    """The fused paths read parameters and submodules from ``_parameters`` and ``_modules``
    (cheaper than the attributes); a parametrized parameter lives elsewhere and must still be
    used."""
    from torch.nn.utils import parametrize
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock, fast = make_pair(_build(factory, IN))
    for layer in (stock, fast):
        if layer._parameters.get("bias") is not None:
            parametrize.register_parametrization(layer, "bias", _Doubled())
        for linear in [m for m in layer.modules() if isinstance(m, pyg_nn.dense.Linear)]:
            parametrize.register_parametrization(linear, "weight", _Doubled())
    ei = random_edge_index(30, 30, 120, seed=8)
    args = (torch.randn(30, IN), ei) + (
        () if extra is None else (edge_extra(extra, ei.size(1)),))
    with fused_only():
        assert_same(stock, fast, args)


@pytest.mark.parametrize("name", ["gcn", "sage-mean", "gin"])
def test_integer_features_fall_back_to_the_stock_layer(name):
    """The stock layer decides what integer features mean: it raises its own error (GCNConv,
    SAGEConv) or computes (GINConv's ``(1 + eps) * x`` turns them into floats)."""
    stock, fast = make_pair(_build(CASES[CASE_IDS.index(name)][1], IN))
    ei = random_edge_index(30, 30, 120, seed=9)
    x = torch.randint(0, 5, (30, IN))

    def run(layer):
        try:
            return layer(x, ei)
        except RuntimeError as error:
            return str(error)
    expected = run(stock)
    with pytest.warns(fpyg.FallbackWarning, match="dtype torch.int64"):
        got = run(fast)
    if isinstance(expected, str):
        assert got == expected
    else:
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("name", [c[0] for c in CASES if c[2] is not None])
def test_per_edge_input_of_the_wrong_size(name):
    """A clear error naming the argument (on CUDA a wrong size would reach an index kernel's
    device assert)."""
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    _, fast = make_pair(_build(factory, IN))
    ei = random_edge_index(30, 30, 120, seed=13)
    argument = "edge_weight" if extra == "weight" else "edge_attr|edge_term"
    with fused_only(), pytest.raises(ValueError, match=argument):
        fast(torch.randn(30, IN), ei, edge_extra(extra, ei.size(1) - 1))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gcn", "gcn-weight", "sage-mean", "sage-max", "gin",
                                  "simple-selfloop", "gatv2", "transformer"])
def test_features_and_edges_on_different_devices(name):
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    _, fast = make_pair(_build(factory, IN), device="cuda")
    ei = random_edge_index(30, 30, 120, seed=12)
    args = (torch.randn(30, IN, device="cuda"), ei) + (
        () if extra is None else (edge_extra(extra, ei.size(1)).cuda(),))
    with fused_only(), pytest.raises(ValueError, match="on cuda:0 but"):
        fast(*args)


# ---- structure cache ---------------------------------------------------------------------------
def test_cache_reuses_rebuilds_and_forgets():
    fpyg.structure_cache.clear()
    stock, layer = make_pair(pyg_nn.GCNConv(IN, OUT))
    ei = random_edge_index(40, 40, 200, seed=7)
    x = torch.randn(40, IN)
    layer(x, ei)
    builds = fpyg.structure_cache.builds
    per_input = len(fpyg.structure_cache)  # the rebuilt structure and its GCN coefficients
    layer(x, ei)
    assert fpyg.structure_cache.builds == builds  # same tensor: no rebuild
    ei[1, :10] = (ei[1, :10] + 1) % 40  # in-place change bumps _version
    torch.testing.assert_close(layer(x, ei), stock(x, ei), rtol=1e-4, atol=1e-5)
    assert fpyg.structure_cache.builds == builds + per_input
    layer.add_self_loops = stock.add_self_loops = False  # an option of the cache key
    torch.testing.assert_close(layer(x, ei), stock(x, ei), rtol=1e-4, atol=1e-5)
    entries = len(fpyg.structure_cache)
    replacement = ei.clone()
    layer(x, replacement)
    assert len(fpyg.structure_cache) == entries + per_input
    graph = weakref.ref(fpyg.structure.resolve(fpyg.structure.as_edges(replacement), 40, 40,
                                               None, 40, rebuild=True).graph)  # the layer's
    del replacement
    gc.collect()
    assert len(fpyg.structure_cache) == entries and graph() is None  # died with its input


def test_cache_notices_in_place_changes_of_an_edge_index_object():
    from torch_geometric import EdgeIndex
    torch.manual_seed(0)
    stock = pyg_nn.GATv2Conv(IN, OUT, heads=2)
    fast = fastgnn.enable(copy.deepcopy(stock))
    ei = EdgeIndex(random_edge_index(30, 30, 100, seed=18), sparse_size=(30, 30))
    x = torch.randn(30, IN)
    fast(x, ei)
    ei[1, :5] = 0  # through the wrapper
    torch.testing.assert_close(fast(x, ei), stock(x, ei))
    ei.as_tensor()[1, 5:10] = 1  # through its data
    torch.testing.assert_close(fast(x, ei), stock(x, ei))


def test_cache_is_bounded():
    cache = fpyg.structure.StructureCache(capacity=3)
    keep = [torch.zeros(2, 1, dtype=torch.long) for _ in range(5)]
    for t in keep:
        cache.get(t, ("x",), lambda: object())
    assert len(cache) == 3


def test_cache_keys_on_layer_options():
    ei = random_edge_index(40, 40, 200, seed=8)
    x = torch.randn(40, IN)
    builds = fpyg.structure_cache.builds
    for layer in (fpyg.GCNConv(IN, OUT), fpyg.GCNConv(IN, OUT, add_self_loops=False),
                  fpyg.SAGEConv(IN, OUT), fpyg.GraphConv(IN, OUT)):
        layer(x, ei)
        layer(x, ei)
    # each GCNConv: its structure and its coefficients; SAGE and GraphConv share one
    assert fpyg.structure_cache.builds == builds + 5


# ---- fallbacks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layer_cls", ["GATv2Conv", "TransformerConv"])
def test_fallback_warns_once_and_matches(layer_cls):
    torch.manual_seed(0)
    stock = getattr(pyg_nn, layer_cls)(IN, OUT, heads=2)
    fast = fastgnn.enable(copy.deepcopy(stock))
    ei = random_edge_index(30, 30, 120, seed=9)
    x = torch.randn(30, IN)
    with pytest.warns(fpyg.FallbackWarning, match="return_attention_weights"):
        out, (index, alpha) = fast(x, ei, return_attention_weights=True)
    expected, (index_s, alpha_s) = stock(x, ei, return_attention_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(alpha, alpha_s)
    with fused_only():
        fast(x, ei, return_attention_weights=True)  # no second warning


def test_fallback_for_custom_aggregation_and_hooks():
    from torch_geometric.nn.aggr import SoftmaxAggregation
    torch.manual_seed(0)
    ei = random_edge_index(30, 30, 120, seed=10)
    x = torch.randn(30, IN)
    stock = pyg_nn.SAGEConv(IN, OUT, aggr=SoftmaxAggregation())
    fast = fastgnn.enable(copy.deepcopy(stock))
    with pytest.warns(fpyg.FallbackWarning, match="aggr="):
        torch.testing.assert_close(fast(x, ei), stock(x, ei))
    stock = pyg_nn.SAGEConv(IN, OUT)
    fast = fastgnn.enable(copy.deepcopy(stock))
    seen = []
    fast.register_message_forward_hook(lambda module, inputs, output: seen.append(1))
    with pytest.warns(fpyg.FallbackWarning, match="message_forward_hook"):
        torch.testing.assert_close(fast(x, ei), stock(x, ei))
    assert seen


def test_fallback_for_weighted_max():
    torch.manual_seed(0)
    stock = pyg_nn.GraphConv(IN, OUT, aggr="max")
    fast = fastgnn.enable(copy.deepcopy(stock))
    ei = random_edge_index(30, 30, 120, seed=11)
    x, w = torch.randn(30, IN), torch.rand(ei.size(1))
    with pytest.warns(fpyg.FallbackWarning, match="aggr='max'"):
        torch.testing.assert_close(fast(x, ei, w), stock(x, ei, w))


# ---- dropout -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", ["gat", "gatv2", "transformer"])
def test_attention_dropout_statistics(layer):
    torch.manual_seed(0)
    if layer == "gat":
        stock = pyg_nn.GATConv(IN, OUT, heads=2, dropout=0.5, bias=False)
    elif layer == "gatv2":
        stock = pyg_nn.GATv2Conv(IN, OUT, heads=2, dropout=0.5, bias=False)
    else:
        stock = pyg_nn.TransformerConv(IN, OUT, heads=2, dropout=0.5, root_weight=False)
    fast = fastgnn.enable(copy.deepcopy(stock))
    ei = random_edge_index(30, 30, 200, seed=12)
    x = torch.randn(30, IN)
    fast.eval()
    expected = fast(x, ei)
    torch.testing.assert_close(expected, stock.eval()(x, ei))
    fast.train()
    with torch.no_grad():
        draws = torch.stack([fast(x, ei) for _ in range(200)])
    assert not torch.allclose(draws[0], draws[1])
    assert not torch.allclose(draws[0], expected)
    # Inverted dropout keeps the expectation: the mean of many draws approaches eval output.
    error = (draws.mean(0) - expected).abs().mean() / expected.abs().mean()
    assert error < 0.1, float(error)


# ---- state_dict, autocast, compile -------------------------------------------------------------
@pytest.mark.parametrize("name", ["gcn", "sage-norm-project-noroot", "graphconv-add",
                                  "gin-train-eps-mean", "gatv2-edge-mean",
                                  "transformer-beta-edge", "gat-edge-mean"])
def test_state_dict_round_trip(name):
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock = _build(factory, IN)
    torch.manual_seed(1)
    fast = fastgnn.enable(factory(IN))  # a fastgnn layer with other weights
    assert stock.state_dict().keys() == fast.state_dict().keys()
    fast.load_state_dict(stock.state_dict())
    ei = random_edge_index(30, 30, 150, seed=13)
    args = (torch.randn(30, IN), ei) + (
        () if extra is None else (edge_extra(extra, ei.size(1)),))
    torch.testing.assert_close(fast(*args), stock(*args), rtol=1e-4, atol=1e-5)
    restored = factory(IN)
    restored.load_state_dict(fast.state_dict())
    torch.testing.assert_close(restored(*args), stock(*args))


def test_gat_layer_cast_in_part_promotes_as_stock():
    """A GATConv whose destination projection alone is float32 (float64 attention vectors):
    stock PyG promotes the scores to float64; the enabled layer must give the same, fused."""
    torch.manual_seed(0)
    stock = pyg_nn.GATConv((IN, IN), OUT, heads=2).double()
    stock.lin_dst.float()
    fast = fastgnn.enable(copy.deepcopy(stock))
    ei = random_edge_index(30, 30, 150, seed=15)
    args = ((torch.randn(30, IN, dtype=torch.float64), torch.randn(30, IN)), ei)
    with fused_only():
        out = assert_same(stock, fast, args)
    assert out.dtype == torch.float64


def test_directly_constructed_layers_match():
    torch.manual_seed(0)
    fast = fpyg.GATv2Conv(IN, OUT, heads=2, edge_dim=3)
    stock = pyg_nn.GATv2Conv(IN, OUT, heads=2, edge_dim=3)
    stock.load_state_dict(fast.state_dict())
    ei = random_edge_index(30, 30, 150, seed=14)
    args = (torch.randn(30, IN), ei, torch.randn(ei.size(1), 3))
    assert_same(stock, fast, args)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["gcn-weight", "sage-mean", "sage-max", "gatv2-edge-mean",
                                  "transformer-beta-edge", "gat-edge-mean"])
def test_autocast(name, dtype, device):
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock, fast = make_pair(_build(factory, IN), True, device)
    ei = random_edge_index(40, 40, 200, seed=15)
    args = to_device((torch.randn(40, IN), ei) + (
        () if extra is None else (edge_extra(extra, ei.size(1)),)), device)
    with torch.autocast(device, dtype=dtype):
        expected, got = stock(*args), fast(*args)
    # PyG's arithmetic may leave autocast's dtype where it calls ops autocast runs in float32
    # (CUDA's exp in softmax); the fused ops return their inputs' common dtype.
    assert got.dtype in (expected.dtype, dtype)
    torch.testing.assert_close(got.float(), expected.float(), rtol=5e-2, atol=5e-2)
    got.float().sum().backward()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["gcn", "gcn-weight", "gatv2-edge-mean", "gat-edge-mean"])
def test_torch_compile(name, device):
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock, fast = make_pair(_build(factory, IN), True, device)
    ei = random_edge_index(40, 40, 200, seed=16)
    args = to_device((torch.randn(40, IN), ei) + (
        () if extra is None else (edge_extra(extra, ei.size(1)),)), device)
    torch._dynamo.reset()
    compiled = torch.compile(fast, backend="aot_eager")
    with fused_only():
        for _ in range(2):
            torch.testing.assert_close(compiled(*args), stock(*args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer_cls", [layer.__name__ for layer in fpyg.LAYERS])
def test_fallback_of_constructed_and_copied_layers(layer_cls):
    """PyG builds `propagate` per class from source annotations; our same-named subclasses
    must get a working one when constructed directly or deep-copied."""
    args = (torch.nn.Linear(IN, OUT),) if layer_cls == "GINConv" else () if \
        layer_cls == "SimpleConv" else (IN, OUT)
    torch.manual_seed(0)
    fast = copy.deepcopy(getattr(fpyg, layer_cls)(*args))
    stock = getattr(pyg_nn, layer_cls)(*args)
    stock.load_state_dict(fast.state_dict())
    fast.register_propagate_forward_hook(lambda *unused: None)  # forces the fallback
    ei = random_edge_index(30, 30, 120, seed=17)
    x = torch.randn(30, IN)
    with pytest.warns(fpyg.FallbackWarning, match="propagate_forward_hook"):
        torch.testing.assert_close(fast(x, ei), stock(x, ei))


@pytest.mark.parametrize("layer_cls", [layer.__name__ for layer in fpyg.LAYERS])
def test_torch_jit_script_says_what_to_do(layer_cls):
    args = (torch.nn.Linear(IN, OUT),) if layer_cls == "GINConv" else () if \
        layer_cls == "SimpleConv" else (IN, OUT)
    model = torch.nn.Sequential(getattr(pyg_nn, layer_cls)(*args))
    fastgnn.enable(model)
    with pytest.raises(RuntimeError, match=f"fastgnn.pyg.{layer_cls}.*torch.compile"):
        torch.jit.script(model)
    assert type(model[0]) is getattr(fpyg, layer_cls)  # the eager model is left as it was
    fastgnn.disable(model)
    try:  # the stock layer scripts as before, where PyG's own does (GATv2Conv's does not)
        torch.jit.script(model[0])
    except RuntimeError as exc:
        assert "fastgnn" not in str(exc)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gcn-weight", "sage-mean", "transformer-beta-edge",
                                  "gat-edge-mean"])
def test_torch_compile_inductor_cuda(name):
    _, factory, extra, _ = CASES[CASE_IDS.index(name)]
    stock, fast = make_pair(_build(factory, IN), True, "cuda")
    ei = random_edge_index(40, 40, 200, seed=19)
    args = to_device((torch.randn(40, IN), ei) + (
        () if extra is None else (edge_extra(extra, ei.size(1)),)), "cuda")
    torch._dynamo.reset()
    compiled = torch.compile(fast)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), stock(*args), rtol=1e-4, atol=1e-5)
