#!/usr/bin/env bash
# The GPU check of ort-ep-tensorrt, as one command, for an NVIDIA machine with TensorRT and no
# network.
#
#   On a machine with network (once), from the repository root:
#     ort-ep-tensorrt/scripts/device_check.sh --prepare [WHEELS_DIR]
#   downloads the wheels into WHEELS_DIR (default ./wheels). TensorRT itself (tensorrt-cu12 and
#   its libs) comes from NVIDIA's package index: download it there into the same folder, as
#   NVIDIA's TensorRT installation guide describes (pip download tensorrt-cu12 with NVIDIA's
#   index as an extra index).
#
#   On the NVIDIA machine, from the repository root:
#     ort-ep-tensorrt/scripts/device_check.sh [WHEELS_DIR]
#   installs ort-core, ort-ep-cpu, ort-ep-cuda[cudaNN] and ort-ep-tensorrt[test] from WHEELS_DIR
#   only into a fresh venv (with the system's site-packages, where a TensorRT may already be),
#   then, within 8 minutes in all: `ort-core providers` must list TensorRT as usable; the
#   package's tests run with nothing faked (tests/test_gpu.py builds real engines: models
#   against onnxruntime's CPU provider, engine cache, EPContext, fp16). It ends with one line:
#   DEVICE-CHECK PASS|FAIL ...
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUDGET=480
START=$SECONDS
left() { echo $((BUDGET - (SECONDS - START))); }

if [ "${1:-}" = "--prepare" ]; then
    WHEELS=${2:-$ROOT/wheels}
    mkdir -p "$WHEELS"
    python3 -m pip download -q -d "$WHEELS" pip hatchling ./ort-core ./ort-ep-cpu "./ort-ep-cuda[cuda12,cuda13]" \
        "./ort-ep-tensorrt[test,cu12]" || exit 1
    echo "prepared: wheels in $WHEELS; add TensorRT's own wheels (tensorrt-cu12, tensorrt-cu12-libs) from NVIDIA's index"
    exit 0
fi

WHEELS=${1:-$ROOT/wheels}
VENV=${VENV:-/tmp/ort-ep-tensorrt-device-check}
LOG=${LOG:-/tmp/ort-ep-tensorrt-device-check.log}
: > "$LOG"
fail() { echo "DEVICE-CHECK FAIL at $1 after $((SECONDS - START))s: $2 (log: $LOG)"; exit 1; }

GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
[ -n "$GPU" ] || fail "nvidia-smi" "no NVIDIA GPU or driver visible"
DRIVER_CUDA=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: \([0-9]*\)\..*/\1/p' | head -1)
CUDA_EXTRA=${CUDA_EXTRA:-$([ "${DRIVER_CUDA:-12}" -ge 13 ] && echo cuda13 || echo cuda12)}
echo "device check on: $GPU ($CUDA_EXTRA), wheels from $WHEELS" | tee -a "$LOG"

rm -rf "$VENV"
python3 -m venv --system-site-packages "$VENV" >>"$LOG" 2>&1 || fail install "python3 -m venv failed"
PY="$VENV/bin/python"
timeout "$(left)" "$PY" -m pip install -q --no-index --find-links "$WHEELS" hatchling >>"$LOG" 2>&1 \
    || fail install "pip install hatchling from $WHEELS failed"
timeout "$(left)" "$PY" -m pip install -q --no-index --no-build-isolation --find-links "$WHEELS" ./ort-core \
    ./ort-ep-cpu "./ort-ep-cuda[$CUDA_EXTRA]" "./ort-ep-tensorrt[test]" >>"$LOG" 2>&1 \
    || fail install "pip install from $WHEELS failed"
"$PY" -c "import tensorrt" >>"$LOG" 2>&1 || "$PY" -m pip install -q --no-index --find-links "$WHEELS" tensorrt-cu12 \
    >>"$LOG" 2>&1 || fail install "TensorRT is neither installed nor in $WHEELS"

PROVIDERS=$(timeout 120 "$PY" -m ort_core.cli providers 2>&1)
echo "$PROVIDERS" >>"$LOG"
echo "$PROVIDERS" | grep -q "^TensorrtExecutionProvider .* - usable" \
    || fail providers "$(echo "$PROVIDERS" | grep '^TensorrtExecutionProvider' | cut -c1-300)"

TESTS_BUDGET=$(( $(left) - 20 ))
[ "$TESTS_BUDGET" -gt 60 ] || fail tests "no time left for the tests"
timeout "$TESTS_BUDGET" "$PY" -m pytest ort-ep-tensorrt/tests -q -p no:cacheprovider -rs \
    >/tmp/ort-ep-tensorrt-device-tests.txt 2>&1
RC=$?
cat /tmp/ort-ep-tensorrt-device-tests.txt >>"$LOG"
TESTS=$(grep -E "(passed|failed|error)" /tmp/ort-ep-tensorrt-device-tests.txt | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
SKIPPED_GPU=$(grep -c "SKIPPED.*test_gpu" /tmp/ort-ep-tensorrt-device-tests.txt)
[ "$RC" -eq 0 ] && [ "$SKIPPED_GPU" -eq 0 ] || fail tests "${TESTS:-no result} (rc $RC, GPU tests skipped: $SKIPPED_GPU)"
echo "DEVICE-CHECK PASS on $GPU in $((SECONDS - START))s: $TESTS"
