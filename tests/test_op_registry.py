"""Every op in torch.ops.fastgnn has a CPU kernel, a fake kernel and (torch >= 2.4) autograd,
so that torch.compile and opcheck work for each of them."""
import pytest
import torch

import fastgnn  # noqa: F401  (registers fake kernels and autograd)
from fastgnn import _native

pytestmark = pytest.mark.skipif(not _native.available, reason="native extension not built")

# Ops that take no tensors (cache management) have nothing to fake or differentiate.
TENSORLESS = {"graph_cache_size"}
# Ops that autograd never differentiates: backward kernels, the dropout-mask generator and
# integer-valued preprocessing and neighbour sampling (integer outputs).
# (``_kernel``: the compiled path's twin ops, which run inside their autograd formulas.)
NOT_DIFFERENTIATED_SUFFIXES = ("_backward", "_dropout_mask", "reorder_rcm", "::sample_neighbors",
                               "::sample_neighbors_many", "_kernel")
# Ops that run on the CPU only, and why.
CPU_ONLY = {
    "fastgnn::attention_dropout_mask":
        "test utility: materialises the kernels' dropout formula on the CPU",
    "fastgnn::reorder_rcm": "a sequential search, run once per dataset",
}


def fastgnn_ops():
    return sorted(name for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("fastgnn::") and name.split("::")[1] not in TENSORLESS)


def test_there_are_ops():
    assert "fastgnn::spmm" in fastgnn_ops()


@pytest.mark.parametrize("qualname", fastgnn_ops())
def test_op_has_cpu_kernel(qualname):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU")


@pytest.mark.parametrize("qualname", fastgnn_ops())
def test_op_has_cuda_kernel_when_built_with_cuda(qualname):
    if not _native.cuda_built:
        pytest.skip("CPU-only build")
    if qualname in CPU_ONLY:
        pytest.skip(CPU_ONLY[qualname])
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CUDA")


@pytest.mark.parametrize("qualname", fastgnn_ops())
def test_op_has_fake_and_autograd(qualname):
    registry = pytest.importorskip("torch._library.simple_registry")
    entry = registry.singleton.find(qualname)
    fake = getattr(entry, "fake_impl", None) or entry.abstract_impl  # named so before 2.4
    assert fake.kernel is not None, f"{qualname} has no fake kernel"
    if hasattr(torch.library, "register_autograd") and not qualname.endswith(
            NOT_DIFFERENTIATED_SUFFIXES):
        has_autograd = torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Autograd") or \
            torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "AutogradCPU")
        assert has_autograd, f"{qualname} has no autograd registration"
