"""LayerNorm, SkipLayerNormalization and BiasGelu fusions (optimizer/norm_fusion.py): each fires
on the patterns it targets, leaves alone the ones it must not touch, and the model computes the
same before and after. The reference is onnxruntime (its own optimizations off) running the
ORIGINAL model; it also runs the optimized one, since it knows the com.microsoft ops emitted.
Tolerances: rtol 1e-4, atol 1e-5 in float32 (a fused normalisation sums in another order);
float16: rtol/atol 1e-2 (a few float16 ulps; the decomposed graph rounds every step to float16).
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common  # (the test applies its RemoveUnusedNodesPass; not loaded by `import onnx_ir`)
import pytest
from onnx import TensorProto, helper

import ort_core
from conftest import initializer as _init
from conftest import make_model
from conftest import onnxruntime_unoptimized as _ort_run
from conftest import tensor_info as _vi
from ort_core import optimizer
from ort_core.optimizer import fusion, norm_fusion
from ort_core.testing import models

RNG = np.random.default_rng(0)
H = 16


def _f(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def _apply(model: onnx.ModelProto, *passes) -> onnx.ModelProto:
    """The passes over ``model`` with its shapes inferred first, as the session's loader does."""
    m = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model, strict_mode=True))
    for p in passes:
        p(m)
    ir.passes.common.RemoveUnusedNodesPass()(m)
    return ir.serde.serialize_model(m)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _check(model, optimized, feeds, rtol=1e-4, atol=1e-5):
    onnx.checker.check_model(optimized)
    for got, want in zip(_ort_run(optimized, feeds), _ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def _everything(node) -> bool:
    return True


def _nothing(node) -> bool:
    return False


# --------------------------------------------------------------------------------- LayerNorm


def _decomposed_ln(x="x", out="y", *, square="pow", normalize="div", axes_as_input=False, axis=-1,
                   dup_sub=False, gamma=True, beta=True, eps="eps", prefix=""):
    """Nodes of (x - mean) / sqrt(var + eps) * gamma + beta, as exporters write them."""
    p = prefix

    def mean(src, dst):
        if axes_as_input:
            return helper.make_node("ReduceMean", [src, "axes"], [dst])
        return helper.make_node("ReduceMean", [src], [dst], axes=[axis])

    nodes = [mean(x, p + "mu"), helper.make_node("Sub", [x, p + "mu"], [p + "d"])]
    d2 = p + "d"
    if dup_sub:
        nodes.append(helper.make_node("Sub", [x, p + "mu"], [p + "d_dup"]))
        d2 = p + "d_dup"
    if square == "pow":
        nodes.append(helper.make_node("Pow", [p + "d", "two"], [p + "sq"]))
    else:
        nodes.append(helper.make_node("Mul", [p + "d", p + "d"], [p + "sq"]))
    nodes += [mean(p + "sq", p + "var"), helper.make_node("Add", [p + "var", eps], [p + "ve"]),
              helper.make_node("Sqrt", [p + "ve"], [p + "std"])]
    norm = p + "n"
    if normalize == "div":
        nodes.append(helper.make_node("Div", [d2, p + "std"], [norm]))
    else:
        nodes += [helper.make_node("Reciprocal", [p + "std"], [p + "inv"]),
                  helper.make_node("Mul", [d2, p + "inv"], [norm])]
    last = norm
    if gamma:
        nodes.append(helper.make_node("Mul", [last, "gamma"], [p + "scaled"]))
        last = p + "scaled"
    if beta:
        nodes.append(helper.make_node("Add", ["beta", last], [p + "shifted"]))  # constant first: either order
        last = p + "shifted"
    nodes.append(helper.make_node("Identity", [last], [out]))
    return nodes


def _ln_inits(dtype=np.float32, eps=1e-5, with_eps=True):
    inits = [_init("two", np.array(2.0, dtype)), _init("gamma", _f(H, dtype=dtype)), _init("beta", _f(H, dtype=dtype)),
             _init("axes", np.array([-1], np.int64))]
    if with_eps:
        inits.append(_init("eps", np.array(eps, dtype)))
    return inits


def _ln_model(opset=17, dtype=np.float32, elem=TensorProto.FLOAT, shape=(2, 5, H), **kw):
    return make_model(_decomposed_ln(**kw), [_vi("x", list(shape), elem)], [_vi("y", list(shape), elem)],
                      _ln_inits(dtype), opset=opset)


@pytest.mark.parametrize("opset,kw", [
    (17, {}),
    (18, {"axes_as_input": True}),
    (17, {"square": "mul"}),
    (17, {"normalize": "reciprocal"}),
    (17, {"dup_sub": True}),
    (17, {"beta": False}),
    (17, {"gamma": False}),
    (17, {"axis": 2}),  # the last axis written as a positive index
], ids=["pow-div", "axes-input-18", "mul-square", "reciprocal", "dup-sub", "no-beta", "no-gamma", "axis-2"])
def test_layernorm_fusion_fires(opset, kw):
    model = _ln_model(opset=opset, **kw)
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything))
    assert _ops(out) == ["LayerNormalization", "Identity"]
    ln = out.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in ln.attribute}
    assert attrs["axis"] == -1 and attrs["epsilon"] == pytest.approx(1e-5)
    assert len(ln.input) == (3 if kw.get("beta", True) else 2)
    _check(model, out, {"x": _f(2, 5, H, scale=3)})


