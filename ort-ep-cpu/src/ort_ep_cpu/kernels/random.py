"""Random generators: RandomNormal/Uniform(+Like), Multinomial, Bernoulli.

Each kernel owns one numpy ``Generator`` made at session creation: seeded from the node's
``seed`` attribute when it has one (so two sessions of the same model draw the same numbers,
and successive runs of one session draw new ones), else from ``ort_core.set_seed``'s seed and
the node's name when one was set, from OS entropy otherwise. Outputs match
other runtimes only statistically; the suite's expected values cannot be reproduced.
"""

from __future__ import annotations

import threading
import zlib

import numpy as np
import onnx

from ort_core.seed import default_seed

from ..registry import kernel

_FLOAT = onnx.TensorProto.FLOAT


def _generator(node) -> np.random.Generator:
    seed = node.attr("seed")
    if seed is None:
        # ort_core.set_seed (onnxruntime's set_seed): sessions made after the same seed draw
        # the same numbers; the node's name keeps two unseeded nodes of a model apart
        default = default_seed()
        if default is not None:
            return np.random.default_rng([default & 0xFFFFFFFFFFFFFFFF, zlib.crc32(node.name.encode())])
        return np.random.default_rng()
    # the seed is a float attribute: use all its bits so 0.5 and 0.7 differ
    return np.random.default_rng(int(np.array(float(seed), dtype=np.float64).view(np.uint64)))


def _dtype(code: int | None, fallback: np.dtype | None, node) -> np.dtype:
    if code is None or int(code) == 0:
        if fallback is None:
            raise ValueError(f"{node.op_type} {node.name!r}: no dtype attribute and no input to take it from")
        return np.dtype(fallback)
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(code)))


def _drawer(node, draw):
    """Serialise draws on the kernel's generator: run may be called from several threads."""
    rng = _generator(node)
    lock = threading.Lock()

    def sample(*args):
        with lock:
            return draw(rng, *args)

    return sample


def _shape_of(node) -> tuple[int, ...]:
    shape = node.attr("shape")
    if shape is None:
        raise ValueError(f"{node.op_type} {node.name!r}: attribute 'shape' is required")
    return tuple(int(d) for d in shape)


@kernel("RandomNormal")
def _random_normal(node, request):
    dtype = _dtype(node.attr("dtype", _FLOAT), None, node)
    mean, scale, shape = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0)), _shape_of(node)
    return _drawer(node, lambda rng: rng.normal(mean, scale, shape).astype(dtype))


@kernel("RandomUniform")
def _random_uniform(node, request):
    dtype = _dtype(node.attr("dtype", _FLOAT), None, node)
    low, high, shape = float(node.attr("low", 0.0)), float(node.attr("high", 1.0)), _shape_of(node)
    return _drawer(node, lambda rng: rng.uniform(low, high, shape).astype(dtype))


@kernel("RandomNormalLike")
def _random_normal_like(node, request):
    code = node.attr("dtype")
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))
    return _drawer(
        node, lambda rng, x: rng.normal(mean, scale, x.shape).astype(_dtype(code, x.dtype, node))
    )


@kernel("RandomUniformLike")
def _random_uniform_like(node, request):
    code = node.attr("dtype")
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    return _drawer(
        node, lambda rng, x: rng.uniform(low, high, x.shape).astype(_dtype(code, x.dtype, node))
    )


@kernel("Bernoulli", since=15)
def _bernoulli(node, request):
    code = node.attr("dtype")
    return _drawer(
        node, lambda rng, p: (rng.random(p.shape) < p).astype(_dtype(code, p.dtype, node))
    )


@kernel("Multinomial", since=7)
def _multinomial(node, request):
    dtype = _dtype(node.attr("dtype", onnx.TensorProto.INT32), None, node)
    sample_size = int(node.attr("sample_size", 1))

    def draw(rng, logits):
        if logits.ndim != 2:
            raise ValueError(f"Multinomial {node.name!r}: input must be [batch, classes], got rank {logits.ndim}")
        # the input holds unnormalised log-probabilities: softmax per row, then inverse-CDF
        # sampling of all draws at once
        z = logits.astype(np.float64)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        cdf = np.cumsum(p, axis=1)
        cdf /= cdf[:, -1:]
        u = rng.random((z.shape[0], sample_size))
        idx = (u[:, :, None] >= cdf[:, None, :]).sum(axis=2)
        return np.minimum(idx, z.shape[1] - 1).astype(dtype)

    return _drawer(node, draw)
