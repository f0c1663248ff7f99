"""The QNN provider's hook implementations (entry point ``ort_core.plugins: qnn``).

Importing this module loads no QNN library: ``ort_ep_devices`` looks for one (QNN_SDK_ROOT,
then the onnxruntime-qnn wheel) and, when there is none, answers ``EpDevices((), reason)``
with the install command, so core lists the provider as not usable here.
"""

from __future__ import annotations

import logging
import platform

import numpy as np
import onnx

from ort_core import (
    Capability,
    Claim,
    EpContextBlob,
    EpDevice,
    EpDevices,
    EPFail,
    GraphView,
    Kernel,
    KernelRequest,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.epcontext import is_context_node, read_context
from ort_core.graph.load import load_model
from ort_core.grouping import fusable_groups
from ort_core.hostshapes import host_nodes

from . import PROVIDER_NAME
from . import _qnn as Q
from .capability import node_reason, quant_params, static_view
from .kernel import GroupKernel, PerShapeKernel
from .lowering import Lowering, fold_units, to_float16
from .options import OPTIONS, Settings, resolve
from .runtime import Backend
from .version import __version__

logger = logging.getLogger("ort_core.qnn")

SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="Qualcomm",
    kind="compiling",
    options=OPTIONS,
    description="claimed subgraphs become QNN graphs on the HTP backend (on x86-64: its simulator), "
                "through the QNN C API",
)


def simulated() -> bool:
    """On x86-64 the HTP backend library is Qualcomm's simulator, not a device."""
    return platform.machine().lower() in ("x86_64", "amd64")


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    try:
        lib = Q.load(Q.find_library(""))
    except ImportError as exc:
        return EpDevices((), str(exc))
    except Exception as exc:  # never raise from here
        return EpDevices((), f"the QNN library failed to load: {type(exc).__name__}: {exc}; {Q.INSTALL_HINT}")
    sim = simulated()
    name = "Qualcomm Hexagon HTP v68 (x86-64 simulator)" if sim else "Qualcomm Hexagon HTP"
    return EpDevices((EpDevice(
        PROVIDER_NAME, "Qualcomm", "NPU", name, device_id=0, vendor="Qualcomm", hardware=not sim,
        metadata={"library": lib.path, "qnn_build_id": lib.build_id, "core_api": lib.core_api,
                  "backend_api": lib.backend_api},
    ),))


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    options = ep.options
    try:
        settings = resolve(options)
        lib = Q.load(settings.library)
        backend = Backend(lib, options["profiling_level"], options["profiling_file_path"])
    except (ImportError, Q.QnnError) as exc:
        raise EPFail(f"QNN {options['backend_type']} backend: {exc}") from exc
    ep.state["settings"] = settings
    ep.state["backend"] = backend
    ep.state["kernels"] = []


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    backend = ep.state.pop("backend", None)
    if backend is not None:
        backend.close()  # frees every context (graph) of the session, the device, backend, log
    ep.state.clear()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    settings: Settings = ep.state["settings"]
    backend: Backend = ep.state["backend"]
    capability = Capability()
    quant = quant_params(graph)
    concrete = static_view(graph)  # symbolic input dimensions at 1, for the backend's checks
    supported: set[int] = set()
    shape_nodes = host_nodes(graph)
    for i in sorted(candidates):
        node = graph.nodes[i]
        if i in shape_nodes:
            # Shape and the integer arithmetic after it: a few numbers for a Reshape or Expand,
            # which onnxruntime keeps on the CPU. On the HTP simulator an int32 StridedSlice ->
            # Concat also returns the slice's neighbour instead of the constant (onnxruntime's
            # QNN EP gives the same wrong shape), which failed three real models' reshapes.
            capability.declined[i] = f"{node.op_type} {node.name}: shape computation, left to the CPU"
            continue
        if is_context_node(node):
            if is_context_node(node, PROVIDER_NAME):  # a compiled group of ours: restored, not lowered
                capability.claims.append(Claim((i,), fuse=False))
            else:
                capability.declined[i] = f"EPContext {node.name}: made by {_text(node.attr('source', ''))!r}, not QNN"
            continue
        reason = (_offloaded(graph, node, settings) or _inexact(node, settings)
                  or node_reason(backend, concrete, concrete.nodes[i], quant))
        if reason is None:
            supported.add(i)
        else:
            capability.declined[i] = reason
    trials = ep.state.setdefault("trials", {})
    pending = fusable_groups(graph, supported)
    while pending:
        group = pending.pop(0)
        inputs, outputs = graph.group_io(group)
        fed = [n for n in inputs if graph.value(n).const_value is None]
        if len(group) == 1 or any(not graph.value(n).static_shape or graph.value(n).dtype == np.int64 for n in fed):
            # one node: a finalize failure in ort_create_kernel declines it (core does that);
            # symbolic or int64 inputs: built per input shape at run time, placed then
            capability.claims.append(Claim(group, fuse=True))
            continue
        # graphFinalize refuses some graphs of valid nodes (simulator limitations): the group is
        # finalized now; a node QNN names as failing is declined and the rest tried again
        name = f"ort_qnn_{len(ep.state['kernels']) + len(trials)}"
        try:
            kernel = _build_group(backend, settings, concrete, [concrete.nodes[i] for i in group], inputs, outputs,
                                  name, graph.nodes[group[0]].name)
        except Exception as exc:
            culprit = _culprit(graph, group, exc) if isinstance(exc, Q.QnnError) else None
            for i in (group if culprit is None else [culprit]):
                capability.declined[i] = (f"{graph.nodes[i].op_type} {graph.nodes[i].name}: QNN graphFinalize fails "
                                          f"with it in the group: {exc}")
            if culprit is not None:
                supported.discard(culprit)
                rest = set(group) - {culprit}
                pending = fusable_groups(graph, rest) + pending
            continue
        trials[(id(graph), group)] = (graph, kernel)  # the view is kept: its id stays unique
        capability.claims.append(Claim(group, fuse=True))
    return capability


