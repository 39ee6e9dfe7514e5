"""The array API 2024.12 additions against NumPy: count_nonzero,
cumulative_prod, diff, nextafter, reciprocal, integer array indexing with
several arrays, Python scalars on either side of a binary function, and the
inspection namespace. Inputs span several tiles (tile_bytes=256)."""

import numpy as np
import pytest

import ferry.numpy as fnp


@pytest.fixture(scope="module", autouse=True)
def runtime(tiny_tile_runtime):
    return tiny_tile_runtime


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    x_np = rng.integers(-2, 3, (23, 6)).astype(np.float64)
    return x_np, fnp.asarray(x_np)


def test_the_namespace_says_2024_12():
    assert fnp.__array_api_version__ == "2024.12"
    x = fnp.asarray([1.0])
    assert x.__array_namespace__() is fnp
    assert x.__array_namespace__(api_version="2024.12") is fnp
    with pytest.raises(ValueError):
        x.__array_namespace__(api_version="2099.12")


def test_count_nonzero_matches_numpy(data):
    x_np, x = data
    x_np[0, 0], x_np[1, 1] = np.nan, -0.0
    x = fnp.asarray(x_np)
    assert int(fnp.count_nonzero(x)) == np.count_nonzero(x_np)
    for axis in (0, 1, (0, 1)):
        got = fnp.count_nonzero(x, axis=axis, keepdims=True)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got.numpy(), np.count_nonzero(x_np, axis=axis, keepdims=True))
    np.testing.assert_array_equal(fnp.count_nonzero(fnp.asarray([True, False, True])).numpy(), 2)


def test_cumulative_prod_and_sum_match_numpy(data):
    x_np, x = data
    for axis in (0, 1):
        np.testing.assert_array_equal(fnp.cumulative_prod(x, axis=axis).numpy(), np.cumprod(x_np, axis=axis))
        np.testing.assert_array_equal(fnp.cumulative_prod(x, axis=axis, include_initial=True).numpy(),
                                      np.cumulative_prod(x_np, axis=axis, include_initial=True))
        np.testing.assert_array_equal(fnp.cumulative_sum(x, axis=axis, include_initial=True).numpy(),
                                      np.cumulative_sum(x_np, axis=axis, include_initial=True))
    ints = fnp.asarray(np.arange(1, 6, dtype=np.int32))
    assert fnp.cumulative_prod(ints).dtype == np.int64
    np.testing.assert_array_equal(fnp.cumulative_prod(ints).numpy(), [1, 2, 6, 24, 120])


def test_diff_matches_numpy(data):
    x_np, x = data
    for axis in (0, 1, -1):
        for n in (0, 1, 2):
            np.testing.assert_array_equal(fnp.diff(x, axis=axis, n=n).numpy(), np.diff(x_np, axis=axis, n=n))
    np.testing.assert_array_equal(fnp.diff(x, axis=0, prepend=1.5, append=x[:2]).numpy(),
                                  np.diff(x_np, axis=0, prepend=1.5, append=x_np[:2]))
    np.testing.assert_array_equal(fnp.diff(x, n=10).numpy(), np.diff(x_np, n=10))
    with pytest.raises(ValueError):
        fnp.diff(fnp.asarray(1.0))


def test_reciprocal_and_nextafter_match_numpy(data):
    x_np, x = data
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(fnp.reciprocal(x).numpy(), np.reciprocal(x_np))
    f32 = np.linspace(-1, 1, 50, dtype=np.float32)
    got = fnp.nextafter(fnp.asarray(f32), 2.0)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.numpy(), np.nextafter(f32, np.float32(2.0)))
    np.testing.assert_array_equal(fnp.nextafter(x, fnp.asarray(x_np[::-1])).numpy(), np.nextafter(x_np, x_np[::-1]))
    with pytest.raises(TypeError):
        fnp.reciprocal(fnp.asarray([1, 2]))


def test_integer_array_indexing_with_several_arrays(data):
    x_np, x = data
    i_np, j_np = np.array([0, 22, -1, 5]), np.array([[1], [5], [0]])
    np.testing.assert_array_equal(x[fnp.asarray(i_np), fnp.asarray(j_np)].numpy(), x_np[i_np, j_np])
    np.testing.assert_array_equal(x[i_np, 2].numpy(), x_np[i_np, 2])
    np.testing.assert_array_equal(x[[1, 2], [3, 4]].numpy(), x_np[[1, 2], [3, 4]])
    cube_np = np.arange(60).reshape(3, 4, 5)
    cube = fnp.asarray(cube_np)
    np.testing.assert_array_equal(cube[:, [0, 3], [4, 1]].numpy(), cube_np[:, [0, 3], [4, 1]])
    with pytest.raises(IndexError):
        x[fnp.asarray([0, 99]), fnp.asarray([0, 0])].numpy()


def test_python_scalars_on_either_side_of_binary_functions(data):
    x_np, x = data
    f32 = fnp.asarray(x_np.astype(np.float32))
    for fn in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "pow", "greater", "equal",
               "nextafter"):
        left, right = getattr(fnp, fn)(2.0, f32), getattr(fnp, fn)(f32, 2.0)
        assert left.dtype == right.dtype == getattr(np, fn)(np.float32(0), 2.0).dtype, fn
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(left.numpy(), getattr(np, fn)(np.float32(2.0), x_np.astype(np.float32)))
            np.testing.assert_array_equal(right.numpy(), getattr(np, fn)(x_np.astype(np.float32), np.float32(2.0)))


def test_inspection_namespace():
    info = fnp.__array_namespace_info__()
    assert info.default_device() in info.devices()
    assert fnp.asarray([1.0]).device == info.default_device()
    assert set(info.capabilities()) >= {"boolean indexing", "data-dependent shapes", "max dimensions"}
    assert info.default_dtypes(device=info.default_device())["real floating"] == fnp.float64
    assert set(info.dtypes(kind="real floating").values()) == {fnp.float32, fnp.float64}
    x = fnp.asarray([1.0, 2.0])
    assert x.to_device(info.default_device()) is x
    with pytest.raises(ValueError):
        x.to_device("tpu")
