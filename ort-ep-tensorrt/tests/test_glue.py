"""The provider's glue against a FAKE tensorrt module (tests/fake_tensorrt.py): parser answers
turned into claims and reasons, option and profile parsing, engine-cache keys and what
invalidates them, the timing cache, and TensorRT 10 versus 11 precision handling."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from fake_tensorrt import FakeTensorRT
from ort_core import GraphView
from ort_core.session import validate_options
from ort_ep_tensorrt import PROVIDER_NAME
from ort_ep_tensorrt.cache import EngineCache, EngineKey
from ort_ep_tensorrt.capability import capability
from ort_ep_tensorrt.engine import BuildSettings, EngineKernel, engine_key
from ort_ep_tensorrt.options import OPTIONS, check_profiles, parse_shapes


def options(**given) -> dict:
    return validate_options(PROVIDER_NAME, OPTIONS, given)


def view(model: onnx.ModelProto) -> GraphView:
    m = ir.serde.deserialize_model(model)
    return GraphView(m.graph, opset_imports=dict(m.opset_imports), ir_version=m.ir_version)


def chain() -> onnx.ModelProto:
    """Conv -> Relu -> NonZero-free TopK (unsupported) -> Add -> Relu, then an EPContext-free tail."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("TopK", ["r", "k"], ["t", "ti"], name="topk", axis=3),
        helper.make_node("Add", ["t", "t"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 2])], [w, k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_parser_subgraphs_become_claims_with_the_parsers_reasons():
    trt = FakeTensorRT()
    graph = view(chain())
    cap = capability(trt, None, graph, frozenset(range(5)), options())
    assert [(c.nodes, c.fuse) for c in cap.claims] == [((0, 1), True), ((3, 4), True)]
    assert cap.declined == {2: "TensorRT parser: No importer registered for op: TopK"}


def test_min_subgraph_size_and_excluded_op_types_narrow_the_claims():
    trt = FakeTensorRT()
    graph = view(chain())
    cap = capability(trt, None, graph, frozenset(range(5)), options(trt_min_subgraph_size="3"))
    assert cap.claims == []
    assert cap.declined[0] == "group too small: 2 node(s) < trt_min_subgraph_size=3"
    cap = capability(trt, None, graph, frozenset(range(5)), options(trt_op_types_to_exclude="Relu,Add"))
    assert [c.nodes for c in cap.claims] == [(0,)]
    assert cap.declined[1] == "Relu is in trt_op_types_to_exclude"
    # only the candidates core offers are asked about
    cap = capability(trt, None, graph, frozenset({3, 4}), options())
    assert [c.nodes for c in cap.claims] == [(3, 4)] and cap.declined == {}


def test_epcontext_nodes_claimed_only_when_they_are_ours():
    def ctx(source: str) -> onnx.NodeProto:
        return helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", name=f"ctx_{source}",
                                source=source, embed_mode=1, ep_cache_context=b"blob", main_context=1)

    for source, claimed in ((PROVIDER_NAME, True), ("QNNExecutionProvider", False)):
        graph = helper.make_graph([ctx(source)], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        cap = capability(FakeTensorRT(), None, view(model), frozenset({0}), options())
        assert bool(cap.claims) is claimed
        assert claimed or cap.declined[0] == "an EPContext node of another provider"


def test_profile_shapes_parse_in_onnxruntimes_format():
    assert parse_shapes("input_ids:1x128,attention_mask:1x128") == {"input_ids": (1, 128), "attention_mask": (1, 128)}
    assert parse_shapes("input:0:1x3x224x224") == {"input:0": (1, 3, 224, 224)}  # ':' inside a name
    assert parse_shapes("") == {}
    for bad in ("x:1x3xa", "x", ":1x3", "x:1,x:2"):
        with pytest.raises(ValueError):
            parse_shapes(bad)


@pytest.mark.parametrize("given, message", [
    ({"trt_profile_min_shapes": "x:1x3"}, "trt_profile_opt_shapes, trt_profile_max_shapes missing"),
    ({"trt_profile_min_shapes": "x:1x3", "trt_profile_opt_shapes": "y:1x3", "trt_profile_max_shapes": "x:1x3"},
     "each must name the same inputs"),
    ({"trt_profile_min_shapes": "x:4x3", "trt_profile_opt_shapes": "x:2x3", "trt_profile_max_shapes": "x:8x3"},
     "need min <= opt <= max"),
    ({"trt_profile_min_shapes": "x:1x3", "trt_profile_opt_shapes": "x:1x3x1", "trt_profile_max_shapes": "x:1x3"},
     "ranks differ"),
])
def test_profile_errors_name_the_problem(given, message):
    with pytest.raises(ValueError, match=message):
        check_profiles(options(**given))


def test_unknown_option_names_the_valid_keys():
    from ort_core import InvalidArgument

    with pytest.raises(InvalidArgument, match="trt_fp16_enabled.*trt_fp16_enable"):
        options(trt_fp16_enabled="1")


def _settings(trt, tmp_path, **given) -> BuildSettings:
    return BuildSettings.from_options(trt, options(trt_engine_cache_enable="1", trt_engine_cache_path=str(tmp_path),
                                                   **given), "8.9")


def _mlp() -> onnx.ModelProto:
    from ort_core.testing import models

    return models.mlp(in_features=8, hidden=8, layers=1, classes=4)


def _kernel(trt, settings, model=None, profile=None):
    model = model or _mlp()
    profile = profile or {"x": ((2, 8), (2, 8), (2, 8))}
    return EngineKernel(trt, None, None, "group 0", ["x"], [o.name for o in model.graph.output], [np.float32],
                        model=model, settings=settings, static_profile=profile)


def test_engine_cache_key_covers_everything_that_makes_a_different_engine(tmp_path):
    trt = FakeTensorRT()
    base = _settings(trt, tmp_path)
    data = _mlp().SerializeToString()
    profile = {"x": ((1, 8), (4, 8), (8, 8))}
    key = engine_key(data, base, profile)
    variants = [
        engine_key(data + b" ", base, profile),
        engine_key(data, _settings(FakeTensorRT("10.10.0"), tmp_path), profile),
        engine_key(data, BuildSettings.from_options(trt, options(), "9.0"), profile),
        engine_key(data, base, {"x": ((1, 8), (4, 8), (16, 8))}),
        engine_key(data, _settings(trt, tmp_path, trt_fp16_enable="1"), profile),
        engine_key(data, _settings(trt, tmp_path, trt_int8_enable="1"), profile),
        engine_key(data, _settings(trt, tmp_path, trt_builder_optimization_level="5"), profile),
    ]
    digests = {key.digest(), *(v.digest() for v in variants)}
    assert len(digests) == len(variants) + 1
    assert engine_key(data, base, dict(profile)).digest() == key.digest()  # and stable


def test_cached_engine_is_reused_and_a_stale_one_rebuilt_with_the_reason(tmp_path, caplog):
    trt = FakeTensorRT()
    caplog.set_level(logging.INFO, "ort_core")
    _kernel(trt, _settings(trt, tmp_path))
    assert len(trt.builds) == 1
    _kernel(trt, _settings(trt, tmp_path))
    assert len(trt.builds) == 1 and "engine loaded from the cache" in caplog.text
    caplog.clear()
    _kernel(trt, _settings(trt, tmp_path, trt_builder_optimization_level="5"))
    assert len(trt.builds) == 2
    assert "was built for builder_optimization_level 3 (now 5)" in caplog.text
    # a corrupt engine file under the right name is rebuilt, saying why
    for engine in tmp_path.glob("*.engine"):
        engine.write_bytes(b"garbage")
    caplog.clear()
    _kernel(trt, _settings(trt, tmp_path))
    assert len(trt.builds) == 3 and "cannot be deserialized" in caplog.text
    # a foreign engine (its metadata disagrees with its name) is rebuilt too
    meta = next(p for p in sorted(tmp_path.glob("*.json")) if '"builder_optimization_level": 3' in p.read_text())
    meta.write_text(meta.read_text().replace('"8.9"', '"7.5"'))
    caplog.clear()
    _kernel(trt, _settings(trt, tmp_path))
    assert len(trt.builds) == 4 and "does not match its name" in caplog.text


def test_timing_cache_is_read_and_written(tmp_path):
    trt = FakeTensorRT()
    settings = BuildSettings.from_options(trt, options(trt_timing_cache_enable="1", trt_timing_cache_path=str(tmp_path)), "8.6")
    _kernel(trt, settings)
    path = tmp_path / "TensorrtExecutionProvider_cache_sm86.timing"
    assert path.read_bytes() == b"+timed"
    _kernel(trt, settings)
    assert path.read_bytes() == b"+timed+timed"  # the second build started from the first's cache


def test_tensorrt_10_uses_the_precision_flags():
    trt = FakeTensorRT("10.9.0")
    settings = BuildSettings.from_options(trt, options(trt_fp16_enable="1", trt_max_workspace_size="1024",
                                                       trt_builder_optimization_level="2"), "8.9")
    _kernel(trt, settings)
    build = trt.builds[-1]
    assert build["flags"] == ["FP16"] and build["workspace"] == 1024 and build["level"] == 2
    assert build["model"]["float16_initializers"] == 0  # the model itself is left alone
    assert build["profiles"] == [{"x": [[2, 8], [2, 8], [2, 8]]}]


def test_tensorrt_11_converts_the_subgraph_to_float16_instead(caplog):
    trt = FakeTensorRT("11.4.0")
    _kernel(trt, BuildSettings.from_options(trt, options(trt_fp16_enable="1"), "8.9"))
    build = trt.builds[-1]
    assert build["flags"] == []  # TensorRT 11 has no FP16 flag
    assert build["model"]["float16_initializers"] > 0
    assert "Cast" in build["model"]["ops"]
    assert build["model"]["input_types"] == [TensorProto.FLOAT]  # I/O stays float32
    _kernel(trt, BuildSettings.from_options(trt, options(trt_int8_enable="1"), "8.9"))
    assert trt.builds[-1]["flags"] == []
    assert "has no INT8 builder flag and this subgraph has no QuantizeLinear/DequantizeLinear" in caplog.text


def test_engine_key_stem_names_the_subgraph():
    key = EngineKey("ab" * 32, "10.9.0", "8.9", (), False, False, False, 3)
    assert key.file_stem().startswith("abababababababab_")
    assert EngineCache("unused")._paths(key)[0].suffix == ".engine"
