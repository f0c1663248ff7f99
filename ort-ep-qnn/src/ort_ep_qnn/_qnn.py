"""ctypes bindings to the QNN C API: the structs, the interface table, and the libraries.

The layouts follow the QNN SDK's public headers (QnnTypes.h, QnnInterface.h, QnnGraph.h,
HTP/QnnHtpGraph.h, System/QnnSystemInterface.h); ``tests/test_layout.py`` checks every size
and field offset against a compiler's ``offsetof`` (see ``scripts/qnn_layout.c``). The
interface table only grows at its end between SDK releases, so a prefix of it is declared.

Nothing here is imported by the plugin module at import time: the libraries are loaded on
first use (``load``), and a missing library is an ``ImportError`` that says what to install.
"""

from __future__ import annotations

import ctypes as C
import glob
import os
import threading
from typing import Any

# --- scalars and enums (values from QnnTypes.h) -------------------------------------------------

Qnn_ErrorHandle_t = C.c_uint64
Handle = C.c_void_p

DT_INT_8, DT_INT_16, DT_INT_32, DT_INT_64 = 0x0008, 0x0016, 0x0032, 0x0064
DT_UINT_8, DT_UINT_16, DT_UINT_32, DT_UINT_64 = 0x0108, 0x0116, 0x0132, 0x0164
DT_FLOAT_16, DT_BFLOAT_16, DT_FLOAT_32, DT_FLOAT_64 = 0x0216, 0x0226, 0x0232, 0x0264
DT_SFIXED_8, DT_SFIXED_16, DT_SFIXED_32 = 0x0308, 0x0316, 0x0332
DT_UFIXED_8, DT_UFIXED_16, DT_UFIXED_32 = 0x0408, 0x0416, 0x0432
DT_BOOL_8 = 0x0508

TENSOR_APP_WRITE, TENSOR_APP_READ, TENSOR_NATIVE, TENSOR_STATIC = 0, 1, 3, 4
PARAM_SCALAR, PARAM_TENSOR = 0, 1
DEFINITION_DEFINED, DEFINITION_UNDEFINED = 1, 0x7FFFFFFF
ENCODING_SCALE_OFFSET, ENCODING_AXIS_SCALE_OFFSET, ENCODING_UNDEFINED = 0, 1, 0x7FFFFFFF
MEMTYPE_RAW = 0
TENSOR_VERSION_1 = 1
OPCONFIG_VERSION_1 = 1
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_VERBOSE, LOG_DEBUG = 1, 2, 3, 4, 5

GRAPH_CONFIG_CUSTOM, GRAPH_CONFIG_PRIORITY = 0, 3
CONTEXT_CONFIG_PRIORITY = 1  # QNN_CONTEXT_CONFIG_OPTION_PRIORITY
HTP_GRAPH_OPTIMIZATION, HTP_GRAPH_PRECISION = 1, 2
HTP_OPT_FINALIZE_OPTIMIZATION_FLAG = 3
PRECISION_FLOAT16 = 1

# QnnProfile.h: levels, event types and units
PROFILE_LEVEL_BASIC, PROFILE_LEVEL_DETAILED = 1, 2
PROFILE_EVENT_TYPES = {100: "INIT", 300: "FINALIZE", 400: "EXECUTE", 404: "NODE", 405: "EXECUTE QUEUE WAIT",
                       406: "EXECUTE PREPROCESS", 407: "EXECUTE DEVICE", 408: "EXECUTE POSTPROCESS",
                       500: "DE-INIT", 600: "TRACE", 1000: "BACKEND"}
PROFILE_DATA_VERSION_1 = 1
# QnnProperty.h: QNN_PROPERTY_GROUP_CORE (1) + 1400 (the profile group) + 3
PROPERTY_PROFILE_SUPPORTS_EXTENDED_EVENT = 1 + 1400 + 3
PROFILE_UNITS = {1: "US", 2: "BYTES", 3: "CYCLES", 4: "COUNT", 5: "OBJECT", 6: "NONE", 1000: "BACKEND"}

OP_PACKAGE = b"qti.aisw"

