"""Models the benchmark makes at bench time, beside the generated and the real ones: scikit-learn
tree ensembles and a pipeline converted by skl2onnx, and QDQ-quantized models made by
onnxruntime's own quantizer (the generated CNN and transformer, and a real PP-OCR classifier). Each is built once, deterministically (fixed seeds), and kept in
./models-cache/zoo (never committed).

Needs scikit-learn and skl2onnx (``nox -s bench`` installs them); onnxruntime for the QDQ model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent.parent / "models-cache" / "zoo"
FEATURES = 10


def _training_data(classes: int | None):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, FEATURES)).astype(np.float32)
    if classes is None:
        return x, x[:, 0] * 2 + np.sin(x[:, 1]) + 0.1 * rng.standard_normal(len(x))
    return x, np.digitize(x[:, 0] + 0.5 * x[:, 1], np.linspace(-1, 1, classes - 1)).astype(np.int64)


def _to_onnx(model, x) -> bytes:
    from skl2onnx import to_onnx
    from skl2onnx.common import tree_ensemble

    # skl2onnx 1.20 passes a Python bool as nodes_missing_value_tracks_true for histogram
    # gradient boosting's leaves, which protobuf 7 refuses in an ints attribute: give it an int
    add_node = tree_ensemble.add_node

    def add_int_node(*args, nodes_missing_value_tracks_true=0, **kwargs):
        return add_node(*args, nodes_missing_value_tracks_true=int(nodes_missing_value_tracks_true), **kwargs)

    tree_ensemble.add_node = add_int_node
    try:
        options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
        return to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3}).SerializeToString()
    finally:
        tree_ensemble.add_node = add_node


def _sklearn(make: Callable, classes: int | None) -> Callable[[], bytes]:
    def build() -> bytes:
        x, y = _training_data(classes)
        return _to_onnx(make().fit(x, y), x)

    return build


def _estimators() -> dict[str, Callable[[], bytes]]:
    from sklearn import ensemble, linear_model, pipeline, preprocessing

    return {
        "hgb-classifier": _sklearn(lambda: ensemble.HistGradientBoostingClassifier(max_iter=100, random_state=0), 2),
        "hgb-regressor": _sklearn(lambda: ensemble.HistGradientBoostingRegressor(max_iter=100, random_state=0), None),
        "rf-classifier": _sklearn(lambda: ensemble.RandomForestClassifier(100, max_depth=10, random_state=0), 3),
        "gb-regressor": _sklearn(lambda: ensemble.GradientBoostingRegressor(n_estimators=100, random_state=0), None),
        "sklearn-pipeline": _sklearn(lambda: pipeline.make_pipeline(
            preprocessing.StandardScaler(), linear_model.LogisticRegression(max_iter=500)), 3),
    }


def _quantized(name: str, model: bytes, inputs: Callable[[int], dict[str, np.ndarray]]) -> bytes:
    """``model`` quantized by onnxruntime.quantization.quantize_static (QDQ, uint8
    activations, int8 weights), calibrated on ``inputs(seed)`` for 16 seeds."""
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Inputs(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(inputs(s) for s in range(16))

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}-qdq.onnx"
        source.write_bytes(model)
        quantize_static(str(source), str(target), Inputs(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return target.read_bytes()


def _qdq(name: str) -> Callable[[], bytes]:
    """The bench's generated model ``name`` (cnn, transformer), quantized (``_quantized``,
    random calibration inputs)."""
    def build() -> bytes:
        from ort_core.testing import models

        proto = models.MODELS[name]()
        return _quantized(name, proto.SerializeToString(), lambda seed: models.random_inputs(proto, batch=1, seed=seed))

    return build


#: QDQ-quantized zoo models: name -> the generated model it quantizes
QDQ = {"qdq-cnn": "cnn", "qdq-transformer": "transformer"}
#: ... and the real ones: name -> the real model (PaddleOCR's text-direction classifier,
#: PP-LCNet: hard-swish written as Clip/Div/Mul and squeeze-excite blocks, a pair after each op)
QDQ_REAL = {"qdq-ocr-cls": "ocr-cls"}


ZOO = ("hgb-classifier", "hgb-regressor", "rf-classifier", "gb-regressor", "sklearn-pipeline", *QDQ, *QDQ_REAL)


def load(name: str, batch: int, load_case: Callable[[str, int], tuple[bytes, dict[str, np.ndarray]]]
         ) -> tuple[bytes, dict[str, np.ndarray]]:
    """The model's bytes (built on first use) and seeded inputs for ``batch`` rows or images;
    ``load_case``: the bench's loader of the real models (for those it quantizes)."""
    if name in QDQ_REAL:
        return _load_real_qdq(name, batch, load_case)
    path = CACHE / f"{name}.onnx"
    if not path.is_file():
        build = _qdq(QDQ[name]) if name in QDQ else _estimators()[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(build())
    data = path.read_bytes()
    if name in QDQ:
        from ort_core.testing import models

        return data, models.random_inputs(models.MODELS[QDQ[name]](), batch=batch)
    x = np.random.default_rng(1).standard_normal((batch, FEATURES)).astype(np.float32)
    return data, {"X": x}


def _load_real_qdq(name: str, batch: int, load_case: Callable[[str, int], tuple[bytes, dict[str, np.ndarray]]]
                   ) -> tuple[bytes, dict[str, np.ndarray]]:
    """A real model quantized (``QDQ_REAL``), calibrated on its own input distribution (the
    bench's feeds for it, uniform in [0, 1) for the OCR images, one seed each), with the
    bench's feeds for it."""
    base = QDQ_REAL[name]
    model, feeds = load_case(base, batch)
    path = CACHE / f"{name}.onnx"
    if not path.is_file():
        _, one = load_case(base, 1)

        def inputs(seed: int) -> dict[str, np.ndarray]:
            rng = np.random.default_rng(seed)
            return {k: rng.random(v.shape, dtype=np.float32) if v.dtype == np.float32 else v for k, v in one.items()}

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_quantized(name, model, inputs))
    return path.read_bytes(), feeds
