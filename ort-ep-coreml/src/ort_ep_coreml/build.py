"""Building Core ML packages, in a session (macOS) and without one (any OS: the cross-build).

``build_group`` is what the provider's ``ort_create_kernel`` does for a claimed group: lower,
convert, save (or take the package from ``ModelCacheDirectory``). ``build_model`` does the same
for every group the provider would claim in a model, on any OS, and writes:

* ``<out>/<stem>_ctx.onnx``: the model with each group replaced by one ``com.microsoft``
  EPContext node (onnxruntime's schema, ``source`` = CoreMLExecutionProvider, ``embed_mode=0``),
  which a session on macOS loads without building anything;
* ``<out>/<stem>_ctx_CoreMLExecutionProvider_<k>.bin``: each group's package, zipped (the blob);
* ``<out>/<stem>_coreml/<k>/model.mlpackage``: the same packages unpacked, for Xcode.

``ort-core coreml-build MODEL OUT [--dim batch=1] [--option KEY=VALUE]`` runs ``build_model``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from ort_core import GraphView

from . import PROVIDER_NAME, _ct
from .capability import claim_groups
from .lowering import lower
from .options import BuildSettings, complete, resolve
from .package import Built, cache_key, cached, save, to_blob
from .version import __version__

EPCONTEXT_DOMAIN = "com.microsoft"


def build_group(graph: GraphView, indices: Sequence[int], settings: BuildSettings, work_dir: str | Path) -> Built:
    """The group's package: from the cache when ``settings.cache_dir`` has it, else built there
    (or under ``work_dir`` without a cache). Raises ``lowering.Decline`` or coremltools' error."""
    inputs, outputs = graph.group_io(indices)
    group_bytes = graph.group_to_model(sorted(indices)).SerializeToString(deterministic=True)
    key = cache_key(group_bytes, settings)
    if settings.cache_dir:
        hit = cached(settings.cache_dir, key)
        if hit is not None:
            return hit
    lowered = lower(graph, indices, inputs, outputs, dict(settings.dims))
    described = []
    for name in outputs:
        value = graph.value(name)
        if value.dtype is None:
            raise ValueError(f"output {name!r} has no known dtype")
        described.append({"name": name, "dtype": value.dtype.name, "rank": None if value.shape is None else len(value.shape)})
    root = Path(settings.cache_dir or work_dir)
    root.mkdir(parents=True, exist_ok=True)
    return save(lowered, settings, described, root / key)


@dataclass
class BuildReport:
    """What ``build_model`` wrote and what it left to other providers."""

    context_model: Path
    packages: list[Path]
    groups: list[tuple[int, ...]]
    declined: dict[str, str] = field(default_factory=dict)  # node name -> reason

    def summary(self) -> str:
        claimed = sum(len(g) for g in self.groups)
        lines = [f"{claimed} of {claimed + len(self.declined)} nodes in {len(self.groups)} Core ML package(s); "
                 f"context model {self.context_model}"]
        lines += [f"  package {p}" for p in self.packages]
        lines += [f"  declined {name}: {why}" for name, why in self.declined.items()]
        return "\n".join(lines)


def _fix_dims(model: onnx.ModelProto, dims: Mapping[str, int]) -> onnx.ModelProto:
    """The model with its inputs' named dims set to the given values, shapes inferred again."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in dims:
                dim.dim_value = int(dims[dim.dim_param])
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    ready = set(available)
    pending = list(nodes)
    ordered: list[onnx.NodeProto] = []
    while pending:
        for k, node in enumerate(pending):
            if all(not n or n in ready for n in node.input):
                ordered.append(pending.pop(k))
                ready.update(node.output)
                break
        else:
            raise ValueError("the context model would have a cycle")
    return ordered


def build_model(model: str | Path | onnx.ModelProto, out_dir: str | Path, options: Mapping[str, Any] | None = None,
                dims: Mapping[str, int] | None = None) -> BuildReport:
    """Build the Core ML packages of every group the provider claims in ``model`` (any OS).

    ``options`` are the provider's (``complete`` checks them), ``dims`` fix named input dims
    (onnxruntime's free-dimension overrides); dims left free become ranged shapes.
    """
    import onnx_ir as ir

    _ct.load()
    source = Path(model) if isinstance(model, (str, Path)) else None
    proto = onnx.load(str(source)) if source is not None else model
    stem = source.stem if source is not None else (proto.graph.name or "model")
    settings = resolve(complete(options), dims)
    proto = _fix_dims(proto, dict(dims or {}))
    opsets = {o.domain: o.version for o in proto.opset_import}
    graph = GraphView(ir.from_proto(proto).graph, opset_imports=opsets, ir_version=proto.ir_version)
    found, declined = claim_groups(graph, range(len(graph.nodes)), settings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    unpacked = out / f"{stem}_coreml"
    shutil.rmtree(unpacked, ignore_errors=True)
    ctx_name = f"{stem}_ctx"
    replaced: dict[int, onnx.NodeProto] = {}
    packages = []
    sdk = f"coremltools {_ct.load().__version__}"
    with tempfile.TemporaryDirectory() as work:
        for k, group in enumerate(found):
            built = build_group(graph, group, settings, work)
            blob_name = f"{ctx_name}_{PROVIDER_NAME}_{k}.bin"
            (out / blob_name).write_bytes(to_blob(built))
            shutil.copytree(built.directory, unpacked / str(k))
            packages.append(unpacked / str(k) / "model.mlpackage")
            inputs, outputs = graph.group_io(group)
            replaced[group[0]] = helper.make_node(
                "EPContext", list(inputs), list(outputs), name=f"{PROVIDER_NAME}_{k}", domain=EPCONTEXT_DOMAIN,
                main_context=1, ep_cache_context=blob_name, embed_mode=0, source=PROVIDER_NAME,
                partition_name=f"{stem}_{k}", ep_sdk_version=sdk, hardware_architecture="",
                notes=json.dumps({"ort_ep_coreml": __version__, "nodes": [graph.nodes[i].name for i in group]}),
            )
    in_group = {i for g in found for i in g}
    nodes = []
    for i, node in enumerate(proto.graph.node):
        if i in replaced:
            nodes.append(replaced[i])
        elif i not in in_group:
            nodes.append(node)
    graph_proto = proto.graph
    available = {v.name for v in graph_proto.input} | {t.name for t in graph_proto.initializer}
    ordered = _topological(nodes, available)
    used = {n for node in ordered for n in node.input} | {o.name for o in graph_proto.output}
    del graph_proto.node[:]
    graph_proto.node.extend(ordered)
    kept = [t for t in graph_proto.initializer if t.name in used]
    del graph_proto.initializer[:]
    graph_proto.initializer.extend(kept)
    if not any(o.domain == EPCONTEXT_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(EPCONTEXT_DOMAIN, 1))
    context_model = out / f"{ctx_name}.onnx"
    onnx.save(proto, str(context_model))
    names = {i: graph.nodes[i].name or f"{graph.nodes[i].op_type}_{i}" for i in declined}
    return BuildReport(context_model, packages, found, {names[i]: why for i, why in declined.items()})


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} takes KEY=VALUE, got {item!r}")
        result[key] = value
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``ort-core coreml-build``: build and save a model's Core ML packages (any OS)."""
    parser = argparse.ArgumentParser(prog="ort-core coreml-build", description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("out_dir")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="fix a named input dim")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a provider option")
    args = parser.parse_args(argv)
    try:
        dims = {k: int(v) for k, v in _pairs(args.dim, "--dim").items()}
        report = build_model(args.model, args.out_dir, _pairs(args.option, "--option"), dims)
    except (ValueError, ImportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0

