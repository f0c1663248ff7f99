"""The exact integer products of 8-bit codes (``kernels/_integer.py``) on each of their paths:
oneDNN's 8-bit kernels with the zero points' terms added in int32, the compiled VPMADDWD
product of packed panels, and float32 row chunks (numpy only). Each must give the integers (A - za) @ (B - zb) exactly (compared with int64
numpy), at the extremes of the codes, for every pairing of uint8/int8 operands and zero points
that are absent, scalar, per row of A or per column of B. Then the quantized ops that use them
against onnxruntime at sizes that take oneDNN."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.testing import exact_reference
from ort_ep_cpu.kernels import _integer, _jit, _onednn

U8, I8 = np.uint8, np.int8


def _codes(rng, shape, dtype):
    """Codes with the extremes over-represented."""
    info = np.iinfo(dtype)
    return rng.choice([info.min, info.max, info.min + 1, info.max - 1, 0, 1, 77], shape).astype(dtype)


def _zero_point(rng, kind: str, dtype, size: int):
    info = np.iinfo(dtype)
    if kind == "none":
        return None
    if kind == "scalar":
        return np.asarray(info.max if dtype == U8 else info.min, dtype)  # the farthest from the codes
    return rng.integers(info.min, info.max + 1, size).astype(dtype)


def _want(a, za, b, zb):
    a64 = a.astype(np.int64) - (0 if za is None else np.asarray(za, np.int64).reshape(-1, 1) if np.ndim(za) else za)
    b64 = b.astype(np.int64) - (0 if zb is None else np.asarray(zb, np.int64))
    return a64 @ b64


def _quad_product_or_skip() -> None:
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    if _jit.quad_product() is None:
        pytest.skip("the byte product needs numba compiling for an x86 CPU with AVX2")


@pytest.fixture(params=["onednn", "quad_product", "packed_product", "float32_chunks"])
def path(request, monkeypatch):
    """Each path of ``ConstantIntegerMatrix``; returns a list of the oneDNN implementations run.
    "quad_product" takes the byte product for every B - zb that fits int8, however many of its
    pairs are outliers (the codes here are mostly extremes); "packed_product" never takes it."""
    seen: list[str] = []
    if request.param == "onednn":
        if not _onednn.available():
            pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
        monkeypatch.setattr(_integer, "ONEDNN_MIN_MACS", 0)
        real = _onednn.IntegerMatMul.run
        monkeypatch.setattr(_onednn.IntegerMatMul, "run", lambda self, x, y: seen.append(self.implementation) or real(self, x, y))
    else:
        monkeypatch.setattr(_onednn, "USE", False)
        use_compiled(monkeypatch, request.param != "float32_chunks", "packed_product")
        if request.param == "quad_product":
            _quad_product_or_skip()
            monkeypatch.setattr(_integer, "MAX_OUTLIER_SHARE", 1.0)
        else:
            monkeypatch.setattr(_integer.ConstantIntegerMatrix, "quad_packed", lambda self: None)
    return request.param, seen


@pytest.mark.parametrize("a_dtype,b_dtype", [(U8, I8), (U8, U8), (I8, I8), (I8, U8)])
@pytest.mark.parametrize("za_kind", ["none", "scalar", "per_row"])
@pytest.mark.parametrize("zb_kind", ["none", "scalar", "per_column"])
def test_constant_integer_matrix_is_exact(path, a_dtype, b_dtype, za_kind, zb_kind):
    kind, seen = path
    rng = np.random.default_rng(5)
    m, k, n = 5, 771, 67  # K not a multiple of four (the loop's remainder), nor of 256 (the chunks)
    a, b = _codes(rng, (m, k), a_dtype), _codes(rng, (k, n), b_dtype)
    za, zb = _zero_point(rng, za_kind, a_dtype, m), _zero_point(rng, zb_kind, b_dtype, n)
    matrix = _integer.ConstantIntegerMatrix(b, zb)
    got = matrix.times(a, za)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _want(a, za, b, zb))
    if kind == "onednn":
        # only kernels with 8-bit dot products are taken: others saturate in int16
        if seen:
            assert all("amx" in s or "vnni" in s for s in seen), seen
        else:
            pytest.skip("this CPU has no AMX or VNNI kernel for the product: the compiled loop ran")


def test_constant_integer_matrix_takes_only_8_bit_codes(path):
    """A of another dtype is refused with its dtype and shape named (the packed product holds
    A - za in int16, which only codes minus their zero point are sure to fit)."""
    b = _codes(np.random.default_rng(6), (300, 40), U8)
    with pytest.raises(ValueError, match=r"8-bit codes \(M, 300\), got int32 \(3, 300\)"):
        _integer.ConstantIntegerMatrix(b, np.uint8(255)).times(np.zeros((3, 300), np.int32))


def test_uint8_codes_reach_onednn_without_int16_copies():
    """oneDNN takes int8 codes: a uint8 B is shifted by one XOR of its sign bit into one int8
    array, not through two int16 copies (four times B at once: ddddocr's 1024 x 8210 classifier
    took 34 MB at its first run), and that array is not kept beside oneDNN's packed copy."""
    import tracemalloc

    if not _onednn.available():
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    rng = np.random.default_rng(3)
    b = _codes(rng, (1024, 2048), U8)
    a = _codes(rng, (1, 1024), U8)
    if _integer.ConstantIntegerMatrix(b, np.asarray(121, U8)).codes_plan(1, np.dtype(U8)) is None:
        pytest.skip("this CPU has no AMX or VNNI kernel for the product: the compiled loop runs")
    tracemalloc.start()
    try:
        matrix = _integer.ConstantIntegerMatrix(b, np.asarray(121, U8))
        z = matrix.times(a, np.asarray(7, U8))
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(z, _want(a, 7, b, 121))
    assert peak < 1.5 * b.nbytes, f"peak {peak / 2**20:.1f} MB for a {b.nbytes / 2**20:.1f} MB B"
    assert kept < 0.5 * b.nbytes, f"{kept / 2**20:.1f} MB kept for a {b.nbytes / 2**20:.1f} MB B"


