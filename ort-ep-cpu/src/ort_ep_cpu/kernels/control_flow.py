"""Control flow: If, Loop, Scan.

Bodies are placed, partitioned and planned by core (``KernelRequest.build_subgraph``), so their
nodes may run on any provider and appear in the placement report with their graph path. The
kernel receives the node's declared inputs followed by its implicit (outer-scope) inputs, in
``node.implicit_inputs`` order, and hands the outer values to each body by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core import Kernel

from ..registry import kernel
from .reduce import _sum


def _truth(value: Any) -> bool:
    """A condition tensor (shape () or (1,)) as a Python bool."""
    if type(value) is np.ndarray and value.size == 1:
        return bool(value)  # no asarray/reshape/index: the common case, every If runs it
    return bool(np.asarray(value).reshape(-1)[0])


def _outer(node, values: tuple) -> dict[str, Any]:
    return dict(zip(node.implicit_inputs, values))


@kernel("If")
def _if(node, request):
    then_body = request.build_subgraph("then_branch")
    else_body = request.build_subgraph("else_branch")
    n_decl = len(node.inputs)
    n_out = len(node.outputs)
    # each branch's outer values as positions in this kernel's arguments, ordered once here
    position = {name: n_decl + k for k, name in enumerate(node.implicit_inputs)}
    then_at = [position[n] for n in then_body.outer_names]
    else_at = [position[n] for n in else_body.outer_names]

    def run_if(*args):
        if _truth(args[0]):
            outputs = then_body.run_values([args[k] for k in then_at])
        else:
            outputs = else_body.run_values([args[k] for k in else_at])
        if len(outputs) != n_out:
            raise ValueError(f"If {node.name!r}: branch returned {len(outputs)} outputs, node has {n_out}")
        return outputs

    if n_out == 1:
        return Kernel(run=lambda *args: run_if(*args)[0], single_output=True)
    return Kernel(run=run_if)


def _stack(slices: list[np.ndarray], axis: int, empty_dtype: np.dtype | None, empty_tail: tuple) -> np.ndarray:
    if slices:
        return np.stack(slices, axis=axis)
    # zero iterations: an empty stack of the body output's type (rank from its static shape)
    return np.zeros((0, *empty_tail), dtype=empty_dtype or np.float32)


def _static_tail(view) -> tuple:
    shape = view.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return ()
    return tuple(shape)


@kernel("Loop")
def _loop(node, request):
    body = request.build_subgraph("body")
    graph = node.subgraphs["body"]
    n_decl = len(node.inputs)
    n_carried = n_decl - 2
    n_scan = len(graph.outputs) - 1 - n_carried
    if n_scan < 0:
        raise ValueError(
            f"Loop {node.name!r}: body has {len(graph.outputs)} outputs, needs at least {1 + n_carried}"
        )
    scan_views = [graph.value(name) for name in graph.outputs[1 + n_carried:]]
    scan_dtypes = [v.dtype for v in scan_views]
    scan_tails = [_static_tail(v) for v in scan_views]

    def run_loop(*args):
        max_trip, cond = args[0], args[1]
        carried = list(args[2:n_decl])
        outer = _outer(node, args[n_decl:])
        limit = None if max_trip is None else int(np.asarray(max_trip).reshape(-1)[0])
        keep_going = True if cond is None else _truth(cond)
        cond_value = np.array(keep_going)
        scans: list[list[np.ndarray]] = [[] for _ in range(n_scan)]
        i = 0
        while keep_going and (limit is None or i < limit):
            outputs = body([np.array(i, dtype=np.int64), cond_value, *carried], outer)
            cond_value = outputs[0]
            carried = list(outputs[1:1 + n_carried])
            for k in range(n_scan):
                scans[k].append(np.asarray(outputs[1 + n_carried + k]))
            keep_going = _truth(cond_value)
            i += 1
        stacked = [_stack(s, 0, scan_dtypes[k], scan_tails[k]) for k, s in enumerate(scans)]
        return [*carried, *stacked]

    if len(node.outputs) == 1:
        return Kernel(run=lambda *args: run_loop(*args)[0], single_output=True)
    return Kernel(run=run_loop)


#: the squared distances of the fast form are computed this many elements of (X - y) at a time
CDIST_CHUNK = 1 << 18


def _squared_distances_body(node, graph) -> bool:
    """Whether a Scan is skl2onnx's squared Euclidean distances (``onnx_cdist``, its
    nearest-neighbour, LOF, Gaussian-process and kernel-PCA models): one state X passed on
    unchanged, one scan input Y along axis 0, each step's output ReduceSumSquare(X - y_t,
    axes=[1], keepdims=0), stacked along axis 0."""
    if len(node.inputs) != 2 or int(node.attr("num_scan_inputs", 0)) != 1 or len(graph.outputs) != 2:
        return False
    if any(list(node.attr(a) or [0]) != [0] for a in ("scan_input_axes", "scan_input_directions",
                                                      "scan_output_axes", "scan_output_directions")):
        return False
    state, step = graph.inputs
    made = {}
    for n in graph.nodes:
        if n.domain or len(n.outputs) != 1:
            return False
        made[n.outputs[0]] = n
    passed, scanned = (made.get(name) for name in graph.outputs)
    if passed is None or passed.op_type != "Identity" or passed.inputs != (state,):
        return False
    if scanned is not None and scanned.op_type == "Identity":
        scanned = made.get(scanned.inputs[0])
    if scanned is None or scanned.op_type != "ReduceSumSquare" or int(scanned.attr("keepdims", 1)) != 0:
        return False
    axes = scanned.attr("axes")
    if len(scanned.inputs) > 1 and scanned.inputs[1]:
        axes = graph.value(scanned.inputs[1]).const_value
    if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] not in ([1], [-1]):
        return False
    difference = made.get(scanned.inputs[0])
    return (difference is not None and difference.op_type == "Sub" and difference.inputs == (state, step)
            and len(graph.nodes) == 3 + (made.get(graph.outputs[1]) is not scanned))


@kernel("Scan", since=9)
def _scan(node, request):
    body = request.build_subgraph("body")
    graph = node.subgraphs["body"]
    squared_distances = _squared_distances_body(node, graph)
    n_decl = len(node.inputs)
    n_scan_in = int(node.attr("num_scan_inputs"))
    n_state = n_decl - n_scan_in
    n_scan_out = len(graph.outputs) - n_state
    in_axes = list(node.attr("scan_input_axes") or [0] * n_scan_in)
    in_dirs = list(node.attr("scan_input_directions") or [0] * n_scan_in)
    out_axes = list(node.attr("scan_output_axes") or [0] * n_scan_out)
    out_dirs = list(node.attr("scan_output_directions") or [0] * n_scan_out)
    scan_views = [graph.value(name) for name in graph.outputs[n_state:]]

    def run_distances(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        # every step at once, in chunks of Y's rows: the same float32 differences, squares and
        # row sums as the steps' Sub and ReduceSumSquare (one Python step per row of Y cost
        # 8.5 us: a 150-sample nearest-neighbour model took 1.3 ms, onnxruntime 0.22)
        out = np.empty((y.shape[0], x.shape[0]), dtype=x.dtype)
        rows = max(1, CDIST_CHUNK // max(1, x.size))
        for start in range(0, y.shape[0], rows):
            d = np.subtract(x[None], y[start:start + rows, None])
            np.square(d, out=d)
            out[start:start + rows] = _sum(d, (2,), False)
        return [x, out]

    def run_scan(*args):
        if squared_distances:
            x, y = args[0], args[1]
            if (type(x) is np.ndarray and type(y) is np.ndarray and x.ndim == 2 and y.ndim == 2
                    and x.shape[1] == y.shape[1] and x.dtype == y.dtype and x.dtype in (np.float32, np.float64)):
                return run_distances(x, y)
        states = list(args[:n_state])
        scan_inputs = [np.asarray(x) for x in args[n_state:n_decl]]
        outer = _outer(node, args[n_decl:])
        axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, scan_inputs)]
        length = scan_inputs[0].shape[axes[0]] if scan_inputs else 0
        for x, a in zip(scan_inputs, axes):
            if x.shape[a] != length:
                raise ValueError(f"Scan {node.name!r}: scan inputs differ in length along their scan axes")
        slices: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
        for t in range(length):
            # each step's slice copied alone (np.take copied a strided input whole every step)
            step = [
                x[(slice(None),) * a + (length - 1 - t if d else t,)].copy()
                for x, a, d in zip(scan_inputs, axes, in_dirs)
            ]
            outputs = body([*states, *step], outer)
            states = list(outputs[:n_state])
            for k in range(n_scan_out):
                slices[k].append(np.asarray(outputs[n_state + k]))
        results = []
        for k, s in enumerate(slices):
            if out_dirs[k]:
                s = s[::-1]
            if s:
                rank = s[0].ndim + 1
                axis = out_axes[k] + rank if out_axes[k] < 0 else out_axes[k]
                results.append(np.stack(s, axis=axis))
            else:
                results.append(_stack(s, 0, scan_views[k].dtype, _static_tail(scan_views[k])))
        return [*states, *results]

    if len(node.outputs) == 1:
        return Kernel(run=lambda *args: run_scan(*args)[0], single_output=True)
    return Kernel(run=run_scan)


@kernel("Scan", since=8)
def _scan_v8(node, request):
    # opset 8: a batch axis 0 on every state and scan input, the sequence axis is 1, and an
    # optional ``sequence_lens`` input first; each batch entry is scanned on its own
    body = request.build_subgraph("body")
    graph = node.subgraphs["body"]
    n_decl = len(node.inputs)
    n_scan_in = int(node.attr("num_scan_inputs"))
    n_state = n_decl - 1 - n_scan_in
    n_scan_out = len(graph.outputs) - n_state
    dirs = list(node.attr("directions") or [0] * n_scan_in)

    def run_scan(*args):
        lens = args[0]
        states = [np.asarray(x) for x in args[1:1 + n_state]]
        scan_inputs = [np.asarray(x) for x in args[1 + n_state:n_decl]]
        outer = _outer(node, args[n_decl:])
        batch = scan_inputs[0].shape[0]
        max_len = scan_inputs[0].shape[1]
        seq_lens = [max_len] * batch if lens is None or np.asarray(lens).size == 0 else [int(v) for v in lens]
        out_states: list[list[np.ndarray]] = [[] for _ in range(n_state)]
        out_scans: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
        for b in range(batch):
            st = [s[b] for s in states]
            n = seq_lens[b]
            per_step: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
            for t in range(n):
                step = [x[b, n - 1 - t if d else t] for x, d in zip(scan_inputs, dirs)]
                outputs = body([*st, *step], outer)
                st = list(outputs[:n_state])
                for k in range(n_scan_out):
                    per_step[k].append(np.asarray(outputs[n_state + k]))
            for k in range(n_state):
                out_states[k].append(np.asarray(st[k]))
            for k in range(n_scan_out):
                stacked = np.stack(per_step[k]) if per_step[k] else None
                if stacked is not None and n < max_len:  # pad short sequences with zeros
                    pad = np.zeros((max_len - n, *stacked.shape[1:]), dtype=stacked.dtype)
                    stacked = np.concatenate([stacked, pad])
                out_scans[k].append(stacked)
        results = [np.stack(s) for s in out_states]
        results += [np.stack(s) for s in out_scans]
        return results

    if len(node.outputs) == 1:
        return Kernel(run=lambda *args: run_scan(*args)[0], single_output=True)
    return Kernel(run=run_scan)
