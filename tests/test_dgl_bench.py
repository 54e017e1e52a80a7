"""The DGL workloads of the benchmark suite: both rows run, and fastgnn's matches DGL's
(output and every input and parameter gradient) as the suite checks it before timing; the
edge-softmax workloads' DGL rows run too."""
from __future__ import annotations

import pytest
import torch

dgl = pytest.importorskip("dgl")

from fastgnn.bench import graphs, measure  # noqa: E402
from fastgnn.bench.workloads import WORKLOADS, Context  # noqa: E402

TINY = "powerlaw:n=300,deg=4,skew=0.8,seed=1"
DGL_WORKLOADS = [name for name in WORKLOADS if name.startswith("dgl-")]


@pytest.mark.parametrize("name", DGL_WORKLOADS)
@pytest.mark.parametrize("spec", [TINY, "block:base=powerlaw-50k,batch=32,fanout=5x3,seed=0"])
def test_dgl_workload_rows_run_and_match(name, spec):
    case = WORKLOADS[name].build(Context(graphs.load(spec), 8, torch.device("cpu"), heads=2))
    names = [impl.name for impl in case.implementations]
    assert names == ["dgl-stock", "dgl+fastgnn.enable"]
    assert all(impl.skip is None for impl in case.implementations), case.implementations
    expected, grad_output = measure.expected_result(case.oracle, case.inputs)
    measure.check(case.implementations[1].forward, case.inputs, grad_output, expected,
                  case.rtol)


def test_five_dgl_workloads():
    assert sorted(DGL_WORKLOADS) == ["dgl-dotgatconv", "dgl-gatconv", "dgl-gatv2conv",
                                     "dgl-graphconv", "dgl-sageconv-pool"]


@pytest.mark.parametrize("name", ["edge-softmax", "edge-softmax-src"])
def test_edge_softmax_dgl_rows_run_and_match(name):
    case = WORKLOADS[name].build(Context(graphs.load(TINY), 4, torch.device("cpu")))
    rows = {impl.name: impl for impl in case.implementations}
    expected, grad_output = measure.expected_result(case.oracle, case.inputs)
    for row in ("fastgnn.dgl", "dgl-edge_softmax"):
        assert rows[row].skip is None, rows[row].skip
        measure.check(rows[row].forward, case.inputs, grad_output, expected, case.rtol)
