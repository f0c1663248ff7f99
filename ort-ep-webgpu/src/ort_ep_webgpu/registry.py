"""The WebGPU kernel registry: one builder per op type, with a check that says why a node is
declined (unsupported dtype, attribute or opset), and the session runtime builders receive."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ort_core import Kernel, KernelRequest, NodeView

from .runtime import BufferPool, GpuDevice, GpuTensor, Pipeline, Stream


@dataclass
class SessionRuntime:
    """What a session's WebGPU kernels share: device, pool, stream and options."""

    gpu: GpuDevice
    pool: BufferPool
    stream: Stream
    fp16: bool  # float16 kernels enabled (option on and adapter has shader-f16)
    direct_gemm: bool = False  # MatMul/Gemm without workgroup tiles (option gemm_kernel)

    def supported_dtypes(self) -> set[np.dtype]:
        types = {np.dtype(t) for t in (np.float32, np.int32, np.int64, np.bool_)}
        if self.fp16:
            types.add(np.dtype(np.float16))
        return types


Builder = Callable[[NodeView, KernelRequest, SessionRuntime], Kernel]
Check = Callable[[NodeView], "str | None"]


@dataclass(frozen=True)
class OpEntry:
    op_type: str
    build: Builder
    since: int = 1
    check: Check | None = None
    dtypes: str = "fib"  # math kinds the op accepts on its tensor inputs: f(loat), i(nt), b(ool)


_REGISTRY: dict[str, OpEntry] = {}


def op(op_type: str, since: int = 1, check: Check | None = None, dtypes: str = "fib"):
    def decorate(build: Builder) -> Builder:
        _REGISTRY[op_type] = OpEntry(op_type, build, since, check, dtypes)
        return build

    return decorate


def entry(op_type: str) -> OpEntry | None:
    return _REGISTRY.get(op_type)


def registered_ops() -> list[str]:
    return sorted(_REGISTRY)


# --------------------------------------------------------------------------------------------
# a kernel built from per-shape preparations
# --------------------------------------------------------------------------------------------


@dataclass
class Dispatch:
    pipeline: Pipeline
    inputs: tuple[int, ...]  # positions in the kernel's inputs
    outputs: tuple[int, ...]  # positions in the kernel's outputs
    groups: tuple[int, int, int]
    uniform: Any = None  # a uniform buffer bound after the outputs (sizes of a shape class)


@dataclass
class Prepared:
    """What a kernel does for one set of input shapes: outputs to allocate, dispatches to record."""

    outputs: list[tuple[tuple[int, ...], np.dtype]]
    dispatches: list[Dispatch]


MAX_SHAPES_PER_KERNEL = 64  # prepared shapes a kernel keeps (each holds a small uniform buffer)


def shader_kernel(
    rt: SessionRuntime,
    prepare: Callable[[Sequence[GpuTensor]], Prepared],
    n_outputs: int = 1,
    host_inputs: frozenset[int] = frozenset(),
    note: str = "",
) -> Kernel:
    """A Kernel whose run allocates outputs and records the dispatches ``prepare`` gives for the
    input shapes (prepared once per distinct shapes). Inputs at ``host_inputs`` are numpy arrays
    that ``prepare`` reads; they are part of the cache key."""
    cache: dict[Any, Prepared] = {}

    def run(*args: Any) -> Any:
        key = tuple(
            None if a is None else (a.tobytes(), a.shape) if k in host_inputs else (a.shape, a.dtype)
            for k, a in enumerate(args)
        )
        prepared = cache.get(key)
        if prepared is None:
            if len(cache) >= MAX_SHAPES_PER_KERNEL:  # very dynamic shapes: start over, bounded
                cache.clear()
            prepared = cache[key] = prepare(args)
        outs = [rt.pool.tensor(shape, dtype) for shape, dtype in prepared.outputs]
        for d in prepared.dispatches:
            buffers = [args[k].buffer for k in d.inputs] + [outs[k].buffer for k in d.outputs]
            if d.uniform is not None:
                buffers.append(d.uniform)
            rt.stream.dispatch(d.pipeline, buffers, d.groups)
        return outs[0] if n_outputs == 1 else outs

    return Kernel(run=run, single_output=n_outputs == 1, host_inputs=host_inputs, note=note)
