"""The kit's scorecard: each check's outcome plus the node-case tally, savable as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["passed", "failed", "skipped"]


@dataclass
class CheckResult:
    """Outcome of one check. ``message`` says what failed (or why it was skipped); ``details``
    holds the individual findings (one line each) for the report."""

    name: str
    status: Status
    message: str = ""
    details: list[str] = field(default_factory=list)


@dataclass
class NodeCaseTally:
    """ONNX node conformance cases of the ops the provider claims.

    A case counts as *claimed* when the provider runs at least one of its nodes in the final
    placement; it *passes* when every output matches onnx's expected output within the case's
    tolerances. ``known_failures`` are claimed cases the author declared as failing (with a
    reason); they are reported but do not fail the check. ``unrunnable`` are cases the provider
    claimed part of while nothing installed could run the rest.
    """

    claimed: int = 0
    passed: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    known_failures: dict[str, str] = field(default_factory=dict)
    unrunnable: dict[str, str] = field(default_factory=dict)
    fallback_failures: dict[str, str] = field(default_factory=dict)
    per_op: dict[str, list[int]] = field(default_factory=dict)  # op -> [passed, claimed]
    source: str = ""  # where the cases came from


@dataclass
class Scorecard:
    """What ``run_kit`` found for one provider."""

    provider: str
    package: str = ""
    provider_version: str = ""
    contract_version: str = ""
    ort_core_version: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    node_cases: NodeCaseTally = field(default_factory=NodeCaseTally)
    # fused op (with attribute values) -> what the fusion_parity check found: declared or not;
    # "formed" (by the optimizer for the provider) and "given" (a model holding it): matches,
    # DIFFERS, or declined
    fusions: dict[str, str] = field(default_factory=dict)

    def result(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def count(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status == status)

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0

    def summary(self) -> str:
        """One line, e.g. ``MyEP: checks 9 passed, 0 failed, 1 skipped; node cases 120/124``."""
        n = self.node_cases
        return (
            f"{self.provider}: checks {self.count('passed')} passed, {self.count('failed')} failed, "
            f"{self.count('skipped')} skipped; node cases {n.passed}/{n.claimed} passed"
            + (f" ({len(n.known_failures)} known failures)" if n.known_failures else "")
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = {
            "checks_passed": self.count("passed"),
            "checks_failed": self.count("failed"),
            "checks_skipped": self.count("skipped"),
            "node_cases_passed": self.node_cases.passed,
            "node_cases_claimed": self.node_cases.claimed,
        }
        return data

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")

    def __str__(self) -> str:
        lines = [self.summary()]
        for c in self.checks:
            lines.append(f"  {c.status:7} {c.name}" + (f": {c.message}" if c.message else ""))
            if c.status != "passed":
                lines.extend(f"            {d}" for d in c.details[:20])
        return "\n".join(lines)
