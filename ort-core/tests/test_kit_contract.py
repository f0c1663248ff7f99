"""Core refuses a plugin built for an incompatible contract, naming it and both versions, and
keeps the others working. The plugins are real distributions on sys.path (a ``*.dist-info``
folder with ``entry_points.txt``), found by importlib.metadata as installed ones are."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ort_core import CONTRACT_VERSION, __version__
from ort_core.plugins import PluginRegistry, contract_compatible

PLUGIN = '''
from ort_core import Capability, EpDevice, EpDevices, ProviderSpec, hookimpl

NAME = "{provider}"

@hookimpl
def ort_register_providers():
    return [ProviderSpec(NAME, "0.1.0", "test", "kernel", contract_version={contract!r})]

@hookimpl
def ort_ep_devices(provider):
    return EpDevices((EpDevice(NAME, "test", "CPU", "host"),)) if provider == NAME else None

@hookimpl
def ort_get_capability(ep, graph, candidates):
    return Capability(declined={{i: "test provider takes nothing" for i in candidates}}) if ep.name == NAME else None
'''


def _distribution(site: Path, package: str, module: str, provider: str, contract: object) -> None:
    (site / f"{module}.py").write_text(PLUGIN.format(provider=provider, contract=contract))
    info = site / f"{module}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[ort_core.plugins]\n{module} = {module}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_incompatible_contract_is_refused_and_others_keep_working(site: Path) -> None:
    major = int(CONTRACT_VERSION.split(".")[0])
    _distribution(site, "ort-ep-future", "kit_future_ep", "FutureExecutionProvider", f"{major + 1}.0")
    _distribution(site, "ort-ep-newer-minor", "kit_newer_minor_ep", "NewerMinorExecutionProvider",
                  f"{major}.{int(CONTRACT_VERSION.split('.')[1]) + 1}")
    _distribution(site, "ort-ep-fine", "kit_fine_ep", "FineExecutionProvider", CONTRACT_VERSION)
    reg = PluginRegistry()
    providers = reg.providers()
    assert "FineExecutionProvider" in providers
    assert "FutureExecutionProvider" not in providers and "NewerMinorExecutionProvider" not in providers
    failures = {f.plugin: f for f in reg.failures}
    future = failures["kit_future_ep"]
    assert future.package == "ort-ep-future"
    for text in ("kit_future_ep", "FutureExecutionProvider", f"{major + 1}.0", CONTRACT_VERSION, __version__):
        assert text in future.error, text
    assert "kit_newer_minor_ep" in failures
    # the refused plugin's hooks are gone; the good one answers
    assert reg.devices("FineExecutionProvider").devices[0].ep_name == "FineExecutionProvider"
    assert not any(p.__name__ == "kit_future_ep" for p in reg.pm.get_plugins() if hasattr(p, "__name__"))


def test_malformed_contract_version_is_refused_not_a_crash(site: Path) -> None:
    _distribution(site, "ort-ep-int-contract", "kit_int_contract_ep", "IntContractExecutionProvider", 2)
    _distribution(site, "ort-ep-fine2", "kit_fine2_ep", "Fine2ExecutionProvider", CONTRACT_VERSION)
    reg = PluginRegistry()
    assert "Fine2ExecutionProvider" in reg.providers()
    assert "IntContractExecutionProvider" not in reg.providers()
    assert any(f.plugin == "kit_int_contract_ep" for f in reg.failures)


def test_non_spec_registration_is_refused(site: Path) -> None:
    (site / "kit_dict_ep.py").write_text(textwrap.dedent('''
        from ort_core import hookimpl

        @hookimpl
        def ort_register_providers():
            return [{"name": "DictExecutionProvider"}]
    '''))
    info = site / "kit_dict_ep-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ort-ep-dict\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[ort_core.plugins]\nkit_dict_ep = kit_dict_ep\n")
    reg = PluginRegistry()
    assert "DictExecutionProvider" not in reg.providers()
    failure = next(f for f in reg.failures if f.plugin == "kit_dict_ep")
    assert "not a ProviderSpec" in failure.error


@pytest.mark.parametrize(
    ("provider", "core", "ok"),
    [("1.0", "1.0", True), ("1.0", "1.3", True), ("1.4", "1.3", False), ("2.0", "1.9", False),
     ("0.9", "1.0", False), ("1", "1.0", False), ("x.y", "1.0", False), (None, "1.0", False), ("1.2.7", "1.2", True)],
)
def test_contract_compatible(provider: object, core: str, ok: bool) -> None:
    assert contract_compatible(provider, core) is ok  # type: ignore[arg-type]
