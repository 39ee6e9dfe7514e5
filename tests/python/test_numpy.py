"""ferry.numpy against NumPy: every operator and function on random inputs
(hypothesis), across tiles, dtypes, broadcasting and 0-size shapes.

Tolerances: exact for integers, bools and the float operations NumPy also
rounds once (+ - * / comparisons, casts); rtol 1e-6 (float32) / 1e-12
(float64) for transcendental functions, which use the C library like NumPy
but may differ in the last bits; reductions rtol 1e-10 against a float64
reference, because Ferry accumulates float32 in float64 where NumPy adds
pairwise in float32."""

import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import ferry  # noqa: E402
import ferry.numpy as fnp  # noqa: E402

# Every real dtype the array API standard requires.
DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float32,
          np.float64]
FLOATS = [np.float32, np.float64]
EXAMPLES = settings(max_examples=15, deadline=None, derandomize=True)


@pytest.fixture(scope="module", autouse=True)
def runtime(tiny_tile_runtime):
    return tiny_tile_runtime


def values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-20, 20, shape).astype(dtype)  # unsigned: wrapped, so large values too
    return (rng.standard_normal(shape) * 3).astype(dtype)


def check(got, want, rtol=0.0):
    assert isinstance(got, fnp.ndarray), type(got)
    want = np.asarray(want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g = got.numpy()
    if rtol and want.dtype.kind == "f":
        np.testing.assert_allclose(g, want, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, want)


def tol(dtype):
    return 1e-6 if np.dtype(dtype) == np.float32 else 1e-12


shapes2 = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=5)


@EXAMPLES
@given(shapes=shapes2, t1=st.sampled_from(DTYPES), t2=st.sampled_from(DTYPES), seed=st.integers(0, 100))
def test_arithmetic_matches_numpy(shapes, t1, t2, seed):
    a_np, b_np = values(t1, shapes.input_shapes[0], seed), values(t2, shapes.input_shapes[1], seed + 1)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = [("+", lambda x, y: x + y), ("*", lambda x, y: x * y), ("max", np.maximum), ("min", np.minimum),
                 ("<", lambda x, y: x < y), ("==", lambda x, y: x == y), (">=", lambda x, y: x >= y),
                 ("/", lambda x, y: x / y)]
        if not (t1 == np.bool_ and t2 == np.bool_):
            cases += [("-", lambda x, y: x - y), ("//", lambda x, y: x // y), ("%", lambda x, y: x % y)]
        for name, op in cases:
            want = op(a_np, b_np)
            check(op(a, b), want, rtol=1e-6 if name == "/" else 0)


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6), t=st.sampled_from(FLOATS),
       seed=st.integers(0, 100))
def test_float_functions_match_numpy(shape, t, seed):
    x_np = values(t, shape, seed)
    x = fnp.asarray(x_np)
    with np.errstate(all="ignore"):
        for name in ["exp", "log", "log1p", "sqrt", "sin", "cos", "tanh", "abs", "negative", "square", "sign",
                     "floor", "ceil", "isnan", "isfinite"]:
            check(getattr(fnp, name)(x), getattr(np, name)(x_np), rtol=tol(t) * 10)
        check(fnp.sigmoid(x), 1 / (1 + np.exp(-x_np)), rtol=tol(t) * 10)
        check(fnp.clip(x, -1, 2), np.clip(x_np, -1, 2))
        check(fnp.where(x > 0, x, 0.5), np.where(x_np > 0, x_np, 0.5))
        check(-x, -x_np)
        check(abs(x), abs(x_np))
        check(x ** 2, x_np ** 2, rtol=tol(t))


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6), t=st.sampled_from(DTYPES),
       to=st.sampled_from(DTYPES), seed=st.integers(0, 100))
