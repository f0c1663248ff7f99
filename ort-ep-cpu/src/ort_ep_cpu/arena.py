"""The CPU "arena": keep freed host memory in the process for the next run's tensors.

numpy allocates every kernel output afresh. With glibc's default malloc, a tensor above
128 KiB is an ``mmap`` of its own and is unmapped when freed, and the heap top is trimmed back
to the system: every run then page-faults its whole working set in again, which cost more than
the kernels themselves on the generated transformer. onnxruntime avoids this with its CPU
memory arena (``SessionOptions.enable_cpu_mem_arena``, on by default); this provider honours
the same option by raising glibc's mmap and trim thresholds (``mallopt``), so freed blocks stay
in the heap and are reused. It is process-wide and stays for the life of the process, like an
arena that is never shrunk; elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

# glibc's mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks up to this size come from the heap (glibc's maximum on 64-bit is 32 MiB)
MMAP_THRESHOLD = 32 * 1024 * 1024
#: free memory kept at the heap top before it is given back to the system
TRIM_THRESHOLD = 256 * 1024 * 1024

_lock = threading.Lock()
_state: dict[str, bool] = {}


def enable() -> bool:
    """Apply the thresholds once per process; True if they are in effect (glibc only)."""
    with _lock:
        if "enabled" not in _state:
            _state["enabled"] = _apply()
        return _state["enabled"]


def _apply() -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
