"""First use from many threads in a fresh process, and shared sessions under 8 threads, on
every installed provider (each in a fresh interpreter: the first-use race needs one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROVIDERS = subprocess.run(
    [sys.executable, "-c", "import ort_core; print(','.join(ort_core.get_available_providers()))"],
    capture_output=True, text=True, timeout=300,
).stdout.strip().split(",")

CODE = textwrap.dedent("""
    import sys, threading
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    import ort_core

    provider = sys.argv[1]
    w = numpy_helper.from_array(np.linspace(-1, 1, 2 * 2 * 3 * 3, dtype=np.float32).reshape(2, 2, 3, 3), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    xs = [np.random.default_rng(k).random((1, 2, 6, 6), dtype=np.float32) for k in range(8)]
    barrier = threading.Barrier(8)
    errors, available, sessions = [], [], [None] * 8

    def first_use(k):  # every thread's first call at the same moment, in a fresh process
        barrier.wait()
        try:
            available.append(ort_core.get_available_providers())
            sessions[k] = ort_core.InferenceSession(data, providers=[provider])
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=first_use, args=(k,)) for k in range(8)]
    [t.start() for t in threads]; [t.join() for t in threads]
    assert not errors, errors
    assert all(provider in a for a in available), available
    shared = sessions[0]
    want = [shared.run(None, {"x": x})[0] for x in xs]

    def hammer(k):  # one shared session, 8 threads x 100 runs: every result as alone
        try:
            for j in range(100):
                i = (k + j) % 8
                got = shared.run(None, {"x": xs[i]})[0]
                if not np.array_equal(got, want[i]):
                    errors.append(f"thread {k} run {j}: result differs")
                    return
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(8)]
    [t.start() for t in threads]; [t.join() for t in threads]
    assert not errors, errors[:3]
    print("ok", provider, shared.get_providers())
""")


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p])
def test_first_use_and_shared_sessions_from_8_threads(provider):
    done = subprocess.run([sys.executable, "-c", CODE, provider], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"ok {provider}")
