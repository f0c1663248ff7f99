"""onnxruntime's CUDA provider options: names, defaults, parsing, errors, and what they reach."""

from __future__ import annotations

import pytest

import ort_core as ort
from conftest import fake_only, runtime
from ort_core.testing import models
from ort_ep_cuda.options import (
    parse_bool,
    parse_conv_algo_search,
    parse_device_id,
    parse_extend_strategy,
    parse_mem_limit,
)
from ort_ep_cuda.plugin import SPEC, shrink_requested

ONNXRUNTIME_NAMES = ("device_id", "gpu_mem_limit", "arena_extend_strategy", "cudnn_conv_algo_search",
                     "do_copy_in_default_stream", "cudnn_conv_use_max_workspace", "enable_cuda_graph", "use_tf32",
                     "prefer_nhwc")


def test_the_options_are_onnxruntimes_with_its_defaults():
    assert tuple(o.name for o in SPEC.options) == ONNXRUNTIME_NAMES
    defaults = {o.name: o.default for o in SPEC.options}
    assert defaults == {"device_id": 0, "gpu_mem_limit": 0, "arena_extend_strategy": "kNextPowerOfTwo",
                        "cudnn_conv_algo_search": "EXHAUSTIVE", "do_copy_in_default_stream": True,
                        "cudnn_conv_use_max_workspace": True, "enable_cuda_graph": False, "use_tf32": True,
                        "prefer_nhwc": False}


def test_parsers_take_strings_and_python_values():
    assert parse_device_id("1") == 1 and parse_device_id(2) == 2
    assert parse_mem_limit("2147483648") == 2 << 30 and parse_mem_limit(str((1 << 64) - 1)) == 0
    assert parse_extend_strategy("kSameAsRequested") == "kSameAsRequested"
    assert parse_extend_strategy("0") == "kNextPowerOfTwo" and parse_extend_strategy(1) == "kSameAsRequested"
    assert parse_conv_algo_search("heuristic") == "HEURISTIC" and parse_conv_algo_search("2") == "DEFAULT"
    assert parse_bool("1") is True and parse_bool("false") is False and parse_bool(True) is True


@pytest.mark.parametrize("parse,value,message", [
    (parse_device_id, "-1", ">= 0"), (parse_device_id, "gpu0", "integer"), (parse_device_id, True, "integer"),
    (parse_mem_limit, "-5", ">= 0"), (parse_mem_limit, "2GB", "integer"),
    (parse_extend_strategy, "kDouble", "kNextPowerOfTwo (0) or kSameAsRequested (1)"),
    (parse_conv_algo_search, "FAST", "EXHAUSTIVE, HEURISTIC, DEFAULT"), (parse_bool, "maybe", "1/0"),
])
def test_bad_values_say_what_was_expected(parse, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(value)


def _session(options):
    model = models.mlp(in_features=4, hidden=4, layers=1)
    return ort.InferenceSession(model, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])


def test_a_bad_option_in_a_session_names_the_key():
    with pytest.raises(ort.InvalidArgument, match="arena_extend_strategy"):
        _session({"arena_extend_strategy": "kDouble"})
    with pytest.raises(ort.InvalidArgument, match="gpu_memory_limit"):
        _session({"gpu_memory_limit": "1"})  # not a key: the valid keys are listed


@fake_only
def test_device_id_out_of_range_lists_the_devices():
    with pytest.raises(ort.InvalidArgument, match="device_id 3 not present; devices here: 0"):
        _session({"device_id": "3"})


@fake_only
def test_options_reach_the_device_and_the_arena():
    session = _session({"gpu_mem_limit": "123456789", "arena_extend_strategy": "1", "cudnn_conv_algo_search": "DEFAULT",
                        "use_tf32": "0", "prefer_nhwc": "1", "do_copy_in_default_stream": "0",
                        "cudnn_conv_use_max_workspace": "0"})
    dev = runtime(session).dev
    assert dev.arena.stats().limit_bytes == 123456789
    assert dev.arena.strategy == "kSameAsRequested"
    assert {k: dev.options[k] for k in ("cudnn_conv_algo_search", "use_tf32", "prefer_nhwc", "do_copy_in_default_stream",
                                        "cudnn_conv_use_max_workspace")} == {
        "cudnn_conv_algo_search": "DEFAULT", "use_tf32": False, "prefer_nhwc": True, "do_copy_in_default_stream": False,
        "cudnn_conv_use_max_workspace": False}


def test_shrinkage_run_option_names_devices_as_onnxruntime_does():
    assert shrink_requested("gpu:0", 0)
    assert shrink_requested("cpu:0;gpu:1", 1)
    assert not shrink_requested("cpu:0", 0)
    assert not shrink_requested("gpu:1", 0)


def test_the_seed_examples_options_are_taken_as_python_values():
    """providers=[('CUDAExecutionProvider', {...}), 'CPUExecutionProvider'] as onnxruntime's
    documentation writes it (ints and a bool, not strings)."""
    options = {"device_id": 0, "arena_extend_strategy": "kNextPowerOfTwo", "gpu_mem_limit": 2 * 1024 * 1024 * 1024,
               "cudnn_conv_algo_search": "EXHAUSTIVE", "do_copy_in_default_stream": True}
    session = _session(options)
    assert session.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert session.get_provider_options()["CUDAExecutionProvider"]["gpu_mem_limit"] == str(2 << 30)
    assert runtime(session).dev.arena.stats().limit_bytes == 2 << 30
