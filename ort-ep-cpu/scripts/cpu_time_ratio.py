"""onnxruntime vs ort-core's CPU provider on one benchmark model, one intra-op thread each,
timed by the calling thread's CPU time.

On a shared machine wall-clock medians move with whatever else holds the cores (and 2-thread
OpenBLAS waits for its second thread); the calling thread's CPU time does not, as long as both
engines compute on that thread (``intra_op_num_threads=1``: onnxruntime then runs on the caller,
and the BLAS pools have one thread). Blocks of 5 runs alternate between the engines after one
untimed run each; outputs are checked against onnxruntime's first (rtol 1e-3, atol 1e-4).

    python ort-ep-cpu/scripts/cpu_time_ratio.py ocr-rec --seconds 15
    python ort-ep-cpu/scripts/cpu_time_ratio.py cnn --batch 8

Which ort-core code runs is whatever ``import ort_core`` finds: put another checkout's
``ort-core/src`` and ``ort-ep-cpu/src`` first on ``PYTHONPATH`` to time it (a before/after A/B).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    import bench  # bench/bench.py: the models, their inputs and the engines

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=bench.GENERATED + bench.REAL)
    parser.add_argument("--batch", type=int, default=1, help="batch of the generated models")
    parser.add_argument("--seconds", type=float, default=15.0, help="time budget of the timed runs")
    args = parser.parse_args()
    data, feeds = bench.load_case(args.model, args.batch)
    engines = {"onnxruntime": bench.make_engine("ort", data, 1)[0],
               "ort-core": bench.make_engine("core:CPUExecutionProvider", data, 1)[0]}
    want = engines["onnxruntime"](feeds)
    got = engines["ort-core"](feeds)
    for g, w in zip(got, want):
        if not np.allclose(g, w, rtol=bench.RTOL, atol=bench.ATOL):
            print(json.dumps({"model": args.model, "error": "outputs differ from onnxruntime's"}))
            return 1
    times: dict[str, list[float]] = {k: [] for k in engines}
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for name, run in engines.items():
            run(feeds)
            for _ in range(5):
                start = time.thread_time()
                run(feeds)
                times[name].append(time.thread_time() - start)
    ort_ms = statistics.median(times["onnxruntime"]) * 1e3
    core_ms = statistics.median(times["ort-core"]) * 1e3
    print(json.dumps({"model": args.model, "batch": args.batch, "onnxruntime_ms": round(ort_ms, 3),
                      "ort_core_ms": round(core_ms, 3), "ratio": round(core_ms / ort_ms, 2),
                      "runs_each": len(times["ort-core"]), "load_average": round(os.getloadavg()[0], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
