"""The zoo's reproduction harness (scripts/reproduce_zoo.py): its rows, job order, aggregation
and table, on made-up run records (no training)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

from fastgnn.zoo.compare import seed_overrides  # noqa: E402

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT_DIR, "scripts",
                                                                     f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


repro = _script("reproduce_zoo")


def _done(row, seed, **metrics):
    return {"row": row, "seed": seed, "status": "done", "metrics": metrics}


def _swept(row, seed, depth, val, test):
    """A run of ``--depths``: ROC-AUC at the best validation epoch, and on test."""
    return {**_done(row, seed, test_roc_auc=test), "depth": depth,
            "best_val": {"val_roc_auc": val}}


def test_rows_name_shipped_configs_and_cite_every_number():
    rows = repro.all_rows()
    assert len({r.key for r in rows}) == len(rows)
    for row in rows:
        assert os.path.isfile(os.path.join(repro.CONFIGS, row.config)), row.config
        if row.published is not None:
            assert row.source != repro.NONE, row.key
            mean, std = row.published
            assert 0 < mean < 100 and (std is None or 0 < std < mean)
    keys = {r.key for r in rows}
    assert all(r.baseline in keys for r in rows if r.baseline)
    # the grid: 4 models on 11 datasets
    grid = {(r.model, r.dataset) for r in rows}
    for model in ("GCN", "SAGE", "GAT", "GATv2", "GT"):
        for dataset in ("Cora", "CiteSeer", "Computers", "Photo", "CS", "Physics", "tolokers",
                        "minesweeper", "actor", "squirrel-filtered", "chameleon-filtered"):
            assert (model, dataset) in grid


def test_gat_rows_carry_gat_v1_numbers():
    """The published GAT numbers are GAT v1's: the GAT rows reproduce them, and the GATv2 rows
    show the same numbers beside them."""
    by_key = {r.key: r for r in repro.all_rows()}
    assert by_key["GAT/Cora"].published == (83.0, 0.7)
    assert by_key["GAT/minesweeper"].published == (92.01, 0.68)
    assert by_key["GAT/Physics"].published == (92.5, 0.9)
    assert by_key["SAGE/minesweeper"].published == (93.51, 0.57)
    assert by_key["GT/tolokers"].published == (83.23, 0.64)
    for key in ("Cora", "minesweeper", "Physics"):
        assert by_key[f"GATv2/{key}"].published == by_key[f"GAT/{key}"].published
    assert by_key["GAT/Cora"].config == "gat-planetoid.yaml"


def test_split_per_seed_follows_the_dataset():
    by_dataset = {r.dataset: r.split_per_seed for r in repro.all_rows()}
    assert not by_dataset["Cora"]  # one public split
    assert by_dataset["tolokers"] and by_dataset["Computers"]
    assert seed_overrides(3, False) == ["--seed_everything=3"]
    assert seed_overrides(3, True) == ["--seed_everything=3", "--data.init_args.split=3"]


def test_heavy_rows_run_after_every_cheap_seed():
    light = repro.Row("GCN", "Cora", "gcn-planetoid.yaml")
    heavy = repro.Row("GCN", "tolokers", "gcn-heterophilous.yaml", heavy=True)
    order = repro.order_jobs([heavy, light], [0, 1])
    assert order == [(light, 0, None), (light, 1, None), (heavy, 0, None), (heavy, 1, None)]


def test_resume_leaves_out_completed_runs(tmp_path):
    light = repro.Row("GCN", "Cora", "gcn-planetoid.yaml")
    heavy = repro.Row("GCN", "tolokers", "gcn-heterophilous.yaml", heavy=True)
    earlier = tmp_path / "reproduction.jsonl"
    earlier.write_text("\n".join(json.dumps(r) for r in [
        _done(light.key, 0, test_acc=0.8),
        {"row": heavy.key, "seed": 0, "status": "skipped"},  # not completed: runs again
        {"row": heavy.key, "seed": 1, "status": "failed", "error": "boom"},
        _done(heavy.key, 1, test_roc_auc=0.8)]) + "\n")
    done = repro.completed(repro.read_records([str(earlier)]))
    assert repro.order_jobs([heavy, light], [0, 1], done=done) == [(light, 1, None),
                                                                    (heavy, 0, None)]


def test_resume_is_keyed_by_depth(tmp_path):
    row = repro.Row("GCN", "minesweeper", "gcn-heterophilous.yaml")
    earlier = tmp_path / "reproduction.jsonl"
    earlier.write_text("\n".join(json.dumps(r) for r in [
        _swept(row.key, 0, 1, val=0.9, test=0.9),
        _done(row.key, 1, test_roc_auc=0.9),  # no depth: counts for runs without --depths only
        {"row": row.key, "seed": 1, "depth": 1, "status": "failed", "error": "boom"}]) + "\n")
    done = repro.completed(repro.read_records([str(earlier)]))
    assert repro.order_jobs([row], [0, 1], [1, 2], done) == [(row, 0, 2), (row, 1, 1),
                                                             (row, 1, 2)]
    assert repro.order_jobs([row], [0, 1], done=done) == [(row, 0, None)]


def test_depth_override_reaches_the_run(tmp_path, monkeypatch):
    from fastgnn.zoo import compare
    calls = []

    def fake_run_one(config, backend, seed, out_dir, overrides, split_per_seed):
        calls.append((out_dir, overrides))
        return {"metrics": {"test_acc": 0.5}, "best_val": {"val_acc": 0.5}}

    monkeypatch.setattr(compare, "run_one", fake_run_one)
    row = repro.Row("GCN", "minesweeper", "gcn-heterophilous.yaml", ("--data.init_args.name=m",))
    extra = ["--trainer.max_epochs=5", "--model.num_layers=9"]
    plain, swept = (repro.run_job(repro.Job(row, 3, extra, out_dir=str(tmp_path), depth=depth))
                    for depth in (None, 2))
    assert "depth" not in plain and swept["depth"] == 2 and swept["status"] == "done"
    (plain_dir, plain_args), (swept_dir, swept_args) = calls
    assert plain_args == ["--data.init_args.name=m", *extra]
    assert swept_args == plain_args + ["--model.num_layers=2"]  # last: it wins over extra's
    assert plain_dir != swept_dir  # depths of one seed may run at once


def test_depths_option():
    assert repro.parse(["--out", "x", "--depths", "3,1,3"]).depths == [1, 3]
    assert repro.parse(["--out", "x"]).depths is None


@pytest.mark.parametrize("text", ["0,1", "1,x", ","])
def test_bad_depths_are_a_one_line_error(text, capsys):
    with pytest.raises(SystemExit) as exit_info:
        repro.parse(["--out", "x", "--depths", text])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"argument --depths: {text!r} is not a list of positive integers, "
                          "e.g. 1,2,3,4,5")


@pytest.mark.parametrize("mean, published, verdict", [
    (80.0, (81.0, 1.5), "yes"),   # below, but within one std
    (79.0, (81.0, 1.5), "no"),
    (90.0, (81.0, 1.5), "yes"),   # better
    (80.0, (81.5, None), "n/a (no published std)"),
    (80.0, None, "n/a (no published number)"),
])
def test_within_one_published_std(mean, published, verdict):
    assert repro.within(mean, published) == verdict


def test_summarise_and_markdown():
    gcn = repro.Row("GCN", "tolokers", "gcn-heterophilous.yaml", published=(83.64, 0.67),
                    source="Platonov")
    relu = repro.Row("SAGE-256 (MaxK twin, ReLU)", "CS", "maxk-sage-coauthor.yaml")
    maxk = repro.Row("MaxK-SAGE k=32 of 256", "CS", "maxk-sage-coauthor.yaml",
                     baseline=relu.key)
    unrun = repro.Row("GT", "actor", "gt-heterophilous.yaml")
    records = [_done(gcn.key, 0, test_roc_auc=0.80, test_ap=0.3),
               _done(gcn.key, 1, test_roc_auc=0.84, test_ap=0.3),
               _done(gcn.key, 0, test_roc_auc=0.99, test_ap=0.3),  # a repeat: not counted
               {"row": gcn.key, "seed": 2, "status": "failed", "error": "boom"},
               {"row": gcn.key, "seed": 3, "status": "skipped"},
               _done(relu.key, 0, test_acc=0.90), _done(relu.key, 1, test_acc=0.92),
               _done(maxk.key, 0, test_acc=0.885), _done(maxk.key, 1, test_acc=0.895)]
    summary = {s["row"]: s for s in repro.summarise([gcn, relu, maxk, unrun], records)}
    s = summary[gcn.key]
    assert (s["runs"], s["failed"], s["metric"]) == (2, 1, "roc_auc")
    assert s["mean"] == pytest.approx(82.0) and s["std"] == pytest.approx(2.8284271, rel=1e-6)
    assert s["within"] == "no"  # 82.0 < 83.64 - 0.67
    assert summary[maxk.key]["gap_to_baseline"] == pytest.approx(-2.0)
    assert summary[maxk.key]["within"] == "no"
    assert summary[unrun.key]["within"] == "not run" and summary[unrun.key]["mean"] is None

    table = repro.markdown(list(summary.values()))
    assert "| GCN | tolokers | roc_auc | 82.00 ± 2.83 (2) | 83.64 ± 0.67 | Platonov | no |" \
        in table
    assert "| GT | actor | — | — (0) | — |" in table
    assert "| CS | 89.00 ± 0.71 (2) | 91.00 ± 1.41 (2) | -2.00 | no |" in table
    assert "| SAGE-256 (MaxK twin" not in table  # the twin appears only beside its MaxK row


def test_speed_table():
    speed = _script("bench_zoo_speed")
    result = {"summary": [
        {"time_per_epoch_s": {"mean": 0.030}, "peak_memory_bytes": {"mean": 2 * 2**20},
         "metrics": {"test_acc": {"mean": 0.5}}, "speedup": 1.0},
        {"time_per_epoch_s": {"mean": 0.010}, "peak_memory_bytes": None,
         "metrics": {"test_acc": {"mean": 0.5}}, "speedup": 3.0}]}
    row = speed.speed_row("gcn-amazon.yaml", result)
    assert row["ms_per_epoch"] == pytest.approx([30.0, 10.0]) and row["speedup"] == 3.0
    table = speed.markdown([row])
    assert "| gcn-amazon.yaml | 30.00 | 10.00 | 3.00x | 2 / n/a | test_acc 0.5000 / 0.5000 |" \
        in table
    assert "Median speedup 3.00x, slowest row 3.00x, over 1 configs." in table
    assert speed.configs(["coauthor"]) == ["gcn-coauthor.yaml", "sage-coauthor.yaml",
                                           "gat-coauthor.yaml", "gatv2-coauthor.yaml",
                                           "gt-coauthor.yaml", "maxk-sage-coauthor.yaml"]


def test_depth_picked_by_validation_as_the_benchmark_does():
    row = repro.Row("GCN", "minesweeper", "gcn-heterophilous.yaml", published=(89.75, 0.52))
    records = [_done(row.key, 0, test_roc_auc=0.99),  # without a depth: left out of a sweep
               _swept(row.key, 0, 1, val=0.80, test=0.70), _swept(row.key, 1, 1, 0.82, 0.72),
               _swept(row.key, 0, 2, val=0.85, test=0.60), _swept(row.key, 1, 2, 0.85, 0.62),
               _swept(row.key, 0, 2, val=0.99, test=0.99),  # a repeat of (seed 0, depth 2)
               _swept(row.key, 0, 3, val=0.84, test=0.90), _swept(row.key, 1, 3, 0.84, 0.90)]

    def summary(records):
        (s,) = repro.summarise([row], records)
        return s

    s = summary(records)  # depth 2: the best validation, though depth 3 tests higher
    assert (s["depth"], s["runs"]) == (2, 2)
    assert s["mean"] == pytest.approx(61.0) and s["std"] == pytest.approx(1.4142136, rel=1e-6)
    assert s["within"] == "no"
    assert [(d["depth"], d["runs"]) for d in s["depths"]] == [(1, 2), (2, 2), (3, 2)]
    assert [d["val_mean"] for d in s["depths"]] == pytest.approx([81.0, 85.0, 84.0])
    assert [d["test_mean"] for d in s["depths"]] == pytest.approx([71.0, 61.0, 90.0])
    table = repro.markdown([s])
    assert "| GCN | minesweeper | roc_auc | 61.00 ± 1.41 (2, depth 2) | 89.75 ± 0.52 |" in table
    assert "| GCN | minesweeper | 2 | 2 | 85.00 | 61.00 ± 1.41 | yes |" in table
    assert "| GCN | minesweeper | 3 | 2 | 84.00 | 90.00 ± 0.00 |  |" in table

    # a tie goes to the shallower depth, whichever finished first
    tie = [_swept(row.key, 0, 4, val=0.85, test=0.95), _swept(row.key, 1, 4, 0.85, 0.95)]
    assert summary(tie + records)["depth"] == 2
    # a depth counts by its completed runs; one cut short (one run here, against two) is
    # listed but not picked, though its validation is the best
    incomplete = [_swept(row.key, 0, 5, val=0.90, test=0.50),
                  {"row": row.key, "seed": 1, "depth": 5, "status": "failed", "error": "boom"},
                  {"row": row.key, "seed": 2, "depth": 5, "status": "skipped"}]
    s = summary(records + incomplete)
    assert (s["depth"], s["runs"], s["mean"], s["failed"]) == (2, 2, 61.0, 1)
    assert [(d["depth"], d["runs"]) for d in s["depths"]][-1] == (5, 1)
    # with every depth cut short alike, the best validation again
    s = summary([r for r in records + incomplete if r.get("seed") == 0])
    assert (s["depth"], s["runs"], s["mean"], s["std"]) == (5, 1, 50.0, None)


def test_depth_picked_by_lowest_validation_loss_where_the_config_tests_that_epoch(tmp_path,
                                                                                 capsys):
    """The Amazon and Coauthor configs test the epoch of lowest validation loss, so their runs
    record the loss: the sweep picks the depth whose mean loss is lowest."""
    row = repro.Row("GCN", "CS", "gcn-coauthor.yaml", published=(91.1, 0.5))

    def run(seed, depth, loss, test):
        return {**_done(row.key, seed, test_acc=test), "depth": depth,
                "best_val": {"val_loss": loss}}

    records = [run(0, 1, 0.50, 0.80), run(1, 1, 0.52, 0.82),
               run(0, 2, 0.40, 0.90), run(1, 2, 0.42, 0.92),
               run(0, 3, 0.60, 0.99), run(1, 3, 0.62, 0.99)]
    (s,) = repro.summarise([row], records)
    assert s["depth"] == 2 and s["mean"] == pytest.approx(91.0)
    assert [d["val_metric"] for d in s["depths"]] == ["loss"] * 3
    assert [d["val_mean"] for d in s["depths"]] == pytest.approx([0.51, 0.41, 0.61])
    assert "| GCN | CS | 2 | 2 | 0.4100 (loss) | 91.00 ± 1.41 | yes |" in repro.markdown([s])
    # runs of the other checkpoint rule (an accuracy) are not compared with losses
    earlier = {**_done(row.key, 2, test_acc=0.9), "depth": 1, "best_val": {"val_acc": 0.9}}
    with pytest.raises(ValueError, match="different validation metrics"):
        repro.summarise([row], records + [earlier])
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records + [earlier]))
    assert repro.main(["--rows", row.key, "--out", str(tmp_path / "out"),
                       "--summarise", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different validation metrics (acc, loss)" in err[0]


def test_no_depth_table_without_depths():
    row = repro.Row("GCN", "minesweeper", "gcn-heterophilous.yaml")
    (s,) = repro.summarise([row], [_done(row.key, 0, test_roc_auc=0.9)])
    assert "depth" not in s and "depths" not in s
    assert repro.markdown([s]).count("\n") == 3  # header, rule, the row


def _graded(row, seed, test, **setting):
    return {**_done(row, seed, test_acc=test), "device": "cpu", "setting": setting}


def test_summarise_refuses_mixed_grid_settings(tmp_path, capsys):
    row = "GCN/Cora"
    records = [_graded(row, 0, 0.8, **{"model.lr": 0.01}),
               _graded(row, 0, 0.2, **{"model.lr": 0.001})]
    path = tmp_path / "grid.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert repro.main(["--rows", row, "--out", str(tmp_path / "mixed"),
                       "--summarise", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "carry 2 settings" in err[0] and "--setting" in err[0]
    # one setting picked (numbers compare as numbers): only its run counts
    assert repro.main(["--rows", row, "--out", str(tmp_path / "one"), "--summarise", str(path),
                       "--setting", "model.lr=1e-2"]) == 0
    with open(tmp_path / "one" / "reproduction.json") as f:
        (summary,) = json.load(f)["summary"]
    assert (summary["runs"], summary["mean"]) == (1, pytest.approx(80.0))


def test_select_setting_keeps_records_without_a_grid():
    plain = [_done("GCN/Cora", 0, test_acc=0.8), _done("GCN/Cora", 1, test_acc=0.7)]
    assert repro.select_setting(plain, {}) == plain
    assert repro.select_setting(plain, {"model.lr": "0.01"}) == []
    mixed = plain + [_graded("GCN/Cora", 0, 0.5, **{"model.lr": 0.01})]
    with pytest.raises(ValueError, match="carry 2 settings"):
        repro.select_setting(mixed, {})
    assert repro.select_setting(mixed, {"model.lr": "0.01"}) == mixed[2:]
    # one setting written as text by a run and as a number by hand is one setting
    same = [_graded("GCN/Cora", 0, 0.5, **{"model.lr": 0.01}),
            _graded("GCN/Cora", 1, 0.5, **{"model.lr": "1e-2"})]
    assert repro.select_setting(same, {}) == same


@pytest.mark.parametrize("argv, message", [
    (["--setting", "model.lr=0.01"], "use it with --summarise"),
    (["--summarise", "x.jsonl", "--setting", "model.lr"], "takes NAME=VALUE"),
])
def test_bad_setting_is_a_one_line_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        repro.parse(["--out", "x", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_runs_record_their_grid_setting(tmp_path, monkeypatch):
    from fastgnn.zoo import compare
    monkeypatch.setattr(compare, "run_one", lambda *args: {"metrics": {"test_acc": 0.5}})
    extra = ["--trainer.max_epochs=5", "--model.lr=0.01", "--model.weight_decay=5e-4"]
    setting = repro.grid_setting(extra)
    assert setting == {"model.lr": "0.01", "model.weight_decay": "5e-4"}
    row = repro.Row("GCN", "Cora", "gcn-planetoid.yaml")
    graded = repro.run_job(repro.Job(row, 0, extra, out_dir=str(tmp_path), setting=setting))
    plain = repro.run_job(repro.Job(row, 0, [], out_dir=str(tmp_path)))
    assert graded["setting"] == setting and "setting" not in plain


def test_resume_is_keyed_by_setting(tmp_path, monkeypatch):
    """An earlier run counts as done only for the same setting (numbers compared as numbers)."""
    ran = []
    monkeypatch.setattr(repro, "prepare_data", lambda rows, overrides: None)
    monkeypatch.setattr(repro, "run_job", lambda job: ran.append((job.seed, job.setting)) or
                        {"row": job.row.key, "seed": job.seed, "status": "skipped"})
    monkeypatch.setattr(repro, "ProcessPoolExecutor", _InlinePool)
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps(_graded("GCN/Cora", 0, 0.8, **{"model.lr": 0.01})) + "\n")
    for lr, expected in (("1e-2", [1]), ("0.001", [0, 1])):
        ran.clear()
        assert repro.main(["--rows", "GCN/Cora", "--seeds", "0,1", "--out",
                           str(tmp_path / lr), "--resume", str(earlier),
                           f"--model.lr={lr}"]) == 0
        assert [seed for seed, _ in ran] == expected
        assert all(setting == {"model.lr": lr} for _, setting in ran)


class _InlinePool:
    """ProcessPoolExecutor's interface, running each job in this process."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, job):
        from concurrent.futures import Future
        future = Future()
        future.set_result(fn(job))
        return future


