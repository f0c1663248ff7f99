"""LLVM code for compiled loops where numba has no way to ask for the instruction: the exact
integer product's register block (``madd_block``), the float32 product's (``fma_block``), the fused multiply-add
(``fused_multiply_add``) and a float32 from its bits (``float32_from_bits``), numba intrinsics.

x86's VPMADDWD multiplies sixteen int16 pairs and adds neighbouring products into eight int32
lanes: sixteen exact multiply-adds per instruction, twice float32's FMA. LLVM emits it for a
dot product's reduction but not for a register-blocked GEMM written in numba (numba widens
int16 arithmetic to int64, and the loop vectoriser keeps one reduction per loop), so the block
is written here as LLVM vector operations: sign-extend, multiply, add the even lanes to the odd
ones, which the x86 backend selects as VPMADDWD on AVX2 (checked in the tests' assembly) and
any other target computes exactly with its own instructions.

Imported by ``_jit`` when it compiles its loops (numba and llvmlite are needed here only).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import PRODUCT_PANEL

#: int32 lanes per accumulator vector: a block covers a panel's columns with two
LANES = PRODUCT_PANEL // 2

_I16, _I32, _I64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
_PAIRS = ir.VectorType(_I16, 2 * LANES)  # 8 columns x the two rows of B of one pair
_WIDE = ir.VectorType(_I32, 2 * LANES)
_ACC = ir.VectorType(_I32, LANES)
_EVEN = ir.Constant(ir.VectorType(_I32, LANES), [2 * i for i in range(LANES)])
_ODD = ir.Constant(ir.VectorType(_I32, LANES), [2 * i + 1 for i in range(LANES)])
_BROADCAST = ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES)


def _madd(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Lane i: x[2i] * y[2i] + x[2i + 1] * y[2i + 1] in int32 (VPMADDWD's arithmetic; the sum
    leaves int32 only where all four operands are -32768, which codes minus zero points,
    |x| <= 255, never are)."""
    p = builder.mul(builder.sext(x, _WIDE), builder.sext(y, _WIDE))
    return builder.add(builder.shuffle_vector(p, p, _EVEN), builder.shuffle_vector(p, p, _ODD))


def _store_block(builder: ir.IRBuilder, accs: list, z: ir.Value, row: ir.Value, column: ir.Value, n: ir.Value) -> None:
    """The register block's sums ``accs`` (rows x two 8-lane vectors, int32 or float32) into
    z[row + r, column: column + 16] of the (M, N) ``z`` (its data pointer) of their type; a
    last partial panel writes only the columns below N."""
    vector = accs[0][0].type.pointee
    whole = builder.icmp_signed("<=", builder.add(column, ir.Constant(_I64, PRODUCT_PANEL)), n)
    spill = cgutils.alloca_once(builder, vector, size=2)  # a last partial panel's sums
    for r, pair in enumerate(accs):
        z_row = builder.gep(z, [builder.add(builder.mul(builder.add(row, ir.Constant(_I64, r)), n), column)])
        with builder.if_else(whole, likely=True) as (vectors, partial):
            with vectors:
                for h in range(2):
                    ptr = builder.bitcast(builder.gep(z_row, [ir.Constant(_I64, LANES * h)]), vector.as_pointer())
                    builder.store(builder.load(pair[h]), ptr, align=4)
            with partial:
                for h in range(2):
                    builder.store(builder.load(pair[h]), builder.gep(spill, [ir.Constant(_I64, h)]))
                sums = builder.bitcast(spill, vector.element.as_pointer())
                with cgutils.for_range(builder, builder.sub(n, column)) as tail:
                    builder.store(builder.load(builder.gep(sums, [tail.index])), builder.gep(z_row, [tail.index]))


