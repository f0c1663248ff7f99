"""TensorRT execution provider for ort-core: claimed subgraphs become TensorRT engines."""

PROVIDER_NAME = "TensorrtExecutionProvider"
#: the CUDA provider's memory: TensorRT engines read and write the same CuPy arrays
MEMORY_NAME = "Cuda"
