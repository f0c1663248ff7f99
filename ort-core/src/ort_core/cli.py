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


def _parse_providers(text: str | None) -> list[str] | None:
    return [p for p in text.split(",") if p] if text else None


def _session(args: argparse.Namespace) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if args.strict:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if args.opt_level is not None:
        options.graph_optimization_level = ort.GraphOptimizationLevel(args.opt_level)
    return ort.InferenceSession(args.model, options, providers=_parse_providers(args.providers))


def _inputs(sess: ort.InferenceSession, given: Sequence[str], batch: int) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"--input takes NAME=FILE.npy, got {item!r}")
        feeds[name] = np.load(path)
    rng = np.random.default_rng(0)
    for arg in sess.get_inputs():
        if arg.name in feeds:
            continue
        if arg.shape is None:
            raise SystemExit(f"input {arg.name!r} has no known shape: give it with --input {arg.name}=FILE.npy")
        shape = [d if isinstance(d, int) else batch for d in arg.shape]
        dtype = dtype_of_type_string(arg.type)
        if dtype is None:
            raise SystemExit(f"input {arg.name!r} is {arg.type}: give it with --input {arg.name}=FILE.npy")
        if np.issubdtype(dtype, np.integer):
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[arg.name] = rng.random(shape) > 0.5
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    sess = _session(args)
    created = time.perf_counter() - start
    feeds = _inputs(sess, args.input or [], args.batch)
    times = []
    outputs = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        outputs = sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    for meta, out in zip(sess.get_outputs(), outputs):
        shape = list(getattr(out, "shape", []))
        print(f"output {meta.name}: shape {shape} {getattr(out, 'dtype', type(out).__name__)}")
    print(f"session created in {created * 1e3:.1f} ms; run median {np.median(times) * 1e3:.3f} ms over {len(times)}")
    counts = sess.get_placement().counts()
    total = sum(counts.values())
    print("placement: " + ", ".join(f"{p} {n}/{total}" for p, n in counts.items()))
    return 0


def _placement(args: argparse.Namespace) -> int:
    sess = _session(args)
    placement = sess.get_placement()
    if args.json:
        print(json.dumps(placement.to_dict(), indent=2))
    else:
        print(placement)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ort-core", description="ort-core: ONNX runtime with plugin execution providers")
    parser.add_argument("--version", action="version", version=f"ort-core {ort.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("providers", help="installed providers, whether they can run here, their devices")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_providers)

    for name, func, text in (("run", _run, "run a model on random or given inputs"),
                             ("placement", _placement, "show which provider runs each node")):
        p = sub.add_parser(name, help=text)
        p.add_argument("model")
        p.add_argument("--providers", help="comma-separated, in priority order (default: CPU)")
        p.add_argument("--strict", action="store_true", help="fail instead of falling back to the CPU provider")
        p.add_argument("--opt-level", type=int, choices=[0, 1, 2, 99])
        p.set_defaults(func=func)
        if name == "run":
            p.add_argument("--input", action="append", metavar="NAME=FILE.npy")
            p.add_argument("--batch", type=int, default=1, help="value for symbolic dimensions")
            p.add_argument("--repeat", type=int, default=10)
        else:
            p.add_argument("--json", action="store_true")

    p = sub.add_parser("new-provider", help="create a provider package that passes the conformance kit")
    p.add_argument("name", help="provider name: Foo or FooExecutionProvider")
    p.add_argument("--dir", default=".", help="folder to create the package in (default: here)")
    p.add_argument("--package", help="distribution name (default: ort-ep-<name>)")
    p.add_argument("--vendor", help="vendor shown in the ProviderSpec")
    p.set_defaults(func=_new_provider)
    _add_coreml_build(sub)
    return parser


def _new_provider(args: argparse.Namespace) -> int:
    from .testing.template import generate

    try:
        root = generate(args.name, args.dir, package=args.package, vendor=args.vendor)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"created {root}: pip install -e '{root}[test]' && pytest {root}")
    return 0


def _add_coreml_build(sub: argparse._SubParsersAction) -> None:
    """``ort-core coreml-build``: the Core ML provider's cross-build, when ort-ep-coreml is installed."""
    try:
        from ort_ep_coreml.build import add_arguments, run
    except ImportError:
        return
    p = sub.add_parser("coreml-build", help="build and save a model's Core ML packages (on any OS)")
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ort.OrtError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
