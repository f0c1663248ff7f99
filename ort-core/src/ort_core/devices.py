"""Devices as onnxruntime's device API shows them, and what to do about a provider that is not here.

``get_ep_devices()`` returns ``OrtEpDevice`` objects in onnxruntime's shape (``ep_name``,
``ep_vendor``, ``ep_metadata``, ``ep_options``, ``device`` with ``type``, ``vendor``,
``vendor_id``, ``device_id``, ``metadata``, and ``memory_info(mem_type)``), built from the
providers' ``EpDevice`` answers; ``ep_device`` keeps the contract object.

``missing_provider`` decides what a requested provider that is not installed means: a name of
this project's family (or any other well-formed name) is warned about and skipped, with the
``pip install`` line where this project has a package; a near-miss of an installed name is an
error that suggests it; strict mode (``session.disable_cpu_ep_fallback=1``) makes any of them
an error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._enum import OrtEnum
from .errors import EPFail, Fail, NoSuchProvider
from .types import HOST_MEMORY, EpDevice, MemoryInfo

#: this project's provider packages, by provider name (the warning for a missing one names it)
PROVIDER_PACKAGES: dict[str, str] = {
    "TensorrtExecutionProvider": "ort-ep-tensorrt",
    "CUDAExecutionProvider": "ort-ep-cuda",
    "OpenVINOExecutionProvider": "ort-ep-openvino",
    "QNNExecutionProvider": "ort-ep-qnn",
    "CoreMLExecutionProvider": "ort-ep-coreml",
    "WebGpuExecutionProvider": "ort-ep-webgpu",
    "CPUExecutionProvider": "ort-ep-cpu",
}

#: the provider names onnxruntime 1.32 knows (its ``get_all_providers()``, in its order): a
#: name among them that is not installed is skipped with a warning; another name is unknown
#: ("Unknown Provider Type", as onnxruntime's ``set_providers`` and ``add_provider`` raise)
ONNXRUNTIME_PROVIDERS: tuple[str, ...] = (
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider", "OpenVINOExecutionProvider",
    "DnnlExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider", "NnapiExecutionProvider",
    "VSINPUExecutionProvider", "JsExecutionProvider", "CoreMLExecutionProvider", "DmlExecutionProvider",
    "RknpuExecutionProvider", "WebNNExecutionProvider", "WebGpuExecutionProvider", "XnnpackExecutionProvider",
    "CANNExecutionProvider", "AzureExecutionProvider", "CPUExecutionProvider",
)

# PCI vendor ids onnxruntime reports in OrtHardwareDevice.vendor_id (0 where unknown)
_VENDOR_IDS = {"intel": 0x8086, "nvidia": 0x10DE, "amd": 0x1002, "advanced micro devices": 0x1002,
               "qualcomm": 0x5143, "apple": 0x106B, "microsoft": 0x1414, "mesa": 0x10005}
# onnxruntime gives AMD's processors AMD's CPU vendor id, not the GPUs' (ATI's) one
_CPU_VENDOR_IDS = {**_VENDOR_IDS, "amd": 0x1022, "advanced micro devices": 0x1022}
# /proc/cpuinfo's x86 vendor strings and ARM implementer codes, as vendor names
_CPUINFO_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon",
                    "0x41": "ARM", "0x51": "Qualcomm", "0x61": "Apple", "0x48": "HiSilicon"}


@dataclass(frozen=True)
class HostCpu:
    """The processor this process runs on: its model name, its vendor ("Intel", "AMD", ...) and
    the feature flags /proc/cpuinfo lists for it ("avx2", "avx512_vnni", ...; empty where there is
    none: providers then cannot tell)."""

    name: str
    vendor: str
    flags: frozenset[str] = frozenset()


def host_cpu() -> HostCpu:
    """The host processor, for providers whose device is the CPU (read from /proc/cpuinfo where
    there is one; else what ``platform`` knows)."""
    import platform

    name = vendor = ""
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and not name:
                    name = value
                elif key in ("vendor_id", "CPU implementer") and not vendor:
                    vendor = _CPUINFO_VENDORS.get(value, value)
                elif key == "flags" and not flags:
                    flags = frozenset(value.split())
    except OSError:
        pass
    if not vendor and platform.system() == "Darwin" and platform.machine() == "arm64":
        vendor = "Apple"
    return HostCpu(name or platform.processor() or platform.machine(), vendor or platform.machine(), flags)


class OrtHardwareDeviceType(OrtEnum):
    """onnxruntime's hardware device types (same values)."""

    CPU = 0
    GPU = 1
    NPU = 2


