"""The CPU provider's hook implementations (entry point ``ort_core.plugins: cpu``)."""

from __future__ import annotations

import logging

from ort_core import (
    Capability,
    Claim,
    EpDevice,
    EpDevices,
    GraphView,
    Kernel,
    KernelRequest,
    OptionSpec,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.devices import host_cpu
from ort_core.optimizer import FUSED_OPS

from . import PROVIDER_NAME, arena, inplace, kernels, memlimit, threads  # noqa: F401  (importing kernels registers them)
from .kernels import _jit, _onednn, half_region, onednn_group, quant, shape_group
from .registry import build_kernel, decline_reason
from .version import __version__

SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="ort",
    kind="kernel",
    options=(
        OptionSpec(
            "arena_extend_strategy",
            "kNextPowerOfTwo",
            "accepted for onnxruntime compatibility; numpy manages host memory",
            str,
            ("kNextPowerOfTwo", "kSameAsRequested"),
        ),
        OptionSpec(
            "use_arena",
            True,
            "accepted for onnxruntime compatibility (its CPU provider's arena switch); numpy manages host memory",
            lambda v: _parse_bool("use_arena", v),
            (True, False),
        ),
        OptionSpec(
            memlimit.OPTION,
            0,
            "bytes the session's live tensors may take (OrtArenaCfg's max_mem; 0: no limit): a node "
            "whose output would pass it fails with a RuntimeException naming the node, the request "
            "and the limit, before it allocates where the size follows from its inputs; the session "
            "stays usable (see memlimit.py)",
            memlimit.parse_max_mem,
        ),
        OptionSpec(
            "enable_inplace",
            True,
            "elementwise kernels may write their output into an input's buffer where that is "
            "provably safe (see inplace.py); \"0\" for a plugin that keeps kernels' outputs",
            lambda v: _parse_bool("enable_inplace", v),
            (True, False),
        ),
    ),
    description="numpy kernels; the reference provider and the final fallback",
    # every fused node core's optimizer forms: kernels/fused.py, norm.py, attention.py,
    # math.py and reduce.py compute each as onnxruntime does (the kit's fusion_parity checks it)
    fused_ops=FUSED_OPS,
)


def _parse_bool(key: str, value: object) -> bool:
    # onnxruntime's provider options are strings: "1"/"0", also true/false
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{key} takes 1 or 0 (true or false)")


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    # which compiled paths run here, and how to get a missing one (`ort-core providers` shows it)
    metadata = {}
    for name, info in (("numba", _jit.info()), ("onednn", _onednn.info())):
        metadata[name] = info["version"] if info["used"] else f"not used ({info['reason']})"
    cpu = host_cpu()
    return EpDevices((EpDevice(PROVIDER_NAME, "ort", "CPU", cpu.name, vendor=cpu.vendor, metadata=metadata),))


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name == PROVIDER_NAME:  # BLAS pools are per process: see threads.py
        count = int(ep.intra_op_num_threads or 0)
        # with oneDNN, its OpenMP pool is the one that runs in parallel (see threads.py)
        threads.limit(count, blas=1 if _onednn.available() else count)
        ep.state["threads_limited"] = True
        if ep.session_config.get("session.enable_cpu_mem_arena", "1") != "0":
            ep.state["arena"] = arena.enable()  # see arena.py
        if ep.options.get(memlimit.OPTION):
            ep.state["budget"] = memlimit.Budget(ep.options[memlimit.OPTION])


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name == PROVIDER_NAME:
        if ep.state.pop("threads_limited", False):
            threads.restore()


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    capability = Capability()
    taken = []
    for i in sorted(candidates):
        reason = decline_reason(graph.nodes[i])
        if reason is None:
            taken.append(i)
        else:
            capability.declined[i] = reason
    # chains of convolutions and pools run as one kernel in oneDNN's layout (onednn_group.py);
    # an optimisation: where forming them fails, the nodes run one by one and the error is logged
    try:
        grouped = onednn_group.groups(graph, taken)
    except Exception as error:  # noqa: BLE001
        logging.getLogger("ort_core").warning("CPUExecutionProvider: no oneDNN groups in graph %s: %s: %s",
                                              graph.path or "main", type(error).__name__, error)
        grouped = []
    in_groups = {i for group in grouped for i in group}
    # a QDQ model's QuantizeLinear -> DequantizeLinear pairs outside those groups, one pass each
    grouped += quant.fake_quant_pairs(graph, [i for i in taken if i not in in_groups])
    in_groups = {i for group in grouped for i in group}
    # float16 models: the ops onnxruntime computes in float32 between casts, as float32 regions
    # (before the shape groups: a Cast to float16 of a shape-derived scale is one of them)
    grouped += half_region.groups(graph, [i for i in taken if i not in in_groups])
    in_groups = {i for group in grouped for i in group}
    # shape arithmetic (Shape -> Gather -> Concat ...) as one step remembered per input shape
    grouped += shape_group.groups(graph, [i for i in taken if i not in in_groups])
    capability.claims.extend(Claim(group, fuse=True) for group in grouped)
    in_groups = {i for group in grouped for i in group}
    capability.claims.extend(Claim((i,)) for i in taken if i not in in_groups)
    return capability


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    if request.fused:
        kernel = (quant.fake_quant_kernel(request) or shape_group.kernel(request, build_kernel)
                  or half_region.kernel(request, build_kernel) or onednn_group.build(request, build_kernel))
    else:
        kernel = build_kernel(request.node, request)
        if ep.options.get("enable_inplace", True):
            kernel = inplace.adapt(ep, request, kernel)
            inplace.record(ep, request, kernel)  # producers are built before their readers (node order)
    budget = ep.state.get("budget")
    if budget is not None:  # max_mem: the kernel keeps the session's account (memlimit.py)
        kernel = memlimit.guard(kernel, request, budget)
    return kernel
