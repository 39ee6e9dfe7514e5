"""Reductions: sum, prod, min, max, any, all, mean, var, std, argmin,
argmax, count_nonzero. Each tile folds inside its fused pass (a Reduce node); partial
results combine in a tree of fused tasks (_engine)."""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import astype, axes_of, cast, node, truth
from ._creation import flat_index
from ._elementwise import divide, equal, isnan, logical_or, multiply, not_equal, sqrt, subtract, where
from ._graph import Const, Index, Reduce
from ._manipulation import reshape


# ---- reductions ----

def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _accumulator(out: np.dtype) -> np.dtype:
    """Sums and products run in float64, complex128 or int64 (wrapping as the result type does)."""
    return dt.complex128 if dt.is_complex(out) else dt.float64 if dt.is_float(out) else dt.int64


def _ordered(n: Any, what: str) -> None:
    if dt.is_complex(n.dtype):
        raise TypeError(f"{what} is not defined for complex numbers ({n.dtype})")


def sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    n = node(x)
    out = dt.dtype(dtype) if dtype is not None else dt.sum_type(n.dtype)
    acc = _accumulator(out)
    return astype(wrap(Reduce("add", cast(n, acc), axes_of(axis, len(n.shape)), keepdims, acc)), out)


def prod(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ndarray:
    n = node(x)
    out = dt.dtype(dtype) if dtype is not None else dt.sum_type(n.dtype)
    acc = _accumulator(out)
    return astype(wrap(Reduce("mul", cast(n, acc), axes_of(axis, len(n.shape)), keepdims, acc)), out)


def _extreme(fold: str, x: Any, axis: Any, keepdims: bool) -> ndarray:
    n = node(x)
    _ordered(n, fold)
    axes = axes_of(axis, len(n.shape))
    if _count(n.shape, axes) == 0:  # (an empty array reduced along non-empty axes is an empty result)
        raise ValueError(f"zero-size array to reduction operation {'minimum' if fold == 'min' else 'maximum'} "
                         "which has no identity")
    return wrap(Reduce(fold, n, axes, keepdims, n.dtype))


def min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    return _extreme("min", x, axis, keepdims)


def max(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    return _extreme("max", x, axis, keepdims)


amin, amax = min, max


def any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    n = truth(x)
    return wrap(Reduce("max", n, axes_of(axis, len(n.shape)), keepdims, dt.bool_))


def all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    n = truth(x)
    return wrap(Reduce("min", n, axes_of(axis, len(n.shape)), keepdims, dt.bool_))


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> ndarray:
    n = node(x)
    axes = axes_of(axis, len(n.shape))
    out = dt.dtype(dtype) if dtype is not None else n.dtype if dt.is_inexact(n.dtype) else dt.float64
    acc = dt.complex128 if dt.is_complex(out) else dt.float64
    total = wrap(Reduce("add", cast(n, acc), axes, keepdims, acc))
    count = _count(n.shape, axes)
    return astype(divide(total, count) if count else multiply(total, math.nan), out)


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False,
        ddof: float | None = None) -> ndarray:
    n = node(x)
    _ordered(n, "var/std (the array API's, of real numbers)")
    if ddof is not None:
        correction = ddof
    axes = axes_of(axis, len(n.shape))
    out = n.dtype if dt.is_float(n.dtype) else dt.float64  # NumPy's: integers and bools give float64
    x64 = wrap(cast(n, dt.float64))
    count = _count(n.shape, axes)
    centre = divide(wrap(Reduce("add", x64._node, axes, True, dt.float64)), builtins.max(count, 1))
    d = subtract(x64, centre)
    total = wrap(Reduce("add", multiply(d, d)._node, axes, keepdims, dt.float64))
    dof = count - correction
    return astype(divide(total, dof) if dof > 0 else multiply(total, math.nan), out)


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False,
        ddof: float | None = None) -> ndarray:
    v = var(x, axis=axis, correction=correction, keepdims=keepdims, ddof=ddof)
    return sqrt(v)


def _arg(fold: str, x: Any, axis: Any, keepdims: bool) -> ndarray:
    n = node(x)
    _ordered(n, f"arg{fold}")
    if n.size == 0:
        raise ValueError(f"attempt to get arg{fold} of an empty sequence")
    if axis is None:
        axes = tuple(range(len(n.shape)))
        where_ = flat_index(n.shape)
    else:
        axes = axes_of(axis, len(n.shape))
        where_ = Index(n.shape, axes[0])
    if not n.shape:
        return wrap(Const(0, dt.int64))
    extreme = wrap(Reduce(fold, n, axes, True, n.dtype))
    xs = wrap(n)
    hit = equal(xs, extreme)
    if dt.is_float(n.dtype):
        hit = logical_or(hit, isnan(xs))
    big = np.iinfo(np.int64).max
    candidates = where(hit, wrap(where_), big)
    out = wrap(Reduce("min", candidates._node, axes, keepdims and axis is not None, dt.int64))
    if keepdims and axis is None:
        out = reshape(out, (1,) * len(n.shape))
    return out


def argmin(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:
    return _arg("min", x, axis, keepdims)


def argmax(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:
    return _arg("max", x, axis, keepdims)


def count_nonzero(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:
    """How many elements are not zero (NaN counts), as int64: a fused sum."""
    n = node(x)
    nonzero = cast(not_equal(wrap(n), wrap(Const(0, n.dtype)))._node, dt.int64)
    return wrap(Reduce("add", nonzero, axes_of(axis, len(n.shape)), keepdims, dt.int64))
