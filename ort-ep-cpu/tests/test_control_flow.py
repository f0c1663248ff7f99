"""If, Loop and Scan: outputs against onnxruntime, outer-scope values, body placement."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from device_double import WrappedDevice

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=OPSET)
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _both(model, feeds):
    """Our outputs and onnxruntime's for the same model and feeds."""
    ours = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, theirs


def _if_model():
    # then: Relu(x) + w (x and w from the outer scope); else: x * w
    w = helper.make_tensor("w", F, [3], [0.5, -1.0, 2.0])
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "w"], ["t"])],
        "then", [], [helper.make_tensor_value_info("t", F, [3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [3])]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if0")
    return _model(
        [node],
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3])],
        [w],
    )


@pytest.mark.parametrize("cond", [True, False])
def test_if_reads_outer_scope_values(cond):
    x = np.array([-1.0, 2.0, -3.0], dtype=np.float32)
    ours, theirs = _both(_if_model(), {"c": np.array(cond), "x": x})
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


@pytest.mark.parametrize("cond", [np.array(True), np.array([False]), np.array([[True]])])
def test_if_branches_read_different_outer_values_in_their_own_order(cond):
    """then reads b then a, else reads c alone: each branch gets its outer values by position
    (ordered once at creation); conditions of shape (), (1,) and (1, 1); two outputs."""
    then_g = helper.make_graph(
        [helper.make_node("Sub", ["b", "a"], ["t"]), helper.make_node("Neg", ["b"], ["t2"])], "then", [],
        [helper.make_tensor_value_info("t", F, [2]), helper.make_tensor_value_info("t2", F, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Abs", ["c"], ["e"]), helper.make_node("Identity", ["c"], ["e2"])], "else", [],
        [helper.make_tensor_value_info("e", F, [2]), helper.make_tensor_value_info("e2", F, [2])],
    )
    node = helper.make_node("If", ["cond"], ["y", "y2"], then_branch=then_g, else_branch=else_g)
    model = _model(
        [node],
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, list(cond.shape))]
        + [helper.make_tensor_value_info(n, F, [2]) for n in ("a", "b", "c")],
        [helper.make_tensor_value_info("y", F, [2]), helper.make_tensor_value_info("y2", F, [2])],
    )
    feeds = {"cond": cond, "a": np.array([1.0, 2.0], np.float32), "b": np.array([5.0, 7.0], np.float32),
             "c": np.array([-3.0, 4.0], np.float32)}
    ours, theirs = _both(model, feeds)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_if_branch_nodes_are_placed_and_reported_with_their_graph_path():
    session = ort.InferenceSession(_if_model().SerializeToString())
    by_graph = {(p.graph, p.op_type): p.provider for p in session.get_placement().nodes}
    assert by_graph[("", "If")] == "CPUExecutionProvider"
    assert by_graph[("if0/then_branch", "Relu")] == "CPUExecutionProvider"
    assert by_graph[("if0/then_branch", "Add")] == "CPUExecutionProvider"
    assert by_graph[("if0/else_branch", "Mul")] == "CPUExecutionProvider"


def test_body_nodes_can_go_to_another_provider():
    plugin = WrappedDevice("ReluDeviceExecutionProvider", ("Relu",), "Relu:0")
    assert ort.register(plugin, "relu-device")
    try:
        session = ort.InferenceSession(_if_model().SerializeToString(), providers=[plugin.name, "CPUExecutionProvider"])
        placement = session.get_placement()
        relu = next(p for p in placement.nodes if p.op_type == "Relu")
        assert (relu.graph, relu.provider) == ("if0/then_branch", plugin.name)
        assert any(c.graph == "if0/then_branch" for c in placement.copies)
        x = np.array([-1.0, 2.0, -3.0], dtype=np.float32)
        y = session.run(None, {"c": np.array(True), "x": x})[0]
        np.testing.assert_allclose(y, np.maximum(x, 0) + np.array([0.5, -1.0, 2.0], dtype=np.float32))
    finally:
        ort.unregister(plugin)