class OrtDeviceMemoryType(OrtEnum):
    """onnxruntime's device memory types for ``OrtEpDevice.memory_info``."""

    DEFAULT = 0
    HOST_ACCESSIBLE = 5


@dataclass(frozen=True)
class OrtHardwareDevice:
    """The hardware under a provider's device (onnxruntime's ``OrtHardwareDevice``)."""

    type: OrtHardwareDeviceType
    vendor: str
    vendor_id: int
    device_id: int
    metadata: Mapping[str, str] = field(default_factory=dict)


class OrtEpDevice:
    """A provider on a device (onnxruntime's ``OrtEpDevice``); ``ep_device`` is the provider's
    own ``EpDevice``, whose fields (``name``, ``device_type``, ``memory``, ``hardware``, ...)
    are also readable here."""

    def __init__(self, ep_device: EpDevice, ep_version: str = ""):
        self.ep_device = ep_device
        self.ep_name = ep_device.ep_name
        self.ep_vendor = ep_device.ep_vendor
        self.ep_metadata: dict[str, str] = {"version": ep_version} if ep_version else {}
        self.ep_options: dict[str, str] = {}
        vendor = ep_device.vendor or ep_device.ep_vendor
        self.device = OrtHardwareDevice(
            type=OrtHardwareDeviceType[ep_device.device_type],
            vendor=vendor,
            vendor_id=_vendor_id(vendor, ep_device.device_type),
            device_id=ep_device.device_id,
            metadata={"name": ep_device.name, "memory": ep_device.memory,
                      "hardware": "1" if ep_device.hardware else "0", **ep_device.metadata},
        )

    def memory_info(self, mem_type: OrtDeviceMemoryType | int = OrtDeviceMemoryType.DEFAULT) -> MemoryInfo | None:
        """The device's memory (None for host memory, as onnxruntime answers for the CPU)."""
        if self.ep_device.memory == HOST_MEMORY or int(mem_type) != OrtDeviceMemoryType.DEFAULT:
            return None
        return MemoryInfo(self.ep_device.memory, self.ep_device.device_type, self.ep_device.device_id)

    def create_sync_stream(self) -> OrtSyncStream:
        """A synchronization stream of this device (onnxruntime's): for a device whose memory is
        not the host's; a CPU device has none, as in onnxruntime."""
        if self.ep_device.memory == HOST_MEMORY:
            raise Fail(f"ep_device {self.ep_name} on {self.ep_device.device_type} {self.ep_device.name!r} does not "
                       "use DEFAULT memory of a non-CPU device: it has no sync stream")
        return OrtSyncStream(self)

    # the contract device's fields, for code written against EpDevice
    def __getattr__(self, name: str) -> Any:
        if name in ("name", "device_type", "device_id", "vendor", "memory", "hardware", "metadata"):
            return getattr(self.ep_device, name)
        raise AttributeError(f"OrtEpDevice has no attribute {name!r}")

    def __repr__(self) -> str:
        d = self.ep_device
        return f"OrtEpDevice({self.ep_name}, {d.device_type} {d.name!r}, memory {d.memory!r})"


class OrtSyncStream:
    """A device's synchronization stream (onnxruntime's ``OrtSyncStream``), for
    ``copy_tensors(..., stream)``. ort-core's device providers copy and run synchronously (their
    data transfers return once the copy is done), so work given a stream is complete when the
    call returns, and the handle is 0: the device's default stream (CUDA's legacy one)."""

    def __init__(self, device: OrtEpDevice):
        self.device = device

    def get_handle(self) -> int:
        """The native stream handle: 0, the default stream (see the class)."""
        return 0

    def __repr__(self) -> str:
        return f"OrtSyncStream({self.device.ep_name}, handle 0)"


