"""ferry.numpy's element types against NumPy: every dtype the array API
standard requires (bool, int8..int64, uint8..uint64, float32, float64,
complex64, complex128): its promotion table, Python scalars, casts between
every pair, reductions, iinfo/finfo, complex arithmetic and the complex
cases of the elementwise functions, and abs(-0.0).

Each test runs twice: small arrays computed at once with NumPy ("eager")
and every operation as a fused program over 256-byte tiles ("fused").
Exact (assert_array_equal) for integers, bools, casts and complex + - ==;
complex products, quotients and functions within a few ulps, since NumPy's
complex loops may use FMA and its own formulas."""

import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import ferry.numpy as fnp  # noqa: E402

INTS = [np.int8, np.int16, np.int32, np.int64]
UINTS = [np.uint8, np.uint16, np.uint32, np.uint64]
REALS = [np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]
ALL = [np.bool_, *INTS, *UINTS, *REALS, *COMPLEX]
EXAMPLES = settings(max_examples=15, deadline=None, derandomize=True)
shapes2 = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=5)


@pytest.fixture(scope="module", autouse=True)
def runtime(eager_and_fused_runtime):
    return eager_and_fused_runtime


def values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    t = np.dtype(dtype)
    if t == np.bool_:
        return rng.random(shape) < 0.5
    if t.kind in "iu":
        info = np.iinfo(t)  # the whole range: wrapping arithmetic is exercised
        return rng.integers(int(info.min), int(info.max), shape, dtype=t, endpoint=True)
    if t.kind == "c":
        return (rng.standard_normal(shape) * 3 + 1j * rng.standard_normal(shape) * 3).astype(t)
    return (rng.standard_normal(shape) * 3).astype(t)


