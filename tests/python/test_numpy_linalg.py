"""ferry.numpy's decompositions (linalg.svd, eigh and qr: the gesdd, syevd
and geqrf built-in kernels) against NumPy.

Singular vectors and eigenvectors are unique only up to sign (and within
repeated values), so they are checked by what defines them: reconstruction
(rtol 1e-5 float32, 1e-12 float64, relative to the matrix's norm),
orthonormality, and agreement with NumPy's after fixing each vector's sign.
Singular values and eigenvalues are compared directly at the same
tolerances."""

import numpy as np
import pytest

import ferry
import ferry.numpy as fnp


@pytest.fixture(scope="module", autouse=True)
def runtime(tiny_tile_runtime):
    return tiny_tile_runtime


def tol(dtype):
    return 1e-5 if np.dtype(dtype) == np.float32 else 1e-12


def matrix(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def signs_fixed(vectors):
    """Each column scaled so its largest-magnitude entry is positive."""
    pick = np.argmax(np.abs(vectors), axis=0)
    return vectors * np.sign(vectors[pick, np.arange(vectors.shape[1])])


def assert_orthonormal_columns(q, rtol):
    np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), atol=10 * rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(40, 7), (7, 40), (12, 12), (1, 5), (5, 1)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_reconstructs_and_matches_numpy(shape, dtype, full):
    a_np = matrix(shape, dtype)
    u, s, vt = fnp.linalg.svd(fnp.asarray(a_np), full_matrices=full)
    want_u, want_s, want_vt = np.linalg.svd(a_np, full_matrices=full)
    assert (u.shape, s.shape, vt.shape) == (want_u.shape, want_s.shape, want_vt.shape)
    assert u.dtype == s.dtype == vt.dtype == np.dtype(dtype)
    u, s, vt = u.numpy().astype(np.float64), s.numpy().astype(np.float64), vt.numpy().astype(np.float64)
    rtol = tol(dtype)
    np.testing.assert_allclose(s, want_s, rtol=rtol, atol=rtol * want_s[0])
    assert np.all(np.diff(s) <= 0), "singular values must descend"
    k = s.shape[0]
    scale = np.linalg.norm(a_np.astype(np.float64))
    np.testing.assert_allclose((u[:, :k] * s) @ vt[:k], a_np, atol=10 * rtol * scale)
    assert_orthonormal_columns(u, rtol)
    assert_orthonormal_columns(vt.T, rtol)
    # The singular vectors of distinct singular values are NumPy's up to sign.
    np.testing.assert_allclose(signs_fixed(vt[:k].T), signs_fixed(want_vt[:k].T.astype(np.float64)),
                               atol=1e3 * rtol)


def test_svd_of_empty_and_integer_matrices():
    u, s, vt = fnp.linalg.svd(fnp.zeros((0, 3)))
    assert (u.shape, s.shape, vt.shape) == ((0, 0), (0,), (3, 3))
    np.testing.assert_array_equal(vt.numpy(), np.eye(3))
    a_np = np.arange(12, dtype=np.int64).reshape(4, 3)
    s = fnp.linalg.svdvals(fnp.asarray(a_np))
    assert s.dtype == np.float64
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(a_np, compute_uv=False), rtol=1e-12, atol=1e-12)
    # NumPy's function on a Ferry array stays in Ferry.
    u, s, vt = np.linalg.svd(fnp.asarray(a_np.astype(np.float64)), full_matrices=False)
    assert isinstance(s, fnp.ndarray)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 9, 30])
