"""The shared tuner: picks the fastest candidate once per key, caches in memory and on disk."""
import json
import time

import pytest
import torch

import fastgnn
from fastgnn import tuning


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTGNN_CACHE_DIR", str(tmp_path))
    tuning.clear()
    yield tmp_path
    tuning.clear()


@pytest.fixture
def graph():
    return fastgnn.Graph.from_edge_index(torch.randint(0, 50, (2, 300)), num_nodes=50)


def candidates(calls):
    def slow():
        calls.append("slow")
        time.sleep(0.004)

    def fast():
        calls.append("fast")

    return {"slow": slow, "fast": fast}


def test_picks_fastest_and_remembers(fresh_cache, graph):
    calls = []
    cpu = torch.device("cpu")
    assert tuning.choose("op", graph, 64, torch.float32, cpu, candidates(calls), "slow") == "fast"
    timed = len(calls)
    assert timed > 0
    assert tuning.choose("op", graph, 64, torch.float32, cpu, candidates(calls), "slow") == "fast"
    assert len(calls) == timed  # no second timing
    stored = json.loads((fresh_cache / "tuning.json").read_text())
    assert list(stored.values()) == ["fast"]
    tuning.clear()  # memory gone, disk stays
    assert tuning.choose("op", graph, 64, torch.float32, cpu, candidates(calls), "slow") == "fast"
    assert len(calls) == timed


def test_keys_separate_width_dtype_and_op(fresh_cache, graph):
    cpu = torch.device("cpu")
    keys = {tuning.make_key("op", graph, 64, torch.float32, cpu),
            tuning.make_key("op", graph, 32, torch.float32, cpu),
            tuning.make_key("op", graph, 64, torch.float16, cpu),
            tuning.make_key("op2", graph, 64, torch.float32, cpu)}
    assert len(keys) == 4


def test_a_stream_of_new_structures_is_timed_by_size_class_past_a_bound(fresh_cache,
                                                                           monkeypatch):
    """Mini-batches from a loader fastgnn does not see (PyG's own NeighborLoader) are a new
    structure each: past EXACT_STRUCTURES of one size class timed one by one, new ones of that
    class share its key instead of timing the candidates again for every batch."""
    from fastgnn.sampling.sampler import _sampled
    monkeypatch.setattr(tuning, "EXACT_STRUCTURES", 2)
    cpu = torch.device("cpu")

    def batch(seed):  # another exact signature (edge count), the same size class (512)
        gen = torch.Generator().manual_seed(seed)
        edges = torch.randint(0, 50, (2, 260 + 20 * seed), generator=gen)
        return fastgnn.Graph.from_edge_index(edges, num_nodes=50)

    def races(graph, op="op"):
        calls = []
        tuning.choose(op, graph, 64, torch.float32, cpu, candidates(calls), "slow")
        return len(calls) > 0

    def by_size(graph, op="op"):
        return tuning.keyed_by_size(op, graph, 64, torch.float32, "cpu")

    sampled = batch(99)
    sampled = _sampled(sampled.rowptr, sampled.col, 50, ("block", 5))
    assert by_size(sampled) and races(sampled)  # keyed by size from the start, not counted
    assert not by_size(batch(0))
    assert [races(batch(seed)) for seed in range(5)] == [True, True, True, False, False]
    assert by_size(batch(5)) and not by_size(batch(5), op="other")
    assert races(batch(0), op="other")  # the bound is per op (and width, dtype, device)
    other_class = fastgnn.Graph.from_edge_index(torch.randint(0, 50, (2, 600)), num_nodes=50)
    assert races(other_class)  # and per size class: other graphs are still timed exactly
    tuning.clear()  # counts again from 0; the size class's choice stays on disk
    assert [races(batch(seed)) for seed in (7, 8, 9)] == [True, True, False]


def test_disabled_tuning_returns_default(fresh_cache, graph, monkeypatch):
    monkeypatch.setenv("FASTGNN_TUNE", "0")
    calls = []
    assert tuning.choose("op", graph, 8, torch.float32, "cpu", candidates(calls), "slow") == "slow"
    assert calls == []


def test_memory_only_cache(fresh_cache, graph, monkeypatch):
    monkeypatch.setenv("FASTGNN_TUNE_CACHE", "0")
    tuning.choose("op", graph, 8, torch.float32, "cpu", candidates([]), "slow")
    assert not (fresh_cache / "tuning.json").exists()


def test_failing_candidate_is_skipped(fresh_cache, graph):
    def broken():
        raise RuntimeError("cannot run this shape")

    choice = tuning.choose("op", graph, 8, torch.float32, "cpu",
                           {"broken": broken, "ok": lambda: None}, "broken")
    assert choice == "ok"
    with pytest.raises(ValueError, match="default"):
        tuning.choose("op2", graph, 8, torch.float32, "cpu", {"ok": lambda: None}, "missing")


def test_choice_is_remembered_on_the_graph_and_candidates_built_once(fresh_cache, graph):
    builds = []

    def candidates():
        builds.append(1)
        return {"a": lambda: None, "b": lambda: None}

    first = tuning.choose("op", graph, 8, torch.float32, "cpu", candidates, "a")
    for _ in range(3):
        assert tuning.choose("op", graph, 8, torch.float32, "cpu", candidates, "a") == first
    assert builds == [1]
    assert tuning.choices(graph) == {"op/8/float32": first}  # what bench rows record


def test_measure_returns_median_ms():
    assert tuning.measure(lambda: time.sleep(0.002), torch.device("cpu"), repeats=3) >= 1.5


def scripted_race(monkeypatch, times):
    """Each candidate's samples come from ``times[name]`` in order (ms), not from a clock."""
    def timed(fn, calls, device):
        fn()
        return times[fn.name].pop(0)
    monkeypatch.setattr(tuning, "time_calls", timed)


def named(name):
    def fn():
        pass
    fn.name = name
    return fn


@pytest.mark.parametrize("second_race_winner", ["new", "stock"])
def test_leaving_the_default_takes_a_second_win(fresh_cache, graph, monkeypatch,
                                                second_race_winner):
    """A race disturbed once (the default's samples slowed by another process) must not leave
    the default: the winner has to beat it again."""
    first = {"stock": [2.0] * tuning.REPEATS, "new": [1.0] * tuning.REPEATS}
    second = ({"stock": [2.0] * tuning.REPEATS, "new": [1.0] * tuning.REPEATS}
              if second_race_winner == "new"
              else {"stock": [1.0] * tuning.REPEATS, "new": [1.5] * tuning.REPEATS})
    times = {name: first[name] + second[name] for name in first}
    scripted_race(monkeypatch, times)
    choice = tuning.choose("op", graph, 8, torch.float32, "cpu",
                           {"stock": named("stock"), "new": named("new")}, "stock")
    assert choice == second_race_winner
    assert all(not left for left in times.values())  # both races ran in full


def test_default_that_wins_needs_no_second_race(fresh_cache, graph, monkeypatch):
    times = {"stock": [1.0] * tuning.REPEATS, "new": [2.0] * tuning.REPEATS}
    scripted_race(monkeypatch, times)
    assert tuning.choose("op", graph, 8, torch.float32, "cpu",
                         {"stock": named("stock"), "new": named("new")}, "stock") == "stock"