def check(got, want, rtol=0.0):
    assert isinstance(got, fnp.ndarray), type(got)
    want = np.asarray(want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g = got.numpy()
    if rtol and want.dtype.kind in "fc":
        np.testing.assert_allclose(g, want, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, want)


def ulps(dtype):
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def spec_promotion(a, b):
    """The array API standard's promotion table (None: left undefined)."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    if np.bool_ in (a, b):
        return None
    if a.kind in "iu" and b.kind in "iu":
        if a.kind == b.kind:
            return max(a, b, key=lambda t: t.itemsize)
        s, u = (a, b) if a.kind == "i" else (b, a)
        if s.itemsize > u.itemsize:
            return s
        return np.dtype(f"int{16 * u.itemsize}") if u.itemsize < 8 else None
    if a.kind in "fc" and b.kind in "fc":
        bits = max(np.finfo(a).bits, np.finfo(b).bits)
        return np.dtype(f"complex{2 * bits}" if "c" in (a.kind + b.kind) else f"float{bits}")
    return None  # mixed kinds


def test_every_dtype_is_exported_and_listed():
    names = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
             "complex64", "complex128"]
    for name in names:
        assert getattr(fnp, name) == np.dtype(name)
        x = fnp.asarray(np.zeros(3, dtype=name))
        assert x.dtype == np.dtype(name)
        assert x.numpy().dtype == np.dtype(name)
    assert sorted(fnp.__array_namespace_info__().dtypes()) == sorted(names)
    assert fnp.__array_namespace_info__().default_dtypes()["complex floating"] == fnp.complex128


@pytest.mark.parametrize("a", ALL)
@pytest.mark.parametrize("b", ALL)
def test_promotion_follows_the_standards_table(a, b):
    x, y = fnp.asarray(np.zeros(2, a)), fnp.asarray(np.ones(2, b))
    want = spec_promotion(a, b)
    if want is None:  # undefined by the standard: NumPy's answer
        want = np.result_type(a, b)
    assert fnp.result_type(x, y) == want
    assert fnp.result_type(a, b) == want
    if np.dtype(a) != np.bool_ or np.dtype(b) != np.bool_:
        assert (x + y).dtype == want
        check(x * y, np.zeros(2, a) * np.ones(2, b))


@pytest.mark.parametrize("t", ALL)
@pytest.mark.parametrize("scalar", [True, 3, -2, 300, 2.5, -1.5j])
def test_python_scalars_take_the_arrays_type(t, scalar):
    x_np = values(t, (5,), 1)
    x = fnp.asarray(x_np)
    for op in (lambda p, q: p + q, lambda p, q: q * p, lambda p, q: p == q):
        try:
            with np.errstate(all="ignore"):
                want = op(x_np, scalar)
        except (OverflowError, TypeError) as error:
            with pytest.raises(type(error)):
                op(x, scalar).numpy()
            continue
        check(op(x, scalar), want, rtol=ulps(want.dtype) if want.dtype.kind == "c" else 0)


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=7), t=st.sampled_from(ALL),
       to=st.sampled_from(ALL), seed=st.integers(0, 100))
def test_astype_between_every_pair(shape, t, to, seed):
    x_np = values(t, shape, seed)
    t, to = np.dtype(t), np.dtype(to)
    if t.kind in "fc" and to.kind in "iu":
        # Out-of-range float to integer casts are undefined (in C and in the array API): stay in range.
        info = np.iinfo(to)
        x_np = np.clip(np.abs(x_np.real) if to.kind == "u" else x_np.real, -100, 100).astype(t)
        assert info.max >= 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        want = x_np.astype(to)
    check(fnp.asarray(x_np).astype(to), want)


@EXAMPLES
@given(shapes=shapes2, t1=st.sampled_from(INTS + UINTS), t2=st.sampled_from(INTS + UINTS + [np.bool_]),
       seed=st.integers(0, 100))
def test_integer_arithmetic_wraps_like_numpy(shapes, t1, t2, seed):
    a_np, b_np = values(t1, shapes.input_shapes[0], seed), values(t2, shapes.input_shapes[1], seed + 1)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    with np.errstate(all="ignore"):
        for op in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x // y,
                   lambda x, y: x % y, np.maximum, np.minimum, lambda x, y: x < y, lambda x, y: x != y,
                   lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y):
            try:
                want = op(a_np, b_np)
            except TypeError:  # int64 & uint64 is float64: no bitwise operations
                with pytest.raises(TypeError):
                    op(a, b)
                continue
            check(op(a, b), want, rtol=1e-12 if want.dtype.kind == "f" else 0)
    check(~a, ~a_np)
    check(-a, -a_np)
    check(fnp.abs(a), np.abs(a_np))
    check(fnp.sign(a), np.sign(a_np))


@EXAMPLES
@given(shapes=shapes2, t1=st.sampled_from(COMPLEX + REALS), t2=st.sampled_from(COMPLEX),
       seed=st.integers(0, 100))
def test_complex_arithmetic_matches_numpy(shapes, t1, t2, seed):
    a_np, b_np = values(t1, shapes.input_shapes[0], seed), values(t2, shapes.input_shapes[1], seed + 1)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    r = ulps(np.result_type(t1, t2))
    check(a + b, a_np + b_np)
    check(a - b, a_np - b_np)
    check(a == b, a_np == b_np)
    check(a != b, a_np != b_np)
    check(a * b, a_np * b_np, rtol=r)
    check(a / b, a_np / b_np, rtol=r)
    check(fnp.where(fnp.real(b) > 0, a, b), np.where(b_np.real > 0, a_np, b_np))
    with pytest.raises(TypeError):
        fnp.maximum(a, b)
    with pytest.raises(TypeError):
        a < b  # noqa: B015


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6), t=st.sampled_from(COMPLEX),
       seed=st.integers(0, 100))
def test_complex_functions_match_numpy(shape, t, seed):
    x_np = values(t, shape, seed)
    x = fnp.asarray(x_np)
    r = ulps(t) * 10
    with np.errstate(all="ignore"):
        for name in ["exp", "log", "log1p", "sqrt", "sin", "cos", "tanh", "square", "sign", "expm1", "log2", "log10",
                     "abs", "negative", "positive", "reciprocal"]:
            check(getattr(fnp, name)(x), getattr(np, name)(x_np), rtol=r)
        for name in ["real", "imag", "conj", "isnan", "isfinite", "isinf"]:
            check(getattr(fnp, name)(x), getattr(np, name)(x_np))
        check(x ** 2, x_np ** 2, rtol=r)
        check(abs(x), abs(x_np), rtol=r)
    for name in ["floor", "ceil", "sigmoid"]:
        with pytest.raises(TypeError):
            getattr(fnp, name)(x)


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), t=st.sampled_from(ALL),
       keepdims=st.booleans(), seed=st.integers(0, 100), data=st.data())
def test_reductions_of_every_dtype(shape, t, keepdims, seed, data):
    x_np = values(t, shape, seed)
    x = fnp.asarray(x_np)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    kind = np.dtype(t).kind
    # Ferry adds floats in float64 (complex128), NumPy pairwise in the type
    # itself: the reference adds in the wide type too, then rounds.
    wide = x_np.astype(np.complex128 if kind == "c" else np.float64) if kind in "fc" else x_np
    with np.errstate(all="ignore"):
        for name in ["sum", "prod"] + (["min", "max"] if kind != "c" else []) + (["mean"] if kind in "fc" else []):
            typ = getattr(np, name)(x_np, axis=axis, keepdims=keepdims).dtype
            want = np.asarray(getattr(np, name)(wide, axis=axis, keepdims=keepdims)).astype(typ)
            check(getattr(fnp, name)(x, axis=axis, keepdims=keepdims), want, rtol=ulps(t) if kind in "fc" else 0)
    if kind in "iu":  # the mean of integers: float64, within rounding of the largest term
        got = fnp.mean(x, axis=axis, keepdims=keepdims)
        want = np.mean(x_np, axis=axis, keepdims=keepdims)
        assert got.dtype == want.dtype == np.float64
        scale = float(np.abs(x_np.astype(np.float64)).max())
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12 * scale)
    check(fnp.any(x, axis=axis), np.any(x_np, axis=axis))
    check(fnp.all(x, axis=axis), np.all(x_np, axis=axis))
    if kind == "c":
        with pytest.raises(TypeError):
            fnp.max(x)


@pytest.mark.parametrize("t", INTS + UINTS)
def test_iinfo(t):
    x = fnp.asarray(np.zeros(2, t))
    for info in (fnp.iinfo(t), fnp.iinfo(x), fnp.iinfo(x.dtype)):
        assert (info.min, info.max, info.bits) == (np.iinfo(t).min, np.iinfo(t).max, np.iinfo(t).bits)


@pytest.mark.parametrize("t", REALS + COMPLEX)
def test_finfo(t):
    x = fnp.asarray(np.zeros(2, t))
    want = np.finfo(t)
    for info in (fnp.finfo(t), fnp.finfo(x)):
        assert (info.eps, info.max, info.bits, info.dtype) == (want.eps, want.max, want.bits, want.dtype)
        # The array API's types: Python floats, also for float32 (NumPy's are NumPy scalars).
        assert all(type(v) is float for v in (info.eps, info.max, info.min, info.smallest_normal))


@pytest.mark.parametrize("t", REALS)
def test_abs_of_negative_zero_is_positive_zero(t):
    x_np = np.array([-0.0, 0.0, -1.5, -np.inf], dtype=t)
    got = fnp.abs(fnp.asarray(x_np)).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.abs(x_np)))
    np.testing.assert_array_equal(got, np.abs(x_np))


@pytest.mark.parametrize("t", ALL)
def test_all_and_any_of_nothing(t):
    e = fnp.zeros((0, 3), dtype=t)
    check(fnp.all(e), np.all(np.zeros((0, 3), t)))
    check(fnp.any(e), np.any(np.zeros((0, 3), t)))
    check(fnp.all(e, axis=0), np.all(np.zeros((0, 3), t), axis=0))
    check(fnp.all(fnp.equal(e, 0)), np.bool_(True))


@pytest.mark.parametrize("t", COMPLEX)
def test_vector_norm_of_complex_is_real(t):
    x_np = values(t, (4, 3), 5)
    x = fnp.asarray(x_np)
    for ord_ in (2, 1, np.inf):
        check(fnp.linalg.vector_norm(x, ord=ord_), np.linalg.vector_norm(x_np, ord=ord_), rtol=ulps(t) * 10)


@pytest.mark.parametrize("t", ALL)
def test_cumulative_sum_and_prod_types(t):
    x_np = values(t, (5,), 2)
    x = fnp.asarray(x_np)
    r = ulps(t) * 10 if np.dtype(t).kind in "fc" else 0
    with np.errstate(all="ignore"):
        check(fnp.cumulative_sum(x), np.cumulative_sum(x_np), rtol=r)
        check(fnp.cumulative_prod(x), np.cumulative_prod(x_np), rtol=r)


@pytest.mark.parametrize("t", INTS + UINTS + REALS + COMPLEX)
def test_vecdot_keeps_the_promoted_type(t):
    a_np, b_np = values(t, (3, 4), 3), values(t, (3, 4), 4)
    want = np.vecdot(a_np, b_np)
    r = ulps(t) * 10 if np.dtype(t).kind in "fc" else 0
    with np.errstate(all="ignore"):
        check(fnp.vecdot(fnp.asarray(a_np), fnp.asarray(b_np)), want, rtol=r)
    with pytest.raises(ValueError):
        fnp.vecdot(fnp.asarray(a_np), fnp.asarray(b_np[:, :3]))
