"""Conformance harness: the ONNX backend test suite run through ``ort_core.InferenceSession``.

The cases come from the installed ``onnx`` package: the ``node`` set is generated in memory by
onnx's test-case generators (onnx >= 1.16 no longer ships its data), the ``simple``,
``pytorch-converted`` and ``pytorch-operator`` sets are read from the model and data files that
still ship inside the package. Outputs are compared the way onnx's backend runner compares them:
shape and dtype exact, ``allclose`` with the case's tolerances (NaNs equal; bfloat16 with
``rtol >= 2**-6``), strings and objects equal, sequences and optionals element by element.

Library use::

    from ort_core.testing.conformance import load_cases, run_suite
    score = run_suite(load_cases(("node",), pattern="relu"), ["CPUExecutionProvider"])
    print(score.table())

Command line (what ``nox -s conformance`` runs)::

    python -m ort_core.testing.conformance --providers CPUExecutionProvider \\
        --sets node,simple --json out.json --min-score ort-ep-cpu/conformance-score.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import numpy_helper

from ..progress import progress as progress_bar

#: Sets that can be loaded without a network: "node" is generated, the others ship as files.
SETS: tuple[str, ...] = ("node", "simple", "pytorch-converted", "pytorch-operator")
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7
BFLOAT16_RTOL = 2.0**-6  # two bfloat16 ULPs, as onnx's runner allows

Status = Literal["passed", "failed", "errored"]
Provider = str | tuple[str, Mapping[str, Any]]


# --------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One backend test: a model and one or more (inputs, expected outputs) data sets.

    ``op_types`` are the op types of the main graph's nodes (``domain::Op`` outside the default
    domain), in order of first appearance; subgraph nodes are not listed.
    """

    name: str
    set: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    op_types: tuple[str, ...] = ()

    @property
    def op(self) -> str:
        """The op the case is about: the op whose name the test name starts with (for an
        "_expanded" case, the function op it expands, e.g. Attention), else the first op."""
        if len(self.op_types) == 1:
            return self.op_types[0]
        key = re.sub(r"[^a-z0-9]", "", self.name.lower().removeprefix("test_").split("_expanded")[0])
        candidates = list(self.op_types)
        if "_expanded" in self.name:
            candidates += _schema_names()
        best = ""
        for op in candidates:
            bare = op.split("::")[-1].lower()
            if key.startswith(bare) and len(bare) > len(best.split("::")[-1]):
                best = op
        return best or (self.op_types[0] if self.op_types else "(no nodes)")


_SCHEMA_NAMES: list[str] = []


def _schema_names() -> list[str]:
    """Names of the ONNX ops (default domain) the installed onnx knows."""
    if not _SCHEMA_NAMES:
        _SCHEMA_NAMES.extend(sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain in ("", "ai.onnx")}))
    return _SCHEMA_NAMES


def _op_types(model: onnx.ModelProto) -> tuple[str, ...]:
    seen: list[str] = []
    for node in model.graph.node:
        name = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        if name not in seen:
            seen.append(name)
    return tuple(seen)


def _to_value(item: Any) -> Any:
    """A data-set entry as the session takes and returns it (numpy, list, None)."""
    if isinstance(item, onnx.TensorProto):
        return numpy_helper.to_array(item)
    if isinstance(item, onnx.SequenceProto):
        return numpy_helper.to_list(item)
    if isinstance(item, onnx.OptionalProto):
        return numpy_helper.to_optional(item)
    if isinstance(item, (list, tuple)):
        return [_to_value(x) for x in item]
    if isinstance(item, np.generic):
        return np.asarray(item)
    return item


def _node_cases() -> list[Case]:
    from onnx.backend.test.loader import load_model_tests

    # Generators draw random inputs at import; a fixed seed makes scores repeatable. (Only the
    # first import in a process generates; later calls get the same cached cases.)
    state = np.random.get_state()
    np.random.seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tests = load_model_tests(kind="node")
    finally:
        np.random.set_state(state)
    cases = []
    for t in tests:
        data = [([_to_value(x) for x in ins], [_to_value(x) for x in outs]) for ins, outs in t.data_sets or []]
        cases.append(Case(t.name, "node", t.model, data, t.rtol, t.atol, _op_types(t.model)))
    return cases