# --- structs --------------------------------------------------------------------------------------


class Version(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32), ("patch", C.c_uint32)]

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


class ApiVersion(C.Structure):
    _fields_ = [("coreApiVersion", Version), ("backendApiVersion", Version)]


class _ScalarValue(C.Union):
    _fields_ = [
        ("floatValue", C.c_float), ("doubleValue", C.c_double), ("uint64Value", C.c_uint64),
        ("int64Value", C.c_int64), ("uint32Value", C.c_uint32), ("int32Value", C.c_int32),
        ("uint16Value", C.c_uint16), ("int16Value", C.c_int16), ("uint8Value", C.c_uint8),
        ("int8Value", C.c_int8), ("bool8Value", C.c_uint8), ("stringValue", C.c_char_p),
    ]


class Scalar(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("dataType", C.c_int), ("u", _ScalarValue)]


class ScaleOffset(C.Structure):
    _fields_ = [("scale", C.c_float), ("offset", C.c_int32)]


class AxisScaleOffset(C.Structure):
    _fields_ = [("axis", C.c_int32), ("numScaleOffsets", C.c_uint32), ("scaleOffset", C.POINTER(ScaleOffset))]


class _QuantEncoding(C.Union):
    # The header's union has more members; the largest is 32 bytes and holds pointers, so the
    # union is 8-byte aligned (the padding member reproduces both: without it every field after
    # quantizeParams in a tensor would be 4 bytes off).
    _fields_ = [
        ("scaleOffsetEncoding", ScaleOffset),
        ("axisScaleOffsetEncoding", AxisScaleOffset),
        ("_size", C.c_uint64 * 4),
    ]


class QuantizeParams(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("encodingDefinition", C.c_int), ("quantizationEncoding", C.c_int), ("u", _QuantEncoding)]


class ClientBuffer(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dataSize", C.c_uint32)]


class _TensorMem(C.Union):
    _fields_ = [("clientBuf", ClientBuffer), ("memHandle", C.c_void_p), ("retrieveRaw", C.c_void_p)]


_TENSOR_V1_FIELDS = [
    ("id", C.c_uint32), ("name", C.c_char_p), ("type", C.c_int), ("dataFormat", C.c_uint32),
    ("dataType", C.c_int), ("quantizeParams", QuantizeParams), ("rank", C.c_uint32),
    ("dimensions", C.POINTER(C.c_uint32)), ("memType", C.c_int), ("mem", _TensorMem),
]


class TensorV1(C.Structure):
    _anonymous_ = ("mem",)
    _fields_ = _TENSOR_V1_FIELDS


class SparseParams(C.Structure):
    _fields_ = [("type", C.c_int), ("numSpecifiedElements", C.c_uint32), ("numSparseDimensions", C.c_uint32)]


class TensorV2(C.Structure):
    _anonymous_ = ("mem",)
    _fields_ = [
        *_TENSOR_V1_FIELDS,
        ("isDynamicDimensions", C.POINTER(C.c_uint8)), ("sparseParams", SparseParams), ("isProduced", C.c_uint8),
    ]


class _TensorVersions(C.Union):
    _fields_ = [("v1", TensorV1), ("v2", TensorV2)]


class Tensor(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("version", C.c_int), ("u", _TensorVersions)]


class _ParamValue(C.Union):
    _fields_ = [("scalarParam", Scalar), ("tensorParam", Tensor)]


class Param(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("paramType", C.c_int), ("name", C.c_char_p), ("u", _ParamValue)]


class OpConfigV1(C.Structure):
    _fields_ = [
        ("name", C.c_char_p), ("packageName", C.c_char_p), ("typeName", C.c_char_p),
        ("numOfParams", C.c_uint32), ("params", C.POINTER(Param)),
        ("numOfInputs", C.c_uint32), ("inputTensors", C.POINTER(Tensor)),
        ("numOfOutputs", C.c_uint32), ("outputTensors", C.POINTER(Tensor)),
    ]


class _OpConfigVersions(C.Union):
    _fields_ = [("v1", OpConfigV1)]


class OpConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("version", C.c_int), ("u", _OpConfigVersions)]


