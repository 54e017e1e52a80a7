"""Builds the one extension, fastgnn._C, against the torch that is already installed.

FASTGNN_CUDA=0 builds CPU only; FASTGNN_CUDA=1 makes a missing CUDA toolchain an error;
unset, CUDA sources are built when torch has CUDA and nvcc is found.
TORCH_CUDA_ARCH_LIST and MAX_JOBS are honoured by torch.utils.cpp_extension.
"""
import glob
import os
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("fastgnn builds against an installed torch: `pip install torch` first, then "
             "`pip install --no-build-isolation -e .`")

ROOT = os.path.dirname(os.path.abspath(__file__))


def _want_cuda() -> bool:
    flag = os.environ.get("FASTGNN_CUDA", "").strip()
    available = torch.version.cuda is not None and CUDA_HOME is not None
    if flag == "0":
        return False
    if flag == "1" and not available:
        sys.exit(f"FASTGNN_CUDA=1 but no CUDA toolchain: torch.version.cuda={torch.version.cuda}, "
                 f"CUDA_HOME={CUDA_HOME}")
    return available


def _sources(pattern: str) -> list:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


def _extension():
    with_cuda = _want_cuda()
    sources = _sources("csrc/*.cpp") + _sources("csrc/cpu/*.cpp")
    openmp = ["-fopenmp"] if sys.platform != "darwin" else []
    cxx_flags = ["-O3"] + openmp  # the C++ standard comes from torch.utils.cpp_extension
    define_macros = []
    kwargs = {}
    if with_cuda:
        sources += _sources("csrc/cuda/*.cpp") + _sources("csrc/cuda/*.cu")
        archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
        define_macros += [("FASTGNN_WITH_CUDA", None), ("FASTGNN_CUDA_ARCHS", f'"{archs or "auto"}"')]
        kwargs["extra_compile_args"] = {
            "cxx": cxx_flags,
            "nvcc": ["-O3", "--use_fast_math", "-lineinfo", "--expt-relaxed-constexpr"],
        }
        kwargs["libraries"] = ["cusparse"]
        make = CUDAExtension
    else:
        kwargs["extra_compile_args"] = cxx_flags
        make = CppExtension
    return make("fastgnn._C", sources, define_macros=define_macros,
                extra_link_args=openmp, include_dirs=[os.path.join(ROOT, "csrc")], **kwargs)


setup(
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
