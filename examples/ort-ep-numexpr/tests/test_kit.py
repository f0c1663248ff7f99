"""The ort-core conformance kit on NumExprExecutionProvider: one test per check."""

from ort_core.testing.kit import kit_tests

test_kit = kit_tests("NumExprExecutionProvider")
