"""The benchmark harness: a tiny CPU run end to end, the correctness gate, failures as rows,
and the README section writer."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

from fastgnn import reference
from fastgnn.bench import graphs, measure, report, suite
from fastgnn.bench.workloads import BASELINE, FASTGNN, WORKLOADS, Case, Context, Implementation

TINY = "powerlaw:n=300,deg=4,skew=0.8,seed=1"
TINY_BLOCK = "block:base=powerlaw-50k,batch=16,fanout=3x4,seed=2"
_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                       "bench.py")


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny graphs gain nothing from threads, and spare cores keep the timed loops quick."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _bench_cli():
    spec = importlib.util.spec_from_file_location("bench_cli", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(tmp_path, **kw):
    fields = dict(device=torch.device("cpu"), graphs=[TINY], workloads=["spmm-both"],
                  widths=[8], warmup=0, repeats=1, jsonl=str(tmp_path / "rows.jsonl"))
    fields.update(kw)
    return suite.Options(**fields)


def _rows_of(case: Case, tmp_path):
    rows = []
    suite.run_case(case, _options(tmp_path), lambda **f: rows.append(f))
    return {row["implementation"]: row for row in rows}


def _spmm_case(implementations):
    g = graphs.load(TINY).graph
    x = torch.randn(g.num_src_nodes, 8, requires_grad=True)
    return g, x, Case([x], lambda: reference.spmm(g, x, norm="both"), implementations)


# ---- graphs ------------------------------------------------------------------------------------
def test_generators_are_seeded_and_described():
    a, b = graphs.load(TINY), graphs.load(TINY)
    assert torch.equal(a.graph.col, b.graph.col) and torch.equal(a.graph.rowptr, b.graph.rowptr)
    assert a.stats["edges"] == 1200 and a.stats["src_nodes"] == 300
    assert a.stats["max_in_degree"] >= a.stats["avg_in_degree"] == 4.0
    assert "edges 1200" in graphs.describe(a)
    flat = graphs.load("uniform:n=500,deg=4,seed=0")
    assert flat.stats["max_in_degree"] <= 5 and flat.stats["gini_in_degree"] < 0.2


def test_sampled_block_is_bipartite_with_destinations_first():
    base = graphs.power_law(400, 5, 0.8, seed=2)
    block = graphs.sampled_block(base, 16, [3, 4], seed=2)
    assert block.is_bipartite and block.num_src_nodes >= block.num_dst_nodes
    assert int(block.in_degree.max()) <= 4
    assert graphs.load("block:base=powerlaw-50k,batch=8,fanout=2,seed=0").graph.num_dst_nodes == 8


def test_shuffled_graph_is_the_same_structure_relabelled():
    base = graphs.load("powerlaw-50k").graph
    shuffled = graphs.load("shuffled:base=powerlaw-50k,seed=1").graph
    assert shuffled.num_edges == base.num_edges and not torch.equal(shuffled.col, base.col)
    assert torch.equal(shuffled.in_degree.sort().values, base.in_degree.sort().values)
    with pytest.raises(ValueError, match="homogeneous"):
        graphs.load("shuffled:base=block-small")


def test_unknown_graph_is_an_error():
    with pytest.raises(ValueError, match="unknown"):
        graphs.load("nosuchgraph")


# ---- a tiny run end to end ---------------------------------------------------------------------
def test_tiny_cpu_run_writes_jsonl_table_and_plots(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.BEGIN}\nold\n{report.END}\ntail\n")
    cli = _bench_cli()
    assert cli.main(["--device", "cpu", "--graphs", f"{TINY},missing-dataset", "--workloads",
                     "spmm-both,aggregate-max,gatv2-attention,gatv2conv", "--widths", "8",
                     "--warmup", "0", "--repeats", "1", "--out", str(out),
                     "--readme", str(readme)]) == 0
    jsonl = [p for p in os.listdir(out) if p.endswith(".jsonl")]
    assert len(jsonl) == 1 and jsonl[0].endswith("-cpu.jsonl")
    rows = [json.loads(line) for line in open(out / jsonl[0])]
    assert all(set(row) == set(report.ROW_FIELDS) for row in rows)
    assert rows[0]["torch"] == torch.__version__ and rows[0]["fastgnn_commit"]
    by_impl = {(r["workload"], r["implementation"]): r for r in rows}
    for key in [("spmm-both", "fastgnn-reference"), ("spmm-both", "torch-sparse-csr"),
                ("spmm-both", "pyg-scatter"), ("aggregate-max", "pyg-scatter"),
                ("gatv2-attention", "pyg-ops"), ("gatv2conv", "pyg-stock")]:
        row = by_impl[key]
        assert row["status"] == "ok", row
        assert row["fwd_ms"] > 0 and row["bwd_ms"] > 0 and row["peak_mb"] is not None
        assert row["mem_kind"] == measure.MEM_CPU and row["check"].startswith("matches")
    assert by_impl[("gatv2conv", "pyg+fastgnn.enable")]["status"] in ("ok", "skipped")
    assert any(r["graph"] == "missing-dataset" and r["status"] == "skipped" for r in rows)
    stem = jsonl[0][:-len(".jsonl")]
    table = (out / f"{stem}.md").read_text()
    assert "| graph | workload | width | fastgnn | vs baseline" in table
    assert "## Layers: stock PyG against fastgnn.enable" in table
    for name in ("speedup", "memory"):
        assert (out / f"{stem}-{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = readme.read_text()
    assert section.startswith("intro\n") and section.endswith("tail\n") and "old" not in section
    assert rows[0]["fastgnn_commit"] in section and f"{stem}-speedup.png" in section
    assert "| graph |" not in section  # the README keeps one headline table, written by hand

    # the report subcommand regenerates everything from the JSON lines alone
    regen = tmp_path / "regen"
    assert cli.main(["report", str(out / jsonl[0]), "--out", str(regen)]) == 0
    assert (regen / f"{stem}.md").read_text() == table
    assert "spmm-both" in capsys.readouterr().out


def test_bipartite_block_runs_and_gcn_is_skipped(tmp_path):
    pytest.importorskip("torch_geometric")
    rows = suite.run(_options(tmp_path, graphs=[TINY_BLOCK],
                              workloads=["graph-attention", "gcnconv", "sageconv-max"]),
                     log=lambda _: None)
    status = {(r["workload"], r["implementation"]): r["status"] for r in rows}
    assert status[("graph-attention", "pyg-ops")] == "ok"
    assert status[("sageconv-max", "pyg-stock")] == "ok"
    assert status[("gcnconv", "pyg-stock")] == "skipped"


def test_reorder_flag_rows_are_checked_and_record_the_order_build(tmp_path):
    assert "reorder-flag-spmm" not in suite.KERNELS  # opt-in: the default suites skip it
    rows = suite.run(_options(tmp_path, graphs=["shuffled:base=powerlaw-50k,seed=0", TINY_BLOCK],
                              workloads=["reorder-flag-spmm", "reorder-flag-graph-attention"]),
                     log=lambda _: None)
    flagged = [r for r in rows if r["implementation"].startswith("reordered-")]
    homogeneous = [r for r in flagged if r["graph"] != TINY_BLOCK and (
        r["implementation"] != "reordered-metis" or importlib.util.find_spec("pymetis"))]
    assert len(homogeneous) in (4, 6) and all(
        r["status"] == "ok" and r["setup_ms"] > 0 and r["check"].startswith("matches")
        for r in homogeneous)
    assert all(r["status"] == "skipped" and "homogeneous" in r["error"]
               for r in flagged if r["graph"] == TINY_BLOCK)


def test_layer_row_runs_when_enable_swaps_the_class(tmp_path, monkeypatch):
    pytest.importorskip("torch_geometric")
    from torch_geometric.nn import SAGEConv
    enable = importlib.import_module("fastgnn.enable")  # the module, not fastgnn.enable()

    class Swapped(SAGEConv):  # stands in for an adapter: same computation, another class
        pass

    monkeypatch.setitem(enable._to_fast, SAGEConv, Swapped)
    monkeypatch.setitem(enable._to_stock, Swapped, SAGEConv)
    rows = suite.run(_options(tmp_path, workloads=["sageconv-max"]), log=lambda _: None)
    row = {r["implementation"]: r for r in rows}["pyg+fastgnn.enable"]
    assert row["status"] == "ok" and row["check"].startswith("matches pyg-stock"), row


def test_half_precision_rows_are_checked_on_the_same_values_and_compared(tmp_path):
    """--precisions: each half-precision op row is checked against the float32 oracle on its
    own (rounded) values, so maxima, top-k picks and LeakyReLU signs agree, then compared with
    its float32 row in the results."""
    out = tmp_path / "out"
    assert _bench_cli().main(["--device", "cpu", "--graphs", TINY, "--workloads",
                              "aggregate-max,gatv2-attention,maxk-spmm-k8", "--widths", "16",
                              "--precisions", "fp32,bf16,fp16", "--warmup", "0",
                              "--repeats", "1", "--out", str(out)]) == 0
    jsonl = next(p for p in os.listdir(out) if p.endswith(".jsonl"))
    rows = [json.loads(line) for line in open(out / jsonl)]
    native = [r for r in rows if r["implementation"] == "fastgnn-native"]
    assert sorted(r["precision"] for r in native) == sorted(["fp32", "bf16", "fp16"] * 3)
    for row in native:
        assert row["status"] == "ok", row
        if row["precision"] != "fp32":
            tol = suite.HALF_RTOL[suite.OP_PRECISIONS[row["precision"]]]
            assert f"(float32, within {tol:g})" in row["check"]
    compared = report.precision_comparisons(rows)
    assert {(c["workload"], c["precision"]) for c in compared
            if c["implementation"] == "fastgnn-native"} == {
        (w, p) for w in ("aggregate-max", "gatv2-attention", "maxk-spmm-k8")
        for p in ("bf16", "fp16")}
    table = (out / jsonl.replace(".jsonl", ".md")).read_text()
    assert "## Half precision against float32" in table and "| 4x4 bf16 |" in table


def test_float32_twin_draws_the_same_values_on_the_same_structures():
    ctx = Context(graphs.load(TINY), 8, torch.device("cpu"), dtype=torch.bfloat16)
    graph, half = ctx.graph, [ctx.features(30, 8), ctx.features(4)]
    twin = ctx.float32_twin()
    assert twin.graph is graph and twin.dtype == torch.float32  # no structure built twice
    for value in half:
        drawn = twin.features(*value.shape)
        assert drawn.dtype == torch.float32 and torch.equal(drawn, value.float())


def test_half_precision_check_still_catches_a_wrong_result(tmp_path):
    g = graphs.load(TINY).graph
    x = torch.randn(g.num_src_nodes, 8).bfloat16().requires_grad_()
    reference_x = x.detach().float().requires_grad_()
    twin = Case([reference_x], lambda: reference.spmm(g, reference_x, norm="both"), [])
    case = Case([x], lambda: reference.spmm(g, x, norm="both"), [
        Implementation("right", FASTGNN, lambda: reference.spmm(g, x, norm="both")),
        Implementation("wrong", FASTGNN, lambda: 1.2 * reference.spmm(g, x, norm="both"))])
    rows = []
    suite.run_case(case, _options(tmp_path), lambda **f: rows.append(f), reference=twin)
    status = {r["implementation"]: r["status"] for r in rows}
    assert status == {"right": "ok", "wrong": "mismatch"}


def test_half_precision_slower_rows_are_marked():
    def row(precision, fwd, bwd, impl="fastgnn-native"):
        return dict(graph="g", workload="spmm-both", level="op", width=64, heads=4,
                    implementation=impl, precision=precision, status="ok", fwd_ms=fwd, bwd_ms=bwd)
    rows = [row("fp32", 1.0, 1.0), row("bf16", 1.0, 1.2), row("fp16", 0.5, 1.0),
            row("bf16", 1.0, 1.0, impl="no-fp32-row")]
    found = {c["precision"]: c for c in report.precision_comparisons(rows)}
    assert set(found) == {"bf16", "fp16"}
    assert found["bf16"]["slower"] and found["bf16"]["speedup"] == pytest.approx(2 / 2.2)
    assert not found["fp16"]["slower"] and found["fp16"]["fwd_speedup"] == 2.0
    assert found["bf16"]["width"] == "64"
    assert "**yes**" in report.precision_table(rows)


@pytest.mark.parametrize("argv, message", [
    (["--precisions", "fp8"], "unknown precisions ['fp8']"),
    (["--training", "--precisions", "bf16"], "--precisions sets op workloads' dtypes")])
def test_bad_precisions_are_refused(tmp_path, capsys, argv, message):
    assert _bench_cli().main(["--device", "cpu", "--out", str(tmp_path)] + argv) == 2
    assert message in capsys.readouterr().err


# ---- the correctness gate and failures ---------------------------------------------------------
def test_wrong_implementation_is_caught_and_not_timed(tmp_path):
    g, x, case = _spmm_case([])
    case.implementations = [
        Implementation("right", BASELINE, lambda: reference.spmm(g, x, norm="both")),
        Implementation("wrong", FASTGNN, lambda: 1.1 * reference.spmm(g, x, norm="both")),
        Implementation("wrong-grad", FASTGNN,
                       lambda: reference.spmm(g, x.detach(), norm="both") + 0 * x.sum()),
    ]
    rows = _rows_of(case, tmp_path)
    assert rows["right"]["status"] == "ok"
    for name in ("wrong", "wrong-grad"):
        assert rows[name]["status"] == "mismatch"
        assert "fwd_ms" not in rows[name] and "differs" in rows[name]["check"]
    assert "output" in rows["wrong"]["error"] and "grad[0]" in rows["wrong-grad"]["error"]


def test_gradients_by_norm_pass_an_isolated_outlier_and_catch_a_wrong_gradient():
    """GATConv's check: a float32 rounding that puts one edge across a LeakyReLU kink moves a
    few gradient entries by O(1); by norm that passes, element by element it does not. A
    gradient off everywhere (or a missing one) fails either way."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 64, generator=gen, requires_grad=True)
    grad_output = torch.randn(4000, 64, generator=gen)
    expected = measure.Expected(x.detach() * 2, [grad_output * 2])
    outlier = torch.zeros(4000, 64)
    outlier[7, :3] = 0.5  # one row's few entries, as a kink flip moves them

    def kinked():
        return x * 2 + (x * outlier).detach() - (x * outlier)  # the same output

    measure.check(kinked, [x], grad_output, expected, 1e-3, "norm")
    with pytest.raises(measure.Mismatch, match="max abs error"):
        measure.check(kinked, [x], grad_output, expected, 1e-3, "elementwise")
    with pytest.raises(measure.Mismatch, match="relative error"):
        measure.check(lambda: x * 2.01, [x], grad_output,
                      measure.Expected(x.detach() * 2.01, [grad_output * 2]), 1e-3, "norm")
    with pytest.raises(ValueError, match="grad_check"):
        measure.check(kinked, [x], grad_output, expected, 1e-3, "loose")


