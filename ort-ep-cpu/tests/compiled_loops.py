"""Switching the CPU provider's compiled (numba) loops on or off in a test, and seeing them run."""

from __future__ import annotations

import pytest

from ort_ep_cpu.kernels import _jit


def use_compiled(monkeypatch: pytest.MonkeyPatch, compiled: bool, accessor: str) -> list[int]:
    """Turn the compiled loops on (skipping where numba is not installed) or off, and spy on
    ``_jit.<accessor>``: the returned list grows by one each time a kernel asks for that loop."""
    if compiled:
        pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", compiled)
    used: list[int] = []
    real = getattr(_jit, accessor)
    monkeypatch.setattr(_jit, accessor, lambda: used.append(1) or real())
    return used
