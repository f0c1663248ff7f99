"""The execution plan: steps in topological order, device copies, value lifetimes.

Built once per graph at session creation. A run is a walk over a prepared list of steps; each
step reads its inputs from value slots, calls a kernel resolved at creation, and clears the slots
whose last reader it was. Nothing in the loop goes through pluggy.

The plain (uninstrumented) run is a Python function generated for the plan at creation: one
line per step calling the kernel on local variables (one local per slot), so a step costs a
call and nothing else (no per-step list, tuple or dict work). Memory tracking and profiling use
the instrumented loop instead. ``Plan.run`` tracks memory only on the first run of each input
shape signature (value sizes depend only on shapes, except after data-dependent-shape ops such
as NonZero, whose peaks are those of the sampled runs): peak bytes stay truthful at no cost on
repeated runs.
"""

from __future__ import annotations

import contextvars
import functools
import heapq
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import CodeType
from typing import Any

import numpy as np

from .errors import EPFail, Fail, InvalidArgumentFail, OrtError, RuntimeException
from .graph.view import GraphView
from .partition import Assignment, CopyPlacement
from .types import HOST_MEMORY, DataTransfer, Kernel, SubgraphRunner

#: input shape signatures a plan remembers having measured (see ``Plan.run``); bounded
MAX_TRACKED_SIGNATURES = 256


#: the profile records of the run in progress, where it is profiled: control-flow bodies run by
#: its kernels record their nodes there too (onnxruntime's profile has the nodes of If/Loop
#: bodies; a model such as Silero VAD has its whole network inside an If)
_PROFILE: contextvars.ContextVar[list | None] = contextvars.ContextVar("ort_core_profile", default=None)


@dataclass(frozen=True)
class StepInfo:
    """What a step is, for error messages and profiles."""

    label: str  # node name or "copy x: A -> B"
    op_type: str
    provider: str


def _copy_function(
    source: str, target: str, transfers: Mapping[str, DataTransfer]
) -> Callable[[Any], Any]:
    def transfer(memory: str) -> DataTransfer:
        t = transfers.get(memory)
        if t is None:
            raise EPFail(f"no data transfer is registered for memory {memory!r}")
        return t

    if source == HOST_MEMORY:
        return transfer(target).to_device
    if target == HOST_MEMORY:
        return transfer(source).to_host
    to_host, to_device = transfer(source).to_host, transfer(target).to_device
    return lambda value: to_device(to_host(value))


