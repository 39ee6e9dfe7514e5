"""The array API 2024.12 additions against NumPy: count_nonzero,
cumulative_prod, diff, nextafter, reciprocal, integer array indexing with
several arrays, Python scalars on either side of a binary function, the
inspection namespace, and the layout and creation functions (moveaxis,
repeat, roll, tile, unstack, meshgrid, tril, triu, nonzero). Inputs span several tiles (tile_bytes=256)."""

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


def test_layout_functions_match_numpy(data):
    x_np, x = data
    cube_np = x_np.reshape(23, 3, 2)
    cube = fnp.asarray(cube_np)
    for source, destination in ((0, -1), ((0, 1), (2, 0)), (-1, 1)):
        np.testing.assert_array_equal(fnp.moveaxis(cube, source, destination).numpy(),
                                      np.moveaxis(cube_np, source, destination))
    for axis in (None, 0, 1):
        np.testing.assert_array_equal(fnp.repeat(x, 3, axis=axis).numpy(), np.repeat(x_np, 3, axis=axis))
        np.testing.assert_array_equal(fnp.roll(x, -5, axis=axis).numpy(), np.roll(x_np, -5, axis=axis))
    counts = np.arange(6) % 3
    np.testing.assert_array_equal(fnp.repeat(x, fnp.asarray(counts), axis=1).numpy(),
                                  np.repeat(x_np, counts, axis=1))
    np.testing.assert_array_equal(fnp.roll(x, (2, -1), axis=(0, 1)).numpy(), np.roll(x_np, (2, -1), axis=(0, 1)))
    for reps in ((2,), (2, 1, 3), ()):
        np.testing.assert_array_equal(fnp.tile(x, reps).numpy(), np.tile(x_np, reps))
    parts = fnp.unstack(cube, axis=1)
    assert len(parts) == 3
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p.numpy(), cube_np[:, i])
    with pytest.raises(IndexError):
        fnp.moveaxis(cube, 3, 0)
    with pytest.raises(ValueError):
        fnp.repeat(x, -1)


def test_expand_dims_out_of_range_is_an_index_error(data):
    _, x = data
    assert fnp.expand_dims(x, axis=-3).shape == (1, 23, 6)
    for axis in (3, -4):
        with pytest.raises(IndexError):
            fnp.expand_dims(x, axis=axis)


def test_creation_functions_match_numpy(data):
    x_np, x = data
    for k in (-2, 0, 3, 40):
        np.testing.assert_array_equal(fnp.tril(x, k=k).numpy(), np.tril(x_np, k))
        np.testing.assert_array_equal(fnp.triu(x, k=k).numpy(), np.triu(x_np, k))
    stack_np = x_np.reshape(2, 3, 23)
    np.testing.assert_array_equal(fnp.triu(fnp.asarray(stack_np)).numpy(), np.triu(stack_np))
    np.testing.assert_array_equal(fnp.tril(fnp.asarray(x_np > 0)).numpy(), np.tril(x_np > 0))
    a_np, b_np, c_np = np.arange(3), np.arange(4.0), np.arange(2, dtype=np.int8)
    for indexing in ("xy", "ij"):
        got = fnp.meshgrid(fnp.asarray(a_np), fnp.asarray(b_np), fnp.asarray(c_np), indexing=indexing)
        for g, w in zip(got, np.meshgrid(a_np, b_np, c_np, indexing=indexing)):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g.numpy(), w)
    assert fnp.eye(3, k=2**63 - 1).numpy().sum() == 0
    with pytest.raises(ValueError):
        fnp.tril(fnp.asarray([1, 2]))


def test_nonzero_matches_numpy(data):
    x_np, x = data
    for got, want in zip(fnp.nonzero(x), np.nonzero(x_np)):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(ValueError):
        fnp.nonzero(fnp.asarray(3.0))


def test_a_copy_keeps_its_value_when_the_original_is_assigned_to():
    x = fnp.asarray(np.zeros(4))
    y = fnp.asarray(x, copy=True)
    x[1] = 5.0
    np.testing.assert_array_equal(y.numpy(), np.zeros(4))
    np.testing.assert_array_equal(x.numpy(), [0, 5, 0, 0])
