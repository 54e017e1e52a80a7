#!/usr/bin/env bash
# Compile-checks the CUDA sources on a machine without a GPU or a CUDA torch: nvcc compiles
# every .cu for sm_90, g++ syntax-checks the CUDA glue .cpp files against the CPU torch's
# headers (with a stub for the one generated header a CPU wheel lacks).
set -euo pipefail
cd "$(dirname "$0")/.."
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
mkdir -p "$stub/c10/cuda/impl"
echo '#define C10_CUDA_BUILD_SHARED_LIBS' > "$stub/c10/cuda/impl/cuda_cmake_macros.h"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
# cusparse.h: from the toolkit, else CUSPARSE_INCLUDE, else the nvidia-cusparse wheel's headers
# unpacked under ~/.cache/fastgnn/cusparse_include (pip download nvidia-cusparse-cu12 --no-deps).
cusparse_include=""
for dir in "$cuda_home/include" "${CUSPARSE_INCLUDE:-}" "$HOME/.cache/fastgnn/cusparse_include"; do
  if [ -n "$dir" ] && [ -e "$dir/cusparse.h" ]; then cusparse_include="-I$dir"; break; fi
done
[ -n "$cusparse_include" ] || { echo "cusparse.h not found (set CUSPARSE_INCLUDE)"; exit 1; }
includes=$(python3 -c "import torch.utils.cpp_extension as c; print(' '.join('-I'+p for p in c.include_paths()))")
status=0
for f in csrc/cuda/*.cu; do
  [ -e "$f" ] || continue
  nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icsrc -c "$f" -o /dev/null || { echo "FAILED: $f"; status=1; }
done
for f in csrc/cuda/*.cpp; do
  [ -e "$f" ] || continue
  g++ -std=c++20 -fsyntax-only -I"$stub" $includes -I"$cuda_home/include" $cusparse_include -Icsrc \
    -DFASTGNN_WITH_CUDA '-DFASTGNN_CUDA_ARCHS="9.0"' "$f" || { echo "FAILED: $f"; status=1; }
done
[ $status -eq 0 ] && echo "CUDA sources compile"
exit $status