def test_layernorm_fusion_float16():
    model = _ln_model(dtype=np.float16, elem=TensorProto.FLOAT16)
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything))
    assert _ops(out) == ["LayerNormalization", "Identity"]
    _check(model, out, {"x": _f(2, 5, H, dtype=np.float16)}, rtol=1e-2, atol=1e-2)


def test_layernorm_fusion_with_a_non_constant_epsilon_does_not_fire():
    model = make_model(_decomposed_ln(), [_vi("x", [2, 5, H]), _vi("eps", [])], [_vi("y", [2, 5, H])],
                       _ln_inits(with_eps=False))
    assert "LayerNormalization" not in _ops(_apply(model, norm_fusion.LayerNormFusionPass(_everything)))


def test_layernorm_fusion_over_a_non_last_axis_does_not_fire():
    model = _ln_model(axis=1)
    assert "LayerNormalization" not in _ops(_apply(model, norm_fusion.LayerNormFusionPass(_everything)))


@pytest.mark.parametrize("shared", ["d", "ve", "mu"])
def test_layernorm_fusion_with_an_intermediate_read_elsewhere_does_not_fire(shared):
    """A value inside the pattern (the centred x, var + eps, the mean) read by a second node
    would be lost by the fusion."""
    nodes = _decomposed_ln() + [helper.make_node("Neg", [shared], ["other"])]
    other_shape = [2, 5, H] if shared == "d" else [2, 5, 1]
    model = make_model(nodes, [_vi("x", [2, 5, H])], [_vi("y", [2, 5, H]), _vi("other", other_shape)], _ln_inits())
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything))
    assert "LayerNormalization" not in _ops(out)
    _check(model, out, {"x": _f(2, 5, H)})


def test_layernorm_fusion_below_opset_17_does_not_fire():
    model = _ln_model(opset=16)
    assert "LayerNormalization" not in _ops(_apply(model, norm_fusion.LayerNormFusionPass(_everything)))


def test_layernorm_fusion_below_opset_17_into_the_core_domain():
    """At level ALL: ort-core's own LayerNormalization (the CPU provider's tests run it)."""
    model = _ln_model(opset=12)
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything, ort_core.CORE_DOMAIN))
    assert [(n.domain, n.op_type) for n in out.graph.node] == [(ort_core.CORE_DOMAIN, "LayerNormalization"), ("", "Identity")]
    assert {o.domain: o.version for o in out.opset_import}[ort_core.CORE_DOMAIN] == 1
    # at opset 17 the standard op all the same
    out = _apply(_ln_model(opset=17), norm_fusion.LayerNormFusionPass(_everything, ort_core.CORE_DOMAIN))
    assert out.graph.node[0].domain == ""


def test_layernorm_fusion_the_gate_declines_leaves_the_graph_unchanged():
    model = _ln_model(gamma=False)  # a declined probe must not leave its ones behind either
    out = _apply(model, norm_fusion.LayerNormFusionPass(_nothing))
    assert _ops(out) == _ops(model)
    assert not [i.name for i in out.graph.initializer if i.name.startswith("layernorm_scale")]


