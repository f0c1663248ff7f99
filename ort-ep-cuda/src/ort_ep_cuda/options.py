"""The provider's options: onnxruntime's CUDA execution provider names, values and meanings.

onnxruntime takes them as strings (``{"device_id": "0", "gpu_mem_limit": "2147483648"}``) or as
Python values; both are accepted. Each parser raises ``ValueError`` with what it expected; core
reports it naming the option and the valid keys.
"""

from __future__ import annotations

from typing import Any

from ort_core import OptionSpec

from .arena import NEXT_POWER_OF_TWO, SAME_AS_REQUESTED

CONV_ALGO_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
#: onnxruntime limits the convolution workspace to this with cudnn_conv_use_max_workspace=0
SMALL_CONV_WORKSPACE = 32 * 1024 * 1024
#: the run option onnxruntime reads to shrink arenas after a run ("gpu:0", "cpu:0;gpu:0")
SHRINKAGE_RUN_OPTION = "memory.enable_memory_arena_shrinkage"


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 1/0 or true/false, got {value!r}")


def parse_device_id(value: Any) -> int:
    number = _int(value)
    if number < 0:
        raise ValueError(f"a device index is >= 0, got {number}")
    return number


def parse_mem_limit(value: Any) -> int:
    """Bytes; 0 means no limit (onnxruntime's default is SIZE_MAX, i.e. none)."""
    number = _int(value)
    if number < 0:
        raise ValueError(f"gpu_mem_limit is a number of bytes >= 0, got {number}")
    return 0 if number >= (1 << 64) - 1 else number


def parse_extend_strategy(value: Any) -> str:
    """onnxruntime's names, or the numbers of its C API (0: kNextPowerOfTwo, 1: kSameAsRequested)."""
    text = str(value).strip()
    by_number = {"0": NEXT_POWER_OF_TWO, "1": SAME_AS_REQUESTED}
    if text in by_number:
        return by_number[text]
    for name in (NEXT_POWER_OF_TWO, SAME_AS_REQUESTED):
        if text.lower() == name.lower():
            return name
    raise ValueError(f"expected {NEXT_POWER_OF_TWO} (0) or {SAME_AS_REQUESTED} (1), got {value!r}")


def parse_conv_algo_search(value: Any) -> str:
    text = str(value).strip().upper()
    by_number = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}  # OrtCudnnConvAlgoSearch
    text = by_number.get(text, text)
    if text not in CONV_ALGO_SEARCH:
        raise ValueError(f"expected one of {', '.join(CONV_ALGO_SEARCH)}, got {value!r}")
    return text


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        return int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("device_id", 0, "index of the GPU (as CUDA numbers them; CUDA_VISIBLE_DEVICES applies)",
               parse_device_id),
    OptionSpec("gpu_mem_limit", 0, "bytes the session's arena may reserve on the GPU (0: no limit); "
               "exceeding it is a MemoryError naming the limit and the request", parse_mem_limit),
    OptionSpec("arena_extend_strategy", NEXT_POWER_OF_TWO, "how the arena grows: kNextPowerOfTwo (regions "
               "double) or kSameAsRequested (a region is the request)", parse_extend_strategy,
               (NEXT_POWER_OF_TWO, SAME_AS_REQUESTED)),
    OptionSpec("cudnn_conv_algo_search", "EXHAUSTIVE", "how convolution algorithms are chosen: EXHAUSTIVE "
               "(time every cuDNN plan on the first input shape), HEURISTIC (cuDNN's first heuristic plan), "
               "DEFAULT (cuDNN's fallback plan)", parse_conv_algo_search, CONV_ALGO_SEARCH),
    OptionSpec("do_copy_in_default_stream", True, "host<->device copies on CUDA's default stream (1) or on "
               "the session's compute stream (0)", parse_bool),
    OptionSpec("cudnn_conv_use_max_workspace", True, "let cuDNN plans use as much workspace as they ask for "
               "(1) or at most 32 MiB (0)", parse_bool),
    OptionSpec("enable_cuda_graph", False, "capture the first run into a CUDA graph and replay it (static "
               "shapes, every node on CUDA, no control flow, I/O bound on the device)", parse_bool),
    OptionSpec("use_tf32", True, "allow TF32 tensor-core math in float32 MatMul/Gemm/Conv (Ampere and newer)",
               parse_bool),
    OptionSpec("prefer_nhwc", False, "run convolutions in channels-last (NHWC) layout", parse_bool),
)
