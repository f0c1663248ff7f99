"""Latency of ort-core with the OpenVINO provider against onnxruntime's CPU provider.

A measurement script, not a test. For each model: both sessions are created with the same
thread count, outputs are checked against onnxruntime (max |a - e| <= 1e-4 x max |e|) before
any time is reported, then the engines take turns so machine noise hits both alike, and the
median latencies and their ratio are printed. The whole model compiled by OpenVINO directly,
with the config the provider compiles with (``openvino_direct_ms``), takes the same turns: the
ratio of the provider to it is what ort-core adds, and the ratio of it to onnxruntime is what
OpenVINO itself gives on this machine. Also measures how much a compiled-model cache
(``cache_dir``) shortens session creation.

Turns (``--schedule``): ``blocks`` (default) gives each engine a block of runs at a time, after a
0.2 s pause and ``--block-warmup`` untimed runs; ``runs`` alternates single runs (A, B, A, B).
Why blocks: onnxruntime's intra-op threads keep spinning after a run returns (its default
``session.intra_op.allow_spinning``), and on a 2-core machine they hold a core for the next few
milliseconds, so an OpenVINO run right after an onnxruntime run gets one core instead of two
(the small CNN: 5.4 ms instead of 2.8 ms for about six runs). Single-run alternation measures
that interference, not either engine; in a block both engines run as they would alone.

    python ort-ep-openvino/scripts/bench_openvino.py --threads 2 --batch 8 --runs 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "ort-ep-openvino" / "tests"))

OV = "OpenVINOExecutionProvider"


def load(name: str, batch: int, size: int) -> tuple[bytes, dict[str, np.ndarray]]:
    from ort_core.testing import models

    if name == "cnn":
        proto = models.cnn()
        return proto.SerializeToString(), models.random_inputs(proto, batch=batch)
    from real_models import fetch

    # the text-like image the parity tests use
    return fetch(name).read_bytes(), {"x": models.text_image(batch, size, size)}


def engines(data: bytes, threads: int, options: dict):
    import onnxruntime

    import ort_core

    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    ref = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    cso = ort_core.SessionOptions()
    cso.intra_op_num_threads = threads
    start = time.perf_counter()
    ours = ort_core.InferenceSession(data, cso, providers=[(OV, options), "CPUExecutionProvider"])
    created = time.perf_counter() - start
    counts = ours.get_placement().counts()
    return ref, ours, created, counts


def relative_error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """The largest max |a - e| / max |e| over the outputs."""
    return max(
        float(np.max(np.abs(a.astype(np.float64) - e)) / max(float(np.max(np.abs(e))), 1e-30))
        for a, e in zip(actual, expected)
    )


def openvino_direct(data: bytes, feeds: dict[str, np.ndarray], threads: int, options: dict):
    """``run()`` of the whole model compiled by OpenVINO itself, at the feeds' shapes, with the
    config the provider resolves from ``options`` (inputs set as shared tensors, outputs copied
    out, as the provider does)."""
    import openvino as ov

    import ort_core
    from ort_ep_openvino.options import OPTIONS, resolve

    settings = resolve(ort_core.session.validate_options(OV, OPTIONS, options), threads)
    core = ov.Core()
    model = core.read_model(data, b"")
    model.reshape({p: ov.PartialShape(list(feeds[p.get_any_name()].shape)) for p in model.inputs})
    request = core.compile_model(model, settings.device_type, settings.config).create_infer_request()
    names = [p.get_any_name() for p in model.inputs]

    def run() -> list[np.ndarray]:
        for k, name in enumerate(names):
            request.set_input_tensor(k, ov.Tensor(feeds[name], shared_memory=True))
        request.infer()
        return [request.get_output_tensor(k).data.copy() for k in range(len(model.outputs))]

    return run


def measure(name: str, batch: int, size: int, threads: int, runs: int, options: dict,
            schedule: str = "blocks", block_warmup: int = 8) -> dict:
    data, feeds = load(name, batch, size)
    ref, ours, created, counts = engines(data, threads, options)
    expected = ref.run(None, feeds)
    actual = ours.run(None, feeds)
    worst = relative_error(actual, expected)
    if worst > 1e-4:
        raise SystemExit(f"{name}: outputs differ from onnxruntime (relative {worst:.2e}); no timing reported")
    for _ in range(3):  # warm-up
        ref.run(None, feeds)
        ours.run(None, feeds)
    direct = openvino_direct(data, feeds, threads, options)
    direct_worst = relative_error(direct(), expected)
    engines_run = {"ref": lambda: ref.run(None, feeds), "ours": lambda: ours.run(None, feeds), "direct": direct}
    times: dict[str, list[float]] = {k: [] for k in engines_run}
    block_ratios: list[float] = []  # per round: our block's median over onnxruntime's
    if schedule == "runs":
        for _ in range(runs):
            for key, run in engines_run.items():
                start = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - start)
    else:
        timed_per_block = 10
        for _ in range(max(1, -(-runs // timed_per_block))):
            for key, run in engines_run.items():
                time.sleep(0.2)  # let the other engine's threads go idle
                for k in range(block_warmup + timed_per_block):
                    start = time.perf_counter()
                    run()
                    if k >= block_warmup:
                        times[key].append(time.perf_counter() - start)
            block_ratios.append(statistics.median(times["ours"][-timed_per_block:]) / statistics.median(times["ref"][-timed_per_block:]))
    t_ref, t_ours = times["ref"], times["ours"]
    m_direct = statistics.median(times["direct"])
    m_ref, m_ours = statistics.median(t_ref), statistics.median(t_ours)
    return {
        "model": name, "batch": batch, "options": options, "threads": threads, "runs": len(t_ours),
        "schedule": schedule,
        "placement": dict(counts), "max_relative_error": worst, "session_created_s": round(created, 3),
        "onnxruntime_ms": round(m_ref * 1e3, 2), "ort_core_openvino_ms": round(m_ours * 1e3, 2),
        "ratio": round(m_ours / m_ref, 3),
        "openvino_direct_ms": round(m_direct * 1e3, 2), "openvino_direct_ratio": round(m_direct / m_ref, 3),
        "provider_over_direct": round(m_ours / m_direct, 3), "openvino_direct_max_relative_error": direct_worst,
        # load that changes between rounds moves both engines of a round alike: the median of
        # the per-round ratios is steadier than the ratio of the overall medians
        "paired_ratio": round(statistics.median(block_ratios), 3) if block_ratios else None,
    }


def cache_effect(name: str, batch: int, size: int, threads: int) -> dict:
    """Session creation time without a cache, with an empty cache, and with a filled one."""
    import ort_core

    data, _ = load(name, batch, size)
    so = ort_core.SessionOptions()
    so.intra_op_num_threads = threads

    def create(options: dict) -> float:
        start = time.perf_counter()
        ort_core.InferenceSession(data, so, providers=[(OV, options), "CPUExecutionProvider"])
        return time.perf_counter() - start

    create({})  # load the plugin and warm the process first
    no_cache = statistics.median(create({}) for _ in range(3))
    with tempfile.TemporaryDirectory() as cache:
        first = create({"cache_dir": cache})
        again = statistics.median(create({"cache_dir": cache}) for _ in range(3))
    return {"model": name, "no_cache_s": round(no_cache, 3), "cache_empty_s": round(first, 3),
            "cache_filled_s": round(again, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="cnn,ocr-det")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=320, help="OCR image height and width")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--schedule", choices=("blocks", "runs"), default="blocks",
                        help="blocks of runs per engine (default) or single alternating runs; see above")
    parser.add_argument("--block-warmup", type=int, default=8, help="untimed runs opening each block")
    parser.add_argument("--static", action="store_true", help="also measure disable_dynamic_shapes=True")
    parser.add_argument("--options", default="{}",
                        help='provider options (JSON) for every measured session, e.g. \'{"load_config": {"CPU": {"TBB_PARTITIONER": "STATIC"}}}\'')
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    results = []
    base = json.loads(args.options)
    variants = [base] + ([{**base, "disable_dynamic_shapes": "True"}] if args.static else [])
    for name in args.models.split(","):
        for options in variants:
            r = measure(name, args.batch, args.size, args.threads, args.runs, options, args.schedule, args.block_warmup)
            results.append(r)
            print(f"{name} b{args.batch} {options or 'defaults'} [{args.schedule}]: onnxruntime {r['onnxruntime_ms']} ms, "
                  f"ort-core+OpenVINO {r['ort_core_openvino_ms']} ms, ratio {r['ratio']} "
                  + (f"(per-round {r['paired_ratio']}) " if r["paired_ratio"] is not None else "")
                  + f"(placement {r['placement']}, max rel err {r['max_relative_error']:.1e}); "
                  f"OpenVINO alone {r['openvino_direct_ms']} ms, ratio {r['openvino_direct_ratio']}, "
                  f"provider / alone {r['provider_over_direct']}", flush=True)
        c = cache_effect(name, args.batch, args.size, args.threads)
        results.append(c)
        print(f"{name} session creation: no cache {c['no_cache_s']} s, empty cache {c['cache_empty_s']} s, "
              f"filled cache {c['cache_filled_s']} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
