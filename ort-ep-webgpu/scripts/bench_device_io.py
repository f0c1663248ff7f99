"""Time per run on WebGPU: inputs and outputs in host memory against device-resident I/O
(inputs bound as OrtValues in GPU buffers, outputs left there), same session, same process.

    python scripts/bench_device_io.py [--runs 50] [--blocks 5]

The device loop makes no host copy per run, so its runs end without waiting for the GPU: each
block of ``--runs`` runs ends with one download of the last output, and the block's time
(that wait included) is divided by the runs. Host runs download their output every run.
Blocks of the two modes alternate; medians of the blocks are printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ort_core as ort
from ort_core.testing import models

PROVIDERS = ["WebGpuExecutionProvider", "CPUExecutionProvider"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    cases = {
        "mlp 256-512x3 batch 64": (models.mlp(), 64),
        "cnn 32x32 batch 8": (models.cnn(image=32, width=8, blocks=2), 8),
    }
    for label, (model, batch) in cases.items():
        session = ort.InferenceSession(model, providers=PROVIDERS)
        feeds = models.random_inputs(model, batch=batch)
        (name,) = feeds
        output = session.get_outputs()[0].name
        binding = session.io_binding()
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(feeds[name], "webgpu", 0))
        binding.bind_output(output, "webgpu", 0)
        for _ in range(3):  # warm-up both paths
            session.run(None, feeds)
            session.run_with_iobinding(binding)
        np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], session.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
        host, device = [], []
        for _ in range(args.blocks):
            t = time.perf_counter()
            for _ in range(args.runs):
                session.run(None, feeds)
            host.append((time.perf_counter() - t) / args.runs)
            t = time.perf_counter()
            for _ in range(args.runs):
                session.run_with_iobinding(binding)
            binding.copy_outputs_to_cpu()
            device.append((time.perf_counter() - t) / args.runs)
            assert binding.copies() == []
        h, d = statistics.median(host) * 1000, statistics.median(device) * 1000
        print(f"{label}: host I/O {h:.3f} ms/run, device-resident {d:.3f} ms/run ({h / d:.2f}x); "
              f"{args.blocks} blocks of {args.runs}; device loop host copies per run: 0")


if __name__ == "__main__":
    main()
