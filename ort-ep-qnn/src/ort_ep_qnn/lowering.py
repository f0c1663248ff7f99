"""ONNX nodes -> QNN ops (``OpSpec``), for the HTP backend's op set (QnnOpDef.h names).

Layout: QNN's spatial ops (Conv2d, pools, Resize) are channel-last. Each ONNX tensor keeps its
ONNX (NCHW) layout in the QNN graph, and a spatial op is lowered as Transpose(NCHW->NHWC),
the op, Transpose(NHWC->NCHW); convolution weights are transposed to QNN's HWIO when lowered.
Transpose pairs between neighbouring spatial ops are left to the backend's graph optimizer.

Static shapes: a QNN graph has fixed dimensions, so a node whose tensors are not all of
known shape (symbolic dimensions set to 1 first) is declined (``Unsupported``), as is anything
QNN cannot express, before the
backend is asked (``backendValidateOpConfig``) about the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ort_core import GraphView, NodeView

from .runtime import NUMPY_TO_QNN, OpSpec, TensorSpec

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


class Unsupported(Exception):
    """A node this lowering cannot express in QNN; the message is the reason."""


class Lowering:
    """Lowers nodes of ``graph``; ``inputs`` are the values fed at run time, ``outputs`` those
    read back. ``quant`` maps a value name to (scale, zero_point, dtype) for QDQ tensors."""

    def __init__(self, graph: GraphView, inputs: Sequence[str], outputs: Sequence[str],
                 quant: dict[str, tuple[float, int, np.dtype]] | None = None):
        self.graph = graph
        self.inputs = set(inputs)
        self.outputs = set(outputs)
        self.quant = quant or {}
        self.tensors: dict[str, TensorSpec] = {}
        self.ops: list[OpSpec] = []
        self._count = 0
        self._node: NodeView | None = None
        # QDQ units: node index -> {float value: quantized value} for an op folded with the
        # DequantizeLinear nodes before it and the QuantizeLinear after it (see fold_units)
        self.units: dict[int, dict[str, str]] = {}
        self._alias: dict[str, str] = {}

    def resolve(self, name: str) -> str:
        """The value the current node really reads: the quantized one in a folded QDQ unit."""
        return self._alias.get(name, name)

    def qparams(self, name: str) -> tuple[float, int, np.dtype] | None:
        return self.quant.get(self.resolve(name))

    # ------------------------------------------------------------------ values
    def const(self, name: str) -> np.ndarray | None:
        """The value's data when it is a constant: an initializer, a Constant's output, or a
        DequantizeLinear of a constant (a QDQ model's weights, dequantized here)."""
        if not name:
            return None
        name = self.resolve(name)
        value = self.graph.value(name)
        if value.is_initializer or value.const_value is not None:
            return value.const_value
        producer = self.graph.producer.get(name)
        if producer is not None:
            node = self.graph.nodes[producer]
            if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
                return dequantized_constant(self.graph, node)
        return None

    def shape(self, name: str) -> tuple[int, ...]:
        value = self.graph.value(name)
        data = self.const(name)
        if data is not None:
            return tuple(data.shape)
        if value.static_shape:
            return tuple(int(d) for d in value.shape)
        raise Unsupported(f"QNN graphs have static shapes; {name!r} has shape {value.shape}")

    def dtype(self, name: str) -> np.dtype:
        value = self.graph.value(name)
        data = self.const(name)
        dtype = data.dtype if data is not None else value.dtype
        if dtype is None:
            raise Unsupported(f"the element type of {name!r} is unknown")
        return np.dtype(dtype)

    def tensor(self, name: str) -> TensorSpec:
        name = self.resolve(name)
        spec = self.tensors.get(name)
        if spec is not None:
            return spec
        data = self.const(name)
        q = self.quant.get(name)
        if data is not None:
            if data.dtype == np.int64:
                if data.size and (data.min() < -(2**31) or data.max() >= 2**31):
                    raise Unsupported(f"int64 constant {name!r} does not fit in int32")
                data = data.astype(np.int32)
            elif data.dtype not in NUMPY_TO_QNN:
                raise Unsupported(f"{data.dtype} constant {name!r}: the HTP backend has no such type")
            if data.ndim == 0:
                data = data.reshape(1)  # a [1] tensor broadcasts as the scalar does
            spec = TensorSpec(name, data.dtype, tuple(data.shape), "static", data)
        else:
            dtype = self.dtype(name)
            if dtype == np.int64:
                raise Unsupported(f"int64 tensor {name!r}: the HTP backend has no int64")
            if q is not None:
                dtype = q[2]
            elif dtype not in NUMPY_TO_QNN:
                raise Unsupported(f"{dtype} tensor {name!r}: QNN has no such type")
            kind = "in" if name in self.inputs else "out" if name in self.outputs else "native"
            spec = TensorSpec(name, dtype, self.shape(name), kind)
        if q is not None:
            spec.quant = (q[0], q[1])
            spec.dtype = q[2]
        elif data is not None and name in self._alias.values():
            # a folded unit's per-channel constant (weights, bias): its raw data and encodings
            spec.axis_quant = axis_encoding(self.graph, name)
        self.tensors[name] = spec
        return spec

    def weight(self, name: str, perm: Sequence[int]) -> TensorSpec:
        """Constant ``name`` as lowered (the raw quantized data in a folded unit, else float),
        transposed by ``perm``; a per-channel encoding's axis moves with it."""
        t = self.tensor(name)
        if t.kind != "static" or t.data is None:
            raise Unsupported(f"{self._node.op_type if self._node else 'op'}: {name!r} must be a constant")
        spec = self.static(t.name, np.ascontiguousarray(t.data.transpose(perm)))
        spec.dtype, spec.quant = t.dtype, t.quant
        if t.axis_quant is not None:
            axis, scales, zero_points = t.axis_quant
            spec.axis_quant = (list(perm).index(axis), scales, zero_points)
        return spec

    def bias(self, node: NodeView, k: int, x: TensorSpec, w: TensorSpec, n: int) -> TensorSpec:
        """Input ``k`` of ``node``, the [n] bias of a convolution or fully connected op reading
        ``x`` with weights ``w``; zeros when absent. In a quantized op it is int32 with scale
        x_scale * w_scale (per channel when ``w`` is), as QNN's fixed-point kernels take it: a
        QDQ model's quantized bias keeps its own encoding (quantize_static writes exactly that
        scale), a float bias is quantized to it here."""
        name = node.inputs[k] if len(node.inputs) > k else ""
        if name:
            b = self.tensor(name)
            if b.kind == "static" and b.data is not None and b.data.ndim != 1:  # Gemm's [1, n]
                flat = self.static(b.name, b.data.reshape(-1))
                flat.dtype, flat.quant, flat.axis_quant = b.dtype, b.quant, b.axis_quant
                b = flat
            if b.quantized or not w.quantized:
                return b
            if b.kind != "static" or b.data is None:
                raise Unsupported(f"{node.op_type}: a float bias of a quantized op must be a constant")
            data = b.data.astype(np.float64)
        else:
            data = np.zeros(n, np.float64)
            if not w.quantized:
                return self.static(f"{node.name}.bias", data.astype(np.float32))
        if x.quant is None:
            raise Unsupported(f"{node.op_type}: quantized weights with a float input")
        if w.axis_quant is not None:
            scales = x.quant[0] * np.asarray(w.axis_quant[1], np.float64)
        else:
            scales = np.full(n, x.quant[0] * w.quant[0])
        values = np.clip(np.round(data / scales), -(2**31), 2**31 - 1).astype(np.int32)
        spec = self.static(f"{node.name}.bias", values)
        if w.axis_quant is not None:
            spec.axis_quant = (0, tuple(float(v) for v in scales), (0,) * n)
        else:
            spec.quant = (float(scales[0]), 0)
        return spec

    def temp(self, like: TensorSpec, dims: Sequence[int], dtype: np.dtype | None = None) -> TensorSpec:
        self._count += 1
        spec = TensorSpec(f"{like.name}__qnn{self._count}", dtype or like.dtype, tuple(int(d) for d in dims),
                          quant=like.quant)
        return spec

    def static(self, base: str, data: np.ndarray) -> TensorSpec:
        self._count += 1
        return TensorSpec(f"{base}__const{self._count}", data.dtype, tuple(data.shape), "static", data)

    def expanded(self, t: TensorSpec, dims: tuple[int, ...]) -> TensorSpec:
        """A static ``t`` broadcast to ``dims`` (up to 4 MiB), else ``t``."""
        if t.kind != "static" or t.dims == tuple(dims) or t.data is None:
            return t
        if int(np.prod(dims)) * t.data.itemsize > 4 << 20:
            return t
        try:
            data = np.ascontiguousarray(np.broadcast_to(t.data, dims))
        except ValueError:
            return t
        spec = self.static(t.name, data)
        spec.quant, spec.dtype = t.quant, t.dtype
        return spec

    def op(self, type_name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], **params: Any) -> None:
        self._count += 1
        name = f"{self._node.name if self._node else 'op'}__{type_name}{self._count}"
        self.ops.append(OpSpec(name, type_name, inputs, outputs, params))

    # ------------------------------------------------------------------ driving
    def lower(self, node: NodeView) -> list[OpSpec]:
        """Append ``node``'s QNN ops; returns them (raises ``Unsupported``)."""
        if node.domain not in ("", "ai.onnx"):
            # the optimizer's com.microsoft fusions are declined, so the graph keeps the standard
            # ops (with their inferred types and shapes) for QNN's own graph optimizer to fuse
            raise Unsupported(f"{node.qualified_op}: no QNN lowering for domain {node.domain!r}")
        refused = FINALIZE_FAILS.get(node.op_type)
        if refused:
            raise Unsupported(f"{node.op_type}: {refused}")
        fn = LOWERINGS.get(node.op_type)
        if fn is None:
            raise Unsupported(f"{node.qualified_op}: no QNN lowering")
        start = len(self.ops)
        self._node = node
        self._alias = self.units.get(node.index, {})
        try:
            fn(self, node)
        finally:
            self._alias = {}
        return self.ops[start:]

    def folded_away(self, node: NodeView) -> bool:
        """A QuantizeLinear/DequantizeLinear whose work a folded unit does: it becomes no op.
        A DequantizeLinear every reader of which is folded; a QuantizeLinear whose producer is."""
        if node.op_type == "DequantizeLinear":
            readers = self.graph.consumers.get(node.outputs[0], [])
            return bool(readers) and node.outputs[0] not in self.outputs and all(
                self.units.get(r, {}).get(node.outputs[0]) == node.inputs[0] for r in readers)
        if node.op_type == "QuantizeLinear":
            producer = self.graph.producer.get(node.inputs[0])
            return producer is not None and self.units.get(producer, {}).get(node.inputs[0]) == node.outputs[0]
        return False

    # ------------------------------------------------------------------ helpers
    def transpose(self, x: TensorSpec, perm: Sequence[int], out: TensorSpec | None = None) -> TensorSpec:
        if out is None:
            out = self.temp(x, [x.dims[p] for p in perm])
        self.op("Transpose", [x], [out], perm=np.array(perm, np.uint32))
        return out

    def spatial(self, node: NodeView, type_name: str, extra_inputs: list[TensorSpec], **params: Any) -> None:
        """NCHW -> NHWC, the op, NHWC -> NCHW."""
        x = self.tensor(node.inputs[0])
        y = self.tensor(node.outputs[0])
        if len(x.dims) != 4:
            raise Unsupported(f"{node.op_type}: only 2-D spatial (rank 4) inputs are lowered, got rank {len(x.dims)}")
        xt = self.transpose(x, NCHW_TO_NHWC)
        yt = self.temp(y, [y.dims[p] for p in NCHW_TO_NHWC])
        self.op(type_name, [xt, *extra_inputs], [yt], **params)
        self.transpose(yt, NHWC_TO_NCHW, y)


