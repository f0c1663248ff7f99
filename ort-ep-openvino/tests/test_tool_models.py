"""onnxruntime's tool models (``ort_core.testing.tool_models``) and its com.microsoft quantization
ops through [OpenVINO, CPU]: OpenVINO takes what it computes as onnxruntime does and declines
the contrib ops it converts but computes otherwise (``DIVERGENT_MS_OPS``), which then run on the
CPU provider. Compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from conftest import OV, reference, session
from ort_core.testing import tool_models

MS = "com.microsoft"


@pytest.mark.parametrize("name", sorted(tool_models.TOOL_MODELS))
def test_tool_model_through_openvino_matches_onnxruntime(name):
    data, feeds = tool_models.TOOL_MODELS[name]()
    want = reference(data, feeds)
    got = session(data).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * float(np.abs(w).max()))


def _node(op, inputs, consts, x, out_dtype, **attrs):
    node = helper.make_node(op, inputs, ["y"], domain=MS, **attrs)
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]).SerializeToString()


def _cases():
    rng = np.random.default_rng(0)
    u8 = rng.integers(0, 256, (2, 3, 8, 8)).astype(np.uint8)
    q = {"sa": np.array(0.02, np.float32), "za": np.array(3, np.uint8), "sb": np.array(0.05, np.float32),
         "zb": np.array(7, np.uint8), "sc": np.array(0.09, np.float32), "zc": np.array(5, np.uint8), "b": u8[::-1].copy()}
    unary = {"sx": np.array(0.05, np.float32), "zx": np.array(128, np.uint8), "sy": np.array(0.04, np.float32),
             "zy": np.array(0, np.uint8)}
    concat = {"sy": np.array(0.1, np.float32), "zy": np.array(10, np.uint8), "s1": np.array(0.03, np.float32),
              "z1": np.array(128, np.uint8), "x1": u8}
    dqmm = {"w": rng.integers(-128, 128, (8, 16)).astype(np.int8), "s": np.array(0.02, np.float32), "z": np.array(0, np.int8)}
    f = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    return {
        "QLinearAdd": (_node("QLinearAdd", ["x", "sa", "za", "b", "sb", "zb", "sc", "zc"], q, u8, np.uint8), u8),
        "QLinearMul": (_node("QLinearMul", ["x", "sa", "za", "b", "sb", "zb", "sc", "zc"], q, u8, np.uint8), u8),
        "QLinearSigmoid": (_node("QLinearSigmoid", ["x", "sx", "zx", "sy", "zy"], unary, u8, np.uint8), u8),
        "QLinearLeakyRelu": (_node("QLinearLeakyRelu", ["x", "sx", "zx", "sy", "zy"], unary, u8, np.uint8, alpha=0.1), u8),
        "QLinearAveragePool": (_node("QLinearAveragePool", ["x", "sx", "zx", "sy", "zy"], unary, u8, np.uint8,
                                     kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), u8),
        "QLinearConcat": (_node("QLinearConcat", ["sy", "zy", "x", "sy", "zy", "x1", "s1", "z1"], concat, u8, np.uint8, axis=1), u8),
        "DynamicQuantizeMatMul": (_node("DynamicQuantizeMatMul", ["x", "w", "s", "z"], dqmm, f, np.float32), f),
    }


@pytest.mark.parametrize("op", sorted(_cases()))
def test_divergent_contrib_ops_are_declined_and_match(op):
    data, x = _cases()[op]
    sess = session(data)
    placement = str(sess.get_placement())
    assert f"-> {OV}" not in placement, placement
    got, want = sess.run(None, {"x": x})[0], reference(data, {"x": x})[0]
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))
    else:
        assert int(np.abs(got.astype(np.int32) - want.astype(np.int32)).max()) <= 1


def test_dynamically_quantized_ocr_model_through_openvino():
    from conftest import real_model

    path = real_model("ocr-ddddocr-quant")
    x = np.random.default_rng(0).uniform(0, 1, (1, 1, 64, 160)).astype(np.float32)
    want = reference(open(path, "rb").read(), {"input1": x})[0]
    got = session(path).run(None, {"input1": x})[0]
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    # 22 dynamic requantizations amplify float32 rounding (see ort-ep-cpu's test_tool_models)
    assert float(np.abs(got - want).max()) <= 0.03 * float(np.abs(want).max())


def test_divergent_ms_ops_table_names_real_ops():
    import onnxruntime.capi.onnxruntime_pybind11_state as C

    from ort_ep_openvino.capability import DIVERGENT_MS_OPS

    known = {s.name for s in C.get_all_operator_schema() if s.domain == MS}
    assert set(DIVERGENT_MS_OPS) <= known


@pytest.mark.parametrize("dot_products", [True, False])
def test_qdq_pairs_stay_off_openvino_on_cpus_without_int8_dot_products(monkeypatch, dot_products):
    """Without VNNI or AMX, OpenVINO's multi-threaded 8-bit kernels gave a QDQ CNN 8 output
    steps off on some runs (1 on others): its Q/DQ nodes are declined there, with the reason."""
    from ort_core.testing import parity
    from ort_ep_openvino import capability

    monkeypatch.setattr(capability, "cpu_has_int8_dot_products", lambda: dot_products)
    monkeypatch.setattr(capability, "_cache", {})  # answers kept from other tests' CPUs
    model = parity.ZOO["qdq_uint8"]()
    placement = str(session(model.SerializeToString()).get_placement())
    declined = [line for line in placement.splitlines() if "QuantizeLinear" in line and f"-> {OV}" not in line]
    if dot_products:
        assert f"DequantizeLinear -> {OV}" in placement, placement
    else:
        assert declined and f"QuantizeLinear -> {OV}" not in placement, placement
        assert "not repeatable on a CPU without VNNI or AMX" in placement, placement
