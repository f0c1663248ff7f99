"""The session's memory limit: provider option ``max_mem`` (bytes, 0 = none).

onnxruntime bounds its CPU arena with ``OrtArenaCfg``'s ``max_mem`` (as the CUDA provider's
``gpu_mem_limit`` bounds the GPU's); past it an allocation fails with RUNTIME_EXCEPTION
"Available memory of X is smaller than requested bytes of Y" and the session stays usable.
numpy allocates every kernel output itself, so this provider keeps the account instead: with
``max_mem`` set, each kernel of the session is wrapped (``guard``) and

* the tensors its kernels produce count while they are alive (each buffer once: a view, an
  in-place output or an output that is one of the kernel's inputs adds nothing; the main
  graph's outputs, which the caller keeps, do not count, nor do feeds and initializers);
* before a node whose output size is decided by input *values* (ConstantOfShape, Expand, Tile,
  Range, Pad, Resize, Upsample, OneHot) runs, its output is estimated from those values with
  the estimator constant folding uses (``ort_core.sizes``); one that would not fit is refused
  before anything is allocated (a [10^10] ConstantOfShape fails at once, with no memory taken);
* a node whose outputs turn out not to fit is refused after it ran (they are dropped at once),
  and a ``MemoryError`` from numpy becomes the same error.

The error is an ``ort_core.RuntimeException`` naming the node, its op, the bytes requested,
the bytes available, the limit and the option. Nothing of the failed run stays counted once
its values are gone, so the next run of the session works as before. Without ``max_mem``
nothing is wrapped: runs cost what they did.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import weakref
from typing import Any

import numpy as np

from ort_core import Kernel, KernelRequest, RuntimeException
from ort_core.sizes import GROWING, output_elements

OPTION = "max_mem"
_SIZE_MAX = (1 << 64) - 1


def parse_max_mem(value: Any) -> int:
    """Bytes, as an int or a string ("2147483648"); 0 (and SIZE_MAX, onnxruntime's "none") mean
    no limit."""
    if isinstance(value, bool):
        raise ValueError(f"max_mem is a number of bytes >= 0 (0: no limit), got {value!r}")
    try:
        number = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise ValueError(f"max_mem is a number of bytes >= 0 (0: no limit), got {value!r}") from None
    if number < 0:
        raise ValueError(f"max_mem is a number of bytes >= 0 (0: no limit), got {number}")
    return 0 if number >= _SIZE_MAX else number


def _owner(value: Any) -> Any:
    """The object that owns ``value``'s memory (an ndarray's last ndarray base)."""
    owner = value
    while isinstance(owner, np.ndarray) and isinstance(owner.base, np.ndarray):
        owner = owner.base
    return owner


class Budget:
    """The bytes of the session's live tensors against ``limit``. Shared by the session's
    kernels and by concurrent runs (one arena per session, as onnxruntime's). A buffer's bytes
    are given back when it is freed (a weak reference's callback queues it; the queue is
    drained under the lock, so a callback run by the garbage collector never waits on it)."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.peak = 0
        self._live = 0
        self._lock = threading.Lock()
        self._owners: dict[int, tuple[weakref.ref, int]] = {}
        self._dead: collections.deque[weakref.ref] = collections.deque()

    def _drain(self) -> None:
        dead = self._dead
        while dead:
            ref = dead.popleft()
            key = getattr(ref, "key", None)
            entry = self._owners.get(key)
            if entry is not None and entry[0] is ref:
                del self._owners[key]
                self._live -= entry[1]

    @property
    def live(self) -> int:
        with self._lock:
            self._drain()
            return self._live

    def available(self) -> int:
        return max(0, self.limit - self.live)

    def hold(self, values: Any, skip: set[int]) -> int:
        """Count the buffers of ``values`` (an iterable) not yet counted and not in ``skip``
        (ids of the kernel's inputs' owners); return the bytes added."""
        added = 0
        with self._lock:
            self._drain()
            for value in values:
                if not isinstance(value, np.ndarray):
                    continue
                owner = _owner(value)
                key = id(owner)
                if key in skip:
                    continue
                entry = self._owners.get(key)
                if entry is not None and entry[0]() is owner:
                    continue
                try:
                    ref = weakref.KeyedRef(owner, self._dead.append, key)
                except TypeError:  # an object without weak references: not counted
                    continue
                size = int(owner.nbytes)
                self._owners[key] = (ref, size)
                self._live += size
                added += size
            if self._live > self.peak:
                self.peak = self._live
        return added

    def forget(self, values: Any) -> None:
        """Stop counting the buffers of ``values``: the main graph's outputs, the caller's once
        the run returns (one written into an intermediate's buffer was counted with it)."""
        with self._lock:
            self._drain()
            for value in values:
                if isinstance(value, np.ndarray):
                    key = id(_owner(value))
                    entry = self._owners.get(key)
                    if entry is not None and entry[0]() is _owner(value):
                        del self._owners[key]
                        self._live -= entry[1]

    def error(self, node: str, op: str, requested: int | None, before: bool,
              live: int | None = None) -> RuntimeException:
        """The error for ``node`` (``op``) asking ``requested`` bytes with ``live`` bytes in use."""
        live = self.live if live is None else live
        when = "estimated from its inputs before allocating" if before else "allocated by the kernel"
        return RuntimeException(
            f"Failed to allocate memory for {op} node '{node}': Available memory of "
            f"{max(0, self.limit - live)} is smaller than requested bytes of "
            f"{requested if requested is not None else 'unknown'} ({when}; the session's live tensors "
            f"take {live} bytes; limit: CPUExecutionProvider option {OPTION}={self.limit} bytes)"
        )


def guard(kernel: Kernel, request: KernelRequest, budget: Budget) -> Kernel:
    """``kernel`` keeping ``budget``'s account (see the module docstring)."""
    first = request.nodes[0]
    op = first.op_type if not request.fused else "FusedGroup"
    label = first.name if not request.fused else f"{first.name} (+{len(request.nodes) - 1} fused)"
    estimate = not request.fused and first.domain == "" and first.op_type in GROWING
    if estimate:
        dtype = request.value(request.outputs[0]).dtype if request.outputs and request.outputs[0] else None
        itemsize = max(1, dtype.itemsize) if dtype is not None and dtype.itemsize else 8
        n_inputs = len(first.inputs)  # the node's own inputs (implicit ones follow)
        attribute = first.attr
    # the main graph's outputs are the caller's once the run returns: not counted
    graph = request.graph
    kept = {n for n in request.outputs if n and not graph.path and graph.defines(n) and graph.value(n).is_graph_output}
    counted = [k for k, n in enumerate(request.outputs) if n not in kept]
    returned = [k for k, n in enumerate(request.outputs) if n in kept]
    single = kernel.single_output
    run = kernel.run

    def guarded(*args: Any) -> Any:
        if estimate:
            elements = output_elements(op, args[:n_inputs], attribute)
            if elements is not None:
                nbytes = elements * itemsize
                if nbytes > budget.available():
                    raise budget.error(label, op, nbytes, before=True)
        try:
            result = run(*args)
        except MemoryError as exc:
            raise budget.error(label, op, getattr(exc, "_total_size", None), before=False) from exc
        if returned:
            budget.forget((result,) if single else [result[k] for k in returned if k < len(result)])
        if not counted:
            return result
        outputs = (result,) if single else [result[k] for k in counted if k < len(result)]
        skip = {id(_owner(a)) for a in args if isinstance(a, np.ndarray)}
        added = budget.hold(outputs, skip)
        live = budget.live
        if added and live > budget.limit:
            del result, outputs  # freed now: the failed node leaves nothing counted
            raise budget.error(label, op, added, before=False, live=live - added)
        return result

    return dataclasses.replace(kernel, run=guarded)
