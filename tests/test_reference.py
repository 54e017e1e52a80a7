"""The pure-PyTorch oracle against results computed by hand on tiny graphs."""
import math

import pytest
import torch

import fastgnn
from fastgnn import reference


@pytest.fixture
def star():
    # 1->0, 2->0, 3->0, 0->1; node 2 and 3 receive nothing
    ei = torch.tensor([[1, 2, 3, 0], [0, 0, 0, 1]])
    return fastgnn.Graph.from_edge_index(ei, num_nodes=4)


def test_spmm_norms_by_hand(star):
    x = torch.tensor([[1.0], [2.0], [4.0], [8.0]])
    out = reference.spmm(star, x)
    assert out.squeeze(1).tolist() == [14.0, 1.0, 0.0, 0.0]
    mean = torch.tensor([14 / 3, 1.0, 0.0, 0.0])
    torch.testing.assert_close(reference.spmm(star, x, reduce="mean").squeeze(1), mean)
    torch.testing.assert_close(reference.spmm(star, x, norm="right").squeeze(1), mean)
    # out-degrees: node0 1, node1 1, node2 1, node3 1 -> left = none here
    assert reference.spmm(star, x, norm="left").squeeze(1).tolist() == [14.0, 1.0, 0.0, 0.0]
    both = reference.spmm(star, x, norm="both").squeeze(1)
    torch.testing.assert_close(both, torch.tensor([14 / math.sqrt(3), 1.0, 0.0, 0.0]))


def test_spmm_edge_weight_and_edge_values_use_input_order(star):
    x = torch.tensor([[1.0], [2.0], [4.0], [8.0]])
    w = torch.tensor([1.0, 10.0, 100.0, 0.5])  # weights of 1->0, 2->0, 3->0, 0->1
    assert reference.spmm(star, x, edge_weight=w).squeeze(1).tolist() == [842.0, 0.5, 0.0, 0.0]
    out = reference.spmm(star, x, edge_values=w)
    assert out.squeeze(1).tolist() == [842.0, 0.5, 0.0, 0.0]


def test_minmax_with_ties_nan_and_isolated():
    ei = torch.tensor([[3, 1, 2, 0], [0, 0, 0, 1]])
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=4)
    x = torch.tensor([[5.0, 1.0], [2.0, float("nan")], [2.0, 3.0], [7.0, 3.0]])
    out, arg = reference.aggregate_with_arg(g, x, "max")
    assert out[0, 0].item() == 7.0 and arg[0, 0].item() == 3
    assert math.isnan(out[0, 1].item()) and arg[0, 1].item() == 1  # NaN propagates and wins
    assert out[2].tolist() == [0.0, 0.0] and arg[2].tolist() == [-1, -1]
    out, arg = reference.aggregate_with_arg(g, x, "min")
    assert out[0, 0].item() == 2.0 and arg[0, 0].item() == 1  # tie 1 vs 2: smallest source
    assert reference.aggregate(g, x, "min")[1].tolist() == [5.0, 1.0]
    with pytest.raises(ValueError, match="min"):
        reference.aggregate_with_arg(g, x, "sum")


def test_gatv2_by_hand():
    ei = torch.tensor([[1, 2], [0, 0]])
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=3)
    x = torch.tensor([[0.0, 0.0], [1.0, -2.0], [3.0, 1.0]]).view(3, 1, 2)
    att = torch.tensor([[1.0, 1.0]])
    # logits: node1: lrelu(1)+lrelu(-2) = 1 - 0.4 = 0.6; node2: 3 + 1 = 4
    a1, a2 = torch.softmax(torch.tensor([0.6, 4.0]), 0).tolist()
    out = reference.gatv2_attention(g, x, x, att)
    expect = a1 * x[1, 0] + a2 * x[2, 0]
    torch.testing.assert_close(out[0, 0], expect)
    assert out[1:].abs().sum() == 0  # isolated destinations


def test_graph_attention_by_hand_with_edge_term():
    ei = torch.tensor([[1, 2], [0, 0]])
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=3)
    q = torch.tensor([[1.0, 0.0], [0, 0], [0, 0]]).view(3, 1, 2)
    k = torch.tensor([[0.0, 0], [2.0, 0], [0.0, 5]]).view(3, 1, 2)
    v = torch.tensor([[0.0, 0], [1.0, 0], [0.0, 1]]).view(3, 1, 2)
    e1, e2 = 2.0 / math.sqrt(2), 0.0
    a1, a2 = torch.softmax(torch.tensor([e1, e2]), 0).tolist()
    out = reference.graph_attention(g, q, k, v)
    torch.testing.assert_close(out[0, 0], torch.tensor([a1, a2]))
    term = torch.ones(2, 1, 2)
    out = reference.graph_attention(g, q, k, v, scale=1.0, edge_term=term)
    b1, b2 = torch.softmax(torch.tensor([3.0, 1.0]), 0).tolist()
    torch.testing.assert_close(out[0, 0], torch.tensor([b1 * 2 + b2, b1 + b2 * 2]))


def test_attention_dropout_mask_scales_kept_weights():
    ei = torch.tensor([[1, 2], [0, 0]])
    g = fastgnn.Graph.from_edge_index(ei, num_nodes=3)
    x = torch.randn(3, 1, 4)
    mask = torch.tensor([[1.0], [0.0]])
    out = reference.graph_attention(g, x, x, x, dropout=0.5, dropout_mask=mask)
    logits = torch.stack([(x[0, 0] * x[1, 0]).sum(), (x[0, 0] * x[2, 0]).sum()]) / 2.0
    alpha = torch.softmax(logits, 0)
    torch.testing.assert_close(out[0, 0], alpha[0] * x[1, 0] / 0.5)


def test_maxk_and_maxk_spmm():
    x = torch.tensor([[3.0, -1.0, 2.0, 5.0], [0.0, 1.0, 0.5, -2.0]])
    assert reference.maxk(x, 2).tolist() == [[3.0, 0.0, 0.0, 5.0], [0.0, 1.0, 0.5, 0.0]]
    g = fastgnn.Graph.from_edge_index(torch.tensor([[0, 1], [1, 1]]), num_nodes=2)
    out = reference.maxk_spmm(g, reference.maxk_cbsr(x, 1))
    assert out.tolist() == [[0.0] * 4, [0.0, 1.0, 0.0, 5.0]]
    with pytest.raises(ValueError, match="k must be"):
        reference.maxk(x, 5)
