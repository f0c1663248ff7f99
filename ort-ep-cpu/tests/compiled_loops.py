"""Switching the CPU provider's compiled (numba) loops on or off in a test, and seeing them run."""

from __future__ import annotations

import pytest

from ort_ep_cpu.kernels import _jit


def use_compiled(monkeypatch: pytest.MonkeyPatch, compiled: bool, accessor: str) -> list[tuple]:
    """Turn the compiled loops on (skipping where numba is not installed) or off, and spy on
    ``_jit.<accessor>``: the returned list grows by the arguments of each call a kernel makes to
    it (which loop it asked ``_jit.activation`` for, say)."""
    if compiled:
        pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", compiled)
    used: list[tuple] = []
    real = getattr(_jit, accessor)
    monkeypatch.setattr(_jit, accessor, lambda *args, **kwargs: used.append(args + tuple(kwargs.values())) or real(*args, **kwargs))
    return used