def _vendor_id(vendor: str, device_type: str) -> int:
    text = vendor.lower()
    ids = _CPU_VENDOR_IDS if device_type == "CPU" else _VENDOR_IDS
    return next((v for k, v in ids.items() if k in text), 0)


def ep_devices() -> list[OrtEpDevice]:
    """Every device of every installed provider that can run here, in onnxruntime's shape."""
    from .plugins import registry

    reg = registry()
    result = []
    for name, provider in reg.providers().items():
        for d in reg.devices(name).devices:
            result.append(OrtEpDevice(d, provider.spec.version))
    return result


def as_ep_device(device: Any) -> EpDevice:
    """The contract ``EpDevice`` of an ``OrtEpDevice`` (or of an ``EpDevice`` itself)."""
    if isinstance(device, OrtEpDevice):
        return device.ep_device
    if isinstance(device, EpDevice):
        return device
    raise TypeError(f"expected an OrtEpDevice from get_ep_devices(), got {type(device).__name__}")


def _edits(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def check_known_provider(name: str, installed: Sequence[str]) -> None:
    """Raise ``NoSuchProvider`` ("Unknown Provider Type", onnxruntime's words) for a name that
    is neither installed nor one onnxruntime or this project's family knows."""
    if name in installed or name in ONNXRUNTIME_PROVIDERS or name in PROVIDER_PACKAGES:
        return
    raise NoSuchProvider(f"Unknown Provider Type: {name}; available providers: {', '.join(installed) or '(none)'}; "
                         f"known: {', '.join(dict.fromkeys([*ONNXRUNTIME_PROVIDERS, *installed]))}")


def missing_provider(name: str, installed: Sequence[str], failures: Sequence[Any], strict: bool) -> str:
    """The warning for a requested provider ``name`` that is not installed, or raise
    ``NoSuchProvider``: for a near-miss of a provider name (a typo), and in strict mode."""
    known = list(dict.fromkeys([*installed, *PROVIDER_PACKAGES]))
    if name not in PROVIDER_PACKAGES:
        by_case = [k for k in known if k.lower() == name.lower()]
        # a typo is one or two edits away; names differing more (another runtime's provider,
        # "DmlExecutionProvider") are providers that are not installed
        close = by_case or [k for k in installed if _edits(name.lower(), k.lower()) <= 2]
        if close:
            raise NoSuchProvider(
                f"unknown provider {name!r}; did you mean {close[0]!r}? available providers: "
                f"{', '.join(installed) or '(none)'}")
    key = name.lower().replace("executionprovider", "")
    failed = [f for f in failures if key and key in (f.package + f.plugin).lower().replace("-", "").replace("_", "")]
    hint = "".join(f"; {f.package or f.plugin} failed to load: {f.error}" for f in failed)
    package = PROVIDER_PACKAGES.get(name)
    install = f" (install it with `pip install {package}`)" if package and not failed else ""
    message = (f"provider {name!r} is not installed{install}{hint}; available providers: "
               f"{', '.join(installed) or '(none)'}")
    if strict:
        raise NoSuchProvider(f"{message}; session.disable_cpu_ep_fallback=1 makes this an error")
    return message + "; running on the others"


# --------------------------------------------------------------------------------------------
# device memory outside sessions (OrtValues on a device)
# --------------------------------------------------------------------------------------------


def memory_base(memory: str) -> str:
    """"WebGpu:0" -> "webgpu": the memory space name compared with a device type."""
    return memory.split(":")[0].lower()


@dataclass
class DeviceMemory:
    """A provider's device memory as OrtValues use it: the provider bound once per process
    and device (default options), its data transfer and allocator."""

    provider: str
    memory: str
    device_id: int
    transfer: Any
    allocator: Any
    context: Any
    registry: Any = None

    @property
    def memory_device_type(self) -> str:
        """The device type OrtValues on this memory name ("webgpu", "cuda")."""
        return memory_base(self.memory)


_DEVICE_MEMORY: dict[tuple[str, int], DeviceMemory] = {}
_DEVICE_LOCK = __import__("threading").Lock()


def device_memory(device_type: str, device_id: int = 0) -> DeviceMemory:
    """The provider whose ``EpDevice.memory`` is ``device_type`` ("webgpu" -> "WebGpu", "cuda"
    -> "Cuda"), bound on device ``device_id`` for OrtValues (once per process)."""
    from .plugins import registry
    from .session import validate_options
    from .types import ProviderContext

    wanted = str(device_type).lower()
    reg = registry()
    key = (id(reg), wanted, int(device_id))  # a registry made anew (tests) binds anew
    with _DEVICE_LOCK:
        found = _DEVICE_MEMORY.get(key)
        if found is not None and found.registry is reg:
            return found
        seen = []
        for name, provider in reg.providers().items():
            for d in reg.devices(name).devices:
                seen.append(f"{d.memory} ({name}, device {d.device_id})")
                if memory_base(d.memory) != wanted or d.device_id != int(device_id):
                    continue
                options = validate_options(name, provider.spec.options, {})
                ctx = ProviderContext(name=name, options=options, device=d, session_config={})
                try:
                    provider.hooks.ort_session_start(ep=ctx)
                    allocator = provider.hooks.ort_create_allocator(ep=ctx)
                    transfer = provider.hooks.ort_create_data_transfer(ep=ctx)
                except Exception as exc:
                    raise EPFail(f"{name} could not be started for {device_type!r} memory: {type(exc).__name__}: {exc}") from exc
                if transfer is None:
                    raise EPFail(f"{name}: device memory {d.memory!r} but no data transfer hook")
                found = _DEVICE_MEMORY[key] = DeviceMemory(name, ctx.device.memory, int(device_id), transfer,
                                                           allocator, ctx, reg)
                return found
        from .errors import InvalidArgument

        raise InvalidArgument(
            f"device {device_type!r} (id {device_id}): no installed provider has that memory; device memories "
            f"here: {', '.join(seen) or '(none)'} (install e.g. {_memory_package(wanted)})")


def _memory_package(device_type: str) -> str:
    return {"cuda": "ort-ep-cuda", "webgpu": "ort-ep-webgpu"}.get(device_type, "the provider package")


# --------------------------------------------------------------------------------------------
# onnxruntime's memory-info names (OrtDevice, OrtMemoryInfo and their enums)
# --------------------------------------------------------------------------------------------


class OrtMemType(OrtEnum):
    """onnxruntime's memory types of an ``OrtMemoryInfo`` (same values)."""

    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtAllocatorType(OrtEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemoryInfoDeviceType(OrtEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceVendorId(enum.IntEnum):
    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


# the device types OrtDevice.make knows, as onnxruntime numbers them
_ORT_DEVICE_TYPES = {"cpu": 0, "gpu": 1, "cuda": 1, "webgpu": 1, "rocm": 1, "fpga": 2, "npu": 3, "qnn": 3, "dml": 4}


class OrtDevice:
    """A device as onnxruntime's ``OrtDevice`` names it: type, id, memory type, vendor id."""

    def __init__(self, device_type: int = 0, memory_type: int = 0, vendor_id: int = 0, device_id: int = 0,
                 memory: str = HOST_MEMORY):
        self._type, self._mem, self._vendor, self._id = int(device_type), int(memory_type), int(vendor_id), int(device_id)
        self.memory = memory  # the memory space name of ort-core's providers ("CPU", "WebGpu")

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int | OrtDeviceVendorId = -1) -> OrtDevice:
        """The device named ``ort_device_name`` ("cpu", "cuda", "webgpu", "npu", ...) and ``device_id``."""
        from .errors import InvalidArgument

        name = str(ort_device_name).lower()
        if name not in _ORT_DEVICE_TYPES:
            raise InvalidArgument(f"OrtDevice.make: unknown device {ort_device_name!r}; known: {', '.join(_ORT_DEVICE_TYPES)}")
        vendor = int(vendor_id) if int(vendor_id) >= 0 else (
            {"cuda": OrtDeviceVendorId.NVIDIA, "rocm": OrtDeviceVendorId.AMD}.get(name, 0))
        return OrtDevice(_ORT_DEVICE_TYPES[name], 0, int(vendor), int(device_id),
                         HOST_MEMORY if name == "cpu" else name)

    def device_type(self) -> int:
        return self._type

    def device_id(self) -> int:
        return self._id

    def device_mem_type(self) -> int:
        return self._mem

    def device_vendor_id(self) -> int:
        return self._vendor

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtDevice) and (self._type, self._mem, self._vendor, self._id) == (
            other._type, other._mem, other._vendor, other._id)

    def __hash__(self) -> int:
        return hash((self._type, self._mem, self._vendor, self._id))

    def __repr__(self) -> str:
        return f"OrtDevice(type={self._type}, mem={self._mem}, vendor=0x{self._vendor:x}, id={self._id})"


class OrtMemoryInfo:
    """onnxruntime's ``OrtMemoryInfo``: ``OrtMemoryInfo(name, allocator_type, device_id, mem_type)``
    or ``create_v2``; ``name`` is the memory's name ("Cpu" for host memory, as onnxruntime)."""

    def __init__(self, name: str, allocator_type: OrtAllocatorType | int = OrtAllocatorType.ORT_ARENA_ALLOCATOR,
                 device_id: int = 0, mem_type: OrtMemType | int = OrtMemType.DEFAULT):
        self.name = str(name)
        self.allocator_type = OrtAllocatorType(int(allocator_type))
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(int(mem_type))
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = 0
        self.device_type = OrtMemoryInfoDeviceType.CPU if self.name.lower() == "cpu" else OrtMemoryInfoDeviceType.GPU
        self.alignment = 0

    @staticmethod
    def create_v2(name: str, device_type: OrtMemoryInfoDeviceType | int, vendor_id: int, device_id: int,
                  mem_type: OrtDeviceMemoryType | int, alignment: int,
                  allocator_type: OrtAllocatorType | int) -> OrtMemoryInfo:
        info = OrtMemoryInfo(name, allocator_type, device_id, OrtMemType.DEFAULT)
        info.device_type = OrtMemoryInfoDeviceType(int(device_type))
        info.device_vendor_id = int(vendor_id)
        info.device_mem_type = OrtDeviceMemoryType(int(mem_type))
        info.alignment = int(alignment)
        return info

    @staticmethod
    def of_memory(memory: str, device_type: str, device_id: int, vendor: str = "") -> OrtMemoryInfo:
        """The memory info of an ort-core memory space (``EpDevice.memory``)."""
        name = "Cpu" if memory == HOST_MEMORY else memory.split(":")[0]
        kind = OrtMemoryInfoDeviceType.CPU if memory == HOST_MEMORY else OrtMemoryInfoDeviceType[
            device_type if device_type in OrtMemoryInfoDeviceType.__members__ else "GPU"]
        alloc = OrtAllocatorType.ORT_ARENA_ALLOCATOR if memory == HOST_MEMORY else OrtAllocatorType.ORT_DEVICE_ALLOCATOR
        return OrtMemoryInfo.create_v2(name, kind, 0 if memory == HOST_MEMORY else _vendor_id(vendor, device_type), device_id,
                                       OrtDeviceMemoryType.DEFAULT, 0, alloc)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtMemoryInfo) and (self.name, self.device_id, self.device_type, self.mem_type) == (
            other.name, other.device_id, other.device_type, other.mem_type)

    def __hash__(self) -> int:
        return hash((self.name, self.device_id))

    def __repr__(self) -> str:
        return f"OrtMemoryInfo({self.name!r}, device_id={self.device_id}, {self.device_type.name}, {self.allocator_type.name})"


