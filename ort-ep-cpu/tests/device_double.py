"""A device provider written for the tests (never shipped): it takes only ``ops`` and keeps its
tensors in its own memory as wrapped numpy arrays, so a missing copy fails loudly."""

from __future__ import annotations

import numpy as np

import ort_core as ort

KERNELS = {"Relu": lambda x: np.maximum(x, 0), "Add": np.add}


class DeviceTensor:
    def __init__(self, a: np.ndarray):
        self.a, self.shape, self.dtype, self.nbytes = a, a.shape, a.dtype, a.nbytes


class WrappedDevice:
    def __init__(self, name: str, ops: tuple[str, ...], memory: str):
        self.name, self.ops, self.memory = name, ops, memory

    @ort.hookimpl
    def ort_register_providers(self):
        return [ort.ProviderSpec(self.name, "0", "tests", "kernel")]

    @ort.hookimpl
    def ort_ep_devices(self, provider):
        if provider == self.name:
            return ort.EpDevices((ort.EpDevice(self.name, "tests", "GPU", self.memory, memory=self.memory),))
        return None

    @ort.hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        if ep.name != self.name:
            return None
        cap = ort.Capability()
        for i in sorted(candidates):
            if graph.nodes[i].op_type in self.ops:
                cap.claims.append(ort.Claim((i,)))
            else:
                cap.declined[i] = f"{graph.nodes[i].op_type}: only {', '.join(self.ops)} here"
        return cap

    @ort.hookimpl
    def ort_create_data_transfer(self, ep):
        if ep.name == self.name:
            return ort.DataTransfer(to_device=lambda a: DeviceTensor(np.array(a)), to_host=lambda t: np.array(t.a))
        return None

    @ort.hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != self.name:
            return None
        fn = KERNELS[request.node.op_type]

        def run(*xs):
            for x in xs:
                if not isinstance(x, DeviceTensor):
                    raise TypeError(f"{self.name} kernel got {type(x).__name__}: a copy is missing")
            return DeviceTensor(fn(*(x.a for x in xs)))

        return ort.Kernel(run=run, single_output=True)
