"""If: both branches are placed and planned by core with their inputs and outputs in WebGPU
memory, so a branch's nodes run on the GPU without copies; only the condition is read on the
host (one readback when it is computed on the device)."""

from __future__ import annotations

import numpy as np

from ort_core import Kernel, KernelRequest, NodeView

from .registry import SessionRuntime, op


@op("If")
def _if(node: NodeView, request: KernelRequest, rt: SessionRuntime) -> Kernel:
    then_body = request.build_subgraph("then_branch")
    else_body = request.build_subgraph("else_branch")
    n_decl = len(node.inputs)
    n_out = len(node.outputs)
    implicit = node.implicit_inputs

    def run_if(cond, *outer_values):
        outer = dict(zip(implicit, outer_values[n_decl - 1 :]))
        body = then_body if bool(np.asarray(cond).reshape(-1)[0]) else else_body
        outputs = body([], {name: outer[name] for name in body.outer_names})
        if len(outputs) != n_out:
            raise ValueError(f"If {node.name!r}: branch returned {len(outputs)} outputs, node has {n_out}")
        return outputs

    if n_out == 1:
        return Kernel(run=lambda *args: run_if(*args)[0], single_output=True, host_inputs=frozenset({0}))
    return Kernel(run=run_if, host_inputs=frozenset({0}))
