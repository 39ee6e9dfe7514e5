"""The elementwise functions the array API 2024.12 added beyond ferry.numpy's
first set, against NumPy: tan, the inverse and hyperbolic functions (real
and complex), trunc, round, signbit, atan2, copysign, hypot, logaddexp and
the bit shifts, with the special values (NaN, +-inf, signed zeros) among
the inputs. Every one is a fused instruction: each test runs with small
arrays kept in this process ("eager") and as fused programs over 256-byte
tiles ("fused")."""

import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import ferry.numpy as fnp  # noqa: E402

REALS = [np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
EXAMPLES = settings(max_examples=15, deadline=None, derandomize=True)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e30]
UNARY = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
         "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "expm1": np.expm1,
         "log2": np.log2, "log10": np.log10}
BINARY = {"atan2": np.arctan2, "copysign": np.copysign, "hypot": np.hypot, "logaddexp": np.logaddexp}


@pytest.fixture(scope="module", autouse=True)
def runtime(eager_and_fused_runtime):
    return eager_and_fused_runtime


def reals(t, shape, seed):
    """Normal values with the special ones sprinkled in."""
    rng = np.random.default_rng(seed)
    v = np.asarray(rng.standard_normal(shape) * 2)
    special = np.asarray(rng.random(shape) < 0.3)
    v[special] = rng.choice(SPECIAL, int(special.sum()))
    return v.astype(t)


def check(got, want, rtol):
    want = np.asarray(want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g = got.numpy()
    np.testing.assert_allclose(g, want, rtol=rtol, atol=0, equal_nan=True)
    # Signed zeros and infinities where NumPy has them, exactly.
    exact = np.isinf(want) | (want == 0) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    np.testing.assert_array_equal(np.signbit(g[exact]), np.signbit(want[exact]))


def rtol(t):
    return 1e-5 if np.dtype(t) in (np.float32, np.complex64) else 1e-13


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6), t=st.sampled_from(REALS),
       seed=st.integers(0, 100))
def test_real_functions_match_numpy_with_special_values(shape, t, seed):
    x_np = reals(t, shape, seed)
    x = fnp.asarray(x_np)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, f in UNARY.items():
            check(getattr(fnp, name)(x), f(x_np), rtol(t))
        check(fnp.trunc(x), np.trunc(x_np), 0)
        check(fnp.round(x), np.round(x_np), 0)
    np.testing.assert_array_equal(fnp.signbit(x).numpy(), np.signbit(x_np))


@EXAMPLES
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=5),
       t=st.sampled_from(REALS), seed=st.integers(0, 100))
def test_two_argument_functions_match_numpy(shapes, t, seed):
    a_np, b_np = reals(t, shapes.input_shapes[0], seed), reals(t, shapes.input_shapes[1], seed + 1)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, f in BINARY.items():
            check(getattr(fnp, name)(a, b), f(a_np, b_np), rtol(t))
            check(getattr(fnp, name)(a, 2.0), f(a_np, t(2.0)), rtol(t))


@EXAMPLES
@given(shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=6), t=st.sampled_from(COMPLEX),
       seed=st.integers(0, 100))
def test_complex_functions_match_numpy(shape, t, seed):
    rng = np.random.default_rng(seed)
    x_np = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(t)
    x = fnp.asarray(x_np)
    for name, f in UNARY.items():
        got = getattr(fnp, name)(x)
        assert got.dtype == t
        np.testing.assert_allclose(got.numpy(), f(x_np), rtol=rtol(t) * 10, atol=rtol(t) * 10)
    np.testing.assert_array_equal(fnp.round(fnp.asarray(x_np * 4)).numpy(), np.round(x_np * 4))
    for name in ("trunc", "signbit"):
        with pytest.raises(TypeError):
            getattr(fnp, name)(x)
    with pytest.raises(TypeError):
        fnp.atan2(x, x)


@EXAMPLES
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, min_side=0, max_side=5),
       t=st.sampled_from(INTS), seed=st.integers(0, 100))
