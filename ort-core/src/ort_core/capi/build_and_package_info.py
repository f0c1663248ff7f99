"""onnxruntime's ``onnxruntime.capi.build_and_package_info``: the package's name and version
(``package_name``, ``__version__``). onnxruntime's GPU builds also set ``cuda_version``; here
the CUDA provider is a package of its own, which ``ort-core providers`` describes."""

from ..version import __version__

package_name = "ort-core"

__all__ = ["__version__", "package_name"]