def test_eigh_matches_numpy(n, dtype):
    b = matrix((n, n), np.float64, seed=n)
    sym = (b + b.T).astype(dtype)
    # Only the lower triangle counts, as in NumPy: garbage above must not matter.
    garbage = sym + np.triu(np.full((n, n), 7.0, dtype), 1)
    w, v = fnp.linalg.eigh(fnp.asarray(garbage))
    want_w, want_v = np.linalg.eigh(garbage)
    assert w.dtype == v.dtype == np.dtype(dtype)
    w, v = w.numpy().astype(np.float64), v.numpy().astype(np.float64)
    rtol = tol(dtype)
    scale = np.abs(want_w).max()
    np.testing.assert_allclose(w, want_w, atol=10 * rtol * scale)
    np.testing.assert_allclose(sym @ v, v * w, atol=10 * rtol * scale)
    assert_orthonormal_columns(v, rtol)
    np.testing.assert_allclose(signs_fixed(v), signs_fixed(want_v.astype(np.float64)), atol=1e3 * rtol)
    np.testing.assert_allclose(fnp.linalg.eigvalsh(fnp.asarray(sym)).numpy(), want_w, rtol=10 * rtol,
                               atol=10 * rtol * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(30, 6), (6, 30), (9, 9), (1, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_matches_numpy(shape, dtype, mode):
    a_np = matrix(shape, dtype, seed=7)
    q, r = fnp.linalg.qr(fnp.asarray(a_np), mode=mode)
    want_q, want_r = np.linalg.qr(a_np, mode=mode)
    assert (q.shape, r.shape) == (want_q.shape, want_r.shape)
    assert q.dtype == r.dtype == np.dtype(dtype)
    q, r = q.numpy().astype(np.float64), r.numpy().astype(np.float64)
    rtol = tol(dtype)
    scale = np.linalg.norm(a_np.astype(np.float64))
    np.testing.assert_array_equal(r, np.triu(r))
    np.testing.assert_allclose(q @ r, a_np, atol=10 * rtol * scale)
    assert_orthonormal_columns(q, rtol)
    # Householder QR is unique up to the signs of R's rows (and Q's columns).
    k = min(shape)
    signs = np.sign(np.diag(r)[:k]) * np.sign(np.diag(want_r)[:k])
    np.testing.assert_allclose(r[:k] * signs[:, None], want_r[:k], atol=10 * rtol * scale)
    np.testing.assert_allclose(q[:, :k] * signs, want_q[:, :k], atol=100 * rtol)


@pytest.mark.parametrize("shape", [(12, 5), (5, 12)])
def test_pinv_and_inv_match_numpy(shape):
    a_np = matrix(shape, np.float64, seed=8)
    np.testing.assert_allclose(fnp.linalg.pinv(fnp.asarray(a_np)).numpy(), np.linalg.pinv(a_np), atol=1e-12)
    # A rank-deficient matrix: the cut-off drops the zero singular value.
    low = a_np[:, :2] @ a_np[:2, :] if shape[0] > shape[1] else a_np[:2, :].T @ a_np[:2, :]
    np.testing.assert_allclose(fnp.linalg.pinv(fnp.asarray(low)).numpy(), np.linalg.pinv(low), atol=1e-10)
    square = a_np[:5, :5] + 5 * np.eye(5)
    got = np.linalg.inv(fnp.asarray(square))
    assert isinstance(got, fnp.ndarray)
    np.testing.assert_allclose(got.numpy(), np.linalg.inv(square), rtol=1e-12, atol=1e-14)


def test_decompositions_refuse_what_they_do_not_cover():
    with pytest.raises(np.linalg.LinAlgError):
        fnp.linalg.svd(fnp.zeros((3,)))
    with pytest.raises(ValueError, match="square"):
        fnp.linalg.eigh(fnp.zeros((2, 3)))
    with pytest.raises(NotImplementedError, match="UPLO"):
        np.linalg.eigh(fnp.eye(3), UPLO="U")
    with pytest.raises(NotImplementedError, match="mode='r'"):
        np.linalg.qr(fnp.eye(3), mode="r")
    with pytest.warns(fnp.HostCopyWarning, match="numpy.linalg.eigvals"):
        np.testing.assert_array_equal(np.linalg.eigvals(fnp.eye(3)), [1.0, 1.0, 1.0])
    got = np.linalg.det(fnp.eye(3))  # ferry.numpy's own
    assert isinstance(got, fnp.ndarray) and float(got) == 1.0


def test_the_kernels_directly_and_their_shape_checks(runtime):
    a_np = matrix((6, 4), np.float64, seed=5)
    a = runtime.array(a_np)
    s, u, vt = runtime.empty((4,), np.float64), runtime.empty((6, 4), np.float64), runtime.empty((4, 4), np.float64)
    runtime.gesdd(a, s, u, vt).result()
    np.testing.assert_allclose((u.numpy() * s.numpy()) @ vt.numpy(), a_np, atol=1e-12)
    np.testing.assert_array_equal(a.numpy(), a_np)  # a is only read
    with pytest.raises(ferry.UsageError, match="u is 6 x 4 but must be 6 x 6"):
        runtime.gesdd(a, s, u, vt, full_matrices=True)
    with pytest.raises(ferry.UsageError, match="s is .* must hold 4 elements"):
        runtime.gesdd(a, runtime.empty((3,), np.float64), u, vt)
    with pytest.raises(ferry.UsageError, match="element type"):
        runtime.gesdd(a, runtime.empty((4,), np.float32), u, vt)
    sym = a_np.T @ a_np
    w, v = runtime.empty((4,), np.float64), runtime.empty((4, 4), np.float64)
    runtime.syevd(runtime.array(sym), w, v).result()
    np.testing.assert_allclose(sym @ v.numpy(), v.numpy() * w.numpy(), atol=1e-10)
    with pytest.raises(ferry.UsageError, match="a is 6 x 4; it must be square"):
        runtime.syevd(a, w, v)


def test_nan_makes_the_decomposition_task_fail():
    bad = np.eye(4)
    bad[1, 2] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="gesdd") as caught:
        fnp.linalg.svd(fnp.asarray(bad))[1].numpy()
    assert isinstance(caught.value, ferry.KernelError)
    # The runtime keeps working.
    np.testing.assert_allclose(fnp.linalg.svdvals(fnp.eye(3)).numpy(), np.ones(3))


def test_svd_and_eigh_on_a_remote_ferryd(server):
    a_np = matrix((30, 6), np.float64, seed=3)
    with ferry.Runtime(remotes=[server.address], token=server.token, workers=1) as rt, \
            fnp.using(rt, on="remote"):
        s = fnp.linalg.svdvals(fnp.asarray(a_np))
        w = fnp.linalg.eigvalsh(fnp.asarray(a_np.T @ a_np))
        np.testing.assert_allclose(s.numpy(), np.linalg.svd(a_np, compute_uv=False), rtol=1e-12)
        np.testing.assert_allclose(w.numpy(), np.linalg.eigvalsh(a_np.T @ a_np), rtol=1e-10)
        assert "remote:" in fnp.explain(s)
        assert rt.remote_stats(server.address)["server_tasks"] > 0


@pytest.mark.gpu
def test_svd_and_eigh_on_a_gpu(runtime):
    if ferry.cuda_device_count() == 0:
        pytest.skip("no CUDA GPU: " + (ferry._ferry.cuda_unavailable_reason() or "none found"))
    for shape in ((40, 7), (7, 40)):
        a_np = matrix(shape, np.float64, seed=4)
        with fnp.using(runtime, on="gpu"):
            u, s, vt = fnp.linalg.svd(fnp.asarray(a_np), full_matrices=False)
            u, s, vt = u.numpy(), s.numpy(), vt.numpy()
        np.testing.assert_allclose(s, np.linalg.svd(a_np, compute_uv=False), rtol=1e-10)
        np.testing.assert_allclose((u * s) @ vt, a_np, atol=1e-10)
    sym = a_np @ a_np.T
    with fnp.using(runtime, on="gpu"):
        w, v = fnp.linalg.eigh(fnp.asarray(sym))
        w, v = w.numpy(), v.numpy()
    np.testing.assert_allclose(sym @ v, v * w, atol=1e-9 * np.abs(w).max())


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.complex64])
def test_stacks_and_complex_matrices_match_numpy(dtype):
    rng = np.random.default_rng(9)
    a_np = rng.standard_normal((3, 4, 4)) + 4 * np.eye(4)
    if np.dtype(dtype).kind == "c":
        a_np = a_np + 1j * rng.standard_normal((3, 4, 4))
    a_np = a_np.astype(dtype)
    sym = a_np @ np.conj(np.swapaxes(a_np, -1, -2)) + 4 * np.eye(4)
    a, s = fnp.asarray(a_np), fnp.asarray(sym)
    r = 1e-4 if dtype == np.complex64 else 1e-10
    close = lambda got, want: np.testing.assert_allclose(got.numpy(), want, rtol=r, atol=r)  # noqa: E731
    close(fnp.linalg.svdvals(a), np.linalg.svd(a_np, compute_uv=False))
    u, sv, vh = fnp.linalg.svd(a, full_matrices=False)
    close(u @ (sv[..., None] * vh), a_np)
    close(fnp.linalg.eigvalsh(s), np.linalg.eigvalsh(sym))
    close(fnp.linalg.cholesky(s), np.linalg.cholesky(sym))
    close(fnp.linalg.inv(a), np.linalg.inv(a_np))
    q, rr = fnp.linalg.qr(a)
    close(q @ rr, a_np)
    close(fnp.linalg.solve(a, a), np.broadcast_to(np.eye(4), (3, 4, 4)))
    close(fnp.linalg.pinv(a), np.linalg.pinv(a_np))
    close(fnp.linalg.det(a), np.linalg.det(a_np))
    sign, logabs = fnp.linalg.slogdet(a)
    close(sign, np.linalg.slogdet(a_np)[0])
    close(logabs, np.linalg.slogdet(a_np)[1])
    close(fnp.matmul(a, a), a_np @ a_np)
    close(fnp.linalg.matrix_norm(a, ord=2), np.linalg.matrix_norm(a_np, ord=2))


