"""Model loading and checking: path, bytes or ModelProto in; a checked onnx-ir Model out."""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner  # a submodule `import onnx` does not load
import onnx_ir as ir
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from ..errors import InvalidGraph, InvalidGraphFail, InvalidProtobuf, NoModel, NoSuchFile
from . import ort_schemas

# onnxruntime's ONNX-domain contrib ops load as they do there (see ort_schemas)
ort_schemas.register()

logger = logging.getLogger("ort_core")

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def load_proto(source: ModelSource) -> onnx.ModelProto:
    """Read a model with its external data; refuse external paths outside the model's folder."""
    return _read(source)[0]


def _read(source: ModelSource, external: Mapping[str, np.ndarray] | None = None,
          files: Mapping[str, bytes] | None = None) -> tuple[onnx.ModelProto, bytes | None]:
    """The model, and the bytes it was parsed from when they still are the model (no external
    data was read into it): the checker and shape inference take those bytes as they are,
    where a ModelProto would be serialised again for each (milliseconds per MB)."""
    data: bytes | None = None
    if source is None:
        raise NoModel("no model given: pass a path, the model's bytes or an onnx.ModelProto")
    if isinstance(source, onnx.ModelProto):
        model = source
        base_dir = None
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        model = _parse(data, "the given bytes")
        base_dir = None
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise NoSuchFile(f"model path {str(path)!r} is a directory, not an ONNX model file")
        if not path.is_file():
            raise NoSuchFile(f"model file not found: {str(path)!r}")
        data = path.read_bytes()
        model = _parse(data, str(path))
        base_dir = path.resolve().parent
    else:
        raise InvalidProtobuf(
            f"cannot load a model from {type(source).__name__}: "
            "expected a path, bytes or onnx.ModelProto"
        )
    if external or files:
        _fill_external_data(model, external or {}, files or {})
        data = None
    if _uses_external_data(model):
        # a model given as bytes or a ModelProto finds its data files in the working directory,
        # as onnxruntime resolves them
        _load_external_data(model, base_dir if base_dir is not None else Path.cwd().resolve())
        data = None
    return model, data


def _fill_external_data(model: onnx.ModelProto, external: Mapping[str, np.ndarray], files: Mapping[str, bytes]) -> None:
    """Give external-data initializers their data from memory: by name (``external``, from
    ``SessionOptions.add_external_initializers``) or from an in-memory file (``files``, by the
    ``location`` the model names)."""
    from onnx import numpy_helper

    from ..errors import Fail

    replaced = set()
    for tensor in _tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        if tensor.name in external:
            array = np.asarray(external[tensor.name])
            fresh = numpy_helper.from_array(array, tensor.name)
            if fresh.data_type != tensor.data_type or list(fresh.dims) != list(tensor.dims):
                raise InvalidGraph(f"external initializer {tensor.name!r}: the model declares type {tensor.data_type} "
                                   f"{list(tensor.dims)}, the value given is {array.dtype} {list(array.shape)}")
            tensor.CopyFrom(fresh)
            replaced.add(tensor.name)
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        blob = files.get(info.location)
        if blob is None:
            continue
        offset = int(info.offset or 0)
        length = int(info.length) if info.length else len(blob) - offset
        if offset + length > len(blob):
            raise InvalidGraph(f"initializer {tensor.name!r}: external data {info.location!r} in memory holds "
                               f"{len(blob)} bytes, the model reads {length} at offset {offset}")
        tensor.raw_data = blob[offset:offset + length]
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    inline = {t.name for t in _tensors(model)}
    for name in external:
        if name not in replaced and name in inline:
            raise Fail(f"add_external_initializers: initializer {name!r} has its data in the model, not in external "
                       "data; replace it with SessionOptions.add_initializer")


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as exc:
        raise InvalidProtobuf(f"{where}: not a valid ONNX model protobuf ({exc})") from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise InvalidProtobuf(f"{where}: protobuf decoded but holds no ONNX model (no ir_version or graph)")
    return model


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model: initializers and attribute tensors of the main graph and its
    subgraphs, and attribute tensors of its functions (what onnx's external-data helper lists,
    in one walk of the nodes, by attribute type: its walk took two and tested each attribute's
    fields, 10 ms of a 1,300-node model's load)."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _graph_tensors(function)


def _graph_tensors(graph: onnx.GraphProto | onnx.FunctionProto) -> Iterator[onnx.TensorProto]:
    if isinstance(graph, onnx.GraphProto):
        yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            kind = attr.type
            if kind == _ATTR_TENSOR:
                yield attr.t
            elif kind == _ATTR_TENSORS:
                yield from attr.tensors
            elif kind == _ATTR_GRAPH:
                yield from _graph_tensors(attr.g)
            elif kind == _ATTR_GRAPHS:
                for sub in attr.graphs:
                    yield from _graph_tensors(sub)


_ATTR_TENSOR, _ATTR_TENSORS = onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS
_ATTR_GRAPH, _ATTR_GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def _uses_external_data(model: onnx.ModelProto) -> bool:
    return any(external_data_helper.uses_external_data(t) for t in _tensors(model))


def _load_external_data(model: onnx.ModelProto, base_dir: Path) -> None:
    for tensor in _tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        try:  # offset or length not a non-negative integer
            info = external_data_helper.ExternalDataInfo(tensor)
        except ValueError as exc:
            entries = {e.key: e.value for e in tensor.external_data}
            raise InvalidGraph(f"initializer {tensor.name!r}: bad external data entry {entries}: {exc}") from exc
        if "\0" in info.location:
            raise InvalidGraph(f"initializer {tensor.name!r}: external data path {info.location!r} holds a NUL byte")
        target = (base_dir / info.location).resolve()
        if os.path.isabs(info.location) or not target.is_relative_to(base_dir):
            raise InvalidGraph(
                f"initializer {tensor.name!r}: external data path {info.location!r} "
                f"escapes the model's folder {str(base_dir)!r}; refused"
            )
        if not target.exists():
            raise NoSuchFile(
                f"initializer {tensor.name!r}: external data file not found: {str(target)!r}"
            )
        if not target.is_file():  # a FIFO would block the read forever, a directory fails it
            kind = "a directory" if target.is_dir() else "not a regular file"
            raise InvalidGraph(
                f"initializer {tensor.name!r}: external data path {str(target)!r} is {kind}"
            )
    try:
        external_data_helper.load_external_data_for_model(model, str(base_dir))
    except Exception as exc:
        raise InvalidGraph(f"external data could not be read: {type(exc).__name__}: {exc}") from exc


_NO_SHAPE = "Field 'shape' of 'type' is required but missing"
#: ... and, below IR version 4, an initializer that is not also a graph input (onnxruntime
#: runs such models: its own ``datasets/mul_1.onnx`` is one)
_NOT_INPUT = "in initializer but not in graph input"
#: onnx's checker on nodes listed out of order (onnxruntime runs them: ``_sort_nodes``)
_UNSORTED = "Nodes in a graph must be topologically sorted"
#: ... and a value info with no type at all (``helper.make_empty_tensor_value_info``)
_NO_TYPE = "Field 'type' of 'value_info' is required but missing"
#: ... or an empty one (``helper.make_value_info(name, onnx.TypeProto())``)
_EMPTY_TYPE = "Unrecognized type value case"
#: ... or an op that onnx's schemas deprecate at the model's opset but onnxruntime still runs:
#: GroupNormalization 18-20 (deprecated in onnx 1.16 for opset 21's per-channel scale and bias;
#: onnxruntime 1.32 runs it with per-group ones, as the CPU provider does)
_DEPRECATED = "is deprecated in domain_version"
_RUN_THOUGH_DEPRECATED = frozenset({"GroupNormalization"})
#: the domain such nodes take in the checker's copy, whose node rules skip unknown domains
_UNCHECKED_DOMAIN = "ort_core.unchecked"


#: checker verdicts on models that onnxruntime refuses with its FAIL status (InvalidGraph for
#: the others): InvalidGraphFail, caught as either class
_ONNXRUNTIME_FAILS = (
    "is not an output of any node",  # a graph output nothing produces
    "is higher than the checker's",  # an IR version newer than this onnx knows
    "single static assignment",  # two nodes writing one output name
    "has inconsistent type",  # type inference: a node's inputs of clashing types
)


def _refused(message: str, verdict: Exception) -> InvalidGraph:
    """The error of a model that the checker or inference refused with ``verdict``: an
    InvalidGraphFail where onnxruntime answers FAIL (``_ONNXRUNTIME_FAILS``), else an
    InvalidGraph."""
    cls = InvalidGraphFail if any(words in str(verdict) for words in _ONNXRUNTIME_FAILS) else InvalidGraph
    return cls(f"{message}: {verdict}")


def check_proto(model: onnx.ModelProto | bytes) -> None:
    """Run the ONNX checker (on a model or its bytes); its message names the node and the rule
    broken.

    Four rules of the checker are not onnxruntime's, which runs such models: a graph input
    or output whose tensor type has no shape at all (rank unknown, as
    ``helper.make_tensor_value_info(name, type, None)`` writes it); a graph output with no
    type at all or an empty one, which type inference gives (``helper.make_empty_tensor_value_info``,
    ``helper.make_value_info(name, onnx.TypeProto())``); below
    IR version 4, an initializer that is not also a graph input; a GroupNormalization at opsets
    18-20, which onnx deprecates. On those failures the check is run again on a copy in which
    those types carry an empty shape, the output its inferred type, the initializers are listed
    as inputs, or the GroupNormalization nodes are in a domain the checker does not check, so
    that every other rule still applies;
    the model itself stays as it is (the output gets its type from inference at load)."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        no_type = _NO_TYPE in str(exc) or _EMPTY_TYPE in str(exc)
        if _NO_SHAPE in str(exc) or no_type or _NOT_INPUT in str(exc) or _DEPRECATED in str(exc):
            copy = onnx.ModelProto()
            if isinstance(model, bytes):
                copy.ParseFromString(model)
            else:
                copy.CopyFrom(model)
            if _NO_SHAPE in str(exc):
                fixed = _give_io_shapes(copy.graph)
            elif no_type:
                fixed = _give_output_types(copy)
            elif _DEPRECATED in str(exc):
                fixed = _uncheck_deprecated(copy)
            else:
                fixed = _list_initializers_as_inputs(copy.graph)
            if fixed:
                check_proto(copy)
                return
        raise _refused("model fails the ONNX checker", exc) from None
    except ValueError as exc:  # e.g. > 2 GB protos; the checker cannot look at them whole
        logger.info("ONNX checker skipped: %s", exc)


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs of a node's attributes (If's branches, Loop's and Scan's bodies)."""
    for attr in node.attribute:
        kind = attr.type  # (an int: cheaper than testing the message's fields)
        if kind == _ATTR_GRAPH:
            yield attr.g
        elif kind == _ATTR_GRAPHS:
            yield from attr.graphs


def proto_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in its nodes' attributes, outermost first."""
    yield graph
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from proto_graphs(sub)


def _list_initializers_as_inputs(graph: onnx.GraphProto) -> bool:
    """List the initializers of ``graph`` that are not graph inputs as inputs (for the
    checker's copy only, of a model below IR version 4); whether any was missing."""
    listed = {v.name for v in graph.input}
    missing = [t for t in graph.initializer if t.name not in listed]
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in missing)
    return bool(missing)