@pytest.mark.parametrize("exc_type", [getattr(torch, "OutOfMemoryError", MemoryError),
                                      MemoryError])
def test_out_of_memory_and_errors_become_rows(tmp_path, exc_type):
    g, x, case = _spmm_case([])

    def oom():
        raise exc_type("CUDA out of memory. Tried to allocate 1 TiB")

    def broken():
        raise RuntimeError("kernel launch failed")

    case.implementations = [Implementation("oom", FASTGNN, oom),
                            Implementation("broken", BASELINE, broken),
                            Implementation("absent", BASELINE, skip="library missing")]
    rows = _rows_of(case, tmp_path)
    assert rows["oom"]["status"] == "oom" and "out of memory" in rows["oom"]["error"]
    assert rows["broken"]["status"] == "error" and "kernel launch" in rows["broken"]["error"]
    assert rows["absent"]["status"] == "skipped" and rows["absent"]["error"] == "library missing"


def test_oracle_failure_still_times_implementations(tmp_path):
    g, x, case = _spmm_case([])
    case.oracle = lambda: (_ for _ in ()).throw(MemoryError("oracle too big"))
    case.implementations = [Implementation("impl", BASELINE,
                                           lambda: reference.spmm(g, x, norm="both"))]
    row = _rows_of(case, tmp_path)["impl"]
    assert row["status"] == "ok" and row["check"].startswith("unverified: oracle")