def test_matmul_broadcasts_batches_and_tensordot_takes_any_axes():
    rng = np.random.default_rng(4)
    x_np, y_np = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 2))
    np.testing.assert_allclose(fnp.matmul(fnp.asarray(x_np), fnp.asarray(y_np)).numpy(), x_np @ y_np)
    np.testing.assert_allclose(fnp.matmul(fnp.asarray(y_np[0, :, 0]), fnp.asarray(y_np)).numpy(),
                               y_np[0, :, 0] @ y_np)
    np.testing.assert_allclose(fnp.tensordot(fnp.asarray(x_np), fnp.asarray(y_np), axes=([3], [1])).numpy(),
                               np.tensordot(x_np, y_np, axes=([3], [1])))
    np.testing.assert_allclose(fnp.tensordot(fnp.asarray(x_np), fnp.asarray(y_np), axes=0).numpy(),
                               np.tensordot(x_np, y_np, axes=0))
    with pytest.raises(ValueError):
        fnp.tensordot(fnp.asarray(x_np), fnp.asarray(y_np), axes=([3], [0]))


def test_the_2023_linalg_functions_match_numpy():
    rng = np.random.default_rng(6)
    a_np = rng.integers(-3, 4, (2, 3, 3))
    a = fnp.asarray(a_np)
    np.testing.assert_array_equal(fnp.linalg.diagonal(a, offset=1).numpy(), np.diagonal(a_np, 1, -2, -1))
    got = fnp.linalg.trace(a, offset=-1)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), np.trace(a_np, -1, -2, -1))
    np.testing.assert_array_equal(fnp.linalg.matrix_power(a, 3).numpy(), np.linalg.matrix_power(a_np, 3))
    np.testing.assert_array_equal(fnp.linalg.matrix_rank(a).numpy(), np.linalg.matrix_rank(a_np))
    np.testing.assert_allclose(fnp.linalg.det(a).numpy(), np.linalg.det(a_np))
    v_np, w_np = rng.standard_normal((4, 3)), rng.standard_normal((3,))
    np.testing.assert_allclose(fnp.linalg.cross(fnp.asarray(v_np), fnp.asarray(w_np)).numpy(), np.cross(v_np, w_np))
    np.testing.assert_allclose(fnp.linalg.outer(fnp.asarray(w_np), fnp.asarray(w_np)).numpy(), np.outer(w_np, w_np))
    with pytest.raises(ValueError):
        fnp.linalg.cross(fnp.asarray(v_np[:, :2]), fnp.asarray(v_np[:, :2]))
    with pytest.raises(ValueError):
        fnp.linalg.outer(fnp.asarray(v_np), fnp.asarray(w_np))
    with pytest.raises(ValueError):
        fnp.linalg.diagonal(fnp.asarray(w_np))


