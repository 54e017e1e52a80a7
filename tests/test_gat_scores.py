"""GAT's projection and per-node attention scores (fastgnn._gat_scores): the fused node equals
the stock form ``h = lin(x)``, ``(h * att).sum(-1)`` in values and every gradient, and the cases
that must keep the stock form keep it."""
from __future__ import annotations

import pytest
import torch

from fastgnn._gat_scores import (_ProjectWithScores, bias_free_weight, destination_scores,
                                 gat_scores)

HEADS, CHANNELS = 4, 8


def _inputs(in_features, nodes=50, dtype=torch.float64):
    gen = torch.Generator().manual_seed(in_features)
    x = torch.randn(nodes, in_features, generator=gen, dtype=dtype, requires_grad=True)
    linear = torch.nn.Linear(in_features, HEADS * CHANNELS, bias=False).to(dtype)
    atts = [torch.randn(1, HEADS, CHANNELS, generator=gen, dtype=dtype, requires_grad=True)
            for _ in range(2)]
    return x, linear, atts


def _stock(x, linear, atts):
    h = linear(x).view(x.shape[0], HEADS, CHANNELS)
    return (h,) + tuple((h * att).sum(dim=-1) for att in atts)


def _loss(outputs):
    """A weighted sum of the outputs (None: not used), so that every entry's gradient differs."""
    return sum((o * torch.arange(o.numel(), dtype=o.dtype).view_as(o).cos()).sum()
               for o in outputs if o is not None)


@pytest.mark.parametrize("in_features", [8, 32, 200])
@pytest.mark.parametrize("uses", ["all", "scores only", "h and first score"])
def test_fused_equals_stock_with_gradients(in_features, uses):
    """Values and gradients of x, the weight and both attention vectors, with h consumed
    downstream or not (a destination projection feeds only its score)."""
    x, linear, atts = _inputs(in_features)
    ours, stock = gat_scores(x, linear, HEADS, *atts), _stock(x, linear, atts)
    keep = {"all": (0, 1, 2), "scores only": (1, 2), "h and first score": (0, 1)}[uses]
    inputs = [x, linear.weight, *atts]
    for got, want in zip(ours, stock):
        torch.testing.assert_close(got, want)
    got = torch.autograd.grad(_loss([ours[i] for i in keep]), inputs, allow_unused=True)
    want = torch.autograd.grad(_loss([stock[i] for i in keep]), inputs, allow_unused=True)
    for g, w, inp in zip(got, want, inputs):  # an unused score: zeros where stock has None
        torch.testing.assert_close(torch.zeros_like(inp) if g is None else g,
                                   torch.zeros_like(inp) if w is None else w)


def test_gradcheck_and_double_backward():
    x, linear, atts = _inputs(6, nodes=7)
    weight = linear.weight.detach().requires_grad_()
    stacked = torch.stack([a.detach().reshape(HEADS, CHANNELS) for a in atts],
                          dim=-1).requires_grad_()
    assert torch.autograd.gradcheck(_ProjectWithScores.apply, (x, weight, stacked))
    assert torch.autograd.gradgradcheck(_ProjectWithScores.apply, (x, weight, stacked))


def test_stock_form_for_hooks_bias_and_mixed_dtypes():
    """A hooked or biased projection runs as the module computes it; float32 inputs with
    float64 attention vectors (a layer cast in part) promote as the stock form does."""
    x, linear, atts = _inputs(8)
    linear.register_forward_hook(lambda module, args, out: out * 2)
    torch.testing.assert_close(gat_scores(x, linear, HEADS, *atts),
                               _stock(x, linear, atts))
    biased = torch.nn.Linear(8, HEADS * CHANNELS, bias=True).double()
    torch.testing.assert_close(gat_scores(x, biased, HEADS, *atts), _stock(x, biased, atts))
    x32, linear32, _ = _inputs(8, dtype=torch.float32)
    h, *scores = gat_scores(x32, linear32, HEADS, *atts)
    assert h.dtype == torch.float32 and all(s.dtype == torch.float64 for s in scores)
    torch.testing.assert_close(scores, list(_stock(x32, linear32, atts)[1:]))


def test_autocast_keeps_the_stock_dtypes():
    x, linear, atts = _inputs(8, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, stock = gat_scores(x, linear, HEADS, *atts), _stock(x, linear, atts)
    assert [t.dtype for t in ours] == [t.dtype for t in stock] == \
        [torch.bfloat16, torch.float32, torch.float32]
    torch.testing.assert_close(ours, stock)


def test_weight_withheld_when_the_map_is_not_bias_free_or_is_hooked():
    assert bias_free_weight(torch.nn.Linear(4, 8, bias=True)) is None
    hooked = torch.nn.Linear(4, 8, bias=False)
    hooked.register_forward_hook(lambda module, args, out: out * 2)
    assert bias_free_weight(hooked) is None
    assert bias_free_weight(torch.nn.LazyLinear(8, bias=False)) is None
    plain = torch.nn.Linear(4, 8, bias=False)
    assert bias_free_weight(plain) is plain.weight


def test_a_projection_with_its_own_forward_runs_as_the_module_computes_it():
    """A Linear subclass overriding forward (as the sparse-input layers do) keeps its forward:
    the scores are taken from its output, with stock's values and gradients."""
    class Shifted(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) + 1.0

    x, linear, atts = _inputs(8)
    shifted = Shifted(8, HEADS * CHANNELS, bias=False).double()
    shifted.load_state_dict(linear.state_dict())
    assert bias_free_weight(shifted) is None
    ours, stock = gat_scores(x, shifted, HEADS, *atts), _stock(x, shifted, atts)
    torch.testing.assert_close(ours, stock)
    inputs = [x, shifted.weight, *atts]
    for got, want in zip(torch.autograd.grad(_loss(ours), inputs),
                         torch.autograd.grad(_loss(stock), inputs)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("in_features", [8, 200])
def test_destination_scores_equal_stock_without_the_projection(in_features, monkeypatch):
    """A pair's destination score, with its gradients, from one thin product: the N x H C
    projection (F.linear) never runs."""
    x, linear, (att, _) = _inputs(in_features)
    want = _stock(x, linear, [att])[1]
    calls = []
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda *args, **kwargs: calls.append(1) or real_linear(*args, **kwargs))
    got = destination_scores(x, linear, HEADS, att)
    assert not calls
    torch.testing.assert_close(got, want)
    inputs = [x, linear.weight, att]
    for g, w in zip(torch.autograd.grad(_loss([got]), inputs),
                    torch.autograd.grad(_loss([want]), inputs)):
        torch.testing.assert_close(g, w)


def test_destination_scores_keep_the_stock_form_where_gat_scores_does():
    x, linear, (att, _) = _inputs(8)
    biased = torch.nn.Linear(8, HEADS * CHANNELS, bias=True).double()
    torch.testing.assert_close(destination_scores(x, biased, HEADS, att),
                               _stock(x, biased, [att])[1])
    x32, linear32, _ = _inputs(8, dtype=torch.float32)
    score = destination_scores(x32, linear32, HEADS, att)  # float64 att: promoted as stock
    assert score.dtype == torch.float64
    torch.testing.assert_close(score, _stock(x32, linear32, [att])[1])
