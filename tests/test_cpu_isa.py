"""The CPU kernels' instruction-set clones: FASTGNN_CPU_ISA caps the clone, so that one machine
runs the kernel tests on each (this one otherwise takes the widest its CPU has)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from fastgnn import _native

pytestmark = pytest.mark.skipif(not _native.available, reason="native extension not built")

TESTS = Path(__file__).parent
# The kernels with vector tiles per clone (the gather's float16 conversions, min/max tiles,
# snapshot rows, attention, GAT and edge softmax rows, the MaxK selection) and their dtype and
# tail cases.
KERNEL_TESTS = ["test_spmm.py", "test_minmax.py", "test_minmax_ties.py", "test_minmax_nan.py",
                "test_minmax_weighted.py", "test_snapshots.py", "test_attention.py",
                "test_gat_attention.py", "test_edge_softmax.py", "test_maxk.py"]


def _run(code_or_args, isa, *, pytest_run=False):
    env = dict(os.environ, FASTGNN_CPU_ISA=isa, PYTHONPATH=str(TESTS.parent))
    args = ["-m", "pytest", *code_or_args] if pytest_run else ["-c", code_or_args]
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          cwd=TESTS.parent, timeout=600)


def test_build_info_names_the_clone():
    assert _native.build_info["cpu_isa"] in _native.CPU_ISAS


def test_an_unknown_isa_is_rejected():
    result = _run("import fastgnn", "sse2")
    assert result.returncode != 0
    assert "FASTGNN_CPU_ISA must be one of baseline, avx2, avx512, got 'sse2'" in result.stderr


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 clones only")
@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_kernel_tests_pass_on_a_narrower_clone(isa):
    shown = _run("import fastgnn._native as n; print(n.build_info['cpu_isa'])", isa)
    assert shown.returncode == 0, shown.stderr
    # the cap, or the baseline clone on a CPU without AVX2
    assert shown.stdout.strip() in (isa, "baseline")
    # CPU tests only: the clones are CPU code, and on a GPU machine the files' CUDA tests run
    # one after another in one process here (past the timeout at 1 thread a worker).
    result = _run(["-q", "-p", "no:cacheprovider", "-x", "-m", "not gpu",
                   *(str(TESTS / t) for t in KERNEL_TESTS)], isa, pytest_run=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