def _uncheck_deprecated(model: onnx.ModelProto) -> bool:
    """Move the ONNX-domain nodes of ``_RUN_THOUGH_DEPRECATED`` ops to a domain the checker
    does not know (the checker's copy only); whether there was any."""
    moved = False
    for graph in proto_graphs(model.graph):
        for node in graph.node:
            if node.op_type in _RUN_THOUGH_DEPRECATED and node.domain in ("", "ai.onnx"):
                node.domain = _UNCHECKED_DOMAIN
                moved = True
    if moved:
        model.opset_import.append(onnx.helper.make_opsetid(_UNCHECKED_DOMAIN, 1))
    return moved


def _give_output_types(model: onnx.ModelProto) -> bool:
    """Give the main graph's outputs that have no type the type inference gives them (for the
    checker's copy only); whether any was missing. One that onnx's inference leaves untyped but
    a node of the graph produces (a com.microsoft op's output: onnxruntime infers it from its own
    schemas) leaves the checker's copy, its type known when its kernel runs; one nothing
    produces is an InvalidGraph naming it."""
    untyped = [out for out in model.graph.output if out.type.WhichOneof("value") is None]
    if not untyped:
        return False
    try:
        inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(model).graph.output}
    except Exception:  # the checker's copy keeps the gap; its error is then the one raised
        return False
    produced = {name for node in model.graph.node for name in node.output}
    for out in untyped:
        found = inferred.get(out.name)
        if found is not None and found.type.WhichOneof("value") is not None:
            out.type.CopyFrom(found.type)
        elif out.name not in produced:
            raise InvalidGraph(f"graph output {out.name!r} has no type, and type inference does not give one")
    kept = [out for out in model.graph.output if out.type.WhichOneof("value") is not None]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    return True


def _give_io_shapes(graph: onnx.GraphProto) -> bool:
    """Give every shapeless tensor input and output of ``graph`` and its subgraphs an empty
    shape (for the checker's copy only); whether any was missing."""
    changed = False
    for info in list(graph.input) + list(graph.output):
        kind = info.type.WhichOneof("value")
        if kind == "tensor_type" and not info.type.tensor_type.HasField("shape"):
            info.type.tensor_type.shape.SetInParent()
            changed = True
    for node in graph.node:
        for sub in _subgraphs(node):
            changed = _give_io_shapes(sub) or changed
    return changed


