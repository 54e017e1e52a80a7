#!/usr/bin/env bash
# The GPU workflow in one command: build the CUDA extension for the local GPU, run the test
# suite (GPU tests included), run compute-sanitizer memcheck (and racecheck) on the small GPU
# tests, run the benchmark smoke, and write a report to REPORT_DIR.
#
#   scripts/gpu_check.sh REPORT_DIR
#
# Honours TORCH_CUDA_ARCH_LIST (default: the local GPU's) and MAX_JOBS (default: all cores).
set -uo pipefail
report=${1:?usage: scripts/gpu_check.sh REPORT_DIR}
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
# The suite's three processes and the two sanitizers run at once and share the cores:
# all-core OpenMP pools in each would oversubscribe them.
share=$(( $(nproc) / 5 > 0 ? $(nproc) / 5 : 1 ))
run_tests() {  # the suite in three pytest processes sharing the GPU, files dealt by size
  local files=($(ls -S tests/test_*.py)) rc=0 pids=() group i
  for group in 0 1 2; do
    local part=()
    for i in "${!files[@]}"; do [ $((i % 3)) -eq $group ] && part+=("${files[$i]}"); done
    OMP_NUM_THREADS=$share python3 -m pytest -q -rs -p no:cacheprovider --junitxml="$report/tests-$group.xml" \
      "${part[@]}" >"$report/tests-$group.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  cat "$report"/tests-[012].log && rm -f "$report"/tests-[012].log
  return $rc
}

# The suite and both sanitizers at once: serially they take longer than a 10-minute slot.
step "tests (all, GPU included)" tests.log run_tests &
step "memcheck (gpu and sanitize tests)" memcheck.log env OMP_NUM_THREADS=$share compute-sanitizer --tool memcheck \
  --error-exitcode 1 python3 -m pytest -q -x -p no:cacheprovider -m "gpu and sanitize" tests &
step "racecheck (gpu and sanitize tests)" racecheck.log env OMP_NUM_THREADS=$share compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 -m pytest -q -x -p no:cacheprovider -m "gpu and sanitize" tests &
wait
grep -q "| FAIL" "$summary" && status=1
if [ -f scripts/bench.py ]; then
  step "benchmark smoke" bench.log python3 scripts/bench.py --device cuda --quick --out "$report/bench"
fi
echo >>"$summary"
echo "overall: $([ $status -eq 0 ] && echo pass || echo FAIL)" >>"$summary"
cat "$summary"
exit $status