def test_casts_and_integer_functions(shape, t, to, seed):
    x_np = values(t, shape, seed)
    if np.dtype(t).kind == "f" and np.dtype(to).kind == "u":
        x_np = np.abs(x_np)  # negative floats to unsigned integers: undefined in C and in the array API
    x = fnp.asarray(x_np)
    check(x.astype(to), x_np.astype(to))
    if t != np.bool_:
        check(fnp.abs(x), np.abs(x_np))
        check(fnp.sign(x), np.sign(x_np))
    with np.errstate(all="ignore"):
        check(fnp.exp(x.astype(np.float64)), np.exp(x_np.astype(np.float64)), rtol=1e-12)
    check(fnp.logical_not(x), np.logical_not(x_np))


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), t=st.sampled_from(DTYPES),
       keepdims=st.booleans(), seed=st.integers(0, 100), data=st.data())
def test_reductions_match_numpy(shape, t, keepdims, seed, data):
    x_np = values(t, shape, seed)
    x = fnp.asarray(x_np)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    rt = 1e-6 if t == np.float32 else 1e-10  # float32: one rounding of the float64 result
    # Ferry accumulates float32 in float64: the reference does the same, then
    # rounds to NumPy's result type.
    ref = x_np.astype(np.float64) if t == np.float32 else x_np

    def want(fn, **kw):
        typ = getattr(np, fn)(x_np, axis=axis, keepdims=keepdims, **kw).dtype
        return np.asarray(getattr(np, fn)(ref, axis=axis, keepdims=keepdims, **kw)).astype(typ)

    for name in ["sum", "prod", "min", "max", "any", "all"]:
        w = want(name)
        if name == "prod" and np.dtype(t).kind == "i":
            w = np.prod(x_np.astype(np.int64), axis=axis, keepdims=keepdims)
        check(getattr(fnp, name)(x, axis=axis, keepdims=keepdims), w, rtol=rt)
    if t != np.bool_:
        check(fnp.mean(x, axis=axis, keepdims=keepdims), want("mean"), rtol=rt)
        check(fnp.std(x, axis=axis, keepdims=keepdims), want("std"), rtol=rt)
        check(fnp.var(x, axis=axis, ddof=0, keepdims=keepdims), want("var"), rtol=rt)
        kd = keepdims if axis is not None else False
        check(fnp.argmin(x, axis=axis, keepdims=kd), np.argmin(x_np, axis=axis, keepdims=kd))
        check(fnp.argmax(x, axis=axis, keepdims=kd), np.argmax(x_np, axis=axis, keepdims=kd))


def test_reductions_of_empty_and_nan():
    e = fnp.zeros((0, 3))
    check(fnp.sum(e, axis=0), np.zeros(3))
    check(fnp.prod(e), np.float64(1))
    with pytest.raises(ValueError, match="zero-size"):
        fnp.max(e)
    x_np = np.array([1.0, np.nan, -2.0, np.nan])
    x = fnp.asarray(x_np)
    check(fnp.max(x), np.max(x_np))
    check(fnp.argmin(x), np.argmin(x_np))


@EXAMPLES
@given(m=st.integers(1, 9), k=st.integers(1, 9), n=st.integers(1, 9), t=st.sampled_from([np.float32, np.float64,
                                                                                        np.int64]),
       seed=st.integers(0, 100))
def test_matmul_dot_and_friends(m, k, n, t, seed):
    a_np, b_np = values(t, (m, k), seed), values(t, (k, n), seed + 1)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    r = 1e-5 if t == np.float32 else 1e-12
    check(a @ b, a_np @ b_np, rtol=r)
    check(fnp.matmul(a, b[:, 0]), a_np @ b_np[:, 0], rtol=r)
    check(fnp.dot(a[0], b), np.dot(a_np[0], b_np), rtol=r)
    check(fnp.vdot(a, a), np.vdot(a_np, a_np), rtol=r)
    check(a.T, a_np.T)
    check(fnp.tensordot(a, b, axes=1), np.tensordot(a_np, b_np, axes=1), rtol=r)
    batch_a, batch_b = values(t, (3, m, k), seed + 2), values(t, (3, k, n), seed + 3)
    check(fnp.asarray(batch_a) @ fnp.asarray(batch_b), batch_a @ batch_b, rtol=r)
    check(fnp.asarray(batch_a) @ b, batch_a @ b_np, rtol=r)


