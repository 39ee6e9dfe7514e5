"""ferry.numpy.fft against numpy.fft: every transform of the array API's fft
extension, its result's shape and type known before it runs (float32 and
complex64 stay single precision, as in NumPy 2), n/s/axes/norm, and bad
arguments refused when the expression is built."""

import numpy as np
import pytest

import ferry.numpy as fnp


@pytest.fixture(scope="module", autouse=True)
def runtime(tiny_tile_runtime):
    return tiny_tile_runtime


def check(got, want, rtol):
    assert isinstance(got, fnp.ndarray)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_one_axis_transforms_match_numpy(dtype):
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((5, 8)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x_np = x_np + 1j * rng.standard_normal((5, 8)).astype(dtype)
    x = fnp.asarray(x_np)
    r = 1e-4 if dtype in (np.float32, np.complex64) else 1e-12
    for name in ("fft", "ifft", "irfft", "hfft"):
        for kw in ({}, {"n": 6, "axis": 0, "norm": "ortho"}, {"n": 11, "norm": "forward"}):
            check(getattr(fnp.fft, name)(x, **kw), getattr(np.fft, name)(x_np, **kw), r)
    if np.dtype(dtype).kind == "f":
        for name in ("rfft", "ihfft"):
            check(getattr(fnp.fft, name)(x, n=7), getattr(np.fft, name)(x_np, n=7), r)
    else:
        with pytest.raises(TypeError):
            fnp.fft.rfft(x)


def test_many_axis_transforms_shifts_and_frequencies_match_numpy():
    x_np = np.random.default_rng(2).standard_normal((4, 6, 5))
    x = fnp.asarray(x_np)
    for name in ("fftn", "ifftn", "rfftn", "irfftn"):
        for kw in ({}, {"axes": (0, 2)}, {"s": (3, 8), "axes": (2, 1), "norm": "ortho"}):
            check(getattr(fnp.fft, name)(x, **kw), getattr(np.fft, name)(x_np, **kw), 1e-12)
    for name in ("fftshift", "ifftshift"):
        check(getattr(fnp.fft, name)(x), getattr(np.fft, name)(x_np), 0)
        check(getattr(fnp.fft, name)(x, axes=(1,)), getattr(np.fft, name)(x_np, axes=(1,)), 0)
    check(fnp.fft.fftfreq(7, d=0.5), np.fft.fftfreq(7, 0.5), 0)
    check(fnp.fft.rfftfreq(8, dtype=fnp.float32), np.fft.rfftfreq(8).astype(np.float32), 0)


def test_bad_arguments_are_refused_when_built():
    x = fnp.asarray(np.zeros((3, 4)))
    with pytest.raises(ValueError):
        fnp.fft.fft(x, n=0)
    with pytest.raises(ValueError):
        fnp.fft.fft(x, norm="sideways")
    with pytest.raises(IndexError):
        fnp.fft.fft(x, axis=2)
    with pytest.raises(ValueError):
        fnp.fft.fftn(x, s=(2, 2), axes=(0,))
