"""onnxruntime's float32 formulas for the ai.onnx.ml post transforms where they are not the
exact functions: its PROBIT is an approximate inverse erf (Winitzki, a = 0.147), up to 5e-3
away from the exact quantile, and its LOGISTIC is mirrored for negative scores. The ml kernels
use these so that their scores are onnxruntime's."""

from __future__ import annotations

import numpy as np

_F = np.float32


def logistic(v: np.ndarray) -> np.ndarray:
    # onnxruntime's ComputeLogistic: 1 / (1 + exp(-|v|)), mirrored for v < 0, in float32
    e = _F(1) / (_F(1) + np.exp(-np.abs(v)))
    return np.where(v < 0, _F(1) - e, e).astype(_F)


def erfinv_approx(x: np.ndarray) -> np.ndarray:
    # onnxruntime's ErfInv (Winitzki's approximation, a = 0.147), the one its PROBIT uses
    sgn = np.where(x < 0, _F(-1), _F(1))
    t = np.log((_F(1) - x) * (_F(1) + x))
    v = _F(2 / (3.14159 * 0.147)) + _F(0.5) * t
    v2 = _F(1 / 0.147) * t
    return (sgn * np.sqrt(-v + np.sqrt(v * v - v2))).astype(_F)


def probit(p: np.ndarray) -> np.ndarray:
    return (_F(1.41421356) * erfinv_approx(_F(2) * p - _F(1))).astype(_F)
