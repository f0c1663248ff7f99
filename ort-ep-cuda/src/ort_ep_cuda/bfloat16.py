"""bfloat16 tensors on a device whose array library has no bfloat16 dtype (CuPy).

A ``BFloat16Tensor`` holds the 16-bit patterns in a uint16 array and reports dtype bfloat16 (what
core reads: shape, dtype, nbytes). Kernels compute bfloat16 in float32, as onnxruntime's CUDA
kernels do: ``adapt`` widens every bfloat16 input exactly (the bits shifted into the high half of
a float32) and rounds every bfloat16 output once to nearest-even, so data movement (Transpose,
Gather, Concat, ...) is bit-exact and math is float32 math rounded once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


class BFloat16Tensor:
    """A bfloat16 tensor as its bit patterns (``bits``: a uint16 device array)."""

    dtype = BFLOAT16

    def __init__(self, bits: Any):
        self.bits = bits

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.bits.shape)

    @property
    def ndim(self) -> int:
        return len(self.bits.shape)

    @property
    def size(self) -> int:
        return int(self.bits.size)

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


def widen(xp: Any, t: BFloat16Tensor) -> Any:
    """Exactly: a bfloat16 is the high half of a float32."""
    return xp.left_shift(t.bits.astype(np.uint32), 16).view(np.float32)


def narrow(xp: Any, x: Any) -> BFloat16Tensor:
    """float32 -> bfloat16, rounded to nearest even; NaN stays a quiet NaN of the same sign."""
    u = xp.asarray(x, dtype=np.float32, order="C").view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = xp.isnan(u.view(np.float32))
    quiet = (u >> 16) | np.uint32(0x0040)
    return BFloat16Tensor(xp.where(nan, quiet, rounded).astype(np.uint16))


def adapt(xp: Any, fn: Callable[..., Any], bf16_outputs: Sequence[bool], n_outputs: int) -> Callable[..., Any]:
    """``fn`` (written for float32) over bfloat16 inputs and outputs."""

    def run(*args: Any) -> Any:
        wide = [widen(xp, a) if isinstance(a, BFloat16Tensor)
                else a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == BFLOAT16 else a for a in args]
        out = fn(*wide)
        if n_outputs == 1:
            return narrow(xp, out) if bf16_outputs[0] else out
        return [narrow(xp, o) if b else o for o, b in zip(out, bf16_outputs)]

    return run
