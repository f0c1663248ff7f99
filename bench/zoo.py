"""Models the benchmark makes at bench time, beside the generated and the real ones: scikit-learn
tree ensembles and a pipeline converted by skl2onnx, and a QDQ-quantized CNN made by
onnxruntime's own quantizer. Each is built once, deterministically (fixed seeds), and kept in
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


def _qdq(name: str) -> Callable[[], bytes]:
    """The bench's generated model ``name`` (cnn, transformer), quantized by
    onnxruntime.quantization.quantize_static (QDQ, uint8 activations, int8 weights, 16 random
    calibration inputs)."""
    def build() -> bytes:
        import tempfile

        import onnx
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        from ort_core.testing import models

        proto = models.MODELS[name]()

        class Inputs(CalibrationDataReader):
            def __init__(self):
                self.feeds = iter(models.random_inputs(proto, batch=1, seed=s) for s in range(16))

            def get_next(self):
                return next(self.feeds, None)

        with tempfile.TemporaryDirectory() as tmp:
            source, target = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}-qdq.onnx"
            onnx.save(proto, source)
            quantize_static(str(source), str(target), Inputs(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            return target.read_bytes()

    return build


#: QDQ-quantized zoo models: name -> the generated model it quantizes
QDQ = {"qdq-cnn": "cnn", "qdq-transformer": "transformer"}


ZOO = ("hgb-classifier", "hgb-regressor", "rf-classifier", "gb-regressor", "sklearn-pipeline", *QDQ)


def load(name: str, batch: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """The model's bytes (built on first use) and seeded inputs for ``batch`` rows or images."""
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
