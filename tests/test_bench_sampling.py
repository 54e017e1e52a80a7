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


def test_cpu_rows_come_from_a_process_of_their_own():
    """--cpu-threads: the CPU sampler's rows, one per batches-a-call, timed in a child process
    with that many threads and named for the GPU run's ratios."""
    import argparse
    args = argparse.Namespace(graph="power-law:2000:4", fanouts="4,3", batch_size=32, batches=4,
                              repeats=1, batches_per_call="1,2", cpu_threads=1)
    rows = bench_sampling.cpu_rows_in_child(args, "fastgnn-cpu-1-threads")
    assert [row["sampler"] for row in rows] == ["fastgnn-cpu-1-threads",
                                                "fastgnn-cpu-1-threads-x2"]
    assert all(row["threads"] == 1 and row["device"] == "cpu" and row["edges_per_s"] > 0
               for row in rows)
    assert rows[0]["edges_per_batch"] == rows[1]["edges_per_batch"]  # the same seed batches
