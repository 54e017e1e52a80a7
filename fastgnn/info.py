"""``fastgnn.info()`` and ``python -m fastgnn info``: how this installation was built and
which op runs where."""
from __future__ import annotations

import torch

from fastgnn import _native, backends


def collect() -> dict:
    build = _native.build_info
    ops = {}
    for op in backends.ops():
        ops[op] = {device: backends.available(op, device) for device in ("cpu", "cuda")}
    return {
        "fastgnn": _version(),
        "torch": torch.__version__,
        "native_extension": ("loaded" if _native.available else f"missing ({_native.load_error})")
        + (" with a private libstdc++: C++ errors crash (see the build notes in the README)"
           if _native.private_cxx_runtime else ""),
        "cuda_build": bool(build["cuda"]),
        "cuda_runtime": build["cuda_runtime_version"],
        "cuda_archs": build["cuda_archs"],
        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "openmp": bool(build["openmp"]),
        "cpu_isa": build["cpu_isa"],
        "threads": torch.get_num_threads(),
        "backend": backends.get_backend(),
        "ops": ops,
    }


def _version() -> str:
    from fastgnn import __version__
    return __version__


def info(file=None) -> dict:
    """Prints the build and op availability report and returns it as a dict."""
    report = collect()
    lines = [
        f"fastgnn {report['fastgnn']}  (torch {report['torch']})",
        f"native extension: {report['native_extension']}",
        f"CUDA build: {'yes' if report['cuda_build'] else 'no'}"
        + (f" (runtime {report['cuda_runtime']}, archs {report['cuda_archs']})"
           if report["cuda_build"] else ""),
        f"CUDA device: {report['cuda_device'] or 'none'}",
        f"OpenMP: {'yes' if report['openmp'] else 'no'}, threads {report['threads']}"
        + (f", CPU kernels: {report['cpu_isa']}" if report["cpu_isa"] else ""),
        f"active backend: {report['backend']}",
        "ops (backends per device, best first):",
    ]
    width = max((len(op) for op in report["ops"]), default=0)
    for op, per_device in report["ops"].items():
        cells = "  ".join(f"{dev}: {','.join(names) or '-'}" for dev, names in per_device.items())
        lines.append(f"  {op.ljust(width)}  {cells}")
    print("\n".join(lines), file=file)
    return report