class OrtArenaCfg:
    """Arena settings (onnxruntime's ``OrtArenaCfg``): a dict of its keys, or the four values
    ``max_mem, arena_extend_strategy, initial_chunk_size_bytes, max_dead_bytes_per_chunk``.
    Kept for providers that pool memory; core's host allocator has no arena."""

    KEYS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes", "max_dead_bytes_per_chunk",
            "initial_growth_chunk_size_bytes", "max_power_of_two_extend_bytes")

    def __init__(self, *args: Any) -> None:
        from .errors import InvalidArgument

        values: dict[str, int] = {"max_mem": 0, "arena_extend_strategy": -1, "initial_chunk_size_bytes": -1,
                                  "max_dead_bytes_per_chunk": -1, "initial_growth_chunk_size_bytes": -1,
                                  "max_power_of_two_extend_bytes": -1}
        if len(args) == 1 and isinstance(args[0], Mapping):
            unknown = [k for k in args[0] if k not in self.KEYS]
            if unknown:
                raise InvalidArgument(f"OrtArenaCfg: unknown key(s) {unknown}; valid: {', '.join(self.KEYS)}")
            values.update({k: int(v) for k, v in args[0].items()})
        elif len(args) == 4:
            values.update(zip(self.KEYS[:4], (int(a) for a in args)))
        elif args:
            raise InvalidArgument("OrtArenaCfg takes a dict of settings or 4 ints")
        self.__dict__.update(values)