@pytest.mark.parametrize("extremes", [True, False])
def test_exact_float32_product_equals_the_float64_one(extremes):
    # at the extremes the sums pass 2^24 (one GEMM would round them): float32 chunks of 256
    # rows, exact (255 * 255 * 256 < 2^24); small values bound every partial sum below 2^24:
    # one GEMM
    rng = np.random.default_rng(9)
    if extremes:
        a = rng.choice([-255, 255, 254, -1, 0, 7], (3, 768)).astype(np.int32)
        b = rng.choice([-255, 255, -254, 3], (768, 64)).astype(np.int32)
    else:
        a = rng.integers(-40, 41, (3, 768)).astype(np.int32)
        b = rng.integers(-60, 61, (768, 64)).astype(np.int32)
    column_abs = float(np.abs(b).sum(axis=0).max())
    assert (float(np.abs(a).max()) * column_abs >= _integer.F32_EXACT) == extremes
    got = _integer.exact_product_f32(a, np.ascontiguousarray(b.astype(np.float32)), column_abs)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    np.testing.assert_array_equal(_integer.product(a, b), a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("compiled", [True, False])
def test_the_fallback_without_onednn_is_exact_for_many_rows_and_few(compiled, monkeypatch):
    """Where oneDNN does not take the product (no VNNI, or not installed): B - zb packed once
    for the compiled product, or (numpy only) one float32 B, with the bound's check."""
    use_compiled(monkeypatch, compiled, "packed_product")
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    rng = np.random.default_rng(4)
    b = _codes(rng, (700, 96), U8)
    for first_rows in (1, 40):
        matrix = _integer.ConstantIntegerMatrix(b, np.asarray(3, U8))
        for rows in (first_rows, 41 - first_rows):
            a = _codes(rng, (rows, 700), U8)
            a[0] = 255  # max|A - za| 252 with B's column sums past 2^24 / 252: the chunks
            np.testing.assert_array_equal(matrix.times(a, np.asarray(3, U8)), _want(a, 3, b, 3))
            small = (a // 16).astype(U8)  # a bound below 2^24: one GEMM
            np.testing.assert_array_equal(matrix.times(small, np.asarray(3, U8)), _want(small, 3, b, 3))
        assert (matrix._packed is not None, matrix._float is not None) == (compiled, not compiled)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 8, 70])  # the 1-3 row blocks, and past a row block
