"""pytest plugin of ort-core (entry point ``pytest11``): the conformance kit from the command line.

In a provider's package, with it installed::

    pytest --ort-provider MyExecutionProvider                  # the kit's checks as tests
    pytest --ort-provider MyExecutionProvider --ort-scorecard card.json
    pytest --ort-provider MyExecutionProvider --ort-provider-option device_id=1 --ort-ops Add,Mul

``--ort-scorecard`` also saves the scorecards of kits run from test files (``kit_tests``).
Nothing heavy is imported unless an ``--ort-*`` option is used or a kit test runs, so the
plugin costs nothing in unrelated test suites.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ort", "ort-core provider conformance kit")
    group.addoption(
        "--ort-provider", action="append", default=[], metavar="NAME",
        help="run the conformance kit on this installed provider (repeatable)",
    )
    group.addoption(
        "--ort-provider-option", action="append", default=[], metavar="KEY=VALUE",
        help="a provider option for the kit's sessions (repeatable)",
    )
    group.addoption("--ort-scorecard", metavar="PATH", help="save the kit's scorecard(s) as JSON")
    group.addoption("--ort-ops", metavar="OP[,OP...]", help="only the node cases containing these ops")
    group.addoption("--ort-max-cases", type=int, metavar="N", help="at most N node cases")


def _kit_config(config: pytest.Config) -> dict[str, Any]:
    options: dict[str, str] = {}
    for item in config.getoption("ort_provider_option"):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise pytest.UsageError(f"--ort-provider-option takes KEY=VALUE, got {item!r}")
        options[key] = value
    ops = config.getoption("ort_ops")
    return {
        "options": options,
        "ops": frozenset(o for o in ops.split(",") if o) if ops else None,
        "max_cases": config.getoption("ort_max_cases"),
    }


class KitItem(pytest.Item):
    """One check of the kit on one provider."""

    def __init__(self, *, provider: str, check: str, kit_config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.provider = provider
        self.check = check
        self.kit_config = kit_config

    def runtest(self) -> None:
        from .kit.testfile import get_kit, report

        report(get_kit(self.provider, **self.kit_config).run(self.check))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"ort kit {self.provider}: {self.check}"


class KitCollector(pytest.Collector):
    """The kit's checks for one provider (no file behind it)."""

    def __init__(self, *, provider: str, kit_config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.provider = provider
        self.kit_config = kit_config

    def collect(self) -> list[KitItem]:
        from .kit.core import CHECKS

        return [
            KitItem.from_parent(self, name=check, provider=self.provider, check=check, kit_config=self.kit_config)
            for check in CHECKS
        ]


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, so those select kit checks too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    providers = config.getoption("ort_provider")
    if not providers:
        return
    kit_config = _kit_config(config)
    for provider in providers:
        collector = KitCollector.from_parent(session, name=f"ort-kit[{provider}]", provider=provider, kit_config=kit_config)
        items.extend(collector.collect())


def _scorecards() -> list[Any]:
    import sys

    testfile = sys.modules.get("ort_core.testing.kit.testfile")
    return [k.scorecard for k in testfile.kits()] if testfile is not None else []


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("ort_scorecard")
    if not path:
        return
    cards = _scorecards()
    if len(cards) == 1:
        cards[0].save(path)
    else:
        Path(path).write_text(json.dumps({"scorecards": [c.to_dict() for c in cards]}, indent=2, default=str) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    cards = _scorecards()
    if not cards:
        return
    terminalreporter.section("ort-core conformance kit")
    for card in cards:
        terminalreporter.write_line(card.summary())
    path = terminalreporter.config.getoption("ort_scorecard")
    if path:
        terminalreporter.write_line(f"scorecard saved to {path}")
