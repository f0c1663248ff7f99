"""A read-only view of a graph for providers, over onnx-ir's in-memory IR.

Providers see nodes by index, their attributes as plain Python values, value types and shapes,
initializers as numpy arrays, and subgraphs as nested views. ``NodeView.ir`` and
``GraphView.ir`` give the underlying ``onnx_ir`` objects to those who want them; nothing in the
view mutates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

_ATTR = ir.AttributeType


def onnx_type_string(t: ir.TypeProtocol | None) -> str:
    """onnxruntime's spelling of a type: ``tensor(float)``, ``seq(tensor(int64))``, ..."""
    if t is None:
        return "unknown"
    if isinstance(t, ir.TensorType):
        return f"tensor({t.dtype.name.lower()})"
    if isinstance(t, ir.SparseTensorType):
        return f"sparse_tensor({t.dtype.name.lower()})"
    if isinstance(t, ir.SequenceType):
        return f"seq({onnx_type_string(t.elem_type)})"
    if isinstance(t, ir.OptionalType):
        return f"optional({onnx_type_string(t.elem_type)})"
    return "unknown"


def numpy_dtype(t: ir.TypeProtocol | None) -> np.dtype | None:
    """The numpy dtype of a tensor type (ml_dtypes for bfloat16, float8, int4, ...)."""
    if isinstance(t, ir.TensorType):
        try:
            return np.dtype(t.dtype.numpy())
        except (TypeError, ValueError):
            return None
    return None


def dtype_of_type_string(type_string: str) -> np.dtype | None:
    """numpy dtype of an onnxruntime type string such as ``tensor(float)``; None otherwise."""
    if not (type_string.startswith("tensor(") and type_string.endswith(")")):
        return None
    try:
        return np.dtype(ir.DataType[type_string[len("tensor(") : -1].upper()].numpy())
    except (KeyError, TypeError, ValueError):
        return None


class ValueView:
    """A value of the graph: its name, type, shape and, for an initializer, its data."""

    def __init__(self, value: ir.Value, graph: GraphView):
        self.ir = value
        self.name: str = value.name or ""
        self.type: str = onnx_type_string(value.type)
        self.dtype: np.dtype | None = numpy_dtype(value.type)
        shape = value.shape
        self.shape: tuple[int | str | None, ...] | None = (
            None
            if shape is None
            # exporters write -1 for "unknown" too; it is no fixed dimension
            else tuple(
                (d if d >= 0 else None) if isinstance(d, int) else (d.value if d.value else None) for d in shape
            )
        )
        self.is_initializer: bool = value.is_initializer()
        self.is_graph_input: bool = value.is_graph_input()
        self.is_graph_output: bool = value.is_graph_output()
        self._graph = graph

    @cached_property
    def const_value(self) -> np.ndarray | None:
        """The data of an initializer (or of a Constant node's output), else None."""
        tensor = self.ir.const_value
        if tensor is None:
            producer = self.ir.producer()
            if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
                attr = producer.attributes.get("value")
                if attr is not None and attr.type == _ATTR.TENSOR:
                    tensor = attr.value
        return None if tensor is None else _tensor_array(tensor)

    @property
    def static_shape(self) -> bool:
        """True when every dimension is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __repr__(self) -> str:
        return f"ValueView({self.name!r}, {self.type}, shape={self.shape})"


def _tensor_array(tensor) -> np.ndarray:
    """A tensor's data as numpy; strings as an object array of str, as the runtime carries them
    (onnx-ir gives bytes: a string initializer's values came out of the model as b'...')."""
    array = np.asarray(tensor.numpy())
    if array.dtype.kind == "S":
        return np.char.decode(array, "utf-8").astype(object)
    if array.dtype == object:
        return np.array([v.decode("utf-8") if isinstance(v, bytes) else v for v in array.flat], dtype=object).reshape(array.shape)
    return array


def _convert_attribute(attr: ir.Attr, graph: GraphView, path: str) -> Any:
    t = attr.type
    v = attr.value
    if t == _ATTR.TENSOR:
        return _tensor_array(v)
    if t == _ATTR.TENSORS:
        return [_tensor_array(x) for x in v]
    if t == _ATTR.GRAPH:
        return GraphView(v, outer=graph, path=f"{path}/{attr.name}")
    if t == _ATTR.GRAPHS:
        return [GraphView(g, outer=graph, path=f"{path}/{attr.name}[{k}]") for k, g in enumerate(v)]
    if t in (_ATTR.INTS, _ATTR.FLOATS, _ATTR.STRINGS):
        return v.tolist() if isinstance(v, np.ndarray) else list(v)  # (long lists: arrays since load)
    return v


class _Attributes(Mapping):
    """A node's attributes as Python values, each converted at its first read: a forest's node
    lists (millions of values, arrays since load) are read by its kernel as arrays
    (``NodeView.array``); made into lists for every node view, they took 1 s of a 194 MB
    LightGBM model's session creation."""

    def __init__(self, node: ir.Node, graph: GraphView, path: str):
        self._ir, self._graph, self._path = node.attributes, graph, path
        self._values: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            value = self._values[name] = _convert_attribute(self._ir[name], self._graph, self._path)
            return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._ir)

    def __len__(self) -> int:
        return len(self._ir)


