"""ctypes' struct layouts against the QNN headers' (``offsetof``/``sizeof`` from a compiler).

With a header folder (``ORT_QNN_HEADERS``, or ``$QNN_SDK_ROOT/include/QNN``) and a C compiler,
the layout program is compiled against it; otherwise the fixture ``data/qnn_layout.json``,
produced by ``python tests/qnn_layout.py <headers> tests/data/qnn_layout.json`` against the
QNN SDK 2.43 headers (QNN_SDK_BUILD_ID v2.43.0.260127150333_193827, as vendored in
github.com/chuzcjoe/qnnx under external/QNN/include), is the reference.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import qnn_layout

from ort_ep_qnn import _qnn as Q


def _header_dir() -> str | None:
    for d in (os.environ.get("ORT_QNN_HEADERS"),
              os.path.join(os.environ["QNN_SDK_ROOT"], "include", "QNN") if os.environ.get("QNN_SDK_ROOT") else None):
        if d and os.path.isfile(os.path.join(d, "QnnTypes.h")):
            return d
    return None


def _reference() -> dict:
    headers = _header_dir()
    if headers and shutil.which("cc"):
        return qnn_layout.from_headers(headers)
    return json.loads((Path(__file__).parent / "data" / "qnn_layout.json").read_text())


@pytest.mark.parametrize("struct", [*qnn_layout.STRUCTS, "InterfaceTable", "SystemTable"])
def test_layout_matches_headers(struct):
    ours = qnn_layout.from_ctypes()[struct]
    theirs = _reference()[struct]
    assert ours == {k: theirs[k] for k in ours}


def test_quantize_params_union_is_8_byte_aligned():
    # the trap: a 4-byte-aligned union puts every later tensor field 4 bytes off
    assert Q.QuantizeParams.scaleOffsetEncoding.offset == 8
    assert Q.TensorV1.rank.offset == Q.TensorV1.quantizeParams.offset + 40
