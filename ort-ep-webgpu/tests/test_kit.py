"""ort-core's conformance kit for providers, run on this one (needs an adapter; without one the
kit's own checks report the provider as unusable)."""

from conftest import KNOWN_FAILURES, needs_adapter
from ort_core.testing.kit import kit_tests

test_kit = needs_adapter(kit_tests("WebGpuExecutionProvider", known_failures=KNOWN_FAILURES))
