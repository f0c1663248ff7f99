"""What the hooks take and return.

These small dataclasses are half of the provider contract (``hookspecs.py`` is the other half).
They are plain data: a provider builds them, core reads them. Nothing here imports a vendor
library.

Tensors on a device are the provider's own objects (a CuPy array, a wgpu buffer wrapper, ...).
Core never looks inside them; it only needs ``shape``, ``dtype`` (a numpy dtype) and ``nbytes``
to validate, report and track memory. Tensors in host memory are numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .version import CONTRACT_VERSION

if TYPE_CHECKING:
    from .graph.view import GraphView, NodeView, ValueView

#: Name of host memory. A provider whose tensors are numpy arrays in host memory uses it and
#: needs no data-transfer hook.
HOST_MEMORY = "Cpu"


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionSpec:
    """One provider option: its key, default, meaning and how a given value is checked.

    ``parse`` turns what the user gave (often a string, as onnxruntime's options are strings)
    into the typed value and raises ``ValueError`` with a readable message for a bad one.
    ``choices`` (after parsing) lists the allowed values where the set is closed.
    """

    name: str
    default: Any
    doc: str
    parse: Callable[[Any], Any] = str
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class FusedOp:
    """A node core's optimizer may form (levels EXTENDED and ALL) that a provider computes
    exactly as onnxruntime does: declared in ``ProviderSpec.fused_ops``.

    ``domain`` is ``"com.microsoft"``, ``"ort_core"`` (``CORE_DOMAIN``) or ``""`` (standard ops
    a fusion forms: LayerNormalization, HardSwish). ``attributes`` maps an attribute to the
    values computed exactly (e.g. ``{"activation": ("Relu", "Tanh")}``); an attribute not named
    may have any value. See "Fused ops" in ``hookspecs.py``.
    """

    op_type: str
    domain: str = "com.microsoft"
    attributes: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def admits(self, domain: str, op_type: str, attributes: Mapping[str, Any]) -> bool:
        """Whether a node of ``domain``/``op_type`` with these attribute values is this op
        with values it computes (an attribute it restricts must be present and listed)."""
        if (domain, op_type) != (self.domain, self.op_type):
            return False
        return all(name in attributes and attributes[name] in values for name, values in self.attributes.items())

    def __hash__(self) -> int:  # the attributes are a dict: hash their items
        return hash((self.op_type, self.domain, tuple(sorted((k, tuple(v)) for k, v in self.attributes.items()))))

    def __str__(self) -> str:
        where = ", ".join(f"{k} in {list(v)}" for k, v in self.attributes.items())
        return f"{self.domain or 'ai.onnx'}::{self.op_type}" + (f" ({where})" if where else "")


@dataclass(frozen=True)
class ProviderSpec:
    """A provider a plugin offers. Returned by ``ort_register_providers``.

    ``kind`` is ``"kernel"`` for providers that run claimed nodes one by one (and may fuse
    groups they run as one kernel of their own, as the CPU provider's oneDNN groups) and
    ``"compiling"`` for providers that fuse claimed groups and compile each into one callable.
    ``contract_version`` is the version of this contract the provider was written against
    (``ort_core.CONTRACT_VERSION`` at the time); core refuses an incompatible one.
    ``fused_ops`` are the fused nodes the optimizer may form for this provider (contract 1.2):
    only those it computes exactly. None (the default) means the provider gets the graph
    unfused, as onnxruntime gives its compiling providers.
    """

    name: str
    version: str
    vendor: str
    kind: Literal["kernel", "compiling"]
    options: tuple[OptionSpec, ...] = ()
    contract_version: str = CONTRACT_VERSION
    description: str = ""
    fused_ops: tuple[FusedOp, ...] = ()

    def option(self, key: str) -> OptionSpec | None:
        return next((o for o in self.options if o.name == key), None)


@dataclass(frozen=True)
class EpDevice:
    """A device a provider can use on this machine (onnxruntime's ``OrtEpDevice``).

    ``memory`` names the memory space its tensors live in: ``HOST_MEMORY`` ("Cpu") for
    providers that compute on numpy arrays in host memory, otherwise a name of the provider's
    choosing such as ``"WebGpu"`` or ``"Cuda"``. Core inserts copies between values whose
    memory names differ. ``hardware`` is False for software emulation (e.g. lavapipe). The
    memory name without a ``:N`` suffix, lowercased, is the device type users give for
    device-resident values (``OrtValue.ortvalue_from_numpy(x, "cuda", 0)``): core finds the
    provider by it and copies with its ``DataTransfer``.
    """

    ep_name: str
    ep_vendor: str
    device_type: Literal["CPU", "GPU", "NPU"]
    name: str
    device_id: int = 0
    vendor: str = ""
    memory: str = HOST_MEMORY
    hardware: bool = True
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EpDevices:
    """Answer of ``ort_ep_devices``: the usable devices, or why there are none."""

    devices: tuple[EpDevice, ...]
    unavailable_reason: str | None = None


# --------------------------------------------------------------------------------------------
# per-session binding of a provider
# --------------------------------------------------------------------------------------------


@dataclass
class ProviderContext:
    """A provider as bound to one session: passed to every per-session hook.

    ``options`` are validated and complete (defaults filled in). ``state`` belongs to the
    provider: put session-scoped objects there (streams, compiled-model caches, pools) in
    ``ort_session_start`` and release them in ``ort_session_end``.
    """

    name: str
    options: Mapping[str, Any]
    device: EpDevice
    session_config: Mapping[str, str]
    intra_op_num_threads: int = 0
    state: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# capability
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Nodes a provider takes. ``nodes`` are indices into ``GraphView.nodes``.

    A kernel provider claims one node per Claim (or a group it runs as one kernel of its own,
    with ``fuse=True``). A compiling provider claims a group with ``fuse=True``; core fuses it into one step unless fusing would create a cycle, in which
    case the nodes are declined with that reason.
    """

    nodes: tuple[int, ...]
    fuse: bool = False


@dataclass
class Capability:
    """Answer of ``ort_get_capability``: what the provider takes and why it declines the rest.

    ``declined`` maps a node index to a reason that a person can act on, e.g.
    ``"Resize: mode 'cubic' not supported"``. Candidates neither claimed nor declined are
    reported as declined without a reason (the conformance kit flags that).
    """

    claims: list[Claim] = field(default_factory=list)
    declined: dict[int, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------


class SubgraphRunner:
    """Runs a control-flow body (If branch, Loop/Scan body) placed and planned by core.

    Built at kernel creation through ``KernelRequest.build_subgraph``. Call it with the body's
    formal inputs in order and the outer-scope values it reads (by name); it returns the body's
    outputs in order. Safe to call from several threads.
    """

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    outer_names: tuple[str, ...]

    def __call__(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[Any]:
        raise NotImplementedError

    def run_values(self, values: Sequence[Any]) -> list[Any]:
        """The same run, given the formal inputs followed by the outer values in
        ``outer_names`` order: no mapping to build or read (a kernel that runs a body every
        time, like If, can order its outer values once at creation)."""
        n = len(self.input_names)
        return self(values[:n], dict(zip(self.outer_names, values[n:])))


@dataclass
class KernelRequest:
    """What ``ort_create_kernel`` is asked to build: one claimed node or one fused group.

    ``inputs`` are the value names the kernel receives, in call order: for a single node its
    declared inputs ("" where an optional input is omitted; the kernel then gets ``None``)
    followed by ``implicit_inputs`` (outer-scope values its subgraphs read); for a group the
    values it reads from outside the group. ``outputs`` are the names it must return, in order.
    """

    graph: GraphView
    nodes: tuple[NodeView, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fused: bool
    implicit_inputs: tuple[str, ...] = ()
    #: the file the model was loaded from, None for a model given as bytes or a ModelProto
    #: (``ort_core.epcontext.read_context`` resolves a context file relative to it)
    model_path: str | None = None
    _build_subgraph: Callable[[GraphView], SubgraphRunner] | None = None
    _to_model: Callable[[], Any] | None = None

    @property
    def node(self) -> NodeView:
        """The node, for a single-node request."""
        if len(self.nodes) != 1:
            raise ValueError("KernelRequest.node is only for single-node requests")
        return self.nodes[0]

    def value(self, name: str) -> ValueView:
        return self.graph.value(name)

    def build_subgraph(self, attribute: str) -> SubgraphRunner:
        """Place and plan the node's subgraph attribute ``attribute`` (e.g. "then_branch")."""
        if self._build_subgraph is None:
            raise ValueError("this request has no subgraph support")
        return self._build_subgraph(self.node.subgraphs[attribute])

    def build_graph(self, graph: GraphView) -> SubgraphRunner:
        """Place and plan a graph the provider made itself, like a subgraph: e.g. the function
        body an op is expanded into. Its nodes are partitioned over all providers and reported
        in the placement under ``graph.path``; its inputs are ``graph.inputs`` in order."""
        if self._build_subgraph is None:
            raise ValueError("this request has no subgraph support")
        return self._build_subgraph(graph)

    def to_model(self) -> Any:
        """The claimed nodes as a standalone ``onnx.ModelProto``: graph inputs are
        ``inputs``, outputs are ``outputs``, initializers read only by the group are embedded.
        This is what compiling providers hand to their vendor's ONNX parser."""
        if self._to_model is None:
            raise ValueError("this request cannot be exported as a model")
        return self._to_model()


@dataclass(frozen=True)
class Kernel:
    """A callable built once at session creation and called once per run.

    ``run(*inputs)`` returns a sequence with one value per requested output; if
    ``single_output`` is True it returns the only output itself (saves a tuple per call).
    ``host_inputs``/``host_outputs`` are positions of inputs/outputs that live in host memory
    even though the provider's device memory is elsewhere (e.g. the ``shape`` input of Reshape
    on a GPU provider); core inserts copies accordingly. ``note`` is shown in the placement
    report (e.g. "delegated to onnx.reference").

    ``export_context`` (contract 1.2) is for compiling providers: a fused group's kernel that
    can save its compiled form returns it as an ``EpContextBlob``. With the session config
    ``ep.context_enable=1`` core then writes a context model in which the group is one
    ``com.microsoft.EPContext`` node carrying the blob (see ``ort_core.epcontext``). Loading
    rule: such a node is offered to providers like any ``com.microsoft`` node; claim (single
    node, ``fuse=False``) those whose ``source`` attribute is your provider name
    (``ort_core.epcontext.is_context_node(node, name)``), and in ``ort_create_kernel`` get the
    blob with ``ort_core.epcontext.read_context(request)`` and load it without compiling; a
    blob you cannot load (corrupt, truncated, another SDK version or device) is an ``ort_core``
    error naming the partition (``partition_name``) and, for a file, the file. Decline nodes of
    another ``source`` with a reason.
    """

    run: Callable[..., Any]
    single_output: bool = False
    host_inputs: frozenset[int] = frozenset()
    host_outputs: frozenset[int] = frozenset()
    note: str = ""
    export_context: Callable[[], EpContextBlob] | None = None


@dataclass(frozen=True)
class EpContextBlob:
    """A compiled group as a provider saves it (``Kernel.export_context``): ``data`` is what the
    provider reads back (``ort_core.epcontext.read_context``); the rest goes into the EPContext
    node's attributes of the same names (``ep_sdk_version``, ``hardware_architecture``,
    ``notes``) so a provider can refuse a blob built by another SDK version or for another
    device before it tries to load it."""

    data: bytes
    sdk_version: str = ""
    hardware_architecture: str = ""
    notes: str = ""


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryInfo:
    """Where an allocator's memory is (onnxruntime's ``OrtMemoryInfo``)."""

    name: str
    device_type: Literal["CPU", "GPU", "NPU"]
    device_id: int = 0
    alignment: int = 64


@dataclass
class AllocatorStats:
    """Counters an allocator keeps; all in bytes except the counts."""

    in_use_bytes: int = 0
    peak_bytes: int = 0
    total_allocated_bytes: int = 0
    reserved_bytes: int = 0
    num_allocs: int = 0
    num_frees: int = 0
    limit_bytes: int | None = None


class Allocator:
    """Interface of what ``ort_create_allocator`` returns.

    ``allocate(nbytes)`` returns a buffer of at least ``nbytes`` aligned to
    ``memory_info.alignment`` or raises ``MemoryError`` naming the limit when
    ``stats().limit_bytes`` would be exceeded; ``free(buffer)`` gives it back (an arena may keep
    it for reuse); ``stats()`` returns the current counters.
    """

    memory_info: MemoryInfo

    def allocate(self, nbytes: int) -> Any:
        raise NotImplementedError

    def free(self, buffer: Any) -> None:
        raise NotImplementedError

    def stats(self) -> AllocatorStats:
        raise NotImplementedError


@dataclass(frozen=True)
class DataTransfer:
    """Copies between a provider's device memory and host memory.

    ``to_device(array)`` takes a numpy array and returns the provider's device tensor;
    ``to_host(tensor)`` returns a numpy array with the same shape, dtype and bytes. Either may
    be asynchronous with respect to the provider's queue as long as ``to_host`` returns data
    that is complete.
    """

    to_device: Callable[[Any], Any]
    to_host: Callable[[Any], Any]
