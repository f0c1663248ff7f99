"""Latency of single ops and the generated models on ort-core's CUDA provider against torch on the
same GPU.

    python ort-ep-cuda/scripts/bench_torch.py [--runs 50]

Each case is timed twice: with host numpy in and out (``session.run``; torch copies its tensors to
and from the GPU), and on the device (IOBinding with OrtValues on "cuda"; torch tensors already on
the GPU), each ended by a device synchronisation. Prints one line per case and a last line
``BENCH ...`` with the geometric means of the ratios (ort-core / torch; lower is better). Without torch, or
without a GPU, it says so and exits 0 (the comparison is not possible there).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

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


def real_models(ort, runs: int) -> None:
    """The tests' real models (where scripts/real_models.py finds them) on CUDA with CPU fallback,
    host in/out, against onnxruntime's CPU provider on this machine's cores, for scale."""
    import onnxruntime

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    try:
        from test_real_models import PROVIDERS, real_case
    except Exception as exc:  # pytest missing, or the tests not beside this script
        print(f"real models skipped: {exc}")
        return
    print(f"{'real model':18} {'ort-core CUDA ms':>17} {'onnxruntime CPU ms':>19} {'ratio':>6}")
    for name in ("ocr-det", "ocr-rec", "ocr-cls", "silero-vad"):
        try:
            data, feeds = real_case(name)
        except BaseException as exc:  # pytest.skip: the model cannot be fetched here
            print(f"{name:18} skipped: {exc}")
            continue
        ours = ort.InferenceSession(data, providers=PROVIDERS)
        theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
        a = median_ms(lambda ours=ours, feeds=feeds: ours.run(None, feeds), runs)
        b = median_ms(lambda theirs=theirs, feeds=feeds: theirs.run(None, feeds), runs)
        print(f"{name:18} {a:17.3f} {b:19.3f} {a / b:6.2f}")


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

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    host_ratios, device_ratios = [], []
    print(f"{'case':18} {'host in/out: ort-core ms':>25} {'torch ms':>9} {'ratio':>6}   "
          f"{'on device: ort-core ms':>23} {'torch ms':>9} {'ratio':>6}")
    for name, (model, feeds, torch_fn) in cases(torch).items():
        session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"use_tf32": "0"})])
        ours = median_ms(lambda session=session, feeds=feeds: session.run(None, feeds), args.runs)
        # device-resident: inputs bound once as OrtValues on "cuda", outputs left there (IOBinding)
        binding = session.io_binding()
        for k, v in feeds.items():
            binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
        for out in session.get_outputs():
            binding.bind_output(out.name, "cuda", 0)

        def run_bound(binding=binding):
            binding.run()
            torch.cuda.synchronize()  # cudaDeviceSynchronize: every stream, the session's too

        ours_device = median_ms(run_bound, args.runs)
        if torch_fn is None:
            print(f"{name:18} {ours:25.3f} {'-':>9} {'-':>6}   {ours_device:23.3f} {'-':>9} {'-':>6}")
            continue

        def run_torch(feeds=feeds, torch_fn=torch_fn):
            tensors = [torch.from_numpy(v).cuda() for v in feeds.values()]
            return torch_fn(*tensors).cpu().numpy()

        on_device = [torch.from_numpy(v).cuda() for v in feeds.values()]

        def run_torch_device(on_device=on_device, torch_fn=torch_fn):
            torch_fn(*on_device)
            torch.cuda.synchronize()

        theirs, theirs_device = median_ms(run_torch, args.runs), median_ms(run_torch_device, args.runs)
        host_ratios.append(ours / theirs)
        device_ratios.append(ours_device / theirs_device)
        print(f"{name:18} {ours:25.3f} {theirs:9.3f} {ours / theirs:6.2f}   "
              f"{ours_device:23.3f} {theirs_device:9.3f} {ours_device / theirs_device:6.2f}")

    def geomean(values):
        return math.exp(sum(math.log(r) for r in values) / len(values))

    real_models(ort, args.runs)
    print(f"BENCH ort-core CUDA / torch geometric mean {geomean(host_ratios):.2f} host in/out, "
          f"{geomean(device_ratios):.2f} on the device, over {len(host_ratios)} ops (median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