def _moments_ln(mean="gap", gamma=True, extra=()):
    """Keras' LayerNormalization as tf2onnx writes it (tf.nn.moments, then
    tf.nn.batch_normalization): x * s + (beta - mean * s), s = gamma / sqrt(var + eps), the means
    a GlobalAveragePool of the 3-D activations or a ReduceMean over the last axis."""
    def m(src, dst):
        if mean == "gap":
            return helper.make_node("GlobalAveragePool", [src], [dst])
        return helper.make_node("ReduceMean", [src], [dst], axes=[-1])

    nodes = [m("x", "mu"), helper.make_node("Sub", ["x", "mu"], ["d"]), helper.make_node("Mul", ["d", "d"], ["sq"]),
             m("sq", "var"), helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["std"]),
             helper.make_node("Reciprocal", ["std"], ["inv"])]
    scale = "inv"
    if gamma:
        nodes.append(helper.make_node("Mul", ["inv", "gamma"], ["s"]))
        scale = "s"
    nodes += [helper.make_node("Mul", ["mu", scale], ["mu_s"]), helper.make_node("Sub", ["beta", "mu_s"], ["shift"]),
              helper.make_node("Mul", ["x", scale], ["x_s"]), helper.make_node("Add", ["x_s", "shift"], ["y"]),
              *extra]
    return nodes


@pytest.mark.parametrize("mean", ["gap", "reduce-mean"])
@pytest.mark.parametrize("gamma", [True, False])
def test_layernorm_fusion_of_the_moments_form(mean, gamma):
    model = make_model(_moments_ln(mean, gamma), [_vi("x", [2, 5, H])], [_vi("y", [2, 5, H])], _ln_inits())
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything))
    assert _ops(out) == ["LayerNormalization"]
    assert len(out.graph.node[0].input) == 3
    # activations of a transformer: the mean large against the spread
    _check(model, out, {"x": _f(2, 5, H, scale=3) + 4})


@pytest.mark.parametrize("shared", ["s", "mu_s", "x_s", "var"])
def test_layernorm_fusion_of_the_moments_form_with_an_intermediate_read_elsewhere_does_not_fire(shared):
    model = make_model(_moments_ln(extra=[helper.make_node("Neg", [shared], ["other"])]), [_vi("x", [2, 5, H])],
                       [_vi("y", [2, 5, H]), _vi("other", None)], _ln_inits())
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything))
    assert "LayerNormalization" not in _ops(out)
    _check(model, out, {"x": _f(2, 5, H)})


def test_global_average_pool_is_the_last_axis_mean_only_of_3d_values():
    """On [N, C, H, W] it averages two axes: not a LayerNorm."""
    model = make_model(_moments_ln(), [_vi("x", [2, 5, 3, H])], [_vi("y", [2, 5, 3, H])], _ln_inits())
    assert "LayerNormalization" not in _ops(_apply(model, norm_fusion.LayerNormFusionPass(_everything)))
    # the subtract-first form, its means GlobalAveragePools of 3-D x, is fused
    nodes = [helper.make_node("GlobalAveragePool", n.input[:1], n.output) if n.op_type == "ReduceMean" else n
             for n in _decomposed_ln(square="mul")]
    model = make_model(nodes, [_vi("x", [2, 5, H])], [_vi("y", [2, 5, H])], _ln_inits())
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything))
    assert _ops(out) == ["LayerNormalization", "Identity"]
    _check(model, out, {"x": _f(2, 5, H)})


# --------------------------------------------------------------------------------- SkipLayerNorm


def _ln(x, out="y", beta=True, **attrs):
    attrs.setdefault("epsilon", 1e-6)
    return helper.make_node("LayerNormalization", [x, "gamma"] + (["beta"] if beta else []), [out], **attrs)


def _sln_inits(dtype=np.float32):
    return [_init("gamma", _f(H, dtype=dtype)), _init("beta", _f(H, dtype=dtype)), _init("bias", _f(H, dtype=dtype))]


def _sln_node(model):
    nodes = [n for n in model.graph.node if n.op_type == "SkipLayerNormalization"]
    assert len(nodes) == 1, _ops(model)
    return nodes[0]


