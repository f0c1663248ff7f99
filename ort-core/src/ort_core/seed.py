"""The process-wide seed of random ops (onnxruntime's ``set_seed``).

Random ops without a ``seed`` attribute draw from entropy; after ``set_seed(n)`` providers seed
them from ``n`` (and the node), so two sessions made after the same ``set_seed`` draw the same
numbers. Providers read ``default_seed()`` when they build a random op's kernel.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_seed: int | None = None


def set_seed(seed: int) -> None:
    """Seed the random ops of sessions made from now on."""
    global _seed
    value = int(seed)
    with _lock:
        _seed = value


def default_seed() -> int | None:
    """The seed given to ``set_seed``, or None when none was."""
    with _lock:
        return _seed
