"""Fingerprints of optimized graphs and placements over a corpus, to show a change keeps them.

    python scripts/graph_snapshot.py OUT.json [--sets node,simple,constnode,gen,real] [--levels 0,99]
    python scripts/graph_snapshot.py --compare BEFORE.json AFTER.json

For every model and level: a session on the CPU provider, then a hash of the optimized model
(deterministic serialisation, shapes and initializer order included) and of the placement
report, or the error. Run it on the code before a change (e.g. ``PYTHONPATH`` pointing at a copy
of the old sources) and after, then compare. Sets: ONNX backend suites (``node``, ``simple``,
``pytorch-converted``, ``pytorch-operator``), ``constnode`` (node cases with their inputs turned
into initializers and their outputs read through Identity, so that constant folding meets every
op), ``gen`` (the generated models), ``real`` (scripts/real_models.py). The whole corpus at two
levels is about 7800 sessions (a few minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

SETS = ("node", "simple", "pytorch-converted", "pytorch-operator", "constnode", "gen", "real")


def _fingerprint(sess) -> str:
    proto = ir.serde.serialize_model(sess._model)
    model = hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()[:16]
    placement = json.dumps(sess.get_placement().to_dict(), sort_keys=True, default=str)
    return f"{model}:{hashlib.sha256(placement.encode()).hexdigest()[:16]}"


def _constified(case) -> onnx.ModelProto | None:
    """The case's model with its first data set's inputs as initializers, outputs behind Identity."""
    if not case.data_sets or len(case.data_sets[0][0]) != len(case.model.graph.input):
        return None
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    initializers = []
    for info, value in zip(graph.input, case.data_sets[0][0]):
        if not isinstance(value, np.ndarray):
            return None
        try:
            initializers.append(numpy_helper.from_array(value, info.name))
        except Exception:  # a dtype onnx cannot write
            return None
    del graph.input[:]
    graph.initializer.extend(initializers)
    outputs = list(graph.output)
    del graph.output[:]
    for out in outputs:
        renamed = onnx.ValueInfoProto()
        renamed.CopyFrom(out)
        renamed.name = out.name + "__out"
        graph.node.append(helper.make_node("Identity", [out.name], [renamed.name]))
        graph.output.append(renamed)
    return model


def _cases(sets: list[str]) -> Iterator[tuple[str, onnx.ModelProto]]:
    from ort_core.testing import conformance, models

    for s in sets:
        if s == "gen":
            for name, make in models.MODELS.items():
                yield name, make()
        elif s == "real":
            from real_models import REAL_MODELS, fetch

            for name in REAL_MODELS:
                yield name, onnx.load_from_string(fetch(name).read_bytes())
        elif s == "constnode":
            for case in conformance.load_cases(["node"]):
                model = _constified(case)
                if model is not None:
                    yield f"const:{case.name}", model
        else:
            for case in conformance.load_cases([s]):
                yield f"{s}:{case.name}", case.model


def snapshot(out: str, sets: list[str], levels: list[int]) -> None:
    import ort_core

    logging.getLogger("ort_core").setLevel(logging.CRITICAL)
    warnings.simplefilter("ignore")
    result = {}
    for name, model in _cases(sets):
        data = model.SerializeToString()
        for level in levels:
            options = ort_core.SessionOptions()
            options.graph_optimization_level = ort_core.GraphOptimizationLevel(level)
            try:
                sess = ort_core.InferenceSession(data, options, providers=["CPUExecutionProvider"])
                result[f"{name}@{level}"] = _fingerprint(sess)
            except Exception as exc:
                result[f"{name}@{level}"] = f"error {type(exc).__name__}: {str(exc)[:200]}"
    Path(out).write_text(json.dumps(result, indent=0, sort_keys=True))
    print(f"{len(result)} sessions -> {out}")


def compare(before: str, after: str) -> int:
    a, b = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    print(f"{len(a)} vs {len(b)} sessions; {len(differ)} differ")
    for k in differ[:30]:
        print(f"  {k}\n    before {a.get(k)}\n    after  {b.get(k)}")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--levels", default="0,99")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        parser.error("give OUT.json or --compare BEFORE AFTER")
    sets = args.sets.split(",")
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; valid: {', '.join(SETS)}")
    snapshot(args.out, sets, [int(x) for x in args.levels.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
