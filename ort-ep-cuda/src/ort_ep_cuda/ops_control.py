"""If: core places and plans both branches with the session's providers, so a branch's nodes
run on CUDA with their values in CUDA memory; only the condition is read on the host."""

from __future__ import annotations

import numpy as np

from ort_core import KernelRequest, NodeView

from .registry import ANY, Body, Runtime, op


@op("If", dtypes=ANY, host_inputs=frozenset({0}))
def _if(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    then_body = request.build_subgraph("then_branch")
    else_body = request.build_subgraph("else_branch")
    n_out = len(node.outputs)
    implicit = node.implicit_inputs
    order = {id(b): [implicit.index(n) for n in b.outer_names] for b in (then_body, else_body)}

    def run(cond, *outer_values):
        body = then_body if bool(np.asarray(cond).reshape(-1)[0]) else else_body
        outputs = body.run_values([outer_values[k] for k in order[id(body)]])
        if len(outputs) != n_out:
            raise ValueError(f"If {node.name!r}: the branch returned {len(outputs)} outputs, the node has {n_out}")
        return outputs if n_out > 1 else outputs[0]

    # the branches' kernels launch themselves on the device: this one only chooses
    return Body(run, host_inputs=frozenset({0}), n_outputs=n_out, launch=False)