class NodeView:
    """A node: op type, domain, opset version, attributes, input and output names."""

    def __init__(self, node: ir.Node, index: int, graph: GraphView):
        self.ir = node
        self.index = index
        self.graph = graph
        self.op_type: str = node.op_type
        self.domain: str = "" if node.domain == "ai.onnx" else node.domain
        self.name: str = node.name or f"{node.op_type}_{index}"
        self.opset: int = graph.opset(self.domain)
        self.inputs: tuple[str, ...] = tuple("" if v is None else (v.name or "") for v in node.inputs)
        self.outputs: tuple[str, ...] = tuple(v.name or "" for v in node.outputs)
        self.attributes: Mapping[str, Any] = _Attributes(node, graph, f"{graph.path}/{self.name}" if graph.path else self.name)
        self.subgraphs: dict[str, GraphView] = {
            name: self.attributes[name] for name, a in node.attributes.items() if a.type == _ATTR.GRAPH
        }
        implicit: list[str] = []
        for sub in self.subgraphs.values():
            implicit.extend(n for n in sub.outer_names if n not in implicit)
        self.implicit_inputs: tuple[str, ...] = tuple(implicit)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    def array(self, name: str, dtype: np.dtype | type) -> np.ndarray | None:
        """An attribute as a 1-D numpy array of ``dtype`` (a list or a tensor), None where the
        node has no such attribute. A list is read from the IR where load keeps it as an array
        (INTS and FLOATS of over ``LONG_LIST`` values; a forest's STRINGS too, as numpy str): a
        tree ensemble's tables (a random forest's: 12 lists of 19-29K values) are not made into
        arrays from ``attributes``' Python lists again (8 ms)."""
        attr = self.ir.attributes.get(name)
        if attr is None:
            return None
        value = attr.value if attr.type in (_ATTR.INTS, _ATTR.FLOATS) else self.attributes[name]
        if attr.type == _ATTR.STRINGS and isinstance(attr.value, np.ndarray):
            value = attr.value  # (a long list: the array load keeps)
        return np.asarray(value, dtype=dtype).reshape(-1)

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type

    def __repr__(self) -> str:
        return f"NodeView({self.index}, {self.name!r}, {self.qualified_op}, opset {self.opset})"