def _culprit(graph: GraphView, group: tuple[int, ...], exc: Q.QnnError) -> int | None:
    """The group's node whose QNN op graphFinalize named (QNN op names are ``<node>__<op><k>``)."""
    by_name = {graph.nodes[i].name: i for i in group}
    for op_name in exc.culprits:
        node = op_name.rsplit("__", 1)[0]
        if node in by_name:
            return by_name[node]
    return None


#: float ops HTP accepts but computes below float32 accuracy (measured on the v68 simulator
#: against onnxruntime: LayerNormalization off by ~1e-3 relative, where float32 is ~1e-7)
INEXACT_IN_FLOAT32 = {"LayerNormalization": "off by ~1e-3 relative on HTP (measured), not float32-exact"}


def _inexact(node, settings: Settings) -> str | None:
    """A float32 graph must give float32 answers: ops HTP computes less exactly are left to the
    next provider, unless the user asked for reduced precision (enable_htp_fp16_precision=1)."""
    reason = INEXACT_IN_FLOAT32.get(node.op_type)
    if reason is None or settings.fp16 or node.domain:
        return None
    return f"{node.op_type} {node.name}: {reason}; QNN takes it with enable_htp_fp16_precision=1"


def _offloaded(graph: GraphView, node, settings: Settings) -> str | None:
    if not settings.offload_io_quantization:
        return None
    if node.op_type == "QuantizeLinear" and node.inputs[0] in graph.inputs:
        return f"QuantizeLinear {node.name}: quantizes a graph input, left to the host (offload_graph_io_quantization=1)"
    if node.op_type == "DequantizeLinear" and node.outputs[0] in graph.outputs:
        return f"DequantizeLinear {node.name}: writes a graph output, left to the host (offload_graph_io_quantization=1)"
    return None


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    settings: Settings = ep.state["settings"]
    backend: Backend = ep.state["backend"]
    first = request.nodes[0]
    if is_context_node(first, PROVIDER_NAME):
        return _context_kernel(ep, request, backend, settings)
    label = first.name if len(request.nodes) == 1 else f"{first.name} (+{len(request.nodes) - 1})"
    name = f"ort_qnn_{len(ep.state['kernels'])}"
    precision = "fp16" if settings.fp16 else "fp32"
    fed = [n for n in request.inputs if request.value(n).const_value is None]
    if any(not request.value(n).static_shape or request.value(n).dtype == np.int64 for n in fed):
        per_shape = _per_shape_kernel(backend, settings, request, name, label)
        ep.state["kernels"].append(per_shape)
        return Kernel(run=per_shape, note=f"QNN HTP graphs {name}, one per input shape ({precision})")
    indices = tuple(n.index for n in request.nodes)
    trial = ep.state.get("trials", {}).pop((id(request.graph), indices), None)
    kernel = None
    if trial is not None and trial[0] is request.graph:
        kernel = trial[1]
        kernel.reorder(request.inputs, request.outputs)
    try:
        if kernel is None:
            view = static_view(request.graph)
            kernel = _build_group(backend, settings, view, [view.nodes[n.index] for n in request.nodes],
                                  request.inputs, request.outputs, name, label)
    except Exception as exc:
        raise EPFail(f"QNN cannot build group {label}: {exc}") from exc
    ep.state["kernels"].append(kernel)
    # the QDQ units that run as fixed-point QNN ops (the rest of the graph is float)
    fixed = f"; fixed point: {', '.join(kernel.fixed_point)}" if kernel.fixed_point else ""
    if kernel.float_units:
        fixed += "; float QDQ units: " + "; ".join(f"{n} ({why})" for n, why in kernel.float_units.items())
    return _kernel(kernel, f"QNN HTP graph {kernel.name} ({precision}{fixed})")