def test_nothing_running_records_the_failure_on_every_row(tmp_path):
    g, x, case = _spmm_case([])

    def oom():
        raise MemoryError("out of memory")

    case.oracle = oom
    case.implementations = [Implementation("a", FASTGNN, oom), Implementation("b", BASELINE, oom)]
    rows = _rows_of(case, tmp_path)
    assert [rows[n]["status"] for n in "ab"] == ["oom", "oom"]
    assert "nothing ran" in rows["a"]["error"]


def test_every_registered_workload_builds():
    pytest.importorskip("torch_geometric")
    ctx_graph = graphs.load(TINY)
    for name, workload in WORKLOADS.items():
        case = workload.build(Context(ctx_graph, 8, torch.device("cpu")))
        runs = [getattr(i, "forward", None) or getattr(i, "model", None) or i.skip
                for i in case.implementations]
        assert runs and all(runs), name


# ---- training steps ----------------------------------------------------------------------------
def test_training_steps_run_checked_and_reported(tmp_path):
    pytest.importorskip("torch_geometric")
    out = tmp_path / "out"
    assert _bench_cli().main(["--device", "cpu", "--training", "--graphs", TINY, "--workloads",
                              "train-gcn,train-sage-max", "--widths", "8", "--warmup", "0",
                              "--repeats", "1", "--out", str(out)]) == 0
    jsonl = [p for p in os.listdir(out) if p.endswith(".jsonl")]
    assert len(jsonl) == 1 and jsonl[0].endswith("-cpu-training.jsonl")
    rows = report.read_jsonl(str(out / jsonl[0]))
    assert len(rows) == 2 * 2 * 2  # models x precisions x (stock, enabled)
    for row in rows:
        assert row["status"] == "ok" and row["level"] == "step", row
        assert row["wall_ms"] > 0 and row["busy_ms"] > 0 and row["busy_kind"] == "cpu_process_time"
        assert row["fwd_ms"] is None and row["peak_mb"] is not None
        if row["kind"] == FASTGNN:
            assert row["check"].startswith("logits match pyg-stock")
    assert {r["precision"] for r in rows} == {"fp32", "bf16"}
    steps = report.step_comparisons(rows)
    assert len(steps) == 4 and all(c["speedup"] > 0 for c in steps)
    table = open(out / jsonl[0].replace(".jsonl", ".md")).read()
    assert "## Training steps" in table and "train-sage-max" in table
    assert f"| {TINY} | train-gcn | fp32 | pyg+fastgnn.enable |" in table
    if importlib.util.find_spec("matplotlib"):  # one bar per model and precision
        assert sorted(p for p in os.listdir(out) if p.endswith(".png")) == [
            jsonl[0].replace(".jsonl", f"-{name}.png") for name in ("memory", "speedup")]


