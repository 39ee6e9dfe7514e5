"""Arrays: every dtype round trip, shapes, zero-copy views, bad input."""

import numpy as np
import pytest

import ferry

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_round_trip_every_dtype_and_shape(rt, dtype, shape):
    source = (np.arange(np.prod(shape)) % 200).astype(dtype).reshape(shape)
    a = rt.array(source)
    assert a.shape == shape
    assert a.dtype == np.dtype(dtype)
    assert a.nbytes == source.nbytes
    back = a.numpy()
    assert back.dtype == source.dtype
    assert back.shape == source.shape
    np.testing.assert_array_equal(back, source)


def test_array_is_a_copy_of_its_source(rt):
    source = np.ones(16, np.float32)
    a = rt.array(source)
    source[:] = 5
    assert a.numpy().sum() == 16


def test_numpy_is_zero_copy(rt):
    a = rt.zeros((64, 32), np.float64)
    v1 = a.numpy()
    v2 = a.numpy()
    assert v1.__array_interface__["data"][0] == a.host_address
    assert v2.__array_interface__["data"][0] == a.host_address
    v1[3, 4] = 42.0
    assert a.numpy()[3, 4] == 42.0  # the same memory, not a copy
    assert np.asarray(a)[3, 4] == 42.0


def test_view_keeps_memory_alive_after_the_array_handle_dies(rt):
    a = rt.array(np.arange(10, dtype=np.int64))
    view = a.numpy()
    del a
    np.testing.assert_array_equal(view, np.arange(10))


def test_empty_and_zeros(rt):
    z = rt.zeros((4, 4), np.int32)
    assert z.numpy().sum() == 0
    e = rt.empty(10, np.float64, name="scratch")
    assert e.shape == (10,) and e.name == "scratch"


def test_non_contiguous_input_is_copied_in_order(rt):
    source = np.arange(20, dtype=np.float32).reshape(4, 5).T  # Fortran order
    a = rt.array(source)
    np.testing.assert_array_equal(a.numpy(), source)


def test_split_and_tiles_are_views(rt):
    a = rt.array(np.arange(12, dtype=np.float64))
    parts = a.split(3)
    assert [p.shape for p in parts] == [(4,), (4,), (4,)]
    assert all(p.is_view for p in parts)
    np.testing.assert_array_equal(parts[1].numpy(), [4, 5, 6, 7])
    m = rt.array(np.arange(16, dtype=np.float32).reshape(4, 4))
    grid = m.tiles(2, 2)
    assert len(grid) == 2 and len(grid[0]) == 2
    np.testing.assert_array_equal(grid[1][0].numpy(), [[8, 9], [12, 13]])


def test_dlpack_export_shares_memory(rt):
    a = rt.array(np.arange(6, dtype=np.float32))
    assert a.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(a)
    assert b.__array_interface__["data"][0] == a.host_address
    c = rt.from_dlpack(np.arange(3, dtype=np.int32))
    np.testing.assert_array_equal(c.numpy(), [0, 1, 2])


@pytest.mark.parametrize("bad", [np.array([1], np.float16), np.array([1, 2], np.float16).reshape(2, 1)])
def test_unsupported_dtypes_are_refused_by_name(rt, bad):
    with pytest.raises(ferry.UsageError, match="use .*int8..64, float32/64, complex64/128 or bool"):
        rt.array(bad)


@pytest.mark.parametrize("t", [np.bool_, np.int8, np.int16, np.uint16, np.uint32, np.uint64, np.complex64,
                               np.complex128])
def test_every_array_api_dtype_round_trips(rt, t):
    a = np.arange(6).reshape(2, 3).astype(t)
    b = rt.array(a)
    assert b.dtype == np.dtype(t) and b.numpy().dtype == np.dtype(t)
    np.testing.assert_array_equal(b.numpy(), a)
    assert rt.empty(4, t).numpy().dtype == np.dtype(t)


def test_scalar_and_bad_shapes_are_refused(rt):
    with pytest.raises(ferry.UsageError, match="at least one dimension"):
        rt.array(np.float32(3))
    with pytest.raises(ferry.UsageError):
        rt.empty((), np.float32)
    with pytest.raises(ferry.UsageError, match="negative"):
        rt.zeros((2, -1))
    with pytest.raises(ferry.UsageError, match="not one Ferry stores"):
        rt.empty(4, np.float16)


def test_repr_and_html(rt):
    a = rt.zeros((2, 3), np.float32, name="w")
    assert "shape=(2, 3)" in repr(a) and "float32" in repr(a)
    assert "ferry.Array" in a._repr_html_() and "w" in a._repr_html_()
    html = rt._repr_html_()
    assert "cpu" in html and "pinned pool" in html


def test_unified_arrays_work_as_host_arrays_without_a_gpu(rt):
    u = rt.unified((8, 8), np.float64, name="u")
    assert u.shape == (8, 8) and u.numpy().sum() == 0
    x = rt.array(np.ones((8, 8)))
    rt.axpy(x, u, 3.0)
    np.testing.assert_array_equal(u.numpy(), np.full((8, 8), 3.0))


def test_a_view_is_read_only_while_a_task_on_its_array_is_pending(rt):
    a = rt.array(np.ones(1024, np.float64))
    view = a.numpy()
    view[0] = 2.0  # before any task: writable
    rt.fill(a, 5.0)
    with pytest.raises(ValueError, match="read-only"):
        view[1] = 3.0  # would race with the fill
    fresh = a.numpy()  # acquired for writing: waits for the fill
    assert fresh.flags.writeable
    assert fresh[1] == 5.0
    fresh[1] = 7.0
    assert a.numpy()[1] == 7.0


def test_a_reading_task_also_holds_back_writable_views(rt):
    a = rt.array(np.ones(16, np.float32))
    b = rt.zeros(16, np.float32)
    view_a, view_b = a.numpy(), b.numpy()
    rt.copy(a, b)
    assert not view_a.flags.writeable, "writing the input of a pending copy would race with it"
    assert not view_b.flags.writeable
    untouched = rt.zeros(4, np.float32)
    other = untouched.numpy()
    rt.copy(a, b)
    assert other.flags.writeable, "a task on other arrays left this view alone"
    rt.wait()
    np.testing.assert_array_equal(b.numpy(), np.ones(16, np.float32))
