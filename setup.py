"""Builds the one extension, fastgnn._C, against the torch that is already installed.

FASTGNN_CUDA=0 builds CPU only; FASTGNN_CUDA=1 makes a missing CUDA toolchain an error;
unset, CUDA sources are built when torch has CUDA and nvcc is found.
TORCH_CUDA_ARCH_LIST and MAX_JOBS are honoured by torch.utils.cpp_extension.
"""
import glob
import os
import re
import subprocess
import sys

from setuptools import find_packages, setup

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("fastgnn builds against an installed torch: `pip install torch` first, then "
             "`pip install --no-build-isolation -e .`")

ROOT = os.path.dirname(os.path.abspath(__file__))


def _nvcc_major():
    try:
        out = subprocess.run([os.path.join(CUDA_HOME, "bin", "nvcc"), "--version"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError, TypeError):
        return None
    found = re.search(r"release (\d+)\.", out)
    return int(found.group(1)) if found else None


def _want_cuda() -> bool:
    flag = os.environ.get("FASTGNN_CUDA", "").strip()
    if flag == "0":
        return False
    nvcc = _nvcc_major() if CUDA_HOME else None
    torch_major = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    problem = None
    if torch_major is None:
        problem = f"torch {torch.__version__} has no CUDA"
    elif nvcc is None:
        problem = f"no nvcc found (CUDA_HOME={CUDA_HOME})"
    elif nvcc != torch_major:
        problem = f"nvcc is CUDA {nvcc} but torch was built with CUDA {torch.version.cuda}"
    if problem is None:
        return True
    if flag == "1":
        sys.exit(f"FASTGNN_CUDA=1 but the CUDA toolchain is unusable: {problem}")
    if torch_major is not None:
        print(f"fastgnn: building CPU-only because {problem}", file=sys.stderr)
    return False


def _sources(pattern: str) -> list:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


def _extension():
    with_cuda = _want_cuda()
    sources = _sources("csrc/*.cpp") + _sources("csrc/cpu/*.cpp")
    openmp = ["-fopenmp"] if sys.platform != "darwin" else []
    # -g0 overrides the interpreter's -g: debug info on these templates costs a third of the
    # build time.
    # -fno-trapping-math: without it GCC will not vectorise loops with float compares (they
    # could raise FP exceptions, which nothing here reads); results are unchanged.
    cxx_flags = ["-O3", "-g0", "-fno-trapping-math"] + openmp  # the C++ standard: from torch
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


def _packages():
    """fastgnn's packages, and the top-level ``zoo/`` folder installed as ``fastgnn.zoo``: a
    top-level module named ``zoo`` would clash with other distributions."""
    zoo = ["fastgnn.zoo" + name[len("zoo"):] for name in find_packages(include=["zoo", "zoo.*"])]
    return find_packages(include=["fastgnn", "fastgnn.*"]) + zoo


setup(
    packages=_packages(),
    package_dir={"fastgnn.zoo": "zoo"},
    package_data={"fastgnn.zoo": ["configs/*.yaml"]},
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