@pytest.mark.parametrize("form", ["plain", "bias-inner", "bias-outer", "bias-first-operand"])
def test_skip_layernorm_fusion_fires(form):
    if form == "plain":
        nodes = [helper.make_node("Add", ["a", "b"], ["s"])]
    elif form == "bias-inner":  # Add(a, Add(b, bias)): onnxruntime's format 2
        nodes = [helper.make_node("Add", ["b", "bias"], ["bb"]), helper.make_node("Add", ["a", "bb"], ["s"])]
    elif form == "bias-outer":  # Add(Add(a, bias), b): format 1
        nodes = [helper.make_node("Add", ["a", "bias"], ["ab"]), helper.make_node("Add", ["ab", "b"], ["s"])]
    else:
        nodes = [helper.make_node("Add", ["bias", "b"], ["bb"]), helper.make_node("Add", ["bb", "a"], ["s"])]
    nodes.append(_ln("s"))
    model = make_model(nodes, [_vi("a", ["batch", 5, H]), _vi("b", ["batch", 5, H])], [_vi("y", ["batch", 5, H])],
                       _sln_inits())
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    assert _ops(out) == ["SkipLayerNormalization"]
    node = _sln_node(out)
    assert len(node.input) == (4 if form == "plain" else 5) and list(node.output) == ["y"]
    assert helper.get_attribute_value(node.attribute[0]) == pytest.approx(1e-6)
    assert {o.domain: o.version for o in out.opset_import}["com.microsoft"] == 1
    _check(model, out, {"a": _f(3, 5, H), "b": _f(3, 5, H)})


@pytest.mark.parametrize("a_shape,b_shape", [([4, H], [4, H]), ([2, 4, H], [1, 4, H]), ([2, 4, H], [4, H]),
                                             ([1, 4, H], [2, 4, H])])
def test_skip_layernorm_fusion_shapes_onnxruntime_accepts(a_shape, b_shape):
    """2-D input; a skip broadcast over the batch ([1, S, H] or [S, H]), on either side of the Add."""
    out_shape = a_shape if len(a_shape) >= len(b_shape) and a_shape[0] != 1 else b_shape
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), _ln("s", beta=False)],
                       [_vi("a", a_shape), _vi("b", b_shape)], [_vi("y", out_shape)], _sln_inits())
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    assert _ops(out) == ["SkipLayerNormalization"]
    _check(model, out, {"a": _f(*a_shape), "b": _f(*b_shape)})


def test_skip_layernorm_fusion_takes_the_core_domain_layernorm():
    """Below opset 17 the LayerNorm fusion (at ALL) makes ort-core's own LayerNormalization; the
    residual Add before it fuses all the same (SkipLayerNormalization is com.microsoft's at any
    opset)."""
    ln = _ln("s")
    ln.domain = ort_core.CORE_DOMAIN
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), ln],
                       [_vi("a", [2, 5, H]), _vi("b", [2, 5, H])], [_vi("y", [2, 5, H])], _sln_inits(), opset=12)
    model.opset_import.append(helper.make_opsetid(ort_core.CORE_DOMAIN, 1))
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    assert _ops(out) == ["SkipLayerNormalization"]


def test_skip_layernorm_fusion_float16():
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), _ln("s")],
                       [_vi("a", [2, 5, H], TensorProto.FLOAT16), _vi("b", [2, 5, H], TensorProto.FLOAT16)],
                       [_vi("y", [2, 5, H], TensorProto.FLOAT16)], _sln_inits(np.float16))
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    assert _ops(out) == ["SkipLayerNormalization"]
    _check(model, out, {"a": _f(2, 5, H, dtype=np.float16), "b": _f(2, 5, H, dtype=np.float16)}, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("reader_first", [False, True])
def test_skip_layernorm_fusion_gives_the_sum_when_it_is_read_elsewhere(reader_first):
    """A residual stream: the Add's result feeds the LayerNorm and the next residual Add. The
    fused node's fourth output (input_skip_bias_sum) takes over that reader, even one that
    came before the LayerNorm in the node order."""
    add = [helper.make_node("Add", ["b", "bias"], ["bb"]), helper.make_node("Add", ["a", "bb"], ["s"])]
    ln = [_ln("s", out="y")]
    reader = [helper.make_node("Add", ["s", "a"], ["next"])]
    nodes = add + (reader + ln if reader_first else ln + reader)
    model = make_model(nodes, [_vi("a", [2, 5, H]), _vi("b", [2, 5, H])], [_vi("y", [2, 5, H]), _vi("next", [2, 5, H])],
                       _sln_inits())
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    node = _sln_node(out)
    assert list(node.output) == ["y", "", "", "s"]
    assert sorted(_ops(out)) == ["Add", "SkipLayerNormalization"]
    _check(model, out, {"a": _f(2, 5, H), "b": _f(2, 5, H)})


def test_skip_layernorm_fusion_when_the_sum_is_a_graph_output():
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), _ln("s")], [_vi("a", [2, 5, H]), _vi("b", [2, 5, H])],
                       [_vi("y", [2, 5, H]), _vi("s", [2, 5, H])], _sln_inits())
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    assert list(_sln_node(out).output) == ["y", "", "", "s"]
    _check(model, out, {"a": _f(2, 5, H), "b": _f(2, 5, H)})


