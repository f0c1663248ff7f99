"""Compiled-model caches: onnxruntime's EPContext models, for every compiling provider.

A compiling provider spends most of session creation compiling its fused groups. With the
session config entry ``ep.context_enable=1`` core writes, once the kernels are built, a
*context model*: the session's graph in which every fused group whose kernel can export its
compiled form (``Kernel.export_context``) is one ``com.microsoft.EPContext`` node, in
onnxruntime's schema. Loading that model gives the providers EPContext nodes instead of the
groups; a provider claims those whose ``source`` attribute is its name and rebuilds the kernel
from the blob (``read_context``) without compiling. Groups without ``export_context`` stay as
their original nodes, so a context model always runs.

Session config keys (onnxruntime's names):

* ``ep.context_enable``: "1" writes the context model at session creation.
* ``ep.context_file_path``: where; default ``<model stem>_ctx.onnx`` beside the model (a model
  given as bytes or a ModelProto needs the key).
* ``ep.context_embed_mode``: "1" (default) puts each blob in its node's ``ep_cache_context``
  attribute; "0" writes it to ``<ctx stem>_<provider>_<k>.bin`` beside the context model and
  puts that file name in the attribute.

``ModelCompiler`` (onnxruntime's name) is the explicit form: it compiles a model for the
providers of a ``SessionOptions`` and writes the context model to a file, returns its bytes or
gives them to a write function; the side files go beside the model, to the directory of
``set_ep_context_binary_information``, or to a ``set_ep_context_data_write_func`` callback, and
``get_initializer_location_func`` places initializers in the user's own external files.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir
from onnx import external_data_helper

from ._enum import OrtFlags
from .errors import EPFail, Fail, InvalidArgument, InvalidGraph
from .types import EpContextBlob, Kernel, KernelRequest

if TYPE_CHECKING:
    from .graph.view import GraphView, NodeView
    from .partition import Assignment
    from .session import SessionOptions

logger = logging.getLogger("ort_core")

CONTEXT_ENABLE = "ep.context_enable"
CONTEXT_FILE_PATH = "ep.context_file_path"
CONTEXT_EMBED_MODE = "ep.context_embed_mode"
CONTEXT_OP = "EPContext"
CONTEXT_DOMAIN = "com.microsoft"


class _BinaryAttributeFilter(logging.Filter):
    """onnx-ir warns that a string attribute holding bytes breaks the ONNX spec; onnxruntime's
    EPContext schema puts binary blobs in ``ep_cache_context`` on purpose, so that warning is
    noise for every context model loaded."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'ep_cache_context'" not in record.getMessage()


for _name in ("onnx_ir", "onnx_ir.serde", "onnx_ir._core"):
    logging.getLogger(_name).addFilter(_BinaryAttributeFilter())


def is_context_node(node: NodeView, provider: str | None = None) -> bool:
    """True for a ``com.microsoft.EPContext`` node (made by ``provider`` when it is given)."""
    if node.op_type != CONTEXT_OP or node.domain != CONTEXT_DOMAIN:
        return False
    return provider is None or _text(node.attr("source", b"")) == provider


class OrtEpContextDataBuffer:
    """Where a ``set_ep_context_data_read_func`` callback puts a context file's bytes:
    ``allocate(size)`` (at most ``max_size``), then ``write(data, offset)``."""

    def __init__(self, max_size: int):
        self.max_size = int(max_size)
        self._data: bytearray | None = None

    @property
    def is_allocated(self) -> bool:
        return self._data is not None

    @property
    def size(self) -> int:
        return 0 if self._data is None else len(self._data)

    def allocate(self, size: int) -> None:
        if self._data is not None:
            raise InvalidArgument("OrtEpContextDataBuffer.allocate: already allocated")
        if int(size) < 0 or (self.max_size > 0 and int(size) > self.max_size):
            raise InvalidArgument(f"OrtEpContextDataBuffer.allocate: {size} bytes exceeds max_size {self.max_size}")
        self._data = bytearray(int(size))

    def write(self, data: Any, offset: int = 0) -> None:
        chunk = memoryview(data).cast("B")
        if self._data is None:
            raise InvalidArgument("OrtEpContextDataBuffer.write: allocate first")
        if int(offset) < 0 or int(offset) + len(chunk) > len(self._data):
            raise InvalidArgument(f"OrtEpContextDataBuffer.write: {len(chunk)} bytes at {offset} exceed {len(self._data)}")
        self._data[int(offset):int(offset) + len(chunk)] = chunk


