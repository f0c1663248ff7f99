"""Which NVIDIA GPUs this machine has, or why the provider can use none.

The driver is asked first, through its own library (``libcuda``) with ctypes, so that "no
driver" and "no GPU" are told apart from "no CuPy" and each reason says what to install. CuPy is
then asked for each device's properties. The answer is computed once per process.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

CUPY_HINT = ("pip install 'ort-ep-cuda[cuda12]' (CUDA 12 driver) or 'ort-ep-cuda[cuda13]' (CUDA 13 driver); "
             "they install cupy-cuda12x/cupy-cuda13x, nvidia-cudnn-frontend and the cuDNN wheel")
DRIVER_HINT = ("install the NVIDIA driver (https://www.nvidia.com/download, or your distribution's "
               "nvidia-driver package); inside a container, run it with the NVIDIA container toolkit "
               "(docker run --gpus all)")
CUDNN_HINT = "pip install 'nvidia-cudnn-frontend>=1.14,<1.17' nvidia-cudnn-cu12 (or nvidia-cudnn-cu13)"

_CUDA_SUCCESS = 0
_CUDA_ERROR_NO_DEVICE = 100


@dataclass(frozen=True)
class GpuRecord:
    """One GPU as the driver and CuPy describe it."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    driver_version: int  # e.g. 12040 for 12.4
    runtime_version: int  # CUDA runtime CuPy was built for / loaded
    cupy_version: str
    cudnn: str  # cuDNN backend version, or "" when cudnn-frontend cannot be used
    cudnn_reason: str = ""  # why not, when cudnn is ""


@dataclass(frozen=True)
class Probe:
    records: tuple[GpuRecord, ...]
    reason: str | None = None


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def load_driver() -> Any:
    """The driver library (raises OSError when it is not installed)."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    return ctypes.CDLL(name)


def import_cupy() -> Any:
    import cupy

    return cupy


def cudnn_version() -> tuple[str, str]:
    """(version, "") of the cuDNN backend cudnn-frontend loads, or ("", why not)."""
    try:
        import cudnn

        return str(cudnn.backend_version()), ""
    except Exception as exc:  # ImportError, or libcudnn.so.9 missing
        return "", f"cudnn-frontend cannot be used ({type(exc).__name__}: {exc}); {CUDNN_HINT}"


def driver_devices(driver: Any) -> tuple[int, int, str | None]:
    """(device count, driver version, reason) from the driver library."""
    rc = driver.cuInit(0)
    if rc == _CUDA_ERROR_NO_DEVICE:
        return 0, 0, ("no NVIDIA GPU: the NVIDIA driver is installed but reports no device "
                      "(cuInit: CUDA_ERROR_NO_DEVICE); check nvidia-smi and CUDA_VISIBLE_DEVICES")
    if rc != _CUDA_SUCCESS:
        return 0, 0, f"the NVIDIA driver failed to initialise (cuInit returned CUDA error {rc}); check nvidia-smi"
    count, version = ctypes.c_int(0), ctypes.c_int(0)
    driver.cuDeviceGetCount(ctypes.byref(count))
    driver.cuDriverGetVersion(ctypes.byref(version))
    if count.value == 0:
        return 0, version.value, "no NVIDIA GPU: the NVIDIA driver is installed but reports 0 devices; check nvidia-smi"
    return count.value, version.value, None


def probe_with(
    load: Callable[[], Any] = load_driver,
    cupy_import: Callable[[], Any] = import_cupy,
    cudnn: Callable[[], tuple[str, str]] = cudnn_version,
) -> Probe:
    """Ask the driver, then CuPy; the three callables are what a test replaces."""
    try:
        driver = load()
    except OSError as exc:
        return Probe((), f"no NVIDIA driver: the driver library cannot be loaded ({exc}); {DRIVER_HINT}")
    count, driver_version, reason = driver_devices(driver)
    if reason is not None:
        return Probe((), reason)
    try:
        cupy = cupy_import()
    except Exception as exc:  # ImportError, or CuPy failing to load its CUDA libraries
        return Probe((), f"CuPy cannot be imported ({type(exc).__name__}: {exc}); {CUPY_HINT}")
    try:
        runtime = cupy.cuda.runtime
        runtime_version = int(runtime.runtimeGetVersion())
        # CUDA's minor-version compatibility: a runtime of the driver's major version runs on it
        # (CuPy 14.2's CUDA 13.2 build on a 13.0 driver); a newer major does not
        if int(runtime.driverGetVersion()) // 1000 < runtime_version // 1000:
            return Probe((), (
                f"the NVIDIA driver supports CUDA {_version(driver_version)} but CuPy was built for CUDA "
                f"{_version(runtime_version)}: update the driver, or install the CuPy wheel of the driver's "
                f"CUDA major version ({CUPY_HINT})"
            ))
        cudnn_ver, cudnn_reason = cudnn()
        records = []
        for i in range(int(runtime.getDeviceCount())):
            props = runtime.getDeviceProperties(i)
            name = props["name"]
            records.append(GpuRecord(
                index=i,
                name=name.decode() if isinstance(name, bytes) else str(name),
                compute_capability=(int(props["major"]), int(props["minor"])),
                total_memory=int(props["totalGlobalMem"]),
                driver_version=driver_version,
                runtime_version=runtime_version,
                cupy_version=str(cupy.__version__),
                cudnn=cudnn_ver,
                cudnn_reason=cudnn_reason,
            ))
    except Exception as exc:  # a CUDA runtime error from CuPy
        return Probe((), f"CuPy found the driver ({count} device(s)) but failed to use it "
                         f"({type(exc).__name__}: {exc}); {CUPY_HINT}")
    return Probe(tuple(records), None if records else "CuPy reports no CUDA device")


@lru_cache(maxsize=1)
def probe() -> Probe:
    """The GPUs of this machine (asked once per process)."""
    return probe_with()


def metadata(record: GpuRecord) -> dict[str, str]:
    """What ``get_ep_devices()`` shows for a GPU."""
    return {
        "compute_capability": "{}.{}".format(*record.compute_capability),
        "total_memory_bytes": str(record.total_memory),
        "driver_cuda_version": _version(record.driver_version),
        "runtime_cuda_version": _version(record.runtime_version),
        "cupy": record.cupy_version,
        "cudnn": record.cudnn or f"unavailable: {record.cudnn_reason}",
    }
