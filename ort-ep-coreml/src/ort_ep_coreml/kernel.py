"""A built group run by Core ML (``MLModel(...).predict``, macOS only).

Feeds: ONNX int64 inputs become the package's int32 (checked to fit), float32 and float16 pass
as they are. Outputs come back in the package's types and leave in the ONNX dtypes; outputs known
at build time are returned from the manifest. ``MLModel.predict`` is documented thread-safe for
one model, so one loaded model serves concurrent runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ort_core import Fail, InvalidArgument

from . import _ct
from .options import BuildSettings
from .package import Built

NOT_MACOS = "Core ML runs on macOS only"

_UNITS = {"CPUOnly": "CPU_ONLY", "CPUAndGPU": "CPU_AND_GPU", "CPUAndNeuralEngine": "CPU_AND_NE", "ALL": "ALL"}
_INT32 = np.iinfo(np.int32)


def load_model(built: Built, settings: BuildSettings) -> Any:
    """The package loaded by Core ML with the session's compute units and strategy."""
    if not _ct.can_run():
        raise Fail(f"{NOT_MACOS}: the package {built.package} was built and can be run on a Mac or an iPhone")
    ct = _ct.load()
    hints = {}
    if settings.strategy != "Default":
        hints["specializationStrategy"] = getattr(ct.SpecializationStrategy, settings.strategy)
    return ct.models.MLModel(str(built.package), compute_units=getattr(ct.ComputeUnit, _UNITS[settings.compute_units]),
                             optimization_hints=hints or None)


class GroupKernel:
    """Runs one built group: ``__call__(*inputs)`` returns the group's outputs in order."""

    def __init__(self, built: Built, input_names: Sequence[str], settings: BuildSettings, label: str,
                 model: Any = None):
        """``model``: what predicts (default: Core ML's ``MLModel`` of the package); tests give
        an object with the same ``predict``."""
        self.built = built
        self.label = label
        names = list(input_names)
        missing = [i["name"] for i in built.inputs if i["name"] not in names]
        if missing:
            raise ValueError(f"the package of {label} reads {missing}, which the group does not give")
        self._feed = [(f"in_{k}", names.index(i["name"]), np.dtype(i["dtype"])) for k, i in enumerate(built.inputs)]
        index = {name: k for k, name in enumerate(built.program_outputs)}
        self._take = [(o["name"], index.get(o["name"]), np.dtype(o["dtype"]), o.get("rank")) for o in built.outputs]
        self.model = model if model is not None else load_model(built, settings)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        feeds = {}
        for key, position, dtype in self._feed:
            x = np.asarray(inputs[position])
            if x.dtype != dtype:
                raise InvalidArgument(f"{self.label}: input {self.built.inputs[int(key[3:])]['name']!r} is "
                                      f"{x.dtype}, the package was built for {dtype}")
            if x.dtype == np.int64:
                if x.size and (x.min() < _INT32.min or x.max() > _INT32.max):
                    raise InvalidArgument(f"{self.label}: int64 input {self.built.inputs[int(key[3:])]['name']!r} "
                                          "holds values outside int32, which Core ML cannot take")
                x = x.astype(np.int32)
            feeds[key] = np.ascontiguousarray(x.reshape(1) if x.ndim == 0 else x)
        try:
            result = self.model.predict(feeds)
        except Exception as exc:
            raise Fail(f"Core ML predict failed for {self.label}: {type(exc).__name__}: {exc}") from exc
        outputs = []
        for name, k, dtype, rank in self._take:
            value = self.built.constants[name] if k is None else np.asarray(result[f"out_{k}"])
            if rank == 0:  # 0-d outputs travel as shape (1,)
                value = value.reshape(())
            outputs.append(value.astype(dtype, copy=False))
        return outputs
