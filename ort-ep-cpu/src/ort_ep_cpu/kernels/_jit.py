"""Compiled loops for the few kernels numpy cannot express without a K-fold copy (numba).

A depthwise convolution does K multiply-adds per output value and has no GEMM in it: numpy
either copies K shifted images into a column buffer for a batched GEMV, or makes 2K passes of
multiply/add over the output; both are memory-bound (about 2 ms for ocr-rec's 240-channel 5x5
layer on this machine). A compiled loop reads each padded row once per tap from L1 and
vectorises over the output row (about 4x faster). numba is optional (``pip install
ort-ep-cpu[numba]``): without it, or with ``ORT_EP_CPU_NUMBA=0`` in the environment, the numpy
path runs. Functions compile on first use per dtype (``cache=True`` keeps the machine code on
disk for the next process).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

_lock = threading.Lock()
_depthwise: Callable | None = None
_max_pool: Callable | None = None
_tried = False

#: compiled kernels are wanted (tests switch this off to run the numpy paths)
USE = os.environ.get("ORT_EP_CPU_NUMBA", "1") != "0"


def enabled() -> bool:
    """Whether compiled kernels are used: wanted, and numba importable."""
    return USE and depthwise_rows() is not None


def depthwise_rows() -> Callable | None:
    """The compiled depthwise kernel, or None where numba is not installed."""
    _load()
    return _depthwise


def max_pool_rows() -> Callable | None:
    """The compiled 2-D max-pool kernel, or None where numba is not installed."""
    _load()
    return _max_pool


def _load() -> None:
    global _depthwise, _max_pool, _tried
    if _tried:
        return
    with _lock:
        if not _tried:
            try:
                import numba
            except ImportError:  # optional dependency
                _depthwise = _max_pool = None
            else:
                _max_pool = numba.njit(cache=True, nogil=True, boundscheck=False)(_max_pool_py)
                # "contract": multiply-adds as FMA instructions (rounding differs from numpy's by
                # an ulp; no reassociation)
                _depthwise = numba.njit(cache=True, nogil=True, boundscheck=False,
                                        fastmath={"contract"})(_depthwise_py)
            _tried = True


def _depthwise_py(xp, w, b, y, sh, sw, dh, dw, c0, c1):  # pragma: no cover - compiled by numba
    """y[n, c, oy, ox] = b[c] + sum_{a, j} w[c, a, j] * xp[n, c, oy*sh + a*dh, ox*sw + j*dw]
    for channels c0 <= c < c1: per output row, one accumulator row in L1, the innermost loop
    over the output columns. Each tap's source row is sliced first, and column stride 1 has a
    loop of its own: with the dilation or a run-time stride inside the index LLVM did not
    vectorise the loop (3.5x slower)."""
    n_img, _, oh, ow = y.shape
    kh, kw = w.shape[1], w.shape[2]
    acc = np.empty(ow, dtype=y.dtype)
    for n in range(n_img):
        for c in range(c0, c1):
            for oy in range(oh):
                acc[:] = b[c]
                for a in range(kh):
                    row = xp[n, c, oy * sh + a * dh]
                    for j in range(kw):
                        wv = w[c, a, j]
                        if sw == 1:
                            src = row[j * dw : j * dw + ow]
                            for ox in range(ow):
                                acc[ox] += wv * src[ox]
                        else:
                            start = j * dw
                            for ox in range(ow):
                                acc[ox] += wv * row[start + ox * sw]
                y[n, c, oy, :] = acc


def _max_pool_py(x, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi):  # pragma: no cover - numba
    """y[n, c, oy, ox] = max over the window's in-range taps of x[n, c, oy*sh - top + a*dh,
    ox*sw - left + j*dw] (padding takes no part, as in the numpy path); ``lo[j]``/``hi[j]``
    bound the output columns whose tap j is in range, so the inner loop has no test. NaN
    propagates (np.maximum), as numpy's path does."""
    n_img, n_ch, oh, ow = y.shape
    h = x.shape[2]
    acc = np.empty(ow, dtype=y.dtype)
    for n in range(n_img):
        for c in range(n_ch):
            for oy in range(oh):
                acc[:] = -np.inf
                for a in range(kh):
                    iy = oy * sh - top + a * dh
                    if iy < 0 or iy >= h:
                        continue
                    row = x[n, c, iy]
                    for j in range(kw):
                        off = j * dw - left
                        for ox in range(lo[j], hi[j]):
                            acc[ox] = np.maximum(acc[ox], row[ox * sw + off])
                y[n, c, oy, :] = acc