class _GraphConfigValue(C.Union):
    _fields_ = [("customConfig", C.c_void_p), ("priority", C.c_int)]


class GraphConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("option", C.c_int), ("u", _GraphConfigValue)]


class _ContextConfigValue(C.Union):
    _fields_ = [("customConfig", C.c_void_p), ("priority", C.c_int), ("_size", C.c_void_p)]


class ContextConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("option", C.c_int), ("u", _ContextConfigValue)]


class HtpOptimizationOption(C.Structure):
    _fields_ = [("type", C.c_int), ("floatValue", C.c_float)]


class _HtpGraphConfigValue(C.Union):
    # largest member: the 44-byte parallel execution config; pointers make it 8-aligned
    _fields_ = [("optimizationOption", HtpOptimizationOption), ("precision", C.c_int), ("_size", C.c_uint64 * 6)]


class HtpGraphCustomConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("option", C.c_int), ("u", _HtpGraphConfigValue)]


class ProfileEventData(C.Structure):
    _fields_ = [("type", C.c_uint32), ("unit", C.c_uint32), ("value", C.c_uint64), ("identifier", C.c_char_p)]


class OpaqueObject(C.Structure):
    _fields_ = [("data", C.c_void_p), ("len", C.c_uint64)]


class ProfileBackendOpaqueObject(C.Structure):
    _fields_ = [("opaqueObject", OpaqueObject), ("fileName", C.c_char_p)]


class _ExtendedEventValue(C.Union):
    _fields_ = [("value", Scalar), ("backendOpaqueObject", ProfileBackendOpaqueObject)]


class ProfileExtendedEventDataV1(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("type", C.c_uint32), ("unit", C.c_uint32), ("u", _ExtendedEventValue), ("timestamp", C.c_uint64),
                ("identifier", C.c_char_p)]


class _ExtendedEventVersions(C.Union):
    _fields_ = [("v1", ProfileExtendedEventDataV1)]


class ProfileExtendedEventData(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("version", C.c_int), ("u", _ExtendedEventVersions)]


# the interface table, in the header's order (QnnInterface.h); the used entries get prototypes
INTERFACE_FUNCTIONS = [
    "propertyHasCapability",
    "backendCreate", "backendSetConfig", "backendGetApiVersion", "backendGetBuildId",
    "backendRegisterOpPackage", "backendGetSupportedOperations", "backendValidateOpConfig", "backendFree",
    "contextCreate", "contextSetConfig", "contextGetBinarySize", "contextGetBinary",
    "contextCreateFromBinary", "contextFree",
    "graphCreate", "graphCreateSubgraph", "graphSetConfig", "graphAddNode", "graphFinalize",
    "graphRetrieve", "graphExecute", "graphExecuteAsync",
    "tensorCreateContextTensor", "tensorCreateGraphTensor",
    "logCreate", "logSetLogLevel", "logFree",
    "profileCreate", "profileSetConfig", "profileGetEvents", "profileGetSubEvents", "profileGetEventData",
    "profileGetExtendedEventData", "profileFree",
    "memRegister", "memDeRegister",
    "deviceGetPlatformInfo", "deviceFreePlatformInfo", "deviceGetInfrastructure", "deviceCreate",
    "deviceSetConfig", "deviceGetInfo", "deviceFree",
    "signalCreate", "signalSetConfig", "signalTrigger", "signalFree",
    "errorGetMessage", "errorGetVerboseMessage", "errorFreeVerboseMessage",
    "graphPrepareExecutionEnvironment", "graphReleaseExecutionEnvironment", "graphGetProperty",
    "contextValidateBinary", "contextCreateFromBinaryWithSignal", "contextCreateFromBinaryListAsync",
    "tensorUpdateGraphTensors", "tensorUpdateContextTensors", "contextGetBinarySectionSize",
    "contextGetBinarySection", "contextApplyBinarySection", "backendGetProperty", "contextGetProperty",
    "contextGetIncrementalBinary", "contextReleaseIncrementalBinary", "contextFinalize", "globalConfigSet",
    "contextCreateFromBinaryWithCallback", "contextGetBinarySectionUpdate", "contextFreeBinarySectionUpdate",
]


