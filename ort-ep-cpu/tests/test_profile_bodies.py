"""enable_profiling records the nodes of control-flow bodies, as onnxruntime's profile does
(a model with its network inside an If, as Silero VAD, showed one node before)."""

from __future__ import annotations

import json

import numpy as np

import ort_core as ort
from ort_core.testing import models


def test_the_profile_has_the_nodes_of_if_and_loop_bodies(tmp_path):
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "prof_")
    steps = 3
    session = ort.InferenceSession(models.control_flow(steps=steps), options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((2, 8), np.float32)})
    events = [e for e in json.load(open(session.end_profiling())) if e["cat"] == "Node"]
    top = [e for e in events if "graph" not in e["args"]]
    nested = [e for e in events if "graph" in e["args"]]
    assert {"loop_kernel_time", "branches_kernel_time"} <= {e["name"] for e in top}
    # each If runs one branch; the Loop body's Tanh runs once per iteration, inside the Loop's event
    assert {e["args"]["graph"].split("/")[-1] for e in nested} >= {"then_branch", "else_branch", "body"}
    tanh = [e for e in nested if e["args"]["op_name"] == "Tanh"]
    assert len(tanh) == steps and all(e["args"]["graph"].endswith("body") for e in tanh)
    loop = next(e for e in top if e["name"] == "loop_kernel_time")
    assert all(loop["ts"] <= e["ts"] and e["ts"] + e["dur"] <= loop["ts"] + loop["dur"] + 1 for e in tanh)
    assert all(e["args"]["provider"] == "CPUExecutionProvider" for e in nested)


def test_runs_without_profiling_record_no_body_nodes():
    session = ort.InferenceSession(models.control_flow(), providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((2, 8), np.float32)})
    assert session.end_profiling() == ""