class Plan:
    """Steps and slots for one graph.

    ``io_memory`` is where the graph's inputs (and outer-scope values) arrive and where its
    outputs are delivered: host memory for the main graph, the owning provider's memory for a
    control-flow body. ``input_memory``/``output_memory`` override it per value name: device
    inputs a caller bound (an OrtValue on a device) arrive in their provider's memory and
    outputs bound to a device are left there, so the copy steps start and end there.
    """

    def __init__(
        self,
        graph: GraphView,
        assignment: Assignment,
        kernels: Sequence[Kernel],
        transfers: Mapping[str, DataTransfer],
        io_memory: str = HOST_MEMORY,
        input_memory: Mapping[str, str] | None = None,
        output_memory: Mapping[str, str] | None = None,
    ):
        self.graph = graph
        input_memory = input_memory or {}
        output_memory = output_memory or {}
        self.copies: list[CopyPlacement] = []
        slots: dict[tuple[str, str], int] = {}
        home: dict[str, str] = {}  # value name -> memory it is produced in
        constants: dict[int, Any] = {}
        slot_memory: list[str] = []
        steps: list[tuple] = []
        infos: list[StepInfo] = []

        def new_slot(name: str, memory: str) -> int:
            slots[(name, memory)] = len(slot_memory)
            slot_memory.append(memory)
            return slots[(name, memory)]

        none_slot = new_slot("", HOST_MEMORY)
        constants[none_slot] = None
        self.input_slots: list[int] = []
        for name in (*graph.inputs, *graph.outer_names):
            if graph.defines(name) and graph.value(name).is_initializer and name not in graph.inputs:
                continue
            home[name] = input_memory.get(name, io_memory)
            self.input_slots.append(new_slot(name, home[name]))
        self.input_names = tuple(graph.inputs) + tuple(graph.outer_names)

        def ensure(name: str, memory: str) -> int:
            if not name:
                return none_slot
            slot = slots.get((name, memory))
            if slot is not None:
                return slot
            if name not in home:
                if graph.defines(name) and graph.value(name).is_initializer:
                    home[name] = HOST_MEMORY
                    constants[new_slot(name, HOST_MEMORY)] = graph.value(name).const_value
                    if memory == HOST_MEMORY:
                        return slots[(name, HOST_MEMORY)]
                else:
                    raise Fail(f"graph {graph.path or 'main'}: value {name!r} is used before it is produced")
            source_slot = slots[(name, home[name])]
            copy = _copy_function(home[name], memory, transfers)
            if source_slot in constants:  # initializers are copied once, now
                slot = new_slot(name, memory)
                constants[slot] = copy(constants[source_slot])
                return slot
            slot = new_slot(name, memory)
            steps.append((copy, (source_slot,), slot, True))
            infos.append(StepInfo(f"copy {name}: {home[name]} -> {memory}", "MemcpyTo" + memory, ""))
            self.copies.append(CopyPlacement(name, home[name], memory, graph.path))
            return slot

        for claim_index in self._claim_order(assignment):
            bp, claim = assignment.claims[claim_index]
            kernel = kernels[claim_index]
            request_inputs, request_outputs = _claim_io(graph, claim.nodes, claim.fuse)
            memory = bp.memory
            in_slots = tuple(
                ensure(n, HOST_MEMORY if (k in kernel.host_inputs) else memory)
                for k, n in enumerate(request_inputs)
            )
            out_slots = []
            for k, n in enumerate(request_outputs):
                out_memory = HOST_MEMORY if k in kernel.host_outputs else memory
                if n:
                    home[n] = out_memory
                    out_slots.append(new_slot(n, out_memory))
                else:
                    out_slots.append(new_slot(f"<unused {len(slot_memory)}>", out_memory))
            if kernel.single_output:
                if len(out_slots) != 1:
                    raise EPFail(f"{bp.name}: kernel marked single_output for {len(out_slots)} outputs")
                steps.append((kernel.run, in_slots, out_slots[0], True))
            else:
                steps.append((kernel.run, in_slots, tuple(out_slots), False))
            first = graph.nodes[claim.nodes[0]]
            label = first.name if len(claim.nodes) == 1 else f"{first.name} (+{len(claim.nodes) - 1} fused)"
            infos.append(StepInfo(label, first.op_type if len(claim.nodes) == 1 else "FusedGroup", bp.name))

        self.output_slots = [ensure(name, output_memory.get(name, io_memory)) for name in graph.outputs]
        self.output_names = tuple(graph.outputs)

        # lifetimes: clear each slot after its last reader; keep constants and outputs
        keep = set(constants) | set(self.output_slots)
        last_use: dict[int, int] = {}
        for k, (_, ins, _, _) in enumerate(steps):
            for s in ins:
                last_use[s] = k
        for k, (_, _, outs, single) in enumerate(steps):
            for s in (outs,) if single else outs:
                last_use.setdefault(s, k)  # produced and never read: free at once
        frees: list[list[int]] = [[] for _ in steps]
        for s, k in last_use.items():
            if s not in keep:
                frees[k].append(s)

        self.steps: list[tuple] = [
            (run, ins, outs, single, tuple(frees[k])) for k, (run, ins, outs, single) in enumerate(steps)
        ]
        self.step_infos = infos
        self.slot_memory = slot_memory
        self._template: list[Any] = [None] * len(slot_memory)
        for s, v in constants.items():
            self._template[s] = v
        self.peak_bytes: dict[str, int] = {}
        self._tracked: set[tuple] = set()  # input shape signatures whose memory was tracked
        self._lock = threading.Lock()
        self._fast = self._generate()

    def pruned(self, wanted: Sequence[int]) -> Plan:
        """A copy that runs only the steps the outputs ``wanted`` (indices) need and returns
        those outputs (``RunOptions.only_execute_path_to_fetches``)."""
        import copy

        other = copy.copy(self)
        other.output_slots = [self.output_slots[k] for k in wanted]
        other.output_names = tuple(self.output_names[k] for k in wanted)
        needed = set(other.output_slots)
        keep: list[int] = []
        for k in range(len(self.steps) - 1, -1, -1):
            _, ins, outs, single, _ = self.steps[k]
            if needed & ({outs} if single else set(outs)):
                keep.append(k)
                needed.update(ins)
        keep.reverse()
        other.steps = [self.steps[k] for k in keep]
        other.step_infos = [self.step_infos[k] for k in keep]
        other._tracked = set()
        other._lock = threading.Lock()
        other._fast = other._generate()
        return other

    @staticmethod
    def _claim_order(assignment: Assignment) -> list[int]:
        """Claims in a topological order (fused groups can break plain node order)."""
        graph = assignment.graph
        n_claims = len(assignment.claims)
        deps: list[set[int]] = [set() for _ in range(n_claims)]
        for c, (_, claim) in enumerate(assignment.claims):
            for i in claim.nodes:
                node = graph.nodes[i]
                for name in (*node.inputs, *node.implicit_inputs):
                    p = graph.producer.get(name) if name else None
                    if p is not None and assignment.node_claim[p] != c:
                        deps[c].add(assignment.node_claim[p])
        # Kahn's algorithm, taking ready claims by their first node index to keep graph order
        waiting = [len(d) for d in deps]
        users: list[list[int]] = [[] for _ in range(n_claims)]
        for c, d in enumerate(deps):
            for p in d:
                users[p].append(c)
        first = [assignment.claims[c][1].nodes[0] for c in range(n_claims)]
        ready = [(first[c], c) for c in range(n_claims) if waiting[c] == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            _, c = heapq.heappop(ready)
            order.append(c)
            for u in users[c]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, (first[u], u))
        if len(order) != n_claims:
            raise Fail(f"graph {graph.path or 'main'}: claims form a cycle; cannot order them")
        return order

    # ------------------------------------------------------------------ running
    def _generate(self) -> Callable[[list[Any]], list[Any]]:
        """Compile the steps into one straight-line Python function over local variables."""
        namespace: dict[str, Any] = {"Fail": Fail, "_StepFailed": _StepFailed, "_results": _results}
        lines = ["def run_plan(values):", "    step = -1", "    try:"]
        loaded = set()
        produced: set[int] = set()
        body: list[str] = []
        for k, (run, ins, outs, single, frees) in enumerate(self.steps):
            namespace[f"f{k}"] = run
            for i in ins:
                if i not in produced and i not in loaded:
                    loaded.add(i)
            args = ", ".join(f"v{i}" for i in ins)
            body.append(f"step = {k}")
            if single:
                body.append(f"v{outs} = f{k}({args})")
                produced.add(outs)
            else:
                body.append(f"r = _results(f{k}({args}), {len(outs)})")
                body.extend(f"v{o} = r[{j}]" for j, o in enumerate(outs))
                produced.update(outs)
            if frees:
                body.append(" = ".join(f"v{i}" for i in frees) + " = None")
        for i in self.output_slots:
            if i not in produced:
                loaded.add(i)
        lines.extend(f"        v{i} = values[{i}]" for i in sorted(loaded))
        lines.extend("        " + line for line in body)
        lines.append("        return [" + ", ".join(f"v{i}" for i in self.output_slots) + "]")
        lines.append("    except Fail:")
        lines.append("        raise")
        lines.append("    except Exception as exc:")
        lines.append("        raise _StepFailed(step) from exc")
        code = _compiled("\n".join(lines) + "\n")
        exec(code, namespace)  # noqa: S102  (source built above from slot numbers only)
        return namespace["run_plan"]

    def run(self, feeds: Sequence[Any], track_memory: bool | None = None, profile: list | None = None) -> list[Any]:
        """Run with ``feeds`` in ``input_names`` order; return outputs in ``output_names`` order.

        ``track_memory``: True records peak bytes per memory on this run, False never, None
        (the default) on the first run of each input shape signature.
        """
        values = self._template.copy()
        for slot, value in zip(self.input_slots, feeds):
            values[slot] = value
        if track_memory is None:
            signature = tuple(getattr(v, "shape", None) for v in feeds)
            track_memory = signature not in self._tracked
            if track_memory:
                with self._lock:
                    if len(self._tracked) >= MAX_TRACKED_SIGNATURES:
                        # ever new shapes (200,000 of them grew RSS by 40 MB): the peaks stay,
                        # the set starts over (a shape seen again is measured again)
                        self._tracked.clear()
                    self._tracked.add(signature)
        if track_memory or profile is not None:
            token = _PROFILE.set(profile) if profile is not None else None
            try:
                self._run_instrumented(values, profile)
            except OrtError:  # a step's Fail or RuntimeException (``_error_at``)
                raise
            except Exception as exc:
                raise Fail(f"run failed: {type(exc).__name__}: {exc}") from exc
            finally:
                if token is not None:
                    _PROFILE.reset(token)
            return [values[s] for s in self.output_slots]
        try:
            return self._fast(values)
        except _StepFailed as failed:
            exc = failed.__cause__
            raise self._error_at(failed.step, exc) from exc

    def _run_instrumented(self, values: list[Any], profile: list | None) -> None:
        """Run the steps counting the bytes each memory holds. A buffer counts once however
        many values refer to it: an output written into its input (in-place kernels), a view
        (Reshape, Squeeze, a slice) and its source share the memory of the array that owns it,
        which is counted while any of them is live."""
        live: dict[str, int] = {}
        peak: dict[str, int] = {}
        owners: dict[int, list] = {}  # id(owning buffer) -> [references, bytes, memory, buffer]
        keys: list[int | None] = [None] * len(values)
        memory = self.slot_memory

        def hold(slot: int, value: Any) -> None:
            if value is None:
                return
            owner = value
            while isinstance(owner, np.ndarray) and owner.base is not None:
                owner = owner.base
            size = getattr(owner, "nbytes", None)
            if size is None:  # a view of bytes or another buffer object: the value's own size
                owner, size = value, getattr(value, "nbytes", 0) or 0
            key = keys[slot] = id(owner)
            entry = owners.get(key)
            if entry is not None:
                entry[0] += 1
                return
            m = memory[slot]
            owners[key] = [1, size, m, owner]
            live[m] = live.get(m, 0) + size
            if live[m] > peak.get(m, 0):
                peak[m] = live[m]

        def release(slot: int) -> None:
            key, keys[slot] = keys[slot], None
            entry = owners.get(key) if key is not None else None
            if entry is None:
                return
            entry[0] -= 1
            if not entry[0]:
                del owners[key]
                live[entry[2]] -= entry[1]

        for s in self.input_slots:
            hold(s, values[s])
        clock = time.perf_counter_ns
        for k, (run, ins, outs, single, frees) in enumerate(self.steps):
            start = clock()
            try:
                result = run(*[values[i] for i in ins])
                results = (result,) if single else _results(result, len(outs))
            except Exception as exc:
                raise self._error_at(k, exc) from exc
            end = clock()
            for slot, value in zip((outs,) if single else outs, results):
                values[slot] = value
                hold(slot, value)
            for slot in frees:
                values[slot] = None
                release(slot)
            if profile is not None:
                profile.append((self.step_infos[k], self.graph.path, start, end))
        with self._lock:
            for m, b in peak.items():
                if b > self.peak_bytes.get(m, 0):
                    self.peak_bytes[m] = b

    def _error_at(self, k: int, exc: Exception) -> OrtError:
        """The error of step ``k`` raising ``exc``, naming the node, op and provider: a
        ``RuntimeException`` (onnxruntime's RUNTIME_EXCEPTION) where the kernel ran out of
        memory (``MemoryError``; a provider's memory limit raises ``RuntimeException``), an
        ``InvalidArgumentFail`` where an index was out of range (onnxruntime's Gather answers
        INVALID_ARGUMENT), else ``Fail``."""
        info = self.step_infos[k]
        where = f" in graph {self.graph.path}" if self.graph.path else ""
        cls = (RuntimeException if isinstance(exc, (MemoryError, RuntimeException))
               else InvalidArgumentFail if isinstance(exc, IndexError) else Fail)
        return cls(
            f"Non-zero status code returned while running {info.op_type} node. "
            f"Name:'{info.label}'{where} Provider:{info.provider or 'core'} "
            f"Status Message: {type(exc).__name__}: {exc}"
        )


