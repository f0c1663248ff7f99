"""STFT against onnxruntime over the signal layouts models use: (batch, samples) as audio
front ends export it (onnx-asr's mel filterbanks failed on it), (batch, samples, 1) and complex
(batch, samples, 2); with and without a window, with frame_length; plus the real front ends."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from real_model_cases import fetch_or_skip

import ort_core as ort

F = TensorProto.FLOAT


def _stft_model(signal_shape, window: np.ndarray | None, frame_length: int | None, onesided: int, step: int):
    inits = [numpy_helper.from_array(np.array(step, np.int64), "step")]
    inputs = ["signal", "step", "", ""]
    if window is not None:
        inits.append(numpy_helper.from_array(window, "window"))
        inputs[2] = "window"
    if frame_length is not None:
        inits.append(numpy_helper.from_array(np.array(frame_length, np.int64), "frame_length"))
        inputs[3] = "frame_length"
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("STFT", inputs, ["y"], onesided=onesided)
    graph = helper.make_graph([node], "stft", [helper.make_tensor_value_info("signal", F, signal_shape)],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


CASES = {
    # name: (signal shape, window length or None, frame_length or None, onesided, step)
    "2d-hann": ((2, 400), 64, None, 1, 16),
    "2d-frame-length": ((3, 257), None, 50, 1, 7),
    "2d-window-and-length": ((1, 300), 40, 40, 1, 10),
    "2d-two-sided": ((2, 128), 32, None, 0, 8),
    "3d-real": ((2, 400, 1), 64, None, 1, 16),
    "3d-complex": ((2, 200, 2), 32, None, 0, 12),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_stft_matches_onnxruntime(name):
    shape, win, length, onesided, step = CASES[name]
    rng = np.random.default_rng(len(name))
    window = None if win is None else np.hanning(win + 1)[:win].astype(np.float32)
    model = _stft_model(list(shape), window, length, onesided, step)
    x = rng.standard_normal(shape).astype(np.float32)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"signal": x})[0]
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"signal": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    # float32 FFTs summing in different orders: errors scale with the spectrum's peak
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def test_stft_signal_of_a_wrong_rank_is_a_clear_error():
    model = _stft_model([2, 3, 4, 1], None, 2, 1, 1)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError, match=r"STFT signal must be"):
        session.run(None, {"signal": np.zeros((2, 3, 4, 1), np.float32)})


def test_stft_of_a_long_real_signal_makes_no_complex_copies():
    """A real signal's STFT frames stay real (a strided view, then rfft) and the spectrum is
    returned as its own [re, im] memory: Whisper's front end (30 s of audio, 3001 x 400 frames)
    took 70 MB for a 4.6 MB output when the frames were gathered through an index array into
    complex copies and the pairs stacked and converted."""
    import tracemalloc

    window = np.hanning(401)[:400].astype(np.float32)
    model = _stft_model([1, 480400], window, None, 1, 160)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 480400)).astype(np.float32)
    session.run(None, {"signal": x})
    tracemalloc.start()
    try:
        y = session.run(None, {"signal": x})[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert y.shape == (1, 3001, 201, 2)
    # the windowed frames and the spectrum: about twice the output (was more than 10x)
    assert peak < 3 * y.nbytes, f"STFT peak {peak / 2**20:.1f} MB for a {y.nbytes / 2**20:.1f} MB output"


# onnx-asr's feature extractors (STFT on a (batch, samples) signal); the *_conv twins compute the
# same features with a Conv and passed before the fix
FRONT_ENDS = ["asr-kaldi", "asr-nemo80", "asr-whisper80", "asr-gigaam-v2", "asr-wespeaker"]


@pytest.mark.parametrize("name", FRONT_ENDS)
def test_audio_front_ends_match_onnxruntime(name):
    path = str(fetch_or_skip(name))
    rng = np.random.default_rng(0)
    feeds = {"waveforms": (0.1 * rng.standard_normal((2, 16000))).astype(np.float32),
             "waveforms_lens": np.array([16000, 11000], np.int64)}
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        # log-mel features: float32 FFT rounding, amplified by log() near the floor clamp
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=2e-3)


def test_stft_frame_longer_than_the_signal_is_a_clear_error():
    model = _stft_model([1, 30], None, 40, 1, 10)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError, match=r"frame length 40 and step 10 do not fit a signal of 30 samples"):
        session.run(None, {"signal": np.zeros((1, 30), np.float32)})
