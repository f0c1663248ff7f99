"""The conformance kit for execution providers.

Run it on an installed provider from Python::

    from ort_core.testing.kit import run_kit
    card = run_kit("MyExecutionProvider")
    print(card)                 # one line per check, then the node-case tally
    card.save("scorecard.json")

or from pytest in the provider's own package (the ``pytest11`` plugin ships with ort-core)::

    pytest --ort-provider MyExecutionProvider --ort-scorecard scorecard.json

or as one test file in the provider's test suite (``tests/test_kit.py``)::

    from ort_core.testing.kit import kit_tests
    test_kit = kit_tests("MyExecutionProvider")
"""

from __future__ import annotations

from .core import CHECKS, REQUIRED_HOOKS, Kit, KitConfig, run_kit
from .nodecases import RANDOM_OPS, NodeCase, load_node_cases
from .scorecard import CheckResult, NodeCaseTally, Scorecard
from .testfile import kit_tests

__all__ = [
    "CHECKS", "REQUIRED_HOOKS", "CheckResult", "Kit", "KitConfig", "NodeCase", "NodeCaseTally",
    "RANDOM_OPS", "Scorecard", "kit_tests", "load_node_cases", "run_kit",
]
