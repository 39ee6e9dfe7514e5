"""scikit-learn fits on ferry.numpy arrays through the array API
(`array_api_dispatch=True`): PCA with the exact solvers ("full": linalg.svd,
"covariance_eigh": linalg.eigh) and LinearDiscriminantAnalysis (svd solver:
unique_*, svd, indexing) on Ferry arrays match the same fits on NumPy
arrays, and every fitted attribute is a Ferry array (the work stayed in
Ferry).

Tolerances: 1e-10 relative (float64) and 1e-4 (float32; LAPACK's float32
SVD against NumPy's, which runs the same LAPACK routine on a differently
accumulated centering) on components, explained variance, singular values,
means and the transform; svd_flip makes the signs of both fits
deterministic, so components are compared directly."""

import os

import numpy as np
import pytest

# scikit-learn refuses array API dispatch unless SciPy's own support is on;
# it is read when SciPy is first imported.
os.environ.setdefault("SCIPY_ARRAY_API", "1")
sklearn = pytest.importorskip("sklearn", reason="scikit-learn is installed by scripts/python-env.sh")
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402

import ferry  # noqa: E402
import ferry.numpy as fnp  # noqa: E402
from ferry.numpy._tiles import DEFAULT_TILE_BYTES  # noqa: E402

FITTED = ["components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_"]


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with ferry.Runtime(workers=2, persist_perf_models=False) as rt, fnp.using(rt):
        fnp.set_options(tile_bytes=4096)  # several tiles per input
        yield rt
        fnp.set_options(tile_bytes=DEFAULT_TILE_BYTES)


def data(dtype):
    rng = np.random.default_rng(0)
    # Correlated features with distinct variances, so components are well separated.
    latent = rng.standard_normal((300, 4)) * np.array([5.0, 3.0, 2.0, 1.0])
    mix = rng.standard_normal((4, 10))
    return (latent @ mix + 0.05 * rng.standard_normal((300, 10)) + 3.0).astype(dtype)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize("solver", ["full", "covariance_eigh"])
def test_pca_on_ferry_arrays_matches_the_numpy_fit(solver, dtype, rtol):
    x_np = data(dtype)
    want = PCA(n_components=3, svd_solver=solver).fit(x_np)
    with sklearn.config_context(array_api_dispatch=True):
        got = PCA(n_components=3, svd_solver=solver).fit(fnp.asarray(x_np))
        projected = got.transform(fnp.asarray(x_np))
    for name in FITTED:
        value = getattr(got, name)
        assert isinstance(value, fnp.ndarray), f"{name} is a {type(value).__name__}: the fit left Ferry"
        assert value.dtype == np.dtype(dtype), name
        reference = getattr(want, name)
        scale = np.abs(reference).max()
        np.testing.assert_allclose(value.numpy(), reference, rtol=rtol, atol=rtol * scale, err_msg=name)
    assert isinstance(projected, fnp.ndarray)
    reference = want.transform(x_np)
    np.testing.assert_allclose(projected.numpy(), reference, rtol=rtol, atol=rtol * np.abs(reference).max())
    assert got.n_components_ == want.n_components_ == 3
    assert float(got.noise_variance_) == pytest.approx(float(want.noise_variance_), rel=100 * rtol)


def test_randomized_and_variance_chosen_pca_on_ferry_arrays():
    # The randomized solver orthonormalises with linalg.qr; a float
    # n_components picks the count with cumulative_sum and searchsorted.
    x_np = data(np.float64)
    for make in (lambda: PCA(n_components=3, svd_solver="randomized", power_iteration_normalizer="QR",
                             random_state=0),
                 lambda: PCA(n_components=0.999, svd_solver="full")):
        want = make().fit(x_np)
        with sklearn.config_context(array_api_dispatch=True):
            got = make().fit(fnp.asarray(x_np))
        assert got.n_components_ == want.n_components_
        assert isinstance(got.components_, fnp.ndarray)
        np.testing.assert_allclose(got.components_.numpy(), want.components_, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(got.explained_variance_.numpy(), want.explained_variance_, rtol=1e-8)


def test_linear_discriminant_analysis_on_ferry_arrays_matches_the_numpy_fit():
    rng = np.random.default_rng(1)
    centers = np.array([[0.0, 0, 0, 0], [2, 1, 0, -1], [-1, 2, 1, 0]])
    x_np = np.concatenate([rng.standard_normal((60, 4)) + c for c in centers])
    y_np = np.repeat(np.array([3, 7, 9]), 60)  # labels that are not 0..k-1
    want = LinearDiscriminantAnalysis().fit(x_np, y_np)
    with sklearn.config_context(array_api_dispatch=True):
        got = LinearDiscriminantAnalysis().fit(fnp.asarray(x_np), fnp.asarray(y_np))
        labels = got.predict(fnp.asarray(x_np))
        proba = got.predict_proba(fnp.asarray(x_np))
    for name in ["classes_", "coef_", "intercept_", "means_", "priors_", "explained_variance_ratio_"]:
        value = getattr(got, name)
        assert isinstance(value, fnp.ndarray), f"{name} is a {type(value).__name__}: the fit left Ferry"
        np.testing.assert_allclose(value.numpy(), getattr(want, name), rtol=1e-10, atol=1e-12, err_msg=name)
    assert isinstance(labels, fnp.ndarray)
    np.testing.assert_array_equal(labels.numpy(), want.predict(x_np))
    np.testing.assert_allclose(proba.numpy(), want.predict_proba(x_np), rtol=1e-9, atol=1e-12)


def test_kmeans_reads_ferry_arrays_as_numpy_without_dispatch():
    # KMeans has no array API support in scikit-learn (1.9): its Lloyd
    # iterations are Cython over buffers, and its k-means++ start mixes the
    # NumPy centres it makes with X. Without dispatch it reads a Ferry array
    # through __array__, once, and fits as on NumPy.
    from sklearn.cluster import KMeans

    x_np = data(np.float64)
    init = x_np[[0, 100, 200]]
    want = KMeans(3, init=init, n_init=1).fit(x_np)
    with sklearn.config_context(array_api_dispatch=False):
        got = KMeans(3, init=init, n_init=1).fit(fnp.asarray(x_np))
        plus = KMeans(3, n_init=2, random_state=0).fit(fnp.asarray(x_np))
    np.testing.assert_array_equal(got.labels_, want.labels_)
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, rtol=1e-12)
    np.testing.assert_allclose(plus.cluster_centers_, KMeans(3, n_init=2, random_state=0).fit(x_np).cluster_centers_,
                               rtol=1e-12)
