"""MatMul and Gemm (tiled in workgroup memory), Conv (grouped/depthwise), pooling, Softmax,
LogSoftmax, LayerNormalization and reductions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ort_core import Kernel, KernelRequest, NodeView

from . import wgsl
from .ops_elementwise import _kind_check
from .registry import Dispatch, Prepared, SessionRuntime, op, shader_kernel

Shape = tuple[int, ...]
ROW_WG = 64  # threads per row in the row kernels (Softmax, LayerNormalization)
ROW_KERNEL_BELOW = 32  # products with fewer rows use the untiled row kernel (faster on lavapipe up to 32)
_FLOAT_ONLY = _kind_check({"f": ""})


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# --------------------------------------------------------------------------------------------
# MatMul / Gemm
# --------------------------------------------------------------------------------------------


GEMM_VALUES = 8  # u32 values gemm_source keeps at the start of the uniform buffer


def gemm_values(m: int, n: int, k: int, nbatch: int, direct: bool = False) -> list[int]:
    """The first GEMM_VALUES values of a product's uniform buffer: M, N, K, N4, M*N4, threads
    of the untiled kernel, M*N, M4*N4 (where N4 = ceil(N/4), M4 = ceil(M/4))."""
    n4, m4 = -(-n // 4), -(-m // 4)
    threads = nbatch * m4 * n4 if direct and m >= ROW_KERNEL_BELOW else nbatch * m * n4
    return [m, n, k, n4, m * n4, threads, m * n, m4 * n4]


def gemm_source(head: str, m: int, n: int, k: int, nbatch: int, helpers: str, direct: bool = False) -> tuple[str, tuple[int, int, int]]:
    """A batched (M x K) @ (K x N) product over accessor functions the caller defines in
    ``helpers``: ``base_a(bz)``/``base_b(bz) -> u32`` (per-batch bases, computed once),
    ``load_a(r, kk, ab)``/``load_b(kk, c, bb) -> f32`` and ``store_c(r, c, bz, v)``. ``head``
    declares the bindings and the uniform ``u`` whose first values are ``gemm_values``, so the
    source depends on the sizes only through the choice of kernel (M below 32 or not). Returns
    the source and the workgroup counts.

    M >= 32: 32x32 output tiles per workgroup of 8x8 threads; A and B tiles of 32x32 are staged
    in workgroup memory and each thread accumulates a 4x4 block in registers (16 multiply-adds
    per pair of workgroup loads, two barriers per K step). M < ROW_KERNEL_BELOW (skinny
    products, e.g. linear layers at small batch, depthwise convolutions): one thread per 4
    outputs of a row reading straight from the buffers, since a 32-row tile would leave most
    threads idle. ``direct`` (M >= 32): each thread accumulates a 4x4 block reading straight
    from the buffers, no workgroup memory: on a software adapter, where "workgroup memory" is
    ordinary memory and barriers cost, this measured 1.7-2x faster than the tiles on lavapipe.
    """
    M, N, K, N4, MN4, TOTAL = (wgsl.u(j) for j in range(6))
    if m == 0 or n == 0 or nbatch == 0:  # empty output: nothing to dispatch
        return head + "\n" + wgsl.main_1d(0, ""), (0, 1, 1)
    if m < ROW_KERNEL_BELOW:
        total = nbatch * m * -(-n // 4)
        lines = [
            f"  if (i >= {TOTAL}) {{ return; }}",
            f"  let c0 = (i % {N4}) * 4u;",
            f"  let row = (i / {N4}) % {M};",
            f"  let bz = i / {MN4};",
            "  let ab = base_a(bz);",
            "  let bb = base_b(bz);",
            "  var acc0 = 0.0; var acc1 = 0.0; var acc2 = 0.0; var acc3 = 0.0;",
            # columns past N read column N-1 (in bounds) and are not stored
            *[f"  let c{j}x = min(c0 + {j}u, {N} - 1u);" for j in range(4)],
            f"  for (var kk = 0u; kk < {K}; kk = kk + 1u) {{",
            "    let a = load_a(row, kk, ab);",
            *[f"    acc{j} = acc{j} + a * load_b(kk, c{j}x, bb);" for j in range(4)],
            "  }",
            *[f"  if (c0 + {j}u < {N}) {{ store_c(row, c0 + {j}u, bz, acc{j}); }}" for j in range(4)],
        ]
        main = (
            f"@compute @workgroup_size({wgsl.WORKGROUP})\n"
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
            f"  let i = gid.x + gid.y * nwg.x * {wgsl.WORKGROUP}u;\n" + "\n".join(lines) + "\n}\n"
        )
        return head + "\n" + helpers + "\n" + main, wgsl.groups_1d(total)

    if direct:
        total = nbatch * -(-m // 4) * -(-n // 4)
        lines = [
            f"  if (i >= {TOTAL}) {{ return; }}",
            f"  let per = {wgsl.u(7)};",
            "  let bz = i / per;",
            "  let rem = i % per;",
            f"  let r0 = (rem / {N4}) * 4u;",
            f"  let c0 = (rem % {N4}) * 4u;",
            "  let ab = base_a(bz);",
            "  let bb = base_b(bz);",
            "  " + " ".join(f"var a{r}{c} = 0.0;" for r in range(4) for c in range(4)),
            # rows and columns past the edge read the last one (in bounds) and are not stored
            "  " + " ".join(f"let rr{r} = min(r0 + {r}u, {M} - 1u);" for r in range(4)),
            "  " + " ".join(f"let cc{c} = min(c0 + {c}u, {N} - 1u);" for c in range(4)),
            f"  for (var kk = 0u; kk < {K}; kk = kk + 1u) {{",
            "    " + " ".join(f"let x{r} = load_a(rr{r}, kk, ab);" for r in range(4)),
            "    " + " ".join(f"let y{c} = load_b(kk, cc{c}, bb);" for c in range(4)),
            *["    " + " ".join(f"a{r}{c} = a{r}{c} + x{r} * y{c};" for c in range(4)) for r in range(4)],
            "  }",
            *[f"  if (r0 + {r}u < {M} && c0 + {c}u < {N}) {{ store_c(r0 + {r}u, c0 + {c}u, bz, a{r}{c}); }}"
              for r in range(4) for c in range(4)],
        ]
        main = (
            f"@compute @workgroup_size({wgsl.WORKGROUP})\n"
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
            f"  let i = gid.x + gid.y * nwg.x * {wgsl.WORKGROUP}u;\n" + "\n".join(lines) + "\n}\n"
        )
        return head + "\n" + helpers + "\n" + main, wgsl.groups_1d(total)

    groups = (-(-n // 32), -(-m // 32), nbatch)
    if max(groups) > wgsl.MAX_GROUPS:
        raise ValueError(f"product of {m}x{n} outputs x {nbatch} batches exceeds the dispatch limit")
    fma = [f"      let a{r} = ta[(ty + {r}u) * 32u + kk];" for r in range(4)]
    fma += [f"      let b{c} = tb[kk * 32u + tx + {c}u];" for c in range(4)]
    fma += ["      " + " ".join(f"acc{r}{c} = acc{r}{c} + a{r} * b{c};" for c in range(4)) for r in range(4)]
    stores = [
        f"  if (row0 + {r}u < m && col0 + {c}u < n) {{ store_c(row0 + {r}u, col0 + {c}u, bz, acc{r}{c}); }}"
        for r in range(4) for c in range(4)
    ]
    return f"""{head}
{helpers}
var<workgroup> ta: array<f32, 1024>;
var<workgroup> tb: array<f32, 1024>;
@compute @workgroup_size(8, 8, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {{
  let m = {M};
  let n = {N};
  let k = {K};
  let bz = wid.z;
  let ab = base_a(bz);
  let bb = base_b(bz);
  let tid = lid.y * 8u + lid.x;
  let ty = lid.y * 4u;
  let tx = lid.x * 4u;
  let tile_row = wid.y * 32u;
  let tile_col = wid.x * 32u;
  {" ".join(f"var acc{r}{c} = 0.0;" for r in range(4) for c in range(4))}
  for (var t = 0u; t < k; t = t + 32u) {{
    for (var e = 0u; e < 16u; e = e + 1u) {{
      let idx = e * 64u + tid;
      let r = idx / 32u;
      let c = idx % 32u;
      var av = 0.0;
      if (tile_row + r < m && t + c < k) {{ av = load_a(tile_row + r, t + c, ab); }}
      ta[idx] = av;
      var bv = 0.0;
      if (t + r < k && tile_col + c < n) {{ bv = load_b(t + r, tile_col + c, bb); }}
      tb[idx] = bv;
    }}
    workgroupBarrier();
    for (var kk = 0u; kk < 32u; kk = kk + 1u) {{
{chr(10).join(fma)}
    }}
    workgroupBarrier();
  }}
  let row0 = tile_row + ty;
  let col0 = tile_col + tx;
{chr(10).join(stores)}
}}
""", groups


def matmul_source(
    dtypes: Sequence[np.dtype],
    out_dtype: np.dtype,
    m: int,
    n: int,
    k: int,
    batch: Shape,
    a_batch: Sequence[int],
    b_batch: Sequence[int],
    trans_a: bool = False,
    trans_b: bool = False,
    alpha: float = 1.0,
    beta: float = 1.0,
    c_strides: tuple[int, int] | None = None,
    direct: bool = False,
) -> tuple[str, tuple[int, int, int], list[int]]:
    """C[b] = alpha * op(A[b]) @ op(B[b]) (+ beta * bias) with broadcast batch dimensions.
    Sizes, batch dimensions and strides go to the uniform buffer (returned as its values), so
    the source depends on the batch rank, transposes, dtypes and the kernel choice only."""
    M, N, K, MN = wgsl.u(0), wgsl.u(1), wgsl.u(2), wgsl.u(6)
    values = gemm_values(m, n, k, _prod(batch), direct)
    rank = len(batch)
    first = len(values)
    values += list(batch) + [s * m * k for s in a_batch] + [s * k * n for s in b_batch]
    a_index = f"ab + kk * {M} + r" if trans_a else f"ab + r * {K} + kk"
    b_index = f"bb + c * {K} + kk" if trans_b else f"bb + kk * {N} + c"
    value = "v" if alpha == 1.0 else f"{wgsl.flit(alpha)} * v"
    if c_strides is not None:
        cs = len(values)
        values += list(c_strides)
        bias = f"f32(in2[r * {wgsl.u(cs)} + c * {wgsl.u(cs + 1)}])"
        value += f" + {bias}" if beta == 1.0 else f" + {wgsl.flit(beta)} * {bias}"
    decomposed = ["  var q = bz;"]
    for d in range(rank - 1, -1, -1):
        decomposed.append(f"  let b{d} = q % {wgsl.u(first + d)};")
        decomposed.append(f"  q = q / {wgsl.u(first + d)};")
    a_base = " + ".join(f"b{d} * {wgsl.u(first + rank + d)}" for d in range(rank)) or "0u"
    b_base = " + ".join(f"b{d} * {wgsl.u(first + 2 * rank + d)}" for d in range(rank)) or "0u"
    body = chr(10).join(decomposed) if rank else ""
    helpers = f"""
fn base_a(bz: u32) -> u32 {{
{body}
  return {a_base};
}}
fn base_b(bz: u32) -> u32 {{
{body}
  return {b_base};
}}
fn load_a(r: u32, kk: u32, ab: u32) -> f32 {{ return f32(in0[{a_index}]); }}
fn load_b(kk: u32, c: u32, bb: u32) -> f32 {{ return f32(in1[{b_index}]); }}
fn store_c(r: u32, c: u32, bz: u32, v: f32) {{ out0[bz * {MN} + r * {N} + c] = {wgsl.store(value, out_dtype)}; }}
"""
    head = wgsl.bindings([wgsl.storage_type(d) for d in dtypes], [wgsl.storage_type(out_dtype)])
    head += "\n" + wgsl.uniform_decl(len(dtypes) + 1, len(values))
    source, groups = gemm_source(head, m, n, k, _prod(batch), helpers, direct)
    return source, groups, values


@op("MatMul", check=_FLOAT_ONLY)
def _matmul(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    def prepare(args: Sequence) -> Prepared:
        a, b = args
        a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
        b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
        m, k = a_shape[-2:]
        k2, n = b_shape[-2:]
        if k != k2:
            raise ValueError(f"MatMul {node.name!r}: shapes {a.shape} and {b.shape} do not match")
        batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
        out_shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
        source, groups, values = matmul_source(
            [a.dtype, b.dtype], a.dtype, m, n, k, batch,
            wgsl.broadcast_strides(a_shape[:-2], batch), wgsl.broadcast_strides(b_shape[:-2], batch),
            direct=rt.direct_gemm,
        )
        dispatch = Dispatch(rt.gpu.pipeline(source), (0, 1), (0,), groups, rt.stream.uniform(values))
        return Prepared([(out_shape, a.dtype)], [dispatch])

    return shader_kernel(rt, prepare)


@op("Gemm", check=_FLOAT_ONLY)
def _gemm(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))

    def prepare(args: Sequence) -> Prepared:
        a, b = args[0], args[1]
        c = args[2] if len(args) > 2 else None
        m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
        n = b.shape[0] if trans_b else b.shape[1]
        c_strides = None
        inputs: tuple[int, ...] = (0, 1)
        dtypes = [a.dtype, b.dtype]
        if c is not None and beta != 0.0:
            st = wgsl.broadcast_strides(c.shape, (m, n))
            c_strides = (st[0], st[1])
            inputs = (0, 1, 2)
            dtypes.append(c.dtype)
        source, groups, values = matmul_source(
            dtypes, a.dtype, m, n, k, (), (), (), trans_a, trans_b, alpha, beta, c_strides, rt.direct_gemm
        )
        dispatch = Dispatch(rt.gpu.pipeline(source), inputs, (0,), groups, rt.stream.uniform(values))
        return Prepared([((m, n), a.dtype)], [dispatch])

    return shader_kernel(rt, prepare)


# --------------------------------------------------------------------------------------------
# Conv and pooling
# --------------------------------------------------------------------------------------------


def explicit_pads(node: NodeView, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """[begin..., end...] from ``pads`` or ``auto_pad`` (SAME_UPPER puts the odd pixel at the end)."""
    nd = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad == "NOTSET":
        pads = [int(p) for p in (node.attr("pads") or [0] * (2 * nd))]
        if any(p < 0 for p in pads):  # as onnxruntime: the spec wants them >= 0
            raise ValueError(f"{node.op_type} node {node.name!r}: pads {pads} must be non-negative")
        return pads
    if auto_pad == "VALID":
        return [0] * (2 * nd)
    begin, end = [], []
    for d in range(nd):
        out = -(-spatial[d] // strides[d])
        total = max(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - spatial[d])
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return begin + end


def _window_loop(nd: int, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int], body: str, x_base: str) -> str:
    """Loop over a kernel window at output coordinates o2.. ; ``body`` sees ``xo`` (the input
    offset) inside the bounds check."""
    ks = _prod(kernel)
    lines = [f"  for (var kk = 0u; kk < {ks}u; kk = kk + 1u) {{", wgsl.decompose("kk", kernel, "k")]
    checks, terms = [], []
    x_strides = wgsl.strides(spatial)
    for d in range(nd):
        lines.append(f"    let p{d} = i32(o{d + 2} * {strides[d]}u + k{d} * {dilations[d]}u) - {pads[d]};")
        checks.append(f"p{d} >= 0 && p{d} < {spatial[d]}")
        terms.append(f"u32(p{d}) * {x_strides[d]}u")
    lines.append(f"    if ({' && '.join(checks)}) {{")
    lines.append(f"      let xo = {x_base} + {' + '.join(terms)};")
    lines.append(body)
    lines.append("    }")
    lines.append("  }")
    return "\n".join(lines)


@op("Conv", check=_FLOAT_ONLY)
def _conv(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    group = int(node.attr("group", 1))

    def prepare(args: Sequence) -> Prepared:
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else None
        n, c = x.shape[:2]
        m, cg = w.shape[:2]
        kernel = [int(d) for d in (node.attr("kernel_shape") or w.shape[2:])]
        nd = len(kernel)
        spatial = x.shape[2:]
        strides = [int(s) for s in (node.attr("strides") or [1] * nd)]
        dilations = [int(s) for s in (node.attr("dilations") or [1] * nd)]
        pads = explicit_pads(node, spatial, kernel, strides, dilations)
        if c != cg * group or m % group:
            raise ValueError(f"Conv {node.name!r}: {c} input channels, weight {w.shape}, group {group}")
        if any(d == 0 for d in spatial):  # onnxruntime refuses it too (the CPU provider as well)
            raise ValueError(f"Conv {node.name!r}: input shape {list(x.shape)} has an empty spatial dimension")
        out_spatial = [
            (spatial[d] + pads[d] + pads[d + nd] - ((kernel[d] - 1) * dilations[d] + 1)) // strides[d] + 1
            for d in range(nd)
        ]
        out_shape = (n, m, *out_spatial)
        mg = m // group
        ks = _prod(kernel)
        ohw = _prod(out_spatial)
        # implicit GEMM per group: (Mg x Cg*KS weights) @ (Cg*KS x N*OHW im2col columns, read
        # from x on the fly with zero padding)
        x_strides = wgsl.strides(spatial)
        checks = " && ".join(f"p{d} >= 0 && p{d} < {spatial[d]}" for d in range(nd))
        offsets = " + ".join(f"u32(p{d}) * {x_strides[d]}u" for d in range(nd))
        positions = "\n".join(
            f"  let p{d} = i32(o{d} * {strides[d]}u + q{d} * {dilations[d]}u) - {pads[d]};" for d in range(nd)
        )
        bias = f" + f32(in2[g * {mg}u + r])" if b is not None else ""
        helpers = f"""
fn base_a(bz: u32) -> u32 {{ return bz * {mg * cg * ks}u; }}
fn base_b(bz: u32) -> u32 {{ return bz; }}
fn load_a(r: u32, kk: u32, ab: u32) -> f32 {{ return f32(in1[ab + r * {cg * ks}u + kk]); }}
fn load_b(kk: u32, c: u32, g: u32) -> f32 {{
  let nn = c / {ohw}u;
{wgsl.decompose(f"c % {ohw}u", out_spatial, "o")}
  let ci = kk / {ks}u;
{wgsl.decompose(f"kk % {ks}u", kernel, "q")}
{positions}
  if (!({checks})) {{ return 0.0; }}
  return f32(in0[(nn * {c}u + g * {cg}u + ci) * {_prod(spatial)}u + {offsets}]);
}}
fn store_c(r: u32, c: u32, g: u32, v: f32) {{
  out0[((c / {ohw}u) * {m}u + g * {mg}u + r) * {ohw}u + c % {ohw}u] = {wgsl.store("v" + bias, x.dtype)};
}}
"""
        dtypes = [x.dtype, w.dtype] + ([b.dtype] if b is not None else [])
        head = wgsl.bindings([wgsl.storage_type(d) for d in dtypes], [wgsl.storage_type(x.dtype)])
        head += "\n" + wgsl.uniform_decl(len(dtypes) + 1, GEMM_VALUES)
        source, groups = gemm_source(head, mg, n * ohw, cg * ks, group, helpers)
        inputs = (0, 1, 2) if b is not None else (0, 1)
        uniform = rt.stream.uniform(gemm_values(mg, n * ohw, cg * ks, group))
        dispatch = Dispatch(rt.gpu.pipeline(source), inputs, (0,), groups, uniform)
        return Prepared([(out_shape, x.dtype)], [dispatch])

    return shader_kernel(rt, prepare)


def _pool_check(node: NodeView) -> str | None:
    if node.op_type == "MaxPool" and sum(1 for o in node.outputs if o) > 1:
        return "MaxPool with the Indices output has no WebGPU kernel"
    return _FLOAT_ONLY(node)


def _pool(node: NodeView, request: KernelRequest, rt: SessionRuntime, is_max: bool) -> Kernel:
    include_pad = bool(node.attr("count_include_pad", 0))
    ceil_mode = bool(node.attr("ceil_mode", 0))

    def prepare(args: Sequence) -> Prepared:
        x = args[0]
        kernel = [int(d) for d in node.attr("kernel_shape")]
        nd = len(kernel)
        spatial = x.shape[2:]
        strides = [int(s) for s in (node.attr("strides") or [1] * nd)]
        dilations = [int(s) for s in (node.attr("dilations") or [1] * nd)]
        pads = explicit_pads(node, spatial, kernel, strides, dilations)
        out_spatial = []
        for d in range(nd):
            span = spatial[d] + pads[d] + pads[d + nd] - ((kernel[d] - 1) * dilations[d] + 1)
            size = (-(-span // strides[d]) if ceil_mode else span // strides[d]) + 1
            if ceil_mode and (size - 1) * strides[d] >= spatial[d] + pads[d]:
                size -= 1  # the last window must start inside the input or the begin padding
            out_spatial.append(size)
        out_shape = (*x.shape[:2], *out_spatial)
        ss = _prod(spatial)
        x_base = f"(o0 * {x.shape[1]}u + o1) * {ss}u"
        if is_max:
            init, body, result = "-3.4028234663852886e38", "      acc = max(acc, f32(in0[xo]));", "acc"
        else:
            init, body, result = "0.0", "      acc = acc + f32(in0[xo]);\n      cnt = cnt + 1.0;", "acc / cnt"
        lines = [wgsl.decompose("i", out_shape, "o", free_outer=True), f"  var acc = {init};", "  var cnt = 0.0;",
                 _window_loop(nd, spatial, kernel, strides, dilations, pads, body, x_base)]
        if not is_max and include_pad:
            # count window positions inside the explicitly padded input (not the ceil_mode extension)
            factors = []
            for d in range(nd):
                lo = f"i32(o{d + 2} * {strides[d]}u) - {pads[d]}"
                lines.append(f"  var n{d} = 0.0;")
                lines.append(f"  for (var q = 0u; q < {kernel[d]}u; q = q + 1u) {{ let p = {lo} + i32(q * {dilations[d]}u);"
                             f" if (p >= -{pads[d]} && p < {spatial[d] + pads[d + nd]}) {{ n{d} = n{d} + 1.0; }} }}")
                factors.append(f"n{d}")
            lines.append(f"  cnt = {' * '.join(factors)};")
        lines.append(f"  out0[i] = {wgsl.store(result, x.dtype)};")
        # the batch size is only in the uniform (element count): one pipeline for every batch
        source = wgsl.bindings([x.wgsl], [x.wgsl]) + "\n" + wgsl.uniform_decl(2, 1)
        source += "\n" + wgsl.main_sized("\n".join(lines))
        n = _prod(out_shape)
        dispatch = Dispatch(rt.gpu.pipeline(source), (0,), (0,), wgsl.groups_1d(n), rt.stream.uniform([n]))
        return Prepared([(out_shape, x.dtype)], [dispatch])

    kernel = shader_kernel(rt, prepare)
    n_out = len(node.outputs)
    if n_out == 1:
        return kernel
    return Kernel(run=lambda x: [kernel.run(x)] + [None] * (n_out - 1))


op("MaxPool", check=_pool_check)(lambda node, request, rt: _pool(node, request, rt, True))
op("AveragePool", check=_pool_check)(lambda node, request, rt: _pool(node, request, rt, False))


# --------------------------------------------------------------------------------------------
# reductions (one thread per output element)
# --------------------------------------------------------------------------------------------

# op -> (init, accumulate with v, finish with acc and count R)
REDUCE = {
    "ReduceSum": ("0.0", "acc = acc + v;", "acc"),
    "ReduceMean": ("0.0", "acc = acc + v;", "acc / {R}.0"),
    "ReduceMax": ("bitcast<f32>(0xff800000u)", "acc = max(acc, v);", "acc"),
    "ReduceMin": ("bitcast<f32>(0x7f800000u)", "acc = min(acc, v);", "acc"),
    "ReduceProd": ("1.0", "acc = acc * v;", "acc"),
    "ReduceSumSquare": ("0.0", "acc = acc + v * v;", "acc"),
    "ReduceL1": ("0.0", "acc = acc + abs(v);", "acc"),
    "ReduceL2": ("0.0", "acc = acc + v * v;", "sqrt(acc)"),
    "ReduceLogSum": ("0.0", "acc = acc + v;", "log(acc)"),
    "ReduceLogSumExp": ("0.0", "acc = acc + exp(v - mx);", "mx + log(acc)"),
    "GlobalAveragePool": ("0.0", "acc = acc + v;", "acc / {R}.0"),
    "GlobalMaxPool": ("-3.4028234663852886e38", "acc = max(acc, v);", "acc"),
}


def reduce_source(op_type: str, x_shape: Shape, dtype: np.dtype, axes: Sequence[int], keepdims: bool) -> tuple[str, Shape]:
    init, step, finish = REDUCE[op_type]
    kept = [d for d in range(len(x_shape)) if d not in axes]
    st = wgsl.strides(x_shape)
    kept_shape = [x_shape[d] for d in kept]
    red_shape = [x_shape[d] for d in axes]
    r = _prod(red_shape)
    out_shape = tuple(1 if d in axes else x_shape[d] for d in range(len(x_shape))) if keepdims else tuple(kept_shape)
    base = wgsl.offset("c", [st[d] for d in kept])
    roff = wgsl.offset("q", [st[d] for d in axes])
    loop = [f"  for (var r = 0u; r < {r}u; r = r + 1u) {{", wgsl.decompose("r", red_shape, "q"),
            f"    let v = f32(in0[base + {roff}]);"]
    # the outermost kept coordinate has no modulo and the count is a uniform, so a reduction
    # that keeps the batch axis compiles once for every batch size
    lines = [wgsl.decompose("i", kept_shape, "c", free_outer=True), f"  let base = {base};"]
    if op_type == "ReduceLogSumExp":
        lines += ["  var mx = -3.4028234663852886e38;", *loop, "    mx = max(mx, v);", "  }"]
    lines += [f"  var acc = {init};", *loop, f"    {step}", "  }",
              f"  out0[i] = {wgsl.store(finish.replace('{R}', str(r)), dtype)};"]
    head = wgsl.bindings([wgsl.storage_type(dtype)], [wgsl.storage_type(dtype)]) + "\n" + wgsl.uniform_decl(2, 1)
    return head + "\n" + wgsl.main_sized("\n".join(lines)), out_shape


def _reduce(op_type: str) -> None:
    axes_input_since = 13 if op_type == "ReduceSum" else 18

    @op(op_type, check=_FLOAT_ONLY)
    def build(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
        keepdims = bool(node.attr("keepdims", 1))
        noop = bool(node.attr("noop_with_empty_axes", 0))
        axes_from_input = node.opset >= axes_input_since and not op_type.startswith("Global")
        attr_axes = None if axes_from_input else node.attr("axes")

        def prepare(args: Sequence) -> Prepared:
            x = args[0]
            if op_type.startswith("Global"):
                axes = list(range(2, x.ndim))
                keep = True
            else:
                given = args[1] if axes_from_input and len(args) > 1 else attr_axes
                keep = keepdims
                if given is None or len(given) == 0:
                    axes = [] if noop else list(range(x.ndim))
                else:
                    axes = sorted({int(a) % x.ndim for a in np.asarray(given).ravel()})
            source, out_shape = reduce_source(op_type, x.shape, x.dtype, axes, keep)
            n = _prod(out_shape)
            dispatch = Dispatch(rt.gpu.pipeline(source), (0,), (0,), wgsl.groups_1d(n), rt.stream.uniform([n]))
            return Prepared([(out_shape, x.dtype)], [dispatch])

        return shader_kernel(rt, prepare, host_inputs=frozenset({1}) if axes_from_input else frozenset())


for _name in REDUCE:
    _reduce(_name)


# --------------------------------------------------------------------------------------------
# row kernels: one workgroup per row, tree reductions in workgroup memory
# --------------------------------------------------------------------------------------------


def _tree(op: str) -> str:
    return (
        "  workgroupBarrier();\n"
        f"  for (var s = {ROW_WG // 2}u; s > 0u; s = s >> 1u) {{\n"
        f"    if (lid < s) {{ red[lid] = {op}; }}\n"
        "    workgroupBarrier();\n"
        "  }\n"
    )


def _row_head(head: str, rows: int | str) -> str:
    """Bindings ``head``, the reduction scratch and the entry point of a row kernel (one
    workgroup per row; ``rows`` is a count or a WGSL expression)."""
    rows = f"{rows}u" if isinstance(rows, int) else rows
    return (
        head
        + f"\nvar<workgroup> red: array<f32, {ROW_WG}>;\n"
        f"@compute @workgroup_size({ROW_WG})\n"
        "fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, "
        "@builtin(num_workgroups) nwg: vec3<u32>) {\n"
        "  let row = wid.x + wid.y * nwg.x;\n"
        f"  if (row >= {rows}) {{ return; }}\n"
    )


def _row_groups(rows: int) -> tuple[int, int, int]:
    if rows == 0:
        return (0, 1, 1)
    x = min(rows, wgsl.MAX_GROUPS)
    return (x, -(-rows // x) if rows else 0, 1)


def softmax_source(dtype: np.dtype, log: bool) -> str:
    """Softmax over rows of ``length`` elements ``inner`` apart; sizes in the uniform buffer
    (rows, length, inner, length * inner), so one pipeline serves every shape."""
    rows, length, inner, span = (wgsl.u(j) for j in range(4))
    off = f"base + j * {inner}"
    result = "v - mx - log(total)" if log else "exp(v - mx) / total"
    head = wgsl.bindings([wgsl.storage_type(dtype)], [wgsl.storage_type(dtype)]) + "\n" + wgsl.uniform_decl(2, 4)
    return _row_head(head, rows) + f"""
  let base = (row / {inner}) * {span} + row % {inner};
  var m = -3.4028234663852886e38;
  for (var j = lid; j < {length}; j = j + {ROW_WG}u) {{ m = max(m, f32(in0[{off}])); }}
  red[lid] = m;
{_tree("max(red[lid], red[lid + s])")}  let mx = red[0];
  workgroupBarrier();
  var sum = 0.0;
  for (var j = lid; j < {length}; j = j + {ROW_WG}u) {{ sum = sum + exp(f32(in0[{off}]) - mx); }}
  red[lid] = sum;
{_tree("red[lid] + red[lid + s]")}  let total = red[0];
  for (var j = lid; j < {length}; j = j + {ROW_WG}u) {{
    let v = f32(in0[{off}]);
    out0[{off}] = {wgsl.store(result, dtype)};
  }}
}}
"""


def _softmax(op_type: str) -> None:
    @op(op_type, check=_FLOAT_ONLY)
    def build(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
        legacy = node.opset < 13  # before opset 13 the input is flattened to 2-D at axis
        axis = int(node.attr("axis", 1 if legacy else -1))

        def prepare(args: Sequence) -> Prepared:
            x = args[0]
            a = axis % x.ndim if x.ndim else 0
            if legacy:
                outer, length, inner = _prod(x.shape[:a]), _prod(x.shape[a:]), 1
            else:
                outer, length, inner = _prod(x.shape[:a]), x.shape[a], _prod(x.shape[a + 1 :])
            source = softmax_source(x.dtype, op_type == "LogSoftmax")
            uniform = rt.stream.uniform([outer * inner, length, inner, length * inner])
            dispatch = Dispatch(rt.gpu.pipeline(source), (0,), (0,), _row_groups(outer * inner), uniform)
            return Prepared([(x.shape, x.dtype)], [dispatch])

        return shader_kernel(rt, prepare)


_softmax("Softmax")
_softmax("LogSoftmax")


def layer_norm_source(dtypes: Sequence[np.dtype], norm_shape: Shape, scale_shape: Shape, bias_shape: Shape | None, eps: float, stats: tuple[bool, bool]) -> str:
    length = _prod(norm_shape)
    outputs = [wgsl.storage_type(dtypes[0])] + ["f32" for s in stats if s]

    def index(shape: Shape) -> str:
        if _prod(shape) == length and len(shape) <= len(norm_shape):
            return "j"
        if _prod(shape) == 1:
            return "0u"
        return wgsl.offset("c", wgsl.broadcast_strides(shape, norm_shape))

    needs_coords = any(index(s) not in ("j", "0u") for s in (scale_shape, bias_shape) if s is not None)
    coords = wgsl.decompose("j", norm_shape, "c") if needs_coords else ""
    bias = f" + f32(in2[{index(bias_shape)}])" if bias_shape is not None else ""
    stat_lines = []
    k = 1
    if stats[0]:
        stat_lines.append(f"  if (lid == 0u) {{ out{k}[row] = mean; }}")
        k += 1
    if stats[1]:
        stat_lines.append(f"  if (lid == 0u) {{ out{k}[row] = inv; }}")
    head = wgsl.bindings([wgsl.storage_type(d) for d in dtypes], outputs)
    head += "\n" + wgsl.uniform_decl(len(dtypes) + len(outputs), 1)
    return _row_head(head, wgsl.u(0)) + f"""
  let base = row * {length}u;
  var sum = 0.0;
  for (var j = lid; j < {length}u; j = j + {ROW_WG}u) {{ sum = sum + f32(in0[base + j]); }}
  red[lid] = sum;
{_tree("red[lid] + red[lid + s]")}  let mean = red[0] / {length}.0;
  workgroupBarrier();
  var sq = 0.0;
  for (var j = lid; j < {length}u; j = j + {ROW_WG}u) {{ let d = f32(in0[base + j]) - mean; sq = sq + d * d; }}
  red[lid] = sq;
{_tree("red[lid] + red[lid + s]")}  let inv = 1.0 / sqrt(red[0] / {length}.0 + {wgsl.flit(eps)});
{chr(10).join(stat_lines)}
  for (var j = lid; j < {length}u; j = j + {ROW_WG}u) {{
{coords}
    let y = (f32(in0[base + j]) - mean) * inv * f32(in1[{index(scale_shape)}]){bias};
    out0[base + j] = {wgsl.store("y", dtypes[0])};
  }}
}}
"""


@op("LayerNormalization", since=17, check=_FLOAT_ONLY)
def _layer_norm(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    stats = (len(node.outputs) > 1 and bool(node.outputs[1]), len(node.outputs) > 2 and bool(node.outputs[2]))
    n_out = len(node.outputs)

    def prepare(args: Sequence) -> Prepared:
        x, scale = args[0], args[1]
        bias = args[2] if len(args) > 2 else None
        a = axis % x.ndim
        rows = _prod(x.shape[:a])
        norm_shape = x.shape[a:]
        source = layer_norm_source(
            [x.dtype, scale.dtype] + ([bias.dtype] if bias is not None else []), norm_shape,
            scale.shape, bias.shape if bias is not None else None, eps, stats,
        )
        stat_shape = x.shape[:a] + (1,) * (x.ndim - a)
        outputs = [(x.shape, x.dtype)] + [(stat_shape, np.dtype(np.float32)) for s in stats if s]
        inputs = (0, 1, 2) if bias is not None else (0, 1)
        dispatch = Dispatch(
            rt.gpu.pipeline(source), inputs, tuple(range(len(outputs))), _row_groups(rows), rt.stream.uniform([rows])
        )
        return Prepared(outputs, [dispatch])

    kernel = shader_kernel(rt, prepare, n_outputs=1 + sum(stats))
    if n_out == 1:
        return kernel

    def run(*args):
        outs = kernel.run(*args)
        outs = [outs] if not isinstance(outs, list) else outs
        it = iter(outs[1:])
        return [outs[0]] + [next(it) if k < len(stats) and stats[k] else None for k in range(n_out - 1)]

    return Kernel(run=run)


# --------------------------------------------------------------------------------------------
# ConvTranspose and Resize (one thread per output element)
# --------------------------------------------------------------------------------------------


def conv_transpose_pads(node: NodeView, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], output_padding: Sequence[int]) -> tuple[list[int], list[int]]:
    """Explicit pads [begin..., end...] and the output spatial shape, as the ONNX spec says."""
    nd = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    output_shape = node.attr("output_shape")
    full = [strides[d] * (spatial[d] - 1) + output_padding[d] + (kernel[d] - 1) * dilations[d] + 1 for d in range(nd)]
    if output_shape is None and auto_pad in ("NOTSET", "VALID"):
        pads = [int(p) for p in (node.attr("pads") or [0] * (2 * nd))] if auto_pad == "NOTSET" else [0] * (2 * nd)
        return pads, [full[d] - pads[d] - pads[d + nd] for d in range(nd)]
    wanted = [int(s) for s in output_shape[-nd:]] if output_shape is not None else [spatial[d] * strides[d] for d in range(nd)]
    begin, end = [], []
    for d in range(nd):
        total = full[d] - wanted[d]
        if auto_pad == "SAME_UPPER":
            begin.append(total // 2)
            end.append(total - total // 2)
        else:
            begin.append(total - total // 2)
            end.append(total // 2)
    return begin + end, wanted


@op("ConvTranspose", check=_FLOAT_ONLY)
def _conv_transpose(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    group = int(node.attr("group", 1))

    def prepare(args: Sequence) -> Prepared:
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else None
        n, c = x.shape[:2]
        cg = c // group
        mg = w.shape[1]
        m = mg * group
        kernel = [int(d) for d in (node.attr("kernel_shape") or w.shape[2:])]
        nd = len(kernel)
        spatial = x.shape[2:]
        strides = [int(s) for s in (node.attr("strides") or [1] * nd)]
        dilations = [int(s) for s in (node.attr("dilations") or [1] * nd)]
        output_padding = [int(s) for s in (node.attr("output_padding") or [0] * nd)]
        pads, out_spatial = conv_transpose_pads(node, spatial, kernel, strides, dilations, output_padding)
        if w.shape[0] != c:
            raise ValueError(f"ConvTranspose {node.name!r}: weight {w.shape} for {c} input channels")
        out_shape = (n, m, *out_spatial)
        ks = _prod(kernel)
        x_strides = wgsl.strides(spatial)
        lines = [
            wgsl.decompose("i", out_shape, "o"),
            f"  let g = o1 / {mg}u;",
            f"  let mi = o1 % {mg}u;",
            f"  var acc = {'f32(in2[o1])' if b is not None else '0.0'};",
            f"  for (var ci = 0u; ci < {cg}u; ci = ci + 1u) {{",
            f"    let x_base = (o0 * {c}u + g * {cg}u + ci) * {_prod(spatial)}u;",
            f"    let w_base = ((g * {cg}u + ci) * {mg}u + mi) * {ks}u;",
            f"    for (var kk = 0u; kk < {ks}u; kk = kk + 1u) {{",
            wgsl.decompose("kk", kernel, "k"),
            "      var ok = true;",
            "      var xo = x_base;",
        ]
        for d in range(nd):
            lines += [
                f"      let t{d} = i32(o{d + 2}) + {pads[d]} - i32(k{d} * {dilations[d]}u);",
                f"      if (t{d} < 0 || t{d} % {strides[d]} != 0 || t{d} / {strides[d]} >= {spatial[d]}) {{ ok = false; }}",
                f"      xo = xo + u32(max(t{d}, 0) / {strides[d]}) * {x_strides[d]}u;",
            ]
        lines += [
            "      if (ok) { acc = acc + f32(in0[xo]) * f32(in1[w_base + kk]); }",
            "    }",
            "  }",
            f"  out0[i] = {wgsl.store('acc', x.dtype)};",
        ]
        dtypes = [x.dtype, w.dtype] + ([b.dtype] if b is not None else [])
        source = wgsl.bindings([wgsl.storage_type(d) for d in dtypes], [wgsl.storage_type(x.dtype)])
        source += "\n" + wgsl.main_1d(_prod(out_shape), "\n".join(lines))
        inputs = (0, 1, 2) if b is not None else (0, 1)
        dispatch = Dispatch(rt.gpu.pipeline(source), inputs, (0,), wgsl.groups_1d(_prod(out_shape)))
        return Prepared([(out_shape, x.dtype)], [dispatch])

    return shader_kernel(rt, prepare)


_RESIZE_COORDS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nearest")
_RESIZE_NEAREST = {
    "round_prefer_floor": "ceil({} - 0.5)",
    "round_prefer_ceil": "floor({} + 0.5)",
    "floor": "floor({})",
    "ceil": "ceil({})",
}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _resize_check(node: NodeView) -> str | None:
    mode = _text(node.attr("mode", "nearest"))
    coords = _text(node.attr("coordinate_transformation_mode", "half_pixel"))
    if mode not in ("nearest", "linear"):
        return f"Resize mode {mode!r} has no WebGPU kernel"
    if coords not in _RESIZE_COORDS:
        return f"Resize coordinate_transformation_mode {coords!r} has no WebGPU kernel"
    if node.attr("antialias", 0) or node.attr("axes") is not None:
        return "Resize with antialias or axes has no WebGPU kernel"
    if _text(node.attr("keep_aspect_ratio_policy", "stretch")) != "stretch":
        return "Resize keep_aspect_ratio_policy other than stretch has no WebGPU kernel"
    return _FLOAT_ONLY(node)


@op("Resize", since=10, check=_resize_check)
def _resize(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    mode = _text(node.attr("mode", "nearest"))
    coords = _text(node.attr("coordinate_transformation_mode", "half_pixel"))
    nearest = _RESIZE_NEAREST[_text(node.attr("nearest_mode", "round_prefer_floor"))]
    scales_at = 1 if node.opset < 11 else 2

    def prepare(args: Sequence) -> Prepared:
        x = args[0]
        rank = x.ndim
        scales = args[scales_at] if len(args) > scales_at else None
        sizes = args[3] if node.opset >= 11 and len(args) > 3 else None
        if sizes is not None and np.asarray(sizes).size:
            out_shape = tuple(int(s) for s in np.asarray(sizes).ravel())
            scale = [out_shape[d] / x.shape[d] if x.shape[d] else 1.0 for d in range(rank)]
        else:
            scale = [float(s) for s in np.asarray(scales).ravel()]
            out_shape = tuple(int(np.floor(x.shape[d] * scale[d])) for d in range(rank))
        lines = [wgsl.decompose("i", out_shape, "o")]
        for d in range(rank):
            size, out, s = x.shape[d], out_shape[d], scale[d]
            o = f"f32(o{d})"
            if coords == "asymmetric":
                expr = f"{o} / {wgsl.flit(s)}"
            elif coords == "align_corners":
                resized = size * s  # the spec's length_resized: unfloored when scales are given
                expr = "0.0" if resized <= 1 else f"{o} * {wgsl.flit((size - 1) / (resized - 1))}"
            elif coords == "pytorch_half_pixel":
                expr = "0.0" if out <= 1 else f"({o} + 0.5) / {wgsl.flit(s)} - 0.5"
            elif coords == "tf_half_pixel_for_nearest":
                expr = f"({o} + 0.5) / {wgsl.flit(s)}"
            else:
                expr = f"({o} + 0.5) / {wgsl.flit(s)} - 0.5"
            lines.append(f"  let f{d} = {expr};")
            if mode == "nearest":
                lines.append(f"  let p{d} = u32(clamp(i32({nearest.format(f'f{d}')}), 0, {size - 1}));")
            else:
                lines.append(f"  let g{d} = clamp(f{d}, 0.0, {wgsl.flit(size - 1)});")
                lines.append(f"  let lo{d} = u32(floor(g{d}));")
                lines.append(f"  let hi{d} = min(lo{d} + 1u, {size - 1}u);")
                lines.append(f"  let w{d} = g{d} - floor(g{d});")
        st = wgsl.strides(x.shape)
        if mode == "nearest":
            index = " + ".join(f"p{d} * {st[d]}u" for d in range(rank)) or "0u"
            lines.append(f"  out0[i] = in0[{index}];")
        else:
            # dimensions that are not resized keep their coordinate: only the others interpolate
            moving = [d for d in range(rank) if out_shape[d] != x.shape[d] or coords not in ("asymmetric", "align_corners")]
            lines.append("  var acc = 0.0;")
            for corner in range(1 << len(moving)):
                weight, terms = [], []
                for d in range(rank):
                    if d in moving:
                        high = (corner >> moving.index(d)) & 1
                        weight.append(f"w{d}" if high else f"(1.0 - w{d})")
                        terms.append(f"{'hi' if high else 'lo'}{d} * {st[d]}u")
                    else:
                        terms.append(f"lo{d} * {st[d]}u")
                w = " * ".join(weight) or "1.0"
                lines.append(f"  acc = acc + {w} * f32(in0[{' + '.join(terms) or '0u'}]);")
            lines.append(f"  out0[i] = {wgsl.store('acc', x.dtype)};")
        n = _prod(out_shape)
        source = wgsl.bindings([x.wgsl], [x.wgsl]) + "\n" + wgsl.main_1d(n, "\n".join(lines))
        return Prepared([(out_shape, x.dtype)], [Dispatch(rt.gpu.pipeline(source), (0,), (0,), wgsl.groups_1d(n))])

    host = frozenset({1}) if node.opset < 11 else frozenset({1, 2, 3})
    return shader_kernel(rt, prepare, host_inputs=host)
