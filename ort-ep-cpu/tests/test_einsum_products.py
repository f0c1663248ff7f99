"""Two-operand Einsum as one matrix product (``math._pair_contraction``): equal to onnxruntime
within float32 rounding for the contractions exported models use (TF/Keras attention and
projections, bilinear forms, outer products, labels summed away in one operand), and the
equations it leaves to numpy's einsum (ellipsis, a repeated label, broadcasting of size 1,
three operands) still right."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper

import ort_core as ort
from ort_ep_cpu.kernels.math import _pair_contraction

CASES = [
    ("abcd,cde->abe", (1, 32, 8, 16), (8, 16, 128)),  # Keras MultiHeadAttention's output projection
    ("abc,cde->abde", (2, 7, 32), (32, 4, 8)),  # its query/key/value projections
    ("aecd,abcd->acbe", (2, 5, 4, 8), (2, 6, 4, 8)),  # its attention scores
    ("acbe,aecd->abcd", (2, 4, 6, 5), (2, 5, 4, 8)),  # its weighted values
    ("ij,kj->ik", (3, 4), (5, 4)),
    ("bij,bjk->bki", (2, 3, 4), (2, 4, 5)),  # output in another order
    ("ij,ij->i", (3, 4), (3, 4)),
    ("ij,ij->", (3, 4), (3, 4)),
    ("i,j->ij", (3,), (4,)),
    ("abc,cd->d", (2, 3, 4), (4, 5)),  # labels summed away before the product
    ("ab,cd->abcd", (2, 3), (4, 5)),
]
FALLBACK = [
    ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),  # ellipsis
    ("ii,ij->j", (3, 3), (3, 4)),  # a repeated label (a diagonal)
    ("bij,bjk->bik", (1, 3, 4), (2, 4, 5)),  # batch 1 broadcast against 2
    ("ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),  # three operands
]


def _model(equation: str, shapes, elem: int) -> bytes:
    names = [f"x{k}" for k in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=equation)], "g",
        [helper.make_tensor_value_info(n, elem, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10).SerializeToString()


def _compare(equation: str, shapes, dtype=np.float32, rtol=1e-4, atol=1e-4) -> None:
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal(s) * (4 if np.dtype(dtype).kind == "i" else 1)).astype(dtype) for s in shapes]
    data = _model(equation, shapes, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    feeds = {f"x{k}": x for k, x in enumerate(xs)}
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):  # the cached plan serves the second run
        got = session.run(None, feeds)[0]
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize(("equation", "a", "b"), CASES, ids=[c[0] for c in CASES])
def test_pair_contractions_are_one_product_equal_to_onnxruntime(equation, a, b):
    assert _pair_contraction(equation, (a, b)) is not None
    _compare(equation, (a, b))


@pytest.mark.parametrize("case", FALLBACK, ids=[c[0] for c in FALLBACK])
def test_equations_left_to_numpy_are_right(case):
    equation, *shapes = case
    if len(shapes) == 2:
        assert _pair_contraction(equation, tuple(shapes)) is None
    _compare(equation, shapes)


def test_integer_and_half_operands_keep_their_dtype():
    _compare("abc,cde->abde", ((2, 3, 4), (4, 5, 6)), np.int64)
    _compare("bij,bjk->bki", ((2, 3, 4), (2, 4, 5)), np.float16, rtol=2e-3, atol=2e-2)


def test_a_transposed_output_is_contiguous():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    y = _pair_contraction("bij,bjk->bki", (a.shape, b.shape))(a, b)
    assert y.flags.c_contiguous
    np.testing.assert_allclose(y, np.einsum("bij,bjk->bki", a, b), rtol=1e-5, atol=1e-6)
