"""ferry.numpy.fft: the array API's fft extension, each transform NumPy's
(pocketfft) in one Python task on the CPU workers, like the other layout
and gather work; the shape and type of a result are worked out here, when
the expression is built, so nothing waits for the values. The frequency
grids (fftfreq, rfftfreq) are small arrays made at once."""

from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from . import _dtypes as dt
from ._array import ndarray
from ._builders import asarray, astype, host

__all__ = ["fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift", "ihfft", "irfft", "irfftn",
           "rfft", "rfftfreq", "rfftn"]

_NORMS = ("backward", "ortho", "forward")


def _complex_of(t: np.dtype) -> np.dtype:
    """NumPy 2's: float32 and complex64 stay single precision, the rest double."""
    return dt.complex64 if t in (dt.float32, dt.complex64) else dt.complex128


def _real_of(t: np.dtype) -> np.dtype:
    return dt.float32 if t in (dt.float32, dt.complex64) else dt.float64


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return axis % ndim


def _check(norm: str, sizes: Sequence[int | None]) -> None:
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, not {norm!r}")
    for n in sizes:
        if n is not None and n < 1:
            raise ValueError(f"invalid number of data points ({n}) specified")


def _one(name: str, x: Any, n: int | None, axis: int, norm: str, length: Any, t_of: Any, cast_of: Any) -> ndarray:
    """A transform along one axis whose output length is length(n, m), m the
    input's length there (n given or not)."""
    a = asarray(x)
    if a.ndim == 0:
        raise ValueError(f"fft.{name} takes an array of rank 1 or more")
    _check(norm, [n])
    ax = _axis(axis, a.ndim)
    out = length(n, a.shape[ax])
    if out < 1:
        raise ValueError(f"invalid number of data points ({out}) specified")
    shape = tuple(out if i == ax else d for i, d in enumerate(a.shape))
    fn = getattr(np.fft, name)
    return host(f"fft.{name}", lambda v: fn(v, n=n, axis=ax, norm=norm), [astype(a, cast_of(a.dtype))], shape,
                t_of(a.dtype))


def _many(name: str, x: Any, s: Any, axes: Any, norm: str, last: Any, t_of: Any, cast_of: Any) -> ndarray:
    """A transform over several axes: every axis keeps its length (or s's),
    the last transformed one takes last(n, m)."""
    a = asarray(x)
    _check(norm, list(s) if s is not None else [])
    if axes is None:
        axes = tuple(range(a.ndim)) if s is None else tuple(range(a.ndim - len(s), a.ndim))
    axes = tuple(_axis(int(v), a.ndim) for v in axes)
    if s is not None and len(s) != len(axes):
        raise ValueError("fft: s and axes must have the same length")
    if len(set(axes)) != len(axes):
        raise ValueError("fft: repeated axes")
    sizes = list(s) if s is not None else [None] * len(axes)
    shape = list(a.shape)
    for k, (ax, n) in enumerate(zip(axes, sizes)):
        shape[ax] = last(n, a.shape[ax]) if k == len(axes) - 1 else (a.shape[ax] if n is None else int(n))
    if builtins.any(shape[ax] < 1 for ax in axes):
        raise ValueError(f"invalid number of data points specified: {tuple(shape)}")
    fn = getattr(np.fft, name)
    s_ = None if s is None else tuple(int(v) for v in s)
    return host(f"fft.{name}", lambda v: fn(v, s=s_, axes=axes, norm=norm), [astype(a, cast_of(a.dtype))],
                tuple(shape), t_of(a.dtype))


def _same(n: int | None, m: int) -> int:
    return m if n is None else int(n)


def _half(n: int | None, m: int) -> int:
    return _same(n, m) // 2 + 1


def _whole(n: int | None, m: int) -> int:
    return 2 * (m - 1) if n is None else int(n)


def fft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> ndarray:
    return _one("fft", x, n, axis, norm, _same, _complex_of, _complex_of)


def ifft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> ndarray:
    return _one("ifft", x, n, axis, norm, _same, _complex_of, _complex_of)


def fftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> ndarray:
    return _many("fftn", x, s, axes, norm, _same, _complex_of, _complex_of)


def ifftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> ndarray:
    return _many("ifftn", x, s, axes, norm, _same, _complex_of, _complex_of)


def rfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> ndarray:
    _real_input("rfft", x)
    return _one("rfft", x, n, axis, norm, _half, _complex_of, _real_of)


def irfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> ndarray:
    return _one("irfft", x, n, axis, norm, _whole, _real_of, _complex_of)


def rfftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> ndarray:
    _real_input("rfftn", x)
    return _many("rfftn", x, s, axes, norm, _half, _complex_of, _real_of)


def irfftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> ndarray:
    return _many("irfftn", x, s, axes, norm, _whole, _real_of, _complex_of)


def hfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> ndarray:
    return _one("hfft", x, n, axis, norm, _whole, _real_of, _complex_of)


def ihfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> ndarray:
    _real_input("ihfft", x)
    return _one("ihfft", x, n, axis, norm, _half, _complex_of, _real_of)


def _real_input(name: str, x: Any) -> None:
    if dt.is_complex(asarray(x).dtype):
        raise TypeError(f"fft.{name} takes a real array, not {asarray(x).dtype}")


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> ndarray:
    return asarray(np.fft.fftfreq(int(n), d).astype(dtype or dt.float64))


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> ndarray:
    return asarray(np.fft.rfftfreq(int(n), d).astype(dtype or dt.float64))


def fftshift(x: Any, /, *, axes: Any = None) -> ndarray:
    a = asarray(x)
    return host("fft.fftshift", lambda v: np.fft.fftshift(v, axes=axes), [a], a.shape, a.dtype)


def ifftshift(x: Any, /, *, axes: Any = None) -> ndarray:
    a = asarray(x)
    return host("fft.ifftshift", lambda v: np.fft.ifftshift(v, axes=axes), [a], a.shape, a.dtype)
