"""Provider options (onnxruntime's OpenVINO EP names and meanings) and the OpenVINO config
they turn into.

Every option is an ``OptionSpec``: core rejects unknown keys naming the valid ones, and the
``parse`` functions here reject bad values naming the valid ones.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ort_core import OptionSpec

PHYSICAL = ("CPU", "GPU", "NPU")
META = ("AUTO", "HETERO", "MULTI")
DEVICE_FORMS = (
    "CPU, GPU, GPU.<n>, NPU, AUTO, or a list form AUTO:<devices>, HETERO:<devices>, "
    "MULTI:<devices> with comma-separated devices (e.g. HETERO:GPU,CPU)"
)
_PHYSICAL_RE = re.compile(r"^(CPU|GPU|NPU)(\.\d+)?$")

PRECISIONS = ("FP32", "FP16", "ACCURACY")
HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")


def parse_device_type(value: Any) -> str:
    """'cpu' -> 'CPU'; 'hetero:gpu, cpu' -> 'HETERO:GPU,CPU'; anything else is an error."""
    text = str(value).strip().upper().replace(" ", "")
    if _PHYSICAL_RE.match(text) or text == "AUTO":
        return text
    head, sep, rest = text.partition(":")
    if sep and head in META and rest:
        devices = rest.split(",")
        bad = [d for d in devices if not _PHYSICAL_RE.match(d)]
        if not bad and len(set(devices)) == len(devices):
            return f"{head}:{','.join(devices)}"
    raise ValueError(f"{value!r} is not an OpenVINO device type; valid forms: {DEVICE_FORMS}")


def physical_devices(device_type: str) -> tuple[str, ...]:
    """The physical devices a device type names ('AUTO' alone names none in particular)."""
    head, _, rest = device_type.partition(":")
    if head in META:
        return tuple(rest.split(",")) if rest else ()
    return (device_type,)


def parse_precision(value: Any) -> str:
    text = str(value).strip().upper()
    if text not in ("", *PRECISIONS):
        raise ValueError(f"{value!r} is not a precision; valid values: {', '.join(PRECISIONS)} (or '' for the device default)")
    return text


def parse_hint(value: Any) -> str:
    text = str(value).strip().upper()
    if text not in HINTS:
        raise ValueError(f"{value!r} is not a performance hint; valid values: {', '.join(HINTS)}")
    return text


def _non_negative_int(name: str):
    def parse(value: Any) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}") from None
        if number < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
        return number

    return parse


def _positive_int(name: str):
    inner = _non_negative_int(name)

    def parse(value: Any) -> int:
        number = inner(value)
        if number < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        return number

    return parse


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{value!r} is not a boolean; valid values: True, False, 1, 0")


def parse_load_config(value: Any) -> dict[str, dict[str, Any]]:
    """A mapping device -> {OpenVINO property: value}, given as a dict, a JSON text, or the path
    of a JSON file (onnxruntime's ``load_config`` is such a path)."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        data: Any = value
    else:
        text = str(value).strip()
        if not text.startswith("{"):
            if not os.path.isfile(text):
                raise ValueError(f"load_config {text!r} is neither JSON text nor the path of a JSON file")
            with open(text, encoding="utf-8") as f:
                text = f.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"load_config is not valid JSON: {exc}") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) for v in data.values()):
        raise ValueError(
            'load_config must map a device to its properties, e.g. {"CPU": {"INFERENCE_NUM_THREADS": "4"}}'
        )
    result: dict[str, dict[str, Any]] = {}
    for device, props in data.items():
        key = str(device).strip().upper()
        if not (_PHYSICAL_RE.match(key) or key in META):
            raise ValueError(f"load_config names device {device!r}; valid devices: {', '.join(PHYSICAL + META)}")
        result[key] = {str(k): v for k, v in props.items()}
    return result