def _read_proto(path: Path, type_proto: onnx.TypeProto | None) -> Any:
    raw = path.read_bytes()
    kind = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if kind == "sequence_type":
        proto: Any = onnx.SequenceProto()
    elif kind == "optional_type":
        proto = onnx.OptionalProto()
    else:
        proto = onnx.TensorProto()
    proto.ParseFromString(raw)
    return _to_value(proto)


def _file_cases(kind: str) -> list[Case]:
    from onnx.backend.test.loader import DATA_DIR

    root = Path(DATA_DIR) / kind
    cases = []
    for case_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        model_path = case_dir / "model.onnx"
        if not model_path.exists():  # a download-only case (url in data.json): not available offline
            continue
        rtol, atol = DEFAULT_RTOL, DEFAULT_ATOL
        if (case_dir / "data.json").exists():
            meta = json.loads((case_dir / "data.json").read_text())
            rtol, atol = meta.get("rtol", rtol), meta.get("atol", atol)
        model = onnx.load(str(model_path))
        data_sets = []
        for set_dir in sorted(case_dir.glob("test_data_set*")):
            n_in = len(list(set_dir.glob("input_*.pb")))
            n_out = len(list(set_dir.glob("output_*.pb")))
            inputs = [
                _read_proto(set_dir / f"input_{i}.pb", model.graph.input[i].type if i < len(model.graph.input) else None)
                for i in range(n_in)
            ]
            outputs = [
                _read_proto(set_dir / f"output_{i}.pb", model.graph.output[i].type if i < len(model.graph.output) else None)
                for i in range(n_out)
            ]
            data_sets.append((inputs, outputs))
        cases.append(Case(case_dir.name, kind, model, data_sets, rtol, atol, _op_types(model)))
    return cases


def load_cases(sets: Iterable[str] = ("node",), pattern: str | None = None) -> list[Case]:
    """The backend test cases of ``sets`` whose name matches the regular expression ``pattern``.

    ``sets`` are names from ``SETS``. The node set takes about 5 s to generate.
    """
    wanted = list(sets)
    unknown = [s for s in wanted if s not in SETS]
    if unknown:
        raise ValueError(f"unknown conformance set(s) {unknown}; valid sets: {', '.join(SETS)}")
    regex = re.compile(pattern) if pattern else None
    cases: list[Case] = []
    for s in wanted:
        loaded = _node_cases() if s == "node" else _file_cases(s)
        cases.extend(c for c in loaded if regex is None or regex.search(c.name))
    return cases


# --------------------------------------------------------------------------------------------
# comparing
# --------------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    """An output differs from the expected one (message says where and how)."""


def _is_ml_dtype(dtype: np.dtype) -> bool:
    # ml_dtypes types (bfloat16, float8*, int4, ...): numpy kind "V" except float8_e5m2 ("f")
    return dtype.type.__module__ == "ml_dtypes"


