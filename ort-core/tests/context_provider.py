"""A compiling test provider with EPContext support (never shipped), to prove core's
compiled-model cache on its own.

``ContextCompilerProvider`` claims connected groups of elementwise ops (``fuse=True``). Its
"compilation" turns a group's ``to_model()`` into a program (the node list, read in order), and
counts each one in ``compilations``; the exported blob is a header with the provider's "SDK
version" followed by the program's model bytes. A kernel rebuilt from a blob (an EPContext
node) counts in ``loads`` instead, so a test sees that reloading skipped compilation. A blob
with another header or version is refused with an ``ort_core`` error naming the partition.
"""

from __future__ import annotations

import numpy as np
import onnx

from fake_providers import HOST_KERNELS
from ort_core import Capability, Claim, EpContextBlob, EpDevice, EpDevices, Fail, Kernel, ProviderSpec, hookimpl
from ort_core.epcontext import is_context_node, read_context

MAGIC = b"TESTCTX1"


class ContextCompilerProvider:
    def __init__(self, name: str = "ContextCompilerExecutionProvider", ops: set[str] | None = None,
                 sdk_version: str = "1.0", export: bool = True):
        self.name = name
        self.ops = {"Add", "Relu", "Mul"} if ops is None else ops
        self.sdk_version = sdk_version
        self.export = export
        self.compilations = 0
        self.loads = 0

    @hookimpl
    def ort_register_providers(self):
        return [ProviderSpec(self.name, "0.0.1", "tests", "compiling")]

    @hookimpl
    def ort_ep_devices(self, provider):
        if provider != self.name:
            return None
        return EpDevices((EpDevice(self.name, "tests", "NPU", "test compiler"),))

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        if ep.name != self.name:
            return None
        cap = Capability()
        mine = []
        for i in sorted(candidates):
            node = graph.nodes[i]
            if is_context_node(node, self.name):
                cap.claims.append(Claim((i,)))
            elif is_context_node(node):
                cap.declined[i] = f"EPContext node of another provider ({node.attr('source')!r})"
            elif node.op_type in self.ops and node.domain == "":
                mine.append(i)
            else:
                cap.declined[i] = f"{node.op_type} is not compiled by the test compiler"
        if mine:  # one group per run of consecutive claimed nodes, so groups stay acyclic
            group = [mine[0]]
            for i in mine[1:]:
                if i == group[-1] + 1:
                    group.append(i)
                else:
                    cap.claims.append(Claim(tuple(group), fuse=True))
                    group = [i]
            cap.claims.append(Claim(tuple(group), fuse=True))
        return cap

    @hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != self.name:
            return None
        if is_context_node(request.node if len(request.nodes) == 1 else request.nodes[0], self.name):
            node = request.node
            blob = read_context(request)
            if not blob.startswith(MAGIC):
                raise Fail(f"partition {node.attr('partition_name')!r}: not a test-compiler context blob")
            version, _, model_bytes = blob[len(MAGIC):].partition(b"\n")
            if version.decode() != self.sdk_version:
                raise Fail(f"partition {node.attr('partition_name')!r} was compiled by test SDK "
                           f"{version.decode()}, this is {self.sdk_version}: compile the model again")
            model = onnx.ModelProto()
            try:
                model.ParseFromString(model_bytes)
            except Exception as exc:
                raise Fail(f"partition {node.attr('partition_name')!r}: corrupt context blob ({exc})") from exc
            self.loads += 1
            return self._kernel(model, request.outputs, model_bytes)
        model = request.to_model()
        self.compilations += 1
        return self._kernel(model, request.outputs, model.SerializeToString())

    def _kernel(self, model: onnx.ModelProto, outputs, model_bytes: bytes) -> Kernel:
        nodes = [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node]
        inputs = [i.name for i in model.graph.input]
        consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
        names = [o.name for o in model.graph.output]

        def run(*xs):
            env = dict(consts)
            env.update(zip(inputs, xs))
            for op, ins, outs in nodes:
                env[outs[0]] = np.asarray(HOST_KERNELS[op](*(env[i] for i in ins)))
            return [env[o] for o in names]

        export = None
        if self.export:
            def export():
                return EpContextBlob(MAGIC + self.sdk_version.encode() + b"\n" + model_bytes,
                                     sdk_version=self.sdk_version, hardware_architecture="test-npu",
                                     notes=f"{len(nodes)} nodes")
        return Kernel(run=run, export_context=export, note="test compiler")