def _loop_model():
    # carried: s <- s + x * i (x from the outer scope); scan output: s at each step; stops when s > 20
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
            helper.make_node("ReduceSum", ["s_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["s_out"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_in", F, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", F, [2]),
            helper.make_tensor_value_info("scan", F, [2]),
        ],
    )
    node = helper.make_node("Loop", ["M", "cond", "s0"], ["s_final", "scans"], body=body, name="loop0")
    return _model(
        [node],
        [
            helper.make_tensor_value_info("M", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s0", F, [2]),
            helper.make_tensor_value_info("x", F, [2]),
        ],
        [helper.make_tensor_value_info("s_final", F, [2]), helper.make_tensor_value_info("scans", F, [None, 2])],
        [helper.make_tensor("limit", F, [], [20.0])],
    )


@pytest.mark.parametrize("trips", [0, 1, 3, 50])
def test_loop_matches_onnxruntime(trips):
    feeds = {
        "M": np.array(trips, dtype=np.int64),
        "cond": np.array(True),
        "s0": np.array([1.0, 0.5], dtype=np.float32),
        "x": np.array([0.5, 1.0], dtype=np.float32),
    }
    ours, theirs = _both(_loop_model(), feeds)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6)
    placement = ort.InferenceSession(_loop_model().SerializeToString()).get_placement()
    # (the optimizer may drop the body's Identity)
    assert {p.op_type for p in placement.nodes if p.graph == "loop0/body"} >= {"Cast", "Mul", "Add", "ReduceSum", "Less"}


@pytest.mark.parametrize("directions", [(0, 0), (1, 0), (0, 1)])
def test_scan_matches_onnxruntime(directions):
    in_dir, out_dir = directions
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]), helper.make_node("Mul", ["acc_out", "k"], ["out"])],
        "body",
        [helper.make_tensor_value_info("acc_in", F, [3]), helper.make_tensor_value_info("row", F, [3])],
        [helper.make_tensor_value_info("acc_out", F, [3]), helper.make_tensor_value_info("out", F, [3])],
    )
    node = helper.make_node(
        "Scan", ["init", "xs"], ["final", "ys"], body=body, num_scan_inputs=1,
        scan_input_axes=[1], scan_input_directions=[in_dir], scan_output_directions=[out_dir], scan_output_axes=[-1],
    )
    model = _model(
        [node],
        [helper.make_tensor_value_info("init", F, [3]), helper.make_tensor_value_info("xs", F, [3, 4]),
         helper.make_tensor_value_info("k", F, [])],
        [helper.make_tensor_value_info("final", F, [3]), helper.make_tensor_value_info("ys", F, [3, 4])],
    )
    rng = np.random.default_rng(0)
    feeds = {"init": rng.random(3, dtype=np.float32), "xs": rng.random((3, 4), dtype=np.float32),
             "k": np.array(2.0, dtype=np.float32)}
    ours, theirs = _both(model, feeds)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_nested_bodies_read_values_two_scopes_out():
    # main: w; Loop body: If whose branches read w (two scopes out) and the body's carried s
    then_g = helper.make_graph([helper.make_node("Add", ["s_in", "w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["s_in", "w"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [2])])
    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.INT64, [], [2])),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["s_out"], then_branch=then_g, else_branch=else_g, name="inner_if"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", F, [2])],
    )
    node = helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body, name="outer_loop")
    model = _model(
        [node],
        [helper.make_tensor_value_info("M", TensorProto.INT64, []), helper.make_tensor_value_info("s0", F, [2]),
         helper.make_tensor_value_info("w", F, [2])],
        [helper.make_tensor_value_info("s", F, [2])],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0])],
    )
    feeds = {"M": np.array(5, dtype=np.int64), "s0": np.array([1.0, 2.0], np.float32),
             "w": np.array([0.5, -1.0], np.float32)}
    ours, theirs = _both(model, feeds)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)
    graphs = {p.graph for p in ort.InferenceSession(model.SerializeToString()).get_placement().nodes}
    assert {"", "outer_loop/body", "outer_loop/body/inner_if/then_branch", "outer_loop/body/inner_if/else_branch"} <= graphs