class GraphView:
    """The graph providers see. ``nodes`` are in topological order; claims use their indices.

    ``path`` is "" for the main graph and e.g. ``"loop_0/body"`` for a control-flow body.
    ``outer_names`` are the outer-scope values the graph reads (bodies only).
    """

    def __init__(
        self,
        graph: ir.Graph,
        *,
        outer: GraphView | None = None,
        path: str = "",
        opset_imports: dict[str, int] | None = None,
        ir_version: int | None = None,
    ):
        self.ir = graph
        self.outer = outer
        self.path = path
        imports = dict(opset_imports if opset_imports is not None else graph.opset_imports)
        if outer is not None:
            imports = {**outer.opset_imports, **imports}
        self.opset_imports: dict[str, int] = {
            ("" if k == "ai.onnx" else k): v for k, v in imports.items()
        }
        self.ir_version = ir_version if ir_version is not None else (outer.ir_version if outer else 10)
        self._values: dict[str, ValueView] = {}
        self.inputs: tuple[str, ...] = tuple(v.name or "" for v in graph.inputs)
        self.outputs: tuple[str, ...] = tuple(v.name or "" for v in graph.outputs)
        self.initializers: tuple[str, ...] = tuple(graph.initializers)
        self._defined: set[str] = set(self.inputs) | set(self.initializers)
        for node in graph:
            self._defined.update(v.name for v in node.outputs if v.name)
        self.nodes: tuple[NodeView, ...] = tuple(NodeView(n, i, self) for i, n in enumerate(graph))
        self.outer_names: tuple[str, ...] = self._find_outer_names()

    def _find_outer_names(self) -> tuple[str, ...]:
        outer: list[str] = []
        for node in self.nodes:
            for name in (*node.inputs, *node.implicit_inputs):
                if name and name not in self._defined and name not in outer:
                    outer.append(name)
        for name in self.outputs:
            if name and name not in self._defined and name not in outer:
                outer.append(name)
        return tuple(outer)

    # ------------------------------------------------------------ lookups
    def opset(self, domain: str) -> int:
        domain = "" if domain == "ai.onnx" else domain
        return self.opset_imports.get(domain, 1)

    def value(self, name: str) -> ValueView:
        """The value named ``name`` in this graph or an enclosing one."""
        view = self._values.get(name)
        if view is not None:
            return view
        value = self._ir_value(name)
        if value is None:
            if self.outer is not None:
                return self.outer.value(name)
            raise KeyError(f"no value named {name!r} in graph {self.path or 'main'}")
        view = ValueView(value, self)
        self._values[name] = view
        return view

    def _ir_value(self, name: str) -> ir.Value | None:
        index = self.__dict__.get("_ir_index")
        if index is None:
            index = {}
            for v in (*self.ir.inputs, *self.ir.initializers.values()):
                if v.name:
                    index[v.name] = v
            for node in self.ir:
                for v in node.outputs:
                    if v.name:
                        index[v.name] = v
            self._ir_index = index
        return index.get(name)

    def defines(self, name: str) -> bool:
        return name in self._defined

    @cached_property
    def consumers(self) -> dict[str, list[int]]:
        """Value name -> indices of nodes that read it (explicitly or from a subgraph)."""
        result: dict[str, list[int]] = {}
        for node in self.nodes:
            for name in (*node.inputs, *node.implicit_inputs):
                if name:
                    result.setdefault(name, []).append(node.index)
        return result

    @cached_property
    def producer(self) -> dict[str, int]:
        """Value name -> index of the node that produces it."""
        return {name: node.index for node in self.nodes for name in node.outputs if name}

    @cached_property
    def is_sorted(self) -> bool:
        """Whether every node reads only values made by nodes listed before it."""
        producer = self.producer
        return all(c > producer[name] for name, readers in self.consumers.items() if name in producer for c in readers)

    # ------------------------------------------------------------ groups
    def group_io(self, indices: Iterable[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Boundary of a group of nodes: (values it reads from outside, excluding the constant
        initializers; values it produces that are read outside or are graph outputs). An
        initializer that is also a graph input (overridable: a feed may replace it, as an
        active LoRA adapter's parameters do) is an input of the group, not a constant of it."""
        group = set(indices)
        ordered = sorted(group)
        produced: set[str] = set()
        inputs: list[str] = []
        for i in ordered:
            node = self.nodes[i]
            for name in (*node.inputs, *node.implicit_inputs):
                if (
                    name
                    and name not in produced
                    and name not in inputs
                    and not (self.defines(name) and self._is_constant_initializer(name))
                ):
                    inputs.append(name)
            produced.update(n for n in node.outputs if n)
        graph_outputs = set(self.outputs)
        outputs: list[str] = []
        for i in ordered:
            for name in self.nodes[i].outputs:
                if not name:
                    continue
                readers = self.consumers.get(name, [])
                if name in graph_outputs or any(r not in group for r in readers):
                    outputs.append(name)
        return tuple(inputs), tuple(outputs)

    def group_to_model(self, indices: Sequence[int]) -> onnx.ModelProto:
        """The group as a standalone ModelProto (see ``KernelRequest.to_model``)."""
        inputs, outputs = self.group_io(indices)
        ordered = sorted(indices)
        nodes = [ir.serde.serialize_node(self.nodes[i].ir) for i in ordered]
        used_initializers: list[str] = []
        for i in ordered:
            node = self.nodes[i]
            for name in (*node.inputs, *node.implicit_inputs):
                if name and name not in used_initializers and self._is_constant_initializer(name):
                    used_initializers.append(name)
        initializers = []
        for name in used_initializers:
            proto = ir.serde.serialize_tensor(self.value(name).ir.const_value)
            proto.name = name
            initializers.append(proto)
        graph = onnx.helper.make_graph(
            nodes,
            f"{self.path or 'main'}_group_{ordered[0] if ordered else 0}",
            [self._value_info(n) for n in inputs],
            [self._value_info(n) for n in outputs],
            initializer=initializers,
        )
        opsets = [onnx.helper.make_opsetid(d, v) for d, v in self.opset_imports.items()]
        model = onnx.helper.make_model(graph, opset_imports=opsets)
        model.ir_version = self.ir_version
        return model

    def _is_constant_initializer(self, name: str) -> bool:
        """An initializer no feed can replace (not also a graph input)."""
        try:
            value = self.value(name)
        except KeyError:
            return False
        return value.is_initializer and not value.is_graph_input

    def _value_info(self, name: str) -> onnx.ValueInfoProto:
        value = self.value(name)
        info = onnx.ValueInfoProto(name=name)
        if value.ir.type is not None:
            info.type.CopyFrom(ir.serde.serialize_type(value.ir.type))
            if value.ir.shape is not None and isinstance(value.ir.type, ir.TensorType):
                ir.serde.serialize_shape_into(info.type, value.ir.shape)
        return info

    def __repr__(self) -> str:
        return f"GraphView({self.path or 'main'!r}, {len(self.nodes)} nodes)"