# --------------------------------------------------------------------------------------------
# environment allocators
# --------------------------------------------------------------------------------------------

#: allocators registered for sharing between sessions (onnxruntime's environment allocators),
#: by provider: (memory info, arena settings)
_SHARED_ALLOCATORS: dict[str, tuple[OrtMemoryInfo, OrtArenaCfg | None]] = {}
#: the session config entry by which a session takes the registered allocators
USE_ENV_ALLOCATORS = "session.use_env_allocators"


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg | None = None) -> None:
    """Register a host-memory allocator that sessions share (onnxruntime's
    ``create_and_register_allocator``): a session whose config has
    ``session.use_env_allocators`` = "1" takes it in place of its own. For the CPU provider,
    whose arena is process-wide, that is whether the arena is used: an arena allocator
    (``ORT_ARENA_ALLOCATOR``) turns it on for such a session whatever
    ``enable_cpu_mem_arena`` says, a device allocator leaves it off. Registering again
    replaces the registration. Only host memory, as onnxruntime."""
    if not isinstance(mem_info, OrtMemoryInfo):
        raise Fail(f"create_and_register_allocator: mem_info must be an OrtMemoryInfo, got {type(mem_info).__name__}")
    if mem_info.device_type != OrtMemoryInfoDeviceType.CPU:
        raise Fail("Error when creating and registering allocator: Only CPU devices are supported. Please call "
                   "CreateAndRegisterAllocatorV2() for other device.")
    _SHARED_ALLOCATORS["CPUExecutionProvider"] = (mem_info, arena_cfg)


def create_and_register_allocator_v2(provider_type: str, mem_info: OrtMemoryInfo, provider_options: Mapping[str, str],
                                     arena_cfg: OrtArenaCfg | None = None) -> None:
    """onnxruntime's ``create_and_register_allocator_v2``: the allocator of ``provider_type``'s
    memory, shared as ``create_and_register_allocator``'s. The CPU provider's only: the
    device-memory providers of this family keep their own allocators (onnxruntime refuses the
    providers it has not implemented this for, in the same words)."""
    if provider_type != "CPUExecutionProvider":
        raise Fail(f"Error when creating and registering allocator in create_and_register_allocator_v2: {provider_type} "
                   "is not implemented in CreateAndRegisterAllocatorV2()")
    create_and_register_allocator(mem_info, arena_cfg)


def shared_allocator(provider: str) -> tuple[OrtMemoryInfo, OrtArenaCfg | None] | None:
    """The allocator registered for ``provider``'s sessions to share, or None."""
    return _SHARED_ALLOCATORS.get(provider)