#: onnx's data propagation holds a 1-D value's data as a list of numbers, whatever its length;
#: a constant 1-D value longer than this (a ConstantOfShape of [10^9]) turns it off, or it
#: materialises the value in Python (10^7 elements took 6 s; shape vectors are short)
DATA_PROP_MAX_LENGTH = 1 << 16


def _small_constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The graph's initializers and Constant outputs of at most 8 elements, as arrays."""
    result = {}
    for t in graph.initializer:
        if math.prod(t.dims) <= 8 and t.data_location != onnx.TensorProto.EXTERNAL:
            try:
                result[t.name] = onnx.numpy_helper.to_array(t)
            except Exception:  # unreadable: not a constant to this estimate
                pass
    for node in graph.node:
        if node.op_type == "Constant" and node.output and len(node.attribute) == 1:
            attr = node.attribute[0]
            if attr.name == "value" and math.prod(attr.t.dims) <= 8:
                try:
                    result[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
                except Exception:
                    pass
            elif attr.name == "value_ints" and len(attr.ints) <= 8:
                result[node.output[0]] = np.array(attr.ints, np.int64)
    return result


#: ops whose output length a constant input sets
_SIZED_OPS = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})


def _long_1d_constant(graph: onnx.GraphProto) -> bool:
    """Whether a node of ``graph`` (or of its subgraphs) makes a constant 1-D value longer than
    ``DATA_PROP_MAX_LENGTH`` from constant inputs (ConstantOfShape, Expand, Tile, Range). The
    constants are read only where such a node exists (reading them was 6 ms of a detection
    model's creation)."""
    sized = [node for node in graph.node if node.op_type in _SIZED_OPS]
    consts = _small_constants(graph) if sized else {}
    for node in sized:
        ins = [consts.get(n) for n in node.input]
        try:
            if node.op_type == "ConstantOfShape" and ins and ins[0] is not None and ins[0].size == 1:
                length = int(ins[0].reshape(-1)[0])
            elif node.op_type in ("Expand", "Tile") and len(ins) > 1 and ins[1] is not None and ins[1].size == 1:
                length = int(ins[1].reshape(-1)[0])
            elif node.op_type == "Range" and len(ins) == 3 and all(x is not None and x.size == 1 for x in ins):
                start, limit, delta = (float(x.reshape(-1)[0]) for x in ins)
                length = math.ceil((limit - start) / delta) if delta else 0
            else:
                continue
        except (ValueError, TypeError, OverflowError):  # inf, NaN: the op's own error later
            continue
        if length > DATA_PROP_MAX_LENGTH:
            return True
    return any(_long_1d_constant(sub) for node in graph.node for sub in _subgraphs(node))


#: A model whose graph values declare more elements than this gets a first inference pass
#: without data propagation, to look for long 1-D values that only inference reveals (a
#: Reshape to [-1]); smaller ones cost at most ~0.4 s of propagation
DATA_PROP_CHECK_ELEMENTS = 1 << 20


def _value_infos(graph: onnx.GraphProto):
    """The graph's inputs (not initializers), outputs and value infos, and its subgraphs'."""
    constants = {t.name for t in graph.initializer}
    yield from (v for v in graph.input if v.name not in constants)
    yield from graph.output
    yield from graph.value_info
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from _value_infos(sub)


def _declared_sizes(graph: onnx.GraphProto) -> tuple[bool, int]:
    """Whether a value of ``graph`` (or of its subgraphs) is declared 1-D and longer than
    ``DATA_PROP_MAX_LENGTH``, and the most elements a value is declared to hold (of those with
    every dimension a number), in one pass over the value infos (protobuf's field reads are most
    of the cost: a pass over a detection model's 1,500 value infos takes ~2 ms)."""
    long_1d, most = False, 0
    for info in _value_infos(graph):
        if info.type.WhichOneof("value") != "tensor_type" or not info.type.tensor_type.HasField("shape"):
            continue
        dims = info.type.tensor_type.shape.dim
        elements = 1
        for d in dims:
            if not d.HasField("dim_value"):
                break
            elements *= d.dim_value
        else:
            most = max(most, elements)
            long_1d = long_1d or (len(dims) == 1 and elements > DATA_PROP_MAX_LENGTH)
    return long_1d, most


def _data_prop_is_bounded(model: onnx.ModelProto) -> bool:
    """Whether onnx's data propagation stays small on ``model``. It materialises every 1-D value
    it visits as a list of dimensions, also a non-constant one (Add of a float input declared
    [2^25] took 13 s; [2^31] ran out of memory), so long 1-D values, declared or inferred, and
    long 1-D constants turn it off."""
    if _long_1d_constant(model.graph):
        return False
    long_1d, most = _declared_sizes(model.graph)
    if long_1d:
        return False
    if most <= DATA_PROP_CHECK_ELEMENTS:
        return True
    try:
        plain = onnx.shape_inference.infer_shapes(model, data_prop=False)
    except Exception:  # the real pass below reports what is wrong
        return False
    return not _declared_sizes(plain.graph)[0]


#: onnx's message for an inferred element type that is not the declared one (a graph output
#: declared float that a node makes int64): a type error, which the non-strict retry misses
_TYPE_CLASH = "Inferred elem type differs from existing elem type"


def infer_shapes(model: onnx.ModelProto, data: bytes | None = None) -> onnx.ModelProto:
    """ONNX type and shape inference. A type error (e.g. Add of float and double) is an
    InvalidGraph naming the node; other inference failures keep the model as it was (``model``
    itself is returned). ``data``: the model's bytes, if the caller has them."""
    source = model if data is None else data
    data_prop = _data_prop_is_bounded(model)
    try:
        return onnx.shape_inference.infer_shapes(source, check_type=True, strict_mode=True, data_prop=data_prop)
    except onnx.shape_inference.InferenceError as exc:
        if _TYPE_CLASH in str(exc):  # a node's output type is not the one the graph declares
            raise InvalidGraphFail(f"model fails type inference: {exc}") from exc
        # Strict mode also fails on what is not a type error, e.g. inside the function body of
        # an op whose attribute takes its default (MeanVarianceNormalization without axes);
        # type errors still fail without it.
        try:
            inferred = onnx.shape_inference.infer_shapes(source, check_type=True, strict_mode=False,
                                                         data_prop=data_prop)
        except Exception:
            inferred = None
        if inferred is None:
            raise _refused("model fails type and shape inference", exc) from None
        logger.info("strict shape inference failed, kept the non-strict result: %s", exc)
        return inferred
    except Exception as exc:
        logger.info("shape inference failed, continuing without it: %s", exc)
        return model