def test_relu_of_matmul_sums_like_numpy():
    x_np, w_np = values(np.float32, (40, 16), 1), values(np.float32, (16, 8), 2)
    x, w = fnp.asarray(x_np), fnp.asarray(w_np)
    got = float(fnp.maximum(x @ w, 0).sum())
    assert got == pytest.approx(float(np.maximum(x_np @ w_np, 0).sum(dtype=np.float64)), rel=1e-5)


def test_layout_operations():
    x_np = values(np.float64, (6, 4, 5), 3)
    x = fnp.asarray(x_np)
    check(x.reshape(24, 5), x_np.reshape(24, 5))
    check(x.reshape(-1), x_np.reshape(-1))
    check(x.reshape(4, 30), x_np.reshape(4, 30))
    check(fnp.transpose(x, (2, 0, 1)), np.transpose(x_np, (2, 0, 1)))
    check(x[1:4], x_np[1:4])
    check(x[:, 2], x_np[:, 2])
    check(x[..., ::2], x_np[..., ::2])
    check(x[2, 1, 3], x_np[2, 1, 3])
    check(x[None, 0], x_np[None, 0])
    check(fnp.concat([x, x[:2]]), np.concatenate([x_np, x_np[:2]]))
    check(fnp.concat([x, x], axis=2), np.concatenate([x_np, x_np], axis=2))
    check(fnp.stack([x[0], x[1]]), np.stack([x_np[0], x_np[1]]))
    check(fnp.stack([x[0], x[1]], axis=1), np.stack([x_np[0], x_np[1]], axis=1))
    check(fnp.expand_dims(x[0], 1), np.expand_dims(x_np[0], 1))
    check(fnp.broadcast_to(x[0, 0], (3, 5)), np.broadcast_to(x_np[0, 0], (3, 5)))
    with pytest.raises(NotImplementedError, match="basic indexing"):
        x[1.5]


