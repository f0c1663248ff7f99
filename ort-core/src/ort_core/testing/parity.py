"""The parity matrix: every installed provider x every optimization level x a zoo of models,
each compared with onnxruntime's CPU provider.

The zoo (``ZOO``) exercises every rewrite the optimizer can make: an MLP; a CNN with
BatchNormalization and residual adds; a BERT encoder with a padding mask and a Tanh pooler; a
GPT-style decoder with a causal mask; LayerNorm and GELU (erf and tanh) in their decomposed
forms, at opset 17 and 13; attention with and without bias; a model with one of each
convolution rewrite (folds, FusedConv activations, both hard-swish spellings, FusedGemm,
FusedMatMul); QDQ-quantized CNNs with uint8 and uint16 activations
(``onnxruntime.quantization.quantize_static``); LSTM, GRU; If and Loop.

Each provider ``P`` of ``ort_core.get_available_providers()`` runs as
``providers=[P, "CPUExecutionProvider"]`` (the CPU provider alone for itself), so a provider
joins the matrix by being installed. The reference is onnxruntime's CPU provider with its
optimizations off (the model's own semantics). Tolerances, per output, on the largest
absolute difference:

* float models: ``1e-4 * max|reference| + 1e-5``;
* QDQ models: 3 steps of the output's quantization scale (the scale of the DequantizeLinear
  that produces it): rounding one tie the other way inside moves an output by a step.

Shapes and dtypes must be equal. A failure names the model, provider, level, output and the
error (or the exception). ``python -m ort_core.testing.parity [--json PATH]`` prints the
matrix as a table and exits 1 if any cell failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

from . import models

CPU = "CPUExecutionProvider"
LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
#: float models: max |a - e| <= RTOL * max |e| + ATOL
RTOL, ATOL = 1e-4, 1e-5
#: QDQ models: max |a - e| <= QDQ_STEPS * the output's quantization scale
QDQ_STEPS = 3


def _cnn_small(opset: int = models.OPSET) -> onnx.ModelProto:
    return models.cnn(image=16, width=8, blocks=2, opset=opset)


def _quiet_qdq(activation: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # quantize_static's advice on pre-processing, per weight
        try:
            return models.qdq(_cnn_small(opset=21), activation)
        finally:
            root.setLevel(level)

    return build


#: model name -> builder
ZOO: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": lambda: models.mlp(in_features=32, hidden=64, layers=2),
    "cnn": _cnn_small,
    "bert": lambda: models.transformer(seq=16, dim=64, heads=2, layers=2, pooler=True),
    "gpt": models.gpt,
    "norms": models.norms,
    "norms_opset13": lambda: models.norms(opset=13),
    "attention_bias": lambda: models.transformer(seq=16, dim=32, heads=2, layers=1),
    "attention_nobias": lambda: models.transformer(seq=16, dim=32, heads=2, layers=1, bias=False),
    "rewrites": models.rewrites,
    "qdq_uint8": _quiet_qdq("uint8"),
    "qdq_uint16": _quiet_qdq("uint16"),
    "lstm": lambda: models.recurrent("LSTM"),
    "gru": lambda: models.recurrent("GRU"),
    "control_flow": models.control_flow,
}


@dataclass
class Cell:
    """One model x provider x level."""

    model: str
    provider: str
    level: str
    passed: bool
    worst_error: float | None = None  # the largest max-abs error over the outputs
    worst_output: str = ""
    tolerance: float | None = None  # the bound of that output
    on_provider: str = ""  # "nodes on the provider / all nodes", from the placement
    message: str = ""  # why it failed


@dataclass
class Matrix:
    cells: list[Cell] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Cell]:
        return [c for c in self.cells if not c.passed]

    def table(self) -> str:
        """Rows model x provider, columns the levels; a cell is ``ok`` or ``FAIL`` with the
        worst error and the share of nodes on the provider."""
        head = ["model", "provider", *(lv.replace("ORT_", "").replace("ENABLE_", "") for lv in LEVELS)]
        rows = []
        by_key = {(c.model, c.provider, c.level): c for c in self.cells}
        for model in dict.fromkeys(c.model for c in self.cells):
            for provider in dict.fromkeys(c.provider for c in self.cells):
                line = [model, provider.replace("ExecutionProvider", "")]
                for level in LEVELS:
                    c = by_key.get((model, provider, level))
                    if c is None:
                        line.append("-")
                        continue
                    err = "error" if c.worst_error is None else f"{c.worst_error:.1e}"
                    line.append(f"{'ok' if c.passed else 'FAIL'} {err} [{c.on_provider}]")
                rows.append(line)
        widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
        fmt = "  ".join(f"{{:{w}}}" for w in widths)
        lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
        lines += [fmt.format(*r) for r in rows]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"levels": list(LEVELS), "rtol": RTOL, "atol": ATOL, "qdq_steps": QDQ_STEPS,
                "seconds": round(self.seconds, 1), "cells": [asdict(c) for c in self.cells]}


def output_bounds(model: onnx.ModelProto, expected: Sequence[np.ndarray]) -> list[float]:
    """The allowed max-abs error per output (see the module docstring)."""
    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    bounds = []
    for info, e in zip(model.graph.output, expected):
        node = producers.get(info.name)
        if node is not None and node.op_type == "DequantizeLinear" and node.input[1] in inits:
            scale = float(np.max(onnx.numpy_helper.to_array(inits[node.input[1]])))
            bounds.append(QDQ_STEPS * scale)
        else:
            scale = float(np.max(np.abs(e))) if e.size else 0.0
            bounds.append(RTOL * scale + ATOL)
    return bounds


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    from . import exact_reference  # exact where this CPU's onnxruntime saturates uint8 x int8

    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return exact_reference.session(model, so).run(None, feeds)


def compare(actual: Sequence[Any], expected: Sequence[np.ndarray], names: Sequence[str],
            bounds: Sequence[float]) -> tuple[bool, float, str, float, str]:
    """(passed, worst error, its output, its bound, message) over the outputs."""
    worst, worst_name, worst_bound, message, passed = -1.0, "", 0.0, "", True
    for a, e, name, bound in zip(actual, expected, names, bounds):
        a = np.asarray(a)
        if a.shape != e.shape or a.dtype != e.dtype:
            return False, float("inf"), name, bound, f"output {name!r}: {a.dtype}{list(a.shape)}, onnxruntime gives {e.dtype}{list(e.shape)}"
        err = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64)))) if e.size else 0.0
        if np.isnan(err):
            err = float("inf")
        if err / max(bound, 1e-30) > worst / max(worst_bound, 1e-30):
            worst, worst_name, worst_bound = err, name, bound
        if err > bound and passed:
            passed = False
            message = f"output {name!r}: max abs error {err:.3g} > tolerance {bound:.3g}"
    return passed, worst, worst_name, worst_bound, message


def run_matrix(providers: Sequence[str] | None = None, model_names: Sequence[str] | None = None,
               levels: Sequence[str] = LEVELS, batch: int = 2, log: Callable[[str], None] | None = None) -> Matrix:
    """Run the matrix (``providers``: default every available one; ``model_names``: the zoo)."""
    import ort_core as ort

    start = time.perf_counter()
    available = ort.get_available_providers()
    providers = list(providers or available)
    matrix = Matrix()
    for name in model_names or ZOO:
        model = ZOO[name]()
        data = model.SerializeToString()
        feeds = models.random_inputs(model, batch=batch, seed=1)
        expected = reference(model, feeds)
        names = [o.name for o in model.graph.output]
        bounds = output_bounds(model, expected)
        for provider in providers:
            chain = [provider] if provider == CPU or CPU not in available else [provider, CPU]
            for level in levels:
                so = ort.SessionOptions()
                so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
                cell = Cell(name, provider, level, False)
                try:
                    sess = ort.InferenceSession(data, so, providers=chain)
                    nodes = sess.get_placement().nodes
                    cell.on_provider = f"{sum(p.provider == provider for p in nodes)}/{len(nodes)}"
                    actual = sess.run(None, feeds)
                except Exception as exc:  # reported as the cell's failure, naming the error
                    cell.message = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                else:
                    cell.passed, cell.worst_error, cell.worst_output, cell.tolerance, cell.message = compare(
                        actual, expected, names, bounds)
                matrix.cells.append(cell)
                if log is not None and not cell.passed:
                    log(f"FAIL {name} on {provider} at {level}: {cell.message}")
    matrix.seconds = time.perf_counter() - start
    return matrix


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ort_core.testing.parity", description=__doc__.splitlines()[0])
    parser.add_argument("--providers", help="comma-separated (default: every available provider)")
    parser.add_argument("--models", help=f"comma-separated among {', '.join(ZOO)} (default: all)")
    parser.add_argument("--json", help="write the matrix as JSON to this path")
    args = parser.parse_args(argv)
    model_names = args.models.split(",") if args.models else None
    unknown = [m for m in model_names or () if m not in ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(ZOO)}")
    matrix = run_matrix(args.providers.split(",") if args.providers else None, model_names,
                        log=lambda line: print(line, flush=True))
    print(matrix.table())
    failures = matrix.failures
    print(f"\n{len(matrix.cells) - len(failures)}/{len(matrix.cells)} cells pass "
          f"({matrix.seconds:.0f} s); float tolerance {RTOL} x max|ref| + {ATOL}, QDQ {QDQ_STEPS} output steps")
    for c in failures:
        print(f"FAIL {c.model} / {c.provider} / {c.level}: {c.message}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(matrix.to_json(), f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