def test_a_stack_is_factored_once_for_all_its_outputs(monkeypatch):
    calls = []
    real_svd = np.linalg.svd

    def counting_svd(*args, **kwargs):
        calls.append(1)
        return real_svd(*args, **kwargs)

    monkeypatch.setattr(np.linalg, "svd", counting_svd)
    a_np = matrix((2, 5, 3), np.float64, seed=8)
    u, s, vh = fnp.linalg.svd(fnp.asarray(a_np), full_matrices=False)
    fnp.compute(u, s, vh)
    assert len(calls) == 1
    np.testing.assert_allclose((u @ (s[..., None] * vh)).numpy(), a_np, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 2, 2), (2, 0, 3), (0, 0)])
def test_norms_of_empty_matrices_match_numpy(shape):
    # NumPy's max-norms start at 0 (an empty inf-norm is 0); min-norms of
    # nothing raise ValueError, as min does; a batch of no matrices is empty.
    x_np = np.zeros(shape)
    x = fnp.asarray(x_np)
    for ord_ in (np.inf, -np.inf, 1, -1, "fro"):
        try:
            want = np.linalg.matrix_norm(x_np, ord=ord_)
        except ValueError:
            with pytest.raises(ValueError):
                fnp.linalg.matrix_norm(x, ord=ord_)
            continue
        np.testing.assert_array_equal(fnp.linalg.matrix_norm(x, ord=ord_).numpy(), want)
    np.testing.assert_array_equal(fnp.linalg.vector_norm(x, ord=np.inf).numpy(),
                                  np.linalg.vector_norm(x_np, ord=np.inf))
    if shape[-1]:  # reduced along a non-empty axis: an empty result, not an error
        got = fnp.min(x, axis=-1)
        assert got.shape == np.min(x_np, axis=-1).shape
        assert got.numpy().shape == got.shape
