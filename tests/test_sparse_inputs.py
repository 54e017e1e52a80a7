"""Sparse input features: SparseInputLinear against the dense Linear, the measured switch,
and enable(sparse_inputs=True) on PyG models."""
import re

import pytest
import torch

import fastgnn
from fastgnn import tuning
from fastgnn.nn import SparseInputLinear, feature_density
from fastgnn.nn import sparse_input
from fastgnn.nn.sparse_input import SparseFeatures, sparse_linear

from conftest import devices, random_graph

DENSITIES = [0.001, 0.01, 0.1, 0.5]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTGNN_CACHE_DIR", str(tmp_path))
    tuning.clear()
    yield tmp_path
    tuning.clear()


def sparse_features(rows, cols, density, seed=0, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, cols, generator=gen, dtype=torch.float64)
    x = torch.where(torch.rand(rows, cols, generator=gen, dtype=torch.float64) < density, x, 0)
    x[rows // 2] = 0  # a node without features
    return x.to(dtype=dtype, device=device)


def force(monkeypatch, sparse_ms, dense_ms):
    """Mocks the tuner's timer: the sparse candidate takes sparse_ms, the dense one dense_ms."""
    used = []
    real = SparseFeatures.matmul_t

    def spy(self, weight):
        used.append(1)
        return real(self, weight)

    def timer(fn, calls, device):
        before = len(used)
        fn()
        return sparse_ms if len(used) > before else dense_ms
    monkeypatch.setattr(SparseFeatures, "matmul_t", spy)
    monkeypatch.setattr(tuning, "time_calls", timer)
    return used


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("density", DENSITIES)
def test_sparse_product_matches_dense(device, density):
    x = sparse_features(300, 120, density, device=device)
    dense = torch.nn.Linear(120, 24).to(device)
    features = SparseFeatures.from_dense(x)
    assert features.graph.num_edges == int((x != 0).sum())
    w = dense.weight.detach().clone().requires_grad_()
    b = dense.bias.detach().clone().requires_grad_()
    out = sparse_linear(features, x, w, b)
    ref = dense(x)
    grad = torch.randn_like(ref)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, dense.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b.grad, dense.bias.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("block", [1, 37, 120 * 300])  # entries per conversion block
def test_csr_conversion_by_blocks(device, block, monkeypatch):
    monkeypatch.setattr(sparse_input, "CONVERSION_BLOCK", block)
    x = sparse_features(300, 120, 0.05, device=device)
    x[7] = 0  # an empty row, and one that is all non-zero
    x[11] = torch.rand(120, device=device) + 1
    features = SparseFeatures.from_dense(x)
    want = x.to_sparse_csr()
    assert torch.equal(features.graph.rowptr.long(), want.crow_indices())
    assert torch.equal(features.graph.col.long(), want.col_indices())
    assert torch.equal(features.values, want.values())
    assert features.graph.num_src_nodes == 120


@pytest.mark.parametrize("device", devices())
def test_input_gradient_is_the_dense_one(device):
    x = sparse_features(80, 40, 0.05, device=device).requires_grad_()
    layer = torch.nn.Linear(40, 8).to(device)
    features = SparseFeatures.from_dense(x)
    grad = torch.randn(80, 8, device=device)
    got, = torch.autograd.grad(sparse_linear(features, x, layer.weight, layer.bias), x, grad)
    want, = torch.autograd.grad(layer(x), x, grad)
    torch.testing.assert_close(got, want)  # zeros of x get their gradient too
    assert bool((got[x == 0] != 0).any())


def test_float64_gradcheck():
    x = sparse_features(12, 9, 0.2, dtype=torch.float64)
    features = SparseFeatures.from_dense(x)
    w = torch.randn(5, 9, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w, b: sparse_linear(features, x, w, b), (w, b))


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("sparse_wins", [True, False])
def test_layer_follows_the_measurement(fresh_cache, monkeypatch, density, sparse_wins):
    used = force(monkeypatch, sparse_ms=1.0 if sparse_wins else 3.0, dense_ms=2.0)
    torch.manual_seed(0)
    layer = SparseInputLinear(64, 16)
    dense = torch.nn.Linear(64, 16)
    dense.load_state_dict(layer.state_dict())
    x = sparse_features(200, 64, density)
    for step in range(3):  # first call: stock path; then measured, then cached
        out, ref = layer(x), dense(x)
        out.sum().backward()
        ref.sum().backward()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad, dense.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(layer.bias.grad, dense.bias.grad, rtol=1e-4, atol=1e-4)
    timed = len(used)
    layer(x).sum().backward()  # the choice is made: no more timing, the chosen path only
    sparse_calls = len(used) - timed
    measured = density <= sparse_input.MAX_DENSITY
    assert sparse_calls == (1 if sparse_wins and measured else 0)
    assert list(layer.state_dict()) == ["weight", "bias"]


def test_dense_inputs_skip_the_measurement(fresh_cache, monkeypatch):
    used = force(monkeypatch, sparse_ms=0.0, dense_ms=1.0)
    layer = SparseInputLinear(32, 4)
    x = torch.rand(50, 32) + 0.1  # no zeros
    for _ in range(3):
        layer(x)
    assert used == []  # never converted, never timed


def test_fresh_and_modified_inputs_take_the_stock_path(fresh_cache, monkeypatch):
    used = force(monkeypatch, sparse_ms=0.0, dense_ms=1.0)
    layer = SparseInputLinear(32, 4)
    for _ in range(3):  # a new tensor each call (hidden activations)
        layer(sparse_features(50, 32, 0.05))
    assert used == []
    x = sparse_features(50, 32, 0.05)
    layer(x)
    layer(x)
    assert used  # reused: measured and chosen
    count = len(used)
    with torch.no_grad():
        x[0, 0] = 5.0  # in-place change: the cached CSR is stale
    dense = torch.nn.Linear(32, 4)
    dense.load_state_dict(layer.state_dict())
    torch.testing.assert_close(layer(x), dense(x))
    assert len(used) == count


def test_layer_cast_or_moved_after_caching_behaves_as_stock(fresh_cache, monkeypatch):
    """A cached input does not outlive a cast or a move of the layer: the stock layer's
    result, or its error."""
    force(monkeypatch, sparse_ms=1.0, dense_ms=2.0)
    layer = SparseInputLinear(32, 4)
    x = sparse_features(40, 32, 0.05)
    layer(x)
    layer(x)
    assert layer._fastgnn_seen.choices == {True: "sparse"}  # x cached, sparse chosen

    def stock_error(module):
        with pytest.raises(RuntimeError) as stock:
            torch.nn.Linear(32, 4).to(module.weight.dtype).to(module.weight.device)(x)
        return re.escape(str(stock.value))
    layer.double()
    with pytest.raises(RuntimeError, match=stock_error(layer)):
        layer(x)
    layer.float()
    torch.testing.assert_close(layer(x), x @ layer.weight.t() + layer.bias)  # cached again
    layer.to("meta")
    with pytest.raises(RuntimeError, match=stock_error(layer)):
        layer(x)


def test_no_weight_grad_in_eval(fresh_cache, monkeypatch):
    force(monkeypatch, sparse_ms=1.0, dense_ms=2.0)
    layer = SparseInputLinear(32, 4, bias=False)
    x = sparse_features(40, 32, 0.05)
    with torch.no_grad():
        layer(x)
        out = layer(x)
    torch.testing.assert_close(out, x @ layer.weight.t())
    assert tuning.choices(layer._fastgnn_seen.features.graph) == {
        "sparse_input_linear_fwd/4/float32": "sparse"}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("block", [1, 37, 120 * 300])  # entries counted at a time
def test_feature_density_by_blocks(device, block, monkeypatch):
    monkeypatch.setattr(sparse_input, "DENSITY_BLOCK", block)
    x = sparse_features(300, 120, 0.05, device=device)
    assert feature_density(x) == pytest.approx(float((x != 0).double().mean()), abs=0)
    assert feature_density(x[:, 0]) == float((x[:, 0] != 0).double().mean())
    assert feature_density(x[3, 5]) == float(x[3, 5] != 0)


def test_feature_density_and_bad_inputs():
    assert feature_density(torch.tensor([[0.0, 1.0], [0.0, 0.0]])) == 0.25
    assert feature_density(torch.zeros(0, 3)) == 0.0
    empty = SparseFeatures.from_dense(torch.zeros(0, 3))  # no rows: an empty CSR
    assert (empty.graph.num_dst_nodes, empty.graph.num_src_nodes, empty.values.numel()) == (0, 3, 0)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        feature_density([[0.0]])
    with pytest.raises(TypeError, match="dense"):
        feature_density(torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="2-D floating-point"):
        SparseFeatures.from_dense(torch.ones(3, dtype=torch.int64))
    layer = SparseInputLinear(4, 2)
    with pytest.raises(RuntimeError):  # the stock layer's own error for a wrong width
        layer(torch.ones(3, 5))
    with pytest.raises(TypeError, match="sparse_inputs must be a bool"):
        fastgnn.enable(torch.nn.Linear(2, 2), sparse_inputs="yes")


def test_enable_swaps_only_the_first_layer_and_disable_restores():
    model = torch.nn.Sequential(torch.nn.Linear(10, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    keys = list(model.state_dict())
    fastgnn.enable(model, sparse_inputs=True)
    assert type(model[0]) is SparseInputLinear and type(model[2]) is torch.nn.Linear
    assert list(model.state_dict()) == keys
    fastgnn.disable(model)
    assert type(model[0]) is torch.nn.Linear
    layer = fastgnn.enable(torch.nn.Linear(3, 3), sparse_inputs=True)
    assert type(layer) is SparseInputLinear


pyg_nn = pytest.importorskip("torch_geometric.nn")


class GCN(torch.nn.Module):
    def __init__(self, conv, width):
        super().__init__()
        self.conv1 = conv(width, 16)
        self.conv2 = conv(16, 4)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


@pytest.mark.parametrize("conv", ["GCNConv", "SAGEConv", "GATConv"])
def test_enable_on_pyg_model_keeps_keys_and_outputs(fresh_cache, monkeypatch, conv):
    used = force(monkeypatch, sparse_ms=1.0, dense_ms=2.0)
    torch.manual_seed(0)
    stock = GCN(getattr(pyg_nn, conv), 60)
    model = GCN(getattr(pyg_nn, conv), 60)
    model.load_state_dict(stock.state_dict())
    keys = list(model.state_dict())
    model = fastgnn.enable(model, sparse_inputs=True)
    assert list(model.state_dict()) == keys
    swapped = [name for name, m in model.named_modules()
               if isinstance(m, sparse_input.SparseInputMixin)]
    assert swapped == (["conv1.lin_l", "conv1.lin_r"] if conv == "SAGEConv" else ["conv1.lin"])
    _, edge_index = random_graph(40, 200, seed=3)
    x = sparse_features(40, 60, 0.05)
    for _ in range(3):
        out, ref = model(x, edge_index), stock(x, edge_index)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
        out.square().sum().backward()
        ref.square().sum().backward()
    assert used  # conv1's input features went sparse
    for (name, p), (_, q) in zip(model.named_parameters(), stock.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
