"""Bitwise ops: BitwiseAnd/Or/Xor/Not, BitShift, BitCast."""

from __future__ import annotations

import numpy as np
import onnx

from ..registry import kernel


@kernel("BitwiseAnd", since=18)
def _bitwise_and(node, request):
    return np.bitwise_and


@kernel("BitwiseOr", since=18)
def _bitwise_or(node, request):
    return np.bitwise_or


@kernel("BitwiseXor", since=18)
def _bitwise_xor(node, request):
    return np.bitwise_xor


@kernel("BitwiseNot", since=18)
def _bitwise_not(node, request):
    return np.invert


def _check_shift(node) -> str | None:
    direction = node.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        return f"BitShift: direction {direction!r} is not LEFT or RIGHT"
    return None


@kernel("BitShift", since=11, check=_check_shift)
def _bitshift(node, request):
    # Shifts outside [0, bit width) are defined since opset 28 (left: 0; right: the sign fill);
    # earlier opsets leave them undefined, so the same rule serves every version.
    left = node.attr("direction") == "LEFT"

    def shift(a, b):
        a, b = np.broadcast_arrays(a, b)
        bits = a.dtype.itemsize * 8
        signed = a.dtype.kind == "i"
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        out_of_range = (b < 0) | (b >= bits) if signed or b.dtype.kind == "i" else b >= bits
        if left:
            amount = np.where(out_of_range, 0, b).astype(unsigned)
            shifted = np.left_shift(a.view(unsigned) if signed else a, amount)
            shifted = shifted.view(a.dtype) if signed else shifted
            return np.where(out_of_range, np.zeros((), a.dtype), shifted).astype(a.dtype, copy=False)
        if signed:  # arithmetic shift by bits-1 gives the sign fill that out-of-range shifts get
            amount = np.where(out_of_range, bits - 1, b).astype(a.dtype)
            return np.right_shift(a, amount)
        amount = np.where(out_of_range, 0, b).astype(a.dtype)
        return np.where(out_of_range, np.zeros((), a.dtype), np.right_shift(a, amount)).astype(a.dtype, copy=False)

    return shift


@kernel("BitCast", since=26)
def _bitcast(node, request):
    to = int(node.attr("to"))
    if to == onnx.TensorProto.STRING:
        raise ValueError(f"BitCast {node.name!r}: cannot bit-cast to string")
    target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))

    def bitcast(x):
        if x.dtype.itemsize != target.itemsize:
            raise ValueError(
                f"BitCast {node.name!r}: {x.dtype} ({x.dtype.itemsize * 8} bits) and {target} "
                f"({target.itemsize * 8} bits) differ in width"
            )
        return (x if x.flags.c_contiguous else x.copy()).view(target)

    return bitcast