def test_gpus_option():
    assert repro.parse(["--out", "x", "--gpus", "0,2,3"]).gpus == [0, 2, 3]
    assert repro.parse(["--out", "x"]).gpus is None


@pytest.mark.parametrize("text", ["a", "", "-1", "0,x"])
def test_bad_gpus_are_a_one_line_error(text, capsys):
    with pytest.raises(SystemExit):
        repro.parse(["--out", "x", "--gpus", text])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"argument --gpus: {text!r} is not a list of CUDA device indices, "
                          "e.g. 0,1,2,3")


def test_workers_take_the_gpus_in_turn(tmp_path, monkeypatch):
    """Each worker sees one GPU of --gpus, the next one for the next worker, round and round;
    its runs record which."""
    from multiprocessing import get_context

    from fastgnn.zoo import compare
    monkeypatch.setattr(compare, "run_one", lambda *args: {"metrics": {"test_acc": 0.5}})
    row = repro.Row("GCN", "Cora", "gcn-planetoid.yaml")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(repro, "_WORKER_GPU", None)
    assert "gpu" not in repro.run_job(repro.Job(row, 0, [], out_dir=str(tmp_path)))
    counter = get_context("spawn").Value("i", 0)
    taken = [repro.take_gpu([3, 5], counter) for _ in range(5)]
    assert taken == ["3", "5", "3", "5", "3"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    assert repro.run_job(repro.Job(row, 0, [], out_dir=str(tmp_path)))["gpu"] == "3"