class OrtEpContextData:
    """One compiled blob as a ``ModelCompiler.set_ep_context_data_write_func`` callback sees it
    (onnxruntime's name): ``size`` bytes, copied out with ``read(offset, length)``. The view is
    valid during the callback only."""

    def __init__(self, data: bytes):
        self._data: memoryview | None = memoryview(data)

    @property
    def size(self) -> int:
        return 0 if self._data is None else len(self._data)

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes (all that follow where None) from ``offset``."""
        if self._data is None:
            raise InvalidArgument("OrtEpContextData.read: the data is valid only during its write callback")
        offset = int(offset)
        length = len(self._data) - offset if length is None else int(length)
        if offset < 0 or length < 0 or offset + length > len(self._data):
            raise InvalidArgument(f"OrtEpContextData.read: {length} bytes at offset {offset} are outside its "
                                  f"{len(self._data)} bytes")
        return bytes(self._data[offset:offset + length])

    def _close(self) -> None:
        self._data = None


class OrtExternalInitializerInfo:
    """Where an initializer's data lies in an external file (onnxruntime's name): ``filepath``
    (relative to the model's folder), ``file_offset`` and ``byte_size`` in bytes. A
    ``ModelCompiler``'s ``get_initializer_location_func`` returns one to keep an initializer
    out of the compiled model."""

    def __init__(self, filepath: str | os.PathLike, file_offset: int, byte_size: int):
        if int(file_offset) < 0 or int(byte_size) < 0:
            raise InvalidArgument(f"OrtExternalInitializerInfo: file_offset {file_offset} and byte_size {byte_size} "
                                  "must not be negative")
        self.filepath = os.fspath(filepath)
        self.file_offset = int(file_offset)
        self.byte_size = int(byte_size)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, OrtExternalInitializerInfo)
                and (self.filepath, self.file_offset, self.byte_size) == (other.filepath, other.file_offset, other.byte_size))

    def __hash__(self) -> int:
        return hash((self.filepath, self.file_offset, self.byte_size))

    def __repr__(self) -> str:
        return f"OrtExternalInitializerInfo({self.filepath!r}, {self.file_offset}, {self.byte_size})"


#: (read_func, max_size) of the session being made (``set_ep_context_data_read_func``)
READ_FUNC: contextvars.ContextVar[tuple[Any, int] | None] = contextvars.ContextVar("ep_context_read", default=None)


def read_context(request: KernelRequest) -> bytes:
    """The compiled blob of the EPContext node ``request`` is for.

    Embedded (``embed_mode=1``) it is the ``ep_cache_context`` attribute; otherwise that
    attribute names a file relative to the model's folder, which must stay inside it. Raises
    ``InvalidGraph`` for a node that is not a well-formed EPContext node, a path outside the
    model's folder, a missing file or a model given without a path, and ``Fail`` for a file
    that cannot be read; each names the node and the file."""
    node = request.node
    if not is_context_node(node):
        raise InvalidGraph(f"node {node.name!r} ({node.qualified_op}) is not a {CONTEXT_DOMAIN}.{CONTEXT_OP} node")
    data = node.attr("ep_cache_context")
    if data is None:
        raise InvalidGraph(f"EPContext node {node.name!r} has no ep_cache_context attribute")
    raw = data if isinstance(data, bytes) else str(data).encode("utf-8")
    embed = node.attr("embed_mode", 1)
    if embed == 1:
        return raw
    if embed != 0:
        raise InvalidGraph(f"EPContext node {node.name!r}: embed_mode {embed} is not 0 or 1")
    name = raw.decode("utf-8", errors="replace")
    reader = READ_FUNC.get()
    if reader is not None:  # SessionOptions.set_ep_context_data_read_func
        buffer = OrtEpContextDataBuffer(reader[1])
        try:
            reader[0](name, buffer)
        except Exception as exc:
            raise Fail(f"EPContext node {node.name!r}: the context data read function raised on {name!r}: "
                       f"{type(exc).__name__}: {exc}") from exc
        if not buffer.is_allocated:
            raise Fail(f"EPContext node {node.name!r}: the context data read function gave no data for {name!r}")
        return bytes(buffer._data)
    if request.model_path is None:
        raise InvalidGraph(
            f"EPContext node {node.name!r} refers to the file {name!r} (embed_mode=0), but the model was "
            "given as bytes or a ModelProto: load it from its path so the file can be found")
    folder = Path(request.model_path).resolve().parent
    target = (folder / name).resolve()
    if not target.is_relative_to(folder):
        raise InvalidGraph(f"EPContext node {node.name!r}: context file {name!r} is outside the model's folder {str(folder)!r}")
    if not target.is_file():
        raise InvalidGraph(f"EPContext node {node.name!r}: context file {str(target)!r} not found")
    try:
        return target.read_bytes()
    except OSError as exc:
        raise Fail(f"EPContext node {node.name!r}: cannot read context file {str(target)!r}: {exc}") from exc


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextSettings:
    """Where and how a session writes its context model (from the session config)."""

    path: Path
    embed: bool


def _flag(config: Mapping[str, str], key: str, default: str) -> bool:
    value = str(config.get(key, default)).strip()
    if value not in ("0", "1"):
        raise InvalidArgument(f"session config {key}={value!r}: expected '0' or '1'")
    return value == "1"


def context_settings(config: Mapping[str, str], model_path: str | None) -> ContextSettings | None:
    """The context-model settings of a session config, or None when ``ep.context_enable`` is off."""
    if not _flag(config, CONTEXT_ENABLE, "0"):
        return None
    embed = _flag(config, CONTEXT_EMBED_MODE, "1")
    given = config.get(CONTEXT_FILE_PATH, "")
    if given:
        path = Path(given)
    elif model_path is None:
        raise InvalidArgument(
            f"{CONTEXT_ENABLE}=1 for a model given as bytes or a ModelProto: set {CONTEXT_FILE_PATH} "
            "to say where the context model goes")
    else:
        source = Path(model_path)
        path = source.with_name(source.stem + "_ctx.onnx")
    if model_path is not None and path.resolve() == Path(model_path).resolve():
        raise InvalidArgument(f"{CONTEXT_FILE_PATH} {str(path)!r} is the input model itself; choose another file")
    return ContextSettings(path, embed)


def context_model(
    model: ir.Model,
    graph: GraphView,
    assignment: Assignment,
    kernels: Sequence[Kernel],
    embed: bool,
    file_stem: str = "",
    bodies: Mapping[int, tuple[GraphView, Assignment, Sequence[Kernel]]] | None = None,
) -> tuple[onnx.ModelProto, dict[str, bytes], int]:
    """The context model of a placed graph: (model, side files by name, groups exported).

    ``file_stem`` names the side files when ``embed`` is False (``<stem>_<provider>_<k>.bin``).
    Claims whose kernel has no ``export_context`` keep their nodes, in an order in which every
    value is produced before it is read (the plan's claim order). ``bodies`` (``id`` of a
    control-flow body's view -> its view, placement and kernels) lets groups inside bodies be
    exported too, in the bodies of the nodes kept."""
    proto = ir.serde.serialize_model(model)
    files: dict[str, bytes] = {}
    counter = [0]
    _rewrite(proto.graph, graph, assignment, kernels, embed, file_stem, dict(bodies or {}), files, counter)
    exported = counter[0]
    if not any(o.domain == CONTEXT_DOMAIN for o in proto.opset_import) and exported:
        proto.opset_import.append(onnx.helper.make_opsetid(CONTEXT_DOMAIN, 1))
    return proto, files, exported


def _rewrite(proto_graph: onnx.GraphProto, graph: GraphView, assignment: Assignment, kernels: Sequence[Kernel],
             embed: bool, file_stem: str, bodies: dict, files: dict[str, bytes], counter: list[int]) -> None:
    """Replace the exported groups of one graph (and, through kept nodes, of its bodies)."""
    from .plan import Plan, _claim_io  # local: plan imports nothing from here, but keep load order simple

    nodes = list(proto_graph.node)
    if len(nodes) != len(graph.nodes):
        raise Fail(f"context model: graph {graph.path or 'main'} has {len(graph.nodes)} nodes but serialises "
                   f"to {len(nodes)}")
    for i, node in enumerate(nodes):  # bodies of every node: those of exported groups go away
        for attr in node.attribute:
            sub = graph.nodes[i].subgraphs.get(attr.name)
            if attr.HasField("g") and sub is not None and id(sub) in bodies:
                _, body_assignment, body_kernels = bodies[id(sub)]
                _rewrite(attr.g, sub, body_assignment, body_kernels, embed, file_stem, bodies, files, counter)
    kept: list[onnx.NodeProto] = []
    for c in Plan._claim_order(assignment):
        bp, claim = assignment.claims[c]
        kernel = kernels[c]
        if kernel.export_context is None:
            kept.extend(nodes[i] for i in claim.nodes)
            continue
        first = graph.nodes[claim.nodes[0]]
        label = first.name if len(claim.nodes) == 1 else f"{first.name} (+{len(claim.nodes) - 1})"
        try:
            blob = kernel.export_context()
        except Exception as exc:
            raise EPFail(f"{bp.name}: exporting the compiled group {label} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(blob, EpContextBlob) or not isinstance(blob.data, (bytes, bytearray)):
            raise EPFail(f"{bp.name}: export_context of group {label} returned {type(blob).__name__}, not an EpContextBlob of bytes")
        inputs, outputs = _claim_io(graph, claim.nodes, claim.fuse)
        exported = counter[0]
        partition = f"{bp.name}_{exported}"
        if embed:
            cache: bytes = bytes(blob.data)
        else:
            file_name = f"{file_stem}_{bp.name}_{exported}.bin"
            files[file_name] = bytes(blob.data)
            cache = file_name.encode("utf-8")
        kept.append(onnx.helper.make_node(
            CONTEXT_OP, list(inputs), list(outputs), name=partition, domain=CONTEXT_DOMAIN,
            main_context=1, ep_cache_context=cache, embed_mode=int(embed), source=bp.name,
            partition_name=partition, ep_sdk_version=blob.sdk_version,
            hardware_architecture=blob.hardware_architecture, notes=blob.notes,
        ))
        counter[0] += 1
    del proto_graph.node[:]
    proto_graph.node.extend(kept)
    _drop_unused(proto_graph)


def _read_names(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Every value name the nodes read, in their subgraphs too."""
    names: set[str] = set()
    for node in nodes:
        names.update(n for n in node.input if n)
        for attr in node.attribute:
            for g in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= _read_names(list(g.node))
    return names


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove initializers nothing reads any more (the compiled groups hold their weights) and
    value infos of values no node produces any more."""
    read = _read_names(list(graph.node)) | {o.name for o in graph.output} | {i.name for i in graph.input}
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    produced = {o for n in graph.node for o in n.output}
    infos = [v for v in graph.value_info if v.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def save_context_model(
    proto: onnx.ModelProto,
    files: Mapping[str, bytes],
    path: Path,
    external_initializers: str = "",
    size_threshold: int = 1024,
) -> None:
    """Write the context model and its side files (beside it); initializers of at least
    ``size_threshold`` bytes go to ``external_initializers`` (relative to the model) when given."""
    path = Path(path)
    write_side_files(files, path.parent)
    try:
        if external_initializers:
            if os.path.isabs(external_initializers) or ".." in Path(external_initializers).parts:
                raise InvalidArgument(
                    f"external initializers file {external_initializers!r} must be a file name relative to the "
                    "compiled model's folder")
            onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=external_initializers, size_threshold=size_threshold)
        else:
            onnx.save_model(proto, str(path))
    except OSError as exc:
        raise Fail(f"cannot write the context model {str(path)!r}: {exc}") from exc


def write_side_files(files: Mapping[str, bytes], folder: Path) -> None:
    """The compiled blobs that are not embedded, as files in ``folder`` (made where missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    except OSError as exc:
        raise Fail(f"cannot write the compiled data files in {str(folder)!r}: {exc}") from exc


# --------------------------------------------------------------------------------------------
# the explicit form
# --------------------------------------------------------------------------------------------


class OrtCompileApiFlags(OrtFlags):
    """onnxruntime's flags for ``ModelCompiler`` (bitwise OR)."""

    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


#: a ``get_initializer_location_func``: (name, value, its location in the input model or None)
#: -> where the compiled model reads it from, or None to keep it in the model
GetInitializerLocationFunc = Callable[[str, Any, "OrtExternalInitializerInfo | None"],
                                      "OrtExternalInitializerInfo | None"]


class ModelCompiler:
    """Compile a model for the providers of ``sess_options`` into an EPContext model
    (onnxruntime's ``ModelCompiler``).

    The providers are those given to ``sess_options.add_provider`` /
    ``add_provider_for_devices``, or chosen by its selection policy. ``compile_to_file`` writes
    the context model (side files beside it unless ``embed_compiled_data_into_model``);
    ``compile_to_bytes`` and ``compile_to_stream`` give its bytes, with every blob embedded
    unless ``set_ep_context_binary_information`` names a directory for the side files or
    ``set_ep_context_data_write_func`` a callback that takes them.
    ``get_initializer_location_func`` (not with ``external_initializers_file_path``) is asked
    for each initializer, by name, whether it stays in the model or where in the caller's own
    file it lies.
    """

    def __init__(
        self,
        sess_options: SessionOptions,
        input_model_path_or_bytes: str | os.PathLike | bytes,
        embed_compiled_data_into_model: bool = False,
        external_initializers_file_path: str | os.PathLike | None = None,
        external_initializers_size_threshold: int = 1024,
        flags: int = OrtCompileApiFlags.NONE,
        graph_optimization_level: Any = None,
        get_initializer_location_func: GetInitializerLocationFunc | None = None,
    ):
        from .session import GraphOptimizationLevel, SessionOptions

        if not isinstance(sess_options, SessionOptions):
            raise InvalidArgument(f"ModelCompiler needs ort_core.SessionOptions, got {type(sess_options).__name__}")
        if isinstance(input_model_path_or_bytes, (str, os.PathLike)):
            if not os.fspath(input_model_path_or_bytes):
                raise InvalidArgument("ModelCompiler: the input model path is empty")
        elif isinstance(input_model_path_or_bytes, (bytes, bytearray)):
            if not input_model_path_or_bytes:
                raise InvalidArgument("ModelCompiler: the input model bytes are empty")
        else:
            raise InvalidArgument(
                f"ModelCompiler cannot load a model from {type(input_model_path_or_bytes).__name__}: "
                "give a path or bytes")
        if get_initializer_location_func is not None:
            if external_initializers_file_path:  # (onnxruntime's ValueError, in its words)
                raise InvalidArgument("Cannot initialize ModelCompiler with both `external_initializers_file_path` "
                                      "and `get_initializer_location_func`")
            if not callable(get_initializer_location_func):
                raise InvalidArgument("ModelCompiler: get_initializer_location_func must be callable, got "
                                      f"{type(get_initializer_location_func).__name__}")
        self._options = sess_options
        self._model = input_model_path_or_bytes
        self._embed = bool(embed_compiled_data_into_model)
        self._external = os.fspath(external_initializers_file_path) if external_initializers_file_path else ""
        self._threshold = int(external_initializers_size_threshold)
        self._flags = int(flags)
        self._level = (GraphOptimizationLevel.ORT_DISABLE_ALL if graph_optimization_level is None
                       else GraphOptimizationLevel(int(graph_optimization_level)))
        self._locate = get_initializer_location_func
        self._binary_place: tuple[Path, str] | None = None  # set_ep_context_binary_information's
        self._data_write: Callable[[str, OrtEpContextData], None] | None = None

    def set_ep_context_binary_information(self, output_directory: str | os.PathLike, model_name: str) -> None:
        """The directory and model name for the compiled blobs' side files where the model
        itself goes to bytes or a stream (as onnxruntime: a directory with a last part and no
        extension, ``out`` rather than ``out/``, is refused as not a directory)."""
        directory, name = os.fspath(output_directory), os.fspath(model_name)
        if not directory or not name:
            raise InvalidArgument("set_ep_context_binary_information: output_dir or model_name is empty")
        if not directory.endswith(("/", os.sep)) and Path(directory).name and not Path(directory).suffix:
            raise InvalidArgument(f"set_ep_context_binary_information: output_dir {directory!r} is not a valid "
                                  "directory (end it with a path separator)")
        self._binary_place = (Path(directory), Path(name).stem)

    def set_ep_context_data_write_func(self, write_func: Callable[[str, OrtEpContextData], None]) -> None:
        """Give each compiled blob that is not embedded to ``write_func(name, data)`` instead
        of writing its file; ``name`` is what the EPContext node records, which a session's
        ``set_ep_context_data_read_func`` is asked for."""
        if not callable(write_func):
            raise InvalidArgument(f"set_ep_context_data_write_func needs a callable, got {type(write_func).__name__}")
        self._data_write = write_func

    def clear_ep_context_data_write_func(self) -> None:
        self._data_write = None

    def _session(self):
        from .session import InferenceSession

        options = self._options.copy()
        options.graph_optimization_level = self._level
        # the session writes nothing itself: the compiler asks it for the model
        options.add_session_config_entry(CONTEXT_ENABLE, "0")
        return InferenceSession(self._model, options)

    def _compiled(self, embed: bool, file_stem: str) -> tuple[onnx.ModelProto, dict[str, bytes]]:
        session = self._session()
        proto, files, exported = session._context_model(embed, file_stem)
        if not exported and self._flags & OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED:
            raise EPFail("ModelCompiler: no provider compiled any node (ERROR_IF_NO_NODES_COMPILED); providers: "
                         + ", ".join(session.get_providers()))
        if self._locate is not None:
            self._place_initializers(proto)
        return proto, files

    def _place_initializers(self, proto: onnx.ModelProto) -> None:
        """Ask ``get_initializer_location_func`` about each initializer of the compiled model
        (by name, as onnxruntime asks), and point those it places at their file."""
        from .graph.load import _TYPED_FIELDS, proto_graphs
        from .memory import OrtValue

        before = self._input_locations()
        tensors = [t for g in proto_graphs(proto.graph) for t in g.initializer]
        for tensor in sorted(tensors, key=lambda t: t.name):
            value = OrtValue.ortvalue_from_numpy(onnx.numpy_helper.to_array(tensor))
            try:
                place = self._locate(tensor.name, value, before.get(tensor.name))
            except Exception as exc:
                raise Fail(f"ModelCompiler: get_initializer_location_func raised on initializer {tensor.name!r}: "
                           f"{type(exc).__name__}: {exc}") from exc
            if place is None:
                continue
            if not isinstance(place, OrtExternalInitializerInfo):
                raise InvalidArgument(f"ModelCompiler: get_initializer_location_func returned "
                                      f"{type(place).__name__} for initializer {tensor.name!r}; return an "
                                      "OrtExternalInitializerInfo or None")
            for field in ("raw_data", *_TYPED_FIELDS):
                tensor.ClearField(field)
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, text in (("location", place.filepath), ("offset", str(place.file_offset)),
                              ("length", str(place.byte_size))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, text

    def _input_locations(self) -> dict[str, OrtExternalInitializerInfo]:
        """The input model's initializers that lie in external files, by name (their
        locations, read from the model file without the data)."""
        if not isinstance(self._model, (str, os.PathLike)):
            return {}
        from .graph.load import proto_graphs

        try:
            model = onnx.load(os.fspath(self._model), load_external_data=False)
        except Exception:  # the session read it already; a second reading that fails adds nothing
            return {}
        found = {}
        for graph in proto_graphs(model.graph):
            for tensor in graph.initializer:
                if not external_data_helper.uses_external_data(tensor):
                    continue
                info = external_data_helper.ExternalDataInfo(tensor)
                if info.length:
                    size = int(info.length)
                else:  # (the data runs to the end of the file: the tensor's own byte count)
                    itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
                    size = itemsize * math.prod(tensor.dims)
                found[tensor.name] = OrtExternalInitializerInfo(info.location, int(info.offset or 0), size)
        return found

    def _deliver(self, files: Mapping[str, bytes], folder: Path) -> None:
        """The side files to the data write function, else into ``folder``."""
        if self._data_write is None:
            write_side_files(files, folder)
            return
        for name, blob in files.items():
            data = OrtEpContextData(blob)
            try:
                self._data_write(name, data)
            except Exception as exc:
                raise Fail(f"ModelCompiler: the EPContext data write function raised on {name!r}: "
                           f"{type(exc).__name__}: {exc}") from exc
            finally:
                data._close()

    def compile_to_file(self, output_model_path: str | os.PathLike | None = None) -> None:
        """Write the compiled model to ``output_model_path`` (default ``<input stem>_ctx.onnx``)."""
        if output_model_path is None:
            if not isinstance(self._model, (str, os.PathLike)):
                raise InvalidArgument("compile_to_file: an input model given as bytes needs an output_model_path")
            source = Path(self._model)
            path = source.with_name(source.stem + "_ctx.onnx")
        else:
            path = Path(output_model_path)
        if isinstance(self._model, (str, os.PathLike)) and path.resolve() == Path(self._model).resolve():
            raise InvalidArgument(f"compile_to_file: the output {str(path)!r} is the input model itself")
        if path.exists() and self._flags & OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS:
            raise InvalidArgument(f"compile_to_file: {str(path)!r} exists (ERROR_IF_OUTPUT_FILE_EXISTS)")
        proto, files = self._compiled(self._embed, path.stem)
        self._deliver(files, path.parent)
        save_context_model(proto, {}, path, self._external, self._threshold)

    def compile_to_bytes(self) -> bytes:
        """The compiled model's bytes. Its blobs are embedded unless the compiler was made
        with ``embed_compiled_data_into_model=False`` (the default) and given a place for them:
        ``set_ep_context_binary_information`` or ``set_ep_context_data_write_func``."""
        if self._external:
            raise InvalidArgument("compile_to_bytes: external_initializers_file_path applies to compile_to_file only")
        placed = self._data_write is not None or self._binary_place is not None
        embed = self._embed or not placed
        folder, stem = self._binary_place or (Path("."), "model")
        proto, files = self._compiled(embed, stem)
        if files:
            self._deliver(files, folder)
        return proto.SerializeToString()

    def compile_to_stream(self, write_function: Callable[[bytes], Any]) -> None:
        """``compile_to_bytes``'s model, given to ``write_function(bytes)``."""
        if not callable(write_function):
            raise InvalidArgument(f"compile_to_stream needs a callable, got {type(write_function).__name__}")
        data = self.compile_to_bytes()
        try:
            write_function(data)
        except Exception as exc:
            raise Fail(f"ModelCompiler.compile_to_stream: the write function raised: {type(exc).__name__}: {exc}") from exc


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
