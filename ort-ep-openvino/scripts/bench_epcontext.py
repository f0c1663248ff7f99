"""Session creation: cold (OpenVINO compiles each group) against a reload of the EPContext
model the cold session wrote (OpenVINO imports the exported compiled models), same process.

    python scripts/bench_epcontext.py [ocr-det silero-vad ...] [--repeat 3]

Each repeat makes a cold session with ``ep.context_enable=1`` into a fresh folder, then loads
the context model; both sessions' outputs are compared (max abs difference <= 1e-4 x max |output|)
and the medians printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ort_core as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from real_models import fetch  # noqa: E402

OV, CPU = "OpenVINOExecutionProvider", "CPUExecutionProvider"


def feeds_for(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "silero-vad":  # one 32 ms chunk at 16 kHz
        return {"input": rng.standard_normal((1, 512)).astype(np.float32) * 0.1,
                "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    if name == "ocr-det":
        return {"x": rng.random((1, 3, 320, 320), dtype=np.float32)}
    if name == "ocr-rec":
        return {"x": rng.random((1, 3, 48, 320), dtype=np.float32)}
    if name == "ocr-cls":
        return {"x": rng.random((1, 3, 48, 192), dtype=np.float32)}
    raise SystemExit(f"no inputs known for {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=["ocr-det", "silero-vad"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name in args.models:
        source = fetch(name)
        cold_s, warm_s, groups = [], [], 0
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                ctx = Path(tmp) / f"{source.stem}_ctx.onnx"
                so = ort.SessionOptions()
                so.add_session_config_entry("ep.context_enable", "1")
                so.add_session_config_entry("ep.context_file_path", str(ctx))
                start = time.perf_counter()
                cold = ort.InferenceSession(str(source), so, providers=[OV, CPU])
                cold_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                warm = ort.InferenceSession(str(ctx), providers=[OV, CPU])
                warm_s.append(time.perf_counter() - start)
                groups = sum(1 for p in warm.get_placement().nodes if p.op_type == "EPContext")
                feeds = feeds_for(name)
                for a, b in zip(cold.run(None, feeds), warm.run(None, feeds)):
                    # the cold session may run a per-shape static model, the reload the exported
                    # dynamic one: equal within float32 rounding, not bit for bit
                    err = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                    assert err <= 1e-4 * max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-30), (name, err)
        c, w = statistics.median(cold_s), statistics.median(warm_s)
        print(f"{name}: cold {c * 1000:.0f} ms, reload {w * 1000:.0f} ms ({c / w:.1f}x), "
              f"{groups} EPContext node(s); outputs agree; runs {args.repeat}")


if __name__ == "__main__":
    main()
