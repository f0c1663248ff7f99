"""CPU kernels, one module per family; importing this package registers them all."""

from . import elementwise, nn, reduce, tensor  # noqa: F401
from . import image  # noqa: F401, E402  (family B: Resize, Upsample, ...)
from . import control_flow, sequence  # noqa: F401, E402  (family C: If/Loop/Scan, sequences, ...)
from . import conv  # noqa: F401, E402  (family B: ConvTranspose, Col2Im)
