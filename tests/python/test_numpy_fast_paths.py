"""The paths that make common work cheap, checked by what runs and by the
values (never by time): matmul of a transposed operand passes gemm's
transpose flag instead of copying; sort uses NumPy's default (SIMD) sort
where a stable one gives the same values; small arrays are worked on at
once with NumPy in this process, with the same values as the fused tasks."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import ferry
import ferry.numpy as fnp
from ferry.numpy._tiles import DEFAULT_TILE_BYTES


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with ferry.Runtime(workers=2, persist_perf_models=False) as rt, fnp.using(rt):
        yield rt


@pytest.fixture
def small_tiles():
    fnp.set_options(tile_bytes=256)  # several tiles, and nothing small enough to stay in this process
    yield
    fnp.set_options(tile_bytes=DEFAULT_TILE_BYTES)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_matmul_of_a_transpose_copies_nothing(small_tiles, dtype):
    rng = np.random.default_rng(4)
    x_np = (rng.standard_normal((45, 7)) * 4).astype(dtype)
    y_np = (rng.standard_normal((45, 3)) * 4).astype(dtype)
    w_np = (rng.standard_normal((5, 7)) * 4).astype(dtype)
    x, y, w = fnp.asarray(x_np), fnp.asarray(y_np), fnp.asarray(w_np)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in [(x.T @ x, x_np.T @ x_np), (x.T @ y, x_np.T @ y_np), (x @ w.T, x_np @ w_np.T),
                      (fnp.matmul(x.T, x), x_np.T @ x_np), (w @ x.T, w_np @ x_np.T)]:
        assert "transpose as one Python task" not in fnp.explain(got), fnp.explain(got)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol)
    # x.T @ w.T: one operand is read with the flag, the other copied.
    yt = fnp.asarray(np.ascontiguousarray(y_np.T))
    np.testing.assert_allclose((x.T @ yt.T).numpy(), x_np.T @ y_np, rtol=rtol)
    with pytest.raises(ValueError):
        x.T @ w


def test_sort_uses_the_fast_sort_where_stability_cannot_show(small_tiles, monkeypatch):
    kinds = []
    real = np.sort

    def spy(a, axis=-1, kind=None, **kwargs):
        kinds.append(kind)
        return real(a, axis=axis, kind=kind, **kwargs)

    monkeypatch.setattr(np, "sort", spy)
    rng = np.random.default_rng(5)
    plain = rng.standard_normal(300).astype(np.float32)
    np.testing.assert_array_equal(fnp.sort(fnp.asarray(plain)).numpy(), real(plain))
    ints = rng.integers(0, 5, (20, 30))
    np.testing.assert_array_equal(fnp.sort(fnp.asarray(ints), axis=0).numpy(), real(ints, axis=0))
    assert kinds == [None, None]
    # -0.0 beside 0.0, and NaNs: equal elements that can be told apart keep their order.
    ties = np.array([0.0, -0.0, np.nan, 1.0, -0.0, 0.0, -np.nan, -1.0] * 10)
    got = fnp.sort(fnp.asarray(ties)).numpy()
    want = real(ties, kind="stable")
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
    assert kinds[-1] == "stable"
    desc = fnp.sort(fnp.asarray(plain), descending=True).numpy()
    np.testing.assert_array_equal(desc, real(plain)[::-1])


def binary_cases(a, b):
    shifts = {"a<<b": lambda m: m.bitwise_left_shift(a, b), "a>>b": lambda m: m.bitwise_right_shift(a, b)}
    return {**(shifts if a.dtype.kind == "i" else {}),
        "round": lambda m: m.round(a), "trunc": lambda m: m.trunc(a), "signbit": lambda m: m.signbit(a),
        "copysign": lambda m: m.copysign(a, b),
        "a+b": lambda m: m.add(a, b), "a-b": lambda m: m.subtract(a, b), "a*b": lambda m: m.multiply(a, b),
        "a/b": lambda m: m.divide(a, b), "max": lambda m: m.maximum(a, b), "min": lambda m: m.minimum(a, b),
        "a<b": lambda m: m.less(a, b), "a==b": lambda m: m.equal(a, b), "where": lambda m: m.where(a > b, a, b),
        "sqrt": lambda m: m.sqrt(a), "neg": lambda m: m.negative(a),
        "square": lambda m: m.square(a), "floor": lambda m: m.floor(a), "isnan": lambda m: m.isnan(a),
        "a*2.5": lambda m: m.multiply(a, 2.5), "3-a": lambda m: m.subtract(3, a),
        "f64": lambda m: m.astype(a, "float64"),
    }


def worked_here(x) -> bool:
    return "in this process" in fnp.explain(x).splitlines()[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_small_arrays_are_worked_on_here_with_the_tasks_values(dtype):
    rng = np.random.default_rng(6)
    a_np = (rng.standard_normal(1000) * 10).astype(dtype)
    b_np = (rng.standard_normal(1000) * 10).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a_np[:4] = [np.nan, -0.0, np.inf, -np.inf]
        b_np[:4] = [1.0, 0.0, np.nan, -np.inf]
    else:
        b_np[:3] = 0
    here = {name: build(fnp) for name, build in binary_cases(fnp.asarray(a_np), fnp.asarray(b_np)).items()}
    fnp.set_options(eager_bytes=0)
    try:
        tasks = {name: build(fnp) for name, build in binary_cases(fnp.asarray(a_np), fnp.asarray(b_np)).items()}
    finally:
        fnp.set_options(eager_bytes=None)
    for name, fast in here.items():
        slow = tasks[name]
        # (floor, round, trunc of an integer stay tasks: NumPy's go through float64)
        rounds = name in ("floor", "round", "trunc") and np.dtype(dtype).kind == "i"
        assert worked_here(fast) or rounds, (name, fnp.explain(fast))
        assert not worked_here(slow), (name, fnp.explain(slow))
        assert fast.dtype == slow.dtype, name
        np.testing.assert_array_equal(fast.numpy(), slow.numpy(), err_msg=name)
        np.testing.assert_array_equal(np.signbit(fast.numpy()), np.signbit(slow.numpy()), err_msg=name)


def test_small_arrays_still_reach_tasks_when_asked():
    a_np = np.arange(10, dtype=np.float32)
    a = fnp.asarray(a_np)
    np.testing.assert_allclose((fnp.exp(a) + a).numpy(), np.exp(a_np) + a_np, rtol=1e-6)  # exp: a fused task
    np.testing.assert_array_equal(fnp.sum(a * 2).numpy(), 90)
    m, m_np = a.reshape(2, 5), a_np.reshape(2, 5)
    np.testing.assert_array_equal((m.T @ m).numpy(), m_np.T @ m_np)
    with fnp.using(fnp.runtime(), on="cpu"):
        placed = fnp.asarray(a_np) * 2
        assert not worked_here(placed)
        np.testing.assert_array_equal(placed.numpy(), a_np * 2)
    big = fnp.asarray(np.ones(DEFAULT_TILE_BYTES // 32, np.float32))
    assert not worked_here(big * 2)


DTYPES = [np.bool_, np.int32, np.int64, np.float32, np.float64]
OPS = {"+": lambda m, x, y: x + y, "-": lambda m, x, y: x - y, "*": lambda m, x, y: x * y,
       "/": lambda m, x, y: x / y, "max": lambda m, x, y: m.maximum(x, y), "min": lambda m, x, y: m.minimum(x, y),
       "<": lambda m, x, y: x < y, "!=": lambda m, x, y: x != y, "where": lambda m, x, y: m.where(x > y, x, y),
       "abs": lambda m, x, y: m.abs(x), "floor": lambda m, x, y: m.floor(x), "-x": lambda m, x, y: -x,
       "sqrt": lambda m, x, y: m.sqrt(x), "x*x": lambda m, x, y: m.square(x), "1.5*": lambda m, x, y: 1.5 * x,
       "astype": lambda m, x, y: m.astype(x, y.dtype)}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=6),
       t1=st.sampled_from(DTYPES), t2=st.sampled_from(DTYPES), op=st.sampled_from(sorted(OPS)),
       seed=st.integers(0, 100))
def test_small_arrays_match_the_tasks_across_dtypes_and_broadcasting(shapes, t1, t2, op, seed):
    rng = np.random.default_rng(seed)

    def values(t, shape):
        if t == np.bool_:
            return rng.random(shape) < 0.5
        v = rng.standard_normal(shape) * 30
        if np.dtype(t).kind == "f" and v.size:
            v.reshape(-1)[0] = [np.nan, -0.0, np.inf][seed % 3]
        return v.astype(t)

    a_np, b_np = values(t1, shapes.input_shapes[0]), values(t2, shapes.input_shapes[1])

    def run() -> tuple:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = OPS[op](fnp, fnp.asarray(a_np), fnp.asarray(b_np))
                return r.dtype, r.numpy().copy(), worked_here(r)
        except (TypeError, ValueError) as error:
            return type(error), None, False

    here = run()
    fnp.set_options(eager_bytes=0)
    try:
        tasks = run()
    finally:
        fnp.set_options(eager_bytes=None)
    assert not tasks[2]
    assert here[0] == tasks[0]
    if here[1] is not None:
        np.testing.assert_array_equal(here[1], tasks[1])
        np.testing.assert_array_equal(np.signbit(here[1]), np.signbit(tasks[1]))
