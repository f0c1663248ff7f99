"""A FAKE of the ``tensorrt`` module: enough of its Python API to test the provider's glue
(parser answers -> claims, builder configuration, caches, precision by version) where TensorRT
cannot be installed. It builds no engine and runs nothing: "engines" are JSON records of how
they were configured. Nothing in the provider imports this; tests pass it in.
"""

from __future__ import annotations

import enum
import json

import onnx

#: op types the fake parser "supports"
SUPPORTED = {"Conv", "Relu", "Add", "Mul", "MatMul", "Gemm", "Softmax", "Transpose", "Reshape", "Sigmoid"}


class FakeTensorRT:
    """One fake module instance; ``version`` "10.x" has the precision flags, "11.x" not."""

    def __init__(self, version: str = "10.9.0"):
        self.__version__ = version
        self.builds: list[dict] = []
        major = int(version.split(".")[0])
        members = {"TF32": 1} if major >= 11 else {"FP16": 0, "INT8": 1, "TF32": 2}
        self.BuilderFlag = enum.Enum("BuilderFlag", members)
        self.MemoryPoolType = enum.Enum("MemoryPoolType", {"WORKSPACE": 0})
        fake = self

        class ILogger:
            class Severity(enum.Enum):
                INTERNAL_ERROR = 0
                ERROR = 1
                WARNING = 2
                INFO = 3
                VERBOSE = 4

            def __init__(self):
                pass

        self.ILogger = ILogger

        class Builder:
            def __init__(self, logger):
                self.logger = logger

            def create_network(self, flags):
                return {"flags": flags, "model": None}

            def create_builder_config(self):
                return _Config()

            def create_optimization_profile(self):
                return _Profile()

            def build_serialized_network(self, network, config):
                record = {"model": network["model"], "flags": sorted(f.name for f in config.flags),
                          "workspace": config.workspace, "level": config.builder_optimization_level,
                          "profiles": [p.shapes for p in config.profiles]}
                fake.builds.append(record)
                return b"FAKEENGINE" + json.dumps(record).encode()

        self.Builder = Builder
        self.OnnxParser = _Parser

        class Runtime:
            def __init__(self, logger):
                pass

            def deserialize_cuda_engine(self, data):
                return _Engine(data) if bytes(data).startswith(b"FAKEENGINE") else None

        self.Runtime = Runtime


class _Config:
    def __init__(self):
        self.flags: set = set()
        self.workspace = None
        self.builder_optimization_level = 3
        self.profiles: list = []
        self.timing = None

    def set_memory_pool_limit(self, pool, size):
        self.workspace = size

    def set_flag(self, flag):
        self.flags.add(flag)

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)

    def create_timing_cache(self, data):
        return _TimingCache(bytes(data))

    def set_timing_cache(self, cache, ignore_mismatch):
        self.timing = cache
        return True

    def get_timing_cache(self):
        return self.timing


class _TimingCache:
    def __init__(self, data: bytes):
        self.data = data

    def serialize(self):
        return self.data + b"+timed"


class _Profile:
    def __init__(self):
        self.shapes: dict = {}

    def set_shape(self, name, lo, mid, hi):
        self.shapes[name] = [list(lo), list(mid), list(hi)]


class _Error:
    def __init__(self, node: int, desc: str):
        self._node, self._desc = node, desc

    def node(self):
        return self._node

    def desc(self):
        return self._desc


class _Parser:
    """Supports SUPPORTED op types; subgraphs are the maximal runs of consecutive nodes that are
    all supported or all not, in node order (as TensorRT's parser reports them)."""

    def __init__(self, network, logger):
        self.network = network
        self.errors: list[_Error] = []
        self.subgraphs: list[tuple[list[int], bool]] = []

    def supports_model_v2(self, data: bytes, path: str | None = None) -> bool:
        model = onnx.load_from_string(data)
        runs: list[tuple[list[int], bool]] = []
        for k, node in enumerate(model.graph.node):
            ok = node.op_type in SUPPORTED
            if not ok:
                self.errors.append(_Error(k, f"No importer registered for op: {node.op_type}"))
            if runs and runs[-1][1] == ok:
                runs[-1][0].append(k)
            else:
                runs.append(([k], ok))
        self.subgraphs = runs
        return all(ok for _, ok in runs)

    @property
    def num_subgraphs(self):
        return len(self.subgraphs)

    def is_subgraph_supported(self, index):
        return self.subgraphs[index][1]

    def get_subgraph_nodes(self, index):
        return list(self.subgraphs[index][0])

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, k):
        return self.errors[k]

    def parse(self, data: bytes) -> bool:
        model = onnx.load_from_string(data)
        self.network["model"] = {
            "ops": [n.op_type for n in model.graph.node],
            "input_types": [i.type.tensor_type.elem_type for i in model.graph.input],
            "float16_initializers": sum(1 for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16),
        }
        bad = [n.op_type for n in model.graph.node if n.op_type not in SUPPORTED | {"Cast"}]
        self.errors = [_Error(0, f"No importer registered for op: {op}") for op in bad]
        return not bad


class _Engine:
    def __init__(self, data: bytes):
        self.record = json.loads(bytes(data)[len(b"FAKEENGINE"):])

    def create_execution_context(self):
        return object()
