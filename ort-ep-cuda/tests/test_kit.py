"""ort-core's conformance kit for providers, run on this one (on the FAKE device without a GPU).

Node cases are limited to the ops of the models this provider is for; every node case of every
claimed op is run by tests/test_conformance.py."""

from conftest import KNOWN_FAILURES
from ort_core.testing.kit import kit_tests

OPS = frozenset({
    "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Conv", "ConvTranspose", "Div", "Erf",
    "Gather", "Gemm", "GlobalAveragePool", "HardSigmoid", "LayerNormalization", "MatMul", "MaxPool", "Mul", "Relu",
    "Reshape", "Resize", "Sigmoid", "Slice", "Softmax", "Sub", "Transpose", "Unsqueeze", "Where",
})

# HEURISTIC for the node cases' many short-lived sessions (EXHAUSTIVE is tested in test_gpu.py);
# use_tf32=0: fusion parity compares with onnxruntime's CPU at float32 tolerances (with TF32 the
# H200's FusedGemm outputs were 1e-3 off)
test_kit = kit_tests("CUDAExecutionProvider", ops=OPS, known_failures=KNOWN_FAILURES,
                     options={"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0"})
