"""scripts/bench_sampling.py: its host profile splits a batch's time between the sampling op
and the Python around it."""
import importlib.util
import os

import pytest
import torch

from fastgnn import _native
from fastgnn.sampling import NeighborSampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("bench_sampling", os.path.join(
    ROOT, "scripts", "bench_sampling.py"))
bench_sampling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_sampling)

pytestmark = pytest.mark.skipif(not _native.has_op("sample_neighbors_many"),
                                reason="needs the native sampling ops")


@pytest.mark.parametrize("per_call", [1, 4])
def test_host_profile_finds_the_sampling_op_and_counts_per_batch(per_call, capsys):
    cpu = torch.device("cpu")
    graph = bench_sampling.load_graph("power-law:3000:5", cpu)
    sampler = NeighborSampler(graph, [5, 3])
    batches = bench_sampling.seed_batches(graph.num_dst_nodes, 64, 8, 0)
    row = bench_sampling.profile_host(
        "x", lambda: bench_sampling.time_fastgnn(sampler, batches, cpu, per_call), cpu, 8)
    assert 0 < row["sampling_op_us"] < row["us"]  # the op found, inside the round's time
    # A Block per layer and batch built in Python; the sampling op once a call at least.
    assert row["python_calls"] >= 2 and row["torch_ops"] >= 1 / per_call
    assert "per batch (profiled)" in capsys.readouterr().out
