"""Shared helpers: onnxruntime as the reference, the real models, a text-like image."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ort_core as ort
from ort_core.testing.models import text_image  # noqa: F401  (the tests import it from here)

OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def reference(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from ort_core.testing import exact_reference  # exact where onnxruntime saturates uint8 x int8

    sess = exact_reference.session(model_bytes)
    return sess.run(None, feeds)


def assert_parity(actual: list[np.ndarray], expected: list[np.ndarray], rel: float = 1e-4) -> None:
    """max |a - e| <= rel * max |e| per output, shapes and dtypes equal."""
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, (k, a.shape, e.shape, a.dtype, e.dtype)
        scale = float(np.max(np.abs(e))) if e.size else 0.0
        err = float(np.max(np.abs(a.astype(np.float64) - e))) if e.size else 0.0
        assert err <= rel * max(scale, 1e-30), f"output {k}: max abs error {err:.3g} > {rel} x {scale:.3g}"


def session(model, options: dict | None = None, sess_options=None) -> ort.InferenceSession:
    """A session on the provider with CPU fallback per node; a provider failure at creation is
    an error here (enable_fallback=0), not onnxruntime's silent retry on the CPU provider."""
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, sess_options, providers=[(OV, options or {}), CPU], enable_fallback=0)


def ov_state(sess: ort.InferenceSession) -> dict:
    """The provider's session state (compile settings, group kernels)."""
    bound = next(bp for bp in sess._providers if bp.name == OV)
    return bound.ctx.state


def real_model(name: str) -> str:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from real_models import fetch

        return str(fetch(name))
    except Exception as exc:  # no network and no cached copy
        pytest.skip(f"real model {name} unavailable: {exc}")
    finally:
        sys.path.remove(str(SCRIPTS))
