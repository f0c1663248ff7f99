"""`ort-core new-provider`: the generated package installs (here: a dist-info on the path, as
pip writes it) and passes the conformance kit and its own tests as generated; the pytest plugin's
--ort-provider / --ort-scorecard options work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ort_core.cli import main
from ort_core.testing.template import LAYOUT, core_range, generate, names_for


def test_names() -> None:
    n = names_for("Foo")
    assert (n.provider, n.package, n.module, n.short) == ("FooExecutionProvider", "ort-ep-foo", "ort_ep_foo", "foo")
    assert names_for("BarExecutionProvider", package="acme-bar").module == "acme_bar"
    with pytest.raises(ValueError, match="letters and digits"):
        names_for("my-ep")
    assert core_range("0.1.3") == ">=0.1,<0.2" and core_range("1.4.0") == ">=1.4,<2"


def test_cli_writes_every_file_and_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-provider", "Foo", "--dir", str(tmp_path), "--vendor", "Me"]) == 0
    root = tmp_path / "ort-ep-foo"
    for target in LAYOUT.values():
        assert (root / target.format(module="ort_ep_foo")).is_file(), target
    pyproject = (root / "pyproject.toml").read_text()
    assert 'foo = "ort_ep_foo.plugin"' in pyproject and "{{" not in pyproject
    plugin = (root / "src/ort_ep_foo/plugin.py").read_text()
    import ort_core.hookspecs as hookspecs

    for hook in [h for h in dir(hookspecs) if h.startswith("ort_")]:
        assert f"def {hook}(" in plugin, f"template lacks {hook}"
    assert main(["new-provider", "Foo", "--dir", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err


def _fake_install(site: Path, root: Path, package: str, module: str, short: str) -> dict[str, str]:
    info = site / f"{module}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[ort_core.plugins]\n{short} = {module}.plugin\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(root / "src"), env.get("PYTHONPATH", "")])
    return env


def test_generated_package_passes_the_kit(tmp_path: Path) -> None:
    pytest.importorskip("ort_ep_cpu", reason="the kit's node cases need the CPU provider as fallback")
    root = generate("Foo", tmp_path / "pkg", vendor="Me")
    env = _fake_install(tmp_path / "site", root, "ort-ep-foo", "ort_ep_foo", "foo")
    card = tmp_path / "card.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests"), "--ort-scorecard", str(card)],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    data = json.loads(card.read_text())
    assert data["provider"] == "FooExecutionProvider" and data["package"] == "ort-ep-foo"
    assert data["summary"]["checks_failed"] == 0
    assert data["summary"]["node_cases_claimed"] > 0
    assert data["summary"]["node_cases_passed"] == data["summary"]["node_cases_claimed"]


def test_pytest_option_runs_selected_checks(tmp_path: Path) -> None:
    pytest.importorskip("ort_ep_cpu", reason="needs an installed provider")
    card = tmp_path / "card.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ort-provider", "CPUExecutionProvider",
         "-k", "registration or options or devices", "--ort-scorecard", str(card)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 passed" in done.stdout and "ort-core conformance kit" in done.stdout
    data = json.loads(card.read_text())
    assert [c["name"] for c in data["checks"]] == ["registration", "options", "devices"]
    assert all(c["status"] == "passed" for c in data["checks"])
