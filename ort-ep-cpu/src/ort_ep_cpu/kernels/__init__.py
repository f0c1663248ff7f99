"""CPU kernels, one module per family; importing this package registers them all."""

from . import elementwise, nn, reduce, tensor  # noqa: F401
