"""Graph passes by optimization level, with onnxruntime's meaning of the levels.

``ORT_DISABLE_ALL`` (0) runs nothing.

``ORT_ENABLE_BASIC`` (1): rewrites within the ONNX standard that any provider can run:
Constant nodes lifted to initializers, Identity, inference-Dropout and Casts to the type their
input has removed, Loop-carried
values the body passes on unchanged (or through no-op steps) read as their initial value, a
Loop body's loop-invariant nodes hoisted before the Loop, unused nodes removed, shape inference then ``Shape``/``Shape->Gather`` folded where shapes are known,
constant folding of nodes whose inputs are all constants (shape-arithmetic ops with the
numpy calls of ``_fold.py``, the rest through ``onnx.reference``),
Transposes moved down past elementwise ops and cancelled in pairs (``TransposePushPass``),
Conv+BatchNormalization, Conv+Mul and Conv+Add or Sub (scalar or per-channel constants) folded
into the Conv's weights and bias, as long as a fold brings another to the Conv, MatMul(rank-2, constant)+Add(bias) turned into Gemm.

``ORT_ENABLE_EXTENDED`` (2): the basic passes, then fusions into onnxruntime's contrib ops
(``com.microsoft``: FusedConv, FusedGemm, Gelu, FastGelu, QuickGelu (x * Sigmoid(alpha * x), swish
with alpha 1), FusedMatMul, BiasGelu, SkipLayerNormalization,
MultiHeadAttention for BERT-style attention, see ``attention_fusion.py``, MatMulIntegerToFloat
for dynamically quantized matmuls), RMSNorm into onnxruntime's SimplifiedLayerNormalization
(ONNX domain, as onnxruntime registers it) and the decomposed
LayerNorm into ``LayerNormalization`` (opset >= 17 models only). Each fusion
is applied only where the session's first provider declares the fused node in
``ProviderSpec.fused_ops`` and claims it (``gate.provider_gate``), since core knows no
provider's kernels: a provider that declares none gets the graph as BASIC leaves it.

``ORT_ENABLE_ALL`` (99): the extended passes, with the decomposed LayerNorm fused below opset
17 too, then hard-swish (x * HardSigmoid(x, 1/6, 1/2), or x * Clip(x + 3, 0, 6) / 6) fused into
HardSwish (``HardSwishFusionPass``). Where the model's opset has no standard op for the fused
node (LayerNormalization before 17, HardSwish before 14), it is the op of ort-core's own
``ort_core`` domain, so a model written at this level may be for this runtime only, as
onnxruntime's are with the layout transformations (NCHWc) it adds here.

Each level includes the ones below it. Passes mutate the onnx-ir model in place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import onnx_ir as ir

from .attention_fusion import AttentionFusionPass
from .basic import (
    MAX_FOLD_BYTES,
    CastEliminationPass,
    ConstantFoldingPass,
    ConvFoldsPass,
    DropoutEliminationPass,
    IdentityEliminationPass,
    LiftConstantsPass,
    LoopInvariantCarriedPass,
    LoopInvariantHoistPass,
    MatMulAddToGemmPass,
    RemoveUnusedNodesPass,
    ShapeFoldingPass,
    ShapeInferenceQuietPass,
    TransposePushPass,
)
from .fusion import (
    CORE_DOMAIN,
    ConvActivationFusionPass,
    FastGeluFusionPass,
    GeluFusionPass,
    GemmActivationFusionPass,
    HardSwishFusionPass,
    MatMulIntegerToFloatFusionPass,
    MatMulScaleFusionPass,
    QuickGeluFusionPass,
    Supports,
)
from .gate import FUSED_OPS, provider_gate
from .norm_fusion import BiasGeluFusionPass, LayerNormFusionPass, SimplifiedLayerNormFusionPass, SkipLayerNormFusionPass

__all__ = ["FUSED_OPS", "MAX_FOLD_BYTES", "ORT_OPTIMIZER_NAMES", "optimize", "passes_for_level", "provider_gate",
           "Supports"]


def _basic(max_fold_bytes: int) -> list[ir.passes.PassBase]:
    return [
        LiftConstantsPass(),
        DropoutEliminationPass(),
        IdentityEliminationPass(),
        CastEliminationPass(),
        LoopInvariantCarriedPass(),
        LoopInvariantHoistPass(),
        RemoveUnusedNodesPass(),
        ShapeInferenceQuietPass(),
        ShapeFoldingPass(),
        ConstantFoldingPass(max_fold_bytes),
        RemoveUnusedNodesPass(),
        TransposePushPass(),
        ConvFoldsPass(),
        MatMulAddToGemmPass(),
        RemoveUnusedNodesPass(),
    ]


def _extended(supports: Supports, core_domain: bool) -> list[ir.passes.PassBase]:
    """The fusions; ``core_domain`` (level ALL): also into ort-core's own ops where the model's
    opset has no standard one."""
    return [
        ConvActivationFusionPass(supports),
        GemmActivationFusionPass(supports),
        GeluFusionPass(supports),
        FastGeluFusionPass(supports),
        QuickGeluFusionPass(supports),
        LayerNormFusionPass(supports, CORE_DOMAIN if core_domain else None),
        SimplifiedLayerNormFusionPass(supports),
        AttentionFusionPass(supports),  # before MatMulScaleFusionPass takes its Q.K^T / scale
        MatMulScaleFusionPass(supports),
        MatMulIntegerToFloatFusionPass(supports),
        BiasGeluFusionPass(supports),  # reads the Gelu GeluFusionPass makes
        # last, as in onnxruntime: patterns that start at a LayerNormalization (attention) go before
        SkipLayerNormFusionPass(supports),
        RemoveUnusedNodesPass(),
    ]


#: onnxruntime's names of its graph transformers (``InferenceSession(...,
#: disabled_optimizers=[...])``) -> the passes here that do that work
ORT_OPTIMIZER_NAMES: dict[str, tuple[type, ...]] = {
    "ConstantFolding": (ConstantFoldingPass,),
    "ConstantSharing": (),
    "EliminateIdentity": (IdentityEliminationPass,),
    "EliminateDropout": (DropoutEliminationPass,),
    "CastElimination": (CastEliminationPass,),
    "TransposeOptimizer": (TransposePushPass,),
    "ConvBNFusion": (ConvFoldsPass,),
    "ConvAddFusion": (ConvFoldsPass,),
    "ConvMulFusion": (ConvFoldsPass,),
    "MatMulAddFusion": (MatMulAddToGemmPass,),
    "ConvActivationFusion": (ConvActivationFusionPass,),
    "GemmActivationFusion": (GemmActivationFusionPass,),
    "GeluFusion": (GeluFusionPass,),
    "FastGeluFusion": (FastGeluFusionPass,),
    "QuickGeluFusion": (QuickGeluFusionPass,),
    "BiasGeluFusion": (BiasGeluFusionPass,),
    "LayerNormFusion": (LayerNormFusionPass,),
    "SimplifiedLayerNormFusion": (SimplifiedLayerNormFusionPass,),
    "SkipLayerNormFusion": (SkipLayerNormFusionPass,),
    "AttentionFusion": (AttentionFusionPass,),
    "MatMulScaleFusion": (MatMulScaleFusionPass,),
    "MatMulIntegerToFloatFusion": (MatMulIntegerToFloatFusionPass,),
    "HardSwishFusion": (HardSwishFusionPass,),
}


def passes_for_level(
    level: int, supports: Supports | None = None, max_fold_bytes: int = MAX_FOLD_BYTES,
    disabled: Collection[str] = (),
) -> list[ir.passes.PassBase]:
    """The passes a level runs, in order. Without ``supports`` no fusion into non-standard ops
    is run (nothing is known to claim them). ``max_fold_bytes``: constant folding leaves nodes
    whose outputs would take more (``session.max_fold_bytes``). ``disabled``: onnxruntime's
    names of transformers not to run (``ORT_OPTIMIZER_NAMES``)."""
    level = int(level)
    if level <= 0:
        return []
    passes = _basic(max_fold_bytes)
    if level >= 2 and supports is not None:
        passes += _extended(supports, core_domain=level >= 99)
    if level >= 99 and supports is not None:
        passes.append(HardSwishFusionPass(supports))
    skipped = tuple(kind for name in disabled for kind in ORT_OPTIMIZER_NAMES.get(name, ()))
    return [p for p in passes if not isinstance(p, skipped)] if skipped else passes


def optimize(
    model: ir.Model,
    level: int,
    supports: Callable[[ir.Node], bool] | None = None,
    max_fold_bytes: int = MAX_FOLD_BYTES,
    disabled: Collection[str] = (),
) -> ir.Model:
    """Run the passes of ``level`` over ``model`` (in place) and return it.

    ``supports(node)`` says whether the session's provider claims a fused node (see
    ``provider_gate``); fusions ask it before rewriting. ``max_fold_bytes`` bounds constant
    folding (see ``ConstantFoldingPass``). ``disabled``: onnxruntime's names of transformers
    not to run (``ORT_OPTIMIZER_NAMES``).
    """
    passes = passes_for_level(level, supports, max_fold_bytes, disabled)
    if passes:
        ir.passes.Sequential(*passes)(model)
    return model
