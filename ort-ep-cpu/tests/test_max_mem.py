"""Issue 23, resource limits: the CPU provider's ``max_mem`` option (OrtArenaCfg's max_mem, as
``gpu_mem_limit`` is for CUDA) turns an allocation bomb into a named error, and the session
stays usable. Each test fails without ``memlimit.py``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core
from ort_ep_cpu import memlimit

MiB = 1 << 20
CPU = "CPUExecutionProvider"


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> bytes:
    graph = helper.make_graph(nodes, "t", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _bomb(op: str) -> bytes:
    """shape (an input) -> ConstantOfShape or Expand -> ReduceSum: the output size is the
    shape input's *value*, known only at run time."""
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if op == "ConstantOfShape":
        first = helper.make_node("ConstantOfShape", ["shape"], ["big"], name="bomb",
                                 value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
        inits = []
    else:
        first = helper.make_node("Expand", ["one", "shape"], ["big"], name="bomb")
        inits = [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])]
    reduce = helper.make_node("ReduceSum", ["big"], ["y"], name="sum", keepdims=0)
    return _model([first, reduce], [shape], [y], inits)


def _session(model: bytes, max_mem=None) -> ort_core.InferenceSession:
    options = {} if max_mem is None else {"max_mem": max_mem}
    return ort_core.InferenceSession(model, providers=[(CPU, options)])


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand"])
def test_a_bomb_of_1e10_elements_is_a_named_error_at_once_and_the_session_stays_usable(op):
    # in a fresh interpreter: its peak RSS is this case's own (a 40 GB ConstantOfShape would
    # otherwise be allocated and filled, or kill the process)
    code = f"""
        import resource, time
        import numpy as np
        import ort_core
        from test_max_mem import _bomb
        session = ort_core.InferenceSession(_bomb({op!r}), providers=[("CPUExecutionProvider",
                                                                      {{"max_mem": str(1 << 30)}})])
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        try:
            session.run(None, {{"shape": np.array([100000, 100000], np.int64)}})
        except ort_core.RuntimeException as error:
            print("ERROR", error)
        print("SECONDS", time.perf_counter() - start)
        print("GROWTH_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        print("SMALL", session.run(None, {{"shape": np.array([3, 4], np.int64)}})[0])
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=__file__.rsplit("/", 1)[0])
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    error = lines["ERROR"]
    assert f"running {op} node. Name:'bomb' Provider:CPUExecutionProvider" in error
    assert "Failed to allocate memory" in error
    assert "Available memory of 1073741824 is smaller than requested bytes of 40000000000" in error
    assert "max_mem=1073741824" in error
    assert float(lines["SECONDS"]) < 1.0
    assert int(lines["GROWTH_KB"]) < 64 * 1024  # nothing of the 40 GB was allocated
    assert float(lines["SMALL"]) == 12.0  # the same session runs a normal input after it


def test_live_intermediates_count_and_the_session_recovers():
    # a = Neg(x), b = Neg(x), y = a + b: a and b are alive together (2 x 1.5 MiB > 2 MiB); feeds
    # and the graph output do not count, so a run on a small x fits and so does a = 1.5 MiB alone
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    model = _model([helper.make_node("Neg", ["x"], ["a"], name="neg_a"),
                    helper.make_node("Neg", ["x"], ["b"], name="neg_b"),
                    helper.make_node("Add", ["a", "b"], ["y"], name="add")], [x], [y])
    session = _session(model, max_mem=2 * MiB)
    big = np.ones(3 * MiB // 8, np.float32)  # 1.5 MiB
    with pytest.raises(ort_core.RuntimeException) as info:
        session.run(None, {"x": big})
    message = str(info.value)
    assert "running Neg node. Name:'neg_b'" in message
    assert "requested bytes of 1572864" in message and "live tensors take 1572864 bytes" in message
    assert "max_mem=2097152" in message
    del info
    for _ in range(3):  # nothing of the failed run stays counted
        np.testing.assert_array_equal(session.run(None, {"x": np.ones(1000, np.float32)})[0], -2)
    budget = session._providers[0].ctx.state["budget"]
    assert budget.live == 0
    # the same input runs where the limit leaves room for both
    np.testing.assert_array_equal(_session(model, max_mem=4 * MiB).run(None, {"x": big})[0], -2)


def test_numpy_memory_error_in_a_kernel_is_the_same_named_error(monkeypatch):
    # the estimate declined (as for an op it does not know): numpy's own MemoryError for a
    # 2^62-byte array (refused by malloc at once) comes out named, limit and option included
    monkeypatch.setattr(memlimit, "output_elements", lambda *args: None)
    session = _session(_bomb("ConstantOfShape"), max_mem=str(1 << 30))
    with pytest.raises(ort_core.RuntimeException) as info:
        session.run(None, {"shape": np.array([1 << 30, 1 << 30], np.int64)})
    message = str(info.value)
    assert "ConstantOfShape node. Name:'bomb'" in message and "requested bytes of 4611686018427387904" in message
    assert "max_mem=1073741824" in message
    assert isinstance(info.value.__cause__.__cause__, MemoryError)  # chained: the node's error, numpy's
    assert session.run(None, {"shape": np.array([2, 2], np.int64)})[0] == 4.0


def test_without_the_option_nothing_is_wrapped_and_memory_errors_are_runtime_exceptions():
    session = _session(_bomb("ConstantOfShape"))
    assert "budget" not in session._providers[0].ctx.state
    assert session.run(None, {"shape": np.array([3, 4], np.int64)})[0] == 12.0
    # onnxruntime reports a failed allocation as RUNTIME_EXCEPTION
    with pytest.raises(ort_core.RuntimeException, match="ConstantOfShape node. Name:'bomb'.*MemoryError"):
        session.run(None, {"shape": np.array([1 << 30, 1 << 30], np.int64)})


@pytest.mark.parametrize("value, expected", [("2147483648", 1 << 31), (1 << 20, 1 << 20), ("0", 0),
                                             (str((1 << 64) - 1), 0)])
def test_max_mem_values(value, expected):
    session = _session(_bomb("Expand"), max_mem=value)
    assert session.get_provider_options()[CPU]["max_mem"] == str(expected)


@pytest.mark.parametrize("value", ["-1", "1GB", True, 1.5])
def test_bad_max_mem_is_refused_naming_the_option(value):
    with pytest.raises(ort_core.InvalidArgument, match="'max_mem'.*bytes >= 0"):
        _session(_bomb("Expand"), max_mem=value)


def test_an_unknown_key_names_the_valid_ones():
    with pytest.raises(ort_core.InvalidArgument, match="unknown provider option 'arena_max_mem'.*max_mem"):
        ort_core.InferenceSession(_bomb("Expand"), providers=[(CPU, {"arena_max_mem": "1"})])


def test_concurrent_runs_share_the_account_and_give_it_back():
    import threading

    from ort_core.testing import models

    model = models.transformer(layers=1)
    feeds = models.random_inputs(model, batch=2)
    expected = ort_core.InferenceSession(model, providers=[CPU]).run(None, feeds)
    session = ort_core.InferenceSession(model.SerializeToString(), providers=[(CPU, {"max_mem": str(1 << 30)})])
    errors = []

    def work():
        try:
            for _ in range(10):
                for want, got in zip(expected, session.run(None, feeds)):
                    np.testing.assert_array_equal(want, got)
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    budget = session._providers[0].ctx.state["budget"]
    assert budget.peak > 0 and budget.live == 0


def test_onnxruntimes_use_arena_option_is_accepted():
    # onnxruntime's CPU provider takes use_arena (tutorials pass it); numpy manages memory here
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort_core.InferenceSession(model.SerializeToString(), providers=[("CPUExecutionProvider", {"use_arena": "0"})])
    assert session.run(None, {"x": np.array([-1, 2], np.float32)})[0].tolist() == [0, 2]
