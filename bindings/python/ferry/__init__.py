"""Ferry: use GPUs — local, or on other hosts over the network — from a CPU
machine, as if they were local.

    import ferry, numpy as np
    with ferry.Runtime() as rt:
        a = rt.array(np.random.rand(512, 512))
        c = rt.empty((512, 512), np.float64)
        rt.gemm(a, a, c)
        print(c.numpy())
"""

from . import _ferry
from ._errors import (
    CompileError,
    CudaError,
    FerryError,
    KernelError,
    OutOfMemory,
    ProtocolError,
    RemoteError,
    TransportError,
    UsageError,
)
from ._ferry import Access, Array, Future, Kernel, read, readwrite, write
from ._runtime import PythonTask, Runtime
from ._trace import Trace

__version__ = _ferry.version
with_cuda: bool = _ferry.with_cuda


def cuda_device_count() -> int:
    """How many CUDA GPUs this process can use (0 without a driver or GPU)."""
    return _ferry.cuda_device_count()

__all__ = [
    "Access",
    "Array",
    "CompileError",
    "CudaError",
    "FerryError",
    "Future",
    "Kernel",
    "KernelError",
    "OutOfMemory",
    "ProtocolError",
    "PythonTask",
    "RemoteError",
    "Runtime",
    "Trace",
    "TransportError",
    "UsageError",
    "cuda_device_count",
    "read",
    "readwrite",
    "with_cuda",
    "write",
]
