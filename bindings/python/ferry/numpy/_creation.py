"""ferry.numpy's creation functions: constants, positions (arange, eye,
linspace), *_like and meshgrid, all fused programs without inputs, and
tril/triu, a fused selection by position."""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import asarray, astype, cast, node, shape_of
from ._elementwise import add, equal, less_equal, multiply, where
from ._engine import MAX_DIMS
from ._graph import Const, Index, Map, Node, Reshape
from ._manipulation import broadcast_to, reshape


def full(shape: Any, fill_value: Any, dtype: Any = None, *, device: Any = None) -> ndarray:
    t = dt.dtype(dtype) if dtype is not None else dt.result_type(fill_value)
    return wrap(Const(fill_value, t, shape_of(shape)))


def zeros(shape: Any, dtype: Any = dt.float64, *, device: Any = None) -> ndarray:
    return full(shape, 0, dtype or dt.float64)


def ones(shape: Any, dtype: Any = dt.float64, *, device: Any = None) -> ndarray:
    return full(shape, 1, dtype or dt.float64)


def empty(shape: Any, dtype: Any = dt.float64, *, device: Any = None) -> ndarray:
    """Like zeros: a fused fill costs one pass, and undefined values help no one."""
    return zeros(shape, dtype)


def _like(x: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    n = node(x)
    return n.shape, dt.dtype(dtype) if dtype is not None else n.dtype


def zeros_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> ndarray:
    return full(*_like(x, dtype)[:1], 0, _like(x, dtype)[1])


def ones_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> ndarray:
    return full(*_like(x, dtype)[:1], 1, _like(x, dtype)[1])


def empty_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> ndarray:
    return zeros_like(x, dtype=dtype)


def full_like(x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> ndarray:
    shape, t = _like(x, dtype)
    return full(shape, fill_value, t)


def arange(start: Any, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> ndarray:
    if stop is None:
        start, stop = 0, start
    t = dt.dtype(dtype) if dtype is not None else dt.result_type(start, stop, step)
    n = builtins.max(0, int(math.ceil((stop - start) / step)))
    work = t if dt.is_float(t) else dt.int64
    i = cast(Index((n,), 0), work)
    return astype(add(multiply(wrap(i), step), start), t) if n else zeros((0,), t)


def linspace(start: Any, stop: Any, num: int, *, dtype: Any = None, device: Any = None,
             endpoint: bool = True) -> ndarray:
    t = dt.dtype(dtype) if dtype is not None else dt.float64
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    i = wrap(cast(Index((num,), 0), dt.float64))
    values = add(multiply(i, step), start)
    if endpoint and num > 1:
        values = where(equal(wrap(Index((num,), 0)), num - 1), float(stop), values)
    return astype(values, t)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: Any = None) -> ndarray:
    m = n_rows if n_cols is None else n_cols
    t = dt.dtype(dtype) if dtype is not None else dt.float64
    shape = (n_rows, m)
    k = builtins.max(-n_rows, builtins.min(int(k), m))  # beyond the matrix: no diagonal (and no int64 overflow)
    diagonal = equal(add(wrap(Index(shape, 0)), k), wrap(Index(shape, 1)))
    return astype(diagonal, t)


def meshgrid(*arrays: Any, indexing: str = "xy") -> list[ndarray]:
    """Coordinate matrices from 1-d arrays: each broadcast along the others'
    axes (no copy until a task reads them: a fused broadcast)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    xs = [asarray(a) for a in arrays]
    for a in xs:
        if a.ndim != 1:
            raise ValueError(f"meshgrid takes 1-d arrays, not one of shape {a.shape}")
    shape = [a.shape[0] for a in xs]
    axes = list(range(len(xs)))
    if indexing == "xy" and len(xs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    out = []
    for a, ax in zip(xs, axes):
        one = [1] * len(xs)
        one[ax] = a.shape[0]
        out.append(broadcast_to(reshape(a, tuple(one)), tuple(shape)))
    return out


def _triangle(x: Any, k: int, lower: bool, name: str) -> ndarray:
    a = asarray(x)
    if a.ndim < 2:
        raise ValueError(f"{name} needs an array of rank 2 or more, not {a.shape}")
    rows, cols = wrap(Index(a.shape, a.ndim - 2)), wrap(Index(a.shape, a.ndim - 1))
    # lower: column <= row + k; upper: row + k <= column
    keep = less_equal(cols, add(rows, k)) if lower else less_equal(add(rows, k), cols)
    return where(keep, a, wrap(Const(0, a.dtype)))


def tril(x: Any, /, *, k: int = 0) -> ndarray:
    return _triangle(x, int(k), True, "tril")


def triu(x: Any, /, *, k: int = 0) -> ndarray:
    return _triangle(x, int(k), False, "triu")


def flat_index(shape: tuple[int, ...]) -> Node:
    """Each element's C-order position (the random generators' counter)."""
    if not shape:
        return Const(0, dt.int64)
    if len(shape) > MAX_DIMS:
        # A program reads positions along at most MAX_DIMS axes: count along
        # one axis, then view the counter in this shape (it is stored once).
        return Reshape(Index((int(np.prod(shape, dtype=np.int64)),), 0), shape)
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    total: Node = Index(shape, len(shape) - 1)
    for d in range(len(shape) - 1):
        total = Map("add", [Map("mul", [Index(shape, d), Const(strides[d], dt.int64)], dt.int64), total], dt.int64)
    return total
