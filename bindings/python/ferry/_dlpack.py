"""Ferry as a DLPack consumer: which stream it names when it asks a producer
(NumPy, CuPy, PyTorch, JAX) for an array, and how the answer reaches the copy.

The protocol (DLPack / array API `__dlpack__`): `stream` is the consumer's
stream; the producer makes the data ready for use there before it returns
(for example by making that stream wait for an event on its own). For
memory the CPU reads it must be None. For CUDA it is the stream handle as
an int, 1 meaning the legacy default stream and 2 the per-thread one; 0 is
ambiguous and not allowed.

Ferry's device-to-device copy (CudaDevice::adopt, through
Runtime.import_device_data) runs on a stream of Ferry's own that first waits
for everything enqueued on the legacy default stream, so Ferry names stream
1: a tensor written on any PyTorch or CuPy stream is complete before the
copy reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
HOST_READABLE = (KDL_CPU, KDL_CUDA_HOST)

LEGACY_DEFAULT_STREAM = 1


def device_of(data: Any) -> tuple[int, int]:
    """(DLPack device type, ordinal); an object without __dlpack_device__ is host data."""
    if hasattr(data, "__dlpack_device__"):
        device, ordinal = data.__dlpack_device__()
        return int(device), int(ordinal)
    return KDL_CPU, 0


def consumer_stream(device: int) -> int | None:
    """The `stream` Ferry passes to __dlpack__ for data on `device`."""
    if device in (KDL_CUDA, KDL_CUDA_MANAGED):
        return LEGACY_DEFAULT_STREAM
    return None


def export(data: Any, device: int) -> Any:
    """The producer's DLPack capsule, ready for Ferry's copy."""
    return data.__dlpack__(stream=consumer_stream(device))


class _Exported:
    """A capsule already taken, offered to NumPy's from_dlpack as a producer."""

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def host_view(data: Any) -> np.ndarray:
    """A NumPy view of host-readable DLPack data, asked for with stream=None.
    A DLPack 1.0 capsule where the producer offers one (it can say
    read-only, which the older capsule cannot: NumPy refuses to export a
    read-only array without it)."""
    device = device_of(data)
    if not hasattr(data, "__dlpack__"):
        return np.asarray(data)
    stream = consumer_stream(device[0])
    try:
        capsule = data.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0
        capsule = data.__dlpack__(stream=stream)
    return np.from_dlpack(_Exported(capsule, device))
