"""Progress bars for long work (compiling many groups, the conformance run, benchmarks).

tqdm draws them on stderr, and only when stdout is a terminal: a pipe, a file or CI sees no
bar. ``ORT_CORE_PROGRESS=0`` turns them off, ``=1`` on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def enabled() -> bool:
    forced = os.environ.get("ORT_CORE_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stdout.isatty()


def progress(items: Iterable[T], desc: str, total: int | None = None, min_items: int = 2) -> Iterator[T]:
    """``items`` with a tqdm bar when progress is enabled and there are at least ``min_items``."""
    count = total if total is not None else (len(items) if hasattr(items, "__len__") else None)
    if not enabled() or (count is not None and count < min_items):
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, total=count, leave=False, file=sys.stderr, dynamic_ncols=True)
