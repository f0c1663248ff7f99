"""The ort-core conformance kit on the CPU provider: one test per check (see ort_core.testing.kit)."""

from ort_core.testing.kit import kit_tests

test_kit = kit_tests(
    "CPUExecutionProvider",
    known_failures={
        # found by the kit; the expanded function computes Softmax in float16 in another order
        # than onnx's reference, 2 of 192 values differ by 2 float16 ULPs (0.469 vs 0.4695)
        "test_attention_4d_causal_fp16_expanded": "float16 rounding in the expanded Attention",
    },
)
