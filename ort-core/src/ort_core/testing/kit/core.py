"""The conformance kit: checks a provider against the contract, as users will meet it.

``Kit(provider).run_all()`` runs every check and returns a ``Scorecard``. Each check is also
runnable alone (``kit.run("capability")``); checks share what they learn (devices, capability
answers) so the whole kit asks each question once. What needs a usable device is skipped with
the provider's own unavailability reason when it has none here.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ... import hookspecs
from ...errors import InvalidArgument, OrtError
from ...errors import NotImplemented as OrtNotImplemented
from ...graph.load import load_model
from ...graph.view import GraphView
from ...partition import CPU_PROVIDER, _creates_cycle
from ...plugins import RegisteredProvider, contract_compatible, registry
from ...session import GraphOptimizationLevel, InferenceSession, SessionOptions, validate_options
from ...types import (
    HOST_MEMORY,
    AllocatorStats,
    Capability,
    Claim,
    DataTransfer,
    EpDevice,
    EpDevices,
    MemoryInfo,
    OptionSpec,
    ProviderContext,
    ProviderSpec,
)
from ...version import CONTRACT_VERSION, __version__
from .. import models
from ..plugins import OpVeto
from . import probes
from .nodecases import RANDOM_OPS, NodeCase, compare, load_node_cases
from .scorecard import CheckResult, Scorecard

if sys.version_info >= (3, 12):
    from importlib.metadata import entry_points, version
else:
    from importlib_metadata import entry_points, version

logger = logging.getLogger("ort_core")

#: The checks, in the order they run.
CHECKS: tuple[str, ...] = (
    "registration",
    "options",
    "devices",
    "capability",
    "allocator",
    "data_transfer",
    "node_cases",
    "partial_placement",
    "fusion_parity",
    "concurrency",
    "bad_inputs",
)

# hooks a provider plugin must implement (the others are optional)
REQUIRED_HOOKS = ("ort_register_providers", "ort_ep_devices", "ort_get_capability", "ort_create_kernel")
_LIMIT_OPTION = re.compile(r"(mem(ory)?_?limit|limit_bytes|arena_limit)", re.IGNORECASE)
_LIMIT_UNITS = {"_gb": 1 << 30, "_gib": 1 << 30, "_mb": 1 << 20, "_mib": 1 << 20, "_kb": 1 << 10, "_kib": 1 << 10}
# tolerances for whole-model comparisons (float32, errors accumulate over layers)
MODEL_RTOL, MODEL_ATOL = 1e-3, 1e-4
# concurrent runs against serial runs of the same session: same kernels, same inputs
THREAD_RTOL, THREAD_ATOL = 1e-5, 1e-6


@dataclass
class KitConfig:
    """What to check and how.

    ``options`` are the provider options every check uses. ``ops`` limits the node cases to
    cases containing one of these op types; ``max_cases`` caps their number (both for quick
    runs; a full run uses neither). ``known_failures`` maps node-case names the author knows
    fail to the reason: they are reported, not counted as failures. ``memory_limit_option``
    names the option that limits the allocator (found by name when not given; a ``_mb``/``_kb``/
    ``_gb`` suffix gives its unit). ``transfer_dtypes`` replaces the dtypes the data-transfer
    check copies (by default every dtype the provider's claims touch); the scorecard lists
    them. ``require_entry_point`` is False only for in-process plugins (the kit's own tests).
    """

    provider: str
    options: Mapping[str, Any] = field(default_factory=dict)
    ops: frozenset[str] | None = None
    max_cases: int | None = None
    known_failures: Mapping[str, str] = field(default_factory=dict)
    memory_limit_option: str | None = None
    transfer_dtypes: tuple[str, ...] | None = None
    require_entry_point: bool = True
    threads: int = 4
    runs_per_thread: int = 4


class _Skip(Exception):
    """Raised inside a check to skip it with a reason."""


class Kit:
    """The conformance kit for one provider. See the module docstring."""

    def __init__(self, config: KitConfig | str, **kwargs: Any) -> None:
        if isinstance(config, str):
            config = KitConfig(config, **kwargs)
        elif kwargs:
            raise TypeError("give either a KitConfig or a provider name with keyword options")
        self.config = config
        self.name = config.provider
        self.scorecard = Scorecard(provider=self.name, ort_core_version=__version__, options=dict(config.options))
        self._results: dict[str, CheckResult] = {}
        self._lock = threading.RLock()
        self._reg: RegisteredProvider | None = None
        self._devices: EpDevices | None = None
        self._case_claims: dict[str, tuple[NodeCase, GraphView, frozenset[int]]] | None = None
        self._claimed_dtypes: set[np.dtype] = set()
        self._probe_model: tuple[str, onnx.ModelProto] | None = None

    # ------------------------------------------------------------------ running
    def run(self, check: str) -> CheckResult:
        """Run one check (once; later calls return the same result)."""
        if check not in CHECKS:
            raise KeyError(f"unknown kit check {check!r}; the checks are: {', '.join(CHECKS)}")
        with self._lock:
            if check in self._results:
                return self._results[check]
            method: Callable[[list[str]], str] = getattr(self, f"_check_{check}")
            details: list[str] = []
            try:
                message = method(details)
                result = CheckResult(check, "failed" if details else "passed", message, details)
                if details:  # lead with what is wrong; what was checked goes last
                    result.message = details[0] if len(details) == 1 else f"{details[0]} (and {len(details) - 1} more)"
                    if message:
                        details.append(f"checked: {message}")
            except _Skip as skip:
                result = CheckResult(check, "skipped", str(skip), details)
            except Exception as exc:  # a check that crashes is a failure, with the cause
                logger.debug("kit check %s crashed", check, exc_info=True)
                result = CheckResult(check, "failed", f"the check crashed: {type(exc).__name__}: {exc}", details)
            self._results[check] = result
            self.scorecard.checks = [self._results[c] for c in CHECKS if c in self._results]
            return result

    def run_all(self) -> Scorecard:
        for check in CHECKS:
            self.run(check)
        return self.scorecard

    # ------------------------------------------------------------------ shared helpers
    def _provider(self) -> RegisteredProvider:
        if self._reg is None:
            self._reg = registry().get(self.name)
        if self._reg is None:
            raise _Skip(f"{self.name} is not installed (see the registration check)")
        return self._reg

    def _device(self) -> EpDevice:
        """The device the kit uses; skips the calling check when the provider has none here."""
        reg = self._provider()
        if self._devices is None:
            self._devices = registry().devices(self.name)
        if not self._devices.devices:
            raise _Skip(f"{self.name} cannot run here: {self._devices.unavailable_reason}")
        wanted = self.config.options.get("device_id")
        if wanted is not None:
            for d in self._devices.devices:
                if d.device_id == int(wanted):
                    return d
        del reg
        return self._devices.devices[0]

    def _context(self, options: Mapping[str, Any] | None = None) -> ProviderContext:
        """A ProviderContext as a session would bind it; ``ort_session_start`` is called."""
        reg = self._provider()
        device = self._device()
        parsed = validate_options(self.name, reg.spec.options, dict(self.config.options if options is None else options))
        ctx = ProviderContext(self.name, parsed, device, session_config={})
        reg.hooks.ort_session_start(ep=ctx)
        return ctx

    def _end(self, ctx: ProviderContext) -> None:
        self._provider().hooks.ort_session_end(ep=ctx)

    def _session(self, model: onnx.ModelProto | bytes, optimize: bool = True, **kwargs: Any) -> InferenceSession:
        so = SessionOptions()
        if not optimize:
            so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
        return InferenceSession(model, so, providers=[(self.name, dict(self.config.options))], **kwargs)

    def _ask(self, ctx: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Any:
        return self._provider().hooks.ort_get_capability(ep=ctx, graph=graph, candidates=candidates)

    # ------------------------------------------------------------------ 1. registration
    def _check_registration(self, problems: list[str]) -> str:
        reg = registry().get(self.name)
        if reg is None:
            failures = "; ".join(f"{f.plugin} ({f.package or 'in-process'}): {f.error}" for f in registry().failures)
            installed = ", ".join(registry().providers()) or "(none)"
            problems.append(
                f"{self.name} is not offered by any loaded plugin; installed providers: {installed}"
                + (f"; plugins that failed to load: {failures}" if failures else "")
            )
            return f"{self.name} is not installed"
        self._reg = reg
        spec = reg.spec
        self.scorecard.package = reg.package
        self.scorecard.provider_version = str(getattr(spec, "version", ""))
        self.scorecard.contract_version = str(getattr(spec, "contract_version", ""))
        if not isinstance(spec, ProviderSpec):
            problems.append(f"ort_register_providers returned {type(spec).__name__}, not a ProviderSpec")
            return ""
        for attr in ("name", "version", "vendor"):
            if not isinstance(getattr(spec, attr), str) or not getattr(spec, attr).strip():
                problems.append(f"ProviderSpec.{attr} must be a non-empty string, got {getattr(spec, attr)!r}")
        if spec.kind not in ("kernel", "compiling"):
            problems.append(f"ProviderSpec.kind is {spec.kind!r}; it must be 'kernel' or 'compiling'")
        if not re.fullmatch(r"\d+\.\d+", str(spec.contract_version)):
            problems.append(f"ProviderSpec.contract_version {spec.contract_version!r} is not MAJOR.MINOR")
        elif not contract_compatible(spec.contract_version):
            problems.append(f"contract version {spec.contract_version} is not compatible with core's {CONTRACT_VERSION}")
        # through the entry point, with matching distribution metadata
        if reg.package:
            advertised = [
                ep for ep in entry_points(group=hookspecs.ENTRY_POINT_GROUP)
                if ep.dist is not None and ep.dist.name == reg.package
            ]
            if not advertised:
                problems.append(f"{reg.package} has no entry point in group {hookspecs.ENTRY_POINT_GROUP!r}")
            try:
                dist_version = version(reg.package)
            except Exception:
                dist_version = None
            if dist_version is not None and dist_version != spec.version:
                problems.append(
                    f"ProviderSpec.version {spec.version!r} differs from the installed distribution "
                    f"{reg.package} {dist_version!r}: read one from the other"
                )
        elif self.config.require_entry_point:
            problems.append(
                f"{self.name} was registered in-process, not through the {hookspecs.ENTRY_POINT_GROUP!r} "
                "entry point: declare it in pyproject.toml and install the package"
            )
        problems.extend(self._hook_problems(reg.plugin))
        return f"{spec.name} {spec.version} by {spec.vendor} ({spec.kind}, contract {spec.contract_version}) from {reg.package or 'in-process'}"

    @staticmethod
    def _hook_problems(plugin: Any) -> list[str]:
        """Hook functions that core would never call: misspelt, undecorated or missing."""
        problems: list[str] = []
        known = {name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("ort_")}
        marker = f"{hookspecs.PROJECT_NAME}_impl"
        implemented = set()
        for attr in dir(plugin):
            if not attr.startswith("ort_"):
                continue
            value = getattr(plugin, attr, None)
            if not callable(value):
                continue
            decorated = getattr(value, marker, None) is not None
            if attr in known and decorated:
                implemented.add(attr)
            elif attr in known:
                problems.append(f"{attr} is defined but not decorated with @ort_core.hookimpl, so core never calls it")
            elif decorated:
                close = [k for k in known if _similar(attr, k)]
                hint = f" (did you mean {close[0]}?)" if close else ""
                problems.append(f"{attr} is decorated as a hook but is not one of the contract's hooks{hint}")
        for hook in REQUIRED_HOOKS:
            if hook not in implemented:
                problems.append(f"a provider plugin must implement {hook}")
        return problems

    # ------------------------------------------------------------------ 2. options
    def _check_options(self, problems: list[str]) -> str:
        spec = self._provider().spec
        names = [o.name for o in spec.options]
        for o in spec.options:
            if not isinstance(o, OptionSpec):
                problems.append(f"option {o!r} is not an OptionSpec")
                continue
            if not o.name or not o.doc:
                problems.append(f"option {o.name!r}: needs a name and a doc string")
            if names.count(o.name) > 1:
                problems.append(f"option {o.name!r} is declared twice")
            # onnxruntime's options arrive as strings: the default written as a string must parse back to it
            try:
                parsed = o.parse(str(o.default)) if o.default is not None else None
            except Exception as exc:
                problems.append(f"option {o.name!r}: its default {o.default!r} given as a string fails to parse: {exc}")
            else:
                if o.default is not None and parsed != o.default:
                    problems.append(
                        f"option {o.name!r}: {str(o.default)!r} parses to {parsed!r}, not the default {o.default!r}"
                    )
            if o.choices is not None and o.default is not None and o.default not in o.choices:
                problems.append(f"option {o.name!r}: default {o.default!r} is not among its choices {o.choices}")
        model = probes.relu_model()
        bogus = "kit_no_such_option"
        try:
            InferenceSession(model, providers=[(self.name, {bogus: "1"})])
            problems.append(f"an unknown option key {bogus!r} was accepted")
        except InvalidArgument as exc:
            text = str(exc)
            missing = [n for n in names if n not in text]
            if bogus not in text or missing:
                problems.append(
                    f"the error for an unknown key must name it and every valid key ({', '.join(names) or 'none'}); got: {text}"
                )
        except Exception as exc:
            problems.append(f"an unknown option key raised {type(exc).__name__}, not InvalidArgument: {exc}")
        for o in spec.options:
            if o.choices is None:
                continue
            try:
                InferenceSession(model, providers=[(self.name, {o.name: "kit-not-a-choice"})])
                problems.append(f"option {o.name!r}: value 'kit-not-a-choice' outside its choices was accepted")
            except InvalidArgument as exc:
                if o.name not in str(exc):
                    problems.append(f"option {o.name!r}: the error for a bad value does not name the key: {exc}")
            except Exception as exc:
                problems.append(f"option {o.name!r}: a bad value raised {type(exc).__name__}, not InvalidArgument: {exc}")
        return f"{len(names)} option(s): {', '.join(names) or 'none'}"

    # ------------------------------------------------------------------ 3. devices
    def _check_devices(self, problems: list[str]) -> str:
        reg = self._provider()
        try:
            answer = reg.hooks.ort_ep_devices(provider=self.name)
        except Exception as exc:
            problems.append(f"ort_ep_devices raised {type(exc).__name__}: {exc}; it must return EpDevices((), reason)")
            return ""
        if not isinstance(answer, EpDevices):
            problems.append(f"ort_ep_devices({self.name!r}) returned {type(answer).__name__}, not EpDevices")
            return ""
        try:
            other = reg.hooks.ort_ep_devices(provider="KitNoSuchExecutionProvider")
        except Exception as exc:
            other = exc
        if other is not None:
            problems.append(f"ort_ep_devices must return None for providers that are not its own, got {other!r}")
        ids = [d.device_id for d in answer.devices]
        for d in answer.devices:
            if not isinstance(d, EpDevice):
                problems.append(f"device {d!r} is not an EpDevice")
                continue
            if d.ep_name != self.name:
                problems.append(f"device {d.name!r}: ep_name is {d.ep_name!r}, not {self.name!r}")
            if d.device_type not in ("CPU", "GPU", "NPU"):
                problems.append(f"device {d.name!r}: device_type {d.device_type!r} is not CPU, GPU or NPU")
            if not isinstance(d.memory, str) or not d.memory:
                problems.append(f"device {d.name!r}: memory must name a memory space, got {d.memory!r}")
            if ids.count(d.device_id) > 1:
                problems.append(f"device id {d.device_id} is reported twice")
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(d.metadata).items()):
                problems.append(f"device {d.name!r}: metadata must map str to str")
        available = self.name in registry().available()
        if answer.devices and not available:
            problems.append("devices are reported but the provider is missing from get_available_providers()")
        if not answer.devices:
            if not isinstance(answer.unavailable_reason, str) or not answer.unavailable_reason.strip():
                problems.append("no devices and no unavailable_reason: say why (what to install or enable)")
            if available:
                problems.append("no devices, yet the provider is listed by get_available_providers()")
            return f"unavailable here: {answer.unavailable_reason}; checks that need a device are skipped"
        return "; ".join(
            f"{d.device_type} {d.device_id} {d.name!r} memory {d.memory}{'' if d.hardware else ' (software)'}"
            for d in answer.devices
        )

    # ------------------------------------------------------------------ 4. capability
    def _capability_problems(
        self, graph: GraphView, candidates: frozenset[int], answer: Any, where: str
    ) -> tuple[list[str], set[int]]:
        problems: list[str] = []
        if answer is None:
            return [f"{where}: ort_get_capability returned None for its own provider"], set()
        if not isinstance(answer, Capability):
            return [f"{where}: ort_get_capability returned {type(answer).__name__}, not a Capability"], set()
        claimed: set[int] = set()
        for claim in answer.claims:
            if not isinstance(claim, Claim):
                problems.append(f"{where}: claim {claim!r} is not a Claim")
                continue
            nodes = list(claim.nodes)
            if not nodes:
                problems.append(f"{where}: an empty claim")
                continue
            bad = [i for i in nodes if not isinstance(i, (int, np.integer)) or not 0 <= i < len(graph.nodes)]
            if bad:
                problems.append(f"{where}: claimed node indices that do not exist: {bad}")
                continue
            outside = sorted(set(nodes) - candidates)
            if outside:
                problems.append(f"{where}: claimed nodes that were not candidates: {outside}")
            twice = sorted(set(nodes) & claimed) + sorted({i for i in nodes if nodes.count(i) > 1})
            if twice:
                problems.append(f"{where}: claimed nodes twice: {sorted(set(twice))}")
            if claim.fuse and len(set(nodes)) > 1:
                if _creates_cycle(graph, set(nodes)):
                    problems.append(f"{where}: fused group {sorted(nodes)} would create a cycle")
            claimed.update(nodes)
        for i, reason in answer.declined.items():
            if i in claimed:
                problems.append(f"{where}: node {i} is both claimed and declined")
            if not isinstance(reason, str) or not reason.strip():
                problems.append(f"{where}: node {i} declined with an empty reason")
        silent = sorted(candidates - claimed - set(answer.declined))
        if silent:
            names = ", ".join(f"{graph.nodes[i].name} ({graph.nodes[i].op_type})" for i in silent[:5])
            problems.append(f"{where}: {len(silent)} candidate(s) neither claimed nor given a reason: {names}")
        return problems, claimed

    def _claims_on_cases(self, ctx: ProviderContext, problems: list[str]) -> int:
        """Ask for capability on every node case; keep what was claimed for node_cases."""
        cases, source = load_node_cases()
        self.scorecard.node_cases.source = source
        claims: dict[str, tuple[NodeCase, GraphView, frozenset[int]]] = {}
        unloadable = 0
        for case in cases:
            try:
                model = load_model(case.model)
            except Exception:
                unloadable += 1
                continue
            graph = GraphView(model.graph, opset_imports=dict(model.opset_imports), ir_version=model.ir_version)
            candidates = frozenset(range(len(graph.nodes)))
            try:
                answer = self._ask(ctx, graph, candidates)
            except Exception as exc:
                problems.append(f"case {case.name}: ort_get_capability raised {type(exc).__name__}: {exc}")
                continue
            found, claimed = self._capability_problems(graph, candidates, answer, f"case {case.name}")
            problems.extend(found)
            if claimed:
                claims[case.name] = (case, graph, frozenset(claimed))
                for i in claimed:
                    node = graph.nodes[i]
                    for name in (*node.inputs, *node.outputs):
                        if name:
                            try:
                                dtype = graph.value(name).dtype
                            except KeyError:
                                dtype = None
                            if dtype is not None:
                                self._claimed_dtypes.add(dtype)
        self._case_claims = claims
        return unloadable

    def _check_capability(self, problems: list[str]) -> str:
        ctx = self._context()
        try:
            asked = 0
            for label, proto in probes.generated_models().items():
                model = load_model(proto)
                graph = GraphView(model.graph, opset_imports=dict(model.opset_imports), ir_version=model.ir_version)
                every = frozenset(range(len(graph.nodes)))
                half = frozenset(range(0, len(graph.nodes), 2))  # must claim only among these
                for cands, tag in ((every, "all nodes"), (half, "every other node")):
                    answer = self._ask(ctx, graph, cands)
                    asked += 1
                    found, _ = self._capability_problems(graph, cands, answer, f"{label} ({tag})")
                    problems.extend(found)
            unloadable = self._claims_on_cases(ctx, problems)
            asked += len(load_node_cases()[0]) - unloadable
        finally:
            self._end(ctx)
        claimed_cases = len(self._case_claims or {})
        dtypes = ", ".join(sorted(str(d) for d in self._claimed_dtypes)) or "none"
        return f"{asked} answers checked; claims nodes in {claimed_cases} node case(s); dtypes: {dtypes}"

    def _ensure_case_claims(self) -> dict[str, tuple[NodeCase, GraphView, frozenset[int]]]:
        if self._case_claims is None:
            self.run("capability")
        if self._case_claims is None:
            raise _Skip("the capability check could not ask the provider (see it)")
        return self._case_claims

    # ------------------------------------------------------------------ 5. allocator
    def _check_allocator(self, problems: list[str]) -> str:
        device = self._device()
        ctx = self._context()
        try:
            allocator = self._provider().hooks.ort_create_allocator(ep=ctx)
            if allocator is None:
                if device.memory != HOST_MEMORY:
                    problems.append(f"device memory {device.memory!r} but ort_create_allocator returned None")
                    return ""
                raise _Skip("no allocator: the provider computes on host memory that numpy manages")
            notes = self._exercise_allocator(allocator, device, problems)
        finally:
            self._end(ctx)
        notes.append(self._check_memory_limit(allocator, problems))
        return "; ".join(n for n in notes if n)

    def _exercise_allocator(self, allocator: Any, device: EpDevice, problems: list[str]) -> list[str]:
        info = getattr(allocator, "memory_info", None)
        if not isinstance(info, MemoryInfo):
            problems.append(f"allocator.memory_info is {type(info).__name__}, not MemoryInfo")
            return []
        if info.name != device.memory:
            problems.append(f"allocator memory {info.name!r} differs from the device's memory {device.memory!r}")
        align = info.alignment
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            problems.append(f"alignment {align!r} is not a power of two")
            align = 1
        before = allocator.stats()
        if not isinstance(before, AllocatorStats):
            problems.append(f"stats() returned {type(before).__name__}, not AllocatorStats")
            return []
        sizes = (1, 64, 1000, 4096, 65537)
        buffers = []
        unverified = 0
        for n in sizes:
            buffer = allocator.allocate(n)
            buffers.append(buffer)
            got = getattr(buffer, "nbytes", None)
            if isinstance(got, int) and got < n:
                problems.append(f"allocate({n}) returned {got} bytes")
            address = _address(buffer)
            if address is None:
                unverified += 1
            elif address % align:
                problems.append(f"allocate({n}) returned address {address:#x}, not aligned to {align}")
        during = allocator.stats()
        total = sum(sizes)
        if during.num_allocs - before.num_allocs != len(sizes):
            problems.append(f"num_allocs rose by {during.num_allocs - before.num_allocs} after {len(sizes)} allocations")
        if during.in_use_bytes - before.in_use_bytes < total:
            problems.append(f"in_use_bytes rose by {during.in_use_bytes - before.in_use_bytes}, less than the {total} allocated")
        if during.peak_bytes < during.in_use_bytes:
            problems.append(f"peak_bytes {during.peak_bytes} is below in_use_bytes {during.in_use_bytes}")
        if during.total_allocated_bytes - before.total_allocated_bytes < total:
            problems.append("total_allocated_bytes did not count the allocations")
        for buffer in buffers:
            allocator.free(buffer)
        after = allocator.stats()
        if after.num_frees - before.num_frees != len(sizes):
            problems.append(f"num_frees rose by {after.num_frees - before.num_frees} after {len(sizes)} frees")
        if after.in_use_bytes != before.in_use_bytes:
            problems.append(f"in_use_bytes is {after.in_use_bytes} after freeing everything, was {before.in_use_bytes}")
        notes = [f"memory {info.name}, alignment {align}, statistics consistent over {len(sizes)} allocations"]
        if unverified:
            notes.append(f"alignment not verifiable for {type(buffers[0]).__name__} buffers (no address attribute)")
        return notes

    def _check_memory_limit(self, allocator: Any, problems: list[str]) -> str:
        spec = self._provider().spec
        key = self.config.memory_limit_option
        if key is None:
            key = next((o.name for o in spec.options if _LIMIT_OPTION.search(o.name)), None)
        if key is None:
            limit = allocator.stats().limit_bytes
            if limit is None:
                return "no memory-limit option: limit not checked"
            return self._limit_enforced(allocator, limit, problems, f"default limit {limit}")
        if spec.option(key) is None:
            problems.append(f"memory_limit_option {key!r} is not one of the provider's options")
            return ""
        # the option's unit from its name: memory_limit_mb=1 is 1 MiB; no suffix means bytes
        unit = next((u for suffix, u in _LIMIT_UNITS.items() if key.lower().endswith(suffix)), 1)
        limit = max(1 << 20, unit)
        ctx = self._context({**self.config.options, key: str(limit // unit)})
        try:
            limited = self._provider().hooks.ort_create_allocator(ep=ctx)
            if limited is None:
                problems.append(f"with {key}={limit} ort_create_allocator returned None")
                return ""
            if limited.stats().limit_bytes != limit:
                problems.append(f"with {key}={limit}, stats().limit_bytes is {limited.stats().limit_bytes}")
            return self._limit_enforced(limited, limit, problems, f"option {key}={limit // unit}")
        finally:
            self._end(ctx)

    @staticmethod
    def _limit_enforced(allocator: Any, limit: int, problems: list[str], how: str) -> str:
        first = allocator.allocate(limit // 2)
        try:
            second = allocator.allocate(limit // 2 + limit // 4)
        except MemoryError as exc:
            if "limit" not in str(exc).lower() and str(limit) not in str(exc):
                problems.append(f"MemoryError over the limit does not mention the limit: {exc}")
        else:
            allocator.free(second)
            problems.append(f"{how}: {limit // 2 + limit // 4} bytes more with {limit // 2} in use were granted")
        allocator.free(first)
        try:  # freed memory counts again
            allocator.free(allocator.allocate(limit // 2 + limit // 4))
        except MemoryError as exc:
            problems.append(f"{how}: memory freed was not given back to the limit: {exc}")
        return f"limit honoured ({how})"

    # ------------------------------------------------------------------ 6. data transfer
    def _check_data_transfer(self, problems: list[str]) -> str:
        device = self._device()
        if device.memory == HOST_MEMORY:
            raise _Skip("host memory: core inserts no copies for this provider")
        ctx = self._context()
        try:
            transfer = self._provider().hooks.ort_create_data_transfer(ep=ctx)
            if not isinstance(transfer, DataTransfer):
                problems.append(f"device memory {device.memory!r} needs a DataTransfer, got {type(transfer).__name__}")
                return ""
            if self.config.transfer_dtypes is not None:
                dtypes = [np.dtype(d) for d in self.config.transfer_dtypes]
            else:
                self._ensure_case_claims()
                dtypes = sorted(self._claimed_dtypes, key=str) or [np.dtype(np.float32)]
            rng = np.random.default_rng(0)
            trips = 0
            for dtype in dtypes:
                if dtype.kind in "OUSV":
                    continue
                for shape in ((), (0,), (7,), (2, 3, 5), (1, 4, 9, 3)):
                    host = _random_bits(rng, dtype, shape)
                    arrays = [host]
                    if host.ndim >= 2:
                        arrays.append(np.swapaxes(host, 0, -1))  # a non-contiguous view
                    for array in arrays:
                        trips += 1
                        try:
                            back = transfer.to_host(transfer.to_device(array))
                        except Exception as exc:
                            problems.append(f"{dtype} {list(array.shape)}: round trip raised {type(exc).__name__}: {exc}")
                            continue
                        if isinstance(back, np.generic):  # a numpy scalar for a 0-d tensor is fine
                            back = np.asarray(back)
                        if not isinstance(back, np.ndarray):
                            problems.append(f"{dtype}: to_host returned {type(back).__name__}, not a numpy array")
                        elif back.shape != array.shape or back.dtype != array.dtype:
                            problems.append(f"{dtype} {list(array.shape)}: came back as {back.dtype} {list(back.shape)}")
                        elif np.ascontiguousarray(back).tobytes() != np.ascontiguousarray(array).tobytes():
                            problems.append(f"{dtype} {list(array.shape)}: bytes changed on the round trip")
        finally:
            self._end(ctx)
        return f"{trips} round trips bit-exact over {len(dtypes)} dtype(s): {', '.join(map(str, dtypes))}"

    # ------------------------------------------------------------------ 7. node cases
    def _check_node_cases(self, problems: list[str]) -> str:
        self._device()
        claims = self._ensure_case_claims()
        tally = self.scorecard.node_cases
        selected = [
            entry for entry in claims.values()
            if self.config.ops is None or set(entry[0].op_types) & set(self.config.ops)
        ]
        if self.config.max_cases is not None:
            selected = selected[: self.config.max_cases]
        if not selected:
            raise _Skip(f"{self.name} claims no node of any case (source: {tally.source})")
        for case, graph, claimed in selected:
            outcome = self._run_case(case, graph, claimed)
            if outcome is None:
                continue  # not placed on the provider after all (kernel creation declined it)
            status, message, ops = outcome
            if status == "unrunnable":
                tally.unrunnable[case.name] = message
                continue
            if status == "failed" and case.name not in self.config.known_failures and self._fails_on_fallback(case):
                tally.fallback_failures[case.name] = message
                continue
            tally.claimed += 1
            passed = status == "passed"
            tally.passed += passed
            for op in ops:  # per op the provider ran in the case: [passed, claimed]
                counts = tally.per_op.setdefault(op, [0, 0])
                counts[0] += passed
                counts[1] += 1
            if passed:
                if case.name in self.config.known_failures:
                    logger.info("kit: %s is listed as a known failure but passes", case.name)
            elif case.name in self.config.known_failures:
                tally.known_failures[case.name] = f"{self.config.known_failures[case.name]} ({message})"
            else:
                tally.failures[case.name] = message
                problems.append(f"{case.name}: {message}")
        known = f", {len(tally.known_failures)} known failure(s)" if tally.known_failures else ""
        if tally.fallback_failures:
            known += f"; {len(tally.fallback_failures)} not counted: they fail on {CPU_PROVIDER} alone too"
        return (
            f"{tally.passed}/{tally.claimed} claimed cases passed over {len(tally.per_op)} op(s){known}; "
            f"{len(tally.unrunnable)} unrunnable (nothing installed runs the rest); source: {tally.source}"
        )

    def _fails_on_fallback(self, case: NodeCase) -> bool:
        """Whether ``case`` fails without the provider too (then the fallback is at fault)."""
        if self.name == CPU_PROVIDER or registry().get(CPU_PROVIDER) is None:
            return False
        so = SessionOptions()
        so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            with np.errstate(all="ignore"):
                sess = InferenceSession(case.model, so, providers=[CPU_PROVIDER])
        except Exception:
            return True
        return self._compare_case(case, sess) is not None

    def _compare_case(self, case: NodeCase, sess: InferenceSession) -> str | None:
        input_names = [i.name for i in case.model.graph.input]
        output_names = [o.name for o in case.model.graph.output]
        random = bool(RANDOM_OPS & set(case.op_types))
        for k, (inputs, expected) in enumerate(case.data_sets):
            feeds = {name: value for name, value in zip(input_names, inputs)}
            try:
                with np.errstate(all="ignore"):
                    actual = sess.run(output_names[: len(expected)], feeds)
            except Exception as exc:
                return f"data set {k}: run raised {type(exc).__name__}: {str(exc)[:300]}"
            for name, e, a in zip(output_names, expected, actual):
                problem = compare(e, a, case.rtol, case.atol, f"data set {k} output {name!r}", random)
                if problem:
                    return problem
        return None

    def _run_case(
        self, case: NodeCase, graph: GraphView, claimed: frozenset[int]
    ) -> tuple[str, str, frozenset[str]] | None:
        """(status, message, op types run by the provider), or None if it ran none after all."""
        asked = frozenset(graph.nodes[i].qualified_op for i in claimed)
        try:
            with np.errstate(all="ignore"):
                sess = self._session(case.model, optimize=False)
        except OrtNotImplemented as exc:
            return "unrunnable", " ".join(str(exc).split())[:400], asked
        except Exception as exc:
            return "failed", f"session creation raised {type(exc).__name__}: {exc}", asked
        ops = frozenset(
            f"{p.domain}::{p.op_type}" if p.domain else p.op_type
            for p in sess.get_placement().nodes if p.provider == self.name
        )
        if not ops:
            return None
        problem = self._compare_case(case, sess)
        return ("failed", problem, ops) if problem else ("passed", "", ops)

    # ------------------------------------------------------------------ 8. partial placement
    def _probe(self) -> tuple[str, onnx.ModelProto]:
        """A generated model of which the provider runs some nodes (the first that fits)."""
        if self._probe_model is None:
            self._device()
            for label, model in probes.generated_models().items():
                try:
                    sess = self._session(model)
                except OrtNotImplemented:  # the fallback cannot run the rest: try the next model
                    continue
                if sess.get_placement().counts().get(self.name):
                    self._probe_model = (label, model)
                    break
            else:
                raise _Skip(f"no runnable probe model ({', '.join(probes.generated_models())}) has a node on {self.name}")
        return self._probe_model

    def _check_partial_placement(self, problems: list[str]) -> str:
        self._device()
        if self.name == CPU_PROVIDER:
            raise _Skip(f"{self.name} is the fallback provider itself: no other provider to share a graph with")
        label, model = self._probe()
        sess = self._session(model)
        counts = sess.get_placement().counts()
        total = sum(counts.values())
        how = "as the provider claims it"
        if counts.get(self.name) == total:
            # it takes everything: put the CPU provider first and let it have one node in the
            # middle (a veto keeps it off the others), so the provider gets the graph in two
            # parts (two fused groups for a compiling provider) with a foreign node between
            if registry().get(CPU_PROVIDER) is None:
                raise _Skip(f"{self.name} takes all of {label}; splitting it needs {CPU_PROVIDER} installed")
            mine = [p.name for p in sess.get_placement().nodes if p.graph == "" and p.provider == self.name]
            middle = mine[len(mine) // 2]
            veto = OpVeto(CPU_PROVIDER, nodes=[n for n in mine if n != middle], reason="kept for the provider under test by the kit")
            so = SessionOptions()
            with veto.installed():
                sess = InferenceSession(model, so, providers=[CPU_PROVIDER, (self.name, dict(self.config.options))])
            counts = sess.get_placement().counts()
            how = f"with node {middle!r} given to {CPU_PROVIDER} first"
        if not counts.get(self.name) or counts.get(self.name) == total:
            problems.append(f"{label}: could not obtain a split placement ({dict(counts)})")
            return ""
        feeds = models.random_inputs(model, batch=2)
        expected, reference = probes.reference_outputs(model, feeds)
        actual = sess.run(None, feeds)
        names = [o.name for o in model.graph.output]
        for name, e, a in zip(names, expected, actual):
            problem = compare(e, a, MODEL_RTOL, MODEL_ATOL, f"{label} output {name!r}")
            if problem:
                problems.append(problem)
        split = ", ".join(f"{p} {n}" for p, n in counts.items())
        copies = len(sess.get_placement().copies)
        return f"{label} split {how} ({split}; {copies} copies) matches {reference} (rtol {MODEL_RTOL}, atol {MODEL_ATOL})"

    # ------------------------------------------------------------------ fusion parity
    def _check_fusion_parity(self, problems: list[str]) -> str:
        """For each fused op the optimizer may form (``optimizer.FUSED_OPS``, one case per
        attribute value): (a) the unfused pattern at ORT_ENABLE_ALL with the provider first, and
        where the fused node is formed for the provider, its outputs against the unfused
        model's on onnxruntime; (b) the fused node as a model may already hold it, at
        ORT_DISABLE_ALL: declined, or claimed and matching. Outcomes go to the scorecard's
        ``fusions``."""
        import onnx_ir as ir

        from ...optimizer import optimize

        self._device()
        spec = self._provider().spec
        chain: list[Any] = [(self.name, dict(self.config.options))]
        if self.name != CPU_PROVIDER and registry().get(CPU_PROVIDER) is not None:
            chain.append(CPU_PROVIDER)
        outcomes = self.scorecard.fusions
        reference = ""
        for case in probes.fusion_cases():
            declared = any(op.admits(case.domain, case.op_type, case.attributes) for op in spec.fused_ops)
            feeds = models.random_inputs(case.model, batch=2, seed=3)
            expected, reference = probes.reference_outputs(case.model, feeds)
            names = [o.name for o in case.model.graph.output]
            fused = ir.serde.deserialize_model(case.model)
            optimize(fused, GraphOptimizationLevel.ORT_ENABLE_ALL, lambda n, c=case: n.op_type not in c.without)
            steps = []
            for how, model, level in (("formed", case.model, GraphOptimizationLevel.ORT_ENABLE_ALL),
                                      ("given", ir.serde.serialize_model(fused), GraphOptimizationLevel.ORT_DISABLE_ALL)):
                so = SessionOptions()
                so.graph_optimization_level = level
                try:
                    sess = InferenceSession(model, so, providers=chain)
                except OrtNotImplemented:
                    steps.append(f"{how}: nothing installed runs it")
                    continue
                mine = [p for p in sess.get_placement().nodes if p.provider == self.name
                        and (p.domain, p.op_type) == (case.domain, case.op_type)]
                if not mine:
                    if how == "formed" and declared:
                        steps.append("formed: declared, not formed (declined in the probe, or another fusion took the pattern)")
                    elif how == "given":
                        steps.append("given: declined")
                    continue
                mismatch = [m for e, a, name in zip(expected, sess.run(None, feeds), names)
                            if (m := compare(e, a, MODEL_RTOL, MODEL_ATOL, f"output {name!r}"))]
                if mismatch:
                    fix = ("remove it from ProviderSpec.fused_ops" if how == "formed"
                           else "decline it in ort_get_capability")
                    problems.append(f"{case.label} ({how}): runs on {self.name} and differs from the unfused graph: "
                                    f"{mismatch[0]}; {fix}")
                    steps.append(f"{how}: DIFFERS")
                else:
                    steps.append(f"{how}: matches")
            outcomes[case.label] = ("declared; " if declared else "not declared; ") + ", ".join(steps)
        formed = sum("formed: matches" in o or "formed: DIFFERS" in o for o in outcomes.values())
        given = sum("given: matches" in o or "given: DIFFERS" in o for o in outcomes.values())
        return (f"{len(outcomes)} fused ops: {formed} formed for {self.name}, {given} claimed where a model holds "
                f"them, the rest declined; compared with the unfused graph on {reference} (rtol {MODEL_RTOL}, "
                f"atol {MODEL_ATOL})")

    # ------------------------------------------------------------------ 9. concurrency
    def _check_concurrency(self, problems: list[str]) -> str:
        label, model = self._probe()
        sess = self._session(model)
        threads, runs = self.config.threads, self.config.runs_per_thread
        feeds = [[models.random_inputs(model, batch=1 + (t + r) % 3, seed=100 * t + r) for r in range(runs)] for t in range(threads)]
        serial = [[sess.run(None, f) for f in per_thread] for per_thread in feeds]
        barrier = threading.Barrier(threads)

        def worker(t: int) -> list[list[Any]]:
            barrier.wait()
            return [sess.run(None, f) for f in feeds[t]]

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(worker, t) for t in range(threads)]
            for t, future in enumerate(futures):
                try:
                    results = future.result(timeout=600)
                except Exception as exc:
                    problems.append(f"thread {t} raised {type(exc).__name__}: {exc}")
                    continue
                for r, (got, want) in enumerate(zip(results, serial[t])):
                    for k, (a, e) in enumerate(zip(got, want)):
                        problem = compare(e, a, THREAD_RTOL, THREAD_ATOL, f"thread {t} run {r} output {k}")
                        if problem:
                            problems.append(problem)
        placed = sess.get_placement().counts().get(self.name, 0)
        return (
            f"{label} ({placed} nodes on {self.name}): {threads} threads x {runs} runs match serial runs "
            f"(rtol {THREAD_RTOL}, atol {THREAD_ATOL})"
        )

    # ------------------------------------------------------------------ 10. bad inputs
    def _check_bad_inputs(self, problems: list[str]) -> str:
        label, model = self._probe()
        sess = self._session(model)
        feeds = models.random_inputs(model, batch=1)
        first = next(iter(feeds))
        array = feeds[first]
        other_dtype = np.float64 if array.dtype != np.float64 else np.float32
        cases: list[tuple[str, dict[str, Any], list[str]]] = [
            ("wrong dtype", {**feeds, first: array.astype(other_dtype)}, [first]),
            ("wrong rank", {**feeds, first: array.reshape(-1)}, [first] if array.ndim != 1 else []),
            ("unknown input", {**feeds, "kit_no_such_input": array}, ["kit_no_such_input", first]),
            ("missing input", {k: v for k, v in feeds.items() if k != first}, [first]),
        ]
        for what, bad_feeds, must_name in cases:
            if not must_name:
                continue
            _expect_error(problems, what, lambda f=bad_feeds: sess.run(None, f), must_name)
        _expect_error(problems, "unknown output name", lambda: sess.run(["kit_no_such_output"], feeds), ["kit_no_such_output"])
        checked = f"{label}: input dtype, rank, unknown/missing names and unknown output rejected naming the value"
        # an error raised inside one of the provider's kernels must reach the caller naming the node
        for op in ("Add", "Mul", "Sub", "Div"):
            probe = probes.binary_model(op)
            try:
                kernel_sess = self._session(probe)
            except OrtError:
                continue
            placement = kernel_sess.get_placement().nodes
            if not placement or placement[0].provider != self.name:
                continue
            node = placement[0].name
            bad = {"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)}
            _expect_error(problems, f"{op} of shapes [3] and [4]", lambda s=kernel_sess, f=bad: s.run(None, f), [node])
            return checked + f"; {op} on shapes that do not broadcast fails naming node {node!r}"
        return checked + "; no binary elementwise op claimed: kernel-error check not applicable"


# ---------------------------------------------------------------------------- helpers
def _expect_error(problems: list[str], what: str, call: Callable[[], Any], must_name: list[str]) -> None:
    try:
        call()
    except OrtError as exc:
        missing = [n for n in must_name if n not in str(exc)]
        if missing:
            problems.append(f"{what}: the error does not name {', '.join(map(repr, missing))}: {exc}")
    except Exception as exc:
        problems.append(f"{what}: raised {type(exc).__name__} instead of an ort_core error: {exc}")
    else:
        problems.append(f"{what}: accepted without an error")


def _address(buffer: Any) -> int | None:
    """The device address of a buffer, where it exposes one (numpy, CUDA array interface, CuPy)."""
    for attr in ("__array_interface__", "__cuda_array_interface__"):
        info = getattr(buffer, attr, None)
        if isinstance(info, dict) and "data" in info:
            return int(info["data"][0])
    pointer = getattr(getattr(buffer, "data", None), "ptr", None)
    return int(pointer) if isinstance(pointer, int) else None


def _random_bits(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Random bytes of ``dtype`` (NaN payloads included: copies must keep every bit)."""
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    count = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _similar(a: str, b: str) -> bool:
    """Names one edit apart or sharing all but two letters (typo hints)."""
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio() > 0.85


def run_kit(provider: str, **config: Any) -> Scorecard:
    """Run every check for ``provider`` and return the scorecard (see ``KitConfig``)."""
    return Kit(KitConfig(provider, **config)).run_all()
