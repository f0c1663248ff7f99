"""``ort-core compare``: errors per output against onnxruntime, and the first diverging node
named with its op and provider (``ort_core/compare.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core
from fake_providers import HostProvider, OnnxruntimeNodeProvider
from ort_core import Capability, Claim, Kernel, hookimpl
from ort_core import compare as cmp
from ort_core.cli import main

WRONG = "WrongGemmExecutionProvider"


class WrongGemm(HostProvider):
    """Declares com.microsoft FusedGemm and drops its activation, as OpenVINO did with Tanh."""

    fused_ops = (ort_core.FusedOp("FusedGemm"),)

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates) -> Capability | None:
        if ep.name != self.name:
            return None
        cap = Capability()
        for i in sorted(candidates):
            node = graph.nodes[i]
            if (node.domain, node.op_type) == ("com.microsoft", "FusedGemm"):
                cap.claims.append(Claim((i,)))
            else:
                cap.declined[i] = "only FusedGemm"
        return cap

    @hookimpl
    def ort_create_kernel(self, ep, request) -> Kernel | None:
        if ep.name != self.name:
            return None
        return Kernel(run=lambda x, w, b: x @ w.T + b, single_output=True)


def _pooler_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["h"], name="scale"),
         helper.make_node("Gemm", ["h", "w", "b"], ["g"], name="dense", transB=1),
         helper.make_node("Tanh", ["g"], ["t"], name="tanh"),
         helper.make_node("Add", ["t", "one"], ["y"], name="shift")],
        "pooler", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def providers(registry: Any) -> None:
    assert ort_core.register(OnnxruntimeNodeProvider(), "ort-cpu")
    assert ort_core.register(WrongGemm(WRONG), "wrong-gemm")


def test_the_first_diverging_node_is_named_with_its_op_and_provider(providers: None) -> None:
    result = cmp.compare(_pooler_model(), [[WRONG], ["CPUExecutionProvider"]])
    wrong, right = result.results
    assert not wrong.ok and right.ok and not result.ok
    assert wrong.outputs[0].max_abs > 0.1 and right.outputs[0].max_abs < 1e-5
    d = wrong.divergence
    assert (d.node, d.op, d.provider, d.output) == ("dense", "com.microsoft::FusedGemm", WRONG, "t")
    text = result.report()
    assert "first divergence at node 'dense' (com.microsoft::FusedGemm) on WrongGemmExecutionProvider" in text
    assert "MISMATCH" in text and "onnxruntime" in text


def test_at_disable_all_nothing_is_fused_and_all_match(providers: None) -> None:
    # the wrong provider takes no node of the unfused graph: the CPU fallback runs it all
    result = cmp.compare(_pooler_model(), [[WRONG]], level="ORT_DISABLE_ALL")
    assert result.ok and result.results[0].divergence is None


def test_cli(providers: None, tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "pooler.onnx"
    onnx.save(_pooler_model(), path)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((3, 8), np.float32))
    assert main(["compare", str(path), "--providers", f"{WRONG},CPUExecutionProvider", "--inputs", f"x={x}"]) == 1
    out = capsys.readouterr().out
    assert "node 'dense'" in out and "(> " in out
    assert main(["compare", str(path), "--providers", "CPUExecutionProvider", "--level", "ORT_ENABLE_BASIC"]) == 0


def test_bad_arguments_are_named(providers: None, tmp_path: Any) -> None:
    with pytest.raises(ort_core.InvalidArgument, match="NAME=FILE.npy, got 'x'"):
        cmp.parse_inputs(["x"])
    with pytest.raises(ort_core.InvalidArgument, match="cannot read"):
        cmp.parse_inputs([f"x={tmp_path / 'missing.npy'}"])
    with pytest.raises(ort_core.InvalidArgument, match="level 'FAST'; valid: ORT_DISABLE_ALL"):
        cmp.compare(_pooler_model(), [["CPUExecutionProvider"]], level="FAST")
    assert cmp.parse_runners("A,B+C") == [["A"], ["B", "C"]]
    with pytest.raises(ort_core.NoSuchFile, match="missing.onnx"):
        cmp.compare(str(tmp_path / "missing.onnx"), [["CPUExecutionProvider"]])
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ort_core.InvalidProtobuf, match="junk.onnx"):
        cmp.compare(str(tmp_path / "junk.onnx"), [["CPUExecutionProvider"]])


def test_sequence_of_maps_outputs_are_compared_by_their_tensors(providers: None) -> None:
    """ZipMap's output, a list of dicts, is compared key by key within the tolerance (it was
    compared exactly as an object array: a MISMATCH for 6e-8); another structure is named."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["p"]),
         helper.make_node("ZipMap", ["p"], ["z"], domain="ai.onnx.ml", classlabels_strings=["a", "b", "c"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 3]),
         helper.make_value_info("z", helper.make_sequence_type_proto(
             helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    result = cmp.compare(model, [["CPUExecutionProvider"]], "ORT_DISABLE_ALL")
    assert result.ok, result.report()
    row = {k: np.float32(v) for k, v in (("a", 0.2), ("b", 0.3), ("c", 0.5))}
    slightly = [{k: v * np.float32(1 + 1e-6) for k, v in row.items()}]
    ok, = cmp._errors([slightly], [[row]], ["z"], 1e-4, 1e-5)
    assert ok.ok and 0 < ok.max_abs < 1e-6
    off, = cmp._errors([[{"a": row["a"], "b": row["b"]}]], [[row]], ["z"], 1e-4, 1e-5)
    assert not off.ok and "keys" in off.message


def test_a_reference_that_fails_on_the_inputs_is_an_error_naming_it(providers: None) -> None:
    """Seeded random indices out of the data's range: onnxruntime raises, and compare says so
    as an ort_core error (it printed onnxruntime's traceback)."""
    graph = helper.make_graph([helper.make_node("Gather", ["d", "i"], ["y"])], "g",
                              [helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(np.ones(1, np.float32), "d")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ort_core.Fail, match="the reference, onnxruntime .* failed on these inputs.*--inputs"):
        cmp.compare(model, [["CPUExecutionProvider"]])


def test_the_onnxruntime_reference_runs_on_one_thread(providers: None, monkeypatch: Any) -> None:
    """onnxruntime's DynamicQuantizeLSTM gives other values on more threads (a diacritizer's
    logits moved by 0.75): a reference that depends on the thread count blamed the runner."""
    pytest.importorskip("onnxruntime")
    from ort_core.testing import exact_reference

    threads = []
    real = exact_reference.session

    def spy(model: Any, so: Any = None, **kwargs: Any) -> Any:
        threads.append(so.intra_op_num_threads)
        return real(model, so, **kwargs)

    monkeypatch.setattr(exact_reference, "session", spy)
    assert cmp.compare(_pooler_model(), [["CPUExecutionProvider"]]).ok
    assert threads and set(threads) == {1}