def test_creation_functions():
    check(fnp.zeros((3, 4), dtype=np.int32), np.zeros((3, 4), np.int32))
    check(fnp.ones(7), np.ones(7))
    check(fnp.full((2, 3), 2.5, dtype=np.float32), np.full((2, 3), 2.5, np.float32))
    check(fnp.full((2,), True), np.full((2,), True))
    check(fnp.arange(10), np.arange(10))
    check(fnp.arange(2, 30, 3), np.arange(2, 30, 3))
    check(fnp.arange(0.5, 7.0, 0.25), np.arange(0.5, 7.0, 0.25))
    check(fnp.arange(5, dtype=np.float32), np.arange(5, dtype=np.float32))
    check(fnp.linspace(0, 1, 11), np.linspace(0, 1, 11), rtol=1e-15)
    check(fnp.linspace(-3, 5, 40, endpoint=False), np.linspace(-3, 5, 40, endpoint=False), rtol=1e-15)
    check(fnp.eye(4), np.eye(4))
    check(fnp.eye(3, 5, k=1, dtype=np.int64), np.eye(3, 5, k=1, dtype=np.int64))
    x = fnp.asarray(values(np.float32, (5, 2), 1))
    check(fnp.zeros_like(x), np.zeros((5, 2), np.float32))
    check(fnp.ones_like(x, dtype=np.int64), np.ones((5, 2), np.int64))
    check(fnp.full_like(x, 3), np.full((5, 2), 3, np.float32))
    check(fnp.asarray([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="float16"):
        fnp.asarray(np.zeros(3, np.float16))


def test_random_is_seeded_and_independent_of_tiles():
    a = fnp.random.default_rng(7).standard_normal((200, 30)).numpy()
    fnp.set_options(tile_bytes=1 << 20)
    try:
        b = fnp.random.default_rng(7).standard_normal((200, 30)).numpy()
    finally:
        fnp.set_options(tile_bytes=256)
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean()) < 0.05 and abs(a.std() - 1) < 0.05
    u = fnp.random.default_rng(1).random(5000).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    g = fnp.random.default_rng(3)
    assert not np.array_equal(g.random(10).numpy(), g.random(10).numpy())
    ints = fnp.random.default_rng(2).integers(3, 9, size=1000).numpy()
    assert ints.dtype == np.int64 and ints.min() == 3 and ints.max() == 8


def test_fused_equals_unfused():
    x_np, y_np = values(np.float32, (50, 7), 4), values(np.float32, (7,), 5)
    x, y = fnp.asarray(x_np), fnp.asarray(y_np)
    fused = fnp.tanh(x * 2 - y) + fnp.exp(-fnp.abs(x)) * fnp.sqrt(fnp.abs(y))
    # The same expression with every intermediate computed on its own.
    step = lambda v: fnp.compute(v)  # noqa: E731
    a = step(x * 2)
    b = step(a - y)
    c = step(fnp.tanh(b))
    d = step(fnp.exp(step(-step(fnp.abs(x)))))
    e = step(fnp.sqrt(step(fnp.abs(y))))
    unfused = step(c + step(d * e))
    np.testing.assert_array_equal(fused.numpy(), unfused.numpy())
    assert "fused2" in fnp.explain(fused)
    assert "ran on" in fnp.explain(unfused)


@pytest.mark.parametrize("pair", [(np.bool_, np.int32), (np.int32, np.int64), (np.int32, np.float32),
                                  (np.int64, np.float32), (np.float32, np.float64), (np.bool_, np.float32)])
def test_type_promotion_follows_the_array_api(pair):
    a, b = (fnp.asarray(np.ones(3, t)) for t in pair)
    assert (a + b).dtype == np.result_type(*pair)
    assert (a * 1).dtype == (np.ones(3, pair[0]) * 1).dtype
    assert (b + 1.5).dtype == (np.float64 if np.dtype(pair[1]).kind != "f" else pair[1])
    assert (a < b).dtype == np.bool_
    assert fnp.result_type(a, b) == np.result_type(*pair)


def test_numpy_calls_stay_in_ferry_or_say_what_they_copied():
    x_np = values(np.float64, (8, 3), 6)
    x = fnp.asarray(x_np)
    assert isinstance(np.exp(x), fnp.ndarray)
    check(np.exp(x), np.exp(x_np), rtol=1e-12)
    assert isinstance(np.sum(x, axis=0), fnp.ndarray)
    check(np.sum(x, axis=0), np.sum(x_np, axis=0), rtol=1e-12)
    check(np.add.reduce(x, axis=1), np.add.reduce(x_np, axis=1), rtol=1e-12)
    check(np.concatenate([x, x]), np.concatenate([x_np, x_np]))
    # What ferry.numpy lacks runs on a NumPy copy and says so.
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.fft\.fft"):
        np.testing.assert_allclose(np.fft.fft(x), np.fft.fft(x_np))
    with pytest.warns(fnp.HostCopyWarning, match=r"numpy\.cumsum"):
        np.testing.assert_array_equal(np.cumsum(x), np.cumsum(x_np))
    with pytest.raises(NotImplementedError, match="numpy.median"):
        fnp.median
    check(np.sort(x, axis=0), np.sort(x_np, axis=0))
    np.testing.assert_array_equal(np.asarray(x), x_np)
    np.testing.assert_array_equal(np.from_dlpack(x), x_np)
    check(fnp.from_dlpack(x_np), x_np)
    assert x.__array_namespace__() is fnp
    assert float(fnp.sum(x)) == pytest.approx(x_np.sum())
    assert "fnp.array(" in repr(x[0])


def test_linalg():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((6, 6))
    spd_np = m @ m.T + 6 * np.eye(6)
    spd = fnp.asarray(spd_np)
    check(fnp.linalg.cholesky(spd), np.linalg.cholesky(spd_np), rtol=1e-10)
    b_np = rng.standard_normal((6, 2))
    check(fnp.linalg.solve(spd, fnp.asarray(b_np)), np.linalg.solve(spd_np, b_np), rtol=1e-10)
    for ord_ in (None, 1, 2, np.inf, -np.inf, 0, 3):
        check(fnp.linalg.norm(spd[0], ord=ord_), np.linalg.norm(spd_np[0], ord=ord_), rtol=1e-12)
    for ord_ in (None, "fro", 1, np.inf):
        check(fnp.linalg.norm(spd, ord=ord_), np.linalg.norm(spd_np, ord=ord_), rtol=1e-12)
    check(fnp.linalg.norm(spd, axis=1), np.linalg.norm(spd_np, axis=1), rtol=1e-12)
    for ord_ in (2, -2, "nuc"):  # from the singular values
        check(fnp.linalg.norm(spd, ord=ord_), np.linalg.norm(spd_np, ord=ord_), rtol=1e-12)
    check(np.linalg.norm(spd, ord=2, keepdims=True), np.linalg.norm(spd_np, ord=2, keepdims=True), rtol=1e-12)
    stack_np = np.stack([spd_np, 2 * spd_np])
    check(fnp.linalg.matrix_norm(fnp.asarray(stack_np), ord="nuc"), np.linalg.matrix_norm(stack_np, ord="nuc"),
          rtol=1e-12)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="matmul"):
        fnp.ones((2, 3)) @ fnp.ones((2, 3))
    with pytest.raises(ValueError, match="broadcast"):
        fnp.ones((2, 3)) + fnp.ones((4,))
    with pytest.raises(ValueError, match="reshape"):
        fnp.ones(6).reshape(4, 2)
    with pytest.raises(TypeError):
        fnp.ones(3) + "text"


