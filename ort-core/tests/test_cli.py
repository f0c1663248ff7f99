"""The ``ort-core`` command line: run (batch and named dimensions, inputs from files, output
summaries, --save), one-line errors, bench, and the placement picture in a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import tensor_info
from ort_core import cli


def _image_model(path) -> str:
    """y = Relu(x + 1) on x [N, 3, H, W] with symbolic N, H and W, as OCR models have."""
    nodes = [helper.make_node("Add", ["x", "one"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "image",
        [tensor_info("x", ["N", 3, "H", "W"])], [tensor_info("y", ["N", 3, "H", "W"])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_batch_sets_the_first_dimension_only(host, tmp_path, capsys):
    model = _image_model(tmp_path / "image.onnx")
    assert cli.main(["run", model, "--batch", "8", "--repeat", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line
    assert "input 'x'" in err and "dimension 'H' at axis 2 has no value" in err and "--dim H=VALUE" in err
    assert cli.main(["run", model, "--batch", "8", "--dim", "H=16", "--dim", "W=24", "--repeat", "1"]) == 0
    assert "output y: shape [8, 3, 16, 24] float32" in capsys.readouterr().out
    # without --batch, a symbolic first dimension is 1
    assert cli.main(["run", model, "--dim", "H=4", "--dim", "W=4", "--repeat", "1"]) == 0
    assert "output y: shape [1, 3, 4, 4]" in capsys.readouterr().out


def test_inputs_from_npy_and_npz_outputs_summarised_and_saved(host, tmp_path, capsys):
    model = _image_model(tmp_path / "image.onnx")
    x = np.arange(-6, 6, dtype=np.float32).reshape(1, 3, 2, 2)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "feeds.npz", x=x)
    saved = tmp_path / "out.npz"
    expected = np.maximum(x + 1, 0)
    for given in ([f"x={tmp_path / 'x.npy'}"], [str(tmp_path / "feeds.npz")]):
        assert cli.main(["run", model, "--input", given[0], "--repeat", "1", "--save", str(saved)]) == 0
        out = capsys.readouterr().out
        assert f"min 0 max {expected.max():.6g} mean {expected.mean():.6g} first [0, 0, 0, 0, 0, ...]" in out
        with np.load(saved) as written:
            np.testing.assert_array_equal(written["y"], expected)


@pytest.mark.parametrize("argv, message", [
    (["--input", "x=MISSING"], "input file '{tmp}/missing.npy' not found"),
    (["--input", "x=DIR"], "is a directory, not a .npy/.npz file"),
    (["--input", "z=NPY"], "--input names ['z'], which the model does not have; its inputs are ['x']"),
    (["--dim", "H=abc"], "--dim takes NAME=INTEGER, got 'H=abc'"),
])
def test_user_mistakes_are_one_line_errors(host, tmp_path, capsys, argv, message):
    model = _image_model(tmp_path / "image.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 2, 2), np.float32))
    (tmp_path / "dir").mkdir()
    argv = [a.replace("MISSING", str(tmp_path / "missing.npy")).replace("DIR", str(tmp_path / "dir"))
            .replace("NPY", str(tmp_path / "x.npy")) for a in argv]
    assert cli.main(["run", model, *argv]) == 2
    err = capsys.readouterr().err
    assert message.replace("{tmp}", str(tmp_path)) in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_directory_as_the_model_is_named(host, tmp_path, capsys):
    assert cli.main(["run", str(tmp_path)]) == 2
    assert "is a directory, not an ONNX model file" in capsys.readouterr().err


def test_bench_prints_percentiles_beside_onnxruntime(host, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model = _image_model(tmp_path / "image.onnx")
    assert cli.main(["bench", model, "--dim", "H=8", "--dim", "W=8", "--runs", "20", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ort-core \[\w+ExecutionProvider.*\]\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+", out)
    assert "onnxruntime " in out and "ratio ort-core / onnxruntime (p50):" in out


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_placement_page_drawn_in_a_real_browser(host, fake, tmp_path, capsys):
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed (apt-get install graphviz)")
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium here (apt-get install chromium)")
    from test_api import chain_model

    model = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(model))
    page = tmp_path / "placement.html"
    assert cli.main(["placement", str(model), "--providers", "FakeDeviceExecutionProvider,CPUExecutionProvider",
                     "--html", str(page)]) == 0
    html = page.read_text()
    nodes = len(onnx.load(str(model)).graph.node)
    assert html.count('class="node"') >= nodes
    assert "copy Fake:0 \u2192 Cpu" in html  # the device copy is marked on its edge
    assert "FakeDeviceExecutionProvider declined: Mul is not supported by the fake device" in html  # hover text
    profile = tmp_path / "profile"
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    drawn = re.search(r'<body data-drawn="(\d+)"', dom.stdout)
    assert drawn is not None, dom.stderr[-2000:]
    assert int(drawn.group(1)) == nodes  # every node laid out with a non-empty box
    shot = tmp_path / "placement.png"
    subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1000,1400", page.as_uri()], capture_output=True, timeout=120, check=True)
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    colours = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in ("#E69F00", "#BBBBBB")}
    for colour in colours:  # both providers' fills are on screen
        assert (np.abs(pixels.astype(int) - colour).sum(axis=1) < 8).sum() > 100, colour


def test_fused_groups_are_outlined(registry, host, tmp_path):
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed (apt-get install graphviz)")
    from test_api import chain_model

    import ort_core
    from fake_providers import FakeDeviceProvider
    from ort_core.placement_view import placement_html

    assert ort_core.register(FakeDeviceProvider("FusingExecutionProvider", ops={"Add", "Relu", "Mul"}, fuse=True), "fusing")
    session = ort_core.InferenceSession(chain_model().SerializeToString(),
                                        providers=["FusingExecutionProvider", "CPUExecutionProvider"])
    groups = {p.group for p in session.get_placement().nodes if p.group is not None}
    html = placement_html(session)
    assert groups and all(f"fused group {g}" in html for g in groups)
