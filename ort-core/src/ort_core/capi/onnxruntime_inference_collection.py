"""onnxruntime's ``onnxruntime.capi.onnxruntime_inference_collection``, the module its Python
classes live in, which code imports them from (``from
onnxruntime.capi.onnxruntime_inference_collection import OrtValue``) or checks against
(``isinstance(sess, onnxruntime_inference_collection.Session)``): the same names, ort-core's
classes, resolved at first use."""

from __future__ import annotations

import collections.abc
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

#: names this module hands on from the ``ort_core`` package; ``Session`` is onnxruntime's base
#: class of ``InferenceSession``, here the same class
_FROM_PACKAGE = {
    "AdapterFormat": "AdapterFormat", "IOBinding": "IOBinding", "InferenceSession": "InferenceSession",
    "ModelCompiler": "ModelCompiler", "OrtDevice": "OrtDevice", "OrtDeviceVendorId": "OrtDeviceVendorId",
    "OrtValue": "OrtValue", "Session": "InferenceSession", "SparseTensor": "SparseTensor",
    "copy_tensors": "copy_tensors",
}

__all__ = sorted([*_FROM_PACKAGE, "check_and_normalize_provider_args", "get_ort_device_type"])


def __getattr__(name: str) -> Any:
    if name in _FROM_PACKAGE:
        import ort_core

        value = getattr(ort_core, _FROM_PACKAGE[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ort_core.capi.onnxruntime_inference_collection' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM_PACKAGE))


def get_ort_device_type(device_type: str) -> int:
    """The ``OrtDevice`` type number of ``device_type`` ("cpu", "cuda", "gpu", "npu", "webgpu", ...)."""
    from ..devices import _ORT_DEVICE_TYPES
    from ..errors import InvalidArgument

    kind = _ORT_DEVICE_TYPES.get(str(device_type).lower())
    if kind is None:
        raise InvalidArgument(f"Unsupported device type: {device_type!r}; known: {', '.join(_ORT_DEVICE_TYPES)}")
    return kind


def check_and_normalize_provider_args(
    providers: Sequence[str | tuple[str, Mapping[Any, Any]]] | None,
    provider_options: Sequence[Mapping[Any, Any]] | None,
    available_provider_names: Sequence[str],
) -> tuple[list[str], list[dict[str, str]]]:
    """``providers`` and ``provider_options`` as onnxruntime normalises them: (the provider
    names in order, each one's options with ``str`` keys and values; ``{}`` where none were
    given). A name not in ``available_provider_names`` is warned about, a repeated one warned
    about and dropped; malformed arguments raise ``ValueError``."""
    if providers is None:
        return [], []
    options_by_name: dict[str, dict[str, str]] = {}

    def add(name: str, options: Mapping[Any, Any]) -> None:
        if name not in available_provider_names:
            warnings.warn(f"Specified provider '{name}' is not in available provider names.Available providers: "
                          f"'{', '.join(available_provider_names)}'", stacklevel=3)
        if name in options_by_name:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=3)
            return
        options_by_name[name] = {str(key): str(value) for key, value in options.items()}

    if not isinstance(providers, collections.abc.Sequence):
        raise ValueError("'providers' should be a sequence.")
    if provider_options is not None:
        if not isinstance(provider_options, collections.abc.Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        if not all(isinstance(provider, str) for provider in providers):
            raise ValueError("Only string values for 'providers' are supported if 'provider_options' is given.")
        if not all(isinstance(options, Mapping) for options in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        for name, options in zip(providers, provider_options):
            add(name, options)
    else:
        for provider in providers:
            if isinstance(provider, str):
                add(provider, {})
            elif (isinstance(provider, (tuple, list)) and len(provider) == 2 and isinstance(provider[0], str)
                  and isinstance(provider[1], Mapping)):
                add(provider[0], provider[1])
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    return list(options_by_name), list(options_by_name.values())
