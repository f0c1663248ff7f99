"""``ort-core compare``: run one model on several provider lists (and on onnxruntime when it is
installed), report each output's error against the reference, and on a mismatch find the first
node whose output diverges.

Each runner is a provider list (``A`` or ``A+B``; core appends the CPU provider as fallback,
as in any session) at one optimization level. The reference is onnxruntime's CPU provider with
its optimizations off (the model's own semantics) on one thread when onnxruntime is installed, else the first
runner. An output mismatches when ``max|a - e| > atol + rtol * max|e|``.

Localising a mismatch: the runner's session writes the graph it runs
(``optimized_model_filepath``: the optimizer's rewrites, fused ops included); that graph, with
every intermediate value made a graph output, is run at ORT_DISABLE_ALL on the runner's
providers and on the reference (onnxruntime, or the CPU provider where onnxruntime cannot load
it, e.g. for ort-core's own ops). The first node in topological order whose output is beyond
the tolerance is named with its op and the provider that ran it: its inputs matched, so that
node computed something else.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from . import session as _session_module
from .errors import Fail, InvalidArgument, InvalidProtobuf, NoSuchFile

CPU = "CPUExecutionProvider"
RTOL, ATOL = 1e-4, 1e-5


@dataclass
class OutputError:
    name: str
    max_abs: float
    max_rel: float  # max |a - e| / max |e|
    bound: float  # atol + rtol * max |e|
    message: str = ""  # shape/dtype mismatch or the exception

    @property
    def ok(self) -> bool:
        return not self.message and self.max_abs <= self.bound


@dataclass
class Divergence:
    """The first node whose output leaves the tolerance, on one runner."""

    node: str
    op: str
    provider: str
    output: str
    max_abs: float
    bound: float


@dataclass
class RunnerResult:
    runner: str  # "A" or "A+B"
    providers: list[str]
    outputs: list[OutputError] = field(default_factory=list)
    error: str = ""  # the session or run failed
    divergence: Divergence | None = None
    divergence_note: str = ""  # why no node was named, when none was

    @property
    def ok(self) -> bool:
        return not self.error and all(o.ok for o in self.outputs)


@dataclass
class Comparison:
    model: str
    level: str
    reference: str
    results: list[RunnerResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def report(self) -> str:
        lines = [f"{self.model}: level {self.level}; reference {self.reference}; "
                 f"tolerance atol {ATOL} + rtol {RTOL} x max|reference|"]
        width = max([len(r.runner) for r in self.results] + [6])
        lines.append(f"{'runner':{width}}  {'output':24}  {'max abs':>9}  {'max rel':>9}  verdict")
        for r in self.results:
            if r.error:
                lines.append(f"{r.runner:{width}}  {'-':24}  {'':>9}  {'':>9}  ERROR {r.error}")
                continue
            for o in r.outputs:
                verdict = "ok" if o.ok else (f"MISMATCH {o.message}" if o.message else f"MISMATCH (> {o.bound:.2g})")
                lines.append(f"{r.runner:{width}}  {o.name[:24]:24}  {o.max_abs:9.2e}  {o.max_rel:9.2e}  {verdict}")
        for r in self.results:
            if r.divergence is not None:
                d = r.divergence
                lines.append(f"{r.runner}: first divergence at node {d.node!r} ({d.op}) on {d.provider}: "
                             f"output {d.output!r} max abs error {d.max_abs:.3g} > {d.bound:.3g}, its inputs within tolerance")
            elif r.divergence_note:
                lines.append(f"{r.runner}: {r.divergence_note}")
        return "\n".join(lines)


def _leaves(value: Any, path: str = "") -> list[tuple[str, np.ndarray]]:
    """The tensors of a sequence or map output (ZipMap's list of dicts, say), each with its
    place in it ("[0]['setosa']"); a tensor is its own one leaf."""
    if isinstance(value, dict):
        return [leaf for key in sorted(value, key=repr) for leaf in _leaves(value[key], f"{path}[{key!r}]")]
    if isinstance(value, (list, tuple)):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, np.asarray(value))]


def _structured_error(name: str, actual: Any, expected: Any, rtol: float, atol: float) -> OutputError:
    """A sequence or map output against the reference's: the same places (lengths, keys), then
    each tensor as ``_errors`` compares them, the worst one reported."""
    got, want = _leaves(actual), _leaves(expected)
    if [p for p, _ in got] != [p for p, _ in want]:
        return OutputError(name, float("inf"), float("inf"), 0.0,
                           "a sequence or map whose lengths or keys are not the reference's")
    errors = _errors([a for _, a in got], [e for _, e in want], [name + p for p, _ in want], rtol, atol)
    if not errors:
        return OutputError(name, 0.0, 0.0, atol)
    worst = next((err for err in errors if err.message), None) or max(errors, key=lambda err: err.max_abs - err.bound)
    return OutputError(name, worst.max_abs, worst.max_rel, worst.bound, worst.message)


def _errors(actual: Sequence[Any], expected: Sequence[Any], names: Sequence[str],
            rtol: float, atol: float) -> list[OutputError]:
    result = []
    for name, a, e in zip(names, actual, expected):
        if isinstance(e, (list, tuple, dict)) or isinstance(a, (list, tuple, dict)):
            result.append(_structured_error(name, a, e, rtol, atol))
            continue
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape or a.dtype != e.dtype:
            result.append(OutputError(name, float("inf"), float("inf"), 0.0,
                                      f"{a.dtype}{list(a.shape)} where the reference has {e.dtype}{list(e.shape)}"))
            continue
        if e.size == 0:
            result.append(OutputError(name, 0.0, 0.0, atol))
            continue
        if e.dtype.kind not in "fc":  # integers, booleans: exact
            diff = float(np.max(a != e))
            result.append(OutputError(name, diff, diff, 0.0))
            continue
        scale = float(np.max(np.abs(e.astype(np.float64))))
        max_abs = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))))
        if np.isnan(max_abs):
            max_abs = float("inf")
        result.append(OutputError(name, max_abs, max_abs / scale if scale else max_abs, atol + rtol * scale))
    return result


def make_feeds(model: onnx.ModelProto, given: Mapping[str, np.ndarray], batch: int = 1) -> dict[str, np.ndarray]:
    """``given`` plus seeded random values for the other inputs (symbolic dims = ``batch``;
    integers in [0, 2), as ids and masks take)."""
    feeds = dict(given)
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    for info in model.graph.input:
        if info.name in feeds or info.name in initializers:
            continue
        tensor = info.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)) if tensor.elem_type else None
        if dtype is None or dtype.kind not in "biuf" or not tensor.HasField("shape"):
            raise InvalidArgument(f"input {info.name!r}: give its value with --inputs {info.name}=FILE.npy "
                                  "(its type or shape is not known)")
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tensor.shape.dim]
        if dtype == np.bool_:
            feeds[info.name] = rng.random(shape) > 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _onnxruntime_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
    import onnxruntime

    from .testing import exact_reference  # exact where this CPU's onnxruntime saturates uint8 x int8

    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    # one thread: onnxruntime's own DynamicQuantizeLSTM gives other values on more threads (0.75
    # on a diacritizer's logits, text2tashkeel's bilstm.int8), which were blamed on the runner
    so.intra_op_num_threads = 1
    sess = exact_reference.session(model, so)
    wanted = {i.name for i in sess.get_inputs()}
    return sess.run(list(names), {k: v for k, v in feeds.items() if k in wanted})


def _session(model: bytes | str, providers: Sequence[str], level: str, optimized_path: str = "") -> Any:
    so = _session_module.SessionOptions()
    so.graph_optimization_level = getattr(_session_module.GraphOptimizationLevel, level)
    so.optimized_model_filepath = optimized_path
    return _session_module.InferenceSession(model, so, providers=list(providers))


def _with_every_value_as_output(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[str, str, str]]]:
    """The model with each typed tensor a node produces (main graph) as a graph output, and
    (value, node name, op) for them in topological order."""
    typed = {v.name: v for v in (*model.graph.value_info, *model.graph.output)}
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    order = []
    for node in model.graph.node:
        op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        for out in node.output:
            info = typed.get(out)
            if not out or info is None or not info.type.HasField("tensor_type"):
                continue
            order.append((out, node.name, op))
            if out not in present:
                exposed.graph.output.append(info)
                present.add(out)
    return exposed, order


def _localise(data: bytes, providers: Sequence[str], level: str, feeds: Mapping[str, np.ndarray],
              rtol: float, atol: float, result: RunnerResult) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        _session(data, providers, level, path)  # writes the graph this runner runs
        optimized = onnx.load(path)
    exposed, order = _with_every_value_as_output(optimized)
    if not order:
        result.divergence_note = "no typed intermediate value to compare: first divergence not found"
        return
    names = [v for v, _, _ in order]
    exposed_bytes = exposed.SerializeToString()
    try:
        expected = _onnxruntime_run(exposed, feeds, names)
    except Exception:  # onnxruntime cannot load it (ort-core's own ops) or is not installed
        expected = _session(exposed_bytes, [CPU], "ORT_DISABLE_ALL").run(names, dict(feeds))
    sess = _session(exposed_bytes, providers, "ORT_DISABLE_ALL")
    where = {p.name: p.provider for p in sess.get_placement().nodes if p.graph == ""}
    actual = sess.run(names, dict(feeds))
    for (value, node, op), err in zip(order, _errors(actual, expected, names, rtol, atol)):
        if not err.ok:
            result.divergence = Divergence(node, op, where.get(node, "?"), value, err.max_abs, err.bound)
            return
    result.divergence_note = ("every intermediate value matches when exposed (the divergence depends on the "
                              "fused groups the exposure splits): first divergence not found")


def compare(model: str | bytes | onnx.ModelProto, runners: Sequence[Sequence[str]], level: str = "ORT_ENABLE_ALL",
            inputs: Mapping[str, np.ndarray] | None = None, rtol: float = RTOL, atol: float = ATOL,
            localise: bool = True) -> Comparison:
    """Run ``model`` on each provider list of ``runners`` at ``level`` and compare with the
    reference (see the module docstring)."""
    if level not in _session_module.GraphOptimizationLevel.__members__:
        raise InvalidArgument(f"level {level!r}; valid: {', '.join(_session_module.GraphOptimizationLevel.__members__)}")
    proto = _load(model)
    label = model if isinstance(model, str) else proto.graph.name or "model"
    data = proto.SerializeToString()
    feeds = make_feeds(proto, inputs or {})
    names = [o.name for o in proto.graph.output]
    try:
        import onnxruntime

        reference = f"onnxruntime {onnxruntime.__version__} CPUExecutionProvider, ORT_DISABLE_ALL"
        try:
            expected = _onnxruntime_run(proto, feeds, names)
        except Exception as exc:  # the reference cannot run these inputs: no comparison to make
            raise Fail(f"the reference, {reference}, failed on these inputs (seeded random values where "
                       f"--inputs gives none): {type(exc).__name__}: {str(exc).strip()}; give the model "
                       "realistic values with --inputs NAME=FILE.npy") from exc
        start = 0
    except ImportError:
        first = list(runners[0])
        expected = _session(data, first, level).run(None, dict(feeds))
        reference = f"{'+'.join(first)} (onnxruntime is not installed)"
        start = 1
    results = [RunnerResult("+".join(r), list(r)) for r in runners]
    for result in results[start:]:
        try:
            actual = _session(data, result.providers, level).run(None, dict(feeds))
        except Exception as exc:  # reported per runner, naming the error
            result.error = f"{type(exc).__name__}: {exc}"
            continue
        result.outputs = _errors(actual, expected, names, rtol, atol)
        if localise and not result.ok:
            try:
                _localise(data, result.providers, level, feeds, rtol, atol, result)
            except Exception as exc:
                result.divergence_note = f"first divergence not found: {type(exc).__name__}: {exc}"
    return Comparison(label, level, reference, results[start:])


def _load(model: str | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, str) and not os.path.isfile(model):
        raise NoSuchFile(f"model file {model!r} does not exist")
    try:
        return onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    except Exception as exc:
        where = "the model bytes" if isinstance(model, bytes) else repr(model)
        raise InvalidProtobuf(f"{where} is not an ONNX model: {exc}") from exc


def parse_inputs(items: Sequence[str]) -> dict[str, np.ndarray]:
    """``x=a.npy`` items (each may hold several, comma-separated) -> arrays."""
    feeds = {}
    for item in (part for text in items for part in text.split(",") if part):
        name, sep, path = item.partition("=")
        if not sep:
            raise InvalidArgument(f"--inputs takes NAME=FILE.npy, got {item!r}")
        try:
            feeds[name] = np.load(path)
        except OSError as exc:
            raise InvalidArgument(f"--inputs {name}: cannot read {path!r}: {exc}") from exc
    return feeds


def parse_runners(text: str) -> list[list[str]]:
    """``A,B+C`` -> [[A], [B, C]]."""
    runners = [[p for p in part.split("+") if p] for part in text.split(",") if part]
    if not runners:
        raise InvalidArgument("--providers names no provider (e.g. OpenVINOExecutionProvider,CPUExecutionProvider)")
    return runners
