"""CPU kernels, one module per family; importing this package registers them all."""
# ruff: noqa: I001  (the order is the registration order: a later module supersedes an earlier one)

from . import elementwise, nn, reduce, tensor  # noqa: F401
from . import image  # noqa: F401, E402  (family B: Resize, Upsample, ...)
from . import conv  # noqa: F401, E402  (family B: ConvTranspose, Col2Im)
from . import shape  # noqa: F401, E402  (family B: indexing/layout ops)
from . import bitwise, control_flow, image_decoder, ml, random, sequence, text  # noqa: F401, E402  (family C)
from . import trees  # noqa: F401, E402  (compiled tree ensembles; after ml, whose kernels they supersede)
from . import norm  # noqa: F401, E402  (family B: normalisation, Dropout; after reduce/tensor to supersede)
from . import rnn  # noqa: F401, E402  (family B: RNN, GRU, LSTM)
from . import attention  # noqa: F401, E402  (family B: Attention, RotaryEmbedding)
from . import cast  # noqa: F401, E402  (family A: Cast/CastLike, after tensor so it takes over its Cast)
from . import math  # noqa: F401, E402  (family A: activations, Einsum, Det, CumSum)
from . import quant  # noqa: F401, E402  (family A: QuantizeLinear, DequantizeLinear, QLinear*, *Integer)
from . import signal  # noqa: F401, E402  (family B: DFT, STFT, windows, MelWeightMatrix)
from . import fused  # noqa: F401, E402  (performance: com.microsoft fused ops the optimizer emits)
from . import training  # noqa: F401, E402  (family A: ai.onnx.preview.training optimizers, Gradient)
