"""CUDA graphs (option ``enable_cuda_graph=1``), with onnxruntime's rules.

Run 1 is a warm-up (CuPy compiles its kernels, cuDNN builds its plans, the arena grows). Run 2 is
captured: the session's stream records every kernel instead of running it, the arena keeps every
block the run frees (the graph will write there again), and at the run's end the graph is
launched once. From run 3 on, the kernels do not run: each returns the arrays it produced in the
captured run, the graph is launched at the run's start, and it recomputes them all.

So the inputs must be the same device buffers on every run (bound with IOBinding as OrtValues on
"cuda"; new data is copied into them), outputs must be bound on the device, and the graph must
be static: every node on CUDA, no control flow, the same input shapes on every run. Each
violation is an error naming it (at the first run, or at the run that changes a buffer or shape).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ort_core import EPFail, GraphView

WARM_UP, CAPTURE, REPLAY = "warm-up", "capture", "replay"


@dataclass
class GraphMode:
    """The session's CUDA graph: where in its life it is, and why it cannot be used."""

    violations: list[str] = field(default_factory=list)
    phase: str = WARM_UP
    runs: int = 0

    def check_graph(self, graph: GraphView, candidates: frozenset[int], declined: dict[int, str]) -> None:
        """Record what in the main graph breaks onnxruntime's CUDA graph rules. Each main-graph
        partition replaces the record (the optimizer's one-node probe graphs come before the
        session's own partition); bodies of control flow need no record: their node is one."""
        if graph.path:
            return
        violations = []
        for node in graph.nodes:
            if node.subgraphs:
                violations.append(f"control flow: node {node.name!r} ({node.op_type})")
            elif node.index not in candidates:
                violations.append(f"node {node.name!r} ({node.op_type}) was taken by an earlier provider")
            elif node.index in declined:
                violations.append(f"node {node.name!r} ({node.op_type}) is not on CUDA: {declined[node.index]}")
        self.violations = violations

    def start_run(self, dev: Any) -> None:
        if self.violations:
            raise EPFail("enable_cuda_graph=1 needs a static graph wholly on CUDA (onnxruntime's rule); here: "
                         + "; ".join(self.violations[:5]) + ("" if len(self.violations) <= 5 else "; ..."))
        self.runs += 1
        if self.runs == 2:
            self.phase = CAPTURE
            dev.begin_capture()
        elif self.runs > 2:
            self.phase = REPLAY
            dev.launch_graph()

    def end_run(self, dev: Any) -> None:
        if self.phase == CAPTURE:
            dev.end_capture()  # raises if the capture broke (e.g. a host copy inside it)
            dev.launch_graph()  # the captured run's results: nothing ran while it was recorded
            self.phase = REPLAY


def _pointer(x: Any) -> int | None:
    data = getattr(x, "data", None)
    ptr = getattr(data, "ptr", None)  # CuPy
    if ptr is None and hasattr(x, "__array_interface__"):  # numpy (the tests' fake device)
        ptr = x.__array_interface__["data"][0]
    return ptr


def graph_kernel(mode: GraphMode, name: str, launch: Callable[[Callable[..., Any], Sequence[Any]], Any],
                 fn: Callable[..., Any], host_inputs: frozenset[int]) -> Callable[..., Any]:
    """A kernel's run under ``mode``: normal in the warm-up, recorded in the capture, and in
    replays the captured outputs (after checking that its inputs are the captured buffers)."""
    captured: list[Any] = []
    pointers: list[int | None] = []
    shapes: list[Any] = []

    def run(*args: Any) -> Any:
        if mode.phase == REPLAY:
            if not captured:
                raise EPFail(f"enable_cuda_graph: node {name!r} did not run in the captured run")
            for k, (a, p) in enumerate(zip(args, pointers)):
                if k not in host_inputs and a is not None and tuple(a.shape) != shapes[k]:
                    raise EPFail(f"enable_cuda_graph: input {k} of node {name!r} has shape {tuple(a.shape)}, the "
                                 f"graph was captured with {shapes[k]}; input shapes cannot change across runs "
                                 "(onnxruntime's rule)")
                if k not in host_inputs and p is not None and _pointer(a) != p:
                    raise EPFail(f"enable_cuda_graph: input {k} of node {name!r} is not the device buffer the graph "
                                 "was captured with; bind the same OrtValues on every run and copy new data into "
                                 "them (IOBinding with OrtValues on 'cuda'), as onnxruntime requires")
            return captured[0]
        out = launch(fn, args)
        if mode.phase == CAPTURE:
            captured[:] = [out]
            pointers[:] = [None if k in host_inputs or a is None else _pointer(a) for k, a in enumerate(args)]
            shapes[:] = [None if a is None else tuple(a.shape) for a in args]
        return out

    return run
