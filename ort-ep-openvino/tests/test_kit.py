"""ort-core's conformance kit for providers, run on this one."""

from ort_core.testing.kit import kit_tests

test_kit = kit_tests("OpenVINOExecutionProvider")
