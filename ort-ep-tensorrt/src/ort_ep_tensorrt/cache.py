"""The engine and timing caches, keyed so that a stale or foreign engine is never used.

An engine's key covers the subgraph's bytes, the TensorRT version, the GPU's compute
capability, the optimization-profile shapes and the precision options: anything that makes a
different engine. Each engine file ``<subgraph>_<key>.engine`` has a ``.json`` beside it with
the key's fields. A lookup that finds no engine for the key but finds one for the same subgraph
logs which fields differ (onnxruntime's users lose hours to caches that silently do not match);
an engine whose metadata disagrees with its name, or that TensorRT cannot deserialize, is
rebuilt with a log line saying why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger("ort_core")


@dataclass(frozen=True)
class EngineKey:
    subgraph: str  # sha256 of the subgraph's ONNX bytes (after any float16 conversion)
    tensorrt_version: str
    compute_capability: str  # e.g. "8.9"
    profile: tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]
    fp16: bool
    int8: bool
    strongly_typed: bool
    builder_optimization_level: int

    @staticmethod
    def subgraph_hash(model_bytes: bytes) -> str:
        return hashlib.sha256(model_bytes).hexdigest()

    def fields(self) -> dict:
        d = asdict(self)
        d["profile"] = [[name, list(lo), list(mid), list(hi)] for name, lo, mid, hi in self.profile]
        return d

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()

    def file_stem(self) -> str:
        return f"{self.subgraph[:16]}_{self.digest()[:16]}"


class EngineCache:
    """Serialized engines in one folder."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder or ".")

    def _paths(self, key: EngineKey) -> tuple[Path, Path]:
        stem = key.file_stem()
        return self.folder / f"{stem}.engine", self.folder / f"{stem}.json"

    def load(self, key: EngineKey) -> bytes | None:
        engine, meta = self._paths(key)
        if engine.is_file():
            try:
                recorded = json.loads(meta.read_text())
            except (OSError, ValueError) as exc:
                logger.info("TensorRT engine cache: %s has no readable metadata (%s): rebuilding", engine, exc)
                return None
            if recorded != key.fields():
                changed = _differences(recorded, key.fields())
                logger.info("TensorRT engine cache: %s does not match its name (%s): rebuilding", engine, changed)
                return None
            return engine.read_bytes()
        for other in sorted(self.folder.glob(f"{key.subgraph[:16]}_*.json")):
            try:
                recorded = json.loads(other.read_text())
            except (OSError, ValueError):
                continue
            if recorded.get("subgraph") == key.subgraph:
                logger.info("TensorRT engine cache: the engine %s of this subgraph was built for %s: rebuilding",
                            other.with_suffix(".engine").name, _differences(recorded, key.fields()))
        return None

    def store(self, key: EngineKey, data: bytes) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        engine, meta = self._paths(key)
        tmp = engine.with_suffix(".engine.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, engine)  # a reader never sees half an engine
        meta.write_text(json.dumps(key.fields(), indent=1, sort_keys=True))
        return engine

    def forget(self, key: EngineKey, reason: str) -> None:
        engine, meta = self._paths(key)
        logger.info("TensorRT engine cache: %s %s: rebuilding", engine, reason)
        for path in (engine, meta):
            path.unlink(missing_ok=True)


def _differences(recorded: dict, wanted: dict) -> str:
    parts = [f"{k} {recorded.get(k)!r} (now {v!r})" for k, v in wanted.items() if recorded.get(k) != v]
    return ", ".join(parts) or "no field differs"


def timing_cache_path(folder: str | os.PathLike, compute_capability: str) -> Path:
    """onnxruntime's timing cache file name, one per GPU architecture."""
    return Path(folder or ".") / f"TensorrtExecutionProvider_cache_sm{compute_capability.replace('.', '')}.timing"