@pytest.mark.parametrize("case", ["double", "rank-4", "axis-not-last", "mean-output-read", "skip-bias-2d",
                                  "bias-add-read-twice", "skip-last-dim-differs"])
def test_skip_layernorm_fusion_does_not_fire(case):
    """... or, for the bias cases, fuses without taking in the bias Add."""
    elem, shape, b_shape = TensorProto.FLOAT, [2, 5, H], [2, 5, H]
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), _ln("s")]
    outputs = [_vi("y", shape)]
    inits = _sln_inits()
    if case == "double":  # not in onnxruntime's SkipLayerNormalization schema
        elem = TensorProto.DOUBLE
        inits = _sln_inits(np.float64)
        outputs = [_vi("y", shape, elem)]
    elif case == "rank-4":
        shape = b_shape = [2, 3, 5, H]
        outputs = [_vi("y", shape)]
    elif case == "axis-not-last":
        nodes[1] = helper.make_node("LayerNormalization", ["s", "g2"], ["y"], axis=1)
        inits.append(_init("g2", _f(5, H)))
    elif case == "mean-output-read":
        nodes[1] = helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y", "mean"])
        outputs.append(_vi("mean", [2, 5, 1]))
    elif case == "skip-bias-2d":  # the "bias" is not 1-D: its Add stays, and is the skip
        nodes = [helper.make_node("Add", ["b", "bias2"], ["bb"]), helper.make_node("Add", ["a", "bb"], ["s"]), _ln("s")]
        inits.append(_init("bias2", _f(5, H)))
    elif case == "bias-add-read-twice":  # the bias Add stays (read elsewhere)
        nodes = [helper.make_node("Add", ["b", "bias"], ["bb"]), helper.make_node("Add", ["a", "bb"], ["s"]), _ln("s"),
                 helper.make_node("Neg", ["bb"], ["nb"])]
        outputs.append(_vi("nb", shape))
    elif case == "skip-last-dim-differs":  # [.., 1] broadcast over the hidden axis
        b_shape = [2, 5, 1]
    model = make_model(nodes, [_vi("a", shape, elem), _vi("b", b_shape, elem)], outputs, inits)
    out = _apply(model, norm_fusion.SkipLayerNormFusionPass(_everything))
    if case in ("bias-add-read-twice", "skip-bias-2d"):  # no bias input: Add + LN alone fuse
        node = _sln_node(out)
        assert len(node.input) == 4 and "Add" in _ops(out)
        _check(model, out, {"a": _f(*shape), "b": _f(*b_shape)})
    else:
        assert "SkipLayerNormalization" not in _ops(out)


def test_skip_layernorm_fusion_the_gate_declines():
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), _ln("s")], [_vi("a", [2, 5, H]), _vi("b", [2, 5, H])],
                       [_vi("y", [2, 5, H])], _sln_inits())
    assert _ops(_apply(model, norm_fusion.SkipLayerNormFusionPass(_nothing))) == ["Add", "LayerNormalization"]


