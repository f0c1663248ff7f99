"""``ort-core new-provider NAME``: a provider package that installs and passes the kit as made.

The package has the entry point, a plugin module with every hook of the contract, a minimal
honest kernel set (Add, Mul, Relu on host memory, numpy), tests wired to the conformance kit,
a README and a CHANGELOG. Grow it from there, one op at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...version import CONTRACT_VERSION, __version__

_FILES = Path(__file__).parent / "files"
_SUFFIX = "ExecutionProvider"


@dataclass(frozen=True)
class Names:
    """What the generated package is called: provider, distribution, import module, entry point."""

    provider: str  # e.g. "FooExecutionProvider"
    package: str  # e.g. "ort-ep-foo"
    module: str  # e.g. "ort_ep_foo"
    short: str  # e.g. "foo" (the entry point's name)
    vendor: str


def names_for(name: str, package: str | None = None, vendor: str | None = None) -> Names:
    """Names from ``Foo``, ``FooExecutionProvider`` or ``foo``; ``package`` overrides the
    distribution name (``ort-ep-foo`` by default)."""
    base = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else name
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", base):
        raise ValueError(
            f"provider name {name!r}: use letters and digits, starting with a letter "
            "(e.g. Foo or FooExecutionProvider)"
        )
    provider = base[0].upper() + base[1:] + _SUFFIX
    short = base.lower()
    package = package or f"ort-ep-{short}"
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", package):
        raise ValueError(f"package name {package!r} is not a valid distribution name")
    module = re.sub(r"[-.]+", "_", package).lower()
    return Names(provider, package, module, short, vendor or "Unknown")


def core_range(version: str = __version__) -> str:
    """The ort-core versions a new provider declares: this minor series (0.x minors may break)."""
    major, minor = (int(x) for x in version.split(".")[:2])
    if major == 0:
        return f">={major}.{minor},<{major}.{minor + 1}"
    return f">={major}.{minor},<{major + 1}"


# template file -> path in the generated package ({module} is replaced)
LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "CHANGELOG.md.tmpl": "CHANGELOG.md",
    "init.py.tmpl": "src/{module}/__init__.py",
    "version.py.tmpl": "src/{module}/version.py",
    "plugin.py.tmpl": "src/{module}/plugin.py",
    "kernels.py.tmpl": "src/{module}/kernels.py",
    "test_kit.py.tmpl": "tests/test_kit.py",
    "test_kernels.py.tmpl": "tests/test_kernels.py",
}


def generate(name: str, directory: str | Path = ".", package: str | None = None, vendor: str | None = None) -> Path:
    """Write the package into ``directory/<package>`` and return that folder.

    Refuses to write into a folder that exists and is not empty.
    """
    names = names_for(name, package, vendor)
    root = Path(directory) / names.package
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty; choose another --dir")
    values = {
        "provider": names.provider,
        "package": names.package,
        "module": names.module,
        "short": names.short,
        "vendor": names.vendor,
        "core_range": core_range(),
        "contract": CONTRACT_VERSION,
    }
    for template, target in LAYOUT.items():
        text = (_FILES / template).read_text()
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        leftover = re.search(r"\{\{\w+\}\}", text)
        if leftover:  # a template bug, not a user error
            raise RuntimeError(f"template {template}: unreplaced placeholder {leftover.group(0)}")
        path = root / target.format(module=names.module)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


__all__ = ["LAYOUT", "Names", "core_range", "generate", "names_for"]
