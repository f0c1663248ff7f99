"""The kit as pytest tests: one test per check, for a provider package's own test suite."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from .core import CHECKS, Kit, KitConfig
from .scorecard import CheckResult

# every kit built in this process, by (provider, options); the pytest plugin saves their
# scorecards at the end of the test session (--ort-scorecard)
_KITS: dict[tuple[str, tuple[tuple[str, str], ...]], Kit] = {}
_KITS_LOCK = threading.Lock()


def get_kit(provider: str, **config: Any) -> Kit:
    """The kit for ``provider`` and these options, made once per process."""
    options: Mapping[str, Any] = config.get("options") or {}
    key = (provider, tuple(sorted((str(k), str(v)) for k, v in options.items())))
    with _KITS_LOCK:
        kit = _KITS.get(key)
        if kit is None:
            kit = _KITS[key] = Kit(KitConfig(provider, **config))
        return kit


def kits() -> list[Kit]:
    with _KITS_LOCK:
        return list(_KITS.values())


def report(result: CheckResult) -> None:
    """Turn a check result into a pytest outcome."""
    import pytest

    if result.status == "skipped":
        pytest.skip(result.message)
    if result.status == "failed":
        lines = [result.message, *(f"  - {d}" for d in result.details[:50])]
        if len(result.details) > 50:
            lines.append(f"  ... and {len(result.details) - 50} more")
        pytest.fail("\n".join(lines), pytrace=False)


def kit_tests(provider: str, **config: Any) -> Callable[..., None]:
    """A test function, parametrized over the kit's checks, for ``provider``.

    Put this in the provider package's ``tests/test_kit.py``::

        from ort_core.testing.kit import kit_tests
        test_kit = kit_tests("MyExecutionProvider")

    Keyword arguments are ``KitConfig`` fields (``options``, ``known_failures``, ...).
    """
    import pytest

    KitConfig(provider, **config)  # fail at collection on a bad keyword, not in every test

    @pytest.mark.parametrize("check", CHECKS)
    def test_kit(check: str) -> None:
        report(get_kit(provider, **config).run(check))

    test_kit.__doc__ = f"The ort-core conformance kit on {provider}."
    return test_kit
