"""Structure-aware fuzzing of ort-core: small valid models and their feeds, mutated by
hypothesis, each case run in a forked child with an address-space limit (RLIMIT_AS) and a
wall-clock timeout.

Outcomes: ``success``, ``named`` (an ``ort_core.OrtError``), ``unnamed`` (any other exception:
a bug), ``hang`` (past the timeout: a bug), ``crash`` (the child died without reporting: a bug).
Hypothesis shrinks the first bug it meets to a minimal case, which is printed (as the model's
bytes in base64 and the feeds) to be kept in ``regressions.py``.

The parent imports the modules but creates no session: the child (forked, so it starts in
milliseconds) loads the plugins, creates the session and runs it, so no thread pool or device
state of the parent is inherited in use.

    python reliability/fuzz.py --examples 2000 --seed 1 --providers CPUExecutionProvider
"""

from __future__ import annotations

import argparse
import base64
import collections
import dataclasses
import json
import os
import pickle
import resource
import select
import signal
import sys
import time
from typing import Any

import numpy as np
import onnx
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

# ---------------------------------------------------------------------------- seed models
F, I64 = TensorProto.FLOAT, TensorProto.INT64
T = helper.make_tensor_value_info


def _init(name: str, array: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _seeds() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """Small valid models covering the ops whose edge cases matter (strides, pads, shapes,
    folding, control flow), each with a feed that runs."""
    rng = np.random.default_rng(0)
    x4 = rng.random((1, 2, 5, 5), dtype=np.float32)
    cases: dict[str, tuple[list, list, list, list, dict]] = {
        "conv": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])],
                 [T("x", F, [1, 2, 5, 5])], [T("y", F, None)],
                 [_init("w", rng.random((3, 2, 3, 3), dtype=np.float32)), _init("b", np.zeros(3, np.float32))], {"x": x4}),
        "pool": ([helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
                  helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])],
                 [T("x", F, [1, 2, 5, 5])], [T("y", F, None)], [], {"x": x4}),
        "gemm_relu": ([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["y"])],
                      [T("x", F, [2, 4])], [T("y", F, None)],
                      [_init("w", rng.random((3, 4), dtype=np.float32)), _init("b", np.ones(3, np.float32))],
                      {"x": rng.random((2, 4), dtype=np.float32)}),
        "shape_chain": ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i"], ["g"]),
                         helper.make_node("Concat", ["g", "m1"], ["c"], axis=0), helper.make_node("Reshape", ["x", "c"], ["y"])],
                        [T("x", F, ["N", 6])], [T("y", F, None)],
                        [_init("i", np.array([0], np.int64)), _init("m1", np.array([-1], np.int64))],
                        {"x": rng.random((2, 6), dtype=np.float32)}),
        "fold": ([helper.make_node("ConstantOfShape", ["s"], ["c"], value=_init("v", np.array([2.0], np.float32))),
                  helper.make_node("Cast", ["c"], ["d"], to=F), helper.make_node("ReduceMax", ["d"], ["r"], keepdims=0),
                  helper.make_node("Add", ["x", "r"], ["y"])],
                 [T("x", F, [3])], [T("y", F, None)], [_init("s", np.array([4], np.int64))],
                 {"x": rng.random(3, dtype=np.float32)}),
        "range_pad": ([helper.make_node("Range", ["a", "lim", "d"], ["r"]), helper.make_node("Pad", ["r", "p"], ["y"])],
                      [T("lim", F, [])], [T("y", F, None)],
                      [_init("a", np.float32(0)), _init("d", np.float32(1)), _init("p", np.array([1, 2], np.int64))],
                      {"lim": np.float32(5)}),
        "slice_transpose": ([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
                             helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0]), helper.make_node("Softmax", ["t"], ["y"], axis=-1)],
                            [T("x", F, [4, 6])], [T("y", F, None)],
                            [_init("st", np.array([0, 1], np.int64)), _init("en", np.array([4, 6], np.int64)),
                             _init("ax", np.array([0, 1], np.int64)), _init("sp", np.array([1, 2], np.int64))],
                            {"x": rng.random((4, 6), dtype=np.float32)}),
        "if": ([helper.make_node("If", ["c"], ["y"],
                                 then_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [T("t", F, [3])]),
                                 else_branch=helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [T("e", F, [3])]))],
               [T("c", TensorProto.BOOL, []), T("x", F, [3])], [T("y", F, None)], [],
               {"c": np.array(True), "x": rng.random(3, dtype=np.float32)}),
        "matmul_bn": ([helper.make_node("Conv", ["x", "w"], ["c"]),
                       helper.make_node("BatchNormalization", ["c", "sc", "bb", "mn", "vr"], ["y"])],
                      [T("x", F, [1, 2, 5, 5])], [T("y", F, None)],
                      [_init("w", rng.random((2, 2, 1, 1), dtype=np.float32))]
                      + [_init(n, np.ones(2, np.float32)) for n in ("sc", "bb", "mn", "vr")], {"x": x4}),
    }
    models = {}
    for name, (nodes, inputs, outputs, inits, feeds) in cases.items():
        model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits),
                                  opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        models[name] = (model, feeds)
    return models