class InterfaceTable(C.Structure):
    _fields_ = [(name, C.c_void_p) for name in INTERFACE_FUNCTIONS]


class Interface(C.Structure):
    _fields_ = [
        ("backendId", C.c_uint32), ("providerName", C.c_char_p), ("apiVersion", ApiVersion),
        ("table", InterfaceTable),
    ]


SYSTEM_FUNCTIONS = [
    "systemContextCreate", "systemContextGetBinaryInfo", "systemContextGetMetaData", "systemContextFree",
    "systemTensorGetMemoryFootprint", "systemLogCreate", "systemLogSetLogLevel", "systemLogFree",
    "systemDlcCreateFromFile", "systemDlcCreateFromBinary", "systemDlcComposeGraphs", "systemDlcGetOpMappings",
    "systemDlcFree", "systemProfileCreateSerializationTarget", "systemProfileSerializeEventData",
    "systemProfileFreeSerializationTarget",
]


class SystemTable(C.Structure):
    _fields_ = [(name, C.c_void_p) for name in SYSTEM_FUNCTIONS]


class SystemInterface(C.Structure):
    _fields_ = [
        ("backendId", C.c_uint32), ("providerName", C.c_char_p), ("systemApiVersion", Version),
        ("table", SystemTable),
    ]


E = Qnn_ErrorHandle_t
P = C.c_void_p
PP = C.POINTER(C.c_void_p)
LOG_CALLBACK = C.CFUNCTYPE(None, C.c_char_p, C.c_int, C.c_uint64, C.c_void_p)

PROTOTYPES: dict[str, Any] = {
    "backendCreate": C.CFUNCTYPE(E, P, P, PP),
    "backendGetApiVersion": C.CFUNCTYPE(E, C.POINTER(ApiVersion)),
    "backendGetBuildId": C.CFUNCTYPE(E, C.POINTER(C.c_char_p)),
    "backendValidateOpConfig": C.CFUNCTYPE(E, P, OpConfig),
    "backendFree": C.CFUNCTYPE(E, P),
    "contextCreate": C.CFUNCTYPE(E, P, P, P, PP),
    "contextGetBinarySize": C.CFUNCTYPE(E, P, C.POINTER(C.c_uint64)),
    "contextGetBinary": C.CFUNCTYPE(E, P, P, C.c_uint64, C.POINTER(C.c_uint64)),
    "contextCreateFromBinary": C.CFUNCTYPE(E, P, P, P, P, C.c_uint64, PP, P),
    "contextFree": C.CFUNCTYPE(E, P, P),
    "graphCreate": C.CFUNCTYPE(E, P, C.c_char_p, P, PP),
    "graphAddNode": C.CFUNCTYPE(E, P, OpConfig),
    "graphFinalize": C.CFUNCTYPE(E, P, P, P),
    "graphRetrieve": C.CFUNCTYPE(E, P, C.c_char_p, PP),
    "graphExecute": C.CFUNCTYPE(E, P, C.POINTER(Tensor), C.c_uint32, C.POINTER(Tensor), C.c_uint32, P, P),
    "tensorCreateGraphTensor": C.CFUNCTYPE(E, P, C.POINTER(Tensor)),
    "logCreate": C.CFUNCTYPE(E, LOG_CALLBACK, C.c_int, PP),
    "logSetLogLevel": C.CFUNCTYPE(E, P, C.c_int),
    "logFree": C.CFUNCTYPE(E, P),
    "deviceCreate": C.CFUNCTYPE(E, P, P, PP),
    "deviceFree": C.CFUNCTYPE(E, P),
    "profileCreate": C.CFUNCTYPE(E, P, C.c_uint32, PP),
    "profileGetEvents": C.CFUNCTYPE(E, P, C.POINTER(C.POINTER(C.c_uint64)), C.POINTER(C.c_uint32)),
    "profileGetSubEvents": C.CFUNCTYPE(E, C.c_uint64, C.POINTER(C.POINTER(C.c_uint64)), C.POINTER(C.c_uint32)),
    "profileGetEventData": C.CFUNCTYPE(E, C.c_uint64, C.POINTER(ProfileEventData)),
    "profileGetExtendedEventData": C.CFUNCTYPE(E, C.c_uint64, C.POINTER(ProfileExtendedEventData)),
    "profileFree": C.CFUNCTYPE(E, P),
    "propertyHasCapability": C.CFUNCTYPE(E, C.c_uint32),
    "errorGetMessage": C.CFUNCTYPE(E, E, C.POINTER(C.c_char_p)),
    "errorGetVerboseMessage": C.CFUNCTYPE(E, E, C.POINTER(C.c_char_p)),
    "errorFreeVerboseMessage": C.CFUNCTYPE(E, C.c_char_p),
}
SYSTEM_PROTOTYPES: dict[str, Any] = {
    "systemContextCreate": C.CFUNCTYPE(E, PP),
    "systemContextGetBinaryInfo": C.CFUNCTYPE(E, P, P, C.c_uint64, PP, C.POINTER(C.c_uint64)),
    "systemContextFree": C.CFUNCTYPE(E, P),
}

