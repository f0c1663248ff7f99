"""Providers written in the tests (never shipped), to prove core's machinery on its own.

- ``HostProvider``: numpy kernels for a handful of ops on host memory. Registered under the name
  ``CPUExecutionProvider`` it stands in for the real CPU provider, which ort-core's own test venv
  does not have.
- ``FakeDeviceProvider``: tensors live in "Fake:N" memory as ``FakeTensor`` objects; it takes only
  some ops, so graphs fall back and core must insert copies. Its kernels refuse numpy inputs, so a
  missing copy is an error, not a silent success.
- ``OnnxruntimeNodeProvider``: claims every node and runs each with onnxruntime, for tests that
  need kernels for any op (fused com.microsoft ones included) without the CPU provider.
"""

from __future__ import annotations

import numpy as np

import ort_core
from ort_core import (
    Capability,
    Claim,
    DataTransfer,
    EpDevice,
    EpDevices,
    FusedOp,
    HostAllocator,
    Kernel,
    MemoryInfo,
    OptionSpec,
    ProviderSpec,
    hookimpl,
)

HOST_KERNELS = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Relu": lambda x: np.maximum(x, 0),
    "Neg": np.negative,
    "MatMul": np.matmul,
    "Identity": lambda x: x,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


class HostProvider:
    #: the fused nodes the optimizer may form for this provider (ProviderSpec.fused_ops)
    fused_ops: tuple[FusedOp, ...] = ()

    def __init__(self, name: str = "CPUExecutionProvider", ops: set[str] | None = None):
        self.name = name
        self.ops = set(HOST_KERNELS) if ops is None else ops
        self.kernel_calls = 0

    @hookimpl
    def ort_register_providers(self):
        return [ProviderSpec(self.name, "0.0.1", "tests", "kernel",
                             options=(OptionSpec("flavour", "plain", "test option", str, ("plain", "spicy")),),
                             fused_ops=self.fused_ops)]

    @hookimpl
    def ort_ep_devices(self, provider):
        if provider != self.name:
            return None
        return EpDevices((EpDevice(self.name, "tests", "CPU", "host"),))

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        if ep.name != self.name:
            return None
        cap = Capability()
        for i in sorted(candidates):
            if graph.nodes[i].op_type in self.ops and graph.nodes[i].domain == "":
                cap.claims.append(Claim((i,)))
            else:
                cap.declined[i] = f"{graph.nodes[i].op_type} is not in the host test kernels"
        return cap

    @hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != self.name:
            return None
        fn = HOST_KERNELS[request.node.op_type]

        def run(*xs):
            self.kernel_calls += 1
            return fn(*xs)

        return Kernel(run=run, single_output=True)


class FakeTensor:
    """A tensor in fake device memory: only the provider's own kernels can read it."""

    def __init__(self, data: np.ndarray):
        self.data = np.array(data, copy=True)
        self.shape = self.data.shape
        self.dtype = self.data.dtype
        self.nbytes = self.data.nbytes


