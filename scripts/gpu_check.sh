#!/usr/bin/env bash
# The GPU workflow in one command: build the CUDA extension for the local GPU, run the test
# suite (GPU tests included), run compute-sanitizer memcheck (and racecheck) on the small GPU
# tests, run the benchmark smoke, and write a report to REPORT_DIR.
#
#   scripts/gpu_check.sh REPORT_DIR [all|tests|sanitizers|memcheck|racecheck]
#
# "tests" is the build, the suite and the benchmark smoke; "sanitizers" the build and both
# sanitizers, "memcheck" or "racecheck" one of them: on a shared device with 10-minute
# slots, each part but "all" is meant to fit one. With
# pytest-xdist installed, each pytest spreads over workers (tests/conftest.py gives each its
# share of the cores).
#
# Honours TORCH_CUDA_ARCH_LIST (default: the local GPU's) and MAX_JOBS (default: all cores).
set -uo pipefail
report=${1:?usage: scripts/gpu_check.sh REPORT_DIR [all|tests|sanitizers|memcheck|racecheck]}
part=${2:-all}
case $part in
  all|sanitizers) tools="memcheck racecheck";;
  tests) tools="";;
  memcheck|racecheck) tools=$part;;
  *) echo "gpu_check.sh: unknown part '$part'" >&2; exit 2;;
esac
mkdir -p "$report"
report=$(cd "$report" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 FASTGNN_CUDA=1
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$(python3 -c \
  "import torch; print('%d.%d' % torch.cuda.get_device_capability())")}
summary="$report/report.md"
status=0

step() {  # step NAME LOGFILE COMMAND...: runs, times and records one step
  local name=$1 log=$2; shift 2
  local t0=$(date +%s.%N)
  "$@" >"$report/$log" 2>&1
  local rc=$? dt=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
  local verdict=$([ $rc -eq 0 ] && echo pass || echo "FAIL (rc $rc)")
  [ $rc -eq 0 ] || status=1
  echo "| $name | $verdict | ${dt} s | $log |" >>"$summary"
  echo "$name: $verdict in ${dt} s"
  tail -n 3 "$report/$log"
}

{
  echo "# fastgnn GPU check"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: ${FASTGNN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- python: $(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)')"
  echo "- nvcc: $(nvcc --version | tail -1)"
  echo "- TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST MAX_JOBS=$MAX_JOBS"
  echo
  echo "| step | result | time | log |"
  echo "|---|---|---|---|"
} >"$summary"

step build build.log python3 -m pip install --no-build-isolation --no-deps -v -e .
step info info.txt python3 -m fastgnn info
# A compiler that links libstdc++ statically makes every C++ error a crash: stop early then.
step "C++ runtime shared with torch" cxx_runtime.txt python3 -c \
  "from fastgnn import _native; assert not _native.private_cxx_runtime, 'rebuild: see README'"
if [ $status -ne 0 ]; then echo "overall: FAIL (stopped after the build checks)" >>"$summary"; cat "$summary"; exit 1; fi
workers() {  # workers N: pytest's option for N xdist workers, when xdist is installed
  python3 -c "import xdist" 2>/dev/null && echo "-n $1"
}
suite_and_bench=$([ $part = all ] || [ $part = tests ] && echo yes)
if [ "$suite_and_bench" ]; then
  step "tests (all, GPU included)" tests.log python3 -m pytest -q -rfEs -p no:cacheprovider \
    $(workers 12) --junitxml="$report/tests.xml" tests
fi
num_tools=$(wc -w <<<"$tools")
tool_workers=$(( 8 / (num_tools > 0 ? num_tools : 1) ))  # 8 sanitized workers in all
for tool in $tools; do  # at once when both, sharing the cores
  step "$tool (gpu and sanitize tests)" $tool.log compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 -m pytest -q -p no:cacheprovider $(workers $tool_workers) \
    -m "gpu and sanitize" tests &
done
wait
grep -q "| FAIL" "$summary" && status=1
if [ "$suite_and_bench" ]; then
  step "benchmark smoke" bench.log python3 scripts/bench.py --device cuda --quick --out "$report/bench"
fi
echo >>"$summary"
echo "overall: $([ $status -eq 0 ] && echo pass || echo FAIL)" >>"$summary"
cat "$summary"
exit $status
