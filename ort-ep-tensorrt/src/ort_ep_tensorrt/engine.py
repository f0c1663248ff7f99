"""Building TensorRT engines for claimed subgraphs, and running them on CUDA memory.

One ``EngineKernel`` per claimed group. Its engine is built at session creation when every input
shape is known (static inputs, or an optimization profile from the ``trt_profile_*`` options);
otherwise one engine per input-shape signature is built at the first run with those shapes
(at most ``MAX_SHAPE_ENGINES`` kept). Inputs and outputs are the CUDA provider's CuPy arrays
("Cuda" memory), passed to ``execute_async_v3`` by address: no copy between CUDA and TensorRT
nodes. The kernel waits for its stream before returning, so a consumer on another provider's
stream reads finished values.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ort_core import Fail
from ort_core.progress import enabled as progress_enabled

from . import _trt
from .cache import EngineCache, EngineKey, timing_cache_path
from .fp16 import to_float16

logger = logging.getLogger("ort_core")

MAX_SHAPE_ENGINES = 8

Profile = dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


@dataclass(frozen=True)
class BuildSettings:
    """What shapes an engine, from the options and the TensorRT version."""

    workspace: int
    fp16: bool
    int8: bool
    builder_optimization_level: int
    detailed_log: bool
    engine_cache: str | None  # folder, or None when the engine cache is off
    timing_cache: str | None
    compute_capability: str
    tensorrt_version: str
    precision_flags: bool  # TensorRT 10: FP16/INT8 builder flags; 11: strongly typed networks

    @staticmethod
    def from_options(trt: Any, options: dict, compute_capability: str) -> BuildSettings:
        engine_dir = (options["trt_engine_cache_path"] or ".") if options["trt_engine_cache_enable"] else None
        timing_dir = None
        if options["trt_timing_cache_enable"]:
            timing_dir = options["trt_timing_cache_path"] or options["trt_engine_cache_path"] or "."
        return BuildSettings(
            workspace=options["trt_max_workspace_size"], fp16=options["trt_fp16_enable"],
            int8=options["trt_int8_enable"], builder_optimization_level=options["trt_builder_optimization_level"],
            detailed_log=options["trt_detailed_build_log"], engine_cache=engine_dir, timing_cache=timing_dir,
            compute_capability=compute_capability, tensorrt_version=str(trt.__version__),
            precision_flags=_trt.has_precision_flags(trt),
        )


def has_qdq(model: onnx.ModelProto) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


def prepare_model(model: onnx.ModelProto, settings: BuildSettings) -> onnx.ModelProto:
    """The model TensorRT parses: under TensorRT 11, ``trt_fp16_enable`` converts it to float16
    first (strongly typed networks take precision from the model)."""
    if settings.fp16 and not settings.precision_flags:
        return to_float16(model)
    if settings.int8 and not settings.precision_flags and not has_qdq(model):
        logger.warning("trt_int8_enable: TensorRT %s has no INT8 builder flag and this subgraph has no "
                       "QuantizeLinear/DequantizeLinear nodes, so it runs in its own types; quantize the model "
                       "with Q/DQ nodes (onnxruntime.quantization.quantize_static) for INT8", settings.tensorrt_version)
    return model


def configure(trt: Any, builder: Any, settings: BuildSettings, profile: Profile | None) -> Any:
    """The builder config: workspace, precision (flags only where TensorRT has them), level,
    optimization profile."""
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace)
    if settings.precision_flags:
        if settings.fp16:
            config.set_flag(trt.BuilderFlag.FP16)
        if settings.int8:
            config.set_flag(trt.BuilderFlag.INT8)
    config.builder_optimization_level = settings.builder_optimization_level
    if profile:
        p = builder.create_optimization_profile()
        for name, (lo, mid, hi) in profile.items():
            p.set_shape(name, lo, mid, hi)
        config.add_optimization_profile(p)
    return config


class TrtLogger:
    """TensorRT's log into the ``ort_core`` logger (made a trt.ILogger subclass at first use)."""

    _cls: type | None = None

    @classmethod
    def create(cls, trt: Any, verbose: bool) -> Any:
        if cls._cls is None:
            levels = {}
            for name, level in (("INTERNAL_ERROR", logging.CRITICAL), ("ERROR", logging.ERROR),
                                ("WARNING", logging.WARNING), ("INFO", logging.INFO), ("VERBOSE", logging.DEBUG)):
                severity = getattr(trt.ILogger.Severity, name, None)
                if severity is not None:
                    levels[severity] = level

            class _Logger(trt.ILogger):
                def __init__(self, verbose: bool):
                    trt.ILogger.__init__(self)
                    self.verbose = verbose

                def log(self, severity: Any, msg: str) -> None:
                    level = levels.get(severity, logging.INFO)
                    if level <= logging.DEBUG and not self.verbose:
                        return
                    logger.log(level if level > logging.INFO or self.verbose else logging.DEBUG, "TensorRT: %s", msg)

            cls._cls = _Logger
        return cls._cls(verbose)


