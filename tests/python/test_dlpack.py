"""Ferry as a DLPack consumer: the `stream` it names when it asks a producer
for an array (None for host memory, 1 — the legacy default stream its copy
waits for — for CUDA), seen by producers that record how they were called."""

import numpy as np
import pytest

import ferry
from ferry import _dlpack


class RecordingProducer:
    """A DLPack producer over a NumPy array that records each __dlpack__ call."""

    def __init__(self, array, device=None, legacy=False):
        self._array = array
        self._device = device
        self.legacy = legacy  # a producer from before DLPack 1.0: no max_version
        self.calls = []

    def __dlpack_device__(self):
        return self._device or self._array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if self.legacy and "max_version" in kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        if self._device is not None:  # stands for device memory: no real capsule
            return "capsule"
        return self._array.__dlpack__(**kwargs)


def test_host_data_is_asked_for_with_stream_none(rt):
    values = np.arange(12, dtype=np.float64).reshape(3, 4)
    producer = RecordingProducer(values)
    a = rt.from_dlpack(producer)
    assert [c["stream"] for c in producer.calls] == [None]
    np.testing.assert_array_equal(a.numpy(), values)


def test_a_producer_before_dlpack_1_is_asked_again_without_max_version(rt):
    values = np.arange(5, dtype=np.float32)
    producer = RecordingProducer(values, legacy=True)
    a = rt.from_dlpack(producer)
    assert producer.calls == [{"stream": None, "max_version": (1, 0)}, {"stream": None}]
    np.testing.assert_array_equal(a.numpy(), values)


def test_a_read_only_host_array_is_accepted(rt):
    values = np.arange(4, dtype=np.float64)
    values.flags.writeable = False
    np.testing.assert_array_equal(rt.from_dlpack(values).numpy(), values)


def test_a_strided_host_array_still_arrives_whole(rt):
    values = np.arange(20, dtype=np.float32).reshape(4, 5)[:, 1:4]
    producer = RecordingProducer(values)
    a = rt.from_dlpack(producer)
    assert [c["stream"] for c in producer.calls] == [None]
    np.testing.assert_array_equal(a.numpy(), values)


def test_a_host_view_is_the_producers_memory_asked_for_with_stream_none():
    values = np.arange(6, dtype=np.int32)
    producer = RecordingProducer(values)
    view = _dlpack.host_view(producer)
    assert producer.calls == [{"stream": None, "max_version": (1, 0)}]
    assert np.shares_memory(view, values)
    np.testing.assert_array_equal(view, values)


def test_cuda_data_is_asked_for_on_the_legacy_default_stream():
    producer = RecordingProducer(np.zeros(4), device=(_dlpack.KDL_CUDA, 0))
    assert _dlpack.export(producer, _dlpack.KDL_CUDA) == "capsule"
    assert producer.calls == [{"stream": 1}]


def test_streams_by_device_type():
    assert _dlpack.consumer_stream(_dlpack.KDL_CPU) is None
    assert _dlpack.consumer_stream(_dlpack.KDL_CUDA_HOST) is None
    assert _dlpack.consumer_stream(_dlpack.KDL_CUDA) == _dlpack.LEGACY_DEFAULT_STREAM == 1
    assert _dlpack.consumer_stream(_dlpack.KDL_CUDA_MANAGED) == 1


def test_objects_without_dlpack_are_host_data():
    assert _dlpack.device_of([1.0, 2.0]) == (_dlpack.KDL_CPU, 0)
    np.testing.assert_array_equal(_dlpack.host_view([1.0, 2.0]), [1.0, 2.0])


@pytest.mark.gpu
def test_a_tensor_written_on_a_side_stream_is_complete_when_copied():
    """A PyTorch tensor filled on a non-default stream, handed over without
    synchronising: the copy must see the values, not what was there before."""
    from conftest import gpu_reason

    if gpu_reason():
        pytest.skip(gpu_reason())
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    import ferry

    with ferry.Runtime(workers=2) as rt:
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            t = torch.zeros(1 << 24, dtype=torch.float32, device="cuda")
            for _ in range(20):  # long enough that an unordered copy would overtake it
                t.add_(1.0)
            a = rt.from_dlpack(t)
        assert float(a.numpy().min()) == 20.0


def test_an_array_on_a_gpu_the_runtime_does_not_use_is_named(rt):
    """CUDA GPU 3, no .get() or .cpu(): the refusal names where the array is
    and which GPUs this runtime has (none: the rt fixture uses none)."""
    producer = RecordingProducer(np.zeros(4), device=(_dlpack.KDL_CUDA, 3))
    with pytest.raises(ferry.UsageError) as refused:
        rt.from_dlpack(producer)
    assert "CUDA GPU 3" in str(refused.value)
    assert "GPUs are none" in str(refused.value)
    assert producer.calls == []  # nothing was asked of it
    np.testing.assert_array_equal(rt.from_dlpack(np.arange(3.0)).numpy(), np.arange(3.0))  # still works
