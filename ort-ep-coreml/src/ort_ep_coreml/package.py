"""A claimed group as a built Core ML package: the ``.mlpackage`` and what connects it to ONNX.

A built group is a directory holding ``model.mlpackage`` (from ``ct.convert(program,
convert_to="mlprogram")``) and ``ort_coreml.json``: the ONNX names of the package's inputs
``in_<k>`` and outputs ``out_<k>``, their ONNX dtypes, and the group outputs that were known at
build time (kept as values, since Core ML returns only computed outputs). The same directory,
zipped, is the EPContext blob, so a package built on Linux runs on a Mac unchanged.

``ModelCacheDirectory`` keeps these directories under a key of the group's ONNX bytes, the build
options and the coremltools and ort-ep-coreml versions.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _ct
from .lowering import TARGET_NAME, Lowered
from .options import BuildSettings
from .version import __version__

PACKAGE = "model.mlpackage"
MANIFEST = "ort_coreml.json"
FORMAT = 1
#: the sizes a dynamic dim may take at run time (coremltools' RangeDim: ML Programs need a bound)
RANGE = (1, 65536)

_build_lock = threading.Lock()


@dataclass(frozen=True)
class Built:
    """A built group on disk."""

    directory: Path
    inputs: list[dict[str, Any]]  # {"name", "dtype", "dims"} per package input in_<k>
    outputs: list[dict[str, Any]]  # {"name", "dtype", "rank"} per group output, in the group's order
    program_outputs: list[str]  # ONNX names of out_<k>
    constants: dict[str, np.ndarray]

    @property
    def package(self) -> Path:
        return self.directory / PACKAGE


def cache_key(group_bytes: bytes, settings: BuildSettings) -> str:
    ct = _ct.load()
    h = hashlib.sha256()
    h.update(group_bytes)
    h.update(json.dumps({**settings.key(), "coremltools": ct.__version__, "ort_ep_coreml": __version__,
                         "target": TARGET_NAME, "format": FORMAT}, sort_keys=True).encode())
    return h.hexdigest()[:32]


def convert(lowered: Lowered, settings: BuildSettings) -> Any:
    """The program as an ``MLModel`` (not loaded: Core ML compiles it only when run, on macOS)."""
    ct = _ct.load()
    inputs = []
    for k, spec in enumerate(lowered.inputs):
        dims = [d if isinstance(d, int) else ct.RangeDim(*RANGE) for d in spec.dims]
        dtype = np.int32 if spec.dtype == np.int64 else spec.dtype
        inputs.append(ct.TensorType(name=f"in_{k}", shape=ct.Shape(dims), dtype=dtype))
    precision = ct.precision.FLOAT16 if settings.low_precision else ct.precision.FLOAT32
    return ct.convert(
        lowered.program, convert_to="mlprogram", inputs=inputs,
        minimum_deployment_target=getattr(ct.target, TARGET_NAME),
        compute_precision=precision, skip_model_load=True,
    )


def save(lowered: Lowered, settings: BuildSettings, outputs: list[dict[str, Any]], directory: Path) -> Built:
    """Convert the lowered group and write it to ``directory`` (replaced if present)."""
    model = convert(lowered, settings)
    directory = Path(directory)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=directory.parent))
    try:
        model.save(str(tmp / PACKAGE))
        constants = {}
        for k, (name, value) in enumerate(lowered.constants.items()):
            np.save(tmp / f"const_{k}.npy", value)
            constants[name] = f"const_{k}.npy"
        manifest = {
            "format": FORMAT,
            "ort_ep_coreml": __version__,
            "coremltools": _ct.load().__version__,
            "inputs": [{"name": s.name, "dtype": s.dtype.name, "dims": list(s.dims)} for s in lowered.inputs],
            "outputs": outputs,
            "program_outputs": lowered.program_outputs,
            "constants": constants,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        with _build_lock:  # two sessions building the same key: the last complete one wins
            if directory.exists():
                shutil.rmtree(directory)
            os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return load(directory)


def load(directory: Path) -> Built:
    """A built group from its directory; ``ValueError`` naming the file when it is not one."""
    directory = Path(directory)
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a built Core ML group ({type(exc).__name__}: {exc})") from exc
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: format {manifest.get('format')!r}, this ort-ep-coreml reads format {FORMAT}")
    if not (directory / PACKAGE / "Manifest.json").is_file():
        raise ValueError(f"{directory / PACKAGE}: missing or not an .mlpackage")
    constants = {name: np.load(directory / file) for name, file in manifest["constants"].items()}
    return Built(directory, manifest["inputs"], manifest["outputs"], manifest["program_outputs"], constants)


def cached(cache_dir: str, key: str) -> Built | None:
    """The built group of ``key`` in the cache, or None (an unreadable entry is rebuilt)."""
    directory = Path(cache_dir) / key
    if not directory.is_dir():
        return None
    try:
        return load(directory)
    except ValueError:
        return None


def to_blob(built: Built) -> bytes:
    """The built group as one zip (the EPContext blob)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(built.directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(built.directory).as_posix())
    return buffer.getvalue()


def from_blob(data: bytes, directory: Path, what: str) -> Built:
    """Unpack an EPContext blob into ``directory``; ``ValueError`` naming ``what`` if it is not one."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                target = (directory / member).resolve()
                if not str(target).startswith(str(Path(directory).resolve()) + os.sep):
                    raise ValueError(f"member {member!r} escapes the package directory")
            archive.extractall(directory)
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ValueError(f"{what}: not a Core ML context blob ({type(exc).__name__}: {exc})") from exc
    return load(directory)
