"""ort_core.hostshapes: which nodes a device provider keeps on the host, and their numpy kernels."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from ort_core import GraphView
from ort_core.hostshapes import host_kernel, host_nodes


def _view(opset: int = 17) -> GraphView:
    # x -> Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape(x); Relu(x) is device work;
    # a large integer initializer is data, so the Add reading it is not a host node
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["y"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["big", "big"], ["data"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.arange(5000, dtype=np.int64), "big")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("data", TensorProto.INT64, [5000])], inits)
    # dtypes of the intermediate values come from shape inference, as in a session
    proto = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    model = ir.serde.deserialize_model(proto)
    return GraphView(model.graph, opset_imports=dict(model.opset_imports), ir_version=model.ir_version)


def test_the_shape_chain_is_host_work_and_the_rest_is_not():
    view = _view()
    chosen = {view.nodes[k].op_type for k in host_nodes(view)}
    assert chosen == {"Shape", "Gather", "Unsqueeze", "Concat"}


def test_host_kernels_compute_the_shape_and_read_only_metadata():
    view = _view()
    by_op = {n.op_type: n for n in view.nodes}
    shape = host_kernel(by_op["Shape"], [np.dtype(np.float32)])
    assert shape.host_inputs == frozenset({0})  # a graph input starts on the host
    assert list(shape.run(np.zeros((2, 3, 4), np.float32))) == [2, 3, 4]
    gather = host_kernel(by_op["Gather"], [np.dtype(np.float32)])
    assert gather.host_inputs == frozenset({0, 1}) and int(gather.run(np.array([2, 3, 4]), np.array(0))) == 2
    concat = host_kernel(by_op["Concat"], [])
    assert list(concat.run(np.array([2]), np.array([-1]))) == [2, -1]
