"""InferenceSession, SessionOptions, RunOptions: named and behaving as onnxruntime's."""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import logging
import os
import re
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from . import _SEVERITY_LEVELS, epcontext, optimizer
from . import devices as devices_
from . import policy as policy_
from ._enum import OrtEnum
from .binding import IOBinding
from .errors import EPFail, Fail, InvalidArgument, InvalidGraph, NoSuchProvider, OrtError
from .graph.load import MAP_TYPES, ModelSource, load_model
from .graph.view import GraphView
from .lora import LoraAdapter, with_adapters
from .memory import OrtValue
from .partition import CPU_PROVIDER, BoundProvider, NodePlacement, Placement, partition
from .plan import Plan, PlanRunner, _claim_io
from .plugins import registry
from .progress import progress
from .types import HOST_MEMORY, DataTransfer, Kernel, KernelRequest, ProviderContext

logger = logging.getLogger("ort_core")

DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
#: session config key: constant folding leaves a node whose outputs would take more bytes
#: (default ``optimizer.MAX_FOLD_BYTES``, onnxruntime's 1 GiB)
MAX_FOLD_BYTES = "session.max_fold_bytes"
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


class GraphOptimizationLevel(OrtEnum):
    """onnxruntime's levels. ``ORT_ENABLE_LAYOUT`` (onnxruntime's layout transformations, such
    as NCHWc) runs the extended passes here: this runtime's providers choose their layouts
    inside their kernels and groups."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(OrtEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(OrtEnum):
    """onnxruntime's node orders; ort-core runs a plan in one topological order for every value."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


#: ``ModelMetadata.version`` of a model without ``model_version``, as onnxruntime gives it
_UNSET_VERSION = 2**63 - 1


def _enum_option(kind: type[OrtEnum]) -> Any:
    def convert(name: str, value: Any) -> OrtEnum:
        if isinstance(value, kind):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and int(value) in kind._value2member_map_:
            return kind(int(value))
        raise TypeError(f"SessionOptions.{name} takes a {kind.__name__} ({', '.join(m.name for m in kind)}), "
                        f"got {value!r}")
    return convert


def _int_option(name: str, value: Any) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"SessionOptions.{name} takes an int, got {type(value).__name__} {value!r}")


def _severity_option(name: str, value: Any) -> int:
    level = _int_option(name, value)
    if not -1 <= level <= 4:
        raise InvalidArgument(f"SessionOptions.{name} is {level}: the severities are 0 (verbose) to 4 (fatal), "
                              "-1 for the default logger's")
    return level


def _bool_option(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and int(value) in (0, 1)):
        return bool(value)
    raise TypeError(f"SessionOptions.{name} takes a bool, got {type(value).__name__} {value!r}")


def _str_option(name: str, value: Any) -> str:
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise TypeError(f"SessionOptions.{name} takes a str, got {type(value).__name__} {value!r}")


#: SessionOptions' public attributes and the conversion each value goes through: a name that is
#: not one is an AttributeError and a value of another type a TypeError, as onnxruntime's
#: (pybind11) options refuse them (a typo such as ``intra_op_thread`` was silently kept)
_SESSION_OPTIONS: dict[str, Any] = {
    "graph_optimization_level": _enum_option(GraphOptimizationLevel),
    "execution_mode": _enum_option(ExecutionMode),
    "execution_order": _enum_option(ExecutionOrder),
    "intra_op_num_threads": _int_option, "inter_op_num_threads": _int_option,
    "log_severity_level": _severity_option, "log_verbosity_level": _int_option,
    "logid": _str_option, "optimized_model_filepath": _str_option, "profile_file_prefix": _str_option,
    "enable_profiling": _bool_option, "enable_mem_pattern": _bool_option, "enable_cpu_mem_arena": _bool_option,
    "use_deterministic_compute": _bool_option, "enable_mem_reuse": _bool_option, "use_per_session_threads": _bool_option,
}


