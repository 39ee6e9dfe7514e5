"""ferry.numpy's gathers, reorderings, scans, set functions and item
assignment (take, integer and boolean index arrays, flip, sort, argsort,
cumulative_sum, unique_*, x[key] = value) against NumPy: exact, since they
only move elements (the float cumulative sum: rtol 1e-12)."""

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp


@pytest.fixture(scope="module", autouse=True)
def runtime(tiny_tile_runtime):
    return tiny_tile_runtime


def test_gathers_and_reorderings_match_numpy():
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((17, 5))
    x = fnp.asarray(x_np)
    idx_np = np.array([3, 0, 16, 3, -1])
    np.testing.assert_array_equal(fnp.take(x, fnp.asarray(idx_np), axis=0).numpy(), np.take(x_np, idx_np, axis=0))
    np.testing.assert_array_equal(fnp.take(x[:, 1], idx_np).numpy(), np.take(x_np[:, 1], idx_np))
    np.testing.assert_array_equal(x[fnp.asarray(idx_np)].numpy(), x_np[idx_np])
    np.testing.assert_array_equal(x[:, [4, 0]].numpy(), x_np[:, [4, 0]])
    mask_np = x_np[:, 0] > 0
    picked = x[fnp.asarray(mask_np)]
    assert picked.shape == x_np[mask_np].shape
    np.testing.assert_array_equal(picked.numpy(), x_np[mask_np])
    np.testing.assert_array_equal(x[x > 0].numpy(), x_np[x_np > 0])
    np.testing.assert_array_equal(fnp.flip(x, axis=0).numpy(), np.flip(x_np, axis=0))
    np.testing.assert_array_equal(fnp.flip(x).numpy(), np.flip(x_np))
    ties_np = rng.integers(0, 4, (6, 9))
    ties = fnp.asarray(ties_np)
    np.testing.assert_array_equal(fnp.sort(ties).numpy(), np.sort(ties_np))
    np.testing.assert_array_equal(fnp.sort(ties, axis=0, descending=True).numpy(), -np.sort(-ties_np, axis=0))
    np.testing.assert_array_equal(fnp.argsort(ties).numpy(), np.argsort(ties_np, kind="stable"))
    np.testing.assert_array_equal(fnp.argsort(ties, descending=True).numpy(),
                                  np.argsort(-ties_np, kind="stable"))
    got = fnp.cumulative_sum(ties, axis=1, include_initial=True)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), np.pad(np.cumsum(ties_np, axis=1), [(0, 0), (1, 0)]))
    np.testing.assert_allclose(fnp.cumulative_sum(x[:, 2]).numpy(), np.cumsum(x_np[:, 2]), rtol=1e-12)


def test_searchsorted_matches_numpy():
    sorted_np = np.array([1.0, 2.0, 2.0, 5.0, 9.0])
    values_np = np.array([[0.0, 2.0], [5.0, 10.0]])
    for side in ("left", "right"):
        got = fnp.searchsorted(fnp.asarray(sorted_np), fnp.asarray(values_np), side=side)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got.numpy(), np.searchsorted(sorted_np, values_np, side=side))
    shuffled = np.array([5.0, 1.0, 9.0, 2.0])
    order = np.argsort(shuffled)
    np.testing.assert_array_equal(
        fnp.searchsorted(fnp.asarray(shuffled), fnp.asarray([3.0]), sorter=fnp.asarray(order)).numpy(),
        np.searchsorted(shuffled, [3.0], sorter=order))
    with pytest.raises(ValueError, match="1-D"):
        fnp.searchsorted(fnp.zeros((2, 2)), fnp.zeros(1))


def test_bad_indices_are_named():
    x = fnp.arange(5.0)
    with pytest.raises(IndexError, match="integer or boolean"):
        x[fnp.asarray([0.5])]
    with pytest.raises(IndexError, match="take: indices must be integers"):
        fnp.take(x, fnp.asarray([1.0]))
    with pytest.raises(ferry.KernelError, match="out of bounds"):
        fnp.take(x, fnp.asarray([7])).numpy()


def test_item_assignment_gives_the_array_a_new_value():
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal((9, 4))
    x = fnp.asarray(x_np)
    before = x[:3]
    want = x_np.copy()
    x[x < 0] = 0.0  # a mask of x's shape: a fused where
    want[want < 0] = 0.0
    x[0] = 7
    want[0] = 7
    x[:, 1] = fnp.arange(9.0)
    want[:, 1] = np.arange(9.0)
    x[fnp.asarray([8, 2])] = fnp.asarray([[1.0, 2, 3, 4]])
    want[[8, 2]] = [[1.0, 2, 3, 4]]
    x[fnp.asarray(want[:, 2] > 0.5), 3] = -1
    want[want[:, 2] > 0.5, 3] = -1
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x.numpy(), want)
    # Arrays made from x before keep the old values: there are no views.
    np.testing.assert_array_equal(before.numpy(), x_np[:3])
    ints = fnp.zeros(4, dtype=np.int32)
    ints[1] = 2.9  # the value takes the array's type
    assert ints.dtype == np.int32
    np.testing.assert_array_equal(ints.numpy(), [0, 2, 0, 0])
    with pytest.raises(IndexError, match="index of type float"):
        x[1.5] = 0
    with pytest.raises(NotImplementedError, match="at most one index array"):
        x[fnp.asarray([0]), fnp.asarray([1])] = 0


def test_unique_functions_match_numpy():
    x_np = np.array([[3, 1, 3], [2, 1, 9]], dtype=np.int32)
    x = fnp.asarray(x_np)
    values, indices, inverse, counts = np.unique(x_np.reshape(-1), return_index=True, return_inverse=True,
                                                 return_counts=True)
    got = fnp.unique_all(x)
    assert got.values.dtype == np.int32 and got.counts.dtype == np.int64
    np.testing.assert_array_equal(got.values.numpy(), values)
    np.testing.assert_array_equal(got.indices.numpy(), indices)
    np.testing.assert_array_equal(got.inverse_indices.numpy(), inverse.reshape(x_np.shape))
    np.testing.assert_array_equal(got.counts.numpy(), counts)
    np.testing.assert_array_equal(fnp.unique_values(x).numpy(), values)
    np.testing.assert_array_equal(fnp.unique_counts(x).counts.numpy(), counts)
    np.testing.assert_array_equal(fnp.unique_inverse(x).inverse_indices.numpy(), inverse.reshape(x_np.shape))
    # NaNs are distinct values (the array API's rule).
    nans = fnp.unique_values(fnp.asarray([np.nan, 1.0, np.nan]))
    assert nans.shape == (3,)
    assert fnp.unique_values(fnp.zeros((0,))).shape == (0,)


def test_the_inspection_namespace():
    info = fnp.__array_namespace_info__()
    assert info.default_device() == "ferry" and info.devices() == ["ferry"]
    assert info.default_dtypes()["real floating"] == np.float64
    assert set(info.dtypes(kind="real floating")) == {"float32", "float64"}
    assert set(info.dtypes(kind=("bool", "integral"))) == {"bool", "int8", "int16", "int32", "int64", "uint8",
                                                           "uint16", "uint32", "uint64"}
    assert set(info.dtypes(kind="complex floating")) == {"complex64", "complex128"}
    assert info.capabilities()["boolean indexing"]