def _progress_monitor(trt: Any, label: str) -> Any | None:
    """A tqdm bar per build phase, on a terminal (TensorRT 10+ reports phases and steps)."""
    if not progress_enabled() or not hasattr(trt, "IProgressMonitor"):
        return None
    from tqdm import tqdm

    class _Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self.bars: dict[str, Any] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            self.bars[phase_name] = tqdm(total=num_steps, desc=f"{label}: {phase_name}", leave=False)

        def step_complete(self, phase_name, step):
            bar = self.bars.get(phase_name)
            if bar is not None:
                bar.update(1)
            return True  # never cancel

        def phase_finish(self, phase_name):
            bar = self.bars.pop(phase_name, None)
            if bar is not None:
                bar.close()

    return _Monitor()


def build_engine(trt: Any, trt_logger: Any, model: onnx.ModelProto, settings: BuildSettings,
                 profile: Profile | None, label: str) -> bytes:
    """A serialized engine for ``model`` (already prepared), through the timing cache."""
    builder = trt.Builder(trt_logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, trt_logger)
    if not parser.parse(model.SerializeToString()):
        errors = "; ".join(str(parser.get_error(k).desc()) for k in range(int(parser.num_errors)))
        raise Fail(f"TensorRT cannot parse {label}: {errors or 'no error given'}")
    config = configure(trt, builder, settings, profile)
    timing_file = timing_cache_path(settings.timing_cache, settings.compute_capability) if settings.timing_cache else None
    if timing_file is not None:
        data = timing_file.read_bytes() if timing_file.is_file() else b""
        config.set_timing_cache(config.create_timing_cache(data), False)
    monitor = _progress_monitor(trt, label)
    if monitor is not None:
        config.progress_monitor = monitor
    logger.info("TensorRT: building the engine of %s (%d nodes)", label, len(model.graph.node))
    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise Fail(f"TensorRT could not build an engine for {label} (see the TensorRT log lines above)")
    seconds = time.perf_counter() - start
    (logger.info if settings.detailed_log else logger.debug)("TensorRT: %s built in %.1f s", label, seconds)
    if timing_file is not None:
        timing_file.parent.mkdir(parents=True, exist_ok=True)
        timing_file.write_bytes(bytes(memoryview(config.get_timing_cache().serialize())))
    return bytes(memoryview(serialized))


def engine_key(model_bytes: bytes, settings: BuildSettings, profile: Profile | None) -> EngineKey:
    shapes = tuple(sorted((n, tuple(lo), tuple(mid), tuple(hi)) for n, (lo, mid, hi) in (profile or {}).items()))
    return EngineKey(EngineKey.subgraph_hash(model_bytes), settings.tensorrt_version, settings.compute_capability,
                     shapes, settings.fp16, settings.int8, not settings.precision_flags,
                     settings.builder_optimization_level)