class SessionOptions:
    """Options of a session, as onnxruntime's ``SessionOptions``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            convert = _SESSION_OPTIONS.get(name)
            if convert is None:
                raise AttributeError(f"'SessionOptions' object has no attribute {name!r}; its options are: "
                                     f"{', '.join(sorted(_SESSION_OPTIONS))}")
            value = convert(name, value)
        object.__setattr__(self, name, value)

    def __init__(self) -> None:
        self.graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads: int = 0
        self.inter_op_num_threads: int = 0
        self.execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level: int = -1  # onnxruntime's default: the default logger's (warning)
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.optimized_model_filepath: str = ""
        self.enable_profiling: bool = False
        self.profile_file_prefix: str = "onnxruntime_profile_"
        self.enable_mem_pattern: bool = True
        self.enable_cpu_mem_arena: bool = True
        # accepted as onnxruntime's and kept: a plan runs its steps in one fixed order and its
        # kernels are deterministic, reuses memory by lifetimes, and runs on per-session threads
        # unless use_per_session_threads is False (then set_global_thread_pool_sizes' counts)
        self.use_deterministic_compute: bool = False
        self.enable_mem_reuse: bool = True
        self.use_per_session_threads: bool = True
        self.execution_order: ExecutionOrder = ExecutionOrder.DEFAULT
        self._initializers: dict[str, OrtValue] = {}
        self._external_initializers: dict[str, np.ndarray] = {}
        self._external_files: dict[str, bytes] = {}
        self._denotations: dict[str, int] = {}
        self._cancel = False
        self._ep_context_read: tuple[Any, int] | None = None
        self._config: dict[str, str] = {}
        self._free_dimensions: dict[str, int] = {}
        self._providers: list[tuple[str, dict[str, Any]]] = []
        self._provider_devices: dict[str, Any] = {}  # provider -> the EpDevice given for it
        self._policy: Any = None  # an OrtExecutionProviderDevicePolicy
        self._delegate: Any = None

    def add_provider(self, provider_name: str, provider_options: Mapping[str, Any] | None = None) -> None:
        """Use ``provider_name`` with ``provider_options`` in sessions made with these options and
        no ``providers`` argument (onnxruntime's ``SessionOptions.add_provider``); providers are
        tried in the order added."""
        if any(n == provider_name for n, _ in self._providers):
            raise InvalidArgument(f"add_provider: {provider_name!r} was already added")
        devices_.check_known_provider(str(provider_name), registry().available())
        self._providers.append((str(provider_name), dict(provider_options or {})))

    def add_provider_for_devices(self, ep_devices: Sequence[Any], provider_options: Mapping[str, Any] | None = None) -> None:
        """Use the provider of ``ep_devices`` (items of ``get_ep_devices()``, all of one
        provider) on the first of them, with ``provider_options``."""
        from .devices import as_ep_device

        try:
            devices = [as_ep_device(d) for d in ep_devices]
        except TypeError as exc:
            raise InvalidArgument(f"add_provider_for_devices: {exc}") from None
        names = sorted({d.ep_name for d in devices})
        if len(names) != 1:
            raise InvalidArgument(f"add_provider_for_devices needs devices of one provider, got {names or 'none'}")
        self.add_provider(names[0], provider_options)
        self._provider_devices[names[0]] = devices[0]

    def set_provider_selection_policy(self, policy: Any) -> None:
        """Let the policy (``OrtExecutionProviderDevicePolicy``) choose the providers of sessions
        made without ``providers`` (see ``ort_core.policy``)."""
        from .policy import OrtExecutionProviderDevicePolicy

        try:
            self._policy = OrtExecutionProviderDevicePolicy(int(policy))
        except (TypeError, ValueError):
            raise InvalidArgument(f"set_provider_selection_policy: {policy!r} is not an OrtExecutionProviderDevicePolicy; "
                                  f"valid: {', '.join(p.name for p in OrtExecutionProviderDevicePolicy)}") from None

    def set_provider_selection_policy_delegate(self, delegate: Any) -> None:
        """Let ``delegate(ep_devices, model_metadata, runtime_metadata, max_selections)`` return
        the devices (in priority order) of sessions made without ``providers``."""
        if not callable(delegate):
            raise InvalidArgument(f"set_provider_selection_policy_delegate needs a callable, got {type(delegate).__name__}")
        self._delegate = delegate

    def has_providers(self) -> bool:
        """True when providers were added (``add_provider``, ``add_provider_for_devices``)."""
        return bool(self._providers)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic dimension ``dim_name`` of the graph's inputs to ``dim_value``: the
        optimizer then knows it (shape computations on it fold), and inputs must have it."""
        if int(dim_value) < 0:
            raise InvalidArgument(f"free dimension override {dim_name!r}: value {dim_value} is negative")
        self._free_dimensions[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Fix every graph-input dimension whose denotation is ``dim_denotation`` (e.g.
        "DATA_BATCH") to ``dim_value``, as ``add_free_dimension_override_by_name`` does by name."""
        if int(dim_value) < 0:
            raise InvalidArgument(f"free dimension override {dim_denotation!r}: value {dim_value} is negative")
        self._denotations[str(dim_denotation)] = int(dim_value)

    def add_initializer(self, name: str, ortvalue: OrtValue) -> None:
        """Use ``ortvalue`` (a host OrtValue) as the initializer ``name`` of sessions made with
        these options; a name the model lacks is ignored, as in onnxruntime."""
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgument(f"add_initializer {name!r}: expected an OrtValue, got {type(ortvalue).__name__}")
        self._initializers[str(name)] = ortvalue

    def add_external_initializers(self, names: Sequence[str], ortvalues: Sequence[OrtValue]) -> None:
        """The data of the model's external-data initializers ``names`` (so a model given as
        bytes with external data loads); replacing an initializer whose data is inline is an error."""
        if len(names) != len(ortvalues):
            raise InvalidArgument(f"add_external_initializers: {len(names)} names but {len(ortvalues)} values")
        for name, value in zip(names, ortvalues):
            if not isinstance(value, OrtValue):
                raise InvalidArgument(f"add_external_initializers {name!r}: expected an OrtValue, got {type(value).__name__}")
            self._external_initializers[str(name)] = value.numpy()

    def add_external_initializers_from_files_in_memory(self, file_names: Sequence[str], buffer_array: Sequence[Any],
                                                       file_lengths: Sequence[int]) -> None:
        """The model's external data files, given in memory: ``file_names[k]`` (as the model's
        ``location`` names it) is the first ``file_lengths[k]`` bytes of ``buffer_array[k]``."""
        if not len(file_names) == len(buffer_array) == len(file_lengths):
            raise InvalidArgument("add_external_initializers_from_files_in_memory: the three lists differ in length")
        for name, buffer, length in zip(file_names, buffer_array, file_lengths):
            self._external_files[str(name)] = bytes(memoryview(buffer).cast("B")[: int(length)])

    def _snapshot(self) -> SessionOptions:
        """A copy whose settings later changes to this one do not reach (its tables copied,
        the values in them shared): what a session keeps of the options it was made with."""
        copy = object.__new__(SessionOptions)
        copy.__dict__.update({key: dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list)
                              else value for key, value in self.__dict__.items()})
        return copy

    def set_load_cancellation_flag(self, value: bool) -> None:
        """True cancels the making of sessions with these options (``ModelLoadCanceled``)."""
        self._cancel = bool(value)

    def register_custom_ops_library(self, library_path: str) -> None:
        """Refused: custom-op libraries are native code written against onnxruntime's C kernel
        API, which ort-core does not have; a provider plugin that claims the op runs it here."""
        from .errors import NotImplemented as OrtNotImplemented

        raise OrtNotImplemented(f"register_custom_ops_library({library_path!r}): ort-core cannot load onnxruntime custom-op "
                             "libraries (native code against onnxruntime's C kernel API); implement the op in a provider "
                             "plugin (ort-core new-provider NAME) that claims it")

    def set_ep_context_data_read_func(self, read_func: Any, max_data_size: int) -> None:
        """Read EPContext nodes' external blob files through ``read_func(path, buffer)`` instead
        of from disk; ``buffer`` is an ``OrtEpContextDataBuffer`` (``max_data_size`` bytes at most)."""
        if not callable(read_func):
            raise InvalidArgument(f"set_ep_context_data_read_func needs a callable, got {type(read_func).__name__}")
        self._ep_context_read = (read_func, int(max_data_size))

    def clear_ep_context_data_read_func(self) -> None:
        self._ep_context_read = None

    @property
    def free_dimension_overrides(self) -> dict[str, int]:
        return dict(self._free_dimensions)

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"session config entry {key!r} is not set")
        return self._config[key]

    @property
    def config_entries(self) -> dict[str, str]:
        return dict(self._config)

    def copy(self) -> SessionOptions:
        """An independent copy (ModelCompiler changes its copy, not the caller's options)."""
        other = SessionOptions.__new__(SessionOptions)
        other.__dict__.update({k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                               for k, v in self.__dict__.items()})
        return other


class RunOptions:
    """Options of one run, as onnxruntime's ``RunOptions``."""

    def __init__(self) -> None:
        self.log_severity_level: int = -1  # onnxruntime's default: the session's
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.run_tag: str = ""
        self.terminate: bool = False
        #: run only the nodes the requested outputs need (onnxruntime runs them all by default)
        self.only_execute_path_to_fetches: bool = False
        self._config: dict[str, str] = {}
        self._adapters: list[LoraAdapter] = []  # add_active_adapter's

    def add_active_adapter(self, adapter: LoraAdapter) -> None:
        """Feed ``adapter``'s parameters (a loaded ``LoraAdapter``) to the runs made with these
        options, by name; adapters added later win where names repeat."""
        if not isinstance(adapter, LoraAdapter):
            raise InvalidArgument(f"add_active_adapter needs an ort_core.LoraAdapter, got {type(adapter).__name__}")
        adapter.parameters  # noqa: B018  (refused here when nothing was loaded)
        self._adapters.append(adapter)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"run config entry {key!r} is not set")
        return self._config[key]


#: the names onnx's shape inference gives dimensions nothing names (onnxruntime reports None)
_UNNAMED_DIM = re.compile(r"unk__\d+")


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output: name, type string and shape (ints, dim names or None; [] where
    the shape is unknown or the value is not a tensor, as onnxruntime reports them)."""

    name: str
    type: str
    shape: list[int | str | None]

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


def _fresh(arg: NodeArg) -> NodeArg:
    """A copy of ``arg`` with its own shape list: a caller changing one changed the session's."""
    return NodeArg(arg.name, arg.type, list(arg.shape))


@dataclass
class ModelMetadata:
    """The model's metadata (``InferenceSession.get_modelmeta``): the session's one object,
    whose fields may be set, as onnxruntime's (a later call sees what was set)."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# providers argument
# --------------------------------------------------------------------------------------------


def _normalise_providers(
    providers: Sequence[str | tuple[str, Mapping[str, Any]]] | None,
    provider_options: Sequence[Mapping[str, Any]] | None,
) -> list[tuple[str, dict[str, Any]]]:
    if providers is None:
        if provider_options is not None:
            raise InvalidArgument("provider_options given without providers")
        return []
    if isinstance(providers, str):
        raise InvalidArgument("providers must be a list, e.g. ['CPUExecutionProvider']")
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgument(
            f"providers has {len(providers)} entries but provider_options has {len(provider_options)}"
        )
    result: list[tuple[str, dict[str, Any]]] = []
    for k, entry in enumerate(providers):
        if isinstance(entry, str):
            name, options = entry, {}
        elif isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str):
            name, options = entry[0], dict(entry[1] or {})
        else:
            raise InvalidArgument(f"providers[{k}] must be a name or a (name, options) pair, got {entry!r}")
        if provider_options is not None:
            if options:
                raise InvalidArgument(f"{name}: options given both in providers and provider_options")
            options = dict(provider_options[k] or {})
        if any(name == n for n, _ in result):  # onnxruntime keeps the first ([choice, CPU] with choice CPU)
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", UserWarning, stacklevel=4)
            continue
        result.append((name, options))
    return result


def validate_options(spec_name: str, schema: Sequence[Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Check option keys against the provider's schema and parse the values."""
    by_key = {o.name: o for o in schema}
    result = {o.name: o.default for o in schema}
    for key, value in options.items():
        option = by_key.get(key)
        if option is None:
            valid = ", ".join(sorted(by_key)) or "(none)"
            raise InvalidArgument(f"{spec_name}: unknown provider option {key!r}; valid keys: {valid}")
        try:
            parsed = option.parse(value)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"{spec_name}: bad value {value!r} for option {key!r}: {exc}") from None
        if option.choices is not None and parsed not in option.choices:
            valid = ", ".join(map(str, option.choices))
            raise InvalidArgument(
                f"{spec_name}: bad value {value!r} for option {key!r}; valid values: {valid}"
            )
        result[key] = parsed
    return result


# --------------------------------------------------------------------------------------------
# the session
# --------------------------------------------------------------------------------------------


