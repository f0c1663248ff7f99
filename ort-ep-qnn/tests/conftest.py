"""Shared helpers: onnxruntime CPU as the reference, sessions on [QNN, CPU], small graphs."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))  # qnn_layout

import ort_core as ort  # noqa: E402
from ort_ep_qnn import _qnn  # noqa: E402

QNN = "QNNExecutionProvider"
CPU = "CPUExecutionProvider"


def qnn_available() -> bool:
    try:
        _qnn.find_library("")
        return True
    except ImportError:
        return False


needs_qnn = pytest.mark.skipif(not qnn_available(), reason=f"no QNN HTP library here; {_qnn.INSTALL_HINT}")


def reference(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from ort_core.testing import exact_reference  # exact where onnxruntime saturates uint8 x int8

    return exact_reference.session(model).run(None, feeds)


def session(model, options: dict | None = None, sess_options=None, batch: int | None = None) -> ort.InferenceSession:
    """A session on [QNN, CPU]; ``batch`` fixes the generated models' ``batch`` dimension."""
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    if batch is not None:
        sess_options = sess_options or ort.SessionOptions()
        sess_options.add_free_dimension_override_by_name("batch", batch)
    return ort.InferenceSession(data, sess_options, providers=[(QNN, options or {}), CPU])


def assert_close(actual, expected, rtol: float, atol: float) -> None:
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, (k, a.shape, e.shape, a.dtype, e.dtype)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {k}")


def rel_error(actual, expected) -> float:
    """max |a - e| / max |e| over all outputs."""
    worst = 0.0
    for a, e in zip(actual, expected):
        scale = float(np.max(np.abs(e))) or 1.0
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - e))) / scale)
    return worst


def qnn_state(sess: ort.InferenceSession) -> dict:
    bound = next(bp for bp in sess._providers if bp.name == QNN)
    return bound.ctx.state


def one_node_model(op: str, inputs: list[tuple[str, np.ndarray | tuple, int]], outputs: list[tuple[str, tuple | None, int]],
                   opset: int = 17, **attrs) -> tuple:
    """A model of one node: ``inputs`` are (name, array for an initializer / shape for a graph
    input, element type). Returns (model, feeds) with random float feeds."""
    rng = np.random.default_rng(0)
    graph_inputs, inits, feeds, names = [], [], {}, []
    for name, value, elem in inputs:
        names.append(name)
        if not name:
            continue
        if isinstance(value, np.ndarray):
            inits.append(numpy_helper.from_array(value, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, value))
            dtype = helper.tensor_dtype_to_np_dtype(elem)
            feeds[name] = rng.standard_normal(value).astype(dtype) if dtype.kind == "f" else rng.integers(0, 3, value).astype(dtype)
    node = helper.make_node(op, names, [n for n, _, _ in outputs], **attrs)
    graph = helper.make_graph([node], op.lower(), graph_inputs,
                              [helper.make_tensor_value_info(n, e, s) for n, s, e in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, feeds


F = TensorProto.FLOAT


def onnxruntime_qnn_session(model, options: dict | None = None):
    """A session of onnxruntime's own QNN EP (the wheel's plugin library, on the same HTP
    simulator) on ``model``: the reference for what QNN computes; skipped where onnxruntime
    cannot load it."""
    import onnxruntime

    try:
        import onnxruntime_qnn

        lib = os.path.join(os.path.dirname(onnxruntime_qnn.__file__), "libonnxruntime_providers_qnn.so")
        if not any(d.ep_name == QNN for d in onnxruntime.get_ep_devices()):
            onnxruntime.register_execution_provider_library(QNN, lib)
        devices = [d for d in onnxruntime.get_ep_devices() if d.ep_name == QNN]
    except Exception as exc:  # an onnxruntime without plugin providers, or no such library
        pytest.skip(f"onnxruntime's QNN EP does not load here: {type(exc).__name__}: {exc}")
    if not devices:
        pytest.skip("onnxruntime's QNN EP lists no device here")
    so = onnxruntime.SessionOptions()
    so.add_provider_for_devices(devices[:1], {"backend_type": "htp", **(options or {})})
    return onnxruntime.InferenceSession(model.SerializeToString(), so)