def test_decomposed_layernorm_after_a_residual_add_becomes_one_skip_layernorm():
    """LayerNormFusion then SkipLayerNormFusion, as the EXTENDED level runs them."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"])] + _decomposed_ln(x="s")
    model = make_model(nodes, [_vi("a", [2, 5, H]), _vi("b", [2, 5, H])], [_vi("y", [2, 5, H])], _ln_inits())
    out = _apply(model, norm_fusion.LayerNormFusionPass(_everything), norm_fusion.SkipLayerNormFusionPass(_everything))
    assert _ops(out) == ["SkipLayerNormalization", "Identity"]
    _check(model, out, {"a": _f(2, 5, H), "b": _f(2, 5, H)})


# --------------------------------------------------------------------------------- BiasGelu


def _gelu_after_add(bias_first=False):
    add = helper.make_node("Add", ["bias", "x"] if bias_first else ["x", "bias"], ["xb"])
    return [add, helper.make_node("Gelu", ["xb"], ["y"], domain="com.microsoft")]


def _ms_model(nodes, inputs, outputs, inits):
    model = make_model(nodes, inputs, outputs, inits)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


@pytest.mark.parametrize("bias_first", [False, True])
def test_bias_gelu_fusion_fires(bias_first):
    model = _ms_model(_gelu_after_add(bias_first), [_vi("x", ["batch", 5, H])], [_vi("y", ["batch", 5, H])],
                      [_init("bias", _f(H))])
    out = _apply(model, norm_fusion.BiasGeluFusionPass(_everything))
    assert _ops(out) == ["BiasGelu"]
    assert list(out.graph.node[0].input) == ["x", "bias"]
    _check(model, out, {"x": _f(3, 5, H, scale=3)})


def test_bias_gelu_fusion_after_gelu_fusion():
    """The Erf arithmetic -> Gelu (GeluFusionPass) -> BiasGelu, with the bias add before it."""
    nodes = [helper.make_node("Add", ["x", "bias"], ["xb"]), helper.make_node("Div", ["xb", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a1"]),
             helper.make_node("Mul", ["xb", "a1"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    model = make_model(nodes, [_vi("x", [2, H])], [_vi("y", [2, H])],
                       [_init("bias", _f(H)), _init("sqrt2", np.array(np.sqrt(2), np.float32)),
                        _init("one", np.array(1, np.float32)), _init("half", np.array(0.5, np.float32))])
    out = _apply(model, fusion.GeluFusionPass(_everything), norm_fusion.BiasGeluFusionPass(_everything))
    assert _ops(out) == ["BiasGelu"]
    _check(model, out, {"x": _f(2, H, scale=3)})


@pytest.mark.parametrize("case", ["bias-not-constant", "bias-2d", "add-read-twice", "bias-wrong-length"])
def test_bias_gelu_fusion_does_not_fire(case):
    nodes = _gelu_after_add()
    inputs = [_vi("x", [2, 5, H])]
    outputs = [_vi("y", [2, 5, H])]
    inits = [_init("bias", _f(H))]
    if case == "bias-not-constant":
        inits, inputs = [], inputs + [_vi("bias", [H])]
    elif case == "bias-2d":
        inits = [_init("bias", _f(5, H))]
    elif case == "add-read-twice":
        nodes.append(helper.make_node("Neg", ["xb"], ["n"]))
        outputs.append(_vi("n", [2, 5, H]))
    elif case == "bias-wrong-length":  # x's last axis is 1: the bias would broadcast x
        inputs = [_vi("x", [2, 5, 1])]
    model = _ms_model(nodes, inputs, outputs, inits)
    assert "BiasGelu" not in _ops(_apply(model, norm_fusion.BiasGeluFusionPass(_everything)))


# --------------------------------------------------------------------------------- the level, the transformer


def test_the_passes_run_at_extended_only():
    basic = [type(p).__name__ for p in optimizer.passes_for_level(1, _everything)]
    extended = [type(p).__name__ for p in optimizer.passes_for_level(2, _everything)]
    for name in ("LayerNormFusionPass", "SkipLayerNormFusionPass", "BiasGeluFusionPass"):
        assert name in extended and name not in basic
    # the order the fusions read each other's results in
    assert extended.index("GeluFusionPass") < extended.index("BiasGeluFusionPass")
    assert extended.index("LayerNormFusionPass") < extended.index("SkipLayerNormFusionPass")


@pytest.mark.parametrize("batch", [1, 4])
def test_transformer_gets_skip_layernorm_and_bias_gelu(batch):
    model = models.transformer()
    m = ir.serde.deserialize_model(model)
    optimizer.optimize(m, 2, _everything)
    out = ir.serde.serialize_model(m)
    counts = collections.Counter(_ops(out))
    assert counts["SkipLayerNormalization"] == 5 and counts["LayerNormalization"] == 0, counts
    assert counts["BiasGelu"] == 2 and counts["Gelu"] == 0, counts
    feeds = models.random_inputs(model, batch=batch)
    _check(model, out, feeds, rtol=1e-4, atol=1e-5)
