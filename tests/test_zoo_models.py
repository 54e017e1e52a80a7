"""Zoo models under every backend: a tiny fit + test, equal results for pyg and fastgnn, the
same parameters, and clear errors for bad options."""
import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

import torch  # noqa: E402
from conftest import devices  # noqa: E402
from zoo_helpers import ARCH_OPTIONS, fit_test, tiny_csbm  # noqa: E402

from fastgnn.zoo.models import MODELS, MaxK  # noqa: E402
from fastgnn.zoo.module import BACKENDS, NodePropertyModule, build_model  # noqa: E402
from fastgnn import reference  # noqa: E402
from fastgnn.enable import supported_layers  # noqa: E402


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


@pytest.mark.parametrize("backend", ["pyg", "fastgnn"])
@pytest.mark.parametrize("arch", ["maxk-sage", "maxk-gcn", "maxk-gin"])
def test_maxk_output_linear_takes_the_last_conv_as_it_is(data, arch, backend):
    """As in MaxK-GNN's models: no MaxK and no dropout between the last conv and the output
    linear (a MaxK there would hand the classifier k of the hidden features)."""
    graph = data.data
    torch.manual_seed(0)
    model = build_model(arch, 8, 3, backend, k=4, hidden_channels=16, num_layers=2,
                        dropout=0.5).train()
    seen = []
    model.convs[-1].register_forward_hook(lambda module, args, out: seen.append(out))
    torch.manual_seed(1)
    out = model(graph.x, graph.edge_index)
    expected = model.lin_out(seen[0])
    assert (seen[0] != 0).sum(-1).max() > 4  # dense: not cut to k
    torch.testing.assert_close(out, expected)


# the heterophily benchmark's layout (zoo/configs/*-heterophilous.yaml)
HETEROPHILOUS = dict(residual=True, norm="layer", input_mlp=True, output_mlp=True,
                     activation="gelu")


def test_feed_forward_blocks_only_when_asked():
    """Without feed_forward the model has the keys it had before the option (checkpoints
    load); with it, each hidden layer gains Dropout -> act -> Linear -> Dropout."""
    options = dict(hidden_channels=16, num_layers=2, dropout=0.2, **HETEROPHILOUS)
    plain = build_model("gcn", 8, 3, **options)
    keys = ["lin_in.weight", "lin_in.bias", "convs.0.bias", "convs.0.lin.weight", "convs.1.bias",
            "convs.1.lin.weight", "norms.0.weight", "norms.0.bias", "norms.1.weight",
            "norms.1.bias", "norm_out.weight", "norm_out.bias", "lin_out.weight",
            "lin_out.bias"]
    assert plain.feed_forwards is None and list(plain.state_dict()) == keys
    blocks = build_model("gcn", 8, 3, feed_forward=True, **options)
    state = blocks.state_dict()
    added = [key for key in state if key.startswith("feed_forwards.")]
    assert [key for key in state if key not in added] == keys
    assert {key: tuple(state[key].shape) for key in added} == {
        f"feed_forwards.{i}.{j}.{name}": (16, 16) if name == "weight" else (16,)
        for i in range(2) for j in (2,) for name in ("weight", "bias")}
    for block in blocks.feed_forwards:
        assert [type(m) for m in block] == [torch.nn.Dropout, torch.nn.GELU, torch.nn.Linear,
                                            torch.nn.Dropout]
        assert block[0].p == block[3].p == 0.2
    # the output conv's layer has no block
    assert len(build_model("sage", 8, 3, num_layers=3, feed_forward=True).feed_forwards) == 2


@pytest.mark.parametrize("residual", [True, False], ids=["residual", "plain"])
def test_feed_forward_follows_each_hidden_conv(residual):
    torch.manual_seed(0)
    model = build_model("sage", 8, 3, hidden_channels=16, num_layers=3, residual=residual,
                        norm="layer", input_mlp=True, activation="gelu",
                        feed_forward=True).eval()
    graph = tiny_csbm().data
    x, edge_index = graph.x, graph.edge_index
    h = model.act(model.lin_in(x))
    for conv, norm, block in zip(model.convs, model.norms, model.feed_forwards):
        h = h + block(conv(norm(h), edge_index)) if residual else block(norm(conv(h, edge_index)))
    if residual:
        h = model.norm_out(h)
    torch.testing.assert_close(model(x, edge_index), model.convs[-1](h, edge_index))