#: float ops a QDQ unit (DequantizeLinear inputs -> op -> QuantizeLinear) may fold into one QNN
#: op on quantized tensors
FOLDABLE = {"Conv", "Gemm", "MatMul", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
            "Concat", "Reshape", "Flatten", "Transpose", "Relu", "Sigmoid", "Softmax", "Resize"}


def fold_units(graph: GraphView, group: Sequence[int], quant: dict[str, tuple[float, int, np.dtype]],
               inputs: Sequence[str], outputs: Sequence[str], validate: Callable[[OpSpec], tuple[int, str, str]],
               refused: dict[int, str] | None = None) -> dict[int, dict[str, str]]:
    """The QDQ units of ``group`` that become one QNN op on quantized tensors: an op of
    FOLDABLE whose float inputs are all DequantizeLinear outputs (in the group, or of a
    constant) with per-tensor encodings (a constant's may be per channel), and whose only
    reader is one QuantizeLinear in the group. A unit is kept only when ``validate`` (backendValidateOpConfig) accepts every QNN op
    it becomes; the others stay float ops between QNN Quantize/Dequantize, and ``refused``
    (when given) gets why, for each unit the backend refused."""
    members = set(group)
    units: dict[int, dict[str, str]] = {}
    for i in group:
        node = graph.nodes[i]
        if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx"):
            continue
        alias: dict[str, str] = {}
        ok = True
        for name in node.inputs:
            if not name:
                continue
            value = graph.value(name)
            if value.dtype is not None and value.dtype.kind != "f":
                continue  # e.g. Reshape's shape: not quantized
            p = graph.producer.get(name)
            dq = graph.nodes[p] if p is not None else None
            if dq is None or dq.op_type != "DequantizeLinear" or (
                    dq.inputs[0] not in quant and axis_encoding(graph, dq.inputs[0]) is None):
                ok = False
                break
            if p not in members and graph.value(dq.inputs[0]).const_value is None:
                ok = False
                break
            alias[name] = dq.inputs[0]
        out = node.outputs[0]
        readers = graph.consumers.get(out, [])
        if not ok or len(node.outputs) != 1 or out in graph.outputs or len(readers) != 1:
            continue
        q = graph.nodes[readers[0]]
        if q.op_type != "QuantizeLinear" or readers[0] not in members or q.outputs[0] not in quant:
            continue
        alias[out] = q.outputs[0]
        trial = Lowering(graph, inputs, outputs, quant)
        trial.units = {i: alias}
        try:
            ops = trial.lower(node)
        except Unsupported:
            continue
        for op in ops:
            code, message, detail = validate(op)
            if code:
                if refused is not None:
                    refused[i] = (f"QNN {op.type_name} refused by backendValidateOpConfig, error {code} "
                                  f"({message}){': ' + detail if detail else ''}")
                break
        else:
            units[i] = alias
    return units