def compare_value(expected: Any, actual: Any, rtol: float, atol: float, where: str = "output") -> None:
    """Raise ``Mismatch`` unless ``actual`` matches ``expected`` as onnx's backend runner asks."""
    if expected is None or actual is None:
        if expected is not actual:
            raise Mismatch(f"{where}: expected {'an empty optional' if expected is None else type(expected).__name__}, "
                           f"got {'an empty optional' if actual is None else type(actual).__name__}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise Mismatch(f"{where}: expected a sequence, got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise Mismatch(f"{where}: expected a sequence of {len(expected)}, got {len(actual)}")
        for k, (e, a) in enumerate(zip(expected, actual)):
            compare_value(e, a, rtol, atol, f"{where}[{k}]")
        return
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping) or set(actual) != set(expected):
            raise Mismatch(f"{where}: map keys differ")
        for k in expected:
            compare_value(expected[k], actual[k], rtol, atol, f"{where}[{k!r}]")
        return
    expected = np.asarray(expected)
    if not isinstance(actual, (np.ndarray, np.generic)):
        raise Mismatch(f"{where}: expected a tensor, got {type(actual).__name__}")
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        raise Mismatch(f"{where}: shape {list(actual.shape)}, expected {list(expected.shape)}")
    if expected.dtype == object or expected.dtype.kind in "SU":
        if not (actual.dtype == object or actual.dtype.kind in "SU"):
            raise Mismatch(f"{where}: dtype {actual.dtype}, expected strings")
        if not np.array_equal(np.asarray(actual, dtype=object), np.asarray(expected, dtype=object)):
            raise Mismatch(f"{where}: strings differ: got {actual.ravel()[:6].tolist()}, expected {expected.ravel()[:6].tolist()}")
        return
    if actual.dtype != expected.dtype:
        raise Mismatch(f"{where}: dtype {actual.dtype}, expected {expected.dtype}")
    if _is_ml_dtype(expected.dtype):
        # numpy cannot promote these with a Python float; compare in a wide standard type
        wide = np.float32 if expected.dtype.name.startswith(("float", "bfloat")) else np.int64
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, BFLOAT16_RTOL)
        actual, expected = actual.astype(wide), expected.astype(wide)
    if expected.dtype == np.bool_ or expected.dtype.kind in "iu":
        bad = actual != expected
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            ok = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
            # +-inf must match exactly (isclose already does); NaN only with NaN
        bad = ~ok
    if np.any(bad):
        idx = np.argwhere(bad)
        first = tuple(int(i) for i in idx[0]) if idx.size else ()
        raise Mismatch(
            f"{where}: {int(np.count_nonzero(bad))}/{expected.size} elements differ "
            f"(rtol={rtol}, atol={atol}); first at {list(first)}: got {actual[first]!r}, expected {expected[first]!r}"
        )


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    """What happened to one case. ``nodes`` counts nodes per provider (all graphs)."""

    name: str
    set: str
    op: str
    status: Status
    message: str = ""
    nodes: dict[str, int] = field(default_factory=dict)
    #: provider -> op types whose kernel note says the provider delegated them (e.g. to onnx.reference)
    delegated: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


class CaseTimeout(Exception):
    pass


def _alarm(seconds: float | None):
    """Arm a SIGALRM timer in the main thread (no-op elsewhere); returns a disarm callable."""
    import threading

    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return lambda: None

    def fire(signum, frame):  # noqa: ARG001
        raise CaseTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    return disarm


# "... node 'X' (op Cast, domain ai.onnx ..." (partitioning) or "running Cast node" (a run)
_NAMED_OP = re.compile(r"\(op (\w+), domain ([\w.]+)|running (\w+) node")


def _input_names(model: onnx.ModelProto) -> list[str]:
    """Graph inputs in order; fed positionally from a data set, initializers included (ONNX
    models before IR 4 list initializers as inputs and their data files may override them)."""
    return [i.name for i in model.graph.input]


def run_case(
    case: Case,
    providers: Sequence[Provider],
    sess_options: Any | None = None,
    timeout: float | None = None,
) -> CaseResult:
    """Run ``case`` on ``providers`` and compare with the expected outputs.

    ``failed``: the outputs differ (message says which and how); ``errored``: the session could
    not be created or the run raised (message has the exception), including inputs of types the
    session cannot take. ``timeout`` (seconds) bounds one case when called in the main thread.
    """
    from ..session import InferenceSession

    start = time.perf_counter()
    result = CaseResult(case.name, case.set, case.op, "errored")
    disarm = _alarm(timeout)
    try:
        stage = "session creation"
        try:
            session = InferenceSession(case.model.SerializeToString(), sess_options, providers=list(providers))
            placement = session.get_placement()
            result.nodes = dict(placement.counts(None))
            for p in placement.nodes:
                if "delegated" in p.note.lower():
                    ops = result.delegated.setdefault(p.provider, [])
                    if p.op_type not in ops:
                        ops.append(p.op_type)
            names = _input_names(case.model)
            outputs_wanted = [o.name for o in case.model.graph.output]
            for k, (inputs, expected) in enumerate(case.data_sets):
                stage = f"data set {k}: run"
                if len(inputs) > len(names):
                    raise ValueError(f"data set {k} has {len(inputs)} inputs, the model {len(names)}")
                feeds = dict(zip(names, inputs))
                actual = session.run(outputs_wanted[: len(expected)], feeds)
                stage = f"data set {k}: compare"
                if len(actual) != len(expected):
                    raise Mismatch(f"{len(actual)} outputs, expected {len(expected)}")
                for j, (e, a) in enumerate(zip(expected, actual)):
                    compare_value(e, a, case.rtol, case.atol, where=f"data set {k}, output {j} ({outputs_wanted[j]!r})")
        except Mismatch as exc:
            result.status, result.message = "failed", str(exc)
        except CaseTimeout as exc:
            result.status, result.message = "errored", f"{stage}: {exc}"
        except Exception as exc:
            message = f"{stage}: {type(exc).__name__}: {exc}"
            result.status, result.message = "errored", message[:2000]
            # group by the node the error names (e.g. the op without a kernel in an expanded case)
            named = _NAMED_OP.search(message)
            if named and named.group(1):
                domain = named.group(2)
                result.op = named.group(1) if domain in ("ai.onnx", "") else f"{domain}::{named.group(1)}"
            elif named:
                result.op = named.group(3)
        else:
            result.status = "passed"
    finally:
        disarm()
    result.seconds = time.perf_counter() - start
    return result


