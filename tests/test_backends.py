"""Backend selection: set_backend, the context manager, FASTGNN_BACKEND, clear errors."""
import pytest
import torch

import fastgnn
from fastgnn import _native, backends


def test_auto_prefers_native_when_built():
    impl = backends.select("spmm", torch.device("cpu"))
    assert impl.backend == ("native" if _native.has_op("spmm") else "reference")


def test_context_and_global_setting_nest():
    assert fastgnn.get_backend() == "auto"
    fastgnn.set_backend("reference")
    try:
        assert fastgnn.get_backend() == "reference"
        with fastgnn.backend("auto"):
            assert fastgnn.get_backend() == "auto"
        assert backends.select("spmm", torch.device("cpu")).backend == "reference"
    finally:
        fastgnn.set_backend(None)
    assert fastgnn.get_backend() == "auto"


def test_environment_variable(monkeypatch):
    try:
        monkeypatch.setenv("FASTGNN_BACKEND", "reference")
        assert fastgnn.get_backend() == "auto"  # read at import and by set_backend(None)
        fastgnn.set_backend(None)
        assert fastgnn.get_backend() == "reference"
        monkeypatch.setenv("FASTGNN_BACKEND", "nonsense")
        fastgnn.set_backend(None)
        with pytest.raises(ValueError, match="available: auto"):
            fastgnn.get_backend()
    finally:
        monkeypatch.delenv("FASTGNN_BACKEND")
        fastgnn.set_backend(None)


def test_unknown_backend_lists_available():
    with pytest.raises(ValueError, match="unknown fastgnn backend 'cudnn'.*reference"):
        fastgnn.set_backend("cudnn")
    with pytest.raises(ValueError, match="unknown"):
        with fastgnn.backend("cudnn"):
            pass
    with pytest.raises(TypeError):
        fastgnn.set_backend(3)


def test_missing_implementation_on_device_is_reported():
    backends.register("_test_only_op", "reference", ("cpu",), lambda: None)
    try:
        with pytest.raises(RuntimeError, match="no 'auto' implementation on cuda; available "
                                               "there: none"):
            backends.select("_test_only_op", torch.device("cuda"))
    finally:
        backends.unregister("_test_only_op", "reference")


def test_reference_backend_gives_same_result():
    g = fastgnn.Graph.from_edge_index(torch.randint(0, 30, (2, 200)), num_nodes=30)
    x = torch.randn(30, 8)
    with fastgnn.backend("reference"):
        ref = fastgnn.ops.spmm(g, x, norm="both")
    torch.testing.assert_close(fastgnn.ops.spmm(g, x, norm="both"), ref)
