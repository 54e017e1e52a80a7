"""scripts/bench_ddp.py: the DDP scaling benchmark, and the zoo's EpochTimer it reads."""
import importlib.util
import json
import os
import subprocess
import time

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")
pytest.importorskip("jsonargparse")

from conftest import PROJECT_ROOT as ROOT, project_env  # noqa: E402
spec = importlib.util.spec_from_file_location("bench_ddp", os.path.join(ROOT, "scripts",
                                                                         "bench_ddp.py"))
bench_ddp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_ddp)


def test_summary_skips_the_first_epoch_and_adds_the_time_between_steps():
    epochs = {0: {"time/steps_s": 9.0, "time/between_steps_s": 9.0, "val_acc": 0.5},
              1: {"time/steps_s": 1.5, "time/between_steps_s": 0.5, "val_acc": 0.7},
              2: {"time/steps_s": 2.5, "time/between_steps_s": 0.5, "val_acc": 0.6},
              3: {"time/steps_s": 3.0, "time/between_steps_s": 1.0}}
    row = bench_ddp.summarise(epochs)
    assert row["epoch_s"] == 3.0  # median of 2.0, 3.0, 4.0
    assert row["between_steps_share"] == pytest.approx(0.25)  # median of 1/4, 1/6 and 1/4
    assert row["epochs_timed"] == 3
    assert (row["metric"], row["best_val"]) == ("val_acc", 0.7)


def test_summary_falls_back_to_the_task_metric():
    epochs = {0: {"time/steps_s": 1.0, "time/between_steps_s": 0.0, "val_loss": 0.1,
                  "val_rocauc": 0.8}}
    row = bench_ddp.summarise(epochs)
    assert (row["metric"], row["best_val"]) == ("val_rocauc", 0.8)


def test_scaling_is_against_one_device_of_the_same_config_and_model():
    rows = [dict(config="a", arch="sage", devices=1, epoch_s=4.0),
            dict(config="a", arch="sage", devices=2, epoch_s=2.5),
            dict(config="a", arch="gatv2", devices=2, epoch_s=1.0)]
    bench_ddp.add_scaling(rows)
    assert rows[1]["scaling"] == pytest.approx(1.6) and rows[1]["efficiency"] == pytest.approx(0.8)
    assert rows[2]["scaling"] is None  # no one-device run of gatv2
    assert "n/a" in bench_ddp.markdown([dict(r, between_steps_share=0.1, data_wait_share=0.01,
                                             metric="val_acc", best_val=0.5)
                                        for r in rows]).splitlines()[-1]


def test_data_wait_is_the_slowest_ranks_fetch_share(tmp_path):
    def report(rank, fetch, epoch):
        rows = [("Total", "-", "100", "9.0", "100 %"), ("run_training_epoch", "1.0", "2", epoch,
                                                        "80"),
                ("[_TrainingEpochLoop].train_dataloader_next", "0.1", "40", fetch, "3")]
        (tmp_path / f"fit-profile-{rank}.txt").write_text("FIT Profiler Report\n" + "\n".join(
            "|  " + "\t|  ".join(cells) + "\t|" for cells in rows))
    report(0, "0.2", "8.0")
    report(1, "0.4", "8.0")
    assert bench_ddp.fetch_share(str(tmp_path)) == pytest.approx(0.05)
    with pytest.raises(RuntimeError, match="no profiler report"):
        bench_ddp.fetch_share(str(tmp_path / "missing"))


class _Module:
    def __init__(self):
        import torch
        self.device = torch.device("cpu")
        self.logged = {}

    def log(self, name, value, **options):
        self.logged[name] = (value, options)


