"""Choosing providers by device: onnxruntime's selection policies and delegate, and a measured
MAX_PERFORMANCE.

A session made without ``providers`` whose ``SessionOptions`` carry a policy
(``set_provider_selection_policy``) or a delegate (``set_provider_selection_policy_delegate``)
gets its providers from here; the CPU provider is added last as for any session.

* ``DEFAULT`` and ``PREFER_CPU``: the CPU provider.
* ``PREFER_GPU``: the first provider with a hardware GPU device, then the CPU provider.
  Software adapters (lavapipe, WARP: ``EpDevice.hardware`` False) are passed over: they are
  the CPU under another name.
* ``PREFER_NPU``, ``MAX_EFFICIENCY``, ``MIN_OVERALL_POWER``: the first provider with an NPU
  device, then the CPU provider (onnxruntime maps the last two to the NPU as well).
* ``MAX_PERFORMANCE``: measured, where onnxruntime ranks device types by a fixed order. Each
  candidate placement (each usable accelerator with CPU fallback, and the CPU provider alone)
  is made into a session and timed on inputs of the model's shapes; the fastest is kept. The
  session config entry ``ort_core.max_performance=1`` does the same for an explicit
  ``providers`` list (its accelerators, each with the CPU provider, and the CPU alone).

MAX_PERFORMANCE session config entries (ort-core's own):

* ``ort_core.max_performance.budget_ms`` (default 20000): time for the whole measurement,
  session creation of the candidates included. No candidate is started once it is spent and
  one has been measured (one candidate's creation can overrun it); each candidate's timed
  runs stop at its share of the budget (at least one timed run after a warm-up run).
* ``ort_core.max_performance.cache_file``: a JSON file of earlier choices by model hash
  (sha256 of the model's bytes) and candidate list; a hit skips the measurement. Choices are
  also kept in the process.
* ``ort_core.max_performance.inputs_file``: an ``.npz`` of sample inputs by name (for models
  whose inputs steer control flow, e.g. a sample rate); otherwise inputs are generated, with
  symbolic dimensions from the free-dimension overrides or 1.

The placement report (``InferenceSession.get_placement()``) says which policy chose what
(``policy``, ``selection``) and, for MAX_PERFORMANCE, what was measured (``measurements``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ._enum import OrtEnum
from .devices import OrtEpDevice, as_ep_device, ep_devices
from .errors import EPFail, InvalidArgument
from .partition import CPU_PROVIDER

if TYPE_CHECKING:
    from .session import SessionOptions

logger = logging.getLogger("ort_core")

MEASURE = "ort_core.max_performance"
BUDGET_MS = "ort_core.max_performance.budget_ms"
CACHE_FILE = "ort_core.max_performance.cache_file"
INPUTS_FILE = "ort_core.max_performance.inputs_file"
DEFAULT_BUDGET_MS = 20000.0


class OrtExecutionProviderDevicePolicy(OrtEnum):
    """onnxruntime's provider selection policies (same names and values)."""

    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


Delegate = Callable[[list[OrtEpDevice], Mapping[str, str], Mapping[str, str], int], Sequence[OrtEpDevice]]
Requested = list[tuple[str, dict[str, Any]]]


@dataclass
class Measurement:
    """One candidate placement as MAX_PERFORMANCE timed it."""

    providers: list[str]
    status: str  # "ok", "failed: ...", "not measured: budget spent"
    create_ms: float = 0.0
    ms_per_run: float | None = None
    runs: int = 0


@dataclass
class Selection:
    """What a policy chose and why, for the placement report."""

    policy: str
    chosen: list[str]
    devices: dict[str, str] = field(default_factory=dict)  # provider -> device it was given
    measurements: list[Measurement] = field(default_factory=list)
    measure_ms: float = 0.0
    cached: bool = False

    def describe(self) -> str:
        lines = [f"{self.policy} chose " + " -> ".join(
            f"{p} ({self.devices[p]})" if p in self.devices else p for p in self.chosen)]
        if self.cached:
            lines.append("  (measured earlier: choice read from the cache)")
        for m in self.measurements:
            timing = f"{m.ms_per_run:.3f} ms/run over {m.runs} runs, created in {m.create_ms:.0f} ms" \
                if m.ms_per_run is not None else m.status
            lines.append(f"  {' + '.join(m.providers)}: {timing}")
        if self.measurements:
            lines.append(f"  measurement took {self.measure_ms:.0f} ms")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# fixed policies and the delegate
# --------------------------------------------------------------------------------------------


def _first_of_type(devices: Sequence[OrtEpDevice], device_type: str) -> OrtEpDevice | None:
    for d in devices:
        if d.ep_name != CPU_PROVIDER and d.ep_device.device_type == device_type and d.ep_device.hardware:
            return d
    return None