def test_fused_programs_become_cuda_kernels(runtime):
    # What a GPU placement submits: the program as CUDA source, read as a
    # kernel from source (its signature) here; NVRTC compiles it on the GPU's
    # host (tests/unit/fused_cuda_test.cpp compiles such sources).
    from ferry.numpy._engine import _cuda_fused
    k = _cuda_fused(runtime, "d=6,5 s1=0,1 x0 as:f64 x1 mul f64:0 maximum", ["float32", "float64"], "float64")
    params = k.kernel.info["params"]
    assert [(p["name"], p["kind"]) for p in params[:4]] == [("n", "integer"), ("y", "array"), ("x0", "array"),
                                                              ("x1", "array")]
    assert params[1]["mode"] == "write" and params[1]["dtypes"] == ["float64"]
    assert params[2]["mode"] == "read" and params[2]["dtypes"] == ["float32"]
    assert k.kernel.info["cuda"] and not k.kernel.info["cpu"]
    assert _cuda_fused(runtime, "d=6,5 s1=0,1 x0 as:f64 x1 mul f64:0 maximum", ["float32", "float64"],
                       "float64") is k  # one kernel per program


def test_folding_programs_become_a_cuda_fold_and_its_identity_fill(runtime):
    # A reduction placed on a GPU: y is read and written (it arrives holding
    # the fold's identity, which the source's second entry writes).
    from ferry.numpy._engine import _cuda_fused, _cuda_identity
    text = "d=6,5 y=0,1 f=max x0"
    fold = _cuda_fused(runtime, text, ["float32"], "float32", True)
    fill = _cuda_identity(runtime, text, ["float32"], "float32")
    assert fold.kernel.info["params"][1]["mode"] == "readwrite"
    assert [p["name"] for p in fill.kernel.info["params"][:3]] == ["n", "y", "grid_x"]
    assert fill.kernel.info["params"][1]["mode"] == "write"
    source = ferry._ferry._fused_cuda_source("d=9 y=0 f=add x0 as:f64", ["float32"], "float64", "e")
    assert "e_identity(long long n, double* __restrict__ y)" in source and "fnp_fold_block<0>(y, acc)" in source


@pytest.mark.gpu
def test_reductions_on_a_gpu(runtime):
    if ferry.cuda_device_count() == 0:
        pytest.skip("no CUDA GPU: " + (ferry._ferry.cuda_unavailable_reason() or "none found"))
    x_np = values(np.float32, (300, 7), 5)
    x = fnp.asarray(x_np)
    with fnp.using(runtime, on="gpu"):
        total, cols, rows = fnp.sum(x * 2), fnp.max(x, axis=0), fnp.min(x, axis=1)
        flags = fnp.any(x > 3, axis=0)
        fnp.compute(total, cols, rows, flags)
    assert float(total) == pytest.approx(float(np.sum(x_np.astype(np.float64) * 2)), rel=1e-10)
    np.testing.assert_array_equal(cols.numpy(), x_np.max(axis=0))
    np.testing.assert_array_equal(rows.numpy(), x_np.min(axis=1))
    np.testing.assert_array_equal(flags.numpy(), (x_np > 3).any(axis=0))