#: Set in a loaded model's ``meta`` when onnx inferred its shapes and removing its Identity and
#: Dropout nodes cannot inform inference. The optimizer's own inference (after Constant lifting,
#: Identity and Dropout removal, unused-node removal) then has nothing to learn and is skipped:
#: lifting keeps the data inference saw (a Constant's value, now an initializer's), removing
#: unused nodes takes away nothing a kept node reads, and an Identity or Dropout passes its
#: input's type and shape on unchanged; what its removal can add is *data* the reader did not
#: see through it, and onnx has data only for constants (initializers, Constant outputs) and for
#: what its data propagation computes: shape arithmetic, held as one list of numbers (so of rank
#: 0 or 1), possibly cast to float. So an Identity or Dropout keeps the inference where its input
#: may hold such data (``_DataCarriers``: it traces back through data-propagating ops to a
#: constant or a Shape) and is a constant, a non-float or untyped value, or one not known to
#: have rank >= 2. (The optimizer pops the key.)
SHAPES_INFERRED = "ort_core.shapes_inferred_at_load"

#: initializers of the main graph bigger than this many bytes go to shape inference as typed
#: graph inputs without their data (the optimizer's inference does the same): onnx copies the
#: model it infers twice over (into C++ and back), and for the data of weights that was most of
#: a session's peak memory (the translit GRU decoder: 10 MB of 14 for 4.3 MB of weights).
#: Shape arithmetic reads small integer constants, which are kept.
INFERENCE_DATA_LIMIT = 1000


def _without_large_data(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[str, onnx.TensorProto]]]:
    """A copy of ``model`` whose main-graph initializers and Constant nodes with over
    ``INFERENCE_DATA_LIMIT`` bytes are typed graph inputs instead (initializers that are graph
    inputs already are simply left out), and those tensors by the name of the value they give;
    ``model`` itself, and none, where there are none. Exporters such as paddle2onnx keep the
    weights in Constant nodes (PP-OCR, PicoDet: 5-10 MB), which onnx otherwise copied into C++
    and back at each inference pass."""
    graph = model.graph
    large = [(t.name, t) for t in graph.initializer if _data_bytes(t) > INFERENCE_DATA_LIMIT]
    outputs = {v.name for v in graph.output}
    # by position: protobuf's Python objects for the nodes are made at each access (their ids
    # are not the nodes')
    constants = {k: node for k, node in enumerate(graph.node)
                 if node.op_type == "Constant" and _is_large_constant(node, outputs)}
    if not large and not constants:
        return model, []
    light = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _copy_field(light, field, value)
    large_names = {name for name, _ in large}
    for field, value in graph.ListFields():
        if field.name == "initializer":
            light.graph.initializer.extend(t for t in value if t.name not in large_names)
        elif field.name == "node" and constants:
            light.graph.node.extend(node for k, node in enumerate(value) if k not in constants)
        else:
            _copy_field(light.graph, field, value)
    large.extend((node.output[0], node.attribute[0].t) for node in constants.values())
    inputs = {v.name for v in graph.input}
    for name, tensor in large:
        if name not in inputs:
            light.graph.input.append(onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
    return light, large


#: the data types of Constant tensors ``_without_large_data`` may take out of inference (read
#: back into numpy arrays by ``_restore_initializers``)
_LIFTED_CONSTANT_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
})


def _is_large_constant(node: onnx.NodeProto, graph_outputs: set[str]) -> bool:
    """A standard Constant node whose one attribute is a ``value`` tensor of a plain type with
    over ``INFERENCE_DATA_LIMIT`` bytes in the proto, not giving a graph output."""
    if node.domain not in ("", "ai.onnx") or len(node.attribute) != 1 or len(node.output) != 1:
        return False
    attr = node.attribute[0]
    return (attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR and node.output[0] not in graph_outputs
            and attr.t.data_type in _LIFTED_CONSTANT_TYPES and _data_bytes(attr.t) > INFERENCE_DATA_LIMIT)


def _copy_field(target: onnx.ModelProto | onnx.GraphProto, field, value) -> None:
    """Copy one set field (from ``ListFields``): a repeated one, a message or a scalar."""
    if field.type == field.TYPE_MESSAGE and not hasattr(value, "extend"):
        getattr(target, field.name).CopyFrom(value)
    elif hasattr(value, "extend"):  # a repeated field's container
        getattr(target, field.name).extend(value)
    else:
        setattr(target, field.name, value)


def _data_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes of a tensor's data held in the proto (0 for external data)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return 0
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    return max(len(tensor.float_data) * 4, len(tensor.int32_data) * 4, len(tensor.int64_data) * 8,
               len(tensor.double_data) * 8, len(tensor.uint64_data) * 8, sum(len(v) for v in tensor.string_data))


def _restore_initializers(model: ir.Model, large: list[tuple[str, onnx.TensorProto]], inputs: set[str]) -> None:
    """The tensors ``_without_large_data`` left out, put back into the IR model: the stand-in
    graph inputs become initializers (onnx-ir reads their data from the original protos when
    asked, as for any initializer). A large Constant node's value becomes an initializer named
    as its output, as onnxruntime makes every Constant when it loads a graph."""
    graph = model.graph
    by_name = {v.name: v for v in graph.inputs}
    for name, proto in large:
        value = by_name[name]
        tensor = ir.serde.deserialize_tensor(proto)
        if tensor.name != name:  # a Constant's tensor: read into an array under the value's name
            tensor = ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=name)
        value.const_value = tensor
        if name not in inputs:
            graph.inputs.remove(value)
        graph.initializers.add(value)


def _defined(graph: onnx.GraphProto) -> set[str]:
    """The names a graph's nodes may read before any of its nodes runs: inputs, initializers."""
    return ({v.name for v in graph.input} | {t.name for t in graph.initializer}
            | {t.values.name for t in graph.sparse_initializer} | {""})


def _free_names(graph: onnx.GraphProto) -> set[str]:
    """The outer-scope names a subgraph (and its own subgraphs) reads."""
    made = _defined(graph) | {o for node in graph.node for o in node.output}
    free: set[str] = set()
    for node in graph.node:
        free.update(i for i in node.input if i not in made)
        for sub in _subgraphs(node):
            free.update(n for n in _free_names(sub) if n not in made)
    return free