def _fixed(policy: OrtExecutionProviderDevicePolicy, devices: Sequence[OrtEpDevice]) -> list[OrtEpDevice]:
    wanted = {
        OrtExecutionProviderDevicePolicy.PREFER_GPU: "GPU",
        OrtExecutionProviderDevicePolicy.PREFER_NPU: "NPU",
        OrtExecutionProviderDevicePolicy.MAX_EFFICIENCY: "NPU",
        OrtExecutionProviderDevicePolicy.MIN_OVERALL_POWER: "NPU",
    }.get(policy)
    chosen = [] if wanted is None else [d for d in (_first_of_type(devices, wanted),) if d is not None]
    chosen += [d for d in devices if d.ep_name == CPU_PROVIDER][:1]
    return chosen


def _from_devices(devices: Sequence[Any], what: str) -> tuple[Requested, dict[str, Any]]:
    """Providers in the order of their first device, each with that device."""
    requested: Requested = []
    chosen: dict[str, Any] = {}
    for d in devices:
        try:
            ep = as_ep_device(d)
        except TypeError as exc:
            raise InvalidArgument(f"{what}: {exc}") from None
        if ep.ep_name not in chosen:
            chosen[ep.ep_name] = ep
            requested.append((ep.ep_name, {}))
    return requested, chosen


def model_metadata(source: Any) -> dict[str, str]:
    """The model's metadata_props, read without its external data."""
    if isinstance(source, onnx.ModelProto):
        model = source
    elif isinstance(source, (bytes, bytearray)):
        model = onnx.load_model_from_string(bytes(source))
    else:
        model = onnx.load(os.fspath(source), load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}


def runtime_metadata() -> dict[str, str]:
    from .version import __version__

    return {"runtime": "ort_core", "version": __version__}


def select(options: SessionOptions, source: Any, explicit: Requested | None) -> tuple[Requested, dict[str, Any], Selection | None]:
    """The providers (name, options) a session binds, the device chosen for each (by name),
    and what chose them (None for a plain explicit list)."""
    config = options.config_entries
    if explicit:
        if config.get(MEASURE, "0") == "1":
            return _measured(options, source, explicit, {})
        return explicit, {}, None
    if options._delegate is not None:
        devices = ep_devices()
        try:
            picked = list(options._delegate(devices, model_metadata(source), runtime_metadata(), len(devices)))
        except Exception as exc:
            raise EPFail(f"the provider selection delegate raised {type(exc).__name__}: {exc}") from exc
        if not picked:
            raise EPFail("the provider selection delegate selected no device")
        requested, chosen = _from_devices(picked, "the provider selection delegate")
        return requested, chosen, Selection("delegate", [n for n, _ in requested], _names(chosen))
    policy = options._policy
    if policy is None:
        return [], {}, None
    devices = ep_devices()
    if policy == OrtExecutionProviderDevicePolicy.MAX_PERFORMANCE:
        candidates = list(dict.fromkeys(d.ep_name for d in devices))
        return _measured(options, source, [(n, {}) for n in candidates], {})
    requested, chosen = _from_devices(_fixed(policy, devices), policy.name)
    return requested, chosen, Selection(policy.name, [n for n, _ in requested], _names(chosen))


def _names(chosen: Mapping[str, Any]) -> dict[str, str]:
    return {n: f"{d.device_type} {d.name!r}" for n, d in chosen.items()}


# --------------------------------------------------------------------------------------------
# MAX_PERFORMANCE, measured
# --------------------------------------------------------------------------------------------

_CACHE: dict[str, dict[str, Any]] = {}
_CACHE_LOCK = threading.Lock()


def _model_bytes(source: Any) -> bytes:
    if isinstance(source, onnx.ModelProto):
        return source.SerializeToString()
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    return Path(source).read_bytes()


def _candidates(requested: Requested) -> list[Requested]:
    cpu = [(n, o) for n, o in requested if n == CPU_PROVIDER] or [(CPU_PROVIDER, {})]
    accelerators = [(n, o) for n, o in requested if n != CPU_PROVIDER]
    return [[a, *cpu] for a in accelerators] + [cpu]


