"""fastgnn.info() and the command line."""
import io
import shutil
import subprocess
import sys

import pytest
import torch

import fastgnn
from fastgnn import _native


def test_info_reports_build_and_ops():
    buf = io.StringIO()
    report = fastgnn.info(file=buf)
    text = buf.getvalue()
    assert f"torch {torch.__version__}" in text and "CUDA build:" in text
    assert report["threads"] == torch.get_num_threads()
    assert "spmm" in report["ops"] and "reference" in report["ops"]["spmm"]["cpu"]
    assert report["native_extension"] == "loaded", _native.load_error


def test_command_line_info_and_demo():
    out = subprocess.run([sys.executable, "-m", "fastgnn", "info"], capture_output=True,
                         text=True, check=True).stdout
    assert "fastgnn" in out and "ops (backends per device" in out
    demo = subprocess.run([sys.executable, "-m", "fastgnn", "demo", "--device", "cpu"],
                          capture_output=True, text=True)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "demo: ok" in demo.stdout


def test_private_cxx_runtime_detected(tmp_path):
    """A library linked with -static-libstdc++ is flagged; the extension itself is not."""
    if shutil.which("g++") is None or not sys.platform.startswith("linux"):
        pytest.skip("needs g++ on Linux")
    source = tmp_path / "thrower.cpp"
    source.write_text('#include <stdexcept>\nextern "C" void fail() { throw std::runtime_error("x"); }\n')
    for flags, private in (([], False), (["-static-libstdc++"], True)):
        library = tmp_path / f"thrower{len(flags)}.so"
        subprocess.run(["g++", "-shared", "-fPIC", *flags, str(source), "-o", str(library)],
                       check=True)
        assert _native.has_private_cxx_runtime(str(library)) is private
    assert not _native.private_cxx_runtime