def test_epoch_timer_splits_steps_from_the_time_between_them():
    from fastgnn.zoo.callbacks import EpochTimer
    timer, module = EpochTimer(log=True), _Module()
    timer.on_train_epoch_start(None, module)
    for i in range(2):
        time.sleep(0.02)  # fetching a batch
        timer.on_train_batch_start(None, module, None, i)
        time.sleep(0.01)  # the step
        timer.on_train_batch_end(None, module, None, None, i)
    timer.on_train_epoch_end(None, module)
    assert 0.04 <= timer.between_times[0] < 0.06 + 0.02
    assert 0.02 <= timer.epoch_times[0] < 0.04 + 0.02
    assert timer.time_per_epoch == timer.epoch_times[0]
    value, options = module.logged["time/between_steps_s"]
    assert value == timer.between_times[0]
    assert options["sync_dist"] and options["reduce_fx"] == "max"  # the slowest rank


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_fit_past_its_timeout_is_killed_with_its_children(tmp_path):
    import sys
    marker = tmp_path / "child.pid"
    # a parent that starts a child (as a DDP launcher starts ranks), both sleeping
    script = (f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(60)']); open({str(marker)!r}, 'w').write(str(c.pid)); "
              f"time.sleep(60)")
    start = time.perf_counter()
    error = bench_ddp._fit([sys.executable, "-c", script], str(tmp_path), dict(os.environ), 3)
    assert error == "timed out" and time.perf_counter() - start < 30
    child = int(marker.read_text())
    time.sleep(0.2)
    try:  # gone, or a zombie waiting for a parent to reap it
        with open(f"/proc/{child}/stat") as f:
            assert f.read().split(") ")[1][0] == "Z"
    except FileNotFoundError:
        pass
    assert bench_ddp._fit([sys.executable, "-c", "raise SystemExit(3)"], str(tmp_path),
                          dict(os.environ), 30) == "exit 3"
    assert bench_ddp._fit([sys.executable, "-c", "pass"], str(tmp_path), dict(os.environ),
                          30) is None


@pytest.mark.slow
def test_two_cpu_processes_give_rows_with_scaling(tmp_path):
    out = tmp_path / "ddp.jsonl"
    rows = bench_ddp.main(["--configs", "quickstart", "--archs", "sage", "--devices", "2,1",
                           "--epochs", "2", "--accelerator", "cpu", "--work",
                           str(tmp_path / "runs"), "--out", str(out), "--",
                           "--data.init_args.batch_size=64", "--data.init_args.fanouts=[5, 5]",
                           "--data.init_args.num_nodes=400"])
    assert [r["devices"] for r in rows] == [1, 2]  # rising, so each row's scaling is known
    assert rows[0]["scaling"] == 1.0 and rows[1]["scaling"] > 0
    assert all(0 <= r["data_wait_share"] <= r["between_steps_share"] < 1 and
               0 < r["best_val"] <= 1 for r in rows)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["devices"] for r in written] == [1, 2]
    assert written[1]["scaling"] == rows[1]["scaling"]
    assert "| quickstart | sage | 2 |" in (tmp_path / "ddp.md").read_text()


def test_ddp_options_reach_lightnings_strategy_only_on_several_devices():
    """--ddp NAME=VALUE goes to DistributedDataParallel through DDPStrategy (parsed by the zoo's
    CLI); a one-device run stays unwrapped, so the scaling baseline is unchanged."""
    config = os.path.join(ROOT, "zoo", "configs", "quickstart.yaml")
    assert bench_ddp.strategy_options(1, ["static_graph=true"]) == ["--trainer.strategy=auto"]
    assert bench_ddp.strategy_options(2, []) == ["--trainer.strategy=ddp"]
    command = bench_ddp.fit_command(config, "sage", 2, 1, "cpu", ["--print_config"],
                                    ["static_graph=true", "broadcast_buffers=false"])
    printed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True,
                             env=project_env()).stdout
    assert "class_path: lightning.pytorch.strategies.DDPStrategy" in printed
    assert "static_graph: true" in printed and "broadcast_buffers: false" in printed


def test_threads_per_rank_left_to_the_zoo_when_sampling_on_the_gpu(monkeypatch):
    """CPU sampling: each rank gets its share of the host's cores; sample_on_gpu: the zoo
    chooses (one thread when batches stay on the GPU); the caller's OMP_NUM_THREADS wins."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert bench_ddp.run_environment(2, [])["OMP_NUM_THREADS"] == "16"
    for extra in (["--data.init_args.sample_on_gpu=true"],
                  ["--data.init_args.sample_on_gpu", "True"]):
        assert "OMP_NUM_THREADS" not in bench_ddp.run_environment(2, extra)
    assert bench_ddp.run_environment(4, ["--data.init_args.sample_on_gpu=false"])[
        "OMP_NUM_THREADS"] == "8"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert bench_ddp.run_environment(2, ["--data.init_args.sample_on_gpu=true"])[
        "OMP_NUM_THREADS"] == "3"