def madd_block(rows: int) -> Callable:
    """The intrinsic ``block(a, row, bp, panel, z)``: z[row:row + rows, 16 panel:16 panel + 16]
    = a[row:row + rows] @ the panel's columns of B, exactly in int32. ``a`` int16 (M, 2P), the
    codes minus their zero points (a zero past an odd K); ``bp`` B packed
    (``_integer.pack_panels``): int8 or int16 (panels, P, 32), pair p of a panel holding B[2p,
    c], B[2p + 1, c] for its 16 columns c in turn (zeros past K and N); ``z`` int32 (M, N), of
    which the last panel writes only the columns below N. The accumulators stay in registers
    over the pairs (rows x 2 vectors: 4 rows use 8 of AVX2's 16), each row's pair of values
    broadcast (one 32-bit load) to meet two vectors of B."""

    @intrinsic
    def block(typingctx, a, row, bp, panel, z):
        sig = types.void(a, types.intp, bp, types.intp, z)

        def codegen(context, builder, signature, args):
            a_value, row_index, bp_value, panel_index, z_value = args
            a_arr = context.make_array(signature.args[0])(context, builder, a_value)
            bp_arr = context.make_array(signature.args[2])(context, builder, bp_value)
            z_arr = context.make_array(signature.args[4])(context, builder, z_value)
            a_width = cgutils.unpack_tuple(builder, a_arr.shape, 2)[1]
            n = cgutils.unpack_tuple(builder, z_arr.shape, 2)[1]
            pairs = cgutils.unpack_tuple(builder, bp_arr.shape, 3)[1]
            b_elem = bp_arr.data.type.pointee
            b_vector = ir.VectorType(b_elem, 2 * LANES)
            stride = ir.Constant(_I64, 2 * PRODUCT_PANEL)  # elements of bp per pair
            panel_start = builder.gep(bp_arr.data, [builder.mul(builder.mul(panel_index, pairs), stride)])
            a_rows = [builder.bitcast(builder.gep(a_arr.data, [builder.mul(builder.add(row_index, ir.Constant(_I64, r)), a_width)]),
                                      _I32.as_pointer()) for r in range(rows)]  # a row as pairs
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(_ACC, [0] * LANES)) for _ in range(2)]
                    for _ in range(rows)]
            with cgutils.for_range(builder, pairs) as loop:
                pair = loop.index
                pair_start = builder.gep(panel_start, [builder.mul(pair, stride)])
                halves = []
                for h in range(2):
                    ptr = builder.bitcast(builder.gep(pair_start, [ir.Constant(_I64, 2 * LANES * h)]), b_vector.as_pointer())
                    half = builder.load(ptr, align=1)
                    halves.append(half if b_elem == _I16 else builder.sext(half, _PAIRS))
                for r in range(rows):
                    two = builder.load(builder.gep(a_rows[r], [pair]), align=2)
                    codes = builder.insert_element(ir.Constant(_ACC, None), two, ir.Constant(_I32, 0))
                    codes = builder.bitcast(builder.shuffle_vector(codes, codes, _BROADCAST), _PAIRS)
                    for h in range(2):
                        builder.store(builder.add(builder.load(accs[r][h]), _madd(builder, codes, halves[h])), accs[r][h])
            _store_block(builder, accs, z_arr.data, row_index, builder.mul(panel_index, ir.Constant(_I64, PRODUCT_PANEL)), n)

        return sig, codegen

    return block


#: the x86 instructions of the unsigned-by-signed byte product (AVX2): VPMADDUBSW multiplies
#: 32 unsigned bytes by 32 signed ones and adds neighbouring products into 16 int16 lanes,
#: saturating; VPMADDWD by ones adds neighbouring int16 lanes into 8 int32 ones, exactly
_PMADDUBSW, _PMADDWD = "llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"
#: ... and with AVX-512 VNNI (its 256-bit form, AVX512VL): VPDPBUSD adds each int32 lane's four
#: unsigned-by-signed byte products to the lane, exactly (no int16 step to saturate)
_DPBUSD = "llvm.x86.avx512.vpdpbusd.256"
_BYTES = ir.VectorType(ir.IntType(8), 4 * LANES)
_HALFWORDS = ir.VectorType(_I16, 2 * LANES)


