"""The ``ort-core`` command: what is installed, run a model, show its placement."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np

import ort_core as ort
from ort_core.graph.view import dtype_of_type_string


def _providers(args: argparse.Namespace) -> int:
    reg = ort.registry()
    rows = []
    for name, provider in reg.providers().items():
        devices = reg.devices(name)
        spec = provider.spec
        rows.append({
            "name": name,
            "version": spec.version,
            "vendor": spec.vendor,
            "kind": spec.kind,
            "package": provider.package or "(in-process)",
            "usable": bool(devices.devices),
            "devices": [
                {"type": d.device_type, "name": d.name, "id": d.device_id, "memory": d.memory,
                 "hardware": d.hardware, "metadata": dict(d.metadata)}
                for d in devices.devices
            ],
            "reason": devices.unavailable_reason,
            "options": [o.name for o in spec.options],
        })
    failures = [f.__dict__ for f in reg.failures]
    if args.json:
        print(json.dumps({"providers": rows, "failures": failures}, indent=2))
        return 0
    if not rows:
        print("no execution provider is installed: pip install ort-ep-cpu")
    for r in rows:
        state = "usable" if r["usable"] else f"NOT usable: {r['reason']}"
        print(f"{r['name']} {r['version']} ({r['package']}, {r['kind']}) - {state}")
        for d in r["devices"]:
            kind = "hardware" if d["hardware"] else "software"
            print(f"    device {d['id']}: {d['type']} {d['name']} [memory {d['memory']}, {kind}]")
            if d["metadata"]:
                print(f"        metadata: {', '.join(f'{k}={v}' for k, v in d['metadata'].items())}")
        if r["options"]:
            print(f"    options: {', '.join(r['options'])}")
    for f in failures:
        print(f"plugin {f['plugin']} ({f['package'] or 'in-process'}) failed to load: {f['error']}")
    return 0


class UsageError(Exception):
    """A mistake in the command line: printed as one line, exit status 2."""


def _parse_providers(text: str | None) -> list[str] | None:
    return [p for p in text.split(",") if p] if text else None


def _session(args: argparse.Namespace) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if args.strict:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if args.opt_level is not None:
        options.graph_optimization_level = ort.GraphOptimizationLevel(args.opt_level)
    return ort.InferenceSession(args.model, options, providers=_parse_providers(args.providers))


def _dims(given: Sequence[str]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise UsageError(f"--dim takes NAME=INTEGER, got {item!r}")
        dims[name.strip()] = int(value)
    return dims


def _load_arrays(path: str) -> dict[str, np.ndarray] | np.ndarray:
    """An .npy file's array, or an .npz file's arrays by name; one-line errors naming the path."""
    import os

    if os.path.isdir(path):
        raise UsageError(f"{path!r} is a directory, not a .npy/.npz file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"input file {path!r} not found") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"input file {path!r} is not a .npy/.npz file numpy can read: {e}") from None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            return {k: loaded[k] for k in loaded.files}
    return loaded


def _inputs(sess: ort.InferenceSession, given: Sequence[str], batch: int, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """Feeds from --input NAME=FILE.npy / --input FILE.npz, the rest generated: dimension 0, when
    symbolic, is the batch (--batch); every other symbolic dimension needs --dim NAME=VALUE."""
    names = [a.name for a in sess.get_inputs()]
    feeds: dict[str, np.ndarray] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep:
            arrays = _load_arrays(item)
            if not isinstance(arrays, dict):
                raise UsageError(f"--input {item!r}: a .npy file needs a name, --input NAME={item}")
            feeds.update(arrays)
            continue
        array = _load_arrays(path)
        if isinstance(array, dict):
            raise UsageError(f"--input {item!r}: {path!r} is an .npz file; give it without a name")
        feeds[name] = array
    unknown = [n for n in feeds if n not in names]
    if unknown:
        raise UsageError(f"--input names {unknown}, which the model does not have; its inputs are {names}")
    rng = np.random.default_rng(0)
    for arg in sess.get_inputs():
        if arg.name in feeds:
            continue
        if arg.shape is None:
            raise UsageError(f"input {arg.name!r} has no known shape: give it with --input {arg.name}=FILE.npy")
        shape = []
        for axis, d in enumerate(arg.shape):
            if isinstance(d, int):
                shape.append(d)
            elif isinstance(d, str) and d in dims:
                shape.append(dims[d])
            elif axis == 0:
                shape.append(batch)
            else:
                label = f"dimension {d!r}" if d else "an unnamed dimension"
                raise UsageError(f"input {arg.name!r} {arg.shape}: {label} at axis {axis} has no value; give it with "
                                 f"--dim {d or 'NAME'}=VALUE" + ("" if d else f" or --input {arg.name}=FILE.npy"))
        dtype = dtype_of_type_string(arg.type)
        if dtype is None:
            raise UsageError(f"input {arg.name!r} is {arg.type}: give it with --input {arg.name}=FILE.npy")
        if np.issubdtype(dtype, np.integer):
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[arg.name] = rng.random(shape) > 0.5
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _summary(name: str, value: object) -> str:
    if not isinstance(value, np.ndarray):
        return f"output {name}: {type(value).__name__}"
    text = f"output {name}: shape {list(value.shape)} {value.dtype}"
    if value.size and value.dtype.kind in "biuf":
        data = value.astype(np.float64)
        first = ", ".join(f"{v:.6g}" for v in data.reshape(-1)[:5])
        text += (f" min {data.min():.6g} max {data.max():.6g} mean {data.mean():.6g}"
                 f" first [{first}{', ...' if value.size > 5 else ''}]")
    elif value.size:
        text += f" first {value.reshape(-1)[:5].tolist()}"
    return text


def _run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    sess = _session(args)
    created = time.perf_counter() - start
    feeds = _inputs(sess, args.input or [], args.batch, _dims(args.dim or []))
    times = []
    outputs = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        outputs = sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    names = [meta.name for meta in sess.get_outputs()]
    for name, out in zip(names, outputs):
        print(_summary(name, out))
    if args.save:
        np.savez(args.save, **{n: o for n, o in zip(names, outputs) if isinstance(o, np.ndarray)})
        print(f"outputs saved to {args.save}")
    print(f"session created in {created * 1e3:.1f} ms; run median {np.median(times) * 1e3:.3f} ms over {len(times)}")
    counts = sess.get_placement().counts()
    total = sum(counts.values())
    print("placement: " + ", ".join(f"{p} {n}/{total}" for p, n in counts.items()))
    return 0


def _placement(args: argparse.Namespace) -> int:
    sess = _session(args)
    placement = sess.get_placement()
    if args.html:
        from .placement_view import placement_html

        with open(args.html, "w", encoding="utf-8") as f:
            f.write(placement_html(sess, title=f"placement of {args.model}"))
        print(f"{placement.summary()}\nwritten to {args.html}")
    elif args.json:
        print(json.dumps(placement.to_dict(), indent=2))
    else:
        print(placement)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .progress import progress

    sess = _session(args)
    feeds = _inputs(sess, args.input or [], args.batch, _dims(args.dim or []))
    engines: list[tuple[str, object]] = [(f"ort-core [{','.join(sess.get_providers())}]", sess)]
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    if onnxruntime is not None and not args.no_onnxruntime:
        reference = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
        engines.append((f"onnxruntime {onnxruntime.__version__} [CPUExecutionProvider]", reference))
    batch = next((len(v) for v in feeds.values() if getattr(v, "ndim", 0)), 1)
    for _, engine in engines:
        for _ in range(args.warmup):
            engine.run(None, feeds)
    times: dict[str, list[float]] = {label: [] for label, _ in engines}
    # engines alternated in blocks of 10 runs, so load on the machine falls on both alike
    blocks = max(1, args.runs // 10)
    for _ in progress(range(blocks), desc="bench", total=blocks):
        for label, engine in engines:
            for _ in range(min(10, args.runs)):
                start = time.perf_counter()
                engine.run(None, feeds)
                times[label].append(time.perf_counter() - start)
    print(f"{'engine':60s} {'p50 ms':>9s} {'p90 ms':>9s} {'p99 ms':>9s} {'mean ms':>9s} {'items/s':>10s}")
    for label, samples in times.items():
        ms = np.array(samples) * 1e3
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        print(f"{label:60s} {p50:9.3f} {p90:9.3f} {p99:9.3f} {ms.mean():9.3f} {batch * 1e3 / ms.mean():10.1f}")
    if len(times) == 2:
        (_, ours), (_, theirs) = times.items()
        print(f"ratio ort-core / onnxruntime (p50): {np.median(ours) / np.median(theirs):.2f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ort-core", description="ort-core: ONNX runtime with plugin execution providers")
    parser.add_argument("--version", action="version", version=f"ort-core {ort.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("providers", help="installed providers, whether they can run here, their devices")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_providers)

    for name, func, text in (("run", _run, "run a model on random or given inputs"),
                             ("placement", _placement, "show which provider runs each node"),
                             ("bench", _bench, "latency percentiles and throughput, beside onnxruntime")):
        p = sub.add_parser(name, help=text)
        p.add_argument("model")
        p.add_argument("--providers", help="comma-separated, in priority order (default: CPU)")
        p.add_argument("--strict", action="store_true", help="fail instead of falling back to the CPU provider")
        p.add_argument("--opt-level", type=int, choices=[0, 1, 2, 99])
        p.set_defaults(func=func)
        if name in ("run", "bench"):
            p.add_argument("--input", action="append", metavar="NAME=FILE.npy|FILE.npz",
                           help="an input from a .npy file, or every input named in an .npz file")
            p.add_argument("--batch", type=int, default=1, help="size of a symbolic first (batch) dimension")
            p.add_argument("--dim", action="append", metavar="NAME=VALUE", help="value of a symbolic dimension")
        if name == "run":
            p.add_argument("--repeat", type=int, default=10)
            p.add_argument("--save", metavar="OUT.npz", help="write the outputs to an .npz file")
        elif name == "bench":
            p.add_argument("--runs", type=int, default=100)
            p.add_argument("--warmup", type=int, default=5)
            p.add_argument("--no-onnxruntime", action="store_true", help="do not run onnxruntime beside")
        else:
            p.add_argument("--json", action="store_true")
            p.add_argument("--html", metavar="OUT.html", help="write a picture of the placement (needs Graphviz)")

    p = sub.add_parser("compare", help="one model on several provider lists against onnxruntime; names the first diverging node")
    p.add_argument("model")
    p.add_argument("--providers", required=True, help="runners, comma-separated; A+B for a list of several")
    p.add_argument("--level", default="ORT_ENABLE_ALL", help="GraphOptimizationLevel name (default ORT_ENABLE_ALL)")
    p.add_argument("--inputs", action="append", default=[], help="NAME=FILE.npy (others: seeded random)")
    p.set_defaults(func=_compare)

    p = sub.add_parser("new-provider", help="create a provider package that passes the conformance kit")
    p.add_argument("name", help="provider name: Foo or FooExecutionProvider")
    p.add_argument("--dir", default=".", help="folder to create the package in (default: here)")
    p.add_argument("--package", help="distribution name (default: ort-ep-<name>)")
    p.add_argument("--vendor", help="vendor shown in the ProviderSpec")
    p.set_defaults(func=_new_provider)
    return parser


def _compare(args: argparse.Namespace) -> int:
    from . import compare

    result = compare.compare(args.model, compare.parse_runners(args.providers), args.level,
                             compare.parse_inputs(args.inputs))
    print(result.report())
    return 0 if result.ok else 1


def _new_provider(args: argparse.Namespace) -> int:
    from .testing.template import generate

    try:
        root = generate(args.name, args.dir, package=args.package, vendor=args.vendor)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"created {root}: pip install -e '{root}[test]' && pytest {root}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ort.OrtError as exc:
        # the first line names the thing; the rest (e.g. every node no provider could run) follows
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