class EngineKernel:
    """Runs one group's engine(s) on the session's CUDA device."""

    def __init__(self, trt: Any, trt_logger: Any, dev: Any, label: str, input_names: Sequence[str],
                 output_names: Sequence[str], output_dtypes: Sequence[np.dtype],
                 model: onnx.ModelProto | None = None, settings: BuildSettings | None = None,
                 static_profile: Profile | None = None, engine_bytes: bytes | None = None):
        self.trt, self.trt_logger, self.dev, self.label = trt, trt_logger, dev, label
        self.input_names, self.output_names = tuple(input_names), tuple(output_names)
        self.output_dtypes = tuple(np.dtype(d) for d in output_dtypes)
        self.model = None if model is None or settings is None else prepare_model(model, settings)
        self.settings = settings
        self._lock = threading.Lock()
        self._runtime = trt.Runtime(trt_logger)
        self._engines: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        self.static_bytes: bytes | None = None  # the one engine, when shapes were known at creation
        if engine_bytes is not None:
            self._engines[None] = self._load(engine_bytes)
            self.static_bytes = engine_bytes
        elif static_profile is not None:
            self.static_bytes = self._build(static_profile)
            self._engines[None] = self._load(self.static_bytes)

    def _build(self, profile: Profile) -> bytes:
        assert self.model is not None and self.settings is not None
        data = self.model.SerializeToString()
        key = engine_key(data, self.settings, profile)
        cache = EngineCache(self.settings.engine_cache) if self.settings.engine_cache is not None else None
        if cache is not None:
            cached = cache.load(key)
            if cached is not None:
                try:
                    self._load(cached)
                    logger.info("TensorRT: %s: engine loaded from the cache", self.label)
                    return cached
                except Fail as exc:
                    cache.forget(key, f"cannot be deserialized ({exc})")
        built = build_engine(self.trt, self.trt_logger, self.model, self.settings, profile, self.label)
        if cache is not None:
            path = cache.store(key, built)
            logger.info("TensorRT: %s: engine cached in %s", self.label, path)
        return built

    def _load(self, data: bytes) -> tuple[Any, Any]:
        engine = self._runtime.deserialize_cuda_engine(data)
        if engine is None:
            raise Fail(f"TensorRT {self.trt.__version__} cannot deserialize the engine of {self.label} "
                       f"({len(data)} bytes): built by another TensorRT version or GPU, or corrupt")
        return engine, engine.create_execution_context()

    def _engine(self, shapes: tuple[tuple[int, ...], ...]) -> tuple[Any, Any]:
        found = self._engines.get(None)
        if found is not None:
            return found
        with self._lock:
            found = self._engines.get(shapes)
            if found is None:
                if self.model is None:
                    raise Fail(f"{self.label}: the imported engine has fixed shapes; given {list(shapes)}")
                profile = {n: (s, s, s) for n, s in zip(self.input_names, shapes)}
                found = self._load(self._build(profile))
                self._engines[shapes] = found
                while len(self._engines) > MAX_SHAPE_ENGINES:
                    self._engines.popitem(last=False)
            else:
                self._engines.move_to_end(shapes)
            return found

    def __call__(self, *inputs: Any) -> list[Any]:
        _, context = self._engine(tuple(tuple(int(d) for d in x.shape) for x in inputs))
        with self._lock:  # one execution context: its addresses and shapes are per call
            return self.dev.launch(self._execute, (context, inputs))

    def _execute(self, context: Any, inputs: Sequence[Any]) -> list[Any]:
        xp = self.dev.xp
        keep = []
        for name, x in zip(self.input_names, inputs):
            x = xp.ascontiguousarray(x)
            keep.append(x)
            context.set_input_shape(name, tuple(int(d) for d in x.shape))
            context.set_tensor_address(name, int(x.data.ptr))
        outputs = []
        for name, dtype in zip(self.output_names, self.output_dtypes):
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise Fail(f"{self.label}: output {name!r} has a data-dependent shape {list(shape)}, which this "
                           "provider does not allocate; exclude its op with trt_op_types_to_exclude")
            y = xp.empty(shape, dtype=dtype)
            outputs.append(y)
            context.set_tensor_address(name, int(y.data.ptr))
        if not context.execute_async_v3(self.dev.stream.ptr):
            raise Fail(f"TensorRT failed to run the engine of {self.label}")
        self.dev.synchronize()  # consumers on other streams (the CUDA provider's) read finished values
        return outputs