@dataclass
class SetScore:
    passed: int = 0
    failed: int = 0
    errored: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errored


@dataclass
class Score:
    """Results of a suite run: counts per set, failures grouped by op."""

    providers: list[str]
    results: list[CaseResult]
    seconds: float = 0.0

    @property
    def sets(self) -> dict[str, SetScore]:
        by_set: dict[str, SetScore] = {}
        for r in self.results:
            s = by_set.setdefault(r.set, SetScore())
            setattr(s, r.status, getattr(s, r.status) + 1)
        return by_set

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r.passed)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]

    def failures_by_op(self) -> dict[str, list[CaseResult]]:
        grouped: dict[str, list[CaseResult]] = {}
        for r in self.failures:
            grouped.setdefault(r.op, []).append(r)
        return dict(sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def to_json(self) -> dict[str, Any]:
        return {
            "onnx": onnx.__version__,
            "providers": self.providers,
            "seconds": round(self.seconds, 1),
            "sets": {k: {"passed": v.passed, "failed": v.failed, "errored": v.errored, "total": v.total}
                     for k, v in self.sets.items()},
            "failures": {
                op: [{"name": r.name, "set": r.set, "status": r.status, "message": r.message[:500]} for r in rs]
                for op, rs in self.failures_by_op().items()
            },
            "delegated_ops": self.delegated_ops(),
            "passed_cases": sorted(f"{r.set}/{r.name}" for r in self.results if r.passed),
        }

    def delegated_ops(self) -> dict[str, list[str]]:
        """Per provider, the op types it ran by delegation (its kernel note says "delegated")."""
        found: dict[str, set[str]] = {}
        for r in self.results:
            for provider, ops in r.delegated.items():
                found.setdefault(provider, set()).update(ops)
        return {k: sorted(v) for k, v in sorted(found.items())}

    def table(self, max_messages: int = 3) -> str:
        lines = [f"conformance of {', '.join(self.providers)} (onnx {onnx.__version__}, {self.seconds:.0f} s)"]
        lines.append(f"  {'set':<20} {'passed':>7} {'failed':>7} {'errored':>8} {'total':>7}")
        for name, s in self.sets.items():
            lines.append(f"  {name:<20} {s.passed:>7} {s.failed:>7} {s.errored:>8} {s.total:>7}")
        for provider, ops in self.delegated_ops().items():
            lines.append(f"delegated by {provider}: {len(ops)} op(s): {', '.join(ops)}")
        grouped = self.failures_by_op()
        if grouped:
            lines.append(f"failures by op ({len(self.failures)} cases, {len(grouped)} ops):")
            for op, rs in grouped.items():
                lines.append(f"  {op} ({len(rs)})")
                for r in rs[:max_messages]:
                    lines.append(f"    {r.status:<7} {r.name}: {r.message[:200]}")
                if len(rs) > max_messages:
                    lines.append(f"    ... and {len(rs) - max_messages} more: " + ", ".join(r.name for r in rs[max_messages:]))
        return "\n".join(lines)

    def regressions(self, recorded: Mapping[str, Any]) -> list[str]:
        """Why this score is below ``recorded`` (a ``to_json()``-shaped dict); [] when it is not."""
        problems = []
        current = self.sets
        for name, want in recorded.get("sets", {}).items():
            if name not in current:
                continue
            got = current[name].passed
            if got < int(want["passed"]):
                problems.append(f"set {name}: {got} passed, recorded {want['passed']}")
        return problems


def _provider_names(providers: Sequence[Provider]) -> list[str]:
    return [p if isinstance(p, str) else p[0] for p in providers]


def run_suite(
    cases: Sequence[Case],
    providers: Sequence[Provider],
    sess_options: Any | None = None,
    timeout: float | None = 60.0,
    progress: Callable[[CaseResult], None] | None = None,
) -> Score:
    """Run every case on ``providers``; ``progress`` is called after each case.

    Log warnings are silenced while the suite runs (the score reports what went wrong): onnx-ir
    warns about the invalid outputs some cases have on purpose, and sessions made without
    ``sess_options`` log at error level only.
    """
    import logging

    from ..session import SessionOptions

    if sess_options is None:
        sess_options = SessionOptions()
        sess_options.log_severity_level = 3
    start = time.perf_counter()
    results = []
    loggers = [logging.getLogger(name) for name in ("ort_core", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    try:
        loggers[1].setLevel(logging.ERROR)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            for case in progress_bar(cases, desc="conformance"):
                r = run_case(case, providers, sess_options, timeout)
                results.append(r)
                if progress is not None:
                    progress(r)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    return Score(_provider_names(providers), results, time.perf_counter() - start)


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def _parse_provider(text: str) -> Provider:
    # NAME or NAME:key=value;key=value
    name, _, opts = text.partition(":")
    if not opts:
        return name
    options = dict(kv.split("=", 1) for kv in opts.split(";") if kv)
    return (name, options)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ort_core.testing.conformance",
        description="Run the ONNX backend test suite through ort-core and score it.",
    )
    parser.add_argument("--providers", default="CPUExecutionProvider",
                        help="comma-separated providers in priority order (NAME or NAME:key=v;key=v)")
    parser.add_argument("--sets", default="node", help=f"comma-separated sets from: {', '.join(SETS)}")
    parser.add_argument("-k", "--pattern", default=None, help="regular expression on case names")
    parser.add_argument("--json", dest="json_path", default=None, help="write the score as JSON here")
    parser.add_argument("--min-score", default=None,
                        help="a recorded score JSON; exit 1 if any set passes fewer cases than recorded")
    parser.add_argument("--write-score", default=None,
                        help="write the per-set counts and passing cases here (to record as the new minimum)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    parser.add_argument("--max-messages", type=int, default=3, help="failure messages shown per op")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case as it runs")
    args = parser.parse_args(argv)

    providers = [_parse_provider(p) for p in args.providers.split(",") if p]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    try:
        cases = load_cases(sets, args.pattern)
    except ValueError as exc:
        parser.error(str(exc))
    os.environ.setdefault("PYTHONWARNINGS", "ignore")

    def progress(r: CaseResult) -> None:
        if args.verbose:
            print(f"{r.status:<7} {r.set}/{r.name} ({r.seconds:.2f} s) {r.message[:160]}", flush=True)

    score = run_suite(cases, providers, timeout=args.timeout, progress=progress)
    print(score.table(args.max_messages))
    data = score.to_json()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1) + "\n")
    if args.write_score:
        recorded = {k: data[k] for k in ("onnx", "providers", "sets")}
        Path(args.write_score).write_text(json.dumps(recorded, indent=1) + "\n")
    if args.min_score:
        recorded = json.loads(Path(args.min_score).read_text())
        problems = score.regressions(recorded)
        if problems:
            print("conformance score dropped below " + args.min_score + ": " + "; ".join(problems), file=sys.stderr)
            return 1
        print(f"score is at or above {args.min_score}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