def axis_encoding(graph: GraphView, name: str) -> tuple[int, tuple[float, ...], tuple[int, ...]] | None:
    """(axis, scales, zero points) when constant ``name`` is dequantized per channel: read by a
    DequantizeLinear with a constant 1-D scale (and zero point) of more than one value."""
    data = graph.value(name).const_value
    if data is None or data.ndim == 0:
        return None
    for r in graph.consumers.get(name, []):
        dq = graph.nodes[r]
        if dq.op_type != "DequantizeLinear" or dq.inputs[0] != name:
            continue
        scale = graph.value(dq.inputs[1]).const_value
        zp_name = dq.inputs[2] if len(dq.inputs) > 2 else ""
        zp = graph.value(zp_name).const_value if zp_name else None
        if scale is None or scale.ndim != 1 or scale.size < 2 or (zp_name and zp is None):
            return None
        axis = _axis(int(dq.attr("axis", 1)), data.ndim)
        if data.shape[axis] != scale.size:
            return None
        zp = np.zeros(scale.size, np.int64) if zp is None else zp.astype(np.int64).reshape(-1)
        return axis, tuple(float(v) for v in scale), tuple(int(v) for v in zp)
    return None


def dequantized_constant(graph: GraphView, node: NodeView) -> np.ndarray | None:
    """DequantizeLinear(x) for constant x, scale and zero point (any axis), else None."""
    arrays = []
    for k in range(3):
        name = node.inputs[k] if len(node.inputs) > k else ""
        data = graph.value(name).const_value if name else None
        if name and data is None:
            return None
        arrays.append(data)
    x, scale, zp = arrays
    zp = np.zeros_like(scale, dtype=np.int64) if zp is None else zp.astype(np.int64)
    if scale.ndim == 1 and x.ndim > 1:  # per-axis
        shape = [1] * x.ndim
        shape[int(node.attr("axis", 1))] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((x.astype(np.int64) - zp) * scale.astype(np.float64)).astype(np.float32)


