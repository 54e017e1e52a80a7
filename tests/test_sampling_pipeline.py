"""Sampling ahead on background threads (``NeighborSampler.iter_blocks`` and the loader): the
same blocks in the same order as sampling one batch at a time, the next call in flight while
the caller holds this call's batches, errors raised to the caller with their type, and no
thread left behind when iteration stops early."""
from __future__ import annotations

import threading

import pytest
import torch

from fastgnn.sampling import NeighborLoader, NeighborSampler
from fastgnn.sampling.sampler import _THREAD_NAME
from tests.conftest import devices
from tests.test_sampling import _graph
from tests.test_sampling_many import (SIZES, _assert_blocks_equal, _assert_same_draws,
                                      _one_at_a_time, _seed_batches)


def _sampling_threads():
    return [t for t in threading.enumerate() if t.name.startswith(_THREAD_NAME)]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("batches_per_call", [1, 2, 4, 8])
@pytest.mark.parametrize("fanouts", [[5, 10], [4, -1]])
def test_iter_blocks_equal_one_at_a_time(device, batches_per_call, fanouts):
    g, _ = _graph(device)
    sampler = NeighborSampler(g, fanouts)
    seeds = [s.to(device) for s in _seed_batches(g.num_dst_nodes, SIZES * 2)]
    want, want_gen = _one_at_a_time(sampler.sample_blocks, seeds, 7)
    gen = torch.Generator().manual_seed(7)
    # A generator of seed tensors: iter_blocks takes any iterable.
    got = list(sampler.iter_blocks((s for s in seeds), gen, batches_per_call=batches_per_call))
    _assert_blocks_equal(want, got)
    _assert_same_draws(want_gen, gen)
    assert not _sampling_threads()


def test_iter_blocks_samples_the_next_call_while_the_caller_holds_this_one(monkeypatch):
    g, _ = _graph()
    sampler = NeighborSampler(g, [3, 2])
    calls, second_call = [], threading.Event()
    call = sampler._call

    def recording_call(*args):
        calls.append(threading.current_thread().name)
        if len(calls) == 2:
            second_call.set()
        return call(*args)

    monkeypatch.setattr(sampler, "_call", recording_call)
    batches = sampler.iter_blocks(_seed_batches(g.num_dst_nodes, [10] * 6), batches_per_call=2)
    next(batches)
    # Nothing more is asked for, yet the second call starts, on the sampling thread.
    assert second_call.wait(timeout=30)
    assert all(name.startswith(_THREAD_NAME) for name in calls)
    assert len(list(batches)) == 5 and len(calls) == 3


def test_iter_blocks_raises_the_sampling_threads_error_with_its_type():
    g, _ = _graph()
    sampler = NeighborSampler(g, [3, 2])
    seeds = _seed_batches(g.num_dst_nodes, [10] * 4)
    seeds[2] = torch.tensor([0, g.num_dst_nodes])  # out of range: the op raises ValueError
    batches = sampler.iter_blocks(seeds, batches_per_call=2)
    assert len([next(batches), next(batches)]) == 2  # the first call's batches come first
    with pytest.raises(ValueError, match="node ids in"):
        next(batches)
    assert not _sampling_threads()


def test_iter_blocks_raises_bad_seeds_and_arguments():
    g, _ = _graph()
    sampler = NeighborSampler(g, [3, 2])
    with pytest.raises(TypeError, match=r"seeds\[1\]"):
        list(sampler.iter_blocks([torch.arange(3), torch.ones(2)], batches_per_call=2))
    for bad, error in ((0, ValueError), (-1, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="batches_per_call"):
            sampler.iter_blocks([torch.arange(3)], batches_per_call=bad)
    assert not _sampling_threads()


@pytest.mark.parametrize("stop", ["close", "drop"])
def test_iter_blocks_stopped_early_leaves_no_thread(stop):
    g, _ = _graph()
    sampler = NeighborSampler(g, [3, 2])
    batches = sampler.iter_blocks(_seed_batches(g.num_dst_nodes, [10] * 40), batches_per_call=2)
    next(batches)
    assert _sampling_threads()  # the next call in flight
    if stop == "close":
        batches.close()
    else:
        del batches
    assert not _sampling_threads()


# ---- the loader ------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["blocks", "subgraph"])
def test_loader_batches_equal_the_samplers_one_at_a_time(layout):
    """The loader samples ahead; its batches are still what the sampler gives one by one."""
    g, _ = _graph()
    loader = NeighborLoader(g, [3, 4], torch.arange(g.num_dst_nodes), batch_size=9, seed=5,
                            shuffle=True, layout=layout, batches_per_call=4, prefetch=0)
    gen = torch.Generator().manual_seed(loader.seed * 1_000_003 + loader.epoch)
    seeds = loader.shard().split(loader.batch_size)
    got = list(loader)
    assert len(got) == len(seeds)
    sampler = loader.neighbor_sampler
    for batch, s in zip(got, seeds):
        if layout == "blocks":
            _assert_blocks_equal([sampler.sample_blocks(s, gen)], [batch])
        else:
            want = sampler.sample_subgraph(s, gen)
            assert torch.equal(want.node_ids, batch.node_ids)
            assert torch.equal(want.graph.rowptr, batch.graph.rowptr)
            assert torch.equal(want.graph.col, batch.graph.col)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_loader_stopped_early_leaves_no_sampling_thread(prefetch):
    g, _ = _graph()
    loader = NeighborLoader(g, [3, 4], torch.arange(g.num_dst_nodes), batch_size=2,
                            batches_per_call=2, prefetch=prefetch)
    batches = iter(loader)
    next(batches)
    batches.close()  # a generator's close, or the prefetcher's
    assert not _sampling_threads()