@pytest.mark.gpu
def test_training_steps_on_cuda_measure_kernel_time_and_cuda_graphs(tmp_path):
    pytest.importorskip("torch_geometric")
    rows = []
    opts = _options(tmp_path, device=torch.device("cuda"), workloads=["train-gcn", "train-gatv2"])
    suite.run_graph(TINY, opts, lambda **f: rows.append(f), lambda _: None)
    assert len(rows) == 2 * 2 * 3  # models x precisions x (stock, enabled, enabled as a graph)
    for row in rows:
        assert row["status"] == "ok", row
        assert 0 < row["busy_ms"] and row["busy_kind"] == "cuda_kernel_time"
    graphed = [r for r in rows if r["implementation"].endswith("cuda-graph")]
    assert len(graphed) == 4 and all(r["check"].startswith("logits match") for r in graphed)
    assert all(r["peak_mb"] is None for r in graphed)  # the graph's pool is out of sight
    assert all(c["memory_ratio"] is None for c in report.step_comparisons(rows)
               if c["implementation"].endswith("cuda-graph"))


@pytest.mark.gpu
def test_training_steps_compile_row(tmp_path):
    pytest.importorskip("torch_geometric")
    rows = []
    opts = _options(tmp_path, device=torch.device("cuda"), workloads=["train-gcn"],
                    compile=True)
    suite.run_graph(TINY, opts, lambda **f: rows.append(f), lambda _: None)
    compiled = [r for r in rows if r["implementation"].endswith("torch.compile")]
    assert len(compiled) == 2  # fp32 and bf16
    for row in compiled:
        assert row["status"] == "ok" and row["check"].startswith("logits match"), row
        assert row["wall_ms"] > 0 and row["busy_ms"] > 0


