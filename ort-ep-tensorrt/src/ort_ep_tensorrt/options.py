"""The provider's options: onnxruntime's TensorRT execution provider names, values and meanings.

Values arrive as strings (as onnxruntime's users pass them) or as Python values. Each parser
raises ``ValueError`` saying what it expected; core reports it naming the option and the valid
keys.
"""

from __future__ import annotations

import re
from typing import Any

from ort_core import OptionSpec
from ort_ep_cuda.options import parse_bool, parse_device_id

#: onnxruntime's default workspace: 1 GiB
DEFAULT_WORKSPACE = 1 << 30

_SHAPE = re.compile(r"^\s*(.+?)\s*:\s*(\d+(?:\s*x\s*\d+)*)\s*$")


def parse_shapes(value: Any) -> dict[str, tuple[int, ...]]:
    """``"input_1:1x3x224x224,input_2:1x10"`` -> ``{"input_1": (1, 3, 224, 224), "input_2": (1, 10)}``;
    "" -> {}. onnxruntime's format for trt_profile_{min,opt,max}_shapes."""
    if isinstance(value, dict):
        return {str(k): tuple(int(d) for d in v) for k, v in value.items()}
    text = str(value).strip()
    if not text:
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    for item in text.split(","):
        # a name may hold ':' (e.g. 'input:0'); the shape is what follows the last one
        name, sep, dims = item.rpartition(":")
        match = _SHAPE.match(item) if sep else None
        if not sep or not name.strip() or match is None:
            raise ValueError(f"expected NAME:DxDx...,NAME:Dx... (e.g. 'x:1x3x224x224'), got {item.strip()!r}")
        if name.strip() in shapes:
            raise ValueError(f"input {name.strip()!r} is given twice")
        shapes[name.strip()] = tuple(int(d) for d in dims.replace(" ", "").split("x"))
    return shapes


def parse_op_types(value: Any) -> frozenset[str]:
    """``"NonMaxSuppression,NonZero"`` -> the op types TensorRT must not take."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return frozenset(str(v).strip() for v in value if str(v).strip())
    return frozenset(t.strip() for t in str(value).split(",") if t.strip())


def _int(value: Any, low: int, high: int | None, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, got {value!r}")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected {what}, got {value!r}") from None
    if number < low or (high is not None and number > high):
        raise ValueError(f"expected {what}, got {number}")
    return number


def parse_workspace(value: Any) -> int:
    return _int(value, 1, None, "a number of bytes > 0")


def parse_min_subgraph(value: Any) -> int:
    return _int(value, 1, None, "a node count >= 1")


def parse_optimization_level(value: Any) -> int:
    return _int(value, 0, 5, "a builder optimization level 0..5")


def parse_path(value: Any) -> str:
    return str(value).strip()


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("device_id", 0, "index of the GPU (as CUDA numbers them)", parse_device_id),
    OptionSpec("trt_max_workspace_size", DEFAULT_WORKSPACE, "bytes of GPU memory TensorRT may use as "
               "scratch while building and running an engine", parse_workspace),
    OptionSpec("trt_fp16_enable", False, "run in float16 where TensorRT chooses to (TensorRT 10: the FP16 "
               "builder flag; TensorRT 11: the subgraph is converted to float16 first, I/O kept float32)",
               parse_bool),
    OptionSpec("trt_int8_enable", False, "INT8 (TensorRT 10: the INT8 flag, with the model's Q/DQ scales; "
               "TensorRT 11: only a Q/DQ model is INT8)", parse_bool),
    OptionSpec("trt_engine_cache_enable", False, "keep built engines on disk and reuse them", parse_bool),
    OptionSpec("trt_engine_cache_path", "", "folder of the engine cache (default: the current folder)", parse_path),
    OptionSpec("trt_timing_cache_enable", False, "keep TensorRT's layer timing cache on disk", parse_bool),
    OptionSpec("trt_timing_cache_path", "", "folder of the timing cache (default: the engine cache's)", parse_path),
    OptionSpec("trt_profile_min_shapes", "", "smallest input shapes of the optimization profile, "
               "'name:1x3x224x224,...'", parse_shapes),
    OptionSpec("trt_profile_opt_shapes", "", "input shapes TensorRT tunes for", parse_shapes),
    OptionSpec("trt_profile_max_shapes", "", "largest input shapes of the optimization profile", parse_shapes),
    OptionSpec("trt_min_subgraph_size", 1, "smallest group TensorRT takes (smaller ones fall to the next "
               "provider: 'group too small')", parse_min_subgraph),
    OptionSpec("trt_op_types_to_exclude", "", "op types TensorRT must not take, comma-separated",
               parse_op_types),
    OptionSpec("trt_dump_subgraphs", False, "write each claimed subgraph as ONNX beside the engine cache",
               parse_bool),
    OptionSpec("trt_builder_optimization_level", 3, "TensorRT builder optimization level 0..5 "
               "(higher: longer builds, faster engines)", parse_optimization_level),
    OptionSpec("trt_detailed_build_log", False, "TensorRT's verbose log while building, and build times",
               parse_bool),
    OptionSpec("trt_cuda_graph_enable", False, "capture engine runs in CUDA graphs (not implemented in this "
               "version: refused at session start)", parse_bool),
)


def check_profiles(options: dict[str, Any]) -> None:
    """The three profile options name the same inputs with shapes of one rank, min <= opt <= max."""
    mins, opts, maxs = (options[f"trt_profile_{k}_shapes"] for k in ("min", "opt", "max"))
    given = [bool(mins), bool(opts), bool(maxs)]
    if any(given) and not all(given):
        missing = [f"trt_profile_{k}_shapes" for k, g in zip(("min", "opt", "max"), given) if not g]
        raise ValueError(f"optimization profile: {', '.join(missing)} missing; give min, opt and max shapes together")
    if not any(given):
        return
    if not (set(mins) == set(opts) == set(maxs)):
        raise ValueError(f"optimization profile: min shapes name {sorted(mins)}, opt {sorted(opts)}, "
                         f"max {sorted(maxs)}; each must name the same inputs")
    for name in mins:
        lo, mid, hi = mins[name], opts[name], maxs[name]
        if not (len(lo) == len(mid) == len(hi)):
            raise ValueError(f"optimization profile of {name!r}: ranks differ (min {lo}, opt {mid}, max {hi})")
        if any(not (a <= b <= c) for a, b, c in zip(lo, mid, hi)):
            raise ValueError(f"optimization profile of {name!r}: need min <= opt <= max in every dimension, "
                             f"got min {lo}, opt {mid}, max {hi}")