def test_add_self_loops_reaches_the_gcn_convs():
    assert all(conv.add_self_loops for conv in build_model("gcn", 8, 3).convs)  # PyG's default
    for backend in BACKENDS:
        model = build_model("gcn", 8, 3, backend, num_layers=3, add_self_loops=False)
        assert [conv.add_self_loops for conv in model.convs] == [False] * 3
    maxk = build_model("maxk-gcn", 8, 3, "fastgnn", k=4, hidden_channels=16,
                       add_self_loops=False)
    assert [conv.add_self_loops for conv in maxk.convs] == [False] * 2
    module = NodePropertyModule("gcn", num_features=8, num_outputs=3, add_self_loops=False,
                                feed_forward=True)
    assert module.hparams.add_self_loops is False and module.hparams.feed_forward is True
    assert not module.model.convs[0].add_self_loops
    assert len(module.model.feed_forwards) == 1


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
    ("gcn", {"attention_dropout": 0.3}, "attention_dropout applies to attention models only"),
    ("maxk-sage", {"attention_dropout": 0.3}, "attention_dropout applies to attention models"),
    ("gcn-gru", {"attention_dropout": 0.3}, "does not take attention_dropout"),
    ("gat", {"attention_dropout": 1.0}, "attention_dropout must be in"),
    ("gt", {"attention_dropout": True}, "attention_dropout must be in"),
    ("gcn-gru", {"input_dropout": 0.5}, "does not support input_dropout"),
    ("gcn", {"feed_forward": "yes"}, "feed_forward must be a bool, got 'yes'"),
    ("gcn", {"feed_forward": 1}, "feed_forward must be a bool, got 1"),
    ("maxk-sage", {"feed_forward": True}, "does not support feed_forward"),
    ("gcn-gru", {"feed_forward": True}, "does not support feed_forward"),
    ("sage", {"add_self_loops": False}, "does not take add_self_loops"),
])
def test_bad_options(arch, options, match):
    with pytest.raises(ValueError, match=match):
        build_model(arch, 8, 3, **options)


@pytest.mark.parametrize("arch", ["gat", "gatv2", "gt"])
@pytest.mark.parametrize("backend", ["pyg", "fastgnn"])
def test_attention_dropout_is_the_convs_own_rate(arch, backend):
    """Every conv's attention dropout is ``attention_dropout`` when given (Shchur et al.'s GAT:
    0.3 on the weights, 0.6 on the features), else the model's ``dropout``; the features'
    dropout stays ``dropout``."""
    given = build_model(arch, 8, 3, backend, heads=2, hidden_channels=16, num_layers=3,
                        dropout=0.6, attention_dropout=0.3)
    assert [conv.dropout for conv in given.convs] == [0.3] * 3
    assert given.dropout.p == 0.6
    default = build_model(arch, 8, 3, backend, heads=2, hidden_channels=16, dropout=0.6)
    assert [conv.dropout for conv in default.convs] == [0.6] * 2


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


def test_scored_nodes_found_once_per_mask():
    """A full-batch step scores its mask's nodes through their ids, found once per mask (a
    boolean index at every step would sync the GPU mid-step): the same rows as the mask picks,
    rebuilt after an in-place change of the mask, and from masks made in inference mode."""
    data = tiny_csbm()
    data.setup()
    batch = data.data
    module = NodePropertyModule("gcn", "pyg", num_features=data.num_features,
                                num_outputs=data.num_outputs, task=data.task)
    out = torch.randn(batch.num_nodes, data.num_outputs)
    for _ in range(3):
        scored, y = module._scored(batch, out, "train")
        assert torch.equal(scored, out[batch.train_mask])
        assert torch.equal(y, batch.y[batch.train_mask])
    assert module._mask_indices.builds == 1
    batch.train_mask[batch.train_mask.nonzero()[0]] = False  # in place: one node fewer
    scored, _ = module._scored(batch, out, "train")
    assert torch.equal(scored, out[batch.train_mask]) and module._mask_indices.builds == 2
    with torch.inference_mode():
        batch.val_mask = batch.val_mask.clone()  # as a device move under inference mode makes it
        scored, _ = module._scored(batch, out, "val")
    assert torch.equal(scored, out[batch.val_mask])