def test_training_step_with_other_parameters_is_a_mismatch():
    pytest.importorskip("torch_geometric")
    from fastgnn.bench import training
    ctx = Context(graphs.load(TINY), 8, torch.device("cpu"))
    case = training.build(ctx, "gcn")
    stock, fast = case.implementations
    expected = training._logits(stock.model, case, ctx.device, "fp32")
    with torch.no_grad():
        next(fast.model.parameters()).add_(1.0)
    fields = training.measure_step(fast, case, expected, ctx.device, "fp32", 0, 1)
    assert fields["status"] == "mismatch" and "wall_ms" not in fields


# ---- timing ------------------------------------------------------------------------------------
class _Square(torch.autograd.Function):
    """x * x, counting its forwards and backwards; saves x, so a second backward through one
    graph needs ``retain_graph``."""
    forwards = backwards = 0

    @staticmethod
    def forward(ctx, x):
        _Square.forwards += 1
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        _Square.backwards += 1
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_batch_is_ten_on_cuda_one_on_cpu():
    assert measure.BATCH == 10
    assert measure._batch(torch.device("cuda")) == measure.BATCH
    assert measure._batch(torch.device("cpu")) == 1


@pytest.mark.parametrize("warmup,repeats,batch", [(2, 3, 4), (0, 1, 1)])
def test_timing_runs_warmup_then_repeats_batches(monkeypatch, warmup, repeats, batch):
    monkeypatch.setattr(measure, "_batch", lambda device: batch)
    monkeypatch.setattr(_Square, "forwards", 0)
    monkeypatch.setattr(_Square, "backwards", 0)
    cpu = torch.device("cpu")
    x = torch.randn(5, requires_grad=True)

    ms = measure.time_forward(lambda: _Square.apply(x), cpu, warmup, repeats)
    assert ms > 0 and _Square.forwards == warmup + repeats * batch and _Square.backwards == 0

    _Square.forwards = 0
    ms = measure.time_backward(lambda: _Square.apply(x), [x], torch.ones(5), cpu, warmup,
                               repeats)
    # one forward per warmup call and per sample; every sample differentiates its graph
    # `batch` times
    assert ms > 0 and _Square.backwards == warmup + repeats * batch
    assert _Square.forwards == warmup + repeats
    assert x.grad is None  # torch.autograd.grad leaves .grad alone


