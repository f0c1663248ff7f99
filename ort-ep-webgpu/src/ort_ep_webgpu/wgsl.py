"""WGSL source generation: bindings, flat-index decomposition, broadcasting, math helpers.

Shapes are baked into the generated source as constants, so a pipeline is specific to an op,
its dtypes and its concrete shapes; ``GpuDevice.pipeline`` compiles each distinct source once
and kernels keep a per-shape cache, so a model with fixed shapes compiles once per session
and every later run only records dispatches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .runtime import DEVICE_TYPES

WORKGROUP = 256
MAX_GROUPS = 65535


def kind(dtype: np.dtype) -> str:
    """'f' (float math in f32), 'i' (i32) or 'b' (bool) for a graph dtype."""
    return DEVICE_TYPES[np.dtype(dtype)][2]


def storage_type(dtype: np.dtype) -> str:
    return DEVICE_TYPES[np.dtype(dtype)][1]


def flit(value: float) -> str:
    """An f32 literal (WGSL has no literal for inf or NaN)."""
    v = float(np.float32(value))
    if math.isnan(v):
        return "bitcast<f32>(0x7fc00000u)"
    if math.isinf(v):
        return "bitcast<f32>(0x7f800000u)" if v > 0 else "bitcast<f32>(0xff800000u)"
    text = repr(v)
    return text if ("." in text or "e" in text) else text + ".0"


def groups_1d(n: int) -> tuple[int, int, int]:
    """Workgroup counts covering ``n`` threads of WORKGROUP, spread over x and y."""
    g = -(-n // WORKGROUP)
    if g == 0:
        return (0, 1, 1)
    x = min(g, MAX_GROUPS)
    return (x, -(-g // x), 1)


def bindings(inputs: Sequence[str], outputs: Sequence[str]) -> str:
    """Storage bindings in0..inN (read) then out0..outM (read_write), with ``enable f16``."""
    lines = ["enable f16;"] if "f16" in (*inputs, *outputs) else []
    for k, t in enumerate(inputs):
        lines.append(f"@group(0) @binding({k}) var<storage, read> in{k}: array<{t}>;")
    for k, t in enumerate(outputs):
        lines.append(f"@group(0) @binding({len(inputs) + k}) var<storage, read_write> out{k}: array<{t}>;")
    return "\n".join(lines)


def main_1d(n: int, body: str) -> str:
    """Entry point with one thread per flat index ``i`` < n."""
    return (
        f"@compute @workgroup_size({WORKGROUP})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        f"  let i = gid.x + gid.y * nwg.x * {WORKGROUP}u;\n"
        f"  if (i >= {n}u) {{ return; }}\n"
        f"{body}\n}}\n"
    )


def strides(shape: Sequence[int]) -> list[int]:
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * int(shape[d + 1])
    return out


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Strides of ``in_shape`` read at ``out_shape`` coordinates (0 on broadcast dimensions)."""
    pad = [1] * (len(out_shape) - len(in_shape)) + list(in_shape)
    st = strides(pad)
    return [0 if pad[d] == 1 and out_shape[d] != 1 else st[d] for d in range(len(out_shape))]


def decompose(index: str, shape: Sequence[int], name: str, free_outer: bool = False) -> str:
    """Lines that split flat ``index`` into coordinates ``{name}0..`` of ``shape`` (row-major).

    ``free_outer``: the outermost coordinate is what remains (no modulo), so the source does
    not depend on the outermost size (the batch) when ``index`` is known to be in range."""
    if not shape:
        return ""
    lines = [f"  var {name}_r: u32 = {index};"]
    for d in range(len(shape) - 1, -1, -1):
        if d == 0 and free_outer:
            lines.append(f"  let {name}0: u32 = {name}_r;")
            break
        lines.append(f"  let {name}{d}: u32 = {name}_r % {int(shape[d])}u;")
        if d:
            lines.append(f"  {name}_r = {name}_r / {int(shape[d])}u;")
    return "\n".join(lines)