@functools.lru_cache(maxsize=128)  # bounded: a big model's source and code are ~100s of kB
def _compiled(source: str) -> CodeType:
    """The code object of a generated run function. The source names only slots and steps
    (kernels are bound through the namespace it runs in), so plans of the same shape share it:
    the control-flow bodies of a model, or the same model's plan in another session. Compiling
    was a fifth of creation for models with many small bodies (silero-vad: 50 If branches).
    (Errors name the graph through ``Plan._error_at``, not through this file name.)"""
    return compile(source, "<ort_core plan>", "exec")


def _results(result: Any, count: int) -> Sequence[Any]:
    """A multi-output kernel's result, checked: one value per output. Indexing a lone array
    instead would split it by rows and return rows as outputs, silently (a kernel that dropped
    an omitted output's slot did)."""
    if type(result) not in (tuple, list) or len(result) != count:
        got = f"a {type(result).__name__}" if type(result) not in (tuple, list) else f"{len(result)} values"
        raise ValueError(f"the kernel returned {got} for the node's {count} outputs")
    return result


class _StepFailed(Exception):
    """Raised by the generated run function: step ``step`` raised (the cause)."""

    def __init__(self, step: int):
        super().__init__(step)
        self.step = step


class PlanRunner(SubgraphRunner):
    """A control-flow body, ready to run (what ``KernelRequest.build_subgraph`` returns)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.input_names = tuple(plan.graph.inputs)
        self.output_names = tuple(plan.graph.outputs)
        self.outer_names = tuple(plan.graph.outer_names)

    def __call__(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[Any]:
        feeds = list(inputs)
        feeds.extend(outer[n] for n in self.outer_names)
        return self.plan.run(feeds, track_memory=False, profile=_PROFILE.get())

    def run_values(self, values: Sequence[Any]) -> list[Any]:
        # the plan's inputs are the formal inputs then the outer values: already in order
        return self.plan.run(values, track_memory=False, profile=_PROFILE.get())


def _claim_io(graph: GraphView, nodes: tuple[int, ...], fused: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The value names a claim's kernel takes and returns (see KernelRequest)."""
    if not fused:
        node = graph.nodes[nodes[0]]
        return node.inputs + node.implicit_inputs, node.outputs
    return graph.group_io(nodes)