def _distances_model(elem, axes_as_input: bool, keepdims: int = 0):
    """skl2onnx's squared Euclidean distances (``onnx_cdist``): a Scan over the rows y_t of Y
    whose body returns ReduceSumSquare(X - y_t, axes=[1]) and passes X on."""
    reduce_inputs = ["diff"] + (["axes"] if axes_as_input else [])
    reduce_attrs = {"keepdims": keepdims} if axes_as_input else {"axes": [1], "keepdims": keepdims}
    body_nodes = [helper.make_node("Identity", ["next_in"], ["next_out"]),
                  helper.make_node("Sub", ["next_in", "next"], ["diff"]),
                  helper.make_node("ReduceSumSquare", reduce_inputs, ["reduced"], **reduce_attrs),
                  helper.make_node("Identity", ["reduced"], ["scan_out"])]
    initializers = [onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")] if axes_as_input else []
    body = helper.make_graph(body_nodes, "body",
                             [helper.make_tensor_value_info("next_in", elem, None),
                              helper.make_tensor_value_info("next", elem, None)],
                             [helper.make_tensor_value_info("next_out", elem, None),
                              helper.make_tensor_value_info("scan_out", elem, None)], initializers)
    scan = helper.make_node("Scan", ["X", "Y"], ["X_out", "D"], body=body, num_scan_inputs=1)
    model = helper.make_model(
        helper.make_graph([scan], "g", [helper.make_tensor_value_info("X", elem, [None, 5]),
                                        helper.make_tensor_value_info("Y", elem, [None, 5])],
                          [helper.make_tensor_value_info("X_out", elem, None), helper.make_tensor_value_info("D", elem, None)]),
        opset_imports=[helper.make_opsetid("", 18 if axes_as_input else 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("elem,dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)])
@pytest.mark.parametrize("axes_as_input", [False, True])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_squared_distances_scan_runs_as_one_step(elem, dtype, axes_as_input, keepdims, monkeypatch):
    """The squared-distance Scan (keepdims 0: skl2onnx's form) runs all its steps at once, with
    the per-step path's values to the bit and onnxruntime's within float rounding; keepdims 1
    is another body and keeps the per-step path. Y has more rows than one chunk holds."""
    from ort_ep_cpu.kernels import control_flow

    monkeypatch.setattr(control_flow, "CDIST_CHUNK", 64)
    recognise = control_flow._squared_distances_body
    seen: list[bool] = []
    monkeypatch.setattr(control_flow, "_squared_distances_body", lambda node, graph: seen.append(recognise(node, graph)) or seen[-1])
    data = _distances_model(elem, axes_as_input, keepdims)
    rng = np.random.default_rng(4)
    feeds = {"X": rng.standard_normal((7, 5)).astype(dtype), "Y": rng.standard_normal((40, 5)).astype(dtype)}
    fast = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert seen == [keepdims == 0]
    monkeypatch.setattr(control_flow, "_squared_distances_body", lambda node, graph: False)
    steps = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for f, s, w in zip(fast, steps, want):
        assert f.dtype == w.dtype and f.shape == w.shape
        np.testing.assert_array_equal(f, s)
        np.testing.assert_allclose(f, w, rtol=1e-6)


def test_scan_over_a_strided_input_copies_each_step_alone():
    """Each step's slice of a scan input is copied alone: np.take copied a strided input (a
    column-major feed, a Transpose's view) whole at every step, 512 KB 256 times here (traced
    by tracemalloc, which numpy reports its buffers to). Values: onnxruntime's."""
    import tracemalloc

    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["row"], ["s"], keepdims=0), helper.make_node("Add", ["acc_in", "s"], ["acc_out"])],
        "body", [helper.make_tensor_value_info("acc_in", F, []), helper.make_tensor_value_info("row", F, [512])],
        [helper.make_tensor_value_info("acc_out", F, []), helper.make_tensor_value_info("s_out", F, [])],
    )
    body.node.append(helper.make_node("Identity", ["s"], ["s_out"]))
    nodes = [helper.make_node("Scan", ["init", "x"], ["total", "sums"], body=body, num_scan_inputs=1)]
    model = _model(nodes, [helper.make_tensor_value_info("init", F, []), helper.make_tensor_value_info("x", F, [256, 512])],
                   [helper.make_tensor_value_info("total", F, []), helper.make_tensor_value_info("sums", F, [256])])
    # (a column-major input: each step's row is strided)
    x = np.asfortranarray(np.random.default_rng(0).random((256, 512), dtype=np.float32))
    feeds = {"init": np.array(0, np.float32), "x": x}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    tracemalloc.start()
    try:
        ours = sess.run(None, feeds)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert peak < feeds["x"].nbytes // 4
