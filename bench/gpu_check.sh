#!/usr/bin/env bash
# The one prepared GPU check of hetflow's CUDA/ROCm executor.
#
# Run from the repository root on a machine with a GPU:
#     bash bench/gpu_check.sh            # figures go to bench/gpu/ (or $OUT/ when set)
# It (1) makes hetflow and cupy importable, (2) records the device,
# (3) runs the executor conformance suite, the GPU/CPU parity suite and the
# dtype tests with the GPU present, (4) runs the bridge benchmark (CPU and
# GPU rows) into results_gpu.json, and (5) writes summary.txt. Every step
# runs even when an earlier one fails; the exit status is the first failure.
set -u
cd "$(dirname "$0")/.."
DEST="${OUT:-bench/gpu}"
mkdir -p "$DEST"
status=0
step() {  # step NAME COMMAND...: run, log to DEST/NAME.log, remember the first failure
    local name=$1; shift
    echo "== $name: $*" | tee -a "$DEST/summary.txt"
    "$@" >"$DEST/$name.log" 2>&1
    local rc=$?
    tail -n 3 "$DEST/$name.log" | sed 's/^/   /' | tee -a "$DEST/summary.txt"
    echo "   exit $rc" | tee -a "$DEST/summary.txt"
    [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
    return 0
}
: >"$DEST/summary.txt"
date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee -a "$DEST/summary.txt"

python -c "import hetflow.executors" 2>/dev/null \
    || step install-hetflow python -m pip install --no-deps --no-build-isolation -e .
python -c "import cupy" 2>/dev/null || step install-cupy python -m pip install cupy-cuda12x
step nvidia-smi nvidia-smi --query-gpu=name,pci.bus_id,memory.total,driver_version --format=csv
step inventory python -m hetflow.engine.cli executors --json
cp "$DEST/inventory.log" "$DEST/inventory.json" 2>/dev/null

step conformance python -m pytest -q -rs -p no:cacheprovider tests/test_executor_contract.py tests/test_cuda_parity.py \
    --junitxml="$DEST/conformance.xml"
step dtypes python -m pytest -q -rs -p no:cacheprovider tests/test_dtypes.py tests/test_ops_numerics.py
step bench python bench/run.py bridge -o "$DEST/results_gpu.json"
cat "$DEST/bench.log" >>"$DEST/summary.txt"
exit $status