def to_float16(ops: list[OpSpec]) -> list[OpSpec]:
    """``ops`` computing in float16: float32 tensors inside the graph and constants become
    float16, and each float32 graph input/output gets a QNN Cast from/to its float16 twin.

    (HTP's graph precision config, which onnxruntime sets for enable_htp_fp16_precision,
    changes nothing on the simulator: outputs stay bit-identical to float32's, measured.)"""
    f32, f16 = np.dtype(np.float32), np.dtype(np.float16)
    twins: dict[str, TensorSpec] = {}
    head: list[OpSpec] = []
    tail: list[OpSpec] = []

    def twin(spec: TensorSpec) -> TensorSpec:
        t = twins.get(spec.name)
        if t is None:
            t = twins[spec.name] = TensorSpec(f"{spec.name}__fp16", f16, spec.dims)
            if spec.kind == "in":
                head.append(OpSpec(f"{spec.name}__to_fp16", "Cast", [spec], [t]))
            else:
                tail.append(OpSpec(f"{spec.name}__to_fp32", "Cast", [t], [spec]))
        return t

    for op in ops:
        for specs in (op.inputs, op.outputs):
            for k, spec in enumerate(specs):
                if spec.dtype != f32 or spec.quantized:
                    continue
                if spec.kind in ("in", "out"):
                    specs[k] = twin(spec)
                else:
                    spec.dtype = f16
                    if spec.data is not None:
                        spec.data = spec.data.astype(f16)
    return head + ops + tail


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _pads_2d(node: NodeView, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> np.ndarray:
    auto_pad = node.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(in_hw, kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return np.array(pads, np.uint32)
    if auto_pad == "VALID":
        return np.zeros((2, 2), np.uint32)
    p = list(node.attr("pads", [0, 0, 0, 0]))
    if len(p) != 4:
        raise Unsupported(f"{node.op_type}: pads {p} are not 2-D")
    return np.array([[p[0], p[2]], [p[1], p[3]]], np.uint32)


# --- the lowerings ---------------------------------------------------------------------------


def _conv(L: Lowering, node: NodeView) -> None:
    w = L.const(node.inputs[1])
    if w is None:
        raise Unsupported("Conv: the weights must be a constant")
    if w.ndim != 4:
        raise Unsupported(f"Conv: only 2-D convolutions are lowered, weights have rank {w.ndim}")
    group = int(node.attr("group", 1))
    cout, cin_g, kh, kw = w.shape
    x = L.tensor(node.inputs[0])
    strides = list(node.attr("strides", [1, 1]))
    dilations = list(node.attr("dilations", [1, 1]))
    pads = _pads_2d(node, x.dims[2:], (kh, kw), strides, dilations)
    depthwise = group > 1 and cin_g == 1 and group == x.dims[1]
    # QNN's weights: HWIO [kh, kw, cin/group, cout]; depthwise: [kh, kw, 1, cin * multiplier]
    wt = L.weight(node.inputs[1], (2, 3, 1, 0))
    extra = [wt, L.bias(node, 2, x, wt, cout)]
    params: dict[str, Any] = {"stride": np.array(strides, np.uint32), "pad_amount": pads,
                              "dilation": np.array(dilations, np.uint32)}
    if depthwise:
        L.spatial(node, "DepthWiseConv2d", extra, **params)
    else:
        L.spatial(node, "Conv2d", extra, **params, group=group)


def _pool(type_name: str) -> Callable[[Lowering, NodeView], None]:
    def lower(L: Lowering, node: NodeView) -> None:
        if len(node.outputs) > 1 and node.outputs[1]:
            raise Unsupported(f"{node.op_type}: the Indices output has no QNN equivalent")
        kernel = list(node.attr("kernel_shape"))
        if len(kernel) != 2:
            raise Unsupported(f"{node.op_type}: only 2-D pooling is lowered")
        strides = list(node.attr("strides", [1, 1]))
        dilations = list(node.attr("dilations", [1, 1]))
        if dilations != [1, 1]:
            raise Unsupported(f"{node.op_type}: dilations {dilations} have no QNN equivalent")
        x = L.tensor(node.inputs[0])
        params: dict[str, Any] = {
            "filter_size": np.array(kernel, np.uint32), "stride": np.array(strides, np.uint32),
            "pad_amount": _pads_2d(node, x.dims[2:], kernel, strides, dilations),
            "rounding_mode": int(node.attr("ceil_mode", 0)),
        }
        if type_name == "PoolAvg2d":
            params["count_pad_for_edges"] = bool(node.attr("count_include_pad", 0))
        L.spatial(node, type_name, [], **params)

    return lower


def _global_pool(type_name: str) -> Callable[[Lowering, NodeView], None]:
    # a pool whose window is the whole image (a ReduceMean over NCHW's H, W fails HTP's finalize)
    def lower(L: Lowering, node: NodeView) -> None:
        x = L.tensor(node.inputs[0])
        if len(x.dims) != 4:
            raise Unsupported(f"{node.op_type}: only rank-4 inputs are lowered, got rank {len(x.dims)}")
        params: dict[str, Any] = {"filter_size": np.array(x.dims[2:], np.uint32), "stride": np.array(x.dims[2:], np.uint32),
                                  "pad_amount": np.zeros((2, 2), np.uint32)}
        if type_name == "PoolAvg2d":
            params["count_pad_for_edges"] = False
        L.spatial(node, type_name, [], **params)

    return lower


def _binary(type_name: str) -> Callable[[Lowering, NodeView], None]:
    def lower(L: Lowering, node: NodeView) -> None:
        if len(node.inputs) != 2:
            raise Unsupported(f"{node.op_type} with {len(node.inputs)} inputs: only two are lowered")
        a, b = (L.tensor(n) for n in node.inputs)
        y = L.tensor(node.outputs[0])
        # a broadcast constant is expanded to the output's shape: HTP's graph prepare fails on
        # some broadcasts (an Add of [1, 64, 128] to [2, 64, 128] feeding a LayerNorm)
        a, b = (L.expanded(t, y.dims) for t in (a, b))
        L.op(type_name, [a, b], [y])

    return lower


def _sub(L: Lowering, node: NodeView) -> None:
    # a - b as a + (-b), exact in IEEE arithmetic: on the simulator a Sub whose result feeds a
    # Mul fails graphFinalize (QNN error 1002)
    a, b = (L.tensor(n) for n in node.inputs)
    y = L.tensor(node.outputs[0])
    if a.quant is not None or b.quant is not None or y.quant is not None:
        L.op("ElementWiseSubtract", [a, b], [y])
        return
    if b.kind == "static":
        neg = L.static(b.name, np.ascontiguousarray(-b.data))
    else:
        neg = L.temp(b, b.dims)
        L.op("ElementWiseNeg", [b], [neg])
    a, neg = (L.expanded(t, y.dims) for t in (a, neg))
    L.op("ElementWiseAdd", [a, neg], [y])


def _unary(type_name: str, **params: Any) -> Callable[[Lowering, NodeView], None]:
    def lower(L: Lowering, node: NodeView) -> None:
        L.op(type_name, [L.tensor(node.inputs[0])], [L.tensor(node.outputs[0])], **params)

    return lower


def _scalar_input(L: Lowering, node: NodeView, k: int, default: float) -> float:
    if len(node.inputs) <= k or not node.inputs[k]:
        return default
    data = L.const(node.inputs[k])
    if data is None or data.size != 1:
        raise Unsupported(f"{node.op_type}: input {k} must be a constant scalar")
    return float(data.reshape(()))


def _clip(L: Lowering, node: NodeView) -> None:
    if node.opset < 11:
        lo, hi = float(node.attr("min", -3.4e38)), float(node.attr("max", 3.4e38))
    else:
        lo, hi = _scalar_input(L, node, 1, -3.4e38), _scalar_input(L, node, 2, 3.4e38)
    x = L.tensor(node.inputs[0])
    if x.dtype != np.float32 and x.quant is None:
        raise Unsupported(f"Clip of {x.dtype}: only float tensors are lowered")
    L.op("ReluMinMax", [x], [L.tensor(node.outputs[0])], min_value=lo, max_value=hi)


def _leaky_relu(L: Lowering, node: NodeView) -> None:
    x = L.tensor(node.inputs[0])
    alpha = L.static(node.name, np.full((1,), float(node.attr("alpha", 0.01)), np.float32))
    L.op("Prelu", [x, alpha], [L.tensor(node.outputs[0])])


def _prelu(L: Lowering, node: NodeView) -> None:
    L.op("Prelu", [L.tensor(node.inputs[0]), L.tensor(node.inputs[1])], [L.tensor(node.outputs[0])])


def _softmax(type_name: str) -> Callable[[Lowering, NodeView], None]:
    def lower(L: Lowering, node: NodeView) -> None:
        x = L.tensor(node.inputs[0])
        rank = len(x.dims)
        axis = _axis(int(node.attr("axis", -1 if node.opset >= 13 else 1)), rank)
        if node.opset < 13 and axis != rank - 1:
            raise Unsupported(f"{node.op_type}-{node.opset} axis={axis}: the flattening form is lowered only on the last axis")
        y = L.tensor(node.outputs[0])
        if axis == rank - 1:
            L.op(type_name, [x], [y], axis=axis, beta=1.0)
            return
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        xt = L.transpose(x, perm)
        yt = L.temp(y, xt.dims)
        L.op(type_name, [xt], [yt], axis=rank - 1, beta=1.0)
        L.transpose(yt, perm, y)

    return lower


def _matmul(L: Lowering, node: NodeView) -> None:
    a, b = L.tensor(node.inputs[0]), L.tensor(node.inputs[1])
    if len(a.dims) < 2 or len(b.dims) < 2:
        raise Unsupported("MatMul of a 1-D operand: not lowered")
    y = L.tensor(node.outputs[0])
    if b.axis_quant is not None:
        # per-channel weights: QNN's FullyConnected takes them ([n, k], channels on axis 0)
        _fully_connected(L, node, a, L.weight(node.inputs[1], (1, 0)), None, y)
        return
    L.op("MatMul", [a, b], [y], transpose_in0=False, transpose_in1=False)


def _fully_connected(L: Lowering, node: NodeView, a: TensorSpec, w: TensorSpec, bias_input: int | None,
                     y: TensorSpec) -> None:
    """y = a @ w.T + bias with QNN's FullyConnected (w: [n, k]); ``a`` of rank > 2 is
    flattened to [m, k] and the [m, n] result reshaped to ``y`` (FullyConnected's output is 2-D)."""
    n, k = w.dims
    if a.dims[-1] != k:
        raise Unsupported(f"{node.op_type}: input {a.dims} does not match weights {w.dims}")
    bias = L.bias(node, bias_input if bias_input is not None else len(node.inputs), a, w, n)
    if len(a.dims) == 2 and len(y.dims) == 2:
        L.op("FullyConnected", [a, w, bias], [y])
        return
    m = int(np.prod(a.dims[:-1]))
    flat = L.temp(a, (m, k))
    L.op("Reshape", [a], [flat])
    out = L.temp(y, (m, n))
    L.op("FullyConnected", [flat, w, bias], [out])
    L.op("Reshape", [out], [y])


def _gemm(L: Lowering, node: NodeView) -> None:
    a, b = L.tensor(node.inputs[0]), L.tensor(node.inputs[1])
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = L.tensor(node.outputs[0])
    has_c = len(node.inputs) > 2 and bool(node.inputs[2]) and beta != 0.0
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    if b.quantized:
        # a QDQ unit: QNN's FullyConnected on the quantized tensors, with the int32 bias
        # (a MatMul then an Add would round the product to the output's encoding before the
        # bias is added, and a [n] int32 bias does not broadcast-add to a uint8 tensor on HTP)
        if alpha != 1.0 or (has_c and beta != 1.0) or trans_a:
            raise Unsupported("quantized Gemm with alpha or beta != 1 or transA=1: not lowered")
        if b.kind != "static":
            raise Unsupported("quantized Gemm with a non-constant B: not lowered")
        w = L.weight(node.inputs[1], (0, 1) if trans_b else (1, 0))  # QNN's [n, k]
        _fully_connected(L, node, a, w, 2 if has_c else None, y)
        return
    if alpha != 1.0:
        data = L.const(node.inputs[1])
        if data is None:
            raise Unsupported("Gemm alpha != 1 with a non-constant B: not lowered")
        b = L.static(node.inputs[1], (data * alpha).astype(data.dtype))
    params = {"transpose_in0": trans_a, "transpose_in1": trans_b}
    if not has_c:
        L.op("MatMul", [a, b], [y], **params)
        return
    if a.quantized or y.quantized:
        raise Unsupported("quantized Gemm with a float B and a bias: not lowered")
    c = L.tensor(node.inputs[2])
    if beta != 1.0:
        data = L.const(node.inputs[2])
        if data is None:
            raise Unsupported("Gemm beta != 1 with a non-constant C: not lowered")
        c = L.static(node.inputs[2], (data * beta).astype(data.dtype))
    mm = L.temp(y, y.dims)
    L.op("MatMul", [a, b], [mm], **params)
    L.op("ElementWiseAdd", [mm, c], [y])


def _layer_norm(L: Lowering, node: NodeView) -> None:
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise Unsupported("LayerNormalization: the Mean/InvStdDev outputs are not lowered")
    x = L.tensor(node.inputs[0])
    rank = len(x.dims)
    axis = _axis(int(node.attr("axis", -1)), rank)
    inputs = [x, L.tensor(node.inputs[1])]
    if len(node.inputs) > 2 and node.inputs[2]:
        inputs.append(L.tensor(node.inputs[2]))
    L.op("LayerNorm", inputs, [L.tensor(node.outputs[0])], epsilon=float(node.attr("epsilon", 1e-5)),
         axes=np.arange(axis, rank, dtype=np.uint32))


def _concat(L: Lowering, node: NodeView) -> None:
    ins = [L.tensor(n) for n in node.inputs if n]
    axis = _axis(int(node.attr("axis")), len(ins[0].dims))
    L.op("Concat", ins, [L.tensor(node.outputs[0])], axis=axis)


def _reshape_like(L: Lowering, node: NodeView) -> None:
    # the output's static shape says everything (Reshape, Flatten, Squeeze, Unsqueeze)
    x = L.tensor(node.inputs[0])
    L.op("Reshape", [x], [L.tensor(node.outputs[0])])


def _identity(L: Lowering, node: NodeView) -> None:
    x = L.tensor(node.inputs[0])
    L.op("Reshape", [x], [L.tensor(node.outputs[0])])


def _transpose(L: Lowering, node: NodeView) -> None:
    x = L.tensor(node.inputs[0])
    perm = node.attr("perm") or list(range(len(x.dims)))[::-1]
    L.transpose(x, perm, L.tensor(node.outputs[0]))


def _slice(L: Lowering, node: NodeView) -> None:
    x = L.tensor(node.inputs[0])
    rank = len(x.dims)
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes = node.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        vals = []
        for k in range(1, 5):
            name = node.inputs[k] if len(node.inputs) > k else ""
            data = L.const(name) if name else None
            if name and data is None:
                raise Unsupported(f"Slice: input {k} must be a constant")
            vals.append(None if data is None else [int(v) for v in data.reshape(-1)])
        starts, ends, axes, steps = vals
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
    ranges = np.array([[0, d, 1] for d in x.dims], np.int32)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, rank)
        dim = x.dims[a]
        if st == 0:
            raise Unsupported("Slice: step 0")
        # numpy's slice rules are ONNX's; QNN takes the clamped begin/end with end exclusive
        b, e2, st2 = slice(s, e, st).indices(dim)
        if st2 < 0 and e2 < 0:
            raise Unsupported("Slice: a negative step through index 0 has no QNN end value")
        ranges[a] = (b, e2, st2)
    L.op("StridedSlice", [x], [L.tensor(node.outputs[0])], ranges=ranges)


def _split(L: Lowering, node: NodeView) -> None:
    x = L.tensor(node.inputs[0])
    axis = _axis(int(node.attr("axis", 0)), len(x.dims))
    outs = [L.tensor(n) for n in node.outputs]
    sizes = [o.dims[axis] for o in outs]
    index = np.cumsum(sizes)[:-1].astype(np.uint32)
    L.op("Split", [x], outs, axis=axis, split_index=index)


def _reduce(type_name: str) -> Callable[[Lowering, NodeView], None]:
    def lower(L: Lowering, node: NodeView) -> None:
        x = L.tensor(node.inputs[0])
        rank = len(x.dims)
        axes_in = node.inputs[1] if len(node.inputs) > 1 else ""
        if axes_in:
            data = L.const(axes_in)
            if data is None:
                raise Unsupported(f"{node.op_type}: the axes input must be a constant")
            axes = [int(a) for a in data.reshape(-1)]
        else:
            axes = node.attr("axes")
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                raise Unsupported(f"{node.op_type}: noop_with_empty_axes is not lowered")
            axes = list(range(rank))
        axes = sorted(_axis(int(a), rank) for a in axes)
        L.op(type_name, [x], [L.tensor(node.outputs[0])], axes=np.array(axes, np.uint32),
             keep_dims=bool(node.attr("keepdims", 1)))

    return lower


def _cast(L: Lowering, node: NodeView) -> None:
    x = L.tensor(node.inputs[0])
    L.op("Cast", [x], [L.tensor(node.outputs[0])])


def _resize(L: Lowering, node: NodeView) -> None:
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    ctm = node.attr("coordinate_transformation_mode", "half_pixel" if node.opset >= 11 else "asymmetric")
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    nearest = node.attr("nearest_mode", "round_prefer_floor")
    nearest = nearest.decode() if isinstance(nearest, bytes) else nearest
    modes = {"half_pixel": 0, "pytorch_half_pixel": 1, "align_corners": 2, "asymmetric": 3}
    interp = {"nearest": 0, "linear": 1, "cubic": 2}
    nearest_modes = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}
    if ctm not in modes or mode not in interp or nearest not in nearest_modes:
        raise Unsupported(f"Resize mode={mode!r} coordinate_transformation_mode={ctm!r} nearest_mode={nearest!r}: "
                          f"not lowered (valid: mode {sorted(interp)}, transformation {sorted(modes)})")
    y = L.tensor(node.outputs[0])
    x = L.tensor(node.inputs[0])
    if len(x.dims) != 4 or x.dims[:2] != y.dims[:2]:
        raise Unsupported("Resize: only the spatial dimensions of a rank-4 tensor are resized")
    params: dict[str, Any] = {"exclude_outside": bool(node.attr("exclude_outside", 0)),
                              "transformation_mode": modes[ctm], "interpolation_mode": interp[mode]}
    if mode == "nearest":  # QNN refuses the params of the modes not chosen
        params["nearest_mode"] = nearest_modes[nearest]
    if mode == "cubic":
        params["cubic_coeff"] = float(node.attr("cubic_coeff_a", -0.75))
    L.spatial(node, "Resize", [], **params)


