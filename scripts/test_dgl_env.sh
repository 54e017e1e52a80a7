#!/usr/bin/env bash
# Runs the test suite in the second, DGL environment: torch 2.2.1 (the oldest torch fastgnn
# supports) with DGL 2.1.0. The virtual environment is built once and cached under
# FASTGNN_CI_CACHE (default ~/.cache/fastgnn-ci), keyed by its requirements; the tree is
# copied so that its CPU-only extension does not clash with the main environment's build.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements='torch==2.2.1 numpy<2 dgl==2.1.0 torchdata==0.7.1 pandas pydantic pyyaml pytest scipy setuptools wheel ninja'
cache=${FASTGNN_CI_CACHE:-$HOME/.cache/fastgnn-ci}
venv="$cache/venv-$(echo "$requirements" | sha1sum | cut -c1-12)"
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # No pip cache: torch 2.2.1 from PyPI brings about 2.5 GB of CUDA wheels, which the venv
  # already holds once installed (CI disks have run out of space).
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --no-cache-dir $requirements
  touch "$venv/.complete"
fi
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$tree"
export FASTGNN_DATA=${FASTGNN_DATA:-$(cd .. && pwd)/shared/datasets}
cd "$tree"
FASTGNN_CUDA=0 "$venv/bin/python" setup.py -q build_ext --inplace
"$venv/bin/python" -c "import torch, dgl; print('DGL environment: torch', torch.__version__, 'dgl', dgl.__version__)"
"$venv/bin/python" -m pytest -q -rs tests
