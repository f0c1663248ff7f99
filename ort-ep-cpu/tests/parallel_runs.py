"""Running sessions in parallel in a test: from several threads at once (sessions allow it),
and in a child process forked from the test's."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest


def runs_agree(run: Callable[[np.ndarray], np.ndarray], inputs: Sequence[np.ndarray],
               wants: Sequence[np.ndarray], times: int = 20, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Runs ``run`` on each input in its own thread, ``times`` times, all threads at once, and
    raises the first mismatch with its ``wants`` entry (exactly, or within ``rtol``/``atol``)."""
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(times):
                np.testing.assert_allclose(run(inputs[i]), wants[i], rtol=rtol, atol=atol)
        except BaseException as error:  # noqa: BLE001  (raised below, in the test's thread)
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def in_forked_child(work: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
    """What ``work(*args)`` returns when run in a child forked from this process (it must be a
    module-level function; its result comes back pickled); fails the test if the child hangs
    past ``timeout`` seconds or dies."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_put_result, args=(queue, work, args))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung")
    assert child.exitcode == 0, f"the forked child exited with {child.exitcode}"
    return queue.get(timeout=5)


def _put_result(queue: Any, work: Callable[..., Any], args: tuple) -> None:
    queue.put(work(*args))

