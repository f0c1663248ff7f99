"""Provider options, with onnxruntime's Core ML EP names and values.

Every option is an ``OptionSpec``: core rejects an unknown key naming the valid ones (as
onnxruntime's validator does), and the ``parse`` functions here reject a bad value naming the
valid ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ort_core import OptionSpec

MODEL_FORMATS = ("MLProgram",)
COMPUTE_UNITS = ("CPUOnly", "CPUAndGPU", "CPUAndNeuralEngine", "ALL")
STRATEGIES = ("Default", "FastPrediction")


def _choice(name: str, valid: tuple[str, ...], refused: Mapping[str, str] | None = None):
    def parse(value: Any) -> str:
        text = str(value).strip()
        for v in valid:
            if text.lower() == v.lower():
                return v
        for v, why in (refused or {}).items():
            if text.lower() == v.lower():
                raise ValueError(f"{name} {v!r} is not supported: {why}; valid values: {', '.join(valid)}")
        raise ValueError(f"{value!r} is not a valid {name}; valid values: {', '.join(valid)}")

    return parse


def parse_flag(value: Any) -> bool:
    """onnxruntime's Core ML options are '0'/'1' strings; bools and true/false are taken too."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true"):
        return True
    if text in ("0", "false", ""):
        return False
    raise ValueError(f"{value!r} is not a flag; valid values: 0, 1")


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "ModelFormat", "MLProgram",
        "the Core ML model type built: MLProgram (NeuralNetwork, Apple's deprecated format, is not built)",
        _choice("ModelFormat", MODEL_FORMATS,
                {"NeuralNetwork": "ort-ep-coreml builds ML Programs only (NeuralNetwork is Apple's "
                                  "deprecated format and coremltools' MIL builder does not target it)"}),
        MODEL_FORMATS,
    ),
    OptionSpec("MLComputeUnits", "ALL", "the compute units Core ML may use: CPUOnly, CPUAndGPU, CPUAndNeuralEngine, ALL",
               _choice("MLComputeUnits", COMPUTE_UNITS), COMPUTE_UNITS),
    OptionSpec("RequireStaticInputShapes", False,
               "1: claim only nodes whose inputs have static shapes; 0: dynamic dims become ranged "
               "shapes (1 to 65536) in the package", parse_flag),
    OptionSpec("EnableOnSubgraphs", False, "1: also claim nodes inside control-flow bodies (If/Loop/Scan)", parse_flag),
    OptionSpec("ModelCacheDirectory", "",
               "directory keeping each group's .mlpackage, keyed by the group's bytes and these options; "
               "'' = build in a temporary directory per session", lambda v: str(v).strip()),
    OptionSpec("SpecializationStrategy", "Default",
               "Core ML's specialization strategy (macOS 15 / iOS 18): Default or FastPrediction",
               _choice("SpecializationStrategy", STRATEGIES), STRATEGIES),
    OptionSpec("AllowLowPrecisionAccumulationOnGPU", False,
               "1: build the package with float16 compute precision (coremltools exposes no "
               "MLModelConfiguration switch for GPU accumulation alone); 0: float32 compute", parse_flag),
)

OPTION_NAMES = tuple(o.name for o in OPTIONS)


@dataclass(frozen=True)
class BuildSettings:
    """What a group is built and loaded with, resolved once from the options."""

    compute_units: str
    static_shapes: bool
    subgraphs: bool
    cache_dir: str
    strategy: str
    low_precision: bool
    dims: tuple[tuple[str, int], ...] = ()  # free-dimension values fixed at build time

    def key(self) -> dict[str, Any]:
        """What changes the built package (the cache key's option part); compute units and the
        specialization strategy are load-time choices and do not."""
        return {"format": "MLProgram", "low_precision": self.low_precision,
                "static_shapes": self.static_shapes, "dims": list(self.dims)}


def resolve(options: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> BuildSettings:
    return BuildSettings(
        compute_units=options["MLComputeUnits"],
        static_shapes=options["RequireStaticInputShapes"],
        subgraphs=options["EnableOnSubgraphs"],
        cache_dir=options["ModelCacheDirectory"],
        strategy=options["SpecializationStrategy"],
        low_precision=options["AllowLowPrecisionAccumulationOnGPU"],
        dims=tuple(sorted((dims or {}).items())),
    )


def complete(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Parsed options with defaults, for callers outside a session (the build command); an
    unknown key is a ``ValueError`` naming the valid keys."""
    given = dict(options or {})
    unknown = sorted(set(given) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown Core ML option {', '.join(map(repr, unknown))}; valid options: {', '.join(OPTION_NAMES)}")
    result = {}
    for spec in OPTIONS:
        value = given.get(spec.name, spec.default)
        try:
            result[spec.name] = spec.parse(value) if spec.parse is not None else value
        except ValueError as exc:
            raise ValueError(f"option {spec.name}: {exc}") from None
    return result
