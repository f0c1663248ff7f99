"""The EPContext cache with onnxruntime's session config keys: ep.context_enable writes
<model>_ctx.onnx whose EPContext nodes hold QNN context binaries (embedded, or beside it with
ep.context_embed_mode=0); loading it skips lowering and finalize and gives the same outputs,
in this process and in another; a bad binary is an error naming the file."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

import ort_core as ort
from conftest import CPU, QNN, needs_qnn, qnn_state, reference, rel_error
from ort_core.testing import models
from ort_ep_qnn.kernel import GroupKernel

pytestmark = needs_qnn


def _options(**config) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 1)
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return so


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The CNN, its context model (embedded) and the outputs of the session that wrote it."""
    folder = tmp_path_factory.mktemp("epctx")
    model = models.cnn()
    path = folder / "cnn.onnx"
    onnx.save(model, path)
    feeds = models.random_inputs(model, batch=1, seed=7)
    sess = ort.InferenceSession(str(path), _options(**{"ep.context_enable": "1"}), providers=[QNN, CPU])
    return folder, path, feeds, sess.run(None, feeds), sess.get_placement().context_model


def test_foreign_binary_embedded_is_an_error_naming_the_partition(compiled):
    folder, path, feeds, outputs, ctx = compiled
    model = onnx.load(ctx)
    (node,) = [n for n in model.graph.node if n.op_type == "EPContext"]
    for a in node.attribute:
        if a.name == "ep_cache_context":
            a.s = b"QNN-BUT-NOT-REALLY" * 100
    bad = folder / "foreign_ctx.onnx"
    onnx.save(model, bad)
    with pytest.raises(ort.OrtError, match="partition QNNExecutionProvider_0") as info:
        ort.InferenceSession(str(bad), _options(), providers=[QNN, CPU], enable_fallback=0)
    assert "made by another QNN version" in str(info.value)


def test_context_model_holds_qnn_binaries(compiled):
    folder, path, feeds, outputs, ctx = compiled
    assert ctx == str(folder / "cnn_ctx.onnx")
    model = onnx.load(ctx)
    (node,) = [n for n in model.graph.node if n.op_type == "EPContext"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["source"] == QNN.encode() and attrs["embed_mode"] == 1
    assert attrs["ep_sdk_version"].startswith(b"v2.")
    assert len(attrs["ep_cache_context"]) > 1000


def test_loading_skips_lowering_and_finalize_and_gives_the_same_outputs(compiled):
    folder, path, feeds, outputs, ctx = compiled
    sess = ort.InferenceSession(ctx, _options(), providers=[QNN, CPU])
    placement = sess.get_placement()
    assert [(p.op_type, p.provider) for p in placement.nodes] == [("EPContext", QNN)]
    (kernel,) = qnn_state(sess)["kernels"]
    assert isinstance(kernel, GroupKernel) and kernel.ops == []  # restored, not built
    got = sess.run(None, feeds)
    np.testing.assert_array_equal(got[0], outputs[0])
    assert rel_error(got, reference(models.cnn(), feeds)) <= 1e-5


def test_loading_in_another_process(compiled):
    folder, path, feeds, outputs, ctx = compiled
    np.save(folder / "x.npy", feeds["x"])
    script = (
        "import numpy as np, ort_core as ort\n"
        f"so = ort.SessionOptions()\n"
        f"s = ort.InferenceSession({ctx!r}, so, providers=['{QNN}', '{CPU}'])\n"
        f"np.save({str(folder / 'y.npy')!r}, s.run(None, {{'x': np.load({str(folder / 'x.npy')!r})}})[0])\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=300)
    np.testing.assert_array_equal(np.load(folder / "y.npy"), outputs[0])


def test_embed_mode_0_writes_the_binary_beside_the_model(compiled):
    folder, path, feeds, outputs, _ = compiled
    out = folder / "side" / "cnn_ctx.onnx"
    out.parent.mkdir()
    so = _options(**{"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": str(out)})
    ort.InferenceSession(str(path), so, providers=[QNN, CPU])
    bins = sorted(p.name for p in out.parent.glob("*.bin"))
    assert bins == ["cnn_ctx_QNNExecutionProvider_0.bin"]
    sess = ort.InferenceSession(str(out), _options(), providers=[QNN, CPU])
    np.testing.assert_array_equal(sess.run(None, feeds)[0], outputs[0])


@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_bad_side_file_is_an_error_naming_it(compiled, damage):
    folder, path, feeds, outputs, _ = compiled
    out = folder / damage / "cnn_ctx.onnx"
    out.parent.mkdir()
    so = _options(**{"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": str(out)})
    ort.InferenceSession(str(path), so, providers=[QNN, CPU])
    (binary,) = out.parent.glob("*.bin")
    data = bytearray(binary.read_bytes())
    if damage == "corrupt":
        data[16:80] = bytes(64)
    else:
        data = data[: len(data) // 2]
    binary.write_bytes(bytes(data))
    with pytest.raises(ort.OrtError, match=binary.name) as info:
        # enable_fallback=0: the provider's error itself, not onnxruntime's retry on CPU alone
        ort.InferenceSession(str(out), _options(), providers=[QNN, CPU], enable_fallback=0)
    assert "QnnSystemContext_getBinaryInfo error" in str(info.value)