def quad_block(rows: int, vnni: bool = False) -> Callable:
    """The intrinsic ``block(a, row, bq, panel, zu, column_sums, z)``: z[row:row + rows,
    16 panel:16 panel + 16] = a[row:row + rows] @ the panel's columns of B - zu[row] *
    column_sums, exactly in int32, where no pair of B's neighbouring values (2j, 2j + 1) down a
    column can saturate VPMADDUBSW's int16 sum (the packer moves such pairs out,
    ``_integer.pack_quads``). ``a`` uint8 (M, 4Q); ``bq`` int8 (panels, Q, 64), quad q of a panel
    holding B[4q + t, c] for t = 0..3 of each of its 16 columns c in turn (zeros past K and N);
    ``zu`` int32 (M,); ``column_sums`` int32 (16 panels,); ``z`` int32 (M, N), of which the
    last panel writes only the columns below N. Per quad of K and row: one 32-bit broadcast of
    four codes, then for each of the two vectors of B VPMADDUBSW, VPMADDWD by ones and an add:
    about 30 instructions per 256 multiply-adds for four rows, where ``madd_block`` issues 44
    (it widens B and broadcasts twice as often). With ``vnni`` one VPDPBUSD instead of the
    three (the same exact sums). x86 with AVX2 only, and AVX-512 VNNI and VL for ``vnni``: the
    caller checks."""

    @intrinsic
    def block(typingctx, a, row, bq, panel, zu, column_sums, z):
        sig = types.void(a, types.intp, bq, types.intp, zu, column_sums, z)

        def codegen(context, builder, signature, args):
            a_value, row_index, bq_value, panel_index, zu_value, sums_value, z_value = args
            a_arr = context.make_array(signature.args[0])(context, builder, a_value)
            bq_arr = context.make_array(signature.args[2])(context, builder, bq_value)
            zu_arr = context.make_array(signature.args[4])(context, builder, zu_value)
            sums_arr = context.make_array(signature.args[5])(context, builder, sums_value)
            z_arr = context.make_array(signature.args[6])(context, builder, z_value)
            module = builder.module
            pmaddubsw = cgutils.get_or_insert_function(module, ir.FunctionType(_HALFWORDS, [_BYTES, _BYTES]), _PMADDUBSW)
            pmaddwd = cgutils.get_or_insert_function(module, ir.FunctionType(_ACC, [_HALFWORDS, _HALFWORDS]), _PMADDWD)
            dpbusd = cgutils.get_or_insert_function(module, ir.FunctionType(_ACC, [_ACC, _ACC, _ACC]), _DPBUSD) if vnni else None
            ones = ir.Constant(_HALFWORDS, [1] * (2 * LANES))
            a_width = cgutils.unpack_tuple(builder, a_arr.shape, 2)[1]
            n = cgutils.unpack_tuple(builder, z_arr.shape, 2)[1]
            quads = cgutils.unpack_tuple(builder, bq_arr.shape, 3)[1]
            stride = ir.Constant(_I64, 4 * PRODUCT_PANEL)  # bytes of bq per quad
            panel_start = builder.gep(bq_arr.data, [builder.mul(builder.mul(panel_index, quads), stride)])
            column = builder.mul(panel_index, ir.Constant(_I64, PRODUCT_PANEL))
            a_rows = [builder.bitcast(builder.gep(a_arr.data, [builder.mul(builder.add(row_index, ir.Constant(_I64, r)), a_width)]),
                                      _I32.as_pointer()) for r in range(rows)]  # a row as quads
            sums = [builder.load(builder.bitcast(builder.gep(sums_arr.data, [builder.add(column, ir.Constant(_I64, LANES * h))]),
                                                 _ACC.as_pointer()), align=4) for h in range(2)]
            accs = []
            for r in range(rows):  # each accumulator starts at -zu[row] * the column sums
                zu_row = builder.load(builder.gep(zu_arr.data, [builder.add(row_index, ir.Constant(_I64, r))]))
                zu_lanes = builder.insert_element(ir.Constant(_ACC, None), builder.neg(zu_row), ir.Constant(_I32, 0))
                zu_lanes = builder.shuffle_vector(zu_lanes, zu_lanes, _BROADCAST)
                accs.append([cgutils.alloca_once_value(builder, builder.mul(zu_lanes, sums[h])) for h in range(2)])
            with cgutils.for_range(builder, quads) as loop:
                quad = loop.index
                quad_start = builder.gep(panel_start, [builder.mul(quad, stride)])
                halves = [builder.load(builder.bitcast(builder.gep(quad_start, [ir.Constant(_I64, 4 * LANES * h)]),
                                                       _BYTES.as_pointer()), align=1) for h in range(2)]
                if vnni:  # (B's bytes as the int32 lanes VPDPBUSD reads four at a time)
                    halves = [builder.bitcast(half, _ACC) for half in halves]
                for r in range(rows):
                    four = builder.load(builder.gep(a_rows[r], [quad]), align=1)
                    codes = builder.insert_element(ir.Constant(_ACC, None), four, ir.Constant(_I32, 0))
                    codes = builder.shuffle_vector(codes, codes, _BROADCAST)
                    for h in range(2):
                        if vnni:
                            builder.store(builder.call(dpbusd, [builder.load(accs[r][h]), codes, halves[h]]), accs[r][h])
                            continue
                        pairs = builder.call(pmaddubsw, [builder.bitcast(codes, _BYTES), halves[h]])
                        builder.store(builder.add(builder.load(accs[r][h]), builder.call(pmaddwd, [pairs, ones])), accs[r][h])
            _store_block(builder, accs, z_arr.data, row_index, column, n)

        return sig, codegen

    return block


