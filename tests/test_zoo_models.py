"""Zoo models under every backend: a tiny fit + test, equal results for pyg and fastgnn, the
same parameters, and clear errors for bad options."""
import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import torch  # noqa: E402
from conftest import devices  # noqa: E402
from zoo_helpers import fit_test, tiny_csbm  # noqa: E402

from fastgnn.zoo.models import MODELS, MaxK  # noqa: E402
from fastgnn.zoo.module import BACKENDS, NodePropertyModule, build_model  # noqa: E402
from fastgnn import reference  # noqa: E402
from fastgnn.enable import supported_layers  # noqa: E402

# Options that exercise each architecture's own arguments and the backbone's options.
ARCH_OPTIONS = {
    "mlp": {},
    "gcn": {"norm": "batch"},
    "sage": {"aggr": "max", "residual": True, "input_mlp": True, "norm": "layer"},
    "gin": {"train_eps": True},
    "gat": {"heads": 2, "hidden_channels": 16, "input_dropout": 0.3, "activation": "elu"},
    "gatv2": {"heads": 2, "hidden_channels": 16},
    "gt": {"heads": 2, "hidden_channels": 16, "beta": True, "output_mlp": True},
    "maxk-sage": {"k": 4, "hidden_channels": 16},
    "maxk-gcn": {"k": 4, "hidden_channels": 16},
    "maxk-gin": {"k": 4, "hidden_channels": 16},
    "gcn-gru": {"hidden_channels": 16},
}


@pytest.fixture
def data():
    # A fresh graph per test: a GPU fit moves the data module's graph to the GPU in place
    # (PyG's Data.to), and the next test must not inherit that.
    return tiny_csbm()


def test_every_model_is_covered():
    assert set(ARCH_OPTIONS) == set(MODELS)


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("arch", list(MODELS))
def test_fit_and_test(data, arch, backend):
    module, metrics = fit_test(data, arch, backend, **ARCH_OPTIONS[arch])
    assert 0.0 <= metrics["test_acc"] <= 1.0
    assert torch.isfinite(torch.tensor(metrics["test_loss"]))
    fast_layers = set(supported_layers().values())
    swapped = [m for m in module.model.modules() if type(m) in fast_layers]
    # (gcn-gru is fastgnn's own snapshot model: no stock layer to swap)
    assert bool(swapped) == (backend != "pyg" and arch not in ("mlp", "gcn-gru"))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("arch", list(MODELS))
def test_pyg_and_fastgnn_agree(data, arch, device):
    # Without BatchNorm: the conv bias before it has a zero gradient up to rounding, and Adam
    # scales that rounding noise up to full-size steps, so runs differ by design there.
    options = {**ARCH_OPTIONS[arch], "dropout": 0.0}
    if options.get("norm") == "batch":
        options["norm"] = "none"
    stock, stock_metrics = fit_test(data, arch, "pyg", device=device, **options)
    fast, fast_metrics = fit_test(data, arch, "fastgnn", device=device, **options)
    assert stock_metrics.keys() == fast_metrics.keys()
    for name, value in stock_metrics.items():
        assert fast_metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    stock_state, fast_state = stock.state_dict(), fast.state_dict()
    assert list(stock_state) == list(fast_state)
    for key, value in stock_state.items():
        torch.testing.assert_close(fast_state[key], value, rtol=1e-4, atol=1e-5)


def test_gt_edge_features():
    data = tiny_csbm()
    graph = data.data
    graph.edge_attr = torch.randn(graph.num_edges, 3, generator=torch.Generator().manual_seed(0))
    options = {"heads": 2, "hidden_channels": 8, "edge_dim": 3, "dropout": 0.0}
    _, stock = fit_test(data, "gt", "pyg", **options)
    _, fast = fit_test(data, "gt", "fastgnn", **options)
    assert fast["test_loss"] == pytest.approx(stock["test_loss"], rel=1e-4)
    model = build_model("gt", 8, 3, edge_dim=3)
    with pytest.raises(ValueError, match="edge_attr"):
        model(graph.x, graph.edge_index)


def test_maxk_activation_is_the_reference():
    x = torch.randn(5, 16)
    torch.testing.assert_close(MaxK(4)(x), reference.maxk(x, 4))
    model = build_model("maxk-sage", 8, 3, k=4, hidden_channels=16)
    assert isinstance(model.act, MaxK) and model.act.k == 4


