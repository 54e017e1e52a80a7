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


@pytest.mark.parametrize("per_call", [1, 4])
def test_pipelined_timing_counts_the_same_edges(per_call):
    """The pipelined contender samples what the call-by-call one samples."""
    cpu = torch.device("cpu")
    graph = bench_sampling.load_graph("power-law:3000:5", cpu)
    sampler = NeighborSampler(graph, [5, 3])
    batches = bench_sampling.seed_batches(graph.num_dst_nodes, 64, 9, 0)
    edges, _ = bench_sampling.time_fastgnn(sampler, batches, cpu, per_call)
    assert edges > 0
    assert bench_sampling.time_fastgnn(sampler, batches, cpu, per_call, pipelined=True)[0] == edges
    assert bench_sampling.contender_name("fastgnn-cuda", per_call, True).endswith("-pipelined")


def test_ratios_compare_with_the_cpus_best_of_either_mode(capsys):
    """A CPU that pipelining slows down must not flatter the GPU: its best is over both modes."""
    rates = {"fastgnn-cuda-x4": 200, "fastgnn-cuda-x4-pipelined": 400,
             "cpu-x4": 50, "cpu-x4-pipelined": 40}
    rows = [{"sampler": name, "edges_per_s": rate * 1e6} for name, rate in rates.items()]
    bench_sampling.print_ratios(rows, "fastgnn-cuda", "cpu", [4], [False, True])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:3] == ["GPU", "x4p", "400.00"]
    assert lines[2].endswith("/ CPU best (x4)   8.00") and "/ CPU x4p  10.00" in lines[2]
