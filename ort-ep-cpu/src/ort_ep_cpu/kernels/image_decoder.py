"""ImageDecoder: encoded bytes (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000) to an HWC uint8 array.

Decoding uses Pillow, an optional dependency: without it the node is declined with the reason,
so another provider (or a clear error) takes it.
"""

from __future__ import annotations

import importlib.util
import io

import numpy as np

from ..registry import kernel

_FORMATS = ("RGB", "BGR", "Grayscale")


def _check(node) -> str | None:
    if importlib.util.find_spec("PIL") is None:
        return "ImageDecoder needs Pillow: pip install pillow"
    fmt = node.attr("pixel_format", "RGB")
    if fmt not in _FORMATS:
        return f"ImageDecoder: pixel_format {fmt!r} is not one of {', '.join(_FORMATS)}"
    return None


@kernel("ImageDecoder", since=20, check=_check)
def _image_decoder(node, request):
    import PIL.Image  # optional dependency, checked above

    fmt = node.attr("pixel_format", "RGB")

    def decode(encoded):
        try:
            image = PIL.Image.open(io.BytesIO(np.ascontiguousarray(encoded).tobytes()))
            image.load()
        except Exception as exc:
            raise ValueError(f"ImageDecoder {node.name!r}: cannot decode the image: {exc}") from None
        if fmt == "Grayscale":
            return np.asarray(image.convert("L"), dtype=np.uint8)[:, :, None]
        rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
        return np.ascontiguousarray(rgb[:, :, ::-1]) if fmt == "BGR" else rgb

    return decode