@pytest.mark.parametrize("arch", ["maxk-sage", "maxk-gcn", "maxk-gin"])
def test_maxk_models_run_on_the_fused_layers(data, arch):
    """fastgnn swaps every conv fed by MaxK for the fused layer (not the first one without an
    input MLP); a pyg checkpoint loads into it and gives the same outputs; disable undoes it."""
    import fastgnn
    from fastgnn.zoo.models.maxk import FusedGCNConv, FusedGINConv, FusedSAGEConv
    graph = data.data
    fused = (FusedSAGEConv, FusedGCNConv, FusedGINConv)
    options = dict(k=4, hidden_channels=16, num_layers=3, dropout=0.3)
    for input_mlp, first_fused in ((True, True), (False, False)):
        torch.manual_seed(0)
        stock = build_model(arch, 8, 3, "pyg", input_mlp=input_mlp, **options).eval()
        fast = build_model(arch, 8, 3, "fastgnn", input_mlp=input_mlp, **options).eval()
        assert not any(isinstance(c, fused) for c in stock.convs)
        assert [isinstance(c, fused) for c in fast.convs] == [first_fused, True, True]
        fast.load_state_dict(stock.state_dict())
        torch.testing.assert_close(fast(graph.x, graph.edge_index),
                                   stock(graph.x, graph.edge_index), rtol=1e-4, atol=1e-5)
        assert not any(isinstance(c, fused) for c in fastgnn.disable(fast).convs)
    residual = build_model(arch, 8, 3, "fastgnn", residual=True, **options)
    assert not any(isinstance(c, fused) for c in residual.convs)


@pytest.mark.parametrize("arch, options, match", [
    ("nope", {}, "unknown model 'nope'"),
    ("gcn", {"k": 4}, "does not take k"),
    ("gcn", {"heads": 2}, "heads applies to attention models"),
    ("gatv2", {"heads": 3, "hidden_channels": 16}, "divisible by heads"),
    ("sage", {"aggr": "lstm"}, "aggr must be one of"),
    ("gcn", {"norm": "group"}, "norm must be one of"),
    ("maxk-sage", {"k": 65}, "k must be an int"),
    ("maxk-gcn", {"activation": "relu"}, "uses MaxK"),
    ("gcn", {"dropout": 1.0}, "dropout must be in"),
    ("gcn", {"input_dropout": -0.1}, "input_dropout must be in"),
    ("gcn-gru", {"input_dropout": 0.5}, "does not support input_dropout"),
])
def test_bad_options(arch, options, match):
    with pytest.raises(ValueError, match=match):
        build_model(arch, 8, 3, **options)


@pytest.mark.parametrize("arch", ["gat", "maxk-sage"])
def test_input_dropout_reaches_the_first_layer_in_training_only(arch):
    """GAT's input dropout: the first layer (or input MLP) sees about that share of zeroed
    features while training, and the features themselves in evaluation."""
    model = build_model(arch, 64, 3, input_dropout=0.5, heads=1, hidden_channels=16,
                        **({"k": 4} if arch.startswith("maxk") else {}))
    seen = []
    first = model.lin_in if model.lin_in is not None else model.convs[0]  # MaxK: an input MLP
    first.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    x = torch.rand(200, 64) + 0.5
    edge_index = torch.randint(0, 200, (2, 800))
    model.train()(x, edge_index)
    share = float((seen[-1] == 0).float().mean())
    assert 0.45 < share < 0.55, share
    model.eval()(x, edge_index)
    assert torch.equal(seen[-1], x)


def test_bad_backend_and_task():
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        build_model("gcn", 8, 3, backend="cuda")
    with pytest.raises(ValueError, match="unknown task"):
        NodePropertyModule(task="ranking")


def test_compile_keeps_the_state_dict():
    plain = NodePropertyModule("gcn", num_features=8, num_outputs=3)
    compiled = NodePropertyModule("gcn", num_features=8, num_outputs=3, compile=True)
    assert list(compiled.state_dict()) == list(plain.state_dict())
    assert all(key.startswith("model.") for key in plain.state_dict())
    assert compiled._compiled is not None and plain._compiled is None


def test_backends_share_parameters():
    torch.manual_seed(0)
    stock = build_model("gatv2", 8, 3, heads=2, hidden_channels=16)
    names = [name for name, _ in stock.named_parameters()]
    for backend in ("fastgnn", "reference"):
        torch.manual_seed(0)
        swapped = build_model("gatv2", 8, 3, backend=backend, heads=2, hidden_channels=16)
        assert [name for name, _ in swapped.named_parameters()] == names
        for (_, a), (_, b) in zip(stock.named_parameters(), swapped.named_parameters()):
            torch.testing.assert_close(a, b)


def test_gnn_beats_mlp_on_default_csbm():
    from fastgnn.zoo.data import CSBM
    data = CSBM()
    _, mlp = fit_test(data, "mlp", "pyg", max_epochs=60, hidden_channels=32)
    _, gcn = fit_test(data, "gcn", "pyg", max_epochs=60, hidden_channels=32)
    assert gcn["test_acc"] > mlp["test_acc"] + 0.25, (gcn, mlp)


@pytest.mark.parametrize("arch", ["gcn", "gatv2"])
def test_bf16_mixed_precision(data, arch):
    """bf16 autocast is Lightning's precision="bf16-mixed"; the fastgnn layers take it."""
    from zoo_helpers import quiet_trainer
    module = NodePropertyModule(arch, "fastgnn", num_features=data.num_features,
                                num_outputs=data.num_outputs, hidden_channels=16)
    trainer = quiet_trainer(max_epochs=1, precision="bf16-mixed")
    trainer.fit(module, data)
    metrics = trainer.test(module, data, verbose=False)[0]
    assert torch.isfinite(torch.tensor(metrics["test_loss"]))