# --- libraries -----------------------------------------------------------------------------------

#: what to install when no QNN library is found
INSTALL_HINT = "pip install 'ort-ep-qnn[htp]' (the onnxruntime-qnn wheel's HTP simulator), or set QNN_SDK_ROOT"


class QnnError(RuntimeError):
    """A QNN call failed: ``code`` is QNN's error code, the message QNN's own text."""

    def __init__(self, call: str, code: int, message: str):
        super().__init__(f"{call} failed: QNN error {code} ({message})")
        self.call, self.code, self.qnn_message = call, code, message
        self.log: list[str] = []  # what QNN logged during the call, where it was collected
        self.culprits: list[str] = []  # the QNN ops graphFinalize named as failing


def _dlopen(path: str) -> C.CDLL:
    """Load ``path`` with the process's stdout caught: the HTP library's dependencies print a
    line at load (libnative's TLS notice); it goes to the ``ort_core.qnn`` logger instead.
    (Other threads' stdout in that moment would be caught too; loading happens once.)"""
    import logging
    import sys
    import tempfile

    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 1)
        try:
            dll = C.CDLL(path, mode=C.RTLD_LOCAL)
        finally:
            C.CDLL(None).fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode(errors="replace").strip()
    if text:
        logging.getLogger("ort_core.qnn").debug("%s printed at load: %s", os.path.basename(path), text)
    return dll


class Library:
    """One loaded QNN backend library and its interface table."""

    def __init__(self, path: str):
        self.path = path
        self.dll = _dlopen(path)
        get = self.dll.QnnInterface_getProviders
        get.restype = E
        get.argtypes = [C.POINTER(C.POINTER(C.POINTER(Interface))), C.POINTER(C.c_uint32)]
        providers = C.POINTER(C.POINTER(Interface))()
        count = C.c_uint32()
        code = get(C.byref(providers), C.byref(count))
        if code or count.value == 0:
            raise OSError(f"{path}: QnnInterface_getProviders returned {code} with {count.value} providers")
        # the first provider whose core API major version is ours (2)
        chosen = None
        for k in range(count.value):
            iface = providers[k].contents
            if iface.apiVersion.coreApiVersion.major == 2:
                chosen = iface
                break
        if chosen is None:
            raise OSError(f"{path}: no provider implements QNN core API 2.x")
        self.interface = chosen
        self.provider_name = (chosen.providerName or b"").decode()
        self.core_api = str(chosen.apiVersion.coreApiVersion)
        self.backend_api = str(chosen.apiVersion.backendApiVersion)
        self._fns: dict[str, Any] = {}
        build = C.c_char_p()
        self.build_id = build.value.decode() if not self.fn("backendGetBuildId")(C.byref(build)) and build.value else ""

    def fn(self, name: str) -> Any:
        f = self._fns.get(name)
        if f is None:
            address = getattr(self.interface.table, name)
            if not address:
                raise OSError(f"{self.path}: the QNN interface has no {name}")
            f = self._fns[name] = PROTOTYPES[name](address)
        return f

    def message(self, code: int) -> str:
        text = C.c_char_p()
        if self.fn("errorGetMessage")(code, C.byref(text)) == 0 and text.value:
            return text.value.decode(errors="replace")
        return "no message"

    def call(self, name: str, *args: Any) -> None:
        code = self.fn(name)(*args)
        if code:
            raise QnnError(name, int(code), self.message(int(code)))


