"""The struct layouts of ``ort_ep_qnn._qnn`` next to the QNN headers' (sizes and offsets).

``python tests/qnn_layout.py HEADER_DIR [OUT.json]`` compiles a small C program against the
QNN headers in HEADER_DIR (the folder holding QnnTypes.h) that prints each struct's size and
field offsets as JSON; ``tests/test_layout.py`` compares ctypes' layout with that output, or
with the fixture ``tests/data/qnn_layout.json`` made by it when no headers are present.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from ort_ep_qnn import _qnn as Q

# ctypes class -> (C type, fields to check)
STRUCTS = {
    "Version": ("Qnn_Version_t", ["major", "minor", "patch"]),
    "ApiVersion": ("Qnn_ApiVersion_t", ["coreApiVersion", "backendApiVersion"]),
    "Scalar": ("Qnn_Scalar_t", ["dataType", "floatValue", "doubleValue", "uint32Value", "stringValue"]),
    "ScaleOffset": ("Qnn_ScaleOffset_t", ["scale", "offset"]),
    "AxisScaleOffset": ("Qnn_AxisScaleOffset_t", ["axis", "numScaleOffsets", "scaleOffset"]),
    "QuantizeParams": ("Qnn_QuantizeParams_t", ["encodingDefinition", "quantizationEncoding",
                                                "scaleOffsetEncoding", "axisScaleOffsetEncoding"]),
    "ClientBuffer": ("Qnn_ClientBuffer_t", ["data", "dataSize"]),
    "TensorV1": ("Qnn_TensorV1_t", ["id", "name", "type", "dataFormat", "dataType", "quantizeParams",
                                    "rank", "dimensions", "memType", "clientBuf", "memHandle"]),
    "TensorV2": ("Qnn_TensorV2_t", ["id", "name", "type", "dataFormat", "dataType", "quantizeParams",
                                    "rank", "dimensions", "memType", "clientBuf", "isDynamicDimensions",
                                    "sparseParams", "isProduced"]),
    "Tensor": ("Qnn_Tensor_t", ["version", "v1", "v2"]),
    "Param": ("Qnn_Param_t", ["paramType", "name", "scalarParam", "tensorParam"]),
    "OpConfigV1": ("Qnn_OpConfigV1_t", ["name", "packageName", "typeName", "numOfParams", "params",
                                        "numOfInputs", "inputTensors", "numOfOutputs", "outputTensors"]),
    "OpConfig": ("Qnn_OpConfig_t", ["version", "v1"]),
    "GraphConfig": ("QnnGraph_Config_t", ["option", "customConfig", "priority"]),
    "ContextConfig": ("QnnContext_Config_t", ["option", "priority"]),
    "HtpGraphCustomConfig": ("QnnHtpGraph_CustomConfig_t", ["option", "optimizationOption", "precision"]),
    "Interface": ("QnnInterface_t", ["backendId", "providerName", "apiVersion"]),
    "ProfileEventData": ("QnnProfile_EventData_t", ["type", "unit", "value", "identifier"]),
    "ProfileExtendedEventDataV1": ("QnnProfile_ExtendedEventDataV1_t", ["type", "unit", "value", "backendOpaqueObject",
                                                                        "timestamp", "identifier"]),
    "ProfileExtendedEventData": ("QnnProfile_ExtendedEventData_t", ["version", "v1"]),
    "SystemInterface": ("QnnSystemInterface_t", ["backendId", "providerName", "systemApiVersion"]),
}


def c_source() -> str:
    lines = [
        "#include <stdio.h>", "#include <stddef.h>", "#include <stdbool.h>", '#include "QnnInterface.h"', '#include "QnnGraph.h"',
        '#include "QnnContext.h"', '#include "QnnProfile.h"', '#include "HTP/QnnHtpGraph.h"', '#include "System/QnnSystemInterface.h"',
        '#include "QnnSdkBuildId.h"',
        "int main(void) {", '  printf("{\\"sdk_build_id\\": \\"%s\\",\\n", QNN_SDK_BUILD_ID);',
    ]
    for cls, (ctype, fields) in STRUCTS.items():
        body = ", ".join(f'\\"{f}\\": %zu' for f in fields)
        args = ", ".join(f"offsetof({ctype}, {f})" for f in fields)
        lines.append(f'  printf("\\"{cls}\\": {{\\"size\\": %zu, \\"fields\\": {{{body}}}}},\\n", sizeof({ctype}), {args});')
    # the interface table: the offset of each function the bindings name, in the header's order
    table = [f for f in Q.INTERFACE_FUNCTIONS]
    body = ", ".join(f'\\"{f}\\": %zu' for f in table)
    args = ", ".join(f"offsetof(QNN_INTERFACE_VER_TYPE, {f})" for f in table)
    lines.append(f'  printf("\\"InterfaceTable\\": {{\\"size\\": %zu, \\"fields\\": {{{body}}}}},\\n", sizeof(QNN_INTERFACE_VER_TYPE), {args});')
    sys_body = ", ".join(f'\\"{f}\\": %zu' for f in Q.SYSTEM_FUNCTIONS)
    sys_args = ", ".join(f"offsetof(QNN_SYSTEM_INTERFACE_VER_TYPE, {f})" for f in Q.SYSTEM_FUNCTIONS)
    lines.append(f'  printf("\\"SystemTable\\": {{\\"fields\\": {{{sys_body}}}}}}}\\n", {sys_args});')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def from_headers(header_dir: str, cc: str = "cc") -> dict:
    """Compile and run the layout program against ``header_dir``; its JSON as a dict."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "layout.c")
        exe = os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write(c_source())
        subprocess.run([cc, "-std=c11", "-I", header_dir, src, "-o", exe], check=True, capture_output=True, text=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def from_ctypes() -> dict:
    result = {}
    for cls, (_, fields) in STRUCTS.items():
        t = getattr(Q, cls)
        result[cls] = {"size": C_sizeof(t), "fields": {f: getattr(t, f).offset for f in fields}}
    result["InterfaceTable"] = {
        "size": C_sizeof(Q.InterfaceTable),
        "fields": {f: getattr(Q.InterfaceTable, f).offset for f in Q.INTERFACE_FUNCTIONS},
    }
    result["SystemTable"] = {"fields": {f: getattr(Q.SystemTable, f).offset for f in Q.SYSTEM_FUNCTIONS}}
    return result


def C_sizeof(t: type) -> int:
    import ctypes

    return ctypes.sizeof(t)


if __name__ == "__main__":
    layout = from_headers(sys.argv[1])
    text = json.dumps(layout, indent=1, sort_keys=True) + "\n"
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    else:
        print(text)
