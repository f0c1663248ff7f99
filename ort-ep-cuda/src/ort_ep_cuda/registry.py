"""The CUDA kernel registry: one builder per op, with a check that says why a node is declined.

A builder gets the node, the request and the session runtime and returns a ``Body``: a function
of the kernel's inputs written against ``rt.xp`` (CuPy's NumPy-compatible API) and the few
library calls of ``rt.dev`` (``backend.CudaDevice``), plus the input positions it wants in host
memory (shapes, axes, pads: read on the host, as onnxruntime's CUDA kernels read them from CPU
memory). Attribute parsing and shape arithmetic happen in the builder, on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ort_core import KernelRequest, NodeView


@dataclass
class Runtime:
    """What a session's kernels share: the device (CuPy or the tests' numpy stand-in) and its
    array module."""

    dev: Any
    cudnn: bool  # convolutions available (cudnn-frontend and libcudnn load)
    cudnn_reason: str = ""  # why not

    @property
    def xp(self) -> Any:
        return self.dev.xp


@dataclass(frozen=True)
class Body:
    fn: Callable[..., Any]
    host_inputs: frozenset[int] = frozenset()
    n_outputs: int = 1
    launch: bool = True  # run inside the device's context (stream, arena); If does not: its branches do


Builder = Callable[[NodeView, KernelRequest, Runtime], Body]
Check = Callable[[NodeView, Runtime], "str | None"]

FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.float64))
INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
BOOL = frozenset({np.dtype(np.bool_)})
ANY = FLOATS | INTS | BOOL


@dataclass(frozen=True)
class OpEntry:
    op_type: str
    build: Builder
    domain: str = ""
    since: int = 1
    dtypes: frozenset[np.dtype] = ANY  # of the tensor inputs and outputs on the device
    host_inputs: frozenset[int] = frozenset()  # positions read on the host (no dtype rule)
    check: Check | None = None
    ops: tuple[str, ...] = field(default=())


_REGISTRY: dict[tuple[str, str], OpEntry] = {}


def op(*op_types: str, domain: str = "", since: int = 1, dtypes: frozenset[np.dtype] = ANY,
       host_inputs: frozenset[int] = frozenset(), check: Check | None = None):
    def decorate(build: Builder) -> Builder:
        for op_type in op_types:
            _REGISTRY[(domain, op_type)] = OpEntry(op_type, build, domain, since, dtypes, host_inputs, check)
        return build

    return decorate


def entry(domain: str, op_type: str) -> OpEntry | None:
    return _REGISTRY.get((domain, op_type))


def registered_ops(domain: str = "") -> list[str]:
    return sorted(op for d, op in _REGISTRY if d == domain)
