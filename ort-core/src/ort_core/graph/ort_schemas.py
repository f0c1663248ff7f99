"""Schemas of the contrib ops onnxruntime registers in the ONNX domain itself.

onnxruntime defines SimplifiedLayerNormalization (RMSNorm, which LLM exports emit) in the
default domain, not in com.microsoft, so onnx's checker and shape inference reject a model
holding it ("No Op registered for SimplifiedLayerNormalization") before any provider could take
it. Registering onnxruntime's schema with onnx (once per process; onnx keeps schemas globally)
lets such models load as they do in onnxruntime; the output types follow from the schema's type
constraints.
"""

from __future__ import annotations

import threading

import onnx.defs as defs

_FLOATS = ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"]
_lock = threading.Lock()
_registered = False


def _simplified_layer_normalization() -> defs.OpSchema:
    param, optional = defs.OpSchema.FormalParameter, defs.OpSchema.FormalParameterOption.Optional
    attr, kind = defs.OpSchema.Attribute, defs.OpSchema.AttrType
    return defs.OpSchema(
        "SimplifiedLayerNormalization", "", 1,
        doc="onnxruntime's RMS normalisation: X / sqrt(mean(X^2 over axes axis..) + epsilon) * scale",
        inputs=[param("X", "T"), param("scale", "V")],
        outputs=[param("Y", "V"), param("inv_std_var", "U", param_option=optional)],
        type_constraints=[("T", _FLOATS, "input"), ("V", _FLOATS, "scale and output"),
                          ("U", ["tensor(float)", "tensor(double)"], "1 / RMS")],
        attributes=[attr("axis", kind.INT, "first normalised axis (default -1)", required=False),
                    attr("epsilon", kind.FLOAT, "added to the mean square (default 1e-5)", required=False),
                    attr("stash_type", kind.INT, "precision of the statistics (default 1: float32)", required=False)],
    )


def register() -> None:
    """Register the schemas with onnx, once; a schema onnx already has (a newer onnx, or another
    library that registered it) is left as it is."""
    global _registered
    with _lock:
        if _registered:
            return
        for make in (_simplified_layer_normalization,):
            schema = make()
            if not defs.has(schema.name, schema.domain):
                defs.register_schema(schema)
        _registered = True
