"""Python's and NumPy's habits on ferry.numpy arrays (issue 33, items 3 and
4): missing names are AttributeErrors, methods take NumPy's positional
arguments, matplotlib sees the same data as from np.asarray(x), NumPy
functions ferry.numpy lacks run on a NumPy copy with a warning, and errors
raised inside tasks reach the caller with their own type."""

import os
import traceback
import warnings

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp


@pytest.fixture(scope="module", autouse=True)
def runtime(tiny_tile_runtime):
    return tiny_tile_runtime


def data(shape=(300,), seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- missing names ----

def test_a_missing_name_is_an_attribute_error_that_says_what_is_missing():
    assert hasattr(fnp, "float32")
    assert not hasattr(fnp, "float16")
    assert getattr(fnp, "median", None) is None
    with pytest.raises(AttributeError, match="does not implement numpy.median"):
        fnp.median  # noqa: B018
    with pytest.raises(NotImplementedError, match="does not implement numpy.median"):
        fnp.median  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        fnp.no_such_name  # noqa: B018


def test_estimators_that_duck_type_the_namespace_fit():
    os.environ.setdefault("SCIPY_ARRAY_API", "1")
    sklearn = pytest.importorskip("sklearn", reason="scikit-learn is installed by scripts/python-env.sh")
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    x_np = data((60, 4), 1)
    for scaler in (StandardScaler, MinMaxScaler):
        with sklearn.config_context(array_api_dispatch=True):
            got = scaler().fit(fnp.asarray(x_np)).transform(fnp.asarray(x_np))
        assert isinstance(got, fnp.ndarray)
        np.testing.assert_allclose(got.numpy(), scaler().fit_transform(x_np), rtol=1e-10, atol=1e-12)
    from sklearn.linear_model import Ridge

    y_np = x_np @ np.arange(1.0, 5.0) + 0.5
    with sklearn.config_context(array_api_dispatch=True):
        ridge = Ridge(alpha=1.0, solver="svd").fit(fnp.asarray(x_np), fnp.asarray(y_np))
    assert isinstance(ridge.coef_, fnp.ndarray)
    np.testing.assert_allclose(ridge.coef_.numpy(), Ridge(alpha=1.0, solver="svd").fit(x_np, y_np).coef_,
                               rtol=1e-10)


# ---- methods and formatting ----

def test_reduction_methods_take_numpy_positional_arguments():
    x_np = data((7, 5), 2)
    x = fnp.asarray(x_np)
    np.testing.assert_allclose(x.sum(0).numpy(), x_np.sum(0), rtol=1e-12)
    np.testing.assert_allclose(x.mean(1).numpy(), x_np.mean(1), rtol=1e-12)
    np.testing.assert_allclose(x.std(0, None, None, 1).numpy(), x_np.std(0, None, None, 1), rtol=1e-12)
    np.testing.assert_array_equal(x.argmax(1).numpy(), x_np.argmax(1))
    np.testing.assert_allclose(x.max(0, None, True).numpy(), x_np.max(0, None, True))
    with pytest.raises(NotImplementedError, match="out="):
        x.sum(0, None, np.empty(5))


def test_format_copy_and_iteration():
    x_np = data((4,), 3)
    x = fnp.asarray(x_np)
    assert f"{x.sum():.3f}" == f"{x_np.sum():.3f}"
    assert f"{x[1]:>10.2e}" == f"{x_np[1]:>10.2e}"
    assert f"{x}" == f"{x_np}"
    with pytest.raises(TypeError):
        f"{x:.3f}"
    y = x.copy()
    y[0] = 100.0
    assert float(y[0]) == 100.0 and float(x[0]) == x_np[0]
    with pytest.raises(TypeError, match="0-d"):
        iter(x.sum())
    assert [float(v) for v in x] == list(x_np)


def test_matplotlib_sees_the_data_numpy_sees():
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is installed by scripts/python-env.sh")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_np = data((300,), 4)
    x = fnp.asarray(x_np)
    image_np = data((12, 9), 5)
    fig, ax = plt.subplots()
    try:
        counts, edges, _ = ax.hist(x, bins=20)
        counts_np, edges_np, _ = ax.hist(x_np, bins=20)
        np.testing.assert_array_equal(counts, counts_np)
        np.testing.assert_array_equal(edges, edges_np)

        box, box_np = ax.boxplot(x), ax.boxplot(x_np)
        assert len(box["boxes"]) == len(box_np["boxes"]) == 1
        np.testing.assert_array_equal(box["medians"][0].get_ydata(), box_np["medians"][0].get_ydata())

        (line,), (line_np,) = ax.plot(x), ax.plot(x_np)
        np.testing.assert_array_equal(line.get_xydata(), line_np.get_xydata())

        image, image_ref = ax.imshow(fnp.asarray(image_np)), ax.imshow(image_np)
        np.testing.assert_array_equal(image.get_array(), image_ref.get_array())
    finally:
        plt.close(fig)


# ---- NumPy functions ferry.numpy lacks ----

def test_numpy_functions_ferry_lacks_run_on_a_host_copy_with_one_warning():
    x_np = data((40,), 6)
    x = fnp.asarray(x_np)
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.median.*float64\[40\]"):
        assert np.median(x) == np.median(x_np)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call is silent
        assert np.median(x) == np.median(x_np)
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.allclose"):
        assert np.allclose(x, x_np)
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.percentile"):
        np.testing.assert_array_equal(np.percentile(x, 30), np.percentile(x_np, 30))
    got = np.round(x, 2)  # ferry.numpy's own
    assert isinstance(got, fnp.ndarray)
    np.testing.assert_allclose(got.numpy(), np.round(x_np, 2))
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.unique"):
        np.testing.assert_array_equal(np.unique(fnp.asarray([3, 1, 3])), [1, 3])
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.cbrt"):  # a ufunc
        np.testing.assert_allclose(np.cbrt(x), np.cbrt(x_np))
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.add\.accumulate"):  # a ufunc method
        np.testing.assert_allclose(np.add.accumulate(x), np.add.accumulate(x_np))


# ---- errors keep their type ----

def user_line(error):
    """The last frame of the traceback that is not ferry's own."""
    frames = traceback.extract_tb(error.__traceback__)
    return [f for f in frames if "ferry" not in f.filename.replace("test_numpy_protocols", "")]


def test_an_index_error_in_a_task_arrives_as_an_index_error_naming_the_expression():
    x = fnp.arange(5.0)
    y = fnp.take(x, fnp.asarray([1, 10])) * 2  # the failing task feeds a fused one
    with pytest.raises(IndexError, match="out of bounds") as caught:
        y.numpy()
    error = caught.value
    assert isinstance(error, ferry.FerryError)
    assert "fnp.take" in str(error) and "test_numpy_protocols.py" in str(error)
    assert "fnp.take(x, fnp.asarray([1, 10]))" in str(error)  # the line that built it
    assert "Traceback" not in str(error) and error.__cause__ is None and error.__suppress_context__
    frames = traceback.extract_tb(error.__traceback__)
    assert frames[0].filename == __file__
    assert sum("ferry" in f.filename for f in frames) <= 1  # at most the entry point the user called


def test_linalg_errors_in_tasks_arrive_as_linalg_errors():
    singular = fnp.zeros((3, 3))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        fnp.linalg.solve(singular, fnp.ones(3)).numpy()
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        float(fnp.linalg.inv(singular).sum())
    not_positive = fnp.asarray(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        fnp.linalg.cholesky(not_positive).numpy()


def test_value_and_type_errors_in_tasks_keep_their_type():
    def boom(v):
        raise ValueError("a value the task refused")

    from ferry.numpy._builders import host
    with pytest.raises(ValueError, match="a value the task refused"):
        host("refuse", boom, [fnp.ones(3)], (3,), np.dtype(np.float64)).numpy()

    def wrong(v):
        raise TypeError("a type the task refused")

    with pytest.raises(TypeError, match="a type the task refused"):
        fnp.compute(host("refuse", wrong, [fnp.ones(3)], (3,), np.dtype(np.float64)))
    assert float(fnp.ones(3).sum()) == 3.0  # the runtime still works


@pytest.mark.parametrize("t", [np.int32, np.int64])
def test_integer_power_with_a_negative_exponent_raises_as_numpy_does(t):
    x = fnp.asarray(np.arange(1, 4, dtype=t))
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        np.arange(1, 4, dtype=t) ** -1
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        x ** -1
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        fnp.pow(x, np.array([1, -2, 1], dtype=t))
    np.testing.assert_array_equal((x ** 2).numpy(), np.arange(1, 4, dtype=t) ** 2)
    np.testing.assert_allclose((x ** -1.0).numpy(), np.arange(1, 4, dtype=t) ** -1.0)