def test_shifts_match_numpy_including_counts_past_the_width(shapes, t, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(t)
    a_np = rng.integers(int(info.min), int(info.max), shapes.input_shapes[0], dtype=t, endpoint=True)
    b_np = rng.integers(0, min(int(info.max), 70), shapes.input_shapes[1], dtype=t, endpoint=True)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    np.testing.assert_array_equal((a << b).numpy(), a_np << b_np)
    np.testing.assert_array_equal((a >> b).numpy(), a_np >> b_np)
    np.testing.assert_array_equal(fnp.bitwise_left_shift(a, 3).numpy(), np.left_shift(a_np, t(3)))
    np.testing.assert_array_equal(fnp.bitwise_right_shift(a, b).dtype, t)
    np.testing.assert_array_equal((1 << b).numpy(), np.left_shift(t(1), b_np))


def test_integers_keep_their_type_under_rounding_and_become_floats_elsewhere():
    i_np = np.array([-7, 0, 9], dtype=np.int32)
    i = fnp.asarray(i_np)
    for name in ("trunc", "round"):
        got = getattr(fnp, name)(i)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got.numpy(), i_np)
    assert fnp.atan2(i, i).dtype == np.float64
    np.testing.assert_allclose(fnp.tan(i).numpy(), np.tan(i_np))
    np.testing.assert_array_equal(fnp.signbit(i).numpy(), [True, False, False])
    flags = fnp.asarray(np.array([True, False, True]))
    for name in ("floor", "ceil", "trunc"):  # NumPy's float16 is float32 here; not an error inside a task
        got = getattr(fnp, name)(flags)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.numpy(), [1.0, 0.0, 1.0])
    with pytest.raises(TypeError):
        fnp.bitwise_left_shift(fnp.asarray([1.0]), 1)
    with pytest.raises(TypeError):
        fnp.bitwise_right_shift(fnp.asarray([True]), True)


def test_round_halves_to_even_and_takes_decimals():
    x_np = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1.2345])
    x = fnp.asarray(x_np)
    np.testing.assert_array_equal(fnp.round(x).numpy(), np.round(x_np))
    for decimals in (2, -1):
        np.testing.assert_array_equal(fnp.round(x * 100, decimals=decimals).numpy(), np.round(x_np * 100, decimals))
    i_np = np.array([15, 25, -35, 2**62 + 5], dtype=np.int64)
    np.testing.assert_array_equal(fnp.round(fnp.asarray(i_np), decimals=-1).numpy(), np.round(i_np, -1))
    np.testing.assert_array_equal(fnp.round(fnp.asarray(i_np), decimals=3).numpy(), i_np)


def test_numpy_ufuncs_dispatch_to_the_new_functions():
    x = fnp.asarray(np.linspace(-0.9, 0.9, 5))
    assert isinstance(np.arctanh(x), fnp.ndarray)
    assert isinstance(np.hypot(x, x), fnp.ndarray)
    np.testing.assert_allclose(np.arcsin(x).numpy(), np.arcsin(np.linspace(-0.9, 0.9, 5)))


def test_complex_expm1_and_tanh_follow_the_standard_at_zeros_and_infinities():
    # Where NumPy's formulas differ from the array API's special cases
    # (NumPy: expm1(-0+0j) = -0+0j, expm1(inf+0j) = inf+nanj, tanh(inf+2j) = 1-0j).
    inf, nan = np.inf, np.nan
    z = fnp.asarray(np.array([complex(-0.0, 0.0), complex(inf, 0.0), complex(-inf, inf), complex(nan, 0.0)]))
    got = fnp.expm1(z).numpy()
    assert got[0] == 0 and not np.signbit(got[0].real)
    assert got[1] == complex(inf, 0.0)
    assert got[2] == complex(-1.0, 0.0)
    assert np.isnan(got[3].real) and got[3].imag == 0
    t = fnp.tanh(fnp.asarray(np.array([complex(inf, 2.0), complex(-inf, -2.0)], dtype=np.complex64))).numpy()
    np.testing.assert_array_equal(t, [1.0, -1.0])
    np.testing.assert_array_equal(np.signbit(t.imag), [False, True])
