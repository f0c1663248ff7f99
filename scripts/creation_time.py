"""Session creation time, ort-core against onnxruntime, taking turns in one process.

    python scripts/creation_time.py mlp,cnn,transformer,ocr-det,ocr-rec,silero-vad [--reps 7]
        [--provider CPUExecutionProvider] [--first]

Warm (default): one creation of each engine first (imports, plugin loading, caches), then
``--reps`` creations of each in turn; medians and their ratio. ``--first``: only the first
creation in this process, after importing both engines (plugin loading, lazy imports and
first-use costs included): run it in fresh processes to compare. Timing only; parity is
bench/bench.py's job. Machines are noisy: compare ratios, note ``uptime``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnxruntime  # noqa: E402

import ort_core  # noqa: E402
from ort_core.testing import models  # noqa: E402

GENERATED = ("mlp", "cnn", "transformer")


def model_bytes(name: str) -> bytes:
    if name in GENERATED:
        return models.MODELS[name]().SerializeToString()
    from real_models import REAL_MODELS, fetch

    if name not in REAL_MODELS:
        raise SystemExit(f"unknown model {name!r}; valid: {', '.join(GENERATED + tuple(REAL_MODELS))}")
    return fetch(name).read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--provider", default="CPUExecutionProvider")
    parser.add_argument("--first", action="store_true", help="only the first creation of each engine")
    args = parser.parse_args()
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1

    def ours(data: bytes) -> float:
        gc.collect()
        start = time.perf_counter()
        ort_core.InferenceSession(data, providers=[args.provider])
        return (time.perf_counter() - start) * 1e3

    def theirs(data: bytes) -> float:
        gc.collect()
        start = time.perf_counter()
        onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return (time.perf_counter() - start) * 1e3

    for name in args.models.split(","):
        data = model_bytes(name)
        if args.first:
            a, b = ours(data), theirs(data)
            print(f"{name:<12} first creation: ort-core {a:8.1f} ms  onnxruntime {b:7.1f} ms  ratio {a / b:6.2f}")
            continue
        ours(data), theirs(data)
        a_times, b_times = [], []
        for _ in range(args.reps):
            a_times.append(ours(data))
            b_times.append(theirs(data))
        a, b = statistics.median(a_times), statistics.median(b_times)
        print(f"{name:<12} median of {args.reps}: ort-core {a:8.1f} ms  onnxruntime {b:7.1f} ms  ratio {a / b:6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