SEEDS = _seeds()
INTERESTING_INTS = [0, 1, -1, 2, 3, 7, -2, 2 ** 31, 2 ** 32, 10 ** 8, -(2 ** 63), 2 ** 63 - 1, 10 ** 9]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, np.nan, np.inf, -np.inf, 1e38, -1e-45, 3e9]
OPS = ["Relu", "Neg", "Abs", "Identity", "Sigmoid", "Softmax", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh",
       "Add", "Mul", "Div", "Sub", "Pow", "MatMul", "Max", "Min", "Concat", "Reshape", "Expand", "Tile", "Gather",
       "Range", "Pad", "ConstantOfShape", "ReduceMax", "ReduceSum", "Cast", "Transpose", "Squeeze", "Unsqueeze"]
DTYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.INT8,
          TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.STRING, TensorProto.UINT8, 0, 99]


# ---------------------------------------------------------------------------- mutations
def _array(t: onnx.TensorProto) -> np.ndarray | None:
    """The tensor's data, or None where an earlier mutation made it unreadable."""
    try:
        return numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001
        return None


def _inline(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """The initializers whose data is in the model (mutations read them as arrays)."""
    return [t for t in graph.initializer if t.data_location != TensorProto.EXTERNAL]


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, bytes, dict[str, Any]]:
    """(seed name, model bytes, feeds): a seed with 0-3 structure-aware mutations."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    proto, feeds = SEEDS[name]
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    feeds = dict(feeds)
    graph = model.graph
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(MUTATIONS))
        try:
            _mutate(draw, kind, model, graph, feeds)
        except (ValueError, TypeError, IndexError, OverflowError, KeyError, AttributeError):
            pass  # a mutation that an earlier one made meaningless (a feed now None, ...)
    return name, model.SerializeToString(), feeds


MUTATIONS = ["attr", "init", "init_raw", "input_shape", "feed", "op", "opset", "output",
             "edge", "drop_node", "output_type", "external"]


def _mutate(draw: st.DrawFn, kind: str, model: onnx.ModelProto, graph: onnx.GraphProto, feeds: dict) -> None:
    """Apply one mutation of ``kind`` in place."""
    if kind == "attr":
        attrs = [(n, a) for n in graph.node for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if attrs:
            _, a = draw(st.sampled_from(attrs))
            value = draw(st.sampled_from(INTERESTING_INTS))
            if a.type == onnx.AttributeProto.INT:
                a.i = value
            else:
                k = draw(st.integers(0, max(0, len(a.ints) - 1)))
                ints = list(a.ints) or [0]
                ints[k % len(ints)] = value
                if draw(st.booleans()):
                    ints = ints[: draw(st.integers(0, len(ints)))]
                del a.ints[:]
                a.ints.extend(ints)
    elif kind == "init" and _inline(graph):
        t = draw(st.sampled_from(_inline(graph)))
        array = _array(t)
        if array is None:
            return
        choice = draw(st.sampled_from(["value", "shape", "dtype"]))
        if choice == "value" and array.size:
            flat = array.reshape(-1).copy()
            if flat.dtype.kind == "f":
                flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(INTERESTING_FLOATS))
            elif flat.dtype.kind in "iu":
                v = draw(st.sampled_from(INTERESTING_INTS))
                info = np.iinfo(flat.dtype)
                flat[draw(st.integers(0, flat.size - 1))] = min(max(v, info.min), info.max)
            t.CopyFrom(numpy_helper.from_array(flat.reshape(array.shape), t.name))
        elif choice == "shape":
            dims = draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 10 ** 9]), max_size=4))
            del t.dims[:]
            t.dims.extend(dims)
        else:
            t.data_type = draw(st.sampled_from(DTYPES))
    elif kind == "init_raw" and _inline(graph):
        t = draw(st.sampled_from(_inline(graph)))
        array = _array(t)
        raw = t.raw_data or (b"" if array is None or array.dtype == object else array.tobytes())
        t.raw_data = raw[: draw(st.integers(0, len(raw)))] + b"\x00" * draw(st.integers(0, 16))
    elif kind == "input_shape" and graph.input:
        v = draw(st.sampled_from(list(graph.input)))
        dims = v.type.tensor_type.shape.dim
        if dims and draw(st.booleans()):
            dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(st.sampled_from([0, 1, 2, 7, 2 ** 31]))
        else:
            v.type.tensor_type.elem_type = draw(st.sampled_from(DTYPES[:7]))
    elif kind == "feed" and feeds:
        key = draw(st.sampled_from(sorted(feeds)))
        x = feeds[key]
        choice = draw(st.sampled_from(["dtype", "shape", "nan", "empty", "none", "list", "extra", "missing"]))
        if choice == "dtype":
            feeds[key] = np.asarray(x).astype(draw(st.sampled_from([np.float64, np.int64, np.int8, np.bool_, np.float16])))
        elif choice == "shape":
            feeds[key] = np.ones(draw(st.lists(st.integers(0, 6), max_size=5)), np.asarray(x).dtype)
        elif choice == "nan" and np.asarray(x).dtype.kind == "f":
            y = np.array(x, copy=True)
            y.reshape(-1)[:1] = draw(st.sampled_from(INTERESTING_FLOATS))
            feeds[key] = y
        elif choice == "empty":
            feeds[key] = np.zeros((0,) * max(1, np.ndim(x)), np.asarray(x).dtype)
        elif choice == "none":
            feeds[key] = None
        elif choice == "list":
            feeds[key] = [draw(st.sampled_from(INTERESTING_INTS))] * max(1, np.size(x))
        elif choice == "extra":
            feeds["no_such_input"] = np.ones(1, np.float32)
        else:
            del feeds[key]
    elif kind == "op" and graph.node:
        n = draw(st.sampled_from(list(graph.node)))
        n.op_type = draw(st.sampled_from(OPS))
    elif kind == "opset":
        model.opset_import[0].version = draw(st.sampled_from([1, 6, 7, 11, 13, 18, 21, 23, 99]))
    elif kind == "output" and graph.output:
        graph.output[0].name = draw(st.sampled_from(["nowhere", "x", "", "s"]))
    elif kind == "edge" and graph.node:
        n = draw(st.sampled_from(list(graph.node)))
        names = [v.name for v in graph.input] + [t.name for t in graph.initializer] + list(n.input) + ["", "ghost"]
        if n.input and draw(st.booleans()):
            n.input[draw(st.integers(0, len(n.input) - 1))] = draw(st.sampled_from(names))
        else:
            n.input.append(draw(st.sampled_from(names)))
    elif kind == "drop_node" and len(graph.node) > 1:
        del graph.node[draw(st.integers(0, len(graph.node) - 1))]
    elif kind == "output_type" and graph.output:
        graph.output[0].type.tensor_type.elem_type = draw(st.sampled_from(DTYPES[:7]))
    elif kind == "external" and _inline(graph):
        t = draw(st.sampled_from(_inline(graph)))
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        t.external_data.add(key="location", value=draw(st.sampled_from(["w.bin", "../w.bin", "/etc/passwd", "w\0", "."])))
        if draw(st.booleans()):
            t.external_data.add(key="offset", value=draw(st.sampled_from(["-1", "abc", "0", "99999999999"])))


# ---------------------------------------------------------------------------- one case, forked
@dataclasses.dataclass
class Limits:
    seconds: float = 20.0
    memory_bytes: int = 3 << 30  # added to the parent's address space at fork


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(model: bytes, feeds: dict, providers: list[str] | None, write_fd: int, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    import ort_core

    result: tuple[str, str]
    try:
        sess = ort_core.InferenceSession(model, providers=providers)
        sess.run(None, feeds)
        result = ("success", "")
    except ort_core.OrtError as exc:
        result = ("named", f"{type(exc).__name__}: {str(exc)[:300]}")
    except BaseException as exc:  # noqa: BLE001 - what the fuzzer looks for
        result = ("unnamed", f"{type(exc).__name__}: {str(exc)[:300]}")
    os.write(write_fd, pickle.dumps(result))
    os._exit(0)


def run_case(model: bytes, feeds: dict, providers: list[str] | None = None, limits: Limits = Limits()) -> tuple[str, str]:
    """Run one case in a forked child; its outcome and a detail."""
    read_fd, write_fd = os.pipe()
    memory = _vm_bytes() + limits.memory_bytes
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        try:
            _child(model, feeds, providers, write_fd, memory)
        finally:
            os._exit(3)
    os.close(write_fd)
    data = b""
    deadline = time.monotonic() + limits.seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return ("hang", f"no answer in {limits.seconds} s")
            ready, _, _ = select.select([read_fd], [], [], left)
            if ready:
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                data += chunk
    finally:
        os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if data:
        try:
            return pickle.loads(data)
        except Exception:  # noqa: BLE001
            pass
    if os.WIFSIGNALED(status):
        return ("crash", f"signal {os.WTERMSIG(status)}")
    return ("crash", f"exit status {os.waitstatus_to_exitcode(status)}")


# ---------------------------------------------------------------------------- the campaign
BUGS = ("unnamed", "hang", "crash")


def warm_up() -> None:
    """Import, in the parent, what every case's child would otherwise import again: ``import
    ort_core`` is lazy (no onnx, onnx-ir or session until first use) and plugins load on first
    use, which cost each forked child about a second. No session is made here, so no provider
    starts threads before the fork."""
    import ort_core
    import ort_core.graph.load  # noqa: F401
    import ort_core.optimizer  # noqa: F401
    import ort_core.session  # noqa: F401

    ort_core.registry().providers()


def campaign(examples: int, seed_value: int, providers: list[str] | None, limits: Limits,
             budget_s: float | None = None, stop_on_bug: bool = True) -> dict[str, Any]:
    """Run ``examples`` cases (or until ``budget_s``); counts by outcome, and the bugs. With
    ``stop_on_bug`` hypothesis shrinks the first bug to a minimal case (``minimal``)."""
    warm_up()
    counts: collections.Counter = collections.Counter()
    bugs: list[dict] = []
    errors: collections.Counter = collections.Counter()
    start = time.monotonic()
    last: dict[str, Any] = {}

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @given(cases())
    def one(case):
        if budget_s is not None and time.monotonic() - start > budget_s:
            return
        name, model, feeds = case
        outcome, detail = run_case(model, feeds, providers, limits)
        counts[outcome] += 1
        if outcome == "named":
            errors[detail.split(":")[0]] += 1
        if outcome in BUGS:
            last.update(seed=name, outcome=outcome, detail=detail,
                        model=base64.b64encode(model).decode(), feeds=repr(feeds))
            bugs.append(dict(last))
            if stop_on_bug:
                raise AssertionError(f"{outcome}: {detail}")

    try:
        one()
    except AssertionError:
        pass  # the minimal case is the last one hypothesis ran (it replays it last)
    summary = {"cases": sum(counts.values()), "counts": dict(counts), "named_by_type": dict(errors),
               "seconds": round(time.monotonic() - start, 1), "seed": seed_value,
               "providers": providers or "default", "bugs": len(bugs)}
    if bugs:
        summary["minimal"] = last
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--providers", default="CPUExecutionProvider", help="comma-separated; '' = default")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--memory-gb", type=float, default=3.0, help="address space per case, over the parent's")
    parser.add_argument("--budget", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--keep-going", action="store_true", help="count every bug instead of shrinking the first")
    parser.add_argument("--json", default="", help="write the summary here")
    args = parser.parse_args()
    providers = [p for p in args.providers.split(",") if p] or None
    summary = campaign(args.examples, args.seed, providers, Limits(args.timeout, int(args.memory_gb * (1 << 30))),
                       args.budget, stop_on_bug=not args.keep_going)
    text = json.dumps(summary, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    sys.exit(1 if summary["bugs"] else 0)


if __name__ == "__main__":
    import ort_core  # noqa: F401  (imported before forking: each child starts warm)
    import ort_ep_cpu  # noqa: F401

    main()
