"""MAX_PERFORMANCE on real models: which placement the measured policy keeps, and the times it
measured, then a second session that reads the choice from the cache file.

    python scripts/bench_max_performance.py [ocr-det silero-vad] [--budget-ms 120000]

Sample inputs go in through ``ort_core.max_performance.inputs_file`` (silero-vad's sample
rate steers its If nodes, so generated inputs would not do).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ort_core as ort
from ort_core import policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_models import fetch  # noqa: E402

SAMPLES = {
    "ocr-det": lambda rng: {"x": rng.random((1, 3, 320, 320), dtype=np.float32)},
    "silero-vad": lambda rng: {"input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
                               "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=list(SAMPLES))
    parser.add_argument("--budget-ms", default="120000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = fetch(name)
            inputs = Path(tmp) / f"{name}.npz"
            np.savez(inputs, **SAMPLES[name](np.random.default_rng(0)))
            so = ort.SessionOptions()
            so.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.MAX_PERFORMANCE)
            so.add_session_config_entry(policy.BUDGET_MS, args.budget_ms)
            so.add_session_config_entry(policy.INPUTS_FILE, str(inputs))
            so.add_session_config_entry(policy.CACHE_FILE, str(Path(tmp) / "choices.json"))
            start = time.perf_counter()
            sess = ort.InferenceSession(str(path), so)
            first = time.perf_counter() - start
            print(f"== {name}: session with MAX_PERFORMANCE in {first:.1f} s")
            print(sess.get_placement().selection.describe())
            policy.clear_cache()  # the second session reads the file
            start = time.perf_counter()
            again = ort.InferenceSession(str(path), so)
            print(f"   second session (choice from the cache file): {time.perf_counter() - start:.1f} s, "
                  f"providers {again.get_providers()}, cached={again.get_placement().selection.cached}")


if __name__ == "__main__":
    main()
