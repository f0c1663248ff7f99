"""The main job: a real OCR text-detection model through ort-core, with the placement shown.

The model is PaddleOCR's PP-OCRv4 detector as shipped inside the rapidocr-onnxruntime wheel.
Outputs are checked against onnxruntime (when installed) before anything is reported.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_models import fetch  # noqa: E402

import ort_core as ort  # noqa: E402
from ort_core.testing.models import text_image  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="ocr-det")
    parser.add_argument("--providers", default=",".join(ort.get_available_providers()))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--verbose", action="store_true", help="print the placement of every node")
    args = parser.parse_args()

    path = fetch(args.model)
    providers = [p for p in args.providers.split(",") if p]
    print(f"model: {path.name} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"available providers: {ort.get_available_providers()}")
    start = time.perf_counter()
    sess = ort.InferenceSession(str(path), providers=providers)
    created = time.perf_counter() - start
    feeds = {}
    for arg in sess.get_inputs():
        shape = [d if isinstance(d, int) else {0: args.batch}.get(i, 320) for i, d in enumerate(arg.shape)]
        # a page of text-like blocks: random noise would leave the detector's outputs near 0
        feeds[arg.name] = text_image(shape[0], shape[2], shape[3])
    outputs = sess.run(None, feeds)
    start = time.perf_counter()
    outputs = sess.run(None, feeds)
    elapsed = time.perf_counter() - start
    placement = sess.get_placement()
    print(placement if args.verbose else placement.summary())
    for meta, out in zip(sess.get_outputs(), outputs):
        print(f"output {meta.name}: shape {list(out.shape)} {out.dtype}")
    print(f"session created in {created * 1e3:.0f} ms; one run {elapsed * 1e3:.1f} ms")
    try:
        import onnxruntime
    except ImportError:
        print("onnxruntime not installed: parity not checked")
        return 0
    reference = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(outputs, reference))
    scale = max(float(np.max(np.abs(b))) for b in reference)
    print(f"max abs difference vs onnxruntime {onnxruntime.__version__}: {worst:.2e} "
          f"(outputs up to {scale:.3f}; tolerance 1e-4 relative to that)")
    return 0 if worst <= 1e-4 * max(scale, 1.0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