def _build_group(backend: Backend, settings: Settings, graph: GraphView, nodes, inputs, outputs, name: str,
                 label: str) -> GroupKernel:
    quant = quant_params(graph)
    lowering = Lowering(graph, inputs, outputs, quant)
    refused: dict[int, str] = {}
    if quant:
        lowering.units = fold_units(graph, [n.index for n in nodes], quant, inputs, outputs, backend.validate, refused)
    for node in nodes:
        lowering.lower(node)
    specs_in = [None if lowering.const(n) is not None else lowering.tensor(n) for n in inputs]
    specs_out = [lowering.tensor(n) for n in outputs]
    ops = to_float16(lowering.ops) if settings.fp16 else lowering.ops
    kernel = GroupKernel.build(backend, name, ops, specs_in, specs_out, settings.context_configs(),
                               settings.graph_configs(), label)
    kernel.fixed_point = [graph.nodes[i].name for i in sorted(lowering.units)]
    kernel.float_units = {graph.nodes[i].name: why for i, why in sorted(refused.items())}
    for node_name, why in kernel.float_units.items():
        logger.info("QDQ unit %s runs in float between QNN Dequantize/Quantize: %s", node_name, why)
    return kernel


def _per_shape_kernel(backend: Backend, settings: Settings, request: KernelRequest, name: str,
                      label: str) -> PerShapeKernel:
    """The group as its own model; each new set of input shapes (and int64 values) is fixed
    into it, its shapes inferred again, and it is placed as a static graph."""
    model_bytes = request.to_model().SerializeToString()
    fed = [k for k, n in enumerate(request.inputs) if request.value(n).const_value is None]

    def build(values):
        model = onnx.load_from_string(model_bytes)
        del model.graph.value_info[:]
        baked = []
        for value, x in zip([model.graph.input[k] for k in fed], values):
            x = np.asarray(x)
            if x.dtype == np.int64:  # a shape tensor: a constant of this graph
                model.graph.initializer.append(onnx.numpy_helper.from_array(x, value.name))
                baked.append(value)
                continue
            for d, size in zip(value.type.tensor_type.shape.dim, x.shape):
                d.ClearField("dim_param")
                d.dim_value = size
        for value in baked:
            model.graph.input.remove(value)
        ir_model = load_model(model.SerializeToString())
        view = GraphView(ir_model.graph, opset_imports=dict(ir_model.opset_imports), ir_version=ir_model.ir_version,
                         path=f"{name}[{per_shape.builds}]")
        # placed by core like a body: QNN takes (and finalizes) what it can at these shapes,
        # declining what graphFinalize refuses, and the next provider runs the rest
        try:
            runner = request.build_graph(view)
        except Exception as exc:
            shapes = [tuple(np.shape(x)) for x in values]
            raise EPFail(f"QNN cannot build group {label} for input shapes {shapes}: {exc}") from exc
        position = {n: k for k, n in enumerate(request.inputs)}
        take = [position[n] for n in view.inputs]
        return lambda *all_values: runner.run_values([all_values[k] for k in take])

    per_shape = PerShapeKernel(build, fed, label)
    return per_shape


def _kernel(group: GroupKernel, note: str) -> Kernel:
    def export() -> EpContextBlob:
        return EpContextBlob(group.binary(), sdk_version=group.context.lib.build_id,
                             hardware_architecture="htp-v68" if simulated() else "htp", notes=group.describe())

    return Kernel(run=group, note=note, export_context=export)


def _context_kernel(ep: ProviderContext, request: KernelRequest, backend: Backend, settings: Settings) -> Kernel:
    node = request.node
    partition = _text(node.attr("partition_name", node.name))
    if int(node.attr("embed_mode", 1)) == 0:
        where = f"{_text(node.attr('ep_cache_context', b''))} (partition {partition})"
    else:
        where = f"embedded in node {node.name} (partition {partition})"
    binary = read_context(request)
    kernel = load_context_binary(backend, binary, _text(node.attr("notes", "")), where, settings)
    ep.state["kernels"].append(kernel)
    return Kernel(run=kernel, note=f"QNN context binary, {where}")


def load_context_binary(backend: Backend, binary: bytes, notes: str, where: str, settings: Settings) -> GroupKernel:
    """A kernel from a QNN context binary, checked first with QnnSystemContext_getBinaryInfo;
    a corrupt, truncated or foreign binary is an ``EPFail`` naming ``where`` (file or node)."""
    system = Q.load_system(backend.lib.path)
    code = system.binary_ok(binary)
    if code:
        raise EPFail(f"QNN context binary {where} ({len(binary)} bytes) is not readable by this QNN "
                     f"({backend.lib.build_id}): QnnSystemContext_getBinaryInfo error {code} "
                     f"(corrupt, truncated, or made by another QNN version)")
    try:
        return GroupKernel.load(backend, binary, notes, settings.context_configs())
    except Q.QnnError as exc:
        raise EPFail(f"QNN context binary {where}: {exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise EPFail(f"QNN context binary {where}: its description (the EPContext notes) is unreadable: {exc}") from exc