@pytest.mark.parametrize("task,num_outputs", [("multiclass", 3), ("binary", 1),
                                               ("multilabel", 4)])
def test_metric_updates_do_not_call_unique(task, num_outputs):
    """A step's metric update runs no torch.unique (torchmetrics' argument checks call it on the
    targets: a device sync every step); the data modules check labels once instead."""
    from torch.overrides import TorchFunctionMode

    class Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    module = NodePropertyModule("gcn", "pyg", num_features=4, num_outputs=num_outputs,
                                task=task)
    out = torch.randn(20, num_outputs)
    y = {"multiclass": torch.randint(0, 3, (20,)), "binary": torch.randint(0, 2, (20,)),
         "multilabel": torch.randint(0, 2, (20, 4))}[task]
    with Calls() as calls:
        module._record("train", out.sum(), out, y)
    assert calls.names and "unique" not in calls.names and "_unique2" not in calls.names


@pytest.mark.parametrize("arch", ["gcn", "sage", "maxk-sage"])
def test_conv_init_torch_draws_as_one_linear(arch):
    """conv_init="torch": each conv's maps start as one torch.nn.Linear over the conv's whole
    input (SAGE: both weights over 2 x in; GCN: glorot replaced, bias drawn); "pyg" keeps the
    stock draws, so earlier seeds reproduce."""
    options = dict(hidden_channels=64, num_layers=2, input_mlp=True, output_mlp=True)
    if arch.startswith("maxk"):
        options["k"] = 8
    torch.manual_seed(0)
    stock = build_model(arch, 8, 3, **options)
    torch.manual_seed(0)
    default = build_model(arch, 8, 3, conv_init="pyg", **options)
    for a, b in zip(stock.state_dict().values(), default.state_dict().values()):
        assert torch.equal(a, b)
    model = build_model(arch, 8, 3, conv_init="torch", **options)
    for conv in model.convs:
        if arch == "gcn":
            maps, bias, fan_in = [conv.lin.weight], conv.bias, 64
        else:
            maps, bias, fan_in = [conv.lin_l.weight, conv.lin_r.weight], conv.lin_l.bias, 128
        bound = fan_in ** -0.5
        for values in maps + [bias]:
            assert values.abs().max() <= bound
            assert values.abs().max() > 0.9 * bound  # drawn over the whole range
    stock_bound = max(w.abs().max() for conv in stock.convs for w in
                      ([conv.lin.weight] if arch == "gcn" else [conv.lin_l.weight]))
    assert stock_bound > 1.3 * bound  # PyG's own bound is larger, the point of the option
    # the MLPs and norms are untouched
    torch.manual_seed(0)
    torch.testing.assert_close(build_model(arch, 8, 3, conv_init="torch", **options)
                               .lin_out.weight, stock.lin_out.weight)


@pytest.mark.parametrize("arch, error", [
    ("gat", "conv_init='torch' applies to models whose convs are one linear map"),
    ("gin", "conv_init='torch' applies to models whose convs are one linear map"),
    ("gcn-gru", "does not take conv_init"),
])
def test_conv_init_torch_refused_where_it_has_no_reading(arch, error):
    with pytest.raises(ValueError, match=error):
        build_model(arch, 8, 3, conv_init="torch")
    with pytest.raises(ValueError, match="conv_init must be one of"):
        build_model("gcn", 8, 3, conv_init="glorot")
