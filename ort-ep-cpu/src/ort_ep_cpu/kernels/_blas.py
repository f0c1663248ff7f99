"""GEMM straight through the CBLAS interface of numpy's own BLAS library, for the one thing
``np.matmul`` cannot do: accumulate into its output (``beta = 1``).

The large convolutions use it to sum one GEMM per kernel tap into one output, each reading
the padded input at the tap's offset, instead of first copying K shifted images into a
column matrix (``nn._conv_taps``), and 1x1 convolutions to add their GEMM onto the bias
written first. The library is the one numpy already loaded, found by
threadpoolctl, so ``intra_op_num_threads`` (``threads.py``) governs these calls too; ctypes
releases the GIL during them, so concurrent runs do not serialise. Where no CBLAS symbol is
found (a numpy built against another BLAS that does not export one), ``gemm()`` returns None
and the convolutions keep their column path.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import numpy as np

from .. import threads

# (symbol, integer type): numpy's wheels ship OpenBLAS built for 64-bit integers with scipy's
# symbol prefix and suffix; other builds export the plain CBLAS names (32-bit integers)
_CANDIDATES = {
    np.dtype(np.float32): [("scipy_cblas_sgemm64_", ctypes.c_int64), ("cblas_sgemm64_", ctypes.c_int64),
                           ("cblas_sgemm", ctypes.c_int)],
    np.dtype(np.float64): [("scipy_cblas_dgemm64_", ctypes.c_int64), ("cblas_dgemm64_", ctypes.c_int64),
                           ("cblas_dgemm", ctypes.c_int)],
}
_ROW_MAJOR, _NO_TRANS = 101, 111

_lock = threading.Lock()
_found: dict[np.dtype, Callable | None] | None = None

#: wanted (tests switch this off to run the column path)
USE = True


def gemm(dtype: np.dtype) -> Callable | None:
    """``f(m, n, k, a, lda, b, ldb, beta, c, ldc)`` computing C = A @ B + beta * C on
    row-major operands given as addresses (int) with their leading dimensions (elements), for
    float32 or float64; None where numpy's BLAS exports no CBLAS GEMM (or ``USE`` is off)."""
    if not USE:
        return None
    global _found
    if _found is None:
        with _lock:
            if _found is None:
                _found = _load()
    return _found.get(np.dtype(dtype))


def _load() -> dict[np.dtype, Callable | None]:
    found: dict[np.dtype, Callable | None] = {}
    # numpy's own library first (scipy may have loaded a second one)
    libraries = sorted(threads.blas_libraries(), key=lambda c: "numpy" not in c.filepath)
    for dtype, candidates in _CANDIDATES.items():
        found[dtype] = None
        for controller in libraries:
            try:
                library = ctypes.CDLL(controller.filepath)
            except OSError:
                continue
            for symbol, integer in candidates:
                function = getattr(library, symbol, None)
                if function is not None:
                    found[dtype] = _bind(function, integer, ctypes.c_float if dtype == np.float32 else ctypes.c_double)
                    break
            if found[dtype] is not None:
                break
    return found


def _bind(function, integer, scalar) -> Callable:
    pointer = ctypes.c_void_p
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, scalar,
                         pointer, integer, pointer, integer, scalar, pointer, integer]
    function.restype = None

    def call(m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int, beta: float, c: int, ldc: int) -> None:
        function(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc)

    return call
