#!/usr/bin/env bash
# The one prepared GPU check of hetflow's CUDA/ROCm executor.
#
# Run from the repository root on a machine with a GPU:
#     bash bench/gpu_check.sh            # figures go to bench/gpu/ (or $OUT/ when set)
# It (1) makes hetflow and cupy importable, (2) records the device,
# (3) runs the executor conformance suite, the GPU/CPU parity suite and the
# dtype tests with the GPU present, (4) runs the bridge benchmark (CPU and
# GPU rows) into results_gpu.json, (5) runs the two-GPU split executor's
# conformance tests (tests/test_split_cuda.py) and the split matmul bench
# into results_gpu_split.json, both skipped with the reason where fewer
# than two GPUs are present, and (6) writes summary.txt. Every step runs
# even when an earlier one fails; the exit status is the first failure.
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

# one executor over two GPUs (issue 34): its pure parts run everywhere, its GPU tests need two
gpus=$(python -c "from hetflow.executors import probe; from hetflow.executors.base import Vendor as V; \
o = next((probe(v) for v in (V.cuda, V.rocm) if probe(v).available), None); print(len(o.devices) if o else 0)" 2>/dev/null || echo 0)
if [ "${gpus:-0}" -lt 2 ]; then
    echo "== split-cuda: skipped, two GPUs needed; this machine has ${gpus:-0}" | tee -a "$DEST/summary.txt"
fi
step split-cuda python -m pytest -q -rs -p no:cacheprovider tests/test_split_cuda.py --junitxml="$DEST/split_cuda.xml"
step bench-split python bench/run.py split -o "$DEST/results_gpu_split.json"
cat "$DEST/bench-split.log" >>"$DEST/summary.txt"
exit $status
