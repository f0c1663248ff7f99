"""Latency of single ops and the generated models on ort-core's CUDA provider against torch on the
same GPU (and onnxruntime's CPU provider for scale), host numpy in and out for all of them.

    python ort-ep-cuda/scripts/bench_torch.py [--runs 50]

Prints one line per case, ``case ort-core-cuda torch ratio``, and a last line ``BENCH ...`` with
the geometric mean of the ratios (ort-core / torch; lower is better). Without torch, or
without a GPU, it says so and exits 0 (the comparison is not possible there).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np
from onnx import TensorProto, helper


def _single(op: str, shapes: list[tuple[int, ...]], out: str = "y", **attrs):
    names = [f"x{k}" for k in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node(op, names, [out], **attrs)], op,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def cases(torch):
    """name -> (onnx model, numpy feeds, torch function of device tensors)."""
    f = torch.nn.functional
    rng = np.random.default_rng(0)

    def r(*s):
        return rng.standard_normal(s).astype(np.float32)

    w = r(64, 64, 3, 3)
    conv = _single("Conv", [(8, 64, 56, 56), w.shape], pads=[1, 1, 1, 1])
    from ort_core.testing import models

    out = {
        "matmul-1024": (_single("MatMul", [(1024, 1024), (1024, 1024)]), {"x0": r(1024, 1024), "x1": r(1024, 1024)},
                        lambda a, b: a @ b),
        "conv3x3-8x64x56": (conv, {"x0": r(8, 64, 56, 56), "x1": w}, lambda x, k: f.conv2d(x, k, padding=1)),
        "softmax-64x4096": (_single("Softmax", [(64, 4096)], axis=-1), {"x0": r(64, 4096)}, lambda x: torch.softmax(x, -1)),
        "relu-16M": (_single("Relu", [(4096, 4096)]), {"x0": r(4096, 4096)}, torch.relu),
    }
    mlp = models.mlp()
    out["mlp-b64"] = (mlp, models.random_inputs(mlp, batch=64), None)
    cnn = models.cnn()
    out["cnn-b8"] = (cnn, models.random_inputs(cnn, batch=8), None)
    return out


def median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("BENCH skipped: torch is not installed (pip install torch to compare on the same GPU)")
        return 0
    if not torch.cuda.is_available():
        print("BENCH skipped: torch sees no CUDA device")
        return 0
    import ort_core as ort

    ratios = []
    print(f"{'case':22} {'ort-core CUDA ms':>17} {'torch ms':>9} {'ratio':>6}")
    for name, (model, feeds, torch_fn) in cases(torch).items():
        session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"use_tf32": "0"})])
        ours = median_ms(lambda session=session, feeds=feeds: session.run(None, feeds), args.runs)
        if torch_fn is None:
            print(f"{name:22} {ours:17.3f} {'-':>9} {'-':>6}")
            continue
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

        def run_torch(feeds=feeds, torch_fn=torch_fn):
            tensors = [torch.from_numpy(v).cuda() for v in feeds.values()]
            return torch_fn(*tensors).cpu().numpy()

        theirs = median_ms(run_torch, args.runs)
        ratios.append(ours / theirs)
        print(f"{name:22} {ours:17.3f} {theirs:9.3f} {ours / theirs:6.2f}")
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"BENCH ort-core CUDA / torch geometric mean {mean:.2f} over {len(ratios)} ops (host in/out, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