#: default of ``min_subgraph_size``, measured (README "Small fragments"): one OpenVINO infer
#: call costs about 15 us here, a tiny node on the CPU provider 1.5-5 us; silero VAD's fragments
#: inside If branches (1-6 nodes, two of 21) made [OpenVINO, CPU] 2-4x slower than CPU alone
MIN_SUBGRAPH_SIZE = 32

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("device_type", "CPU", f"OpenVINO device to compile for: {DEVICE_FORMS}", parse_device_type),
    OptionSpec(
        "precision",
        "",
        "inference precision: FP32, FP16, or ACCURACY (the model's own precision); '' = the "
        "device default as in onnxruntime (FP32 on CPU, FP16 on GPU and NPU)",
        parse_precision,
    ),
    OptionSpec("num_of_threads", 0, "CPU inference threads (INFERENCE_NUM_THREADS); 0 = the session's "
               "intra_op_num_threads, or OpenVINO's choice", _non_negative_int("num_of_threads")),
    OptionSpec("num_streams", 0, "parallel execution streams (NUM_STREAMS); 0 = chosen by the performance hint",
               _non_negative_int("num_streams")),
    OptionSpec("performance_hint", "LATENCY", "OpenVINO PERFORMANCE_HINT: LATENCY, THROUGHPUT or "
               "CUMULATIVE_THROUGHPUT", parse_hint, HINTS),
    OptionSpec("cache_dir", "", "directory of OpenVINO's compiled-model cache (CACHE_DIR); '' = no cache",
               lambda v: str(v).strip()),
    OptionSpec("load_config", {}, "per-device OpenVINO properties: a JSON file path, JSON text or dict "
               '{"CPU": {"PROPERTY": value}}; these override the other options', parse_load_config),
    OptionSpec("disable_dynamic_shapes", False, "never compile a dynamic-shape model: one static-shape model "
               "per input shape, in an LRU of shape_cache_size", parse_bool),
    OptionSpec("min_subgraph_size", MIN_SUBGRAPH_SIZE, "fewest nodes a group needs to be compiled (as onnxruntime's "
               "trt_min_subgraph_size): a smaller fragment is left to the next provider ('group too small'), "
               "since each OpenVINO call costs about as much as ten tiny nodes on the CPU provider; a group that "
               "is the whole model is always taken", _positive_int("min_subgraph_size")),
    OptionSpec("shape_cache_size", 8, "static-shape compiled models per group: the first shapes seen (then "
               "the dynamic model serves new shapes), or the LRU with disable_dynamic_shapes",
               _positive_int("shape_cache_size")),
)


@dataclass(frozen=True)
class CompileSettings:
    """What a session compiles with, resolved from the options once at session start."""

    device_type: str
    precision: str
    config: dict[str, Any]  # the compile_model config
    dynamic: bool  # compile dynamic-shape models (else one static model per input shape)
    shape_cache_size: int
    min_subgraph_size: int = 1


def _device_default_precision(device_type: str) -> str:
    devices = physical_devices(device_type)
    first = devices[0].split(".")[0] if devices else "CPU"
    return "FP32" if first == "CPU" else "FP16"


def resolve(options: Mapping[str, Any], intra_op_num_threads: int = 0) -> CompileSettings:
    """Turn validated options into the compile config OpenVINO takes."""
    device_type: str = options["device_type"]
    precision = options["precision"] or _device_default_precision(device_type)
    device_props: dict[str, Any] = {}
    if precision == "FP32":
        # without this OpenVINO's CPU plugin picks bf16 on CPUs that have it (~1e-2 off)
        device_props["INFERENCE_PRECISION_HINT"] = "f32"
    elif precision == "FP16":
        device_props["INFERENCE_PRECISION_HINT"] = "f16"
    else:  # ACCURACY: run in the model's own precision
        device_props["EXECUTION_MODE_HINT"] = "ACCURACY"
    threads = options["num_of_threads"] or intra_op_num_threads
    per_device: dict[str, dict[str, Any]] = {}
    # bare AUTO may pick any device: each gets the precision, or the CPU plugin would choose
    # bf16 on CPUs that have it while the kernel note says FP32 (OpenVINO ignores properties
    # of devices that are not present)
    targets = physical_devices(device_type) or PHYSICAL
    for dev in targets:
        props = dict(device_props)
        if dev.startswith("CPU"):
            # pinned threads stall when another process (or our own CPU fallback kernels) holds
            # their core; unpinned was ~1.5x faster on the shared test machine. load_config can
            # turn pinning back on.
            props["ENABLE_CPU_PINNING"] = False
            if threads:
                props["INFERENCE_NUM_THREADS"] = int(threads)
        per_device[dev] = props
    top: dict[str, Any] = {"PERFORMANCE_HINT": options["performance_hint"]}
    if options["num_streams"]:
        top["NUM_STREAMS"] = int(options["num_streams"])
    if options["cache_dir"]:
        top["CACHE_DIR"] = options["cache_dir"]
    load_config: dict[str, dict[str, Any]] = options["load_config"]
    head = device_type.partition(":")[0]
    if head in META:
        config = dict(top)
        config.update(load_config.get(head, {}))
        props_by_device = {d: {**p, **load_config.get(d, {})} for d, p in per_device.items()}
        for d, p in load_config.items():
            if d not in META and d not in props_by_device:
                props_by_device[d] = dict(p)
        if props_by_device:
            config["DEVICE_PROPERTIES"] = props_by_device
    else:
        config = {**top, **per_device[device_type], **load_config.get(device_type, {})}
    # NPU compiles static shapes only
    dynamic = not options["disable_dynamic_shapes"] and not any(
        d.startswith("NPU") for d in physical_devices(device_type)
    )
    return CompileSettings(device_type, precision, config, dynamic, options["shape_cache_size"],
                           options["min_subgraph_size"])