_F32 = ir.FloatType()
_FLOATS = ir.VectorType(_F32, LANES)  # eight float32 lanes: half a panel's columns
_BROADCAST_FLOAT = ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES)


def fma_block(rows: int) -> Callable:
    """The intrinsic ``block(a, row, bp, panel, bias, z)``: z[row:row + rows, 16 panel:16 panel
    + 16] = a[row:row + rows] @ the panel's columns of B + bias, in float32: ``a`` (M, K)
    C-contiguous; ``bp`` B packed by ``nn.pack_float_panels`` (panels, K, 16), zeros past N;
    ``bias`` (16 panels,), zeros past N (all zeros for none); ``z`` (M, N), of which the last
    panel writes only the columns below N. The accumulators (rows x two 8-lane vectors: 6 rows
    use 12 of AVX2's 16 registers) start at the bias and stay in registers over K; each value
    of A is broadcast to meet the panel's two vectors by fused multiply-adds (``llvm.fma``:
    one rounding each, the FMA instruction where the CPU has one). LLVM's loop vectoriser
    keeps a product's sums in memory or reduces one dot at a time; this is the register block
    a GEMM's kernel is (single thread, 64 x 128 x 512: 48 GMAC/s, the FMA units' peak here)."""

    @intrinsic
    def block(typingctx, a, row, bp, panel, bias, z):
        sig = types.void(a, types.intp, bp, types.intp, bias, z)

        def codegen(context, builder, signature, args):
            a_value, row_index, bp_value, panel_index, bias_value, z_value = args
            a_arr = context.make_array(signature.args[0])(context, builder, a_value)
            bp_arr = context.make_array(signature.args[2])(context, builder, bp_value)
            bias_arr = context.make_array(signature.args[4])(context, builder, bias_value)
            z_arr = context.make_array(signature.args[5])(context, builder, z_value)
            k = cgutils.unpack_tuple(builder, a_arr.shape, 2)[1]
            n = cgutils.unpack_tuple(builder, z_arr.shape, 2)[1]
            panel_width = ir.Constant(_I64, PRODUCT_PANEL)
            column = builder.mul(panel_index, panel_width)
            panel_start = builder.gep(bp_arr.data, [builder.mul(builder.mul(panel_index, k), panel_width)])
            a_rows = [builder.gep(a_arr.data, [builder.mul(builder.add(row_index, ir.Constant(_I64, r)), k)])
                      for r in range(rows)]
            bias_start = builder.gep(bias_arr.data, [column])
            starts = [builder.load(builder.bitcast(builder.gep(bias_start, [ir.Constant(_I64, LANES * h)]),
                                                   _FLOATS.as_pointer()), align=4) for h in range(2)]
            accs = [[cgutils.alloca_once_value(builder, starts[h]) for h in range(2)] for _ in range(rows)]
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_FLOATS, [_FLOATS] * 3),
                                                 f"llvm.fma.v{LANES}f32")
            with cgutils.for_range(builder, k) as loop:
                at = builder.gep(panel_start, [builder.mul(loop.index, panel_width)])
                halves = [builder.load(builder.bitcast(builder.gep(at, [ir.Constant(_I64, LANES * h)]),
                                                       _FLOATS.as_pointer()), align=4) for h in range(2)]
                for r in range(rows):
                    value = builder.load(builder.gep(a_rows[r], [loop.index]))
                    lanes = builder.insert_element(ir.Constant(_FLOATS, None), value, ir.Constant(_I32, 0))
                    lanes = builder.shuffle_vector(lanes, lanes, _BROADCAST_FLOAT)
                    for h in range(2):
                        builder.store(builder.call(fma, [lanes, halves[h], builder.load(accs[r][h])]), accs[r][h])
            _store_block(builder, accs, z_arr.data, row_index, column, n)

        return sig, codegen

    return block