@pytest.mark.gpu
def test_fused_expression_on_a_gpu(runtime):
    if ferry.cuda_device_count() == 0:
        pytest.skip("no CUDA GPU: " + (ferry._ferry.cuda_unavailable_reason() or "none found"))
    x_np, y_np = values(np.float32, (300, 7), 3), values(np.float32, (7,), 4)
    x, y = fnp.asarray(x_np), fnp.asarray(y_np)
    with fnp.using(runtime, on="gpu"):
        z = fnp.tanh(x * 2 - y) + fnp.exp(-fnp.abs(x))
        got = z.numpy()
    np.testing.assert_allclose(got, np.tanh(x_np * 2 - y_np) + np.exp(-np.abs(x_np)), rtol=1e-5, atol=1e-6)
    assert "gpu" in fnp.explain(z)


def test_positions_in_arrays_of_rank_above_four():
    # Positions keep their axes whole while the others merge, so one or two
    # position axes fit in a program whatever the rank; random draws count
    # along one axis and view the counter in the array's shape.
    shape = (3, 2, 4, 2, 3, 5)
    x_np = values(np.float64, shape, 11)
    x = fnp.asarray(x_np)
    check(x + fnp.arange(5.0), x_np + np.arange(5.0))
    check(x * fnp.reshape(fnp.arange(4), (4, 1, 1, 1)), x_np * np.arange(4).reshape(4, 1, 1, 1))
    check(fnp.reshape(fnp.arange(720), shape), np.arange(720).reshape(shape))
    check(fnp.eye(3)[:, None, None, None, None, :] + x[:, :1, :1, :1, :1, :3],
          np.eye(3)[:, None, None, None, None, :] + x_np[:, :1, :1, :1, :1, :3])
    drawn = fnp.random.default_rng(3).random(shape).numpy()
    np.testing.assert_array_equal(drawn.reshape(-1), fnp.random.default_rng(3).random((720,)).numpy())
    # Above the programs' eight dimensions the counter is viewed in the shape.
    drawn = fnp.random.default_rng(3).random((2,) * 9).numpy()
    np.testing.assert_array_equal(drawn.reshape(-1), fnp.random.default_rng(3).random((512,)).numpy())


def test_broadcasts_alternating_on_up_to_eight_axes():
    # Every axis alternates between the operands, so none merge: the fused
    # programs take up to eight dimensions (the array API suite draws such).
    for a_shape, b_shape in (((2, 1, 3, 1, 2, 1), (1, 3, 1, 2, 1, 4)),
                             ((2, 1, 2, 1, 2, 1, 2, 1), (1, 3, 1, 3, 1, 2, 1, 2))):
        a_np, b_np = values(np.float64, a_shape, 1), values(np.float64, b_shape, 2)
        check(fnp.asarray(a_np) * fnp.asarray(b_np), a_np * b_np)
        check(fnp.asarray(a_np) <= fnp.asarray(b_np), a_np <= b_np)
    nine = (2, 1, 2, 1, 2, 1, 2, 1, 2)
    with pytest.raises(NotImplementedError, match="alternates across 9 dimensions"):
        (fnp.asarray(np.ones(nine)) + fnp.asarray(np.ones(tuple(3 - d for d in nine)))).numpy()


def test_cached_kernels_belong_to_their_runtime(runtime):
    # A runtime made after another is gone may get its id (the caches' key):
    # an entry made for another runtime is made anew, not reused (its
    # kernels died with their runtime).
    from ferry.numpy._tiles import per_runtime
    cache = {}
    made = []
    key = (id(runtime), "k")
    first = per_runtime(cache, key, runtime, lambda: made.append(1) or "first")
    assert per_runtime(cache, key, runtime, lambda: "again") == first == "first"
    with ferry.Runtime(workers=1, persist_perf_models=False) as other:
        assert per_runtime(cache, key, other, lambda: "other's") == "other's"
    x_np = values(np.float64, (9, 4), 12)
    for _ in range(3):  # host tasks in fresh runtimes, one after another
        with ferry.Runtime(workers=1, persist_perf_models=False) as rt, fnp.using(rt):
            check(fnp.asarray(x_np).T, x_np.T)