def main_sized(body: str) -> str:
    """Entry point with one thread per flat index ``i`` below ``u(0)`` (a uniform), so the
    source does not depend on the element count."""
    return (
        f"@compute @workgroup_size({WORKGROUP})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        f"  let i = gid.x + gid.y * nwg.x * {WORKGROUP}u;\n"
        f"  if (i >= {u(0)}) {{ return; }}\n{body}\n}}\n"
    )


def offset(name: str, coord_strides: Sequence[int]) -> str:
    """``sum(name_d * stride_d)`` as a u32 expression."""
    terms = [f"{name}{d} * {s}u" if s != 1 else f"{name}{d}" for d, s in enumerate(coord_strides) if s]
    return " + ".join(terms) if terms else "0u"


def load(k: int, dtype: np.dtype, index: str) -> str:
    """Input ``k`` at ``index`` as a value of its math kind (f32, i32 or bool)."""
    kd = kind(dtype)
    if kd == "f":
        return f"f32(in{k}[{index}])"
    if kd == "b":
        return f"(in{k}[{index}] != 0u)"
    if np.dtype(dtype) == np.int64:
        return f"in{k}[{index}].x"  # the low word
    return f"in{k}[{index}]"


def store(expr: str, dtype: np.dtype) -> str:
    """``expr`` (of the dtype's math kind) converted to the dtype's storage type."""
    kd, st = kind(dtype), storage_type(dtype)
    if kd == "f":
        return f"{st}({expr})"
    if kd == "b":
        return f"select(0u, 1u, {expr})"
    if np.dtype(dtype) == np.int64:
        return f"i64_({expr})"
    return expr


def cast(expr: str, source: str, target: str) -> str:
    """Convert ``expr`` between math kinds ('f', 'i', 'b')."""
    if source == target:
        return expr
    if target == "b":
        return f"({expr} != {'0.0' if source == 'f' else '0'})"
    if source == "b":
        return f"select({'0.0, 1.0' if target == 'f' else '0, 1'}, {expr})"
    return f"{'f32' if target == 'f' else 'i32'}({expr})"


# helpers included in a shader when its body names them
HELPERS = {
    "i64_": """
fn i64_(v: i32) -> vec2<i32> { return vec2<i32>(v, select(0, -1, v < 0)); }""",
    "erf_": """
fn erf_(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5) {  // Maclaurin series: keeps relative accuracy near 0
    let x2 = x * x;
    return 1.1283791671 * x * (1.0 + x2 * (-0.3333333333 + x2 * (0.1 + x2 * (-0.0238095238 + x2 * (0.0046296296 - x2 * 0.0007575758)))));
  }
  // Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7)
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(-y, y, x >= 0.0);
}""",
    "tanh_": """
fn tanh_(x: f32) -> f32 {
  if (abs(x) < 0.125) { let x2 = x * x; return x * (1.0 + x2 * (-0.3333333333 + x2 * (0.1333333333 - x2 * 0.0539682540))); }
  return tanh(clamp(x, -15.0, 15.0));
}""",
    "pow_": """
fn pow_(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  if (a < 0.0 && b == floor(b)) {
    let r = pow(-a, b);
    return select(r, -r, abs(b % 2.0) == 1.0);
  }
  if (a == 0.0) { return select(0.0, bitcast<f32>(0x7f800000u), b < 0.0); }
  return pow(a, b);
}""",
    "ipow_": """
fn ipow_(a: i32, b: i32) -> i32 {
  var r = 1;
  var x = a;
  var e = b;
  loop { if (e <= 0) { break; } if ((e & 1) == 1) { r = r * x; } x = x * x; e = e >> 1u; }
  return r;
}""",
}


def helpers_for(body: str) -> str:
    return "\n".join(src for name, src in HELPERS.items() if name + "(" in body)


def u(j: int) -> str:
    """The ``j``-th u32 of the uniform buffer ``u`` (an array of vec4<u32>)."""
    return f"u.d[{j // 4}][{j % 4}]"


def uniform_decl(binding: int, count: int) -> str:
    """Declaration of the uniform buffer ``u`` holding ``count`` u32 values."""
    return (
        f"struct Sizes {{ d: array<vec4<u32>, {max(1, -(-count // 4))}> }}\n"
        f"@group(0) @binding({binding}) var<uniform> u: Sizes;"
    )
