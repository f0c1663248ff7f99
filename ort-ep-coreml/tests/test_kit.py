"""ort-core's conformance kit, run on this provider. On Linux the device-dependent checks skip
with the provider's own reason (Core ML runs on macOS only); on a Mac they run against Core ML.
Node cases are limited to the ops the lowering covers."""

from ort_core.testing.kit import kit_tests
from ort_ep_coreml.lowering import LOWERINGS

test_kit = kit_tests("CoreMLExecutionProvider", ops=frozenset(LOWERINGS))