def test_kernel_timing_is_call_timing_on_cpu(monkeypatch):
    monkeypatch.setattr(_Square, "forwards", 0)
    x = torch.randn(5)
    assert measure.time_kernels(lambda: _Square.apply(x), torch.device("cpu"), 2, 3) > 0
    assert _Square.forwards == 2 + 3


@pytest.mark.gpu
def test_kernel_timing_replays_one_captured_batch(monkeypatch):
    """The Python function runs for the warmup and the capture only; every sample replays the
    graph, whose work is what is timed: a call of 50 matrix products takes longer than one of
    5, although the host issues both once."""
    monkeypatch.setattr(_Square, "forwards", 0)
    cuda = torch.device("cuda")
    x = torch.randn(1024, 1024, device=cuda)

    def products(count):
        def run():
            _Square.apply(x)
            for _ in range(count):
                x @ x
        return run

    short = measure.time_kernels(products(5), cuda, 2, 5)
    assert _Square.forwards == 2 + measure.BATCH
    long = measure.time_kernels(products(50), cuda, 2, 5)
    assert 0 < short < long


# ---- README section ----------------------------------------------------------------------------
def test_replace_section_only_between_markers(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(f"# t\nkeep {report.BEGIN}\nold\n{report.END} keep too\n")
    report.replace_section(str(path), "new table")
    assert path.read_text() == f"# t\nkeep {report.BEGIN}\nnew table\n{report.END} keep too\n"
    report.replace_section(str(path), "newer")
    assert "new table" not in path.read_text() and "newer" in path.read_text()
    path.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        report.replace_section(str(path), "x")


def test_layer_table_keeps_the_layer_rows():
    recorded = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results",
                            "2026-11-22-nvidia-h100-80gb-hbm3.jsonl")
    rows = [json.loads(line) for line in open(recorded)]
    table = report.layer_table(rows)
    assert "| tolokers | gatv2conv | 2x64 |" in table and "| ogbn-arxiv | gcnconv | 128 |" in table
    assert "spmm" not in table and "reference" not in table
    ops_only = [r for r in rows if r["workload"] == "spmm-both"]
    assert "| tolokers | spmm-both | 64 |" in report.layer_table(ops_only)
    assert "reference" not in report.layer_table(ops_only)