def _batchnorm(L: Lowering, node: NodeView) -> None:
    # inference form folded into a per-channel scale and bias (Batchnorm on channel-last data)
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise Unsupported("BatchNormalization: training outputs are not lowered")
    scale, bias, mean, var = (L.const(n) for n in node.inputs[1:5])
    if any(v is None for v in (scale, bias, mean, var)):
        raise Unsupported("BatchNormalization: scale, B, mean and var must be constants")
    eps = float(node.attr("epsilon", 1e-5))
    s = (scale / np.sqrt(var + eps)).astype(np.float32)
    b = (bias - mean * s).astype(np.float32)
    x = L.tensor(node.inputs[0])
    shape = [1, -1] + [1] * (len(x.dims) - 2)
    y = L.tensor(node.outputs[0])
    m = L.temp(y, y.dims)
    L.op("ElementWiseMultiply", [x, L.static(node.name, s.reshape(shape))], [m])
    L.op("ElementWiseAdd", [m, L.static(node.name, b.reshape(shape))], [y])


def _quantize(L: Lowering, node: NodeView) -> None:
    if L.folded_away(node):
        return
    L.op("Quantize", [L.tensor(node.inputs[0])], [L.tensor(node.outputs[0])])


def _dequantize(L: Lowering, node: NodeView) -> None:
    if L.folded_away(node):
        return
    L.op("Dequantize", [L.tensor(node.inputs[0])], [L.tensor(node.outputs[0])])


