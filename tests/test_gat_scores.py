"""GAT's per-node attention scores (fastgnn._gat_scores): the folded product equals the stock
elementwise form, and the cases that must keep the elementwise form keep it."""
from __future__ import annotations

import pytest
import torch

from fastgnn._gat_scores import bias_free_weight, gat_scores


def _inputs(in_features, heads=4, channels=8, nodes=50, dtype=torch.float64):
    gen = torch.Generator().manual_seed(in_features)
    x = torch.randn(nodes, in_features, generator=gen, dtype=dtype, requires_grad=True)
    linear = torch.nn.Linear(in_features, heads * channels, bias=False).to(dtype)
    atts = [torch.randn(1, heads, channels, generator=gen, dtype=dtype, requires_grad=True)
            for _ in range(2)]
    return x, linear, atts


def _grads(outputs, inputs):
    loss = sum((o * torch.arange(o.numel(), dtype=o.dtype).view_as(o).cos()).sum()
               for o in outputs)
    return torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("in_features", [8, 32])
def test_folded_scores_equal_elementwise_with_gradients(in_features):
    x, linear, atts = _inputs(in_features)
    h = linear(x).view(x.shape[0], 4, 8)
    folded = gat_scores(x, bias_free_weight(linear), h, *atts)
    stock = tuple((h * att).sum(dim=-1) for att in atts)
    inputs = [x, linear.weight, *atts]
    for ours, want in zip(folded, stock):
        torch.testing.assert_close(ours, want)
    for ours, want in zip(_grads(folded, inputs), _grads(stock, inputs)):
        torch.testing.assert_close(ours, want)


def test_folded_path_reads_x_not_h():
    """With x no wider than h the scores come from x (h is not read): a poisoned h gives the
    true scores; with a wider x they come from h."""
    x, linear, atts = _inputs(16)
    poisoned = torch.full((x.shape[0], 4, 8), float("nan"), dtype=x.dtype)
    assert not gat_scores(x, bias_free_weight(linear), poisoned, atts[0])[0].isnan().any()
    wide, wide_linear, _ = _inputs(64)
    assert gat_scores(wide, bias_free_weight(wide_linear), poisoned, atts[0])[0].isnan().all()


def test_attention_of_another_dtype_promotes_as_the_elementwise_form():
    """float32 h with float64 attention vectors (a layer cast in part): the stock form promotes
    to float64; the folded product would mix dtypes in one matmul."""
    x, linear, atts = _inputs(8, dtype=torch.float32)
    atts = [att.detach().double().requires_grad_() for att in atts]
    h = linear(x).view(x.shape[0], 4, 8)
    scores = gat_scores(x, bias_free_weight(linear), h, *atts)
    for ours, att in zip(scores, atts):
        assert ours.dtype == torch.float64
        torch.testing.assert_close(ours, (h * att).sum(dim=-1))


def test_weight_withheld_when_the_map_is_not_bias_free_or_is_hooked():
    assert bias_free_weight(torch.nn.Linear(4, 8, bias=True)) is None
    hooked = torch.nn.Linear(4, 8, bias=False)
    hooked.register_forward_hook(lambda module, args, out: out * 2)
    assert bias_free_weight(hooked) is None
    assert bias_free_weight(torch.nn.LazyLinear(8, bias=False)) is None
    plain = torch.nn.Linear(4, 8, bias=False)
    assert bias_free_weight(plain) is plain.weight
    x = torch.randn(3, 4)
    h = torch.randn(3, 2, 4)
    att = torch.randn(1, 2, 4)
    torch.testing.assert_close(gat_scores(x, None, h, att)[0], (h * att).sum(-1))