class SystemLibrary:
    """libQnnSystem: reads context binaries without a backend."""

    def __init__(self, path: str):
        self.path = path
        self.dll = _dlopen(path)
        get = self.dll.QnnSystemInterface_getProviders
        get.restype = E
        get.argtypes = [C.POINTER(C.POINTER(C.POINTER(SystemInterface))), C.POINTER(C.c_uint32)]
        providers = C.POINTER(C.POINTER(SystemInterface))()
        count = C.c_uint32()
        code = get(C.byref(providers), C.byref(count))
        if code or count.value == 0:
            raise OSError(f"{path}: QnnSystemInterface_getProviders returned {code}")
        self.interface = providers[0].contents
        self.version = str(self.interface.systemApiVersion)
        self._fns = {n: SYSTEM_PROTOTYPES[n](getattr(self.interface.table, n)) for n in SYSTEM_PROTOTYPES}

    def binary_ok(self, data: bytes) -> int:
        """QnnSystemContext_getBinaryInfo's error code for ``data`` (0: a readable binary)."""
        handle = C.c_void_p()
        code = self._fns["systemContextCreate"](C.byref(handle))
        if code:
            return int(code)
        try:
            buf = C.create_string_buffer(data, len(data))
            info = C.c_void_p()
            size = C.c_uint64()
            return int(self._fns["systemContextGetBinaryInfo"](handle, buf, len(data), C.byref(info), C.byref(size)))
        finally:
            self._fns["systemContextFree"](handle)


def wheel_dir() -> str | None:
    """The onnxruntime-qnn wheel's library folder, if that wheel is installed."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("onnxruntime_qnn")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def sdk_dir() -> str | None:
    root = os.environ.get("QNN_SDK_ROOT")
    if not root:
        return None
    found = sorted(glob.glob(os.path.join(root, "lib", "x86_64-linux-*")))
    return found[0] if found else os.path.join(root, "lib")


def find_library(backend_path: str, backend_type: str = "htp") -> str:
    """The backend library to load: ``backend_path``, else QNN_SDK_ROOT's, else the wheel's."""
    name = {"htp": "libQnnHtp.so", "cpu": "libQnnCpu.so", "gpu": "libQnnGpu.so"}[backend_type]
    if backend_path:
        if not os.path.isfile(backend_path):
            raise ImportError(f"backend_path {backend_path!r}: no such file")
        return backend_path
    tried = []
    for folder in (sdk_dir(), wheel_dir()):
        if folder:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path
            tried.append(path)
    where = f" (looked for {', '.join(tried)})" if tried else ""
    raise ImportError(f"the QNN {backend_type.upper()} backend library {name} was not found{where}; {INSTALL_HINT}")


_lock = threading.Lock()
_libraries: dict[str, Library] = {}
_system: dict[str, SystemLibrary] = {}


def load(path: str) -> Library:
    """The process-wide Library for ``path`` (a backend library is loaded once per process)."""
    with _lock:
        lib = _libraries.get(path)
        if lib is None:
            try:
                lib = _libraries[path] = Library(path)
            except (OSError, AttributeError) as exc:
                raise ImportError(f"cannot load the QNN library {path}: {exc}") from exc
        return lib


def load_system(backend_library: str) -> SystemLibrary:
    """libQnnSystem.so from the backend library's folder."""
    path = os.path.join(os.path.dirname(backend_library), "libQnnSystem.so")
    with _lock:
        lib = _system.get(path)
        if lib is None:
            try:
                lib = _system[path] = SystemLibrary(path)
            except (OSError, AttributeError) as exc:
                raise ImportError(f"cannot load {path}: {exc}") from exc
        return lib
