"""Compiled loops for the few kernels numpy cannot express without a K-fold copy (numba).

A depthwise convolution does K multiply-adds per output value and has no GEMM in it: numpy
either copies K shifted images into a column buffer for a batched GEMV, or makes 2K passes of
multiply/add over the output; both are memory-bound (about 2 ms for ocr-rec's 240-channel 5x5
layer on this machine). A compiled loop reads each padded row once per tap from L1 and
vectorises over the output row (2.5-3x faster on ocr-rec's layers). numba is optional (``pip install
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
_depthwise_flat: Callable | None = None
_hard_sigmoid: Callable | None = None
_tried = False

#: compiled kernels are wanted (tests switch this off to run the numpy paths)
USE = os.environ.get("ORT_EP_CPU_NUMBA", "1") != "0"


def enabled() -> bool:
    """Whether compiled kernels are used: wanted, and numba importable."""
    if not USE:
        return False
    _load()
    return _depthwise is not None


def depthwise_rows() -> Callable | None:
    """The compiled depthwise kernel, or None where numba is not installed."""
    _load()
    return _depthwise


def depthwise_flat() -> Callable | None:
    """The compiled stride-1 depthwise kernel on the flat padded plane, or None."""
    _load()
    return _depthwise_flat


def hard_sigmoid() -> Callable | None:
    """The compiled HardSigmoid loop ``(x, y, alpha, beta)`` over flat arrays, or None."""
    _load()
    return _hard_sigmoid


def _load() -> None:
    global _depthwise, _depthwise_flat, _hard_sigmoid, _tried
    if _tried:
        return
    with _lock:
        if not _tried:
            try:
                import numba
            except ImportError:  # optional dependency
                _depthwise = _depthwise_flat = _hard_sigmoid = None
            else:
                # "contract": multiply-adds as FMA instructions (rounding differs from numpy's by
                # an ulp; no reassociation)
                options = {"nogil": True, "boundscheck": False, "fastmath": {"contract"}}
                try:
                    cached = True
                    numba.njit(cache=True, **options)(_hard_sigmoid_py)
                except RuntimeError:  # no writable cache location: compile in each process
                    cached = False
                _depthwise = numba.njit(cache=cached, **options)(_depthwise_py)
                _depthwise_flat = numba.njit(cache=cached, **options)(_depthwise_flat_py)
                _hard_sigmoid = numba.njit(cache=cached, **options)(_hard_sigmoid_py)
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


def _depthwise_flat_py(xp, w, b, y, dh, dw, c0, c1):  # pragma: no cover - compiled by numba
    """Stride-1 depthwise convolution "on the wide output": per channel one accumulator over
    the flat padded plane's ``(oh - 1) * wp + ow`` positions, each tap one contiguous
    multiply-add over it (long vectorised loops where output rows are short: 3.5x on ocr-det's
    10x10 layers), then the rows cropped out. For accumulators that fit L1 (the caller checks)."""
    n_img, _, oh, ow = y.shape
    kh, kw = w.shape[1], w.shape[2]
    wp = xp.shape[3]
    wide = (oh - 1) * wp + ow
    acc = np.empty(wide, dtype=y.dtype)
    for n in range(n_img):
        for c in range(c0, c1):
            plane = xp[n, c].reshape(-1)
            acc[:] = b[c]
            for a in range(kh):
                for j in range(kw):
                    wv = w[c, a, j]
                    off = a * dh * wp + j * dw
                    src = plane[off : off + wide]
                    for p in range(wide):
                        acc[p] += wv * src[p]
            for oy in range(oh):
                y[n, c, oy, :] = acc[oy * wp : oy * wp + ow]


def _hard_sigmoid_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    """y = clip(alpha * x + beta, 0, 1) in one pass (numpy needs three: multiply, add, clip;
    hard-swish activations run it on every large feature map of the OCR models). NaN stays
    NaN, as np.clip leaves it: neither comparison is true for it."""
    for i in range(x.size):
        v = x[i] * alpha + beta
        if v < 0:
            v = 0
        elif v > 1:
            v = 1
        y[i] = v