class _GraphCompiler:
    """Partition, kernels and plan for a graph and, through kernels, its bodies."""

    def __init__(self, providers: list[BoundProvider], transfers: dict[str, DataTransfer],
                 model_path: str | None = None):
        self.providers = providers
        self.transfers = transfers
        self.model_path = model_path
        self.placements: list[NodePlacement] = []
        self.copies: list = []
        self.last: tuple[Any, list[Kernel]] | None = None  # the last graph compiled (the main one, last)
        self.by_graph: dict[int, tuple[GraphView, Any, list[Kernel]]] = {}  # id(graph) -> its placement

    def compile(self, graph: GraphView, io_memory: str = HOST_MEMORY) -> Plan:
        excluded: dict[str, dict[int, str]] = {}
        built: dict[tuple[str, tuple[int, ...], bool], Kernel] = {}
        # kernel creation may fail; the nodes are then declined for that provider and offered on
        for _ in range(len(graph.nodes) * len(self.providers) + 1):
            assignment = partition(graph, self.providers, excluded)
            failed = False
            kernels: list[Kernel] = []
            to_compile = sum(1 for bp, c in assignment.claims if c.fuse and (bp.name, c.nodes, c.fuse) not in built)
            claims = assignment.claims
            if to_compile >= 2:  # compiling groups can take seconds each: show it on a terminal
                claims = progress(claims, desc=f"building kernels ({to_compile} fused groups)")
            for bp, claim in claims:
                key = (bp.name, claim.nodes, claim.fuse)
                kernel = built.get(key)
                if kernel is None:
                    try:
                        kernel = self._create_kernel(bp, graph, claim.nodes, claim.fuse)
                    except Exception as exc:
                        if epcontext.is_context_node(graph.nodes[claim.nodes[0]], bp.name):
                            # a compiled blob its own provider cannot load: no other provider can
                            # run it, so the provider's error is the session's
                            if isinstance(exc, OrtError):
                                raise
                            raise EPFail(f"{bp.name}: cannot load {graph.nodes[claim.nodes[0]].name!r}: "
                                         f"{type(exc).__name__}: {exc}") from exc
                        reason = f"kernel creation failed: {type(exc).__name__}: {exc}"
                        logger.warning("%s: %s", bp.name, reason)
                        for i in claim.nodes:
                            excluded.setdefault(bp.name, {})[i] = reason
                        failed = True
                        continue
                    built[key] = kernel
                kernels.append(kernel)
            if not failed:
                break
        plan = Plan(graph, assignment, kernels, self.transfers, io_memory)
        self._record(graph, assignment, kernels)
        self.last = (assignment, kernels)
        self.by_graph[id(graph)] = (graph, assignment, kernels)
        self.copies.extend(plan.copies)
        return plan

    def _create_kernel(self, bp: BoundProvider, graph: GraphView, nodes: tuple[int, ...], fused: bool) -> Kernel:
        inputs, outputs = _claim_io(graph, nodes, fused)
        views = tuple(graph.nodes[i] for i in nodes)
        request = KernelRequest(
            graph=graph,
            nodes=views,
            inputs=inputs,
            outputs=outputs,
            fused=fused,
            implicit_inputs=views[0].implicit_inputs if not fused else (),
            model_path=self.model_path,
            _build_subgraph=lambda sub: PlanRunner(self.compile(sub, bp.memory)),
            _to_model=lambda: graph.group_to_model(nodes),
        )
        kernel = bp.hooks.ort_create_kernel(ep=bp.ctx, request=request)
        if kernel is None:
            raise EPFail(f"{bp.name} claimed {views[0].name!r} ({views[0].op_type}) but built no kernel for it")
        if not isinstance(kernel, Kernel):
            raise EPFail(f"{bp.name} returned {type(kernel).__name__}, not a Kernel")
        return kernel

    def _record(self, graph: GraphView, assignment, kernels: list[Kernel]) -> None:
        group_ids: dict[int, int] = {}
        for c, (_, claim) in enumerate(assignment.claims):
            if claim.fuse and len(claim.nodes) > 1:
                group_ids[c] = len(group_ids)
        for node in graph.nodes:
            c = assignment.node_claim[node.index]
            bp, _ = assignment.claims[c]
            self.placements.append(
                NodePlacement(
                    name=node.name,
                    op_type=node.op_type,
                    domain=node.domain,
                    opset=node.opset,
                    provider=bp.name,
                    declined=dict(assignment.declined[node.index]),
                    group=group_ids.get(c),
                    graph=graph.path,
                    note=kernels[c].note,
                )
            )