class FakeDeviceProvider:
    """Takes ``ops`` (default Add and Relu) on fake device memory; fuses when ``fuse`` is set."""

    def __init__(self, name: str = "FakeDeviceExecutionProvider", ops: set[str] | None = None,
                 memory: str = "Fake:0", fuse: bool = False, devices: bool = True):
        self.name = name
        self.ops = {"Add", "Relu"} if ops is None else ops
        self.memory = memory
        self.fuse = fuse
        self.has_devices = devices
        self.to_device_calls = 0
        self.to_host_calls = 0
        self.session_events: list[str] = []

    @hookimpl
    def ort_register_providers(self):
        return [ProviderSpec(self.name, "0.0.1", "tests", "compiling" if self.fuse else "kernel",
                             options=(OptionSpec("device_id", 0, "device index", int),))]

    @hookimpl
    def ort_ep_devices(self, provider):
        if provider != self.name:
            return None
        if not self.has_devices:
            return EpDevices((), "no fake device plugged in")
        return EpDevices((EpDevice(self.name, "tests", "GPU", "Fake GPU", memory=self.memory,
                                   metadata={"driver": "fake 1.0"}),))

    @hookimpl
    def ort_session_start(self, ep):
        if ep.name == self.name:
            self.session_events.append("start")

    @hookimpl
    def ort_session_end(self, ep):
        if ep.name == self.name:
            self.session_events.append("end")

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        if ep.name != self.name:
            return None
        cap = Capability()
        mine = [i for i in sorted(candidates) if graph.nodes[i].op_type in self.ops]
        for i in sorted(candidates):
            if i not in mine:
                cap.declined[i] = f"{graph.nodes[i].op_type} is not supported by the fake device"
        if self.fuse and mine:
            cap.claims.append(Claim(tuple(mine), fuse=True))
        else:
            cap.claims.extend(Claim((i,)) for i in mine)
        return cap

    @hookimpl
    def ort_create_allocator(self, ep):
        if ep.name == self.name:
            return HostAllocator(256, None, MemoryInfo(self.memory, "GPU", 0, 256))

    @hookimpl
    def ort_create_data_transfer(self, ep):
        if ep.name != self.name:
            return None

        def to_device(array):
            self.to_device_calls += 1
            return FakeTensor(array)

        def to_host(tensor):
            self.to_host_calls += 1
            return np.array(tensor.data, copy=True)

        return DataTransfer(to_device=to_device, to_host=to_host)

    @hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != self.name:
            return None
        if request.fused:
            return self._fused_kernel(request)
        fn = HOST_KERNELS[request.node.op_type]

        def run(*xs):
            for x in xs:
                if not isinstance(x, FakeTensor):
                    raise TypeError(f"fake device kernel got {type(x).__name__}, not a FakeTensor")
            return FakeTensor(fn(*(x.data for x in xs)))

        return Kernel(run=run, single_output=True)

    def _fused_kernel(self, request):
        model = request.to_model()  # what a compiling provider hands to its vendor's parser
        nodes = list(model.graph.node)
        inputs = [i.name for i in model.graph.input]
        outputs = [o.name for o in model.graph.output]
        consts = {t.name: __import__("onnx").numpy_helper.to_array(t) for t in model.graph.initializer}

        def run(*xs):
            env = dict(consts)
            for name, x in zip(inputs, xs):
                if not isinstance(x, FakeTensor):
                    raise TypeError(f"fused kernel got {type(x).__name__}, not a FakeTensor")
                env[name] = x.data
            for node in nodes:
                env[node.output[0]] = HOST_KERNELS[node.op_type](*(env[i] for i in node.input))
            return [FakeTensor(env[o]) for o in outputs]

        return Kernel(run=run)


class OnnxruntimeNodeProvider(HostProvider):
    """Claims every node of the domains onnxruntime implements, com.microsoft too, and runs each
    one with onnxruntime: a provider that has kernels for every op (MultiHeadAttention included)
    in ort-core's own tests, which install no real provider. ort-core's own fused ops
    (``CORE_DOMAIN``) it declines, as onnxruntime cannot run them; it declares every other
    fused op the optimizer forms, which onnxruntime computes by definition."""

    fused_ops = tuple(op for op in ort_core.optimizer.FUSED_OPS if op.domain != ort_core.CORE_DOMAIN)

    def __init__(self, name: str = "CPUExecutionProvider"):
        super().__init__(name)
        self.ops_built: list[str] = []

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        capability = Capability()
        for i in sorted(candidates):
            node = graph.nodes[i]
            if node.domain == ort_core.CORE_DOMAIN:
                capability.declined[i] = f"onnxruntime has no {node.qualified_op}"
            else:
                capability.claims.append(Claim((i,)))
        return capability

    @hookimpl
    def ort_create_kernel(self, ep, request):
        import onnxruntime

        model = request.to_model()
        so = onnxruntime.SessionOptions()
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        # one session per node: with the default pool each held a thread of its own, and a
        # test over the real models kept ~1,400 threads alive (a load average of 1,800)
        so.intra_op_num_threads = 1
        sess = onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds_from = [i.name for i in sess.get_inputs()]
        produced = [o.name for o in sess.get_outputs()]
        self.ops_built.append(request.node.op_type)

        def run(*xs):
            named = dict(zip(request.inputs, xs))
            got = dict(zip(produced, sess.run(produced, {n: named[n] for n in feeds_from})))
            return [got.get(name) for name in request.outputs]

        return Kernel(run=run)
