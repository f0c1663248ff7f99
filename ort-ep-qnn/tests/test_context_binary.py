"""QNN context binaries, the QNN side of the EPContext cache: contextGetBinary, then
contextCreateFromBinary + graphRetrieve, in one process and across processes; corrupt,
truncated and foreign binaries are ``EPFail`` errors naming where the binary came from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_qnn, qnn_state, reference, rel_error, session
from ort_core import EPFail
from ort_core.testing import models
from ort_ep_qnn import _qnn as Q
from ort_ep_qnn.options import resolve
from ort_ep_qnn.plugin import OPTIONS, load_context_binary
from ort_ep_qnn.runtime import LIVE, Backend

pytestmark = needs_qnn

DEFAULTS = {o.name: o.default for o in OPTIONS}


@pytest.fixture(scope="module")
def cnn_kernel():
    model = models.cnn()
    sess = session(model, batch=1)
    (kernel,) = qnn_state(sess)["kernels"]
    return sess, model, kernel


def _backend():
    settings = resolve(DEFAULTS)
    return Backend(Q.load(settings.library)), settings


def test_binary_round_trip_in_one_process(cnn_kernel):
    sess, model, kernel = cnn_kernel
    binary, notes = kernel.binary(), kernel.describe()
    backend, settings = _backend()
    try:
        loaded = load_context_binary(backend, binary, notes, "cnn.bin", settings)
        feeds = models.random_inputs(model, batch=1, seed=5)
        (x,) = feeds.values()
        assert np.array_equal(loaded(x)[0], kernel(x)[0])  # the same compiled graph
        assert rel_error(loaded(x), reference(model, feeds)) <= 1e-5
    finally:
        backend.close()


def test_binary_round_trip_across_processes(cnn_kernel, tmp_path):
    sess, model, kernel = cnn_kernel
    (tmp_path / "cnn.bin").write_bytes(kernel.binary())
    (tmp_path / "cnn.json").write_text(kernel.describe())
    feeds = models.random_inputs(model, batch=1, seed=6)
    np.save(tmp_path / "x.npy", next(iter(feeds.values())))
    script = f"""
import numpy as np, sys
from ort_ep_qnn import _qnn as Q
from ort_ep_qnn.options import resolve
from ort_ep_qnn.plugin import OPTIONS, load_context_binary
from ort_ep_qnn.runtime import Backend
settings = resolve({{o.name: o.default for o in OPTIONS}})
backend = Backend(Q.load(settings.library))
d = {str(tmp_path)!r}
k = load_context_binary(backend, open(d + "/cnn.bin", "rb").read(), open(d + "/cnn.json").read(), "cnn.bin", settings)
np.save(d + "/y.npy", k(np.load(d + "/x.npy"))[0])
backend.close()
"""
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=300)
    y = np.load(tmp_path / "y.npy")
    assert rel_error([y], reference(model, feeds)) <= 1e-5


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "empty"])
def test_bad_binary_is_an_error_naming_the_file(cnn_kernel, damage):
    _, _, kernel = cnn_kernel
    binary = bytearray(kernel.binary())
    if damage == "corrupt":
        binary[16:80] = bytes(64)
    elif damage == "truncated":
        binary = binary[: len(binary) // 2]
    else:
        binary = bytearray()
    backend, settings = _backend()
    try:
        with pytest.raises(EPFail, match=r"model_ctx_QNN_0\.bin") as info:
            load_context_binary(backend, bytes(binary), kernel.describe(), "model_ctx_QNN_0.bin", settings)
        assert "QnnSystemContext_getBinaryInfo error" in str(info.value)
    finally:
        backend.close()


def test_unreadable_description_is_an_error_naming_the_file(cnn_kernel):
    _, _, kernel = cnn_kernel
    backend, settings = _backend()
    try:
        with pytest.raises(EPFail, match="ctx.bin.*description"):
            load_context_binary(backend, kernel.binary(), "{not json", "ctx.bin", settings)
        with pytest.raises(EPFail, match="ctx.bin.*description"):
            load_context_binary(backend, kernel.binary(), json.dumps({"graph": "g"}), "ctx.bin", settings)
    finally:
        backend.close()


def test_a_loaded_context_is_freed_with_its_backend(cnn_kernel):
    _, _, kernel = cnn_kernel
    before = dict(LIVE)
    backend, settings = _backend()
    load_context_binary(backend, kernel.binary(), kernel.describe(), "x.bin", settings)
    assert LIVE["context"] == before["context"] + 1 and LIVE["backend"] == before["backend"] + 1
    backend.close()
    assert LIVE == before


def test_system_library_reads_a_good_binary(cnn_kernel):
    _, _, kernel = cnn_kernel
    system = Q.load_system(Q.find_library(""))
    assert system.binary_ok(kernel.binary()) == 0
    assert system.binary_ok(b"\\0" * 64) != 0
    assert Path(system.path).name == "libQnnSystem.so"