def _sample_inputs(session: Any, options: SessionOptions) -> dict[str, Any]:
    path = options.config_entries.get(INPUTS_FILE, "")
    if path:
        try:
            with np.load(path) as data:
                return {k: data[k] for k in data.files}
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"{INPUTS_FILE} {path!r}: cannot read it as .npz: {exc}") from None
    overrides = options.free_dimension_overrides
    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {}
    for arg in session.get_inputs():
        from .graph.view import dtype_of_type_string

        dtype = dtype_of_type_string(arg.type)
        if dtype is None:
            raise InvalidArgument(f"MAX_PERFORMANCE cannot generate input {arg.name!r} of type {arg.type}: "
                                  f"give sample inputs in {INPUTS_FILE}")
        shape = [d if isinstance(d, int) else overrides.get(d, 1) if isinstance(d, str) else 1
                 for d in (arg.shape or [])]
        if dtype.kind == "f":
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[arg.name] = rng.random(shape) < 0.5
        else:
            feeds[arg.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def _measured(options: SessionOptions, source: Any, requested: Requested,
              chosen: dict[str, Any]) -> tuple[Requested, dict[str, Any], Selection]:
    from .session import InferenceSession

    config = options.config_entries
    try:
        budget_ms = float(config.get(BUDGET_MS, DEFAULT_BUDGET_MS))
    except ValueError:
        raise InvalidArgument(f"{BUDGET_MS}={config[BUDGET_MS]!r}: expected a number of milliseconds") from None
    candidates = _candidates(requested)
    data = _model_bytes(source)
    key = hashlib.sha256(data).hexdigest() + ":" + "|".join("+".join(n for n, _ in c) for c in candidates)
    cache_file = config.get(CACHE_FILE, "")
    hit = _cache_get(key, cache_file)
    if hit is not None:
        names = hit["chosen"]
        best = next((c for c in candidates if [n for n, _ in c] == names), None)
        if best is not None:
            measurements = [Measurement(**m) for m in hit["measurements"]]
            return best, chosen, Selection("MAX_PERFORMANCE", names, measurements=measurements,
                                           measure_ms=hit["measure_ms"], cached=True)
    probe = options.copy()
    probe._policy = None
    probe._delegate = None
    probe._providers = []
    probe.add_session_config_entry(MEASURE, "0")
    probe.add_session_config_entry("ep.context_enable", "0")
    start = time.perf_counter()
    deadline = start + budget_ms / 1000
    share = budget_ms / 1000 / len(candidates)
    measurements: list[Measurement] = []
    feeds = None
    for candidate in candidates:
        names = [n for n, _ in candidate]
        if time.perf_counter() >= deadline and any(m.ms_per_run is not None for m in measurements):
            measurements.append(Measurement(names, "not measured: budget spent"))
            continue
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                session = InferenceSession(source, probe, providers=candidate)
            if [p for p in session.get_providers()] != names:
                measurements.append(Measurement(names, f"failed: bound {session.get_providers()}"))
                continue
            create_ms = (time.perf_counter() - t0) * 1000
            if feeds is None:
                feeds = _sample_inputs(session, options)
            session.run(None, feeds)  # warm-up: first-run compilation and memory tracking
            times = []
            run_start = time.perf_counter()
            while not times or (time.perf_counter() - run_start < share and time.perf_counter() < deadline
                                and len(times) < 200):
                t = time.perf_counter()
                session.run(None, feeds)
                times.append(time.perf_counter() - t)
            del session
        except Exception as exc:
            measurements.append(Measurement(names, f"failed: {type(exc).__name__}: {str(exc)[:200]}"))
            continue
        measurements.append(Measurement(names, "ok", create_ms, statistics.median(times) * 1000, len(times)))
    measure_ms = (time.perf_counter() - start) * 1000
    ok = [m for m in measurements if m.ms_per_run is not None]
    if not ok:
        raise EPFail("MAX_PERFORMANCE: no candidate placement could be measured: "
                     + "; ".join(f"{'+'.join(m.providers)}: {m.status}" for m in measurements))
    best_m = min(ok, key=lambda m: m.ms_per_run)
    best = next(c for c in candidates if [n for n, _ in c] == best_m.providers)
    _cache_put(key, cache_file, {"chosen": best_m.providers, "measure_ms": measure_ms,
                                 "measurements": [asdict(m) for m in measurements]})
    logger.info("MAX_PERFORMANCE chose %s", " + ".join(best_m.providers))
    return best, chosen, Selection("MAX_PERFORMANCE", best_m.providers, measurements=measurements,
                                   measure_ms=measure_ms)


def _cache_get(key: str, cache_file: str) -> dict[str, Any] | None:
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    if cache_file and os.path.isfile(cache_file):
        try:
            stored = json.loads(Path(cache_file).read_text())
        except (OSError, ValueError) as exc:
            logger.warning("%s %r is unreadable (%s); measuring again", CACHE_FILE, cache_file, exc)
            return None
        return stored.get(key) if isinstance(stored, dict) else None
    return None


def _cache_put(key: str, cache_file: str, entry: dict[str, Any]) -> None:
    with _CACHE_LOCK:
        _CACHE[key] = entry
    if not cache_file:
        return
    try:
        stored = json.loads(Path(cache_file).read_text()) if os.path.isfile(cache_file) else {}
        if not isinstance(stored, dict):
            stored = {}
    except (OSError, ValueError):
        stored = {}
    stored[key] = entry
    try:
        Path(cache_file).parent.mkdir(parents=True, exist_ok=True)
        Path(cache_file).write_text(json.dumps(stored, indent=1))
    except OSError as exc:
        logger.warning("cannot write %s %r: %s", CACHE_FILE, cache_file, exc)


def clear_cache() -> None:
    """Forget the choices kept in this process (the cache file stays)."""
    with _CACHE_LOCK:
        _CACHE.clear()
