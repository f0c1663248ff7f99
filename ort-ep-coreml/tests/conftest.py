"""Shared helpers: build a model's Core ML packages, run them with the test-only MIL evaluator
through the provider's own kernel, and compare with onnxruntime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))

from mil_test_evaluator import MilTestEvaluator  # noqa: E402

from ort_ep_coreml import PROVIDER_NAME  # noqa: E402
from ort_ep_coreml.build import build_model  # noqa: E402
from ort_ep_coreml.kernel import GroupKernel  # noqa: E402
from ort_ep_coreml.options import complete, resolve  # noqa: E402
from ort_ep_coreml.package import load  # noqa: E402

COREML = PROVIDER_NAME
macos_only = pytest.mark.skipif(sys.platform != "darwin", reason="Core ML runs on macOS only (compile and predict)")

_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
               np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
               np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.float64): TensorProto.DOUBLE}


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from ort_core.testing import exact_reference  # exact where onnxruntime saturates uint8 x int8

    sess = exact_reference.session(model)
    return sess.run(None, feeds)


def node_model(op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
               outputs: int = 1, opset: int = 17, input_order: list[str] | None = None, dims: dict | None = None,
               **attrs) -> onnx.ModelProto:
    """A one-node model: ``inputs`` are graph inputs (their arrays give dtype and shape; a name in
    ``dims`` maps axis -> dim_param), ``consts`` initializers; ``input_order`` the node's inputs
    ('' for an omitted one)."""
    consts = consts or {}
    order = input_order or [*inputs, *consts]
    node = helper.make_node(op, order, [f"y{k}" for k in range(outputs)], name=f"{op.lower()}_node", **attrs)
    graph_inputs = []
    for name, value in inputs.items():
        shape: list = list(value.shape)
        for axis, param in (dims or {}).get(name, {}).items():
            shape[axis] = param
        graph_inputs.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[value.dtype], shape))
    graph = helper.make_graph([node], op, graph_inputs,
                              [helper.make_tensor_value_info(f"y{k}", TensorProto.UNDEFINED, None) for k in range(outputs)],
                              [numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def run_built(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path, options: dict | None = None,
              dims: dict | None = None) -> tuple[list[np.ndarray], MilTestEvaluator]:
    """Build ``model`` (one group of all its nodes is expected), then run the saved package with
    the evaluator through ``GroupKernel``; the outputs come in the model's output order."""
    report = build_model(model, tmp, options, dims)
    assert not report.declined, report.declined
    assert len(report.groups) == 1, report.groups
    ctx = onnx.load(str(report.context_model))
    [node] = [n for n in ctx.graph.node if n.op_type == "EPContext"]
    built = load(report.packages[0].parent)
    evaluator = MilTestEvaluator(built.package)
    kernel = GroupKernel(built, list(node.input), resolve(complete(options), dims), node.name, model=evaluator)
    values = dict(zip(node.output, kernel(*[feeds[n] for n in node.input])))
    return [values[o.name] for o in model.graph.output], evaluator


def assert_close(actual: list[np.ndarray], expected: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, (k, a.shape, e.shape, a.dtype, e.dtype)
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, err_msg=f"output {k}")


@pytest.fixture
def evaluator_device(monkeypatch):
    """Sessions on this machine with the provider usable, its packages run by the test-only MIL
    evaluator instead of Core ML: the whole path (options, capability, grouping, build, cache,
    kernel I/O) runs as on a Mac, with the evaluator's numbers.

    The registry caches each provider's devices per process, so its cached Linux answer is
    dropped before and after (the test reaches into core's registry for that)."""
    import ort_core
    from ort_ep_coreml import _ct, kernel

    registry = ort_core.registry()
    registry.providers()
    monkeypatch.setattr(_ct, "can_run", lambda: True)
    monkeypatch.setattr(kernel, "load_model", lambda built, settings: MilTestEvaluator(built.package))
    registry._devices.pop(COREML, None)
    yield
    registry._devices.pop(COREML, None)


def session(model, options: dict | None = None, sess_options=None):
    import ort_core as ort

    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options, providers=[(COREML, options or {}), "CPUExecutionProvider"])


def coreml_state(sess) -> dict:
    bound = next(bp for bp in sess._providers if bp.name == COREML)
    return bound.ctx.state