_collector_lock = threading.Lock()
_collector_pauses = 0  # sessions being made now, in any thread, with the collector paused by us


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a session is made. Creation makes hundreds
    of thousands of IR objects (nodes and values refer to each other), and each collection the
    allocations trigger walks every object the process holds: on a detection model that was
    half of creation (layout-picodet 411 -> 214 ms). What creation leaves is collected as usual
    after it. Reference-counted memory is freed as ever; only cycles wait. The collector is
    turned back on by the last creation that paused it, and never if it was off before."""
    global _collector_pauses
    with _collector_lock:
        paused = gc.isenabled() or _collector_pauses > 0
        if paused:
            _collector_pauses += 1
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _collector_lock:
                _collector_pauses -= 1
                if _collector_pauses == 0:
                    gc.enable()


def _set_log_level(severity: int) -> None:
    """A session's own severity (0-4) sets the ``ort_core`` loggers' level, for the process (the
    loggers are the process's: a later session at another severity sets it again); the default,
    -1, leaves it as it is, ``set_default_logger_severity``'s (each session had reset it to
    warning)."""
    level = _SEVERITY_LEVELS.get(int(severity))
    if level is not None:
        logger.setLevel(level)


class InferenceSession:
    """Runs one model with nodes spread over the providers in priority order.

    ``path_or_bytes`` is a file path, the model's bytes or an ``onnx.ModelProto``.
    ``providers`` lists provider names or ``(name, options)`` pairs in priority order; the CPU
    provider is added last when installed (unless ``session.disable_cpu_ep_fallback`` is "1"
    and other providers are given). ``provider_options`` is the alternative list of options.
    """

    def __init__(
        self,
        path_or_bytes: ModelSource,
        sess_options: SessionOptions | None = None,
        providers: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        self._fallback = str(kwargs.pop("enable_fallback", 1)) == "1"
        self._create(path_or_bytes, sess_options, providers, provider_options, **kwargs)

    def _create(
        self,
        path_or_bytes: ModelSource,
        sess_options: SessionOptions | None,
        providers: Sequence[str | tuple[str, Mapping[str, Any]]] | None,
        provider_options: Sequence[Mapping[str, Any]] | None,
        **kwargs: Any,
    ) -> None:
        """Make the session; with fallback enabled (onnxruntime's default) a provider failure
        (``EPFail``, not strict mode's) is warned about and the session made on the CPU
        provider alone, as onnxruntime does."""
        if sess_options is not None:
            _set_log_level(sess_options.log_severity_level)
        with _collector_paused():
            try:
                self._build(path_or_bytes, sess_options, providers, provider_options, **kwargs)
            except EPFail as exc:
                if not self._fallback or self._strict or self.__dict__.get("_bound_names", [CPU_PROVIDER]) == [CPU_PROVIDER]:
                    raise
                warnings.warn(f"EP Error {exc} when using {self._bound_names}; falling back to [{CPU_PROVIDER!r}] "
                              "and retrying (disable_fallback() or enable_fallback=0 makes this an error)",
                              UserWarning, stacklevel=3)
                self._fallback = False  # fallback only once, as onnxruntime
                self._build(path_or_bytes, sess_options, [CPU_PROVIDER], None, **kwargs)

    def _build(
        self,
        path_or_bytes: ModelSource,
        sess_options: SessionOptions | None,
        providers: Sequence[str | tuple[str, Mapping[str, Any]]] | None,
        provider_options: Sequence[Mapping[str, Any]] | None,
        **kwargs: Any,
    ) -> None:
        self._bound_names = [CPU_PROVIDER]
        self._modelmeta: ModelMetadata | None = None  # get_modelmeta's, made at its first call
        # a snapshot, as onnxruntime keeps one: later changes to the caller's options reach
        # neither get_session_options() nor set_providers(); its cancellation flag still does
        self._given_options = sess_options
        self._options = sess_options._snapshot() if sess_options is not None else SessionOptions()
        self._config = self._options.config_entries
        self._strict = self._config.get(DISABLE_CPU_FALLBACK, "0") == "1"
        self._start_profile()
        self._lock = threading.Lock()

        self._source = path_or_bytes  # set_providers makes the session again from it
        self._check_canceled()
        disabled = kwargs.pop("disabled_optimizers", None) or ()
        if isinstance(disabled, str):
            disabled = [disabled]
        unknown = sorted(set(disabled) - set(optimizer.ORT_OPTIMIZER_NAMES))
        if unknown:  # onnxruntime ignores names it has no transformer for; said here
            warnings.warn(f"disabled_optimizers: no optimization here is named {', '.join(unknown)}; the names "
                          f"known: {', '.join(sorted(optimizer.ORT_OPTIMIZER_NAMES))}", UserWarning, stacklevel=4)
        self._disabled_optimizers = frozenset(disabled)
        # onnxruntime's keyword (or its environment variable): session options from the model's
        # "ort_config" metadata
        self._read_config_from_model = str(kwargs.pop("read_config_from_model",
                                                      os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL", "0"))).strip() == "1"
        if kwargs:  # onnxruntime ignores keywords it does not read; said here
            warnings.warn(f"InferenceSession: ignoring unknown keyword arguments {', '.join(map(repr, kwargs))}; the "
                          "keywords read: disabled_optimizers, enable_fallback, read_config_from_model",
                          UserWarning, stacklevel=4)
        if providers is None and provider_options is None and self._options._providers:
            providers = list(self._options._providers)
        requested = _normalise_providers(providers, provider_options)
        self._chosen_devices: dict[str, Any] = dict(self._options._provider_devices)
        requested, chosen, self._selection = policy_.select(self._options, path_or_bytes, requested)
        self._chosen_devices.update(chosen)
        self._bound_names = [n for n, _ in requested] or [CPU_PROVIDER]
        self._model_path = os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else None
        context = epcontext.context_settings(self._config, self._model_path)
        load_start = time.perf_counter_ns()
        self._model: ir.Model = load_model(path_or_bytes, self._options._external_initializers,
                                           self._options._external_files)
        self._load_span = (load_start, time.perf_counter_ns())  # (the profile's model_loading event)
        self._check_canceled()
        if self._read_config_from_model and _options_from_model(self._model, self._options):
            self._start_profile()
        _override_free_dimensions(self._model.graph, self._options.free_dimension_overrides, self._options._denotations)
        _override_initializers(self._model.graph, self._options._initializers)
        self._providers = self._bind_providers(requested)
        try:  # after binding: fusions ask the first provider whether it claims the fused op
            supports = optimizer.provider_gate(self._providers, dict(self._model.opset_imports), self._model.ir_version)
            optimizer.optimize(self._model, self._options.graph_optimization_level, supports,
                               _byte_count(self._config, MAX_FOLD_BYTES, optimizer.MAX_FOLD_BYTES),
                               self._disabled_optimizers)
            if self._options.optimized_model_filepath:
                ir.save(self._model, self._options.optimized_model_filepath)
        except OrtError:
            self._end_providers()
            raise
        except ir.passes.PassError as exc:  # a pass met a graph it does not expect: named
            self._end_providers()
            cause = exc.__cause__ or exc
            raise InvalidGraph(f"graph optimization failed: {type(cause).__name__}: {cause}") from exc
        except BaseException:
            self._end_providers()
            raise
        self._graph = GraphView(
            self._model.graph,
            opset_imports=dict(self._model.opset_imports),
            ir_version=self._model.ir_version,
        )
        self._compiler = _GraphCompiler(self._providers, self._transfers, self._model_path)
        token = epcontext.READ_FUNC.set(self._options._ep_context_read)
        try:
            self._plan = self._compiler.compile(self._graph)
        except BaseException:
            self._end_providers()
            raise
        finally:
            epcontext.READ_FUNC.reset(token)
        self._placement = Placement(
            [bp.name for bp in self._providers], self._compiler.placements, self._compiler.copies
        )
        self._check_fallback(requested)
        if self._selection is not None:
            self._placement.selection = self._selection
        if context is not None:
            try:
                proto, files, _ = self._context_model(context.embed, context.path.stem)
                epcontext.save_context_model(proto, files, context.path)
            except BaseException:
                self._end_providers()
                raise
            self._placement.context_model = str(context.path)
        self._finalizer = weakref.finalize(self, _end_session, list(self._providers))
        self._run_hooks = [
            bp for bp in self._providers
            if bp.hooks.implemented("ort_run_start") or bp.hooks.implemented("ort_run_end")
        ]
        self._inputs = self._node_args(self._graph.inputs)
        self._outputs = self._node_args(self._graph.outputs)
        self._input_checks = [self._input_check(name) for name in self._graph.inputs]
        self._input_names = frozenset(self._graph.inputs)
        # inputs of optional type may be left out of a feed (they then hold no value), as in onnxruntime
        self._optional_inputs = frozenset(name for name, _, _, type_str in self._input_checks
                                          if type_str.startswith("optional("))
        initializers = set(self._graph.initializers)
        self._overridable = [a for a in self._inputs if a.name in initializers]
        self._required = [a.name for a in self._inputs if a.name not in initializers]
        self._device_plans: dict[tuple, Plan] = {}
        self._pruned_plans: dict[tuple, Plan] = {}
        # the per-run fast path of _prepare_feeds: a dict of host arrays of the dtypes the
        # inputs declare and of shapes already checked (name -> shapes), for models whose
        # inputs are all required tensors; anything else takes the full checks
        self._feed_shapes: dict[str, set] | None = None
        if not self._overridable and all(dtype is not None for _, dtype, _, _ in self._input_checks):
            self._feed_shapes = {name: set() for name in self._graph.inputs}
        self._feed_dtypes = [(name, dtype) for name, dtype, _, _ in self._input_checks]
        self._created_at = time.perf_counter_ns()  # (the profile's session_initialization event)

    # ------------------------------------------------------------------ creation
    def _context_model(self, embed: bool, file_stem: str):
        """The EPContext model of this session's main graph (see ``ort_core.epcontext``)."""
        assignment, kernels = self._compiler.last
        return epcontext.context_model(self._model, self._graph, assignment, kernels, embed, file_stem,
                                       self._compiler.by_graph)

    def _start_profile(self) -> None:
        self._profile: list | None = [] if self._options.enable_profiling else None
        # (0 where profiling is off, as onnxruntime's get_profiling_start_time_ns)
        self._profile_start = time.perf_counter_ns() if self._options.enable_profiling else 0
        # (the profile's times count from _profile_start; the start itself is told in wall-clock
        # nanoseconds since the epoch, as onnxruntime 1.32 tells it)
        self._profile_start_epoch_ns = time.time_ns() if self._options.enable_profiling else 0

    def _check_canceled(self) -> None:
        from .errors import ModelLoadCanceled

        if (self._given_options or self._options)._cancel:
            raise ModelLoadCanceled("session creation canceled: SessionOptions.set_load_cancellation_flag(True) is set")

    def _bind_providers(self, requested: list[tuple[str, dict[str, Any]]]) -> list[BoundProvider]:
        reg = registry()
        installed = reg.providers()
        if not installed:
            failures = "; ".join(f"{f.package or f.plugin}: {f.error}" for f in reg.failures)
            raise NoSuchProvider(
                "no execution provider is installed: install one, e.g. `pip install ort-ep-cpu`"
                + (f" (plugins that failed to load: {failures})" if failures else "")
            )
        names = [n for n, _ in requested]
        if not requested:
            if CPU_PROVIDER not in installed:
                raise NoSuchProvider(
                    f"no providers given and {CPU_PROVIDER} is not installed; pass providers=[...] "
                    f"from the installed ones: {', '.join(installed)}"
                )
            requested = [(CPU_PROVIDER, {})]
        elif CPU_PROVIDER not in names and CPU_PROVIDER in installed:
            # in strict mode too: partitioning then names the nodes that would fall back
            requested = [*requested, (CPU_PROVIDER, {})]

        bound: list[BoundProvider] = []
        self._transfers: dict[str, DataTransfer] = {}
        threads = int(self._options.intra_op_num_threads or 0)
        if not threads and not self._options.use_per_session_threads:
            from . import _GLOBAL_THREAD_POOL

            threads = _GLOBAL_THREAD_POOL["intra_op_num_threads"]
        for name, options in requested:
            reg_provider = installed.get(name)
            if reg_provider is None:  # onnxruntime warns and runs on the rest; typos and strict mode raise
                warnings.warn(devices_.missing_provider(name, list(installed), reg.failures, self._strict),
                              UserWarning, stacklevel=3)
                continue
            spec = reg_provider.spec
            parsed = validate_options(name, spec.options, options)
            devices = reg.devices(name)
            if not devices.devices:
                message = f"{name} is installed but cannot run here: {devices.unavailable_reason}"
                if self._strict:
                    raise EPFail(message)
                logger.warning("%s; skipping it", message)
                continue
            device = self._chosen_devices.get(name) or self._pick_device(name, devices.devices, parsed)
            ctx = ProviderContext(
                name=name, options=parsed, device=device,
                # SessionOptions.enable_cpu_mem_arena reaches providers as this config entry
                # (or the kind of allocator registered to share, where the session takes it)
                session_config={"session.enable_cpu_mem_arena": str(int(self._uses_arena(name))), **self._config},
                intra_op_num_threads=threads,
            )
            bp = BoundProvider(ctx, spec, reg_provider.hooks)
            try:
                # a cross-cutting plugin (no provider of its own) that raises here is skipped and
                # named in plugin_failures(); it must not fail every provider's sessions
                bp.hooks.call_contained("ort_session_start", ep=ctx)
                bp.allocator = bp.hooks.call_contained("ort_create_allocator", ep=ctx)
                if device.memory != HOST_MEMORY:
                    bp.data_transfer = bp.hooks.ort_create_data_transfer(ep=ctx)
                    if bp.data_transfer is None:
                        raise EPFail(f"{name}: device memory {device.memory!r} but no data transfer hook")
                    self._transfers[device.memory] = bp.data_transfer
            except OrtError as exc:
                self._end_providers(bound + [bp])
                raise EPFail(f"{name}: {exc}") from exc
            except Exception as exc:
                self._end_providers(bound + [bp])
                raise EPFail(f"{name} failed to start: {type(exc).__name__}: {exc}") from exc
            bound.append(bp)
        if not bound:
            raise EPFail("none of the requested providers can run here: " + ", ".join(n for n, _ in requested))
        return bound

    def _uses_arena(self, provider: str) -> bool:
        """Whether ``provider``'s host memory is an arena: ``enable_cpu_mem_arena``, or where
        the session takes the allocators registered to share (``session.use_env_allocators``)
        and one is registered for it, whether that one is an arena allocator."""
        shared = devices_.shared_allocator(provider) if self._config.get(devices_.USE_ENV_ALLOCATORS) == "1" else None
        if shared is not None:
            return shared[0].allocator_type == devices_.OrtAllocatorType.ORT_ARENA_ALLOCATOR
        return bool(self._options.enable_cpu_mem_arena)

    @staticmethod
    def _pick_device(name: str, devices: Sequence[Any], options: Mapping[str, Any]):
        wanted = options.get("device_id")
        if wanted is None:
            return devices[0]
        for d in devices:
            if d.device_id == int(wanted):
                return d
        ids = ", ".join(str(d.device_id) for d in devices)
        raise InvalidArgument(f"{name}: device_id {wanted} not present; devices here: {ids}")

    def _end_providers(self, providers: list[BoundProvider] | None = None) -> None:
        _end_session(providers if providers is not None else self._providers)

    def _check_fallback(self, requested: list[tuple[str, dict[str, Any]]]) -> None:
        accelerators = [bp.name for bp in self._providers if bp.name != CPU_PROVIDER]
        if self._strict and accelerators:
            on_cpu = [p for p in self._placement.nodes if p.provider == CPU_PROVIDER]
            if on_cpu:
                listed = ", ".join(f"{p.name} ({p.op_type})" for p in on_cpu)
                self._end_providers()
                raise EPFail(
                    f"{DISABLE_CPU_FALLBACK} is set and {len(on_cpu)} node(s) would fall back to "
                    f"{CPU_PROVIDER}: {listed}"
                )
        for name in accelerators:
            line = self._placement.fallback_summary(name)
            if line:
                logger.warning(line)

    # ------------------------------------------------------------------ io metadata
    def _node_args(self, names: Sequence[str]) -> list[NodeArg]:
        """onnxruntime's NodeArgs: a map value's type as the model declares it (the IR holds
        none), the shape [] where unknown or not a tensor's, and None for a dimension nothing
        names (onnx's inference calls such dimensions unk__N)."""
        map_types = self._model.graph.meta.get(MAP_TYPES, {})
        args = []
        for name in names:
            v = self._graph.value(name)
            type_string = map_types.get(name, v.type)
            if v.shape is None or not type_string.startswith(("tensor(", "optional(tensor(")):
                shape: list[int | str | None] = []
            else:
                shape = [None if isinstance(d, str) and _UNNAMED_DIM.fullmatch(d) else d for d in v.shape]
            args.append(NodeArg(name, type_string, shape))
        return args

    def _input_check(self, name: str) -> tuple[str, np.dtype | None, tuple | None, str]:
        v = self._graph.value(name)
        return (name, v.dtype, v.shape, v.type)

    # ------------------------------------------------------------------ public API
    def set_providers(self, providers: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
                      provider_options: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Make the session again on ``providers`` (onnxruntime's ``set_providers``): the old
        providers are released, the model is placed and planned anew."""
        if providers is None:
            providers = [CPU_PROVIDER]
        available = registry().available()
        for name, _ in _normalise_providers(providers, provider_options):  # before the old session ends
            devices_.check_known_provider(name, available)
        self._finalizer()  # ort_session_end for the old providers
        self._create(self._source, self._options, providers, provider_options,
                     disabled_optimizers=self._disabled_optimizers,
                     read_config_from_model=int(self._read_config_from_model))

    def disable_fallback(self) -> None:
        """Make a provider failure while making the session (``set_providers``) an error."""
        self._fallback = False

    def enable_fallback(self) -> None:
        """On a provider failure while making the session, warn and use the CPU provider alone."""
        self._fallback = True

    def get_provider_graph_assignment_info(self) -> list[Any]:
        """The placement in onnxruntime's shape: one ``OrtEpAssignedSubgraph`` per fused group
        or run of consecutive nodes on one provider (main graph), each with its
        ``OrtEpAssignedNode``s. Needs ``session.record_ep_graph_assignment_info=1``."""
        from .assignment import assignment_info

        if self._config.get(RECORD_ASSIGNMENT, "0") != "1":
            raise InvalidArgument(f"get_provider_graph_assignment_info needs the session config entry "
                                  f"{RECORD_ASSIGNMENT}=1 set when the session is made")
        return assignment_info(self._placement)

    def get_inputs(self) -> list[NodeArg]:
        return [_fresh(a) for a in self._inputs if a.name in self._required]

    def get_outputs(self) -> list[NodeArg]:
        return [_fresh(a) for a in self._outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [_fresh(a) for a in self._overridable]

    def get_providers(self) -> list[str]:
        return [bp.name for bp in self._providers]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {bp.name: {k: str(v) for k, v in bp.ctx.options.items()} for bp in self._providers}

    def get_session_options(self) -> SessionOptions:
        return self._options

    def get_modelmeta(self) -> ModelMetadata:
        if self._modelmeta is None:
            self._modelmeta = self._metadata_of_model()
        return self._modelmeta

    def _metadata_of_model(self) -> ModelMetadata:
        m = self._model
        return ModelMetadata(
            producer_name=m.producer_name or "",
            graph_name=m.graph.name or "",
            domain=m.domain or "",
            description=m.doc_string or "",
            graph_description=m.graph.doc_string or "",
            # onnxruntime's: INT64_MAX for a model that does not set its version
            version=_UNSET_VERSION if m.model_version is None else int(m.model_version),
            custom_metadata_map=dict(m.metadata_props),
        )

    def get_placement(self) -> Placement:
        """Which provider runs each node, why earlier providers declined it, and the copies."""
        return self._placement

    def get_memory_stats(self) -> dict[str, dict[str, int]]:
        """Peak bytes of live values per memory, plus allocator stats.

        Peaks are measured on the first run of each input shape signature (and on every
        profiled run); repeated runs with the same shapes are not instrumented."""
        stats: dict[str, dict[str, int]] = {
            m: {"peak_bytes": b} for m, b in self._plan.peak_bytes.items()
        }
        for bp in self._providers:
            if bp.allocator is not None:
                a = bp.allocator.stats()
                entry = stats.setdefault(bp.memory, {})
                entry.update({f"allocator_{k}": v for k, v in a.__dict__.items() if v is not None})
        return stats

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Run the model; return the requested outputs (all when ``output_names`` is None).
        Inputs may be OrtValues on a device: they are read where they are."""
        return [_to_output(v) for v in self._run(output_names, input_feed, run_options)]

    def _run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
        output_memory: Mapping[str, tuple[str, DataTransfer]] | None = None,
    ) -> list[Any]:
        """``run`` giving the outputs as the plan leaves them: outputs named in
        ``output_memory`` (name -> (memory, its transfer)) stay in that memory."""
        if run_options is not None and run_options.terminate:
            raise Fail("Exiting due to terminate flag being set to true (run_options.terminate): run refused")
        if run_options is not None and run_options._adapters:
            input_feed = with_adapters(input_feed, run_options._adapters, self._input_names)
        feeds = self._checked_feeds(input_feed)
        if feeds is not None and output_memory is None:
            plan = self._plan  # host arrays in (what _checked_feeds passes), host arrays out
        else:
            if feeds is None:
                feeds = self._prepare_feeds(input_feed)
            plan = self._plan_for(input_feed, output_memory)
        wanted = self._output_indices(output_names)
        if run_options is not None and run_options.only_execute_path_to_fetches and self._profile is None:
            plan = self._pruned(plan, wanted)
            wanted = list(range(len(wanted)))
        started: list[BoundProvider] = []
        try:
            for bp in self._run_hooks:
                _run_hook(bp, "ort_run_start", run_options)
                started.append(bp)
            if self._profile is not None:
                records: list = []
                start = time.perf_counter_ns()
                outputs = plan.run(feeds, track_memory=True, profile=records)
                with self._lock:
                    if self._profile is not None:  # (end_profiling may have ended it during the run)
                        self._profile.append((start, time.perf_counter_ns(), records))
            else:
                outputs = plan.run(feeds)  # memory tracked on each new input-shape signature
        except BaseException:
            # ended for exactly the providers whose start returned; the run's error is the one
            # raised (an ort_run_end failure after it is logged)
            try:
                _end_run(started, run_options)
            except Exception as exc:
                logger.warning("after a failed run: %s", exc)
            raise
        _end_run(started, run_options)
        return _unaliased([outputs[k] for k in wanted], feeds)

    def _plan_for(self, input_feed: Mapping[str, Any],
                  output_memory: Mapping[str, tuple[str, DataTransfer]] | None = None) -> Plan:
        """The plan for where the inputs are and where the outputs go: the session's plan for
        host I/O, else one made (once per combination) whose copy steps start at the device
        inputs' memory and leave bound outputs in theirs (``ort_core.devices``)."""
        devices = {n: v for n, v in input_feed.items() if isinstance(v, OrtValue) and not v.on_host}
        if not devices and not output_memory:
            return self._plan
        key = (tuple(sorted((n, v._memory) for n, v in devices.items())),
               tuple(sorted((n, m) for n, (m, _) in (output_memory or {}).items())))
        plan = self._device_plans.get(key)
        if plan is None:
            transfers = dict(self._transfers)
            for v in devices.values():  # a device the session's providers do not use
                transfers.setdefault(v._memory, v._transfer)
            for memory, transfer in (output_memory or {}).values():
                transfers.setdefault(memory, transfer)
            assignment, kernels = self._compiler.last
            plan = Plan(self._graph, assignment, kernels, transfers, HOST_MEMORY,
                        {n: m for n, m in key[0]}, {n: m for n, m in key[1]})
            with self._lock:
                self._device_plans[key] = plan
        return plan

    def _pruned(self, plan: Plan, wanted: list[int]) -> Plan:
        """``plan`` running only the steps the outputs ``wanted`` need (made once per set)."""
        key = (id(plan), tuple(wanted))
        pruned = self._pruned_plans.get(key)
        if pruned is None:
            pruned = plan.pruned(wanted)
            with self._lock:
                self._pruned_plans[key] = pruned
        return pruned

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], callback: Any,
                  user_data: Any, run_options: RunOptions | None = None) -> None:
        """Run on a new thread and call ``callback(results, user_data, err)``: the outputs and
        "" on success, ``[]`` and the error's message on failure (onnxruntime's contract).
        Input names are checked here, before the thread starts."""
        if not callable(callback):
            raise InvalidArgument(f"run_async needs a callable callback, got {type(callback).__name__}")
        self._check_feed_names(input_feed)
        self._output_indices(output_names)

        def work() -> None:
            try:
                results = self.run(output_names, input_feed, run_options)
            except Exception as exc:  # the callback is told, as onnxruntime tells it
                callback([], user_data, str(exc))
                return
            callback(results, user_data, "")

        threading.Thread(target=work, name="ort_core.run_async", daemon=True).start()

    def run_with_ortvaluevector(self, run_options: RunOptions | None, feed_names: Sequence[str],
                                feeds: Sequence[OrtValue], fetch_names: Sequence[str], fetches: list,
                                fetch_devices: Sequence[Any]) -> None:
        """Run on ``feeds`` (OrtValues, by ``feed_names``) and put the outputs ``fetch_names``
        into ``fetches`` (an ``OrtValueVector`` or list, replaced); ``fetch_devices`` (``OrtDevice``s,
        or empty for host) says where each output is left."""
        if len(feed_names) != len(feeds):
            raise InvalidArgument(f"run_with_ortvaluevector: {len(feed_names)} feed names but {len(feeds)} feeds")
        on_device: dict[str, tuple[str, DataTransfer]] = {}
        devices = list(fetch_devices or [])
        if devices and len(devices) != len(fetch_names):
            raise InvalidArgument(f"run_with_ortvaluevector: {len(fetch_names)} fetch names but {len(devices)} devices")
        kinds: dict[str, Any] = {}
        for name, device in zip(fetch_names, devices):
            memory = getattr(device, "memory", HOST_MEMORY)
            if memory != HOST_MEMORY:
                dm = devices_.device_memory(memory, device.device_id())
                on_device[name] = (dm.memory, self._transfers.get(dm.memory, dm.transfer))
                kinds[name] = dm
        results = self._run(list(fetch_names), dict(zip(feed_names, feeds)), run_options, on_device or None)
        values = []
        for name, r in zip(fetch_names, results):
            dm = kinds.get(name)
            values.append(OrtValue(_to_output(r)) if dm is None else
                          OrtValue(r, dm.memory_device_type, dm.device_id, dm.memory, on_device[name][1]))
        fetches[:] = values

    def create_ortvalue_from_shape_and_type(self, shape: Sequence[int], element_type: Any, device_type: str,
                                            device_id: int = 0, vendor_id: int = -1) -> OrtValue:
        """A new OrtValue of ``shape`` and ``element_type`` (a numpy type, or an ONNX element
        type number) on ``device_type``/``device_id``, made by that memory's provider."""
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id)

    def _io_providers(self, names: Sequence[str], consumer: bool) -> list[BoundProvider | None]:
        """The provider of the first main-graph node reading (or the node writing) each value."""
        _, assignment, _ = self._compiler.by_graph[id(self._graph)]
        found: dict[str, BoundProvider] = {}
        for node in self._graph.nodes:
            for n in (node.inputs + node.implicit_inputs) if consumer else node.outputs:
                if n and n not in found:
                    found[n] = assignment.claims[assignment.node_claim[node.index]][0]
        return [found.get(n) for n in names]

    def _memory_infos(self, names: Sequence[str], consumer: bool) -> list[Any]:
        result = []
        for bp in self._io_providers(names, consumer):
            if bp is None:  # read by no node: an output that is an input, on the host
                result.append(devices_.OrtMemoryInfo.of_memory(HOST_MEMORY, "CPU", 0))
            else:
                d = bp.ctx.device
                result.append(devices_.OrtMemoryInfo.of_memory(d.memory, d.device_type, d.device_id, d.vendor))
        return result

    def get_input_memory_infos(self) -> list[Any]:
        """``OrtMemoryInfo`` of each input (``get_inputs`` order): the memory of the provider
        of the first node that reads it ("Cpu" for host memory)."""
        return self._memory_infos([a.name for a in self.get_inputs()], True)

    def get_output_memory_infos(self) -> list[Any]:
        """``OrtMemoryInfo`` of each output: the memory of the provider of the node writing it."""
        return self._memory_infos([a.name for a in self._outputs], False)

    def get_input_epdevices(self) -> list[Any]:
        """The ``OrtEpDevice`` of the provider that first reads each input (None where no node does)."""
        return [None if bp is None else devices_.OrtEpDevice(bp.ctx.device, bp.spec.version)
                for bp in self._io_providers([a.name for a in self.get_inputs()], True)]

    def set_ep_dynamic_options(self, options: Mapping[str, str]) -> None:
        """Set provider options that may change between runs: each key/value (strings) is put
        into every provider's ``ProviderContext.session_config``, which its kernels read."""
        if not isinstance(options, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
            raise InvalidArgument("set_ep_dynamic_options needs a dict of str -> str")
        for bp in self._providers:
            bp.ctx.session_config.update(options)

    def get_tuning_results(self) -> list[dict[str, Any]]:
        """Empty: no provider here tunes kernels at run time (onnxruntime's TunableOp results)."""
        return []

    def set_tuning_results(self, results: Sequence[Mapping[str, Any]], *, error_on_invalid: bool = False) -> None:
        """Accept onnxruntime's tuning results; none applies here (no provider tunes kernels), so
        with ``error_on_invalid`` a non-empty list is an error naming that."""
        if error_on_invalid and results:
            raise InvalidArgument("set_tuning_results: no provider of this session takes tuning results "
                                  f"({', '.join(self.get_providers())})")

    def release_captured_graph(self, graph_annotation_id: int = 0) -> None:
        """Nothing to release: no provider here captures graphs (onnxruntime's no-op for such providers)."""

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: Mapping[str, OrtValue],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        """``run`` on OrtValues in and out."""
        outputs = self.run(output_names, input_dict_ort_values, run_options)
        return [OrtValue(o) for o in outputs]

    def io_binding(self) -> IOBinding:
        """A new I/O binding for this session (see ``ort_core.binding``)."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        """Run on ``iobinding``'s bound inputs; its outputs are then ``iobinding.get_outputs()``."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise InvalidArgument("run_with_iobinding needs an IOBinding made by this session's io_binding()")
        iobinding.run(run_options)

    def _checked_feeds(self, input_feed: Mapping[str, Any]) -> list[Any] | None:
        """The feeds in input order where every input is a host array of its declared dtype
        and of a shape that passed ``_prepare_feeds``'s checks before (what they would accept
        unchanged), else None (the full checks then run). A few us a run on small models."""
        shapes = self._feed_shapes
        if shapes is None or type(input_feed) is not dict or len(input_feed) != len(shapes):
            return None
        feeds = []
        for name, dtype in self._feed_dtypes:
            value = input_feed.get(name)
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape not in shapes[name]:
                return None
            feeds.append(value)
        return feeds

    def _prepare_feeds(self, input_feed: Mapping[str, Any]) -> list[Any]:
        feeds = self._checked_feeds_slow(input_feed)
        shapes = self._feed_shapes
        if shapes is not None:
            for (name, dtype), value in zip(self._feed_dtypes, feeds):
                # remembered: a host array of the declared dtype that the checks accepted as it is
                # (not a string input's: its elements are checked every run, see _check_input)
                if (type(value) is np.ndarray and value.dtype == dtype and dtype.kind != "O"
                        and value is input_feed.get(name)):
                    known = shapes[name]
                    if len(known) >= 64:  # ever new shapes: bounded, checked again
                        known.clear()
                    known.add(value.shape)
        return feeds

    def _check_feed_names(self, input_feed: Mapping[str, Any]) -> None:
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        unknown = [k for k in input_feed if k not in self._input_names]
        if unknown:
            raise InvalidArgument(
                f"unknown input name(s) {', '.join(map(repr, unknown))}; the model's inputs are: "
                + ", ".join(repr(n) for n in self._required)
            )
        missing = [n for n in self._required if n not in input_feed and n not in self._optional_inputs]
        if missing:
            raise InvalidArgument(f"missing input(s): {', '.join(map(repr, missing))}")

    def _checked_feeds_slow(self, input_feed: Mapping[str, Any]) -> list[Any]:
        self._check_feed_names(input_feed)
        feeds = []
        for name, dtype, shape, type_str in self._input_checks:
            if name not in input_feed:  # an overridable initializer not overridden
                feeds.append(self._graph.value(name).const_value)
                continue
            value = input_feed[name]
            if isinstance(value, OrtValue):
                if not value.on_host:  # read on its device by a plan that starts there
                    feeds.append(_check_device_input(name, value, dtype, shape, type_str))
                    continue
                value = value.numpy()
            feeds.append(_check_input(name, value, dtype, shape, type_str))
        return feeds

    def _output_indices(self, output_names: Sequence[str] | None) -> list[int]:
        names = self._plan.output_names
        if output_names is None or len(output_names) == 0:
            return list(range(len(names)))
        result = []
        for n in output_names:
            if n not in names:
                raise InvalidArgument(
                    f"unknown output name {n!r}; the model's outputs are: {', '.join(map(repr, names))}"
                )
            result.append(names.index(n))
        return result

    def end_profiling(self) -> str:
        """Write the profile (Chrome trace JSON) and return its file name, as onnxruntime does:
        ``<prefix>_<date>_<time>_<milliseconds>.json``, node events named ``<node>_kernel_time``;
        profiling then stops (a second call returns "")."""
        if self._profile is None:
            return ""
        now = datetime.datetime.now()
        path = f"{self._options.profile_file_prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
        events = []
        with self._lock:
            runs, self._profile = self._profile, None
        # creation's events, as onnxruntime writes them: loading (from a path or from bytes),
        # then the whole of the session's initialization
        loading = "model_loading_uri" if self._model_path is not None else "model_loading_array"
        for name, (start, end) in ((loading, self._load_span), ("session_initialization",
                                                                (self._profile_start, self._created_at))):
            if start >= self._profile_start:  # (profiling the model's ort_config turned on starts after loading)
                events.append({"cat": "Session", "name": name, "ph": "X", "pid": os.getpid(), "tid": 0,
                               "ts": (start - self._profile_start) / 1000, "dur": (end - start) / 1000, "args": {}})
        for run_index, (start, end, records) in enumerate(runs):
            events.append({
                "cat": "Session", "name": "model_run", "ph": "X", "pid": os.getpid(), "tid": 0,
                "ts": (start - self._profile_start) / 1000, "dur": (end - start) / 1000,
                "args": {"run": run_index},
            })
            for info, graph_path, s, e in records:  # a control-flow body's nodes name their graph
                args = {"op_name": info.op_type, "provider": info.provider}
                if graph_path:
                    args["graph"] = graph_path
                events.append({
                    "cat": "Node", "name": f"{info.label}_kernel_time", "ph": "X", "pid": os.getpid(), "tid": 0,
                    "ts": (s - self._profile_start) / 1000, "dur": (e - s) / 1000, "args": args,
                })
        with open(path, "w") as f:
            json.dump(events, f)
        return path

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (the session's creation) in nanoseconds since the epoch, 0
        where it is off, as onnxruntime."""
        return self._profile_start_epoch_ns


#: the session options onnxruntime reads from a model's "ort_config" metadata, and what each
#: integer sets (the others it ignores)
_MODEL_CONFIG_OPTIONS: dict[str, Callable[[int], Any]] = {
    "intra_op_num_threads": lambda v: v if v >= 0 else None,
    "inter_op_num_threads": lambda v: v if v >= 0 else None,
    "execution_mode": lambda v: ExecutionMode(v) if v in (0, 1) else None,
    "graph_optimization_level": lambda v: GraphOptimizationLevel(v) if v in (0, 1, 2, 3, 99) else None,
    "enable_profiling": lambda v: bool(v) if v in (0, 1) else None,
}


def _options_from_model(model: ir.Model, options: SessionOptions) -> bool:
    """Set ``options`` from the model's "ort_config" metadata, as onnxruntime does with
    ``read_config_from_model=1``: JSON ``{"session_options": {key: integer}}`` with the keys of
    ``_MODEL_CONFIG_OPTIONS`` (others are ignored); whether any was set. JSON that does not
    parse, a value that is no integer or one out of range is an InvalidArgument naming it."""
    text = model.metadata_props.get("ort_config")
    if text is None:
        return False
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"Json stored in the `ort_config` key cannot be parsed: {exc}") from None
    given = config.get("session_options", {}) if isinstance(config, dict) else {}
    changed = False
    for key, value in (given.items() if isinstance(given, dict) else ()):
        convert = _MODEL_CONFIG_OPTIONS.get(key)
        if convert is None:
            logger.info("ort_config: ignoring session option %r (onnxruntime reads %s)", key, ", ".join(_MODEL_CONFIG_OPTIONS))
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"{key} option in the model file (ort_config) must be an integer, given {value!r}")
        converted = convert(value)
        if converted is None:
            raise InvalidArgument(f"Unsupported value for {key} in the model's ort_config: {value}")
        setattr(options, key, converted)
        changed = True
    return changed


def _byte_count(config: Mapping[str, str], key: str, default: int) -> int:
    """A session config entry that is a count of bytes (a non-negative integer)."""
    text = config.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgument(f"session config entry {key!r}: {text!r} is not a byte count (an integer >= 0)")
    return value


def _override_free_dimensions(graph: ir.Graph, overrides: Mapping[str, int],
                              denotations: Mapping[str, int] | None = None) -> None:
    """Replace the symbolic dimensions named in ``overrides`` (or whose denotation is in
    ``denotations``) in the graph inputs' shapes."""
    if not overrides and not denotations:
        return
    for value in graph.inputs:
        if value.shape is None:
            continue
        shape = value.shape
        dims = []
        for axis, d in enumerate(shape):
            if not isinstance(d, int):
                denotation = shape.get_denotation(axis)
                if denotations and denotation in denotations:
                    d = denotations[denotation]
                else:
                    d = overrides.get(getattr(d, "value", None), d)
            dims.append(d)
        value.shape = ir.Shape(dims, denotations=[shape.get_denotation(i) for i in range(len(dims))])


def _override_initializers(graph: ir.Graph, overrides: Mapping[str, OrtValue]) -> None:
    """``SessionOptions.add_initializer``: the named initializers take the given values (same
    dtype and shape; a name the graph lacks is ignored, as onnxruntime ignores it)."""
    for name, value in overrides.items():
        init = graph.initializers.get(name)
        if init is None:
            continue
        array = value.numpy()
        old = init.const_value
        if old is not None and (np.dtype(old.dtype.numpy()) != array.dtype or tuple(old.shape) != array.shape):
            raise InvalidArgument(f"add_initializer {name!r}: the model's initializer is {old.dtype.name} "
                                  f"{list(old.shape)}, the value given is {array.dtype} {list(array.shape)}")
        init.const_value = ir.Tensor(array, name=name)


def _end_session(providers: list[BoundProvider]) -> None:
    for bp in providers:
        try:
            bp.hooks.call_contained("ort_session_end", ep=bp.ctx)
        except Exception as exc:  # releasing must not raise
            logger.warning("%s: ort_session_end raised %s: %s", bp.name, type(exc).__name__, exc)


def _run_hook(bp: BoundProvider, hook: str, run_options: Any) -> None:
    """``ort_run_start``/``ort_run_end`` of one provider; its own plugin's exception becomes an
    EPFail naming the provider and the hook (a cross-cutting plugin's is contained)."""
    try:
        bp.hooks.call_contained(hook, ep=bp.ctx, run_options=run_options)
    except OrtError:
        raise
    except Exception as exc:
        raise EPFail(f"{bp.name}: {hook} raised {type(exc).__name__}: {exc}") from exc


def _end_run(started: list[BoundProvider], run_options: Any) -> None:
    """``ort_run_end`` for every provider in ``started``, all of them even if one raises; the
    first error is raised after the others have ended."""
    error: BaseException | None = None
    for bp in started:
        try:
            _run_hook(bp, "ort_run_end", run_options)
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error


def _unaliased(results: list[Any], feeds: list[Any]) -> list[Any]:
    """The outputs as fresh, writable arrays, as onnxruntime returns them: an output that may
    share memory with a feed (an Identity or Reshape of an input), with another output, or that
    is read-only (an initializer or a view of one, shared between runs) is copied; the others,
    made by the run, are returned as they are."""
    # the fast form, for outputs that own their buffers (base None: made by the run, the common
    # case): such an array shares memory with a feed or an earlier output only if it is that
    # array or that array's base (numpy points every view at the owning array); feeds and
    # outputs with other bases (views of bytes, of views) send every output the general way
    known: set[int] = set()
    simple = True
    for f in feeds:
        if isinstance(f, np.ndarray):
            base = f.base
            known.add(id(f))
            if base is not None:
                if type(base) is not np.ndarray or base.base is not None:
                    simple = False
                    break
                known.add(id(base))
    if simple:
        out = []
        for value in results:
            if type(value) is not np.ndarray:
                if value is None or isinstance(value, (np.generic, str, int, float)):
                    out.append(value)
                    continue
                break
            base = value.base
            if base is None:
                if id(value) in known or not value.flags.writeable:
                    value = value.copy()
                known.add(id(value))
            elif type(base) is np.ndarray and base.base is None and id(base) not in known and value.flags.writeable:
                known.add(id(base))  # a view of a buffer no feed or earlier output uses
                known.add(id(value))
            else:
                break
            out.append(value)
        else:
            return out
    arrays = [f for f in feeds if isinstance(f, np.ndarray)]
    seen: list[np.ndarray] = []

    def fresh(value: Any) -> Any:
        if isinstance(value, list):  # a sequence output: its tensors, one by one
            return [fresh(v) for v in value]
        if not isinstance(value, np.ndarray):
            return value
        if not value.flags.writeable or any(np.may_share_memory(value, a) for a in arrays) or any(
            np.may_share_memory(value, s) for s in seen
        ):
            value = value.copy()
        seen.append(value)
        return value

    return [fresh(r) for r in results]


def _to_output(value: Any) -> Any:
    if isinstance(value, np.ndarray) or isinstance(value, (list, dict)) or value is None:
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _check_input(name: str, value: Any, dtype: np.dtype | None, shape: tuple | None, type_str: str) -> Any:
    if dtype is None:  # sequences and optionals: lists of arrays and None, as onnxruntime takes them
        return _check_non_tensor(name, value, type_str)
    if value is None:  # numpy makes NaN of it for a float input, onnxruntime refuses it
        expected = "" if shape is None else f" of shape {list(shape)}"
        raise InvalidArgument(f"input {name!r}: expected {type_str}{expected}, given None")
    if not isinstance(value, np.ndarray):
        try:
            value = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as exc:  # Overflow: 1000 for an int8 input
            raise InvalidArgument(f"input {name!r}: cannot convert {type(value).__name__} to {type_str}: {exc}") from exc
    elif dtype.kind == "O" and value.dtype.kind in ("U", "S"):
        # strings as numpy unicode/bytes arrays, as onnxruntime takes them
        value = (np.char.decode(value, "utf-8") if value.dtype.kind == "S" else value).astype(object)
    elif value.dtype != dtype and value.dtype.newbyteorder("=") == dtype:
        value = value.astype(dtype)  # big-endian data, converted as onnxruntime converts it
    elif value.dtype != dtype:
        raise InvalidArgument(
            f"input {name!r}: unexpected data type: expected {type_str} ({dtype}), "
            f"given {value.dtype}"
        )
    if dtype.kind == "O" and not all(type(v) is str for v in value.flat):
        # other objects in a string input (ints, None) as their str(), as onnxruntime takes
        # them: string kernels expect str. bytes are read as UTF-8 text (onnxruntime 1.32 makes
        # b"ab" the text "b'ab'")
        value = np.array([v if type(v) is str else v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                          for v in value.flat], dtype=object).reshape(value.shape)
    if shape is not None:
        if value.ndim != len(shape):
            raise InvalidArgument(
                f"input {name!r}: wrong rank: expected {len(shape)} (shape {list(shape)}), "
                f"given {value.ndim} (shape {list(value.shape)})"
            )
        for axis, (want, got) in enumerate(zip(shape, value.shape)):
            if isinstance(want, int) and want != got:
                raise InvalidArgument(
                    f"input {name!r}: wrong dimension {axis}: expected {want} (shape {list(shape)}), "
                    f"given {got} (shape {list(value.shape)})"
                )
    return value


def _check_device_input(name: str, value: OrtValue, dtype: np.dtype | None, shape: tuple | None, type_str: str) -> Any:
    """A device OrtValue checked like a host input (dtype, rank, fixed dims), not copied."""
    tensor = value._data
    given = list(tensor.shape)
    if dtype is None or np.dtype(tensor.dtype) != dtype:
        raise InvalidArgument(f"input {name!r}: unexpected data type: expected {type_str}, given "
                              f"{np.dtype(tensor.dtype)} on {value.device_name()}")
    if shape is not None:
        if len(given) != len(shape):
            raise InvalidArgument(f"input {name!r}: wrong rank: expected {len(shape)} (shape {list(shape)}), "
                                  f"given {len(given)} (shape {given}) on {value.device_name()}")
        for axis, (want, got) in enumerate(zip(shape, given)):
            if isinstance(want, int) and want != got:
                raise InvalidArgument(f"input {name!r}: wrong dimension {axis}: expected {want} (shape {list(shape)}), "
                                      f"given {got} (shape {given}) on {value.device_name()}")
    return tensor


def _type_dtype(type_str: str) -> np.dtype | None:
    """numpy dtype of a ``tensor(<elem>)`` type string, else None."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    try:
        return np.dtype(ir.DataType[type_str[7:-1].upper()].numpy())
    except (KeyError, TypeError, ValueError):
        return None


def _check_non_tensor(name: str, value: Any, type_str: str) -> Any:
    """Check a sequence (a list of arrays) or optional (None when empty) input against its type."""
    if type_str.startswith("optional(") and type_str.endswith(")"):
        if value is None:
            return None
        return _check_non_tensor(name, value, type_str[9:-1])
    if type_str.startswith("seq(") and type_str.endswith(")"):
        if not isinstance(value, (list, tuple)):
            raise InvalidArgument(
                f"input {name!r}: expected a list of arrays for {type_str}, given {type(value).__name__}"
            )
        inner = type_str[4:-1]
        return [_check_non_tensor(f"{name}[{k}]", v, inner) for k, v in enumerate(value)]
    dtype = _type_dtype(type_str)
    if dtype is None:  # maps and types this runtime does not spell: passed as they are
        return value
    if value is None:
        raise InvalidArgument(f"input {name!r}: expected {type_str}, given None")
    return _check_input(name, value, dtype, None, type_str)