#: ops whose QNN op the backend validates but the HTP simulator (QNN 2.51, v68) then fails to
#: finalize in every form tried (graphFinalize error 1002): declined before wasting a finalize
FINALIZE_FAILS = {
    "Gather": "QNN Gather passes backendValidateOpConfig but the HTP simulator fails graphFinalize on it (QNN 2.51)",
    "Elu": "QNN Elu passes backendValidateOpConfig but the HTP simulator fails graphFinalize on it (QNN 2.51)",
    "Gelu": "QNN Gelu passes backendValidateOpConfig but the HTP simulator fails graphFinalize on it (QNN 2.51)",
}

LOWERINGS: dict[str, Callable[[Lowering, NodeView], None]] = {
    "Conv": _conv,
    "MaxPool": _pool("PoolMax2d"),
    "AveragePool": _pool("PoolAvg2d"),
    "GlobalAveragePool": _global_pool("PoolAvg2d"),
    "GlobalMaxPool": _global_pool("PoolMax2d"),
    "Add": _binary("ElementWiseAdd"),
    "Sub": _sub,
    "Mul": _binary("ElementWiseMultiply"),
    "Div": _binary("ElementWiseDivide"),
    "Pow": _binary("ElementWisePower"),
    "Max": _binary("ElementWiseMaximum"),
    "Min": _binary("ElementWiseMinimum"),
    "Relu": _unary("Relu"),
    "Sigmoid": _unary("Sigmoid"),
    "Tanh": _unary("Tanh"),
    "Exp": _unary("ElementWiseExp"),
    "Log": _unary("ElementWiseLog"),
    "Sqrt": _unary("ElementWiseSquareRoot"),
    "Neg": _unary("ElementWiseNeg"),
    "Abs": _unary("ElementWiseAbs"),
    "Floor": _unary("ElementWiseFloor"),
    "Ceil": _unary("ElementWiseCeil"),
    "Reciprocal": _unary("ElementWiseUnary", operation=10),
    "HardSwish": _unary("HardSwish"),
    "Clip": _clip,
    "LeakyRelu": _leaky_relu,
    "PRelu": _prelu,
    "Softmax": _softmax("Softmax"),
    "LogSoftmax": _softmax("LogSoftmax"),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "LayerNormalization": _layer_norm,
    "BatchNormalization": _batchnorm,
    "Concat": _concat,
    "Reshape": _reshape_like,
    "Flatten": _reshape_like,
    "Squeeze": _reshape_like,
    "Unsqueeze": _reshape_like,
    "Identity": _identity,
    "Dropout": _identity,
    "Transpose": _transpose,
    "Slice": _slice,
    "Split": _split,
    "ReduceMean": _reduce("ReduceMean"),
    "ReduceSum": _reduce("ReduceSum"),
    "ReduceMax": _reduce("ReduceMax"),
    "ReduceMin": _reduce("ReduceMin"),
    "ReduceProd": _reduce("ReduceProd"),
    "Cast": _cast,
    "Resize": _resize,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
}
