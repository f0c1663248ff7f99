"""Soak: an hour (``--minutes``) of mixed runs on shared sessions from several threads, with
session create/destroy cycles and ever-new input shapes, RSS sampled; reports its growth.

    python reliability/soak.py --minutes 60 --providers CPUExecutionProvider --json soak.json

RSS is read from /proc/self/statm. Growth is measured from the end of the warm-up (the first
tenth of the run, when caches fill) to the end; ``--max-growth-mb`` makes it fail above that.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

import fuzz
import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--providers", default="CPUExecutionProvider")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--max-growth-mb", type=float, default=None)
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    import ort_core

    providers = [p for p in args.providers.split(",") if p] or None
    models = {name: (proto.SerializeToString(), feeds) for name, (proto, feeds) in fuzz.SEEDS.items()}
    shared = {name: ort_core.InferenceSession(data, providers=providers) for name, (data, _) in models.items()}
    end = time.monotonic() + args.minutes * 60
    counts = {"runs": 0, "sessions": 0, "named_errors": 0}
    errors: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        rng = random.Random(k)
        while time.monotonic() < end and not errors:
            name = rng.choice(sorted(models))
            data, feeds = models[name]
            try:
                if rng.random() < 0.02:  # a session made and dropped
                    ort_core.InferenceSession(data, providers=providers).run(None, feeds)
                    with lock:
                        counts["sessions"] += 1
                elif name == "shape_chain":  # ever-new shapes through one shared session
                    x = np.ones((rng.randint(1, 4000), 6), np.float32)
                    shared[name].run(None, {"x": x})
                else:
                    shared[name].run(None, feeds)
                with lock:
                    counts["runs"] += 1
            except ort_core.OrtError:
                with lock:
                    counts["named_errors"] += 1
            except Exception as exc:  # noqa: BLE001 - a soak reports what escapes
                errors.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(args.threads)]
    start = time.monotonic()
    samples = [(0.0, rss_mb())]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(min(args.sample_seconds, max(0.1, end - time.monotonic())))
        samples.append((round(time.monotonic() - start, 1), round(rss_mb(), 1)))
    warm = next((r for s, r in samples if s >= args.minutes * 6), samples[-1][1])
    summary = {
        "minutes": args.minutes, "providers": providers or "default", "threads": args.threads, **counts,
        "rss_start_mb": round(samples[0][1], 1), "rss_after_warmup_mb": warm, "rss_end_mb": samples[-1][1],
        "rss_max_mb": max(r for _, r in samples), "growth_after_warmup_mb": round(samples[-1][1] - warm, 1),
        "errors": errors[:5], "samples": samples,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "samples"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    failed = bool(errors) or (args.max_growth_mb is not None and summary["growth_after_warmup_mb"] > args.max_growth_mb)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
