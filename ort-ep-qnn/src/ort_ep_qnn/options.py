"""Provider options: onnxruntime's QNN EP names and meanings, where they mean something here.

Core rejects an unknown key naming the valid ones; the ``parse`` functions here reject a bad
value naming the valid ones.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ort_core import OptionSpec

from . import _qnn as Q

PERFORMANCE_MODES = (
    "default", "burst", "balanced", "high_performance", "high_power_saver", "low_balanced",
    "extreme_power_saver", "low_power_saver", "power_saver", "sustained_high_performance",
)
PRIORITIES = {"low": 0, "normal": 100, "normal_high": 150, "high": 200}
HTP_ARCHS = (0, 68, 69, 73, 75, 79, 81)


def _choice(name: str, valid: tuple[str, ...]):
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in valid:
            raise ValueError(f"{name} {value!r} is not valid; valid values: {', '.join(valid)}")
        return text

    return parse


def _flag(name: str):
    def parse(value: Any) -> bool:
        text = str(value).strip().lower()
        if text in ("1", "true"):
            return True
        if text in ("0", "false"):
            return False
        raise ValueError(f"{name} {value!r} is not valid; valid values: 0, 1")

    return parse


def _int(name: str, valid: tuple[int, ...] | None = None):
    def parse(value: Any) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ValueError(f"{name} must be a whole number, got {value!r}") from None
        if number < 0 or (valid is not None and number not in valid):
            hint = ", ".join(map(str, valid)) if valid is not None else "a whole number >= 0"
            raise ValueError(f"{name} {value!r} is not valid; valid values: {hint}")
        return number

    return parse


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("backend_type", "htp", "QNN backend: htp (the Hexagon NPU; on x86-64 its simulator). cpu and gpu "
               "load libQnnCpu.so / libQnnGpu.so when present", _choice("backend_type", ("htp", "cpu", "gpu"))),
    OptionSpec("backend_path", "", "path of the QNN backend library (e.g. .../libQnnHtp.so); overrides backend_type "
               "and QNN_SDK_ROOT"),
    OptionSpec("htp_performance_mode", "default", "HTP power/performance mode; validated, and not applied on the "
               "simulator, which has no DCVS (see README)", _choice("htp_performance_mode", PERFORMANCE_MODES)),
    OptionSpec("htp_graph_finalization_optimization_mode", 0, "graph finalize optimization level 0-3 (higher: "
               "slower finalize, maybe faster graph); 0 leaves QNN's default",
               _int("htp_graph_finalization_optimization_mode", (0, 1, 2, 3))),
    OptionSpec("enable_htp_fp16_precision", False, "run float32 graphs in float16 on HTP: the QNN graph's tensors "
               "and constants are float16, cast from/to float32 at its inputs and outputs; 0 runs them in float32 "
               "(onnxruntime's default is 1)", _flag("enable_htp_fp16_precision")),
    OptionSpec("soc_model", 0, "Snapdragon SoC id (0: unknown); validated and recorded, the simulator is SM8350 (v68)",
               _int("soc_model")),
    OptionSpec("htp_arch", 0, "HTP architecture (0: the backend's); validated and recorded, the simulator is v68",
               _int("htp_arch", HTP_ARCHS)),
    OptionSpec("device_id", 0, "HTP device; only 0 exists here", _int("device_id")),
    OptionSpec("profiling_level", "off", "QNN profiling of each graph's finalize and executions: off, basic "
               "(whole-graph times), detailed (also per QNN node)",
               _choice("profiling_level", ("off", "basic", "detailed"))),
    OptionSpec("profiling_file_path", "", "CSV file the profiling events are appended to, in onnxruntime's columns; "
               "empty: they go to the ort_core.qnn logger at INFO"),
    OptionSpec("qnn_context_priority", "normal", "priority of this session's QNN contexts",
               _choice("qnn_context_priority", tuple(PRIORITIES))),
    OptionSpec("offload_graph_io_quantization", True, "1: a QuantizeLinear reading a graph input and a "
               "DequantizeLinear writing a graph output run on the next provider (host), as onnxruntime does; "
               "0: on QNN", _flag("offload_graph_io_quantization")),
)


@dataclass(frozen=True)
class Settings:
    """The options as they shape QNN calls."""

    library: str
    fp16: bool
    optimization: int
    priority: int
    offload_io_quantization: bool
    options: Mapping[str, Any]

    def context_configs(self) -> list[Any]:
        cfg = Q.ContextConfig()
        cfg.option = Q.CONTEXT_CONFIG_PRIORITY
        cfg.priority = self.priority
        return [cfg]

    def graph_configs(self) -> list[Any]:
        customs = []
        if self.optimization:
            c = Q.HtpGraphCustomConfig()
            c.option = Q.HTP_GRAPH_OPTIMIZATION
            c.optimizationOption.type = Q.HTP_OPT_FINALIZE_OPTIMIZATION_FLAG
            c.optimizationOption.floatValue = float(self.optimization)
            customs.append(c)
        result = []
        for c in customs:
            g = Q.GraphConfig()
            g.option = Q.GRAPH_CONFIG_CUSTOM
            g.customConfig = C.cast(C.pointer(c), C.c_void_p)
            g._custom = c  # keeps it alive with the config
            result.append(g)
        return result


def resolve(options: Mapping[str, Any]) -> Settings:
    """Settings from parsed options; raises ImportError when no backend library is found."""
    library = Q.find_library(options["backend_path"], options["backend_type"])
    return Settings(
        library=library,
        fp16=options["enable_htp_fp16_precision"],
        optimization=options["htp_graph_finalization_optimization_mode"],
        priority=PRIORITIES[options["qnn_context_priority"]],
        offload_io_quantization=options["offload_graph_io_quantization"],
        options=dict(options),
    )