@intrinsic
def fused_multiply_add(typingctx, a, b, c):
    """float32 a * b + c rounded once (LLVM's ``llvm.fma``: the FMA instruction where the CPU
    has one, and exact everywhere), as MLAS's FMA3 kernels evaluate their polynomials."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@intrinsic
def float32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 ``bits`` (a bitcast: 2^k is (k + 127) << 23),
    which vectorises where a table's lookup needs a gather (slow on AMD's AVX2 CPUs)."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


#: the two rows' lanes alternating: row 0's value j, then row 1's
_INTERLEAVE = ir.Constant(ir.VectorType(_I32, 2 * PRODUCT_PANEL),
                          [j // 2 + (j % 2) * PRODUCT_PANEL for j in range(2 * PRODUCT_PANEL)])


@intrinsic
def pack_code_pair(typingctx, cols, row, start, zero_point, bp, panel, pair):
    """``bp[panel, pair]`` = the 16 codes ``cols[row, start:start + 16]`` and ``cols[row + 1,
    start:start + 16]`` minus ``zero_point``, interleaved as int16 (row's value j at 2j, the next
    row's at 2j + 1: ``madd_block``'s layout of B). ``cols`` (K, N) uint8 or int8, C-contiguous;
    ``bp`` int16 (panels, pairs, 32); the caller keeps both rows and the 16 columns inside.
    Two vector loads, widen, subtract, one shuffle and one store: numba's loop for it stayed
    scalar (LLVM cannot move the loads above the stores without knowing the arrays apart)."""
    sig = types.void(cols, types.intp, types.intp, types.int32, bp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        cols_value, row_index, start_index, zero_value, bp_value, panel_index, pair_index = args
        cols_arr = context.make_array(signature.args[0])(context, builder, cols_value)
        bp_arr = context.make_array(signature.args[4])(context, builder, bp_value)
        n = cgutils.unpack_tuple(builder, cols_arr.shape, 2)[1]
        pairs = cgutils.unpack_tuple(builder, bp_arr.shape, 3)[1]
        codes = ir.VectorType(ir.IntType(8), PRODUCT_PANEL)
        wide = ir.VectorType(_I16, PRODUCT_PANEL)
        widen = builder.sext if signature.args[0].dtype.signed else builder.zext
        zero = builder.trunc(zero_value, _I16)
        zeros = builder.insert_element(ir.Constant(wide, None), zero, ir.Constant(_I32, 0))
        zeros = builder.shuffle_vector(zeros, zeros, ir.Constant(ir.VectorType(_I32, PRODUCT_PANEL), [0] * PRODUCT_PANEL))
        rows = []
        for r in range(2):
            offset = builder.add(builder.mul(builder.add(row_index, ir.Constant(_I64, r)), n), start_index)
            ptr = builder.bitcast(builder.gep(cols_arr.data, [offset]), codes.as_pointer())
            rows.append(builder.sub(widen(builder.load(ptr, align=1), wide), zeros))
        pair_values = builder.shuffle_vector(rows[0], rows[1], _INTERLEAVE)
        slot = builder.mul(builder.add(builder.mul(panel_index, pairs), pair_index), ir.Constant(_I64, 2 * PRODUCT_PANEL))
        target = builder.bitcast(builder.gep(bp_arr.data, [slot]), ir.VectorType(_I16, 2 * PRODUCT_PANEL).as_pointer())
        builder.store(pair_values, target, align=2)
        return context.get_dummy_value()

    return sig, codegen
