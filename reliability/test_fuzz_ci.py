"""The fuzzer's short fixed-seed run (CI): zero unnamed exceptions, hangs and crashes.

Its counts are printed (``pytest -s``) and written to ``$FUZZ_SUMMARY`` when set. The budget
(``FUZZ_CI_SECONDS``, default 150) bounds the run on slow machines; the seed fixes the cases."""

from __future__ import annotations

import json
import os

import fuzz


def test_fuzz_ci_run_finds_no_unnamed_error_hang_or_crash():
    summary = fuzz.campaign(
        examples=int(os.environ.get("FUZZ_CI_EXAMPLES", "1000")),
        seed_value=int(os.environ.get("FUZZ_CI_SEED", "23")),
        providers=["CPUExecutionProvider"],
        limits=fuzz.Limits(seconds=30.0, memory_bytes=3 << 30),
        budget_s=float(os.environ.get("FUZZ_CI_SECONDS", "150")),
        stop_on_bug=True,
    )
    print(json.dumps(summary, indent=1, default=str))
    if os.environ.get("FUZZ_SUMMARY"):
        with open(os.environ["FUZZ_SUMMARY"], "w") as f:
            json.dump(summary, f, indent=1, default=str)
    assert summary["cases"] >= 50  # the run ran
    assert summary["bugs"] == 0, summary.get("minimal")
