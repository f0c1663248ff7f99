"""Resize nearest by an integer factor (the phase-copy path, or with numba the compiled
interleave for rows and columns) against onnxruntime: exact, as it is a copy. Factors on one
or several axes, on the last axis or not, factor 1 mixed in, uint8, and a non-integer factor
(the gather path) for contrast."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu.kernels import _jit


@pytest.mark.parametrize("shape,scales", [
    ((1, 3, 4, 5), [1, 1, 2, 2]),  # the common 2x
    ((2, 2, 3, 4), [1, 1, 3, 1]),  # rows only
    ((1, 2, 3, 4), [1, 1, 1, 4]),  # columns only
    ((2, 3, 2, 3), [1, 2, 2, 3]),  # three axes, one of them the channels
    ((1, 2, 5, 6), [1, 1, 1.5, 2]),  # non-integer on one axis: gathers
])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.UINT8])
@pytest.mark.parametrize("compiled", [False, True])
def test_nearest_integer_upsample_matches_onnxruntime(shape, scales, elem, compiled, monkeypatch):
    """``compiled``: float rows/columns upsampling by the compiled interleave (numba)."""
    used = use_compiled(monkeypatch, compiled, "interleave")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info("y", elem, [None] * 4)],
                              [onnx.numpy_helper.from_array(np.array(scales, np.float32), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    data = model.SerializeToString()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 50).astype(np.float32)
    if elem == TensorProto.UINT8:
        x = rng.integers(0, 255, shape).astype(np.uint8)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    rows_columns = scales[:2] == [1, 1] and all(float(f).is_integer() for f in scales)
    assert bool(used) == (compiled and elem == TensorProto.FLOAT and rows_columns)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("opset, transform", [(10, None), (16, "half_pixel"), (16, "output_half_pixel")])
def test_roi_align_matches_onnxruntime(compiled, mode, ratio, opset, transform, monkeypatch):
    """RoiAlign by the compiled loop (``_jit.roi_align``): onnxruntime's float32 steps, so its
    values to the bit; by numpy (float64 positions and weights) within 1e-4. Regions in and
    partly out of the image, wider and narrower than a bin, on two images."""
    use_compiled(monkeypatch, compiled, "roi_align")
    attrs = {"mode": mode, "output_height": 7, "output_width": 5, "sampling_ratio": ratio, "spatial_scale": 0.25}
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    graph = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 20, 25]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, 4]),
         helper.make_tensor_value_info("b", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
    rng = np.random.default_rng(5)
    corner = rng.uniform(-20, 110, (40, 2))
    feeds = {"x": rng.standard_normal((2, 6, 20, 25)).astype(np.float32),
             "rois": np.concatenate([corner, corner + rng.uniform(0, 60, (40, 2))], 1).astype(np.float32),
             "b": rng.integers(0, 2, 40)}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    if compiled:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("mode, padding", [("linear", "zeros"), ("linear", "border"), ("linear", "reflection"),
                                           ("nearest", "zeros"), ("cubic", "border")])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("spatial", [(9, 11), (4, 5, 6)])
def test_grid_sample_matches_onnxruntime(compiled, mode, padding, align, spatial, monkeypatch):
    """GridSample: 2-D bilinear with zeros or border padding by its compiled loop
    (``_jit.grid_linear``), the other forms by numpy's coordinates and the compiled tap loop
    (``_jit.grid_taps``); the same values as numpy's path, onnxruntime's within 1e-4 (cubic +
    border: onnx.reference's, as the README says). The grid reaches past the image on every
    side."""
    if len(spatial) == 3 and mode == "cubic":
        pytest.skip("GridSample has no cubic mode in 3-D")
    use_compiled(monkeypatch, compiled, "grid_linear")
    nd = len(spatial)
    x_shape = (2, 3) + spatial
    grid_shape = (2, 5, 7, nd) if nd == 2 else (2, 3, 4, 5, nd)
    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "grid": rng.uniform(-1.3, 1.3, grid_shape).astype(np.float32)}
    if (mode, padding) == ("cubic", "border"):
        # onnxruntime differs from the spec outside the image here (README: deliberate)
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, feeds)[0]
    else:
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(_jit, "USE", False)
    numpy_path = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, numpy_path)


def _linear_resize(shape, elem, mode, target, roi=None, opset=13):
    """Resize-``opset`` in linear mode to ``target`` (("scales" | "sizes", values))."""
    kind, values = target
    inputs = ["x", "roi" if roi is not None else "", "scales" if kind == "scales" else "", "sizes" if kind == "sizes" else ""]
    inits = [onnx.numpy_helper.from_array(np.array(values, np.float32 if kind == "scales" else np.int64), kind)]
    if roi is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(roi, np.float32), "roi"))
    node = helper.make_node("Resize", inputs, ["y"], mode="linear", coordinate_transformation_mode=mode,
                            extrapolation_value=-7.0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info("y", elem, [None] * len(shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model.SerializeToString()


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                  "tf_half_pixel_for_nn", "half_pixel_symmetric"])
@pytest.mark.parametrize("shape,target", [
    ((1, 3, 16, 16), ("sizes", [1, 3, 32, 32])),  # NCHW 2x (a U-Net decoder's)
    ((2, 2, 7, 5), ("sizes", [2, 2, 12, 13])),  # up by odd factors
    ((1, 2, 8, 12), ("scales", [1, 1, 0.5, 0.75])),  # down
    ((1, 2, 6, 1), ("scales", [1, 1, 2.5, 1])),  # one axis
    ((1, 5, 6, 3), ("sizes", [1, 11, 9, 3])),  # NHWC
    ((6, 9), ("sizes", [11, 4])),  # 2-D
    ((4, 5, 3), ("sizes", [7, 5, 6])),  # trilinear, 3-D
    ((1, 2, 3, 4, 5), ("scales", [1, 1, 2, 1.5, 0.6])),  # trilinear, 5-D
])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("compiled", [False, True])
def test_linear_resize_is_onnxruntime_s_to_the_bit(shape, target, mode, elem, compiled, monkeypatch):
    """onnxruntime's linear Resize is one formula over the interpolated axes, in float32 in its
    order, integers truncated (8-bit NHWC: in 10-bit fixed point); the outputs are those bits (a
    one-ulp difference turned into a different quantization code downstream, in a quantized
    ISNet: 0.66 off on its mask). ``compiled``: the last two axes by ``_jit.bilinear``. (Scales
    whose products are whole: elsewhere align_corners follows the spec, as
    ``test_family_b.py``'s reference cases check.)"""
    used = use_compiled(monkeypatch, compiled, "bilinear")
    data = _linear_resize(shape, elem, mode, target, opset=19)
    rng = np.random.default_rng(1)
    if elem == TensorProto.FLOAT:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
    else:
        dtype = np.uint8 if elem == TensorProto.UINT8 else np.int8
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    kind, values = target
    nchw = len(shape) == 4 and values[1] == (1 if kind == "scales" else shape[1])
    assert bool(used) == (len(shape) == 2 or nchw)  # the loop asked for where the last two axes are it


def test_linear_resize_crop_and_extrapolate_is_onnxruntime_s_to_the_bit():
    shape = (1, 2, 8, 9)
    data = _linear_resize(shape, TensorProto.FLOAT, "tf_crop_and_resize", ("sizes", [1, 2, 7, 10]),
                          roi=[0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3])
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert (want == -7).any()  # some outputs sample outside the crop
    np.testing.assert_array_equal(got, want)
