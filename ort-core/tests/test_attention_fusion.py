"""Attention fusion (optimizer/attention_fusion.py): BERT-style scaled-dot-product attention
becomes one com.microsoft Attention (with the Q/K/V projections of one input merged into it)
or, where the projections are not of that form or the provider declines Attention, one
MultiHeadAttention, where every piece is proven; nothing changes where one is not. The reference is onnxruntime (its own optimizations off) running the ORIGINAL
model; it also runs the optimized one, since it has MultiHeadAttention. ort-core's tests have no
CPU provider, so the session tests use a test provider that runs each node through onnxruntime.
Tolerances: float32 rtol 1e-4, atol 1e-5 on one layer, atol 1e-4 on the 2-3 layer transformer
(LayerNorm outputs of size ~1; the fused op scales Q instead of the scores and sums in another
order); float16 rtol/atol 1e-2.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import ort_core
from conftest import initializer as _init
from conftest import make_model
from conftest import onnxruntime_unoptimized as _ort_run
from ort_core import optimizer
from ort_core.optimizer import attention_fusion, basic
from ort_core.testing import models

RNG = np.random.default_rng(0)
B, S, N, HD = 2, 6, 2, 4
D = N * HD


def _everything(node) -> bool:
    return True


def _no_attention(node) -> bool:
    """A gate that declines com.microsoft Attention: the pass makes MultiHeadAttention."""
    return node.op_type != "Attention"


def _apply(model: onnx.ModelProto, supports=_everything) -> onnx.ModelProto:
    """Shape inference (as the session's basic level runs it), then the fusion."""
    m = ir.serde.deserialize_model(model)
    basic.ShapeInferenceQuietPass()(m)
    attention_fusion.AttentionFusionPass(supports)(m)
    ir.passes.common.RemoveUnusedNodesPass()(m)
    return ir.serde.serialize_model(m)


def _count(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def _check(model, optimized, feeds, rtol=1e-4, atol=1e-5):
    onnx.checker.check_model(optimized)
    for got, want in zip(_ort_run(optimized, feeds), _ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def _layer(*, scale="div", mask="b11s", k_form="two", reshape="concat", softmax_axis=-1, seq=S,
           extra_output=None, dtype=np.float32, mask_first=False):
    """One attention layer on input ``x`` (B, seq, D) -> ``y``, with the variations under test.

    scale: div | mul | none | runtime (Div by a graph input) | q (Q divided first) | both (Q and
    K^T multiplied by a constant) | both-runtime (by a graph input); mask: none | b11s (B,1,1,S graph
    input) | full (B,1,S,S) | made (from an int mask as BERT exporters do); k_form: two Transposes
    or one [0,2,3,1]; reshape: concat (Shape/Gather/Concat, dynamic batch) | const ([0,0,N,H]) |
    runtime (a graph input: heads unknown); extra_output: an intermediate also a graph output."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [_init(f"w{c}", (RNG.standard_normal((D, D)) / np.sqrt(D)).astype(dtype)) for c in "qkv"]
    inits += [_init(f"b{c}", (0.1 * RNG.standard_normal(D)).astype(dtype)) for c in "qkv"]
    inputs = [helper.make_tensor_value_info("x", elem, ["batch", seq, D])]
    nodes = []
    for c in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{c}"], [f"{c}mm"]), helper.make_node("Add", [f"{c}mm", f"b{c}"], [c])]
    if reshape == "concat":
        inits += [_init("zero", np.array(0, np.int64)), _init("ax0", np.array([0], np.int64)),
                  _init("tail4", np.array([-1, N, HD], np.int64)), _init("tail3", np.array([-1, D], np.int64))]
        nodes += [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "zero"], ["b0"], axis=0),
                  helper.make_node("Unsqueeze", ["b0", "ax0"], ["b1"]),
                  helper.make_node("Concat", ["b1", "tail4"], ["split"], axis=0),
                  helper.make_node("Concat", ["b1", "tail3"], ["merge"], axis=0)]
    elif reshape == "const":
        inits += [_init("split", np.array([0, 0, N, HD], np.int64)), _init("merge", np.array([0, 0, D], np.int64))]
    elif reshape == "minus1":  # -1 for the head size and the merged hidden size
        inits += [_init("split", np.array([0, 0, N, -1], np.int64)), _init("merge", np.array([0, 0, -1], np.int64))]
    elif reshape == "batch-minus1":  # -1 for the (dynamic) batch, the sequence given
        inits += [_init("split", np.array([-1, seq, N, HD], np.int64)), _init("merge", np.array([-1, seq, D], np.int64))]
    else:
        inputs.append(helper.make_tensor_value_info("split", TensorProto.INT64, [4]))
        inits.append(_init("merge", np.array([0, 0, D], np.int64)))
    for c in "qkv":
        nodes += [helper.make_node("Reshape", [c, "split"], [f"{c}4"]),
                  helper.make_node("Transpose", [f"{c}4"], [f"{c}h"], perm=[0, 2, 1, 3])]
    if k_form == "two":
        nodes.append(helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]))
    else:
        nodes[-3] = helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1])
    qk_in = ["qh", "kt"]
    if scale == "q":  # DistilBERT: Q divided before the product
        inits.append(_init("c", np.array(np.sqrt(HD), dtype)))
        nodes.append(helper.make_node("Div", ["qh", "c"], ["qs"]))
        qk_in = ["qs", "kt"]
    elif scale in ("both", "both-runtime"):  # torch's SDPA export: Q and K^T times sqrt(scale) each
        if scale == "both":
            inits.append(_init("c", np.array(HD ** -0.25, dtype)))
        else:
            inputs.append(helper.make_tensor_value_info("c", elem, []))
        nodes += [helper.make_node("Mul", ["qh", "c"], ["qs"]), helper.make_node("Mul", ["c", "kt"], ["ks"])]
        qk_in = ["qs", "ks"]
    nodes.append(helper.make_node("MatMul", qk_in, ["qk"]))
    scores = "qk"
    if scale == "div":
        inits.append(_init("c", np.array(np.sqrt(HD), dtype)))
        nodes.append(helper.make_node("Div", ["qk", "c"], ["scaled"]))
        scores = "scaled"
    elif scale == "mul":
        inits.append(_init("c", np.array(1 / np.sqrt(HD), dtype)))
        nodes.append(helper.make_node("Mul", ["c", "qk"], ["scaled"]))
        scores = "scaled"
    elif scale == "runtime":
        inputs.append(helper.make_tensor_value_info("c", elem, []))
        nodes.append(helper.make_node("Div", ["qk", "c"], ["scaled"]))
        scores = "scaled"
    if mask != "none":
        if mask == "b11s":
            inputs.append(helper.make_tensor_value_info("mask", elem, ["batch", 1, 1, seq]))
        elif mask == "full":
            inputs.append(helper.make_tensor_value_info("mask", elem, ["batch", 1, seq, seq]))
        else:  # (1 - mask) * -10000 from an int64 (B, S) mask, through a Mul like the scaling
            inputs.append(helper.make_tensor_value_info("imask", TensorProto.INT64, ["batch", seq]))
            inits += [_init("axes12", np.array([1, 2], np.int64)), _init("one", np.array(1.0, dtype)),
                      _init("neg", np.array(-10000.0, dtype))]
            nodes += [helper.make_node("Unsqueeze", ["imask", "axes12"], ["m4"]),
                      helper.make_node("Cast", ["m4"], ["mf"], to=elem),
                      helper.make_node("Sub", ["one", "mf"], ["inv"]),
                      helper.make_node("Mul", ["inv", "neg"], ["mask"])]
        pair = ["mask", scores] if mask_first else [scores, "mask"]
        nodes.append(helper.make_node("Add", pair, ["masked"]))
        scores = "masked"
    nodes += [helper.make_node("Softmax", [scores], ["probs"], axis=softmax_axis),
              helper.make_node("MatMul", ["probs", "vh"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctxt", "merge"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", elem, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, elem, None))
    return make_model(nodes, inputs, outputs, inits)


def _feeds(model: onnx.ModelProto, batch=B, seq=S, dtype=np.float32):
    names = {i.name for i in model.graph.input}
    feeds = {"x": RNG.standard_normal((batch, seq, D)).astype(dtype)}
    if "mask" in names:
        shape = [d.dim_value or (batch if d.dim_param == "batch" else seq) for d in
                 next(i for i in model.graph.input if i.name == "mask").type.tensor_type.shape.dim]
        feeds["mask"] = np.where(RNG.random(shape) < 0.3, -10000.0, 0.0).astype(dtype)
    if "imask" in names:
        m = np.ones((batch, seq), np.int64)
        m[:, seq * 2 // 3:] = 0
        feeds["imask"] = m
    if "split" in names:
        feeds["split"] = np.array([0, 0, N, HD], np.int64)
    if "c" in names:
        feeds["c"] = np.array(np.sqrt(HD), dtype)  # (for the Q and K^T factor: any value will do)
    return feeds


# ------------------------------------------------------------------------ the pass fires


def _fused(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    return node


_VARIANTS = [
    {}, {"scale": "mul"}, {"scale": "none"}, {"k_form": "one"}, {"reshape": "const"}, {"mask": "none"},
    {"mask": "full"}, {"mask": "made", "mask_first": True}, {"seq": "seq"}, {"reshape": "minus1"},
    {"reshape": "batch-minus1"}, {"scale": "q"}, {"scale": "both", "k_form": "one"},
]
_VARIANT_IDS = ["div-b11s", "mul", "no-scale", "k-one-transpose", "const-reshape", "no-mask", "full-mask",
                "made-mask-first", "dynamic-seq", "minus1-reshape", "batch-minus1-reshape", "q-scaled", "q-k-scaled"]


@pytest.mark.parametrize("op_type", ["Attention", "MultiHeadAttention"])
@pytest.mark.parametrize("variant", _VARIANTS, ids=_VARIANT_IDS)
def test_fires_and_computes_the_same(variant, op_type):
    model = _layer(**variant)
    out = _apply(model, _everything if op_type == "Attention" else _no_attention)
    counts = _count(out)
    assert counts[op_type] == 1 and counts["Attention" if op_type != "Attention" else "MultiHeadAttention"] == 0
    assert counts["Softmax"] == counts["Transpose"] == counts["Reshape"] == 0
    node = _fused(out, op_type)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["num_heads"] == N and "qkv_hidden_sizes" not in attrs
    assert attrs["scale"] == pytest.approx(1.0 if variant.get("scale") == "none" else 1 / np.sqrt(HD), rel=1e-6)
    if op_type == "Attention":  # the three projections merged into its weights and bias
        assert counts["MatMul"] == counts["Add"] == 0
        assert node.input[0] == "x"
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in out.graph.initializer}
        given = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        np.testing.assert_array_equal(inits[node.input[1]], np.concatenate([given[f"w{c}"] for c in "qkv"], axis=1))
        np.testing.assert_array_equal(inits[node.input[2]], np.concatenate([given[f"b{c}"] for c in "qkv"]))
    else:
        assert list(node.input[:3]) == ["q", "k", "v"] and counts["MatMul"] == counts["Add"] == 3
    if variant.get("mask") == "none":
        assert len(node.input) == 3
    else:
        assert len(node.input) == 6 and node.input[3] == node.input[4] == ""
        assert counts["Expand"] == (0 if variant.get("mask") == "full" else 1)
    seq = 5 if variant.get("seq") == "seq" else S
    _check(model, out, _feeds(model, seq=seq))
    if variant.get("seq") == "seq":  # the Expand's shape is computed from the inputs at run time
        _check(model, out, _feeds(model, batch=3, seq=9))


@pytest.mark.parametrize("op_type", ["Attention", "MultiHeadAttention"])
def test_float16(op_type):
    model = _layer(dtype=np.float16)
    out = _apply(model, _everything if op_type == "Attention" else _no_attention)
    assert _count(out)[op_type] == 1
    _check(model, out, _feeds(model, dtype=np.float16), rtol=1e-2, atol=1e-2)


def _without_bias(model: onnx.ModelProto, letters: str) -> onnx.ModelProto:
    """The layer with the bias Adds of the projections ``letters`` removed."""
    for c in letters:
        (add,) = [n for n in model.graph.node if n.op_type == "Add" and n.input[1] == f"b{c}"]
        model.graph.node.remove(add)
        for n in model.graph.node:
            n.input[:] = [f"{c}mm" if i == c else i for i in n.input]
    return model


def test_projections_without_biases_merge_without_a_bias_input():
    model = _without_bias(_layer(mask="none"), "qkv")
    out = _apply(model)
    assert len(_fused(out, "Attention").input) == 2
    _check(model, out, _feeds(model))


def test_value_projection_of_its_own_width_sets_qkv_hidden_sizes():
    model = _layer(mask="none")
    for init in model.graph.initializer:  # V's heads twice as wide as Q's and K's
        if init.name in ("wv", "bv"):
            shape = (D, 2 * D) if init.name == "wv" else (2 * D,)
            init.CopyFrom(_init(init.name, RNG.standard_normal(shape).astype(np.float32)))
    for n in model.graph.node:
        if n.op_type == "Reshape" and n.input[0] == "v":
            n.input[1] = "split_v"
        if n.op_type == "Reshape" and n.output[0] == "y":
            n.input[1] = "merge_v"
    model.graph.initializer.extend([_init("split_v", np.array([0, 0, N, 2 * HD], np.int64)),
                                    _init("merge_v", np.array([0, 0, 2 * D], np.int64))])
    out = _apply(model)
    attrs = {a.name: helper.get_attribute_value(a) for a in _fused(out, "Attention").attribute}
    assert attrs["qkv_hidden_sizes"] == [D, D, 2 * D]
    _check(model, out, _feeds(model))


@pytest.mark.parametrize("change", ["one-bias-missing", "runtime-weights", "two-inputs", "q-read-elsewhere"])
def test_projections_not_of_one_form_leave_multi_head_attention(change):
    model = _layer(mask="none")
    if change == "one-bias-missing":
        model = _without_bias(model, "k")
    elif change == "runtime-weights":  # an overridable initializer may be fed at run time
        model.graph.input.append(helper.make_tensor_value_info("wk", TensorProto.FLOAT, [D, D]))
    elif change == "two-inputs":  # cross-attention: K and V from another value
        model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["batch", S, D]))
        for n in model.graph.node:
            if n.op_type == "MatMul" and n.input[1] in ("wk", "wv"):
                n.input[0] = "x2"
    else:
        model.graph.output.append(helper.make_tensor_value_info("q", TensorProto.FLOAT, None))
    out = _apply(model)
    counts = _count(out)
    assert counts["Attention"] == 0 and counts["MultiHeadAttention"] == 1 and counts["MatMul"] == 3
    feeds = _feeds(model) | ({"x2": RNG.standard_normal((B, S, D)).astype(np.float32)} if change == "two-inputs" else {})
    _check(model, out, feeds)


@pytest.mark.parametrize("layers", [2, 3])
def test_fires_on_every_layer_of_the_transformer(layers):
    model = models.transformer(layers=layers, seq=16, dim=64)
    out = _apply(model)
    counts = _count(out)
    assert counts["Attention"] == layers and counts["MultiHeadAttention"] == 0
    assert counts["Softmax"] == 0
    assert counts["Expand"] == 1  # the padding mask is expanded once, for every layer
    _check(model, out, models.random_inputs(model, batch=3), atol=1e-4)


# ------------------------------------------------------------------------ it does not fire


@pytest.mark.parametrize("variant", [
    {"scale": "runtime"},  # the scale is not a constant
    {"scale": "both-runtime"},
    {"softmax_axis": 2, "mask": "none"},  # softmax over the query axis
    {"reshape": "runtime"},  # heads and head size unknown
    {"extra_output": "probs"},  # an intermediate is a graph output
    {"extra_output": "qh"},
    {"extra_output": "scaled"},
], ids=["runtime-scale", "runtime-q-k-scale", "softmax-axis-2", "unknown-heads", "probs-output", "q-heads-output", "scores-output"])
def test_does_not_fire(variant):
    model = _layer(**variant)
    out = _apply(model)
    assert "MultiHeadAttention" not in _count(out) and "Attention" not in _count(out)
    assert _count(out) == _count(model)
    _check(model, out, _feeds(model))


@pytest.mark.parametrize("claims", [True, False])
def test_the_gate_probe_is_not_left_reading_q_k_v(claims):
    # the one-node probe shown to the gate is never inserted; q, k and v keep only real readers
    m = ir.serde.deserialize_model(_layer())
    basic.ShapeInferenceQuietPass()(m)
    attention_fusion.AttentionFusionPass(lambda node: claims)(m)
    in_graph = set(m.graph)
    for node in in_graph:
        for value in node.inputs:
            if value is not None:
                assert all(user in in_graph for user, _ in value.uses()), value.name


def test_does_not_fire_when_an_intermediate_has_another_reader():
    model = _layer()
    model.graph.node.append(helper.make_node("Relu", ["kt"], ["extra"]))
    model.graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, None))
    assert {"MultiHeadAttention", "Attention"}.isdisjoint(_count(_apply(model)))


def test_does_not_fire_when_the_reshape_does_not_keep_the_batch():
    """[1, -1, N, H] would fold the batch into the sequence: attention across batch items."""
    model = _layer(reshape="const")
    for init in model.graph.initializer:
        if init.name == "split":
            init.CopyFrom(_init("split", np.array([1, -1, N, HD], np.int64)))
    out = _apply(model)
    assert {"MultiHeadAttention", "Attention"}.isdisjoint(_count(out))


def test_does_not_fire_when_the_provider_does_not_claim_it():
    model = _layer()
    assert _count(_apply(model, supports=lambda node: False)) == _count(model)


def test_level_extended_runs_the_pass():
    names = [type(p).__name__ for p in optimizer.passes_for_level(2, _everything)]
    assert "AttentionFusionPass" in names
    assert names.index("AttentionFusionPass") < names.index("MatMulScaleFusionPass")
    assert "AttentionFusionPass" not in [type(p).__name__ for p in optimizer.passes_for_level(1, _everything)]


# ------------------------------------------------------------------------ through a session


def test_session_fuses_every_layer_and_matches_onnxruntime(ort_nodes, tmp_path):
    model = models.transformer()
    so = ort_core.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    written = onnx.load(so.optimized_model_filepath)
    assert _count(written)["Attention"] == 2  # transformer() has 2 layers
    assert ort_nodes.ops_built.count("Attention") == 2
    for batch in (1, 8):
        feeds = models.random_inputs(model, batch=batch)
        np.testing.assert_allclose(sess.run(None, feeds)[0], _ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_session_basic_level_does_not_fuse(ort_nodes):
    so = ort_core.SessionOptions()
    so.graph_optimization_level = ort_core.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort_core.InferenceSession(models.transformer().SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert {"MultiHeadAttention", "Attention"}.isdisjoint(p.op_type for p in sess.get_placement().nodes)