@pytest.mark.parametrize("k,n", [(1, 1), (37, 19), (512, 48), (96, 130)])
@pytest.mark.parametrize("b_range", ["int8", "int16"])
def test_packed_product_is_exact_for_every_row_and_column_remainder(m, k, n, b_range, monkeypatch):
    """``_jit.packed_product`` through ``ConstantIntegerMatrix``: every count of rows left by
    the four-row register block, K odd (a zero-padded pair), N not a whole panel, B - zb
    packed as int8 (zero point 0 of int8 codes) or int16 (it does not fit int8), on one
    thread (the serial loop) and split over the session's threads."""
    from ort_ep_cpu import threads

    asked = use_compiled(monkeypatch, True, "packed_product")  # the share counts asked for
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "quad_packed", lambda self: None)  # not the byte product
    rng = np.random.default_rng(m * 1000 + k)
    a = _codes(rng, (m, k), U8)
    b = _codes(rng, (k, n), I8)
    b[0, 0] = 127  # with zero point -128: 255, past int8
    zb = None if b_range == "int8" else np.asarray(-128, I8)
    want = _want(a, 255, b, zb)
    for split in (False, True):
        monkeypatch.setattr(_integer, "SPLIT_MIN_MACS", 0 if split else 1 << 62)
        matrix = _integer.ConstantIntegerMatrix(b, zb)
        np.testing.assert_array_equal(matrix.times(a, np.asarray(255, U8)), want)
        assert matrix._packed.dtype == (np.int8 if b_range == "int8" else np.int16)
        # one share takes the serial loop (entering the thread pool costs 5-9 us)
        assert [call for call in asked if call][-1] == ((threads.usable(),) if split else (1,))


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 70])  # the 1-3 row blocks, and past a row block
@pytest.mark.parametrize("k,n", [(1, 1), (37, 19), (512, 48), (98, 130)])
@pytest.mark.parametrize("a_dtype,b_dtype,zb", [(U8, I8, 0), (I8, I8, 0), (U8, U8, 128), (I8, U8, 128)])
def test_quad_product_is_exact_with_its_outlier_pairs(m, k, n, a_dtype, b_dtype, zb, monkeypatch):
    """``_jit.quad_product`` through ``ConstantIntegerMatrix``: every row remainder of the
    register block, K not a multiple of four, N not a whole panel, int8 codes of A (shifted to
    uint8 with their zero point), uint8 B of zero point 128, on one thread and split. B holds
    pairs VPMADDUBSW would saturate on (127, 127 against codes of 255: 64770 is past int16),
    which the packing moves out and the loop adds back: without them the sums are wrong."""
    _quad_product_or_skip()
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    monkeypatch.setattr(_integer, "MAX_OUTLIER_SHARE", 1.0)
    # the packing of a CPU without VNNI (on one with it the block's VPDPBUSD sums them too)
    monkeypatch.setattr(_jit, "has_avx512_vnni", lambda: False)
    rng = np.random.default_rng(m * 1000 + k)
    bs = np.clip(np.round(rng.standard_normal((k, n)) * 30), -128, 127).astype(np.int16)
    bs[: k // 2 * 2 : 2, ::3] = 127  # pairs of one sign past 128 in every third column
    bs[1 : k // 2 * 2 : 2, ::3] = 127
    b = (bs + zb).astype(b_dtype)
    a = _codes(rng, (m, k), a_dtype)
    a[:, ::2] = np.iinfo(a_dtype).max
    za = np.asarray(np.iinfo(a_dtype).min + 3, a_dtype)
    want = _want(a, za, b, np.asarray(zb, b_dtype))
    for split in (False, True):
        monkeypatch.setattr(_integer, "SPLIT_MIN_MACS", 0 if split else 1 << 62)
        matrix = _integer.ConstantIntegerMatrix(b, np.asarray(zb, b_dtype))
        np.testing.assert_array_equal(matrix.times(a, za), want)
        assert matrix._quads is not None and matrix._packed is None  # the byte product ran, not the panels
        assert matrix._quads.outliers.shape[0] >= (k // 2) * len(range(0, n, 3))  # and those of the random values


@pytest.mark.parametrize("a_dtype,b_dtype,zb", [(U8, I8, 0), (U8, I8, -3), (U8, U8, 131), (I8, I8, 5), (I8, U8, 128)])
@pytest.mark.parametrize("rows", [8, 48])
def test_scaled_times_takes_onednns_scaled_product(a_dtype, b_dtype, zb, rows, monkeypatch):
    """Where oneDNN has 8-bit dot products, MatMulIntegerToFloat's float32((A - za) @ (B - zb))
    * scale is one oneDNN product with the zero points and the scale (``ScaledIntegerMatMul``):
    each thread converts the sums it made, where a second pass over the int32 sums read half
    of them from the other core (48 x 512 @ 512 x 384: 37-48 -> 13-17 us). The bits of the formula,
    for each pairing of code types, B's zero point at 0, either side of it and at the uint8
    shift, A's present or absent, one scale or one per column; no compiled pass is asked for."""
    matrix = _integer.ConstantIntegerMatrix(_codes(np.random.default_rng(3), (512, 384), b_dtype), np.asarray(zb, b_dtype))
    if matrix.codes_plan(rows, np.dtype(a_dtype)) is None:
        pytest.skip("oneDNN with 8-bit dot-product kernels (VNNI, AMX) is not here")
    asked = use_compiled(monkeypatch, True, "integer_to_float")
    rng = np.random.default_rng(4)
    a = _codes(rng, (rows, 512), a_dtype)
    for za in (np.asarray(np.iinfo(a_dtype).max - 7, a_dtype), None):
        for scale in (np.array([3e-4], np.float32), (rng.random(384) * 1e-3).astype(np.float32)):
            got = matrix.scaled_times(a, za, scale)
            want = _want(a, za, matrix.b, np.asarray(zb, b_dtype)).astype(np.int32).astype(np.float32) * scale
            np.testing.assert_array_equal(got, want)
    assert not asked, "the int32 sums were converted in a second pass"
    assert sorted(key[3] for key in matrix.plans if key[0] == "scaled") == [False, True]
    scaled = [matrix.plans[key] for key in matrix.plans if key[0] == "scaled"]
    assert all(isinstance(getattr(plan, "threaded", plan), _onednn.ScaledIntegerMatMul) for plan in scaled)


def test_small_products_on_amx_take_one_thread():
    """An 8-bit product that runs on AMX tiles takes one thread below
    ``_onednn.AMX_ONE_THREAD_MACS`` multiply-adds with weights of at most
    ``AMX_ONE_THREAD_WEIGHTS`` bytes (64 x 128 x 128, two threads: 12.3 us, one: 7.3), the
    session's threads for more work or larger weights (read from memory in a large model); both
    paths (int32 sums, scaled float32), and the same bits."""
    rng = np.random.default_rng(11)
    small = _integer.ConstantIntegerMatrix(_codes(rng, (128, 128), I8), None)
    plan = small.scaled_plan(64, np.dtype(U8), False)
    if plan is None or "amx" not in plan.implementation:
        pytest.skip("oneDNN's 8-bit products do not run on AMX tiles here")
    assert plan.most_threads == 1 and small.codes_plan(64, np.dtype(U8)).most_threads == 1
    large = _integer.ConstantIntegerMatrix(_codes(rng, (512, 1024), I8), None)
    assert 48 * 512 * 1024 >= _onednn.AMX_ONE_THREAD_MACS
    assert large.scaled_plan(48, np.dtype(U8), False).most_threads == 0
    assert 8 * 512 * 1024 < _onednn.AMX_ONE_THREAD_MACS and 512 * 1024 > _onednn.AMX_ONE_THREAD_WEIGHTS
    assert large.scaled_plan(8, np.dtype(U8), False).most_threads == 0
    a = _codes(rng, (64, 128), U8)
    np.testing.assert_array_equal(small.times(a, np.asarray(3, U8)), _want(a, 3, small.b, None))


@pytest.mark.parametrize("per_column", [False, True])
def test_scaled_times_without_onednn_converts_in_one_compiled_pass(per_column, monkeypatch):
    """MatMulIntegerToFloat's float32(exact product) * scale where oneDNN does not take the
    product: ``_jit.integer_to_float``'s one pass, equal to numpy's two."""
    monkeypatch.setattr(_onednn, "USE", False)  # (with oneDNN the pass is asked for its own product first)
    asked = use_compiled(monkeypatch, True, "integer_to_float")
    rng = np.random.default_rng(8)
    b = np.clip(np.round(rng.standard_normal((96, 40)) * 20), -127, 127).astype(I8)
    a = _codes(rng, (6, 96), U8)
    scale = (rng.random(40 if per_column else 1) * 1e-3).astype(np.float32)
    got = _integer.ConstantIntegerMatrix(b, None).scaled_times(a, np.asarray(9, U8), scale)
    want = _want(a, 9, b, None).astype(np.int32).astype(np.float32) * scale
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert asked, "the compiled pass was not asked for"


def test_integer_to_float_converts_packed_vectors_on_avx2():
    """``_jit.integer_to_float`` converts eight int32 sums per instruction (VCVTDQ2PS on ymm):
    its sum was int64 (numba widens int32 arithmetic), which AVX2 converts one at a time, and
    the pass took 4x numpy's two."""
    import platform

    from ort_core.devices import host_cpu

    pytest.importorskip("numba", reason="numba (optional) is not installed")
    if platform.machine() not in ("x86_64", "AMD64") or "avx2" not in host_cpu().flags:
        pytest.skip("256-bit vectors need an x86 CPU with AVX2")
    import numba

    loop = _jit.integer_to_float()
    options = {k: v for k, v in loop.targetoptions.items() if k != "cache"}
    fresh = numba.njit(**options)(loop.py_func)  # cached machine code cannot be inspected
    acc, a = np.arange(64, dtype=np.int32).reshape(2, 32), np.zeros((2, 4), U8)
    y = np.empty((2, 32), np.float32)
    fresh(acc, a, np.int32(0), np.zeros(32, np.int32), np.int32(0), np.full(1, 0.5, np.float32), y)
    np.testing.assert_array_equal(y, acc * np.float32(0.5))
    assembly = fresh.inspect_asm(fresh.signatures[0]).splitlines()
    assert any("vcvtdq2ps" in line and "ymm" in line for line in assembly), "no VCVTDQ2PS on ymm registers"


def test_pack_quads_refuses_what_the_byte_product_cannot_hold(monkeypatch):
    """B - zb outside int8 (uint8 codes of zero point 0), and uniform weights, whose pairs pass
    128 about a quarter of the time, go to ``pack_panels``' product; a few such pairs stay
    (the packing of a CPU without AVX-512 VNNI)."""
    monkeypatch.setattr(_jit, "has_avx512_vnni", lambda: False)
    rng = np.random.default_rng(2)
    assert _integer.pack_quads(rng.integers(0, 256, (64, 32)).astype(U8), np.int32(0)) is None
    uniform = rng.integers(-128, 128, (256, 64)).astype(I8)
    assert _integer.pack_quads(uniform, np.int32(0)) is None
    small = np.clip(np.round(rng.standard_normal((256, 64)) * 10), -127, 127).astype(I8)
    small[10, 5] = small[11, 5] = -100  # one outlier pair of 128 * 64 = 8192
    packed = _integer.pack_quads(small, np.int32(0))
    assert packed is not None
    np.testing.assert_array_equal(packed.outliers, [[10, 5, -100, -100]])
    np.testing.assert_array_equal(packed.starts, [0, 1, 1, 1, 1])  # panel 0 holds it
    np.testing.assert_array_equal(packed.column_sums, small.sum(axis=0, dtype=np.int32))
    # quad 2 of panel 0 holds rows 8-11 of columns 0-15, four rows per column in turn
    quad = packed.quads[0, 2].reshape(16, 4)
    np.testing.assert_array_equal(quad[:, :2], small[8:10, :16].T)
    assert (quad[5, 2:] == 0).all()  # the outlier pair, moved out


@pytest.mark.parametrize("m", [1, 3, 8])
def test_with_vnni_every_pair_stays_packed_and_the_product_is_exact(m, monkeypatch):
    """With AVX-512 VNNI the block is VPDPBUSD, whose sums cannot saturate: uniform weights
    (a quarter of their pairs would saturate VPMADDUBSW's) are packed whole, no outlier moved
    out, and the product is exact against int64. Skipped on CPUs without it."""
    _quad_product_or_skip()
    if not _jit.has_avx512_vnni():
        pytest.skip("the CPU has no AVX-512 VNNI")
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    rng = np.random.default_rng(m)
    b = rng.integers(-128, 128, (96, 40)).astype(I8)
    packed = _integer.pack_quads(b, np.int32(0))
    assert packed is not None and packed.outliers.shape == (0, 4)
    a = rng.integers(0, 256, (m, 96)).astype(U8)
    za = np.asarray(3, U8)
    matrix = _integer.ConstantIntegerMatrix(b, np.asarray(0, I8))
    np.testing.assert_array_equal(matrix.times(a, za), _want(a, za, b, np.asarray(0, I8)))
    assert matrix._quads is not None


@pytest.mark.parametrize("vnni", [False, True])
def test_quad_product_is_vpmaddubsw_on_avx2(vnni):
    """The byte product's register block compiles to VPMADDUBSW and VPMADDWD, or with
    AVX-512 VNNI to VPDPBUSD (where the CPU has it)."""
    _quad_product_or_skip()
    if vnni and not _jit.has_avx512_vnni():
        pytest.skip("the CPU has no AVX-512 VNNI")
    import numba

    from ort_ep_cpu.kernels import _vector_ir

    block = _vector_ir.quad_block(4, vnni)

    @numba.njit
    def run(a, bq, zu, sums, z):
        block(a, 0, bq, 0, zu, sums, z)

    a, bq, z = np.full((4, 8), 2, np.uint8), np.ones((1, 2, 64), np.int8), np.zeros((4, 16), np.int32)
    run(a, bq, np.full(4, 3, np.int32), np.ones(16, np.int32), z)
    assert (z == 16 - 3).all()  # 8 codes of 2 times 1, less the zero point 3 times the column sum 1
    assembly = run.inspect_asm(run.signatures[0]).splitlines()
    # (where the CPU has AVX-512 VNNI, LLVM fuses VPMADDWD and its sum's VPADDD into VPDPWSSD)
    wanted = (("vpdpbusd",),) if vnni else (("vpmaddubsw",), ("vpmaddwd", "vpdpwssd"))
    for instructions in wanted:
        assert any(any(i in line for i in instructions) and "ymm" in line for line in assembly), \
            f"no {' or '.join(instructions)} on ymm registers"


def test_packed_product_sums_reach_int32s_limit_exactly(monkeypatch):
    """At the largest K the packed product takes (``MAX_K`` - 1) every product -255 * -255
    sums to 2,147,385,600: just inside int32, exact, on the VPMADDWD path (which would
    saturate only at four -32768 operands)."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", True)
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    k = _integer.MAX_K - 1
    b = np.zeros((k, 20), U8)  # B - zb = 0 - 255 = -255
    a = np.zeros((2, k), U8)  # A - za = 0 - 255 = -255
    got = _integer.ConstantIntegerMatrix(b, np.asarray(255, U8)).times(a, np.asarray(255, U8))
    assert int(got.max()) == int(got.min()) == k * 255 * 255 == 2_147_385_600


def test_packed_product_is_vpmaddwd_on_avx2():
    """The register block compiles to VPMADDWD where the CPU has AVX2 (``_vector_ir``): the
    reason the product is written in LLVM vector code, checked in the machine code."""
    import platform

    from ort_core.devices import host_cpu

    pytest.importorskip("numba", reason="numba (optional) is not installed")
    if platform.machine() not in ("x86_64", "AMD64") or "avx2" not in host_cpu().flags:
        pytest.skip("VPMADDWD on 256-bit vectors needs an x86 CPU with AVX2")
    import numba

    from ort_ep_cpu.kernels import _vector_ir

    block = _vector_ir.madd_block(4)

    @numba.njit
    def run(a, bp, z):
        block(a, 0, bp, 0, z)

    a, bp, z = np.ones((4, 8), np.int16), np.ones((1, 4, 32), np.int8), np.zeros((4, 16), np.int32)
    run(a, bp, z)
    assert (z == 8).all()
    assembly = run.inspect_asm(run.signatures[0])
    # (where the CPU has AVX-512 VNNI, LLVM fuses VPMADDWD and its sum's VPADDD into VPDPWSSD)
    assert any(("vpmaddwd" in line or "vpdpwssd" in line) and "ymm" in line for line in assembly.splitlines()), \
        "no VPMADDWD (or VPDPWSSD) on ymm registers"


def _one_node(op: str, domain: str, inputs: list[str], consts: dict, feeds: dict, out_type: int, **attrs) -> bytes:
    node = helper.make_node(op, inputs, ["y"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


@pytest.mark.parametrize("b_dtype", [U8, I8])
def test_matmul_integer_with_constant_weights_matches_onnxruntime(path, b_dtype):
    """MatMulInteger with a batched A and a constant B (per-column zero point): equal to
    onnxruntime's int32 output on every path."""
    kind, seen = path
    rng = np.random.default_rng(1)
    a = _codes(rng, (2, 3, 96), U8)
    consts = {"b": _codes(rng, (96, 130), b_dtype), "za": np.asarray(131, U8),
              "zb": rng.integers(0, 100, 130).astype(b_dtype)}
    model = _one_node("MatMulInteger", "", ["a", "b", "za", "zb"], consts, {"a": a}, TensorProto.INT32)
    want = exact_reference.session(model, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(2):  # the second run uses the matrix made in the first
        got = session.run(None, {"a": a})[0]
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    if kind == "onednn" and not seen:
        pytest.skip("this CPU has no AMX or VNNI kernel for the product: the compiled loop ran")


@pytest.mark.parametrize("weights,zero_point", [(I8, 0), (I8, 3), (U8, 121)])
def test_dynamic_quantize_lstm_through_onednn_matches_onnxruntime(path, weights, zero_point, monkeypatch):
    """DynamicQuantizeLSTM at a speaker embedder's width (hidden 256: each step's recurrent
    product is (1, 256) @ (256, 1024)) on each path, within the tolerance of
    test_contrib_quant's LSTM cases (relative 1e-5 of the range, float32 gate arithmetic).
    Through oneDNN with the compiled loops, the step loop adds the zero-point terms of the
    recurrent product itself (h's zero point; R's, which with uint8 codes other than 128 adds
    the row-sum term), and the input projection's come with its scaling in one compiled pass:
    numpy's ``ConstantIntegerMatrix._add_zero_point_terms`` never runs."""
    kind, seen = path
    if kind == "onednn":  # (the byte product's compiled scan comes first where it is there)
        monkeypatch.setattr(_integer.ConstantIntegerMatrix, "quad_packed", lambda self: None)
    terms: list[int] = []
    real_terms = _integer.ConstantIntegerMatrix._add_zero_point_terms
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "_add_zero_point_terms",
                        lambda self, z, a, za: terms.append(a.shape[0]) or real_terms(self, z, a, za))
    rng = np.random.default_rng(2)
    hidden, inp, seq = 256, 40, 6
    consts = {"w": _codes(rng, (1, inp, 4 * hidden), weights), "r": _codes(rng, (1, hidden, 4 * hidden), weights),
              "b": (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32),
              "ws": np.full(1, 0.002, np.float32), "wz": np.full(1, zero_point, weights),
              "rs": np.full(1, 0.001, np.float32), "rz": np.full(1, zero_point, weights)}
    x = rng.standard_normal((seq, 1, inp)).astype(np.float32)
    node_inputs = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
    node = helper.make_node("DynamicQuantizeLSTM", node_inputs, ["y", "y_h", "y_c"], domain="com.microsoft",
                            hidden_size=hidden)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    data = model.SerializeToString()
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * float(np.abs(w).max()))
    if kind == "onednn":
        if not seen:
            pytest.skip("this CPU has no AMX or VNNI kernel for the product: the compiled loop ran")
        assert len(seen) >= seq  # the input projection and each step's recurrent product
        if _jit.enabled():
            assert terms == []


@pytest.mark.parametrize("x_dtype,w_dtype", [(U8, U8), (U8, I8), (I8, I8)])
@pytest.mark.parametrize("zw_kind", ["none", "scalar", "per_channel"])
@pytest.mark.parametrize("form", ["3x3_pad_stride2", "grouped", "depthwise_dilated", "1x1", "1d", "asymmetric_pads"])
@pytest.mark.parametrize("compiled", [True, False], ids=["combine_loop", "combine_numpy"])
def test_conv_integer_with_constant_weights_matches_onnxruntime(x_dtype, w_dtype, zw_kind, form, compiled, monkeypatch):
    """ConvInteger with constant weights through oneDNN's 8-bit convolution (the zero points'
    terms added in int32, uint8 weights shifted to int8 with a channel of ones per group for
    their sums, combined by the compiled loop or by numpy): equal to onnxruntime's int32
    output, padding included, where the zero points make padded positions differ from code 0.
    Where this CPU has no 8-bit dot products the numpy path runs and is checked the same."""
    combined = use_compiled(monkeypatch, compiled, "conv_combine")
    rng = np.random.default_rng(3)
    shapes = {  # (x shape, w shape, attributes)
        "3x3_pad_stride2": ((2, 5, 9, 11), (6, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        "grouped": ((1, 6, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
        "depthwise_dilated": ((1, 4, 10, 10), (4, 1, 3, 3), {"pads": [2, 2, 2, 2], "group": 4, "dilations": [2, 2]}),
        "1x1": ((1, 16, 5, 7), (8, 16, 1, 1), {}),
        "1d": ((2, 3, 20), (5, 3, 4), {"pads": [2, 1]}),
        "asymmetric_pads": ((1, 3, 7, 7), (2, 3, 2, 3), {"pads": [0, 2, 1, 0]}),
    }
    x_shape, w_shape, attrs = shapes[form]
    model, x, w, consts, zw = _conv_integer_case(rng, x_dtype, w_dtype, zw_kind, x_shape, w_shape, attrs)
    seen: list[str] = []
    real = _onednn.Convolution.run
    monkeypatch.setattr(_onednn.Convolution, "run", lambda self, a, y: seen.append(self.implementation) or real(self, a, y))
    want = _float_conv_reference(x, w, consts["zx"], zw, attrs)
    if x_dtype == U8 and zw_kind != "per_channel":  # what onnxruntime's ConvInteger takes
        ort_want = exact_reference.session(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_array_equal(ort_want, want)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(2):
        got = session.run(None, {"x": x})[0]
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    if _onednn.available() and seen:
        assert all("amx" in s or "vnni" in s for s in seen), seen
        if w_dtype == U8:  # shifted to int8: the channel of sums is combined
            assert combined or not compiled


@pytest.mark.parametrize("x_dtype,w_dtype", [(U8, U8), (U8, I8), (I8, I8)])
@pytest.mark.parametrize("zw_kind", ["none", "scalar", "per_channel"])
@pytest.mark.parametrize("form", ["3x3_pad_stride2", "1x1", "1d", "asymmetric_pads_dilated", "3x3_split"])
def test_conv_integer_without_onednn_takes_the_columns_product(x_dtype, w_dtype, zw_kind, form, monkeypatch):
    """Where oneDNN's 8-bit convolution is not there (no VNNI, or oneDNN off), ConvInteger
    with constant weights of one group gathers the codes as columns (padded with x's zero
    point) for the packed product (``ConstantIntegerConvolution._columns``): exact, padding
    included; the float32 convolution does not run."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", True)
    monkeypatch.setattr(_onednn, "USE", False)
    columns: list = []  # what each call gave (None: the float32 convolution ran)
    real = _integer.ConstantIntegerConvolution._columns
    monkeypatch.setattr(_integer.ConstantIntegerConvolution, "_columns",
                        lambda self, *a: columns.append(real(self, *a)) or columns[-1])
    rng = np.random.default_rng(13)
    shapes = {
        "3x3_pad_stride2": ((2, 5, 9, 11), (6, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        "1x1": ((1, 16, 5, 7), (19, 16, 1, 1), {}),
        "1d": ((2, 3, 20), (5, 3, 4), {"pads": [2, 1]}),
        "asymmetric_pads_dilated": ((1, 3, 9, 8), (2, 3, 2, 3), {"pads": [0, 2, 1, 0], "dilations": [2, 1]}),
        # past ``SPLIT_MIN_MACS``: the panels in shares on the session's threads
        "3x3_split": ((1, 9, 30, 41), (21, 9, 3, 3), {"pads": [1, 1, 1, 1]}),
    }
    x_shape, w_shape, attrs = shapes[form]
    model, x, w, consts, zw = _conv_integer_case(rng, x_dtype, w_dtype, zw_kind, x_shape, w_shape, attrs)
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, _float_conv_reference(x, w, consts["zx"], zw, attrs))
    assert got.flags.c_contiguous and columns and all(c is not None for c in columns)


@pytest.mark.parametrize("codes,zero_point", [(I8, 0), (U8, 128), (U8, 3), (I8, "per_column")])
@pytest.mark.parametrize("k,n", [(1, 1), (3, 17), (33, 1025), (64, 2100)])
def test_pack_panels_layout(codes, zero_point, k, n):
    """``pack_panels``, made a block of panels at a time (N past ``PACK_PANELS_AT_ONCE`` panels
    here): pair p of panel q holds B[2p, 16q + c] - zb, B[2p + 1, 16q + c] - zb for its columns
    c, zeros past K and N; int8 where B - zb fits, else int16."""
    rng = np.random.default_rng(k * n)
    info = np.iinfo(codes)
    b = rng.integers(info.min, info.max + 1, (k, n)).astype(codes)
    zb = rng.integers(-5, 6, n).astype(np.int32) if zero_point == "per_column" else np.int32(zero_point)
    packed = _integer.pack_panels(b, zb)
    values = b.astype(np.int32) - zb
    assert packed.dtype == (np.int8 if values.min() >= -128 and values.max() <= 127 else np.int16)
    width = _jit.PRODUCT_PANEL
    panels, pairs = -(-n // width), (k + 1) // 2
    assert packed.shape == (panels, pairs, 2 * width)
    want = np.zeros((2 * pairs, panels * width), np.int32)
    want[:k, :n] = values
    for q in (0, panels // 2, panels - 1):
        for p in (0, pairs - 1):
            for t in (0, 1):
                np.testing.assert_array_equal(packed[q, p, t::2], want[2 * p + t, width * q:width * (q + 1)])


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("codes", [U8, I8])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 7, 33), (8, 16, 48), (19, 45, 70)])
def test_codes_product_is_exact(m, k, n, codes, parts, monkeypatch):
    """``_jit.codes_product``: constant int16 rows times 8-bit columns minus their zero point,
    exactly, for any M, an odd K (its last pair half zero) and N past a whole panel (the last
    one partial), on one thread or split; values at the extremes of both operands."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", True)
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    info = np.iinfo(codes)
    zx = info.max if codes == U8 else info.min  # columns minus zx span -255..0 or 0..255
    pairs = (k + 1) // 2
    rows = rng.choice(np.array([-255, 255, -1, 0, 7], np.int16), (m, k))
    a16 = np.zeros((m, 2 * pairs), np.int16)
    a16[:, :k] = rows
    cols = rng.integers(info.min, info.max + 1, (k, n)).astype(codes)
    bp = np.full((-(-n // _jit.PRODUCT_PANEL), pairs, 2 * _jit.PRODUCT_PANEL), 99, np.int16)  # scratch: overwritten
    z = np.empty((m, n), np.int32)
    _jit.codes_product(parts)(a16, cols, np.int32(zx), bp, z, parts)
    np.testing.assert_array_equal(z, rows.astype(np.int64) @ (cols.astype(np.int64) - zx))


def _conv_integer_case(rng, x_dtype, w_dtype, zw_kind: str, x_shape, w_shape, attrs: dict) -> tuple:
    """A one-node ConvInteger model with constant weights and zero points (x's far from code
    0, so that padding differs from it): (model, x, w, its constants, w's zero point)."""
    x, w = _codes(rng, x_shape, x_dtype), _codes(rng, w_shape, w_dtype)
    zw = _zero_point(rng, zw_kind, w_dtype, w_shape[0])
    consts = {"w": w, "zx": np.asarray(250 if x_dtype == U8 else -100, x_dtype)}
    inputs = ["x", "w", "zx"]
    if zw is not None:
        consts["zw"] = zw
        inputs.append("zw")
    return _one_node("ConvInteger", "", inputs, consts, {"x": x}, TensorProto.INT32, **attrs), x, w, consts, zw


def _float_conv_reference(x, w, zx, zw, attrs):
    """ConvInteger as onnxruntime's float Conv of the codes minus their zero points: exact here,
    every partial sum an integer below 2^24 (K <= 45 terms of magnitude <= 255 * 255)."""
    xs = (x.astype(np.int32) - np.int32(zx)).astype(np.float32)
    zw_b = 0 if zw is None else (np.asarray(zw, np.int32).reshape((-1,) + (1,) * (w.ndim - 1)) if np.ndim(zw) else np.int32(zw))
    ws = (w.astype(np.int32) - zw_b).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(ws, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    y = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": xs})[0]
    assert np.array_equal(y, np.rint(y))
    return y.astype(np.int32)


@pytest.mark.parametrize("w_dtype,per_channel", [(I8, True), (U8, False)])
def test_qlinear_conv_with_constant_weights_matches_onnxruntime(w_dtype, per_channel):
    """QLinearConv's accumulator through the same 8-bit convolution: onnxruntime's uint8 output,
    within one unit where a float32 requantization lands on a rounding tie."""
    rng = np.random.default_rng(4)
    x = _codes(rng, (1, 8, 12, 12), U8)
    m = 6
    w = _codes(rng, (m, 8, 3, 3), w_dtype)
    consts = {"xs": np.asarray(0.02, np.float32), "xz": np.asarray(131, U8), "w": w,
              "ws": (rng.uniform(0.001, 0.004, m) if per_channel else np.asarray(0.003)).astype(np.float32),
              "wz": np.zeros(m, I8) if per_channel else np.asarray(121, U8),
              "ys": np.asarray(0.5, np.float32), "yz": np.asarray(128, U8),
              "b": rng.integers(-2000, 2000, m).astype(np.int32)}
    model = _one_node("QLinearConv", "", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], consts, {"x": x},
                      TensorProto.UINT8, pads=[1, 1, 1, 1])
    want = exact_reference.session(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == want.dtype == np.uint8
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1 and (diff > 0).mean() <= 0.02


def _qdq_operands(codes, w_scale, w_zero, x_scale, x_zero, weight_axis: int) -> tuple[list, list]:
    """(initializers, nodes) of x -> QuantizeLinear -> DequantizeLinear ("x_dq") and of
    DequantizeLinear(constant codes) ("w_dq", scales along ``weight_axis``): a QDQ product's two
    operands."""
    inits = [numpy_helper.from_array(codes, "w_q"), numpy_helper.from_array(w_scale, "w_s"),
             numpy_helper.from_array(x_scale, "x_s"), numpy_helper.from_array(x_zero, "x_z")]
    w_inputs = ["w_q", "w_s"]
    if w_zero is not None:
        inits.append(numpy_helper.from_array(w_zero, "w_z"))
        w_inputs.append("w_z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"]),
             helper.make_node("DequantizeLinear", w_inputs, ["w_dq"], axis=weight_axis)]
    return inits, nodes


def _qdq_matmul_model(x_shape, codes, w_scale, w_zero, a_scale, a_zero, per_column: bool) -> bytes:
    """x -> QuantizeLinear -> DequantizeLinear -> MatMul <- DequantizeLinear(constant codes)."""
    inits, nodes = _qdq_operands(codes, w_scale, w_zero, a_scale, a_zero, 1)
    nodes.append(helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"]))
    graph = helper.make_graph(nodes, "qdq_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("a_dtype,w_dtype,per_column", [(U8, I8, True), (U8, I8, False), (U8, U8, False), (I8, I8, True)])
def test_qdq_matmul_takes_the_exact_integer_product(a_dtype, w_dtype, per_column, compiled, monkeypatch):
    """A QDQ MatMul (DequantizeLinear of per-tensor codes times DequantizeLinear of constant
    8-bit weights) through oneDNN's 8-bit matmul: bit-equal to float32(the int64 product of
    the codes) * float32(a_scale * w_scale), onnxruntime's MatMulIntegerToFloat arithmetic;
    within 1e-5 of the range of onnxruntime's float product of the dequantized values. With
    the compiled loops, one pass (``_jit.integer_to_float``) adds the zero-point terms (the
    row sums too, for uint8 weights whose zero point is not 128) and scales: numpy's
    ``ConstantIntegerMatrix._add_zero_point_terms`` does not run."""
    if not _onednn.available():
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    monkeypatch.setattr(_integer, "ONEDNN_MIN_MACS", 0)
    used = use_compiled(monkeypatch, compiled, "integer_to_float")
    terms: list[int] = []
    real_terms = _integer.ConstantIntegerMatrix._add_zero_point_terms
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "_add_zero_point_terms",
                        lambda self, z, a, za: terms.append(a.shape[0]) or real_terms(self, z, a, za))
    seen: list[str] = []
    real = _onednn.IntegerMatMul.run
    monkeypatch.setattr(_onednn.IntegerMatMul, "run", lambda self, x, y: seen.append(self.implementation) or real(self, x, y))
    rng = np.random.default_rng(7)
    k, n = 96, 40
    codes = _codes(rng, (k, n), w_dtype)
    w_scale = (rng.uniform(0.001, 0.01, n) if per_column else np.asarray(0.004)).astype(np.float32)
    info = np.iinfo(w_dtype)
    w_zero = None if w_dtype == I8 and per_column else (
        np.zeros(n, w_dtype) if per_column else np.asarray(info.max // 2 + 3 if w_dtype == U8 else -5, w_dtype))
    a_scale, a_zero = np.asarray(0.03, np.float32), np.asarray(120 if a_dtype == U8 else -7, a_dtype)
    x = (rng.standard_normal((2, 3, k)) * 2).astype(np.float32)
    model = _qdq_matmul_model(x.shape, codes, w_scale, w_zero, a_scale, a_zero, per_column)
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if not seen:
        pytest.skip("this CPU has no AMX or VNNI kernel for the product: the float product ran")
    a_info = np.iinfo(a_dtype)
    q = np.clip(np.rint(x / a_scale) + a_zero.astype(np.float32), a_info.min, a_info.max).astype(np.int64)
    acc = (q - int(a_zero)) @ (codes.astype(np.int64) - (0 if w_zero is None else w_zero.astype(np.int64)))
    np.testing.assert_array_equal(got, acc.astype(np.float32) * (a_scale * w_scale).astype(np.float32))
    assert bool(terms) != compiled  # numpy's terms only where the compiled pass is off
    assert used or not compiled
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = exact_reference.session(model, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def _qdq_conv_model(x_shape, codes, w_scale, w_zero, x_scale, x_zero, bias, attrs) -> bytes:
    """x -> QuantizeLinear -> DequantizeLinear -> Conv <- DequantizeLinear(constant codes, per
    output channel where w_scale is a vector), with ``bias``: int32 codes (a DequantizeLinear at
    x_scale * w_scale, as the quantizer writes it), float32 values, or None."""
    inits, nodes = _qdq_operands(codes, w_scale, w_zero, x_scale, x_zero, 0)
    conv_inputs = ["x_dq", "w_dq"]
    if bias is not None and bias.dtype == np.int32:
        inits += [numpy_helper.from_array(bias, "b_q"), numpy_helper.from_array((x_scale * w_scale).astype(np.float32), "b_s")]
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], axis=0))
        conv_inputs.append("b")
    elif bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        conv_inputs.append("b")
    nodes.append(helper.make_node("Conv", conv_inputs, ["y"], **attrs))
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


@pytest.mark.parametrize("form", ["1d_stride2_int_bias", "2d_u8_weights_float_bias", "depthwise_no_bias", "int8_input"])
def test_qdq_conv_takes_the_exact_integer_convolution(form, monkeypatch):
    """A QDQ Conv (DequantizeLinear of per-tensor codes, DequantizeLinear of constant 8-bit
    weights) through oneDNN's 8-bit convolution: bit-equal to float32(the exact integer sums of
    the codes plus the bias's int32 codes) * float32(x_scale * w_scale), onnxruntime's
    QLinearConv accumulation (a float bias added after, in float32); within 1e-5 of the range
    of onnxruntime's float convolution of the dequantized values."""
    if not _onednn.available():
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    monkeypatch.setattr(_integer, "ONEDNN_MIN_MACS", 0)
    taken: list[bool] = []
    real = _integer.ConstantIntegerConvolution.__call__

    def spy(self, *args):
        y = real(self, *args)
        taken.append(y is not None)
        return y

    monkeypatch.setattr(_integer.ConstantIntegerConvolution, "__call__", spy)
    rng = np.random.default_rng(11)
    forms = {  # x shape, w shape, attributes, x dtype, w dtype, per channel, bias kind
        "1d_stride2_int_bias": ((1, 16, 40), (24, 16, 3), {"pads": [1, 1], "strides": [2]}, U8, I8, True, "int32"),
        "2d_u8_weights_float_bias": ((2, 6, 9, 9), (8, 6, 3, 3), {"pads": [1, 1, 1, 1]}, U8, U8, False, "float"),
        "depthwise_no_bias": ((1, 8, 10, 10), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 8}, U8, I8, True, None),
        "int8_input": ((1, 5, 7, 7), (4, 5, 2, 2), {}, I8, I8, False, "int32"),
    }
    x_shape, w_shape, attrs, x_dtype, w_dtype, per_channel, bias_kind = forms[form]
    m = w_shape[0]
    codes = _codes(rng, w_shape, w_dtype)
    w_scale = (rng.uniform(0.001, 0.01, m) if per_channel else np.asarray(0.004)).astype(np.float32)
    w_zero = (np.zeros(m, w_dtype) if per_channel else np.asarray(131 if w_dtype == U8 else 0, w_dtype))
    x_scale, x_zero = np.asarray(0.03, np.float32), np.asarray(120 if x_dtype == U8 else -7, x_dtype)
    bias = {"int32": rng.integers(-3000, 3000, m).astype(np.int32), "float": rng.standard_normal(m).astype(np.float32),
            None: None}[bias_kind]
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)
    model = _qdq_conv_model(x.shape, codes, w_scale, w_zero, x_scale, x_zero, bias, attrs)
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if not any(taken):
        # the float convolution ran: right only where oneDNN has no 8-bit kernel for this one
        # (a ConvInteger of the same codes asks oneDNN the same way)
        probe = _one_node("ConvInteger", "", ["x", "w", "zx"], {"w": codes, "zx": x_zero}, {"x": np.zeros(x_shape, x_dtype)},
                          TensorProto.INT32, **attrs)
        ort.InferenceSession(probe, providers=["CPUExecutionProvider"]).run(None, {"x": np.zeros(x_shape, x_dtype)})
        assert not any(taken), "ConvInteger took oneDNN's 8-bit convolution; the QDQ Conv did not"
        pytest.skip("this CPU has no AMX or VNNI kernel for the convolution: the float one ran")
    x_info = np.iinfo(x_dtype)
    q = np.clip(np.rint(x / x_scale) + x_zero.astype(np.float32), x_info.min, x_info.max).astype(x_dtype)
    acc = _float_conv_reference(q, codes, x_zero, w_zero if per_channel else w_zero.reshape(()), attrs)
    channel = (1, -1) + (1,) * (len(x_shape) - 2)
    if bias_kind == "int32":
        acc = acc + bias.reshape(channel)
    want_bits = acc.astype(np.float32) * (x_scale * w_scale).astype(np.float32).reshape(channel if per_channel else ())
    if bias_kind == "float":
        want_bits = want_bits + bias.reshape(channel)
    np.testing.assert_array_equal(got, want_bits)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = exact_reference.session(model, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("extremes", [True, False])
def test_conv_integer_without_onednn_is_exact(monkeypatch, extremes):
    """ConvInteger where oneDNN's 8-bit convolution is not taken (no VNNI): float32 where the
    codes bound every sum below 2^24, float64 past it (where one
    float32 convolution rounds: 255 * 127 * 1152 > 2^25)."""
    from onnx.reference import ReferenceEvaluator

    monkeypatch.setattr(_integer.ConstantIntegerConvolution, "__call__", lambda self, x, zx, geometry: None)
    rng = np.random.default_rng(12)
    high = 256 if extremes else 8
    x = rng.integers(0, high, (1, 128, 6, 6)).astype(U8)
    w = (rng.choice([-128, 127], (8, 128, 3, 3)) if extremes else rng.integers(-8, 8, (8, 128, 3, 3))).astype(I8)
    w[0] = 127 if extremes else -8  # one channel of the largest sum of |W| (odd products: sums float32 rounds)
    x[0, :, 2:5, 2:5] = high - 1
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert 255 * 127 * 1152 > 2**25
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("compiled", [True, False])
def test_qdq_matmul_without_onednn_takes_the_exact_product(compiled, monkeypatch):
    """Where oneDNN's 8-bit matmul is declined (no VNNI), a QDQ MatMul takes the exact product:
    onnxruntime's MatMulIntegerToFloat arithmetic bit for bit, not the float product of the
    dequantized values. The compiled product takes any rows; without it, float32 BLAS from
    ``_integer.F32_MIN_ROWS`` rows, and fewer rows keep the float product."""
    use_compiled(monkeypatch, compiled, "packed_product")
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "codes_plan", lambda self, rows, dtype: None)
    monkeypatch.setattr(_integer, "ONEDNN_MIN_MACS", 0)
    rng = np.random.default_rng(8)
    k, n = 96, 40
    codes = _codes(rng, (k, n), I8)
    w_scale, w_zero = np.asarray(0.004, np.float32), np.asarray(-5, I8)
    a_scale, a_zero = np.asarray(0.03, np.float32), np.asarray(120, U8)
    for rows in (_integer.F32_MIN_ROWS + 4, _integer.F32_MIN_ROWS - 2):
        x = (rng.standard_normal((1, rows, k)) * 2).astype(np.float32)
        model = _qdq_matmul_model(x.shape, codes, w_scale, w_zero, a_scale, a_zero, False)
        got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        q = np.clip(np.rint(x / a_scale) + 120, 0, 255).astype(np.int64)
        acc = (q - 120) @ (codes.astype(np.int64) + 5)
        exact = acc.astype(np.float32) * (a_scale * w_scale).astype(np.float32)
        if compiled or rows >= _integer.F32_MIN_ROWS:
            np.testing.assert_array_equal(got, exact)
        else:  # the float product: within float32 rounding of it, not bit-equal
            np.testing.assert_allclose(got, exact, rtol=0, atol=1e-5 * float(np.abs(exact).max()))


def test_packed_product_in_a_forked_child(monkeypatch):
    """A process forked after the packed product ran on numba's OpenMP pool: the child's
    product runs without threads (``_jit._after_fork``) and is exact. Entering the pool there
    ended the child ("fork() called from a process already using GNU OpenMP", exit -15)."""
    import os
    import time

    pytest.importorskip("numba", reason="numba (optional) is not installed")
    if not hasattr(os, "fork"):
        pytest.skip("no fork() on this platform")
    monkeypatch.setattr(_jit, "USE", True)
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    monkeypatch.setattr(_integer, "SPLIT_MIN_MACS", 0)  # the parent's product on two threads
    rng = np.random.default_rng(21)
    b, a = _codes(rng, (300, 70), I8), _codes(rng, (9, 300), U8)
    matrix = _integer.ConstantIntegerMatrix(b, None)
    want = _want(a, 7, b, None)
    np.testing.assert_array_equal(matrix.times(a, np.asarray(7, U8)), want)
    pid = os.fork()
    if pid == 0:  # the child: 0 when exact, 3 when not
        try:
            os._exit(0 if np.array_equal(matrix.times(a, np.asarray(7, U8)), want) else 3)
        finally:
            os._exit(4)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's product did not finish in 60 s")


def test_packed_products_from_several_threads_at_once(monkeypatch):
    """Sessions run from several Python threads enter numba's parallel product at once (its
    OpenMP pool takes that; the workqueue pool it avoids would end the process): every
    product exact."""
    from concurrent.futures import ThreadPoolExecutor

    pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", True)
    monkeypatch.setattr(_integer.ConstantIntegerMatrix, "takes_onednn", lambda self, rows, dtype: False)
    monkeypatch.setattr(_integer, "SPLIT_MIN_MACS", 0)
    rng = np.random.default_rng(22)
    a = _codes(rng, (16, 256), U8)
    matrices = [_integer.ConstantIntegerMatrix(_codes(rng, (256, 200), I8), None) for _ in range(3)]
    wants = [_want(a, 5, m.b, None) for m in matrices]

    def work(i: int) -> bool:
        return all(np.array_equal(matrices[i % 3].times(a, np.asarray(5, U8)), wants[i % 3]) for _ in range(50))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_requantization_rounds_ties_in_float32_as_onnxruntime(op):
    """The sums are scaled in float32, as onnxruntime's MLAS scales them: a sum of 20000 times the
    multiplier float32(0.001975) is exactly 39.5 in float32 (rounded half to even: 40) where
    float64 gives 39.49999 (39). A quantized YOLO's convolutions came out 1 LSB off
    onnxruntime's at such ties, its boxes 5% off."""
    from onnx import TensorProto, helper, numpy_helper

    import ort_core as ort

    multiplier = np.float32(0.001975)  # x_scale; w_scale = y_scale = 1
    k = 80
    sums = np.arange(19990, 20006)  # each row's sum of x's codes, 20000 among them
    x = np.full((sums.size, k), 250, np.uint8)
    x[:, 0] = 250 - (20000 - sums)
    consts = [numpy_helper.from_array(np.asarray(v, dtype=t), n) for n, v, t in (
        ("xs", multiplier, np.float32), ("xz", 0, np.uint8), ("ws", 1.0, np.float32), ("wz", 0, np.uint8),
        ("ys", 1.0, np.float32), ("yz", 0, np.uint8))]
    if op == "QLinearConv":  # the rows as pixels, K as channels, a 1x1 kernel of ones
        consts.append(numpy_helper.from_array(np.ones((1, k, 1, 1), np.uint8), "w"))
        feed = np.ascontiguousarray(x.T.reshape(1, k, sums.size, 1))
    else:
        consts.append(numpy_helper.from_array(np.ones((k, 1), np.uint8), "w"))
        feed = x
    graph = helper.make_graph([helper.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, list(feed.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], consts)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0].reshape(-1)
    want = np.rint(sums.astype(np.float32) * multiplier).astype(np.uint8)  # float32 products, ties to even
    assert want[10] == 40 and np.rint(20000 * np.float64(multiplier)) == 39
    np.testing.assert_array_equal(got, want)
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
    np.testing.assert_array_equal(got, reference.reshape(-1))


def test_dynamic_quantize_lstm_steps_take_the_byte_product_scan_before_onednn(monkeypatch):
    """Where both are there, DynamicQuantizeLSTM's recurrence is the compiled scan with the byte
    product, not a Python step per time step around oneDNN's product (hidden 256, batch 1:
    200 against 302 us for 20 steps, measured on an AVX-512 VNNI EPYC)."""
    _quad_product_or_skip()
    if not _onednn.available():
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    scans: list[int] = []
    real_scan = _jit.quantized_lstm_quad_scan()
    monkeypatch.setattr(_jit, "quantized_lstm_quad_scan", lambda: lambda *args: scans.append(1) or real_scan(*args))
    monkeypatch.setattr(_integer, "ONEDNN_MIN_MACS", 0)  # oneDNN would take every product
    rng = np.random.default_rng(4)
    hidden, inp, seq = 64, 16, 5
    consts = {"w": _codes(rng, (1, inp, 4 * hidden), I8), "r": _codes(rng, (1, hidden, 4 * hidden), I8),
              "ws": np.full(1, 0.002, np.float32), "wz": np.zeros(1, I8),
              "rs": np.full(1, 0.001, np.float32), "rz": np.zeros(1, I8)}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"], ["y"],
                            domain="com.microsoft", hidden_size=hidden)
    x = rng.standard_normal((seq, 1, inp)).astype(np.float32)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))
    assert scans == [1]
