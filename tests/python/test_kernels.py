"""Every built-in kernel against NumPy, on the CPU workers."""

import numpy as np
import pytest

import ferry

rng = np.random.default_rng(7)


@pytest.fixture(params=[np.float32, np.float64])
def dtype(request):
    return request.param


def tol(dtype):
    return dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def test_axpy_scal(rt, dtype):
    x, y = rng.random(1000).astype(dtype), rng.random(1000).astype(dtype)
    fx, fy = rt.array(x), rt.array(y)
    rt.axpy(fx, fy, 3.0)
    rt.scal(fy, 0.5)
    np.testing.assert_allclose(fy.numpy(), (y + 3 * x) * 0.5, **tol(dtype))


def test_dot_nrm2_sum_return_floats(rt, dtype):
    x, y = rng.random(500).astype(dtype), rng.random(500).astype(dtype)
    fx, fy = rt.array(x), rt.array(y)
    d = rt.dot(fx, fy)
    assert isinstance(d, float)
    np.testing.assert_allclose(d, np.dot(x.astype(np.float64), y), rtol=1e-6)
    np.testing.assert_allclose(rt.nrm2(fx), np.linalg.norm(x), rtol=1e-5)
    np.testing.assert_allclose(rt.sum(fx), x.sum(dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm(rt, dtype, ta, tb):
    opa, opb = rng.random((30, 40)).astype(dtype), rng.random((40, 20)).astype(dtype)
    a = np.ascontiguousarray(opa.T) if ta else opa
    b = np.ascontiguousarray(opb.T) if tb else opb
    c0 = rng.random((30, 20)).astype(dtype)
    fa, fb, fc = rt.array(a), rt.array(b), rt.array(c0)
    rt.gemm(fa, fb, fc, 2.0, 0.5, trans_a=ta, trans_b=tb)
    np.testing.assert_allclose(fc.numpy(), 2.0 * opa @ opb + 0.5 * c0, rtol=1e-4 if dtype == np.float32 else 1e-11)


def spd(n, dtype):
    m = rng.random((n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


def test_potrf_trsm_syrk(rt, dtype):
    a = spd(24, dtype)
    fa = rt.array(a)
    rt.potrf(fa)
    lower = np.tril(fa.numpy())
    np.testing.assert_allclose(lower @ lower.T, a, rtol=1e-4 if dtype == np.float32 else 1e-10)

    b = rng.random((10, 24)).astype(dtype)
    fb = rt.array(b)
    rt.trsm(fa, fb)
    np.testing.assert_allclose(fb.numpy(), b @ np.linalg.inv(lower).T, rtol=1e-3 if dtype == np.float32 else 1e-9)

    s = rng.random((24, 8)).astype(dtype)
    c = spd(24, dtype)
    fs, fc = rt.array(s), rt.array(c)
    rt.syrk(fs, fc)
    np.testing.assert_allclose(np.tril(fc.numpy()), np.tril(c - s @ s.T), rtol=1e-4 if dtype == np.float32 else 1e-10)


def test_potrf_of_a_non_spd_matrix_fails_as_kernel_error(rt):
    fa = rt.array(-np.eye(4))
    f = rt.potrf(fa)
    with pytest.raises(ferry.KernelError, match="potrf"):
        f.result()
    with pytest.raises(ferry.KernelError):
        rt.wait()


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_fill_copy_sum_every_dtype(rt, dt):
    x = rt.empty(100, dt)
    rt.fill(x, 3)
    y = rt.zeros(100, dt)
    rt.copy(x, y)
    np.testing.assert_array_equal(y.numpy(), np.full(100, 3, dt))
    assert rt.sum(y) == 300


OPS = {
    "copy": lambda v, a: v, "neg": lambda v, a: -v, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp,
    "log": np.log, "square": np.square, "relu": lambda v, a: np.maximum(v, 0),
    "sigmoid": lambda v, a: 1 / (1 + np.exp(-v)), "scale": lambda v, a: a * v,
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_map_every_op(rt, op, dtype):
    v = (rng.random(256) + 0.1).astype(dtype)
    if op in ("neg", "relu"):
        v = v - 0.5
    x, y = rt.array(v), rt.empty(256, dtype)
    rt.map(x, y, op, 2.5)
    f = OPS[op]
    expected = f(v, 2.5) if op in ("copy", "neg", "relu", "sigmoid", "scale") else f(v)
    np.testing.assert_allclose(y.numpy(), expected, **tol(dtype))


def test_generic_submit_and_explicit_access(rt):
    x, y = rt.array(np.ones(8)), rt.zeros(8, np.float64)
    rt.submit("axpy", ferry.read(x), ferry.readwrite(y), 4.0, name="by name")
    np.testing.assert_array_equal(y.numpy(), np.full(8, 4.0))
    info = rt.kernel("gemm").info
    assert [p["name"] for p in info["params"]][:3] == ["a", "b", "c"]
    assert "axpy" in rt.kernel_names()


def test_wrong_shape_and_dtype_are_caught_before_submission(rt):
    a, b = rt.zeros((3, 4)), rt.zeros((5, 6))
    c = rt.zeros((3, 6))
    with pytest.raises(ferry.UsageError, match="inner dimensions"):
        rt.gemm(a, b, c)
    with pytest.raises(ferry.UsageError, match="element type"):
        rt.axpy(rt.zeros(4, np.float32), rt.zeros(4, np.float64))
    with pytest.raises(ferry.UsageError, match="unknown|no kernel"):
        rt.submit("no_such_kernel", a)
    with pytest.raises(ferry.UsageError, match="rt.array"):
        rt.axpy(np.ones(4), rt.zeros(4))
    with pytest.raises(ferry.UsageError, match="not a place"):
        rt.axpy(rt.zeros(4), rt.zeros(4), on="moon")
    # nothing above ran, and the runtime still works
    x = rt.array(np.ones(4, np.float32))
    assert rt.sum(x) == 4.0


def test_a_3d_array_refused_by_gemm_is_named_as_3d(rt):
    a = rt.zeros((2, 3, 4))
    with pytest.raises(ferry.UsageError) as refused:
        rt.gemm(a, rt.zeros((4, 5)), rt.zeros((3, 3)))
    message = str(refused.value)
    assert "argument 1 'a' is a 3-D array of shape (2, 3, 4)" in message
    assert "6 x 4" not in message, "refused as the flattened matrix it is stored as"
    # A 3-D array submitted by kernel name still says how kernels see it.
    with pytest.raises(ferry.UsageError, match=r"3-D array of shape \(2, 3, 4\), which kernels see as 6 x 4"):
        rt.submit("gemm", a, rt.zeros((4, 5)), rt.zeros((3, 3)))
