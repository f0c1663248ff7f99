"""Fixtures every test of the CPU provider gets."""

from __future__ import annotations

import pytest

from ort_ep_cpu import threads


@pytest.fixture(autouse=True)
def _no_stalls_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split loops keep the session's threads: on a busy machine (test workers side by side)
    runs would be judged stalled (``threads.watched``, oneDNN's ``Stallable``) and sent to one
    thread, under the tests that check how work is split. The tests of that judgement set
    their own ``STALL_SECONDS``."""
    monkeypatch.setattr(threads, "STALL_SECONDS", 3600.0)
    monkeypatch.setattr(threads, "_alone_until", 0.0)
    monkeypatch.setattr(threads, "_split_stalls", 0)