def _sort_nodes(graph: onnx.GraphProto) -> bool:
    """Order ``graph``'s nodes (and its subgraphs') so that each comes after the nodes whose
    outputs it reads, keeping the given order where it allows (onnxruntime runs graphs whose
    nodes are listed out of order; onnx's checker refuses them). Whether anything moved; a
    cycle is left as it is, for the checker to name."""
    moved = False
    for node in graph.node:
        for sub in _subgraphs(node):
            moved = _sort_nodes(sub) or moved
    producer = {o: k for k, node in enumerate(graph.node) for o in node.output if o}
    reads = [set(node.input) | set().union(*(_free_names(sub) for sub in _subgraphs(node))) for node in graph.node]
    after = [{producer[n] for n in names if n in producer and producer[n] != k} for k, names in enumerate(reads)]
    if all(all(p < k for p in deps) for k, deps in enumerate(after)):
        return moved
    waiting = [len(deps) for deps in after]
    readers: dict[int, list[int]] = {}
    for k, deps in enumerate(after):
        for p in deps:
            readers.setdefault(p, []).append(k)
    ready = [k for k, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for r in readers.get(k, ()):
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, r)
    if len(order) != len(graph.node):  # a cycle
        return moved
    nodes = [graph.node[k] for k in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    return True


def load_model(source: ModelSource, external: Mapping[str, np.ndarray] | None = None,
               files: Mapping[str, bytes] | None = None) -> ir.Model:
    """Load, check, inline model-local functions, infer shapes, and convert to onnx-ir;
    ``external``/``files``: external data given in memory (see ``_fill_external_data``)."""
    proto, data = _read(source, external, files)
    # a forest's node lists out of the model for the checker and shape inference, which
    # copy the model into C++ and back (a 194 MB LightGBM forest: 6.4 s of its 16 s creation)
    forest_lists = _take_forest_lists(proto.graph) if not proto.functions else {}
    try:
        return _load_checked(proto, None if forest_lists else data, forest_lists, proto is source)
    finally:
        if forest_lists and proto is source:  # the caller's proto: whole again
            _give_back_forest_lists(proto.graph, forest_lists)


def _load_checked(proto: onnx.ModelProto, data: bytes | None,
                  forest_lists: Mapping[tuple[str, str], tuple[int, np.ndarray]], callers: bool) -> ir.Model:
    """``load_model`` from the proto read (``data``: its bytes, where they are still the model;
    ``callers``: whether it is the caller's ModelProto), the ``forest_lists`` taken out of it
    (given to the IR model)."""
    try:
        check_proto(proto if data is None else data)
    except InvalidGraph as exc:
        if _UNSORTED not in str(exc):
            raise
        # nodes listed out of order (the checker's verdict: a sorted model pays nothing here)
        if callers:  # the caller's: sorted in a copy
            copy = onnx.ModelProto()
            copy.CopyFrom(proto)
            proto = copy
        if not _sort_nodes(proto.graph):  # a cycle: the checker's message stands
            raise
        data = None  # the bytes are not the model any more
        check_proto(proto)
    _check_opsets(proto)
    _check_dtype_attributes(proto.graph)
    if proto.functions:
        proto, data = onnx.inliner.inline_local_functions(proto), None
    _check_tensor_sizes(proto)
    light, large = _without_large_data(proto)
    inferred = infer_shapes(light, data if light is proto else None)
    map_types = _map_type_strings(inferred.graph)
    _untype_maps(inferred.graph)
    long_lists = _take_long_lists(inferred.graph)
    # inference's own copy: its plain value types are read apart from onnx-ir (see _take_value_types)
    value_types = _take_value_types(inferred.graph) if inferred is not proto else {}
    try:
        model = ir.serde.deserialize_model(inferred)
        _set_value_types(model.graph, value_types)
        _restore_initializers(model, large, {v.name for v in proto.graph.input})
    except Exception as exc:
        raise InvalidGraph(f"model could not be read into the IR: {type(exc).__name__}: {exc}") from exc
    finally:
        if inferred is proto:  # (the caller's proto where inference gave it back: refilled)
            _give_back_long_lists(inferred.graph, long_lists)
    _set_long_lists(model.graph, {**long_lists, **_indexed(inferred.graph, forest_lists)})
    if map_types:
        model.graph.meta[MAP_TYPES] = map_types
    if model.ir_version < 4:
        _initializers_as_constants(model)
    if next(itertools.islice(graphs(model.graph), 1, None), None) is None:
        model.graph.meta[NO_SUBGRAPHS] = True
    _check_outputs_produced(model.graph)
    _check_if_branches(model.graph)
    if inferred is not light and not _removal_may_inform(model.graph):
        model.meta[SHAPES_INFERRED] = True
    _detach_from_protos(model)
    return model


def _take_value_types(graph: onnx.GraphProto) -> dict[str, tuple[int, list[int | str | None] | None]]:
    """The main graph's plain ``value_info`` entries (a tensor type and shape, and nothing else:
    no denotation, doc string or metadata) by value name, as (element type, dims or None),
    removed from ``graph`` for onnx-ir's deserializer, which reads a shape through five
    functions a dimension (a third of its time on a 1,100-node model whose inferred shapes
    are all such entries). ``_set_value_types`` gives them to the IR as onnx-ir would."""
    taken: dict[str, tuple[int, list[int | str | None] | None]] = {}
    kept: list[onnx.ValueInfoProto] = []
    for info in graph.value_info:
        entry = _plain_value_type(info)
        if entry is None:
            copy = onnx.ValueInfoProto()
            copy.CopyFrom(info)
            kept.append(copy)
        else:
            taken[info.name] = entry
    if taken:
        del graph.value_info[:]
        graph.value_info.extend(kept)
    return taken


def _plain_value_type(info: onnx.ValueInfoProto) -> tuple[int, list[int | str | None] | None] | None:
    if info.doc_string or info.metadata_props or not info.name:
        return None
    t = info.type
    if t.WhichOneof("value") != "tensor_type" or t.denotation:
        return None
    tensor = t.tensor_type
    if not tensor.HasField("elem_type"):
        return None
    if not tensor.HasField("shape"):
        return tensor.elem_type, None
    dims: list[int | str | None] = []
    for d in tensor.shape.dim:
        if d.denotation:
            return None
        kind = d.WhichOneof("value")
        dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
    return tensor.elem_type, dims


def _set_value_types(graph: ir.Graph, taken: Mapping[str, tuple[int, list[int | str | None] | None]]) -> None:
    """The types ``_take_value_types`` took, set where onnx-ir sets a ``value_info`` entry's: on
    node outputs and initializers that are not graph inputs, not on graph outputs (their own
    entries, read last, decide) nor on graph inputs."""
    if not taken:
        return
    values = [v for node in graph for v in node.outputs]
    values.extend(graph.initializers.values())
    for value in values:
        entry = taken.get(value.name)
        if entry is None or value.is_graph_input() or value.is_graph_output():
            continue
        elem_type, dims = entry
        value.shape = None if dims is None else ir.Shape(dims, frozen=True)
        value.type = ir.TensorType(ir.DataType(elem_type))


def _initializers_as_constants(model: ir.Model) -> None:
    """Below IR version 4 every initializer is also listed among its graph's inputs, and
    onnxruntime holds them constant there (feeding one is an invalid input name); as graph
    inputs they were overridable here, so nothing folded or fused with them (a caffe2 ShuffleNet
    from the onnx wheel built its weights with ConstantOfShape at every run: 3.2x onnxruntime's
    time). They leave the inputs, and the model is IR version 4, where that is what it says."""
    for graph in graphs(model.graph):
        for value in [v for v in graph.inputs if v.is_initializer()]:
            graph.inputs.remove(value)
    model.ir_version = 4


#: INTS / FLOATS attributes longer than this are read into the IR apart from onnx-ir's
#: deserializer (``_take_long_lists``), which converts them one element at a time
LONG_LIST = 1024


def _take_long_lists(graph: onnx.GraphProto) -> dict[tuple[int, str], tuple[int, np.ndarray]]:
    """The main graph's INTS / FLOATS attributes of over ``LONG_LIST`` values, by (node index,
    name), as (type, read-only int64 / float32 array), emptied in ``graph`` for onnx-ir's
    deserializer: it converts such lists value by value (``int(v)`` for each), 2.6 ms for a
    forest's 29K leaf ids, and a tuple of the protobuf container still took 8.5 ms for a
    random forest's 12 lists of 19-29K values, where numpy reads them in 0.4 (the kernels
    reading them want arrays: ``NodeView.array``)."""
    taken: dict[tuple[int, str], tuple[int, np.ndarray]] = {}
    for k, node in enumerate(graph.node):
        for attr in node.attribute:
            values = _taken_list(attr, strings=False)
            if values is not None:
                taken[k, attr.name] = (attr.type, values)
    return taken


def _taken_list(attr: onnx.AttributeProto, strings: bool) -> np.ndarray | None:
    """An INTS / FLOATS (and with ``strings`` STRINGS) attribute of over ``LONG_LIST`` values as
    a read-only int64 / float32 (/ numpy str) array, emptied in the proto; else None."""
    if attr.type == onnx.AttributeProto.INTS and len(attr.ints) > LONG_LIST:
        values = np.array(attr.ints, dtype=np.int64)
        del attr.ints[:]
    elif attr.type == onnx.AttributeProto.FLOATS and len(attr.floats) > LONG_LIST:
        values = np.array(attr.floats, dtype=np.float32)
        del attr.floats[:]
    elif strings and attr.type == onnx.AttributeProto.STRINGS and len(attr.strings) > LONG_LIST:
        # nodes_modes: numpy's str (what onnx-ir's serializer encodes), decoded in C
        values = np.array(attr.strings, dtype=np.bytes_).astype(np.str_)
        del attr.strings[:]
    else:
        return None
    values.flags.writeable = False
    return values


#: ops whose long node lists the checker and shape inference do without (types only)
_FORESTS = frozenset({"TreeEnsembleClassifier", "TreeEnsembleRegressor"})


def _take_forest_lists(graph: onnx.GraphProto) -> dict[tuple[str, str], tuple[int, np.ndarray]]:
    """``_take_long_lists`` for the main graph's TreeEnsembleClassifier/Regressor nodes (not
    their class labels, which type inference reads), their STRINGS lists too (nodes_modes, as a
    numpy array of str: 4.8M Python strings took 1 s to decode one by one), keyed by (the
    node's first output, the attribute's name): the checker may sort the nodes."""
    taken: dict[tuple[str, str], tuple[int, np.ndarray]] = {}
    for node in graph.node:
        if node.domain != "ai.onnx.ml" or node.op_type not in _FORESTS or not node.output or not node.output[0]:
            continue
        for attr in node.attribute:
            values = None if attr.name.startswith("classlabels") else _taken_list(attr, strings=True)
            if values is not None:
                taken[node.output[0], attr.name] = (attr.type, values)
    return taken


def _give_back_forest_lists(graph: onnx.GraphProto, taken: Mapping[tuple[str, str], tuple[int, np.ndarray]]) -> None:
    """The lists ``_take_forest_lists`` emptied, back in ``graph``."""
    _give_back_long_lists(graph, _indexed(graph, taken))


def _indexed(graph: onnx.GraphProto, taken: Mapping[tuple[str, str], tuple[int, np.ndarray]]
             ) -> dict[tuple[int, str], tuple[int, np.ndarray]]:
    """``taken`` keyed by node index in ``graph`` instead of the node's first output."""
    if not taken:  # (every load asks: no pass over the nodes for a model without forests)
        return {}
    index = {node.output[0]: k for k, node in enumerate(graph.node) if node.output}
    return {(index[output], name): value for (output, name), value in taken.items()}


def _give_back_long_lists(graph: onnx.GraphProto, taken: Mapping[tuple[int, str], tuple[int, np.ndarray]]) -> None:
    """The lists ``_take_long_lists`` emptied, back in ``graph``."""
    for (k, name), (kind, values) in taken.items():
        attr = next(a for a in graph.node[k].attribute if a.name == name)
        if kind == onnx.AttributeProto.STRINGS:
            attr.strings.extend(s.encode() for s in values.tolist())
        else:
            (attr.ints if kind == onnx.AttributeProto.INTS else attr.floats).extend(values.tolist())


def _set_long_lists(graph: ir.Graph, taken: Mapping[tuple[int, str], tuple[int, np.ndarray]]) -> None:
    """The taken lists as the attributes' values in the IR graph (nodes in the proto's order):
    read-only arrays where onnx-ir would hold tuples of Python ints and floats (its serializer
    writes either), set on the attribute made from the emptied list: its constructor would
    convert them to a tuple value by value."""
    if not taken:
        return
    nodes = list(graph)
    for (k, name), (_, values) in taken.items():
        attr = nodes[k].attributes[name]
        attr._value = values  # noqa: SLF001  (see the docstring)


#: data types whose onnx-ir proto tensors become numpy-backed tensors at load (numpy or
#: ml_dtypes arrays that ``ir.Tensor`` holds as they are), with the numpy type of their raw
#: bytes where that is the array's own (bfloat16's is ml_dtypes': onnx-ir's ``numpy()`` reads
#: those); the 4-bit ones, packed two a byte, stay proto tensors
_DETACHED_TYPES: dict[ir.DataType, np.dtype | None] = {
    ir.DataType.FLOAT: np.dtype("<f4"), ir.DataType.DOUBLE: np.dtype("<f8"), ir.DataType.FLOAT16: np.dtype("<f2"),
    ir.DataType.BFLOAT16: None,
    ir.DataType.INT8: np.dtype("i1"), ir.DataType.INT16: np.dtype("<i2"), ir.DataType.INT32: np.dtype("<i4"),
    ir.DataType.INT64: np.dtype("<i8"), ir.DataType.UINT8: np.dtype("u1"), ir.DataType.UINT16: np.dtype("<u2"),
    ir.DataType.UINT32: np.dtype("<u4"), ir.DataType.UINT64: np.dtype("<u8"), ir.DataType.BOOL: np.dtype("?"),
    ir.DataType.COMPLEX64: np.dtype("<c8"), ir.DataType.COMPLEX128: np.dtype("<c16"),
}


#: the data types read from a typed field of TensorProto without onnx-ir's ``numpy()``:
#: (field, numpy type of its values); the array is then converted to the tensor's type
_TYPED_FIELD_READS: dict[ir.DataType, tuple[str, type]] = {
    ir.DataType.FLOAT: ("float_data", np.float32), ir.DataType.DOUBLE: ("double_data", np.float64),
    ir.DataType.INT64: ("int64_data", np.int64), ir.DataType.INT32: ("int32_data", np.int32),
    ir.DataType.INT16: ("int32_data", np.int32), ir.DataType.INT8: ("int32_data", np.int32),
    ir.DataType.UINT16: ("int32_data", np.int32), ir.DataType.UINT8: ("int32_data", np.int32),
}


def _detached(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    if not isinstance(tensor, ir.serde.TensorProtoTensor):
        return tensor
    dtype = tensor.dtype
    if dtype not in _DETACHED_TYPES:
        return tensor
    proto = tensor.raw
    raw_type = _DETACHED_TYPES[dtype]
    # what onnx-ir's ``numpy()`` gives, without its dispatch on the type where the bytes or
    # values are read as they are (half of a weight's detaching: 0.7K weights took 16 ms of a
    # QDQ OCR classifier's load)
    if proto.data_location == onnx.TensorProto.EXTERNAL or raw_type is None:
        array = tensor.numpy()
    elif proto.HasField("raw_data"):
        array = np.frombuffer(proto.raw_data, dtype=raw_type).reshape(proto.dims)
    elif dtype in _TYPED_FIELD_READS:
        field, field_type = _TYPED_FIELD_READS[dtype]
        array = np.array(getattr(proto, field), dtype=field_type).astype(raw_type, copy=False).reshape(proto.dims)
    else:
        array = tensor.numpy()
    return ir.Tensor(array, dtype=dtype, name=tensor.name, doc_string=tensor.doc_string,
                     metadata_props=dict(tensor.metadata_props) or None)


def _detach_from_protos(model: ir.Model) -> None:
    """Initializers and Constant values as numpy-backed tensors, so that no part of the parsed
    protos stays referenced once loading ends. onnx-ir's proto tensors hold their TensorProto,
    which holds the whole parsed model (protobuf's arena is one for the message tree), and each
    ``numpy()`` of one copies its bytes: the model's weights were held twice for the session's
    life, once in the protos and once in the arrays kernels read (ocr-ddddocr-lstm: 51 MB
    each). The one copy is made here instead, and the arrays the views give are these."""
    for graph in graphs(model.graph):
        for value in graph.initializers.values():
            if value.const_value is not None:
                value.const_value = _detached(value.const_value)
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR:
                    detached = _detached(attr.value)
                    if detached is not attr.value:
                        node.attributes[attr.name] = ir.AttrTensor(attr.name, detached, doc_string=attr.doc_string)
                elif attr.type == ir.AttributeType.TENSORS:
                    tensors = [_detached(t) for t in attr.value]
                    if any(a is not b for a, b in zip(tensors, attr.value)):
                        node.attributes[attr.name] = ir.AttrTensors(attr.name, tensors, doc_string=attr.doc_string)


#: TensorProto's typed data fields, by the data types stored in them
_TYPED_FIELDS = {
    "float_data": (onnx.TensorProto.FLOAT, onnx.TensorProto.COMPLEX64),
    "int32_data": (onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8, onnx.TensorProto.UINT16,
                   onnx.TensorProto.UINT8, onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16),
    "int64_data": (onnx.TensorProto.INT64,),
    "double_data": (onnx.TensorProto.DOUBLE, onnx.TensorProto.COMPLEX128),
    "uint64_data": (onnx.TensorProto.UINT32, onnx.TensorProto.UINT64),
    "string_data": (onnx.TensorProto.STRING,),
}


def _check_tensor_sizes(model: onnx.ModelProto) -> None:
    """Every tensor's data (initializers, Constant values) holds as many elements as its shape
    says, as onnxruntime checks at load; the mismatch otherwise surfaced as numpy's 'cannot
    reshape' in whatever read the tensor first."""
    for tensor in _tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or any(d < 0 for d in tensor.dims):
            continue
        elements = math.prod(tensor.dims)
        given = expected = None
        if tensor.HasField("raw_data"):
            try:
                itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
            except Exception:  # an element type numpy has no dtype for: onnx decides later
                continue
            if tensor.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
                expected, given = (elements + 1) // 2, len(tensor.raw_data)
            elif tensor.data_type != onnx.TensorProto.STRING:
                expected, given = elements * itemsize, len(tensor.raw_data)
            unit = "bytes"
        else:
            for field, types in _TYPED_FIELDS.items():
                if tensor.data_type in types:
                    count = len(getattr(tensor, field))
                    per = 2 if tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
                    if count or elements:
                        expected, given = elements * per, count
                    break
            unit = "values"
        if expected is not None and given != expected:
            raise InvalidGraph(
                f"tensor {tensor.name!r}: its shape {list(tensor.dims)} needs {expected} {unit} of data, "
                f"it holds {given}"
            )


def _check_opsets(model: onnx.ModelProto) -> None:
    """The standard domain's opset is one this onnx knows (onnxruntime refuses newer ones: the
    ops' semantics there are not known)."""
    newest = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > newest:
            raise InvalidGraphFail(
                f"model imports opset {opset.version} of the standard domain; the newest this runtime knows "
                f"is {newest} (onnx {onnx.__version__})"
            )


#: (op, attribute) pairs of the standard domain whose value is a TensorProto data type; 0
#: (UNDEFINED) is allowed only where the op gives it a meaning
_DTYPE_ATTRIBUTES = {("Cast", "to"): False, ("EyeLike", "dtype"): False, ("RandomNormal", "dtype"): False,
                     ("RandomUniform", "dtype"): False, ("RandomNormalLike", "dtype"): False,
                     ("RandomUniformLike", "dtype"): False, ("Multinomial", "dtype"): False,
                     ("Bernoulli", "dtype"): False, ("QuantizeLinear", "output_dtype"): True}


def _check_dtype_attributes(graph: onnx.GraphProto) -> None:
    """Data-type attributes name a data type onnx defines (a Cast to 0 had failed in the CPU
    kernel as a bare KeyError)."""
    valid = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for node in graph.node:
        for sub in _subgraphs(node):
            _check_dtype_attributes(sub)
        if node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            zero_allowed = _DTYPE_ATTRIBUTES.get((node.op_type, attr.name))
            # (Cast-1's `to` is a type name, a string: not checked here)
            if zero_allowed is None or attr.type != onnx.AttributeProto.INT:
                continue
            if attr.i in valid or (zero_allowed and attr.i == 0):
                continue
            names = ", ".join(f"{onnx.TensorProto.DataType.Name(v)} ({v})" for v in sorted(valid))
            raise InvalidGraph(f"node {node.name!r} (op {node.op_type}): attribute {attr.name!r} is {attr.i}, "
                               f"not a data type; valid: {names}")


def _check_if_branches(graph: ir.Graph) -> None:
    """Each If's branches have as many outputs as the node, with the same element types where
    both are known (onnxruntime checks it at load; else a run fails, or not, by the branch)."""
    for g in graphs(graph):
        for node in g:
            if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
                continue
            branches = {k: a.value for k, a in node.attributes.items() if k in ("then_branch", "else_branch")}
            if len(branches) != 2:
                continue
            counts = {k: len(b.outputs) for k, b in branches.items()}
            if len(set(counts.values())) != 1 or counts["then_branch"] != len(node.outputs):
                raise InvalidGraph(
                    f"If node {node.name!r}: then_branch has {counts['then_branch']} output(s), else_branch "
                    f"{counts['else_branch']}, the node {len(node.outputs)}"
                )
            for k, (a, b) in enumerate(zip(branches["then_branch"].outputs, branches["else_branch"].outputs)):
                if a.type is not None and b.type is not None and a.type != b.type:
                    raise InvalidGraph(
                        f"If node {node.name!r}: output {k} is {a.type} in then_branch but {b.type} in else_branch"
                    )


def _check_outputs_produced(graph: ir.Graph) -> None:
    """Every graph output (of every graph) is a graph input, an initializer or a node's output."""
    for g in graphs(graph):
        for out in g.outputs:
            if out.producer() is None and not out.is_graph_input() and not out.is_initializer():
                where = f"graph {g.name!r}" if g is not graph else "the main graph"
                raise InvalidGraphFail(f"output {out.name!r} of {where} is produced by no node")


_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def _removal_may_inform(graph: ir.Graph) -> bool:
    """Whether removing an Identity or Dropout of ``graph`` (or of its subgraphs) could show
    shape inference data it did not see (see ``SHAPES_INFERRED``)."""
    carries = _DataCarriers(graph)
    for g in graphs(graph):
        for node in g:
            if node.op_type not in ("Identity", "Dropout") or not node.inputs:
                continue
            value = node.inputs[0]
            if value is None:
                return True
            if not carries(value):
                continue  # no data to pass on
            if not isinstance(value.type, ir.TensorType) or value.dtype not in _FLOATS:
                return True
            if value.shape is None or len(value.shape) < 2 or _is_constant(value):
                return True
    return False


#: Set in the main graph's ``meta`` at load when no node holds a subgraph (a GRAPH or GRAPHS
#: attribute). Passes move and copy subgraphs but never make one, so ``graphs`` then has nothing
#: to find in the nodes' attributes and skips that walk (0.3 ms on a 1,300-node model, made once
#: per pass: 17 ms of its session creation).
NO_SUBGRAPHS = "ort_core.no_subgraphs"


def graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """``graph`` and every subgraph nested in its nodes' attributes, outermost first."""
    yield graph
    if graph.meta.get(NO_SUBGRAPHS):
        return
    for node in graph:
        # the attributes' plain dict (a UserDict's ``data``): the Mapping views over the
        # UserDict cost more than the rest of this walk
        attrs = node.attributes.data
        if not attrs:
            continue
        for attr in attrs.values():
            if attr.type == _GRAPH:
                yield from graphs(attr.value)
            elif attr.type == _GRAPHS:
                for sub in attr.value:
                    yield from graphs(sub)


_GRAPH, _GRAPHS = ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS


def _is_constant(value: ir.Value) -> bool:
    producer = value.producer()
    return value.const_value is not None or value.is_initializer() or (producer is not None and producer.op_type == "Constant")


#: data-propagating ops whose output data is computed from their first input's
_DATA_FROM_FIRST = frozenset({"Cast", "Gather", "Slice", "Squeeze", "Unsqueeze"})


class _DataCarriers:
    """Whether onnx's shape inference may hold *data* for a value (``data_prop``): a constant;
    the output of Shape or Size; the output of another op with a data propagation function
    (Gather, Concat, Cast, Add, ...) whose data input may (the first for ``_DATA_FROM_FIRST``,
    any for the others). A main-graph input that is not an
    initializer, and the output of any other op, hold none. A control-flow body's own inputs are
    taken to (what onnx passes into a body is not looked into)."""

    def __init__(self, main: ir.Graph):
        self.opsets = main.opset_imports
        self.main_inputs = frozenset(main.inputs)
        self.known: dict[ir.Value, bool] = {}

    def __call__(self, value: ir.Value) -> bool:
        # depth first without recursion: chains of Add or Concat can be thousands of nodes long
        stack = [value]
        while stack:
            v = stack[-1]
            if v in self.known:
                stack.pop()
                continue
            direct = self._direct(v)
            if direct is not None:
                self.known[v] = direct
                stack.pop()
                continue
            producer = v.producer()
            # these compute data only from their first input's (the rest are axes or indices)
            inputs = producer.inputs[:1] if producer.op_type in _DATA_FROM_FIRST else producer.inputs
            inputs = [i for i in inputs if i is not None]
            pending = [i for i in inputs if i not in self.known]
            if pending:
                stack.extend(pending)
                continue
            self.known[v] = any(self.known[i] for i in inputs)
            stack.pop()
        return self.known[value]

    def _direct(self, value: ir.Value) -> bool | None:
        """The answer where the value's producer alone gives it, else None."""
        if _is_constant(value):
            return True
        producer = value.producer()
        if producer is None:
            return value not in self.main_inputs
        if producer.op_type in ("Shape", "Size") and producer.domain in ("", "ai.onnx"):
            return True
        domain = "" if producer.domain == "ai.onnx" else producer.domain
        if not _has_data_propagation(producer.op_type, domain, self.opsets.get(domain, self.opsets.get("", 1))):
            return False
        return None


@functools.lru_cache(maxsize=1024)
def _has_data_propagation(op_type: str, domain: str, opset: int) -> bool:
    try:
        return bool(onnx.defs.get_schema(op_type, opset, domain=domain).has_data_propagation_function)
    except Exception:  # an op onnx does not know: it computes no data for it
        return False


def _has_map(t: onnx.TypeProto) -> bool:
    kind = t.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return _has_map(t.sequence_type.elem_type)
    if kind == "optional_type":
        return _has_map(t.optional_type.elem_type)
    return False


#: Set in the main graph's ``meta`` at load: the type strings (onnxruntime's spelling, e.g.
#: ``seq(map(int64,tensor(float)))``) of its inputs and outputs of map types, by name, which
#: the IR keeps untyped (``_untype_maps``): what the session's NodeArgs report for them.
MAP_TYPES = "ort_core.map_types"


def _map_type_strings(graph: onnx.GraphProto) -> dict[str, str]:
    """``MAP_TYPES``' entries of ``graph``: its inputs and outputs whose types hold a map."""
    return {info.name: _type_string(info.type) for info in (*graph.input, *graph.output) if _has_map(info.type)}


def _type_string(t: onnx.TypeProto) -> str:
    """onnxruntime's spelling of a type proto: tensor(float), seq(...), map(int64,tensor(float))."""
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({onnx.TensorProto.DataType.Name(t.tensor_type.elem_type).lower()})"
    if kind == "sequence_type":
        return f"seq({_type_string(t.sequence_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(t.map_type.key_type).lower()
        return f"map({key},{_type_string(t.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({_type_string(t.optional_type.elem_type)})"
    return "unknown"


def _untype_maps(graph: onnx.GraphProto) -> None:
    """onnx-ir cannot represent map types (ZipMap's and DictVectorizer's values): such values
    keep no type in the IR, and the runtime passes them as Python dicts (lists of dicts)."""
    for info in (*graph.input, *graph.output, *graph.value_info):
        if _has_map(info.type):
            info.ClearField("type")
    for node in graph.node:
        for sub in _subgraphs(node):
            _untype_maps(sub)
