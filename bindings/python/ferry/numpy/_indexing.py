"""Gathers, reorderings, scans and assignment: take, advanced indexing
(integer and boolean arrays), flip, sort, argsort, cumulative_sum, cumulative_prod, diff,
nonzero and x[key] = value. Like the other layout
operations they are Python tasks on the CPU workers (_engine._host): their
inputs never travel to the caller. A boolean mask's result has as many
elements as the mask has True values, so its shape waits for one number: the
count, a fused reduction."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import asarray, astype, host
from ._elementwise import where
from ._manipulation import broadcast_to, concat
from ._engine import materialize
from ._graph import Data
from ._reductions import count_nonzero, sum  # noqa: A004
from ._tiles import Tiled


def _axis(axis: int, ndim: int, name: str) -> int:
    if not -builtins.max(ndim, 1) <= axis < builtins.max(ndim, 1):
        raise ValueError(f"{name}: axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % builtins.max(ndim, 1)


def _indices(indices: Any, name: str) -> ndarray:
    i = asarray(indices)
    if not dt.is_int(i.dtype):
        raise IndexError(f"{name}: indices must be integers, not {i.dtype}")
    return i


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> ndarray:
    """x's elements (axis=None: of the flattened x) or slices along `axis` at
    `indices`; an index out of range fails the task with IndexError."""
    a = asarray(x)
    i = _indices(indices, "take")
    if axis is None:
        if a.ndim > 1:
            raise ValueError("take: axis is needed for arrays of rank > 1 (the array API has no flattening take)")
        axis = 0
    ax = _axis(axis, a.ndim, "take")
    shape = a.shape[:ax] + i.shape + a.shape[ax + 1:]
    return host("take", lambda v, k: np.take(v, k, axis=ax), [a, i], shape, a.dtype)


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> ndarray:
    a = asarray(x)
    i = _indices(indices, "take_along_axis")
    ax = _axis(axis, a.ndim, "take_along_axis")
    shape = np.broadcast_shapes(a.shape[:ax] + (1,) + a.shape[ax + 1:], i.shape[:ax] + (1,) + i.shape[ax + 1:])
    shape = shape[:ax] + (i.shape[ax],) + shape[ax + 1:]
    return host("take_along_axis", lambda v, k: np.take_along_axis(v, k, axis=ax), [a, i], shape, a.dtype)


def getitem(x: ndarray, key: Any) -> ndarray:
    """x[key]: a view sharing whole tiles for a slice on tile bounds, else a
    Python task (advanced_getitem for index arrays)."""
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if isinstance(k, (ndarray, np.ndarray, list)):
            return advanced_getitem(x, key)
        if not (k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer))):
            raise NotImplementedError(f"ferry.numpy supports basic indexing (integers, slices, None, ...), "
                                      f"not indexing with a {type(k).__name__}")
    shape = np.broadcast_to(np.empty((), dtype=np.uint8), x.shape)[key].shape
    if isinstance(key, slice) and key.step in (None, 1) and x.ndim >= 1:
        start, stop, _ = key.indices(x.shape[0])
        value = materialize(x._node)
        if builtins.any(start == b for b in value.bounds) and builtins.any(stop == b for b in value.bounds):
            # Whole tiles: a view sharing them.
            i, j = value.bounds.index(start), value.bounds.index(stop)
            if j > i:
                tiled = Tiled(shape, value.dtype, value.rt, value.tiles[i:j], [b - start for b in value.bounds[i:j + 1]],
                              value.futures)
                return wrap(Data(tiled))
    return host("getitem", lambda v: v[key], [x], shape, x.dtype)


def advanced_getitem(x: ndarray, key: Any) -> ndarray:
    """x[key] where key holds integer arrays (several broadcast together, as
    the array API's integer array indexing) or one boolean array, besides
    integers, slices, None and Ellipsis: NumPy's advanced indexing in a
    Python task."""
    items = list(key) if isinstance(key, tuple) else [key]
    at = [p for p, k in enumerate(items) if isinstance(k, (ndarray, np.ndarray, list))]
    index = {p: asarray(items[p]) for p in at}
    stand_in: dict[int, np.ndarray] = {}
    for p, i in index.items():
        if i.dtype == dt.bool_:
            if len(at) > 1:
                raise NotImplementedError("ferry.numpy indexes with one boolean array, not mixed with other arrays")
            # The result's length is the number of True values: one number to wait for.
            count = int(sum(astype(i, dt.int64)))
            stand_in[p] = np.zeros(i.shape, np.bool_)
            stand_in[p].reshape(-1)[:count] = True
        elif dt.is_int(i.dtype):
            stand_in[p] = np.zeros(i.shape, np.intp)
        else:
            raise IndexError(f"arrays used as indices must be of integer or boolean type, not {i.dtype}")
    probe = tuple(stand_in.get(p, k) for p, k in enumerate(items))
    shape = np.broadcast_to(np.empty((), dtype=np.uint8), x.shape)[probe].shape

    def gather(v: np.ndarray, *ks: np.ndarray) -> np.ndarray:
        given = dict(zip(at, ks))
        return v[tuple(given.get(p, item) for p, item in enumerate(items))]

    return host("getitem", gather, [x, *index.values()], shape, x.dtype)


def flip(x: Any, /, *, axis: Any = None) -> ndarray:
    a = asarray(x)
    axes = None if axis is None else tuple(_axis(int(v), a.ndim, "flip") for v in np.atleast_1d(axis))
    return host("flip", lambda v: np.flip(v, axis=axes), [a], a.shape, a.dtype)


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> ndarray:
    a = asarray(x)
    ax = _axis(axis, a.ndim, "sort")

    def run(v: np.ndarray) -> np.ndarray:
        s = np.sort(v, axis=ax, kind="stable" if _ties_differ(v) else None)
        return np.flip(s, axis=ax) if descending else s

    return host("sort", run, [a], a.shape, a.dtype)


def _ties_differ(v: np.ndarray) -> bool:
    """Whether equal elements of v can be told apart, so that only a stable
    sort gives the stable order: -0.0 beside 0.0, or NaNs. Otherwise NumPy's
    default sort (SIMD quicksort, several times faster than its stable
    timsort for floats) gives the same values."""
    if not dt.is_float(v.dtype):
        return False
    zeros = v[v == 0]
    mixed_zeros = zeros.size and 0 < np.count_nonzero(np.signbit(zeros)) < zeros.size
    return bool(mixed_zeros) or bool(np.isnan(v).any())


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> ndarray:
    a = asarray(x)
    ax = _axis(axis, a.ndim, "argsort")

    def run(v: np.ndarray) -> np.ndarray:
        if not descending:
            return np.argsort(v, axis=ax, kind="stable")
        # Descending and stable: equal elements keep their order.
        n = v.shape[ax]
        flipped = np.argsort(np.flip(v, axis=ax), axis=ax, kind="stable")
        return np.flip(n - 1 - flipped, axis=ax)

    return host("argsort", run, [a], a.shape, dt.int64)


def _cumulative(name: str, scan: Any, initial: int, x: Any, axis: int | None, dtype: Any,
                include_initial: bool) -> ndarray:
    a = asarray(x)
    if axis is None:
        if a.ndim > 1:
            raise ValueError(f"{name}: axis is needed for arrays of rank > 1")
        axis = 0
    ax = _axis(axis, a.ndim, name)
    if dtype is not None:
        t = dt.dtype(dtype)
    else:  # as sum's: integers in int64 (unsigned in uint64), floats and complex in their own type
        t = dt.sum_type(a.dtype)
    shape = list(a.shape)
    shape[ax] += int(include_initial)

    def run(v: np.ndarray) -> np.ndarray:
        s = scan(v, axis=ax, dtype=t)
        if include_initial:
            pad = [(0, 0)] * v.ndim
            pad[ax] = (1, 0)
            s = np.pad(s, pad, constant_values=initial)
        return s

    return host(name, run, [a], tuple(shape), t)


def cumulative_sum(x: Any, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> ndarray:
    return _cumulative("cumulative_sum", np.cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(x: Any, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> ndarray:
    return _cumulative("cumulative_prod", np.cumprod, 1, x, axis, dtype, include_initial)


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> ndarray:
    """The n-th forward difference along `axis`, after putting `prepend` and
    `append` (arrays, or scalars taken as one slice) before and after x."""
    a = asarray(x)
    if a.ndim == 0:
        raise ValueError("diff: x must be at least 1-D")
    if n < 0:
        raise ValueError(f"diff: order n must be non-negative, not {n}")
    ax = _axis(axis, a.ndim, "diff")
    edge = a.shape[:ax] + (1,) + a.shape[ax + 1:]

    def part(extra: Any) -> ndarray:
        e = asarray(extra)
        return broadcast_to(e, edge) if e.ndim == 0 else e

    parts = ([part(prepend)] if prepend is not None else []) + [a] + ([part(append)] if append is not None else [])
    whole = concat(parts, axis=ax) if len(parts) > 1 else a
    shape = list(whole.shape)
    shape[ax] = builtins.max(shape[ax] - n, 0)
    return host("diff", lambda v: np.diff(v, n=n, axis=ax), [whole], tuple(shape), whole.dtype)


def setitem(x: ndarray, key: Any, value: Any) -> ndarray:
    """x with x[key] = value, as a new value (the array API's __setitem__):
    a mask of x's shape with a scalar is a fused `where`; anything else a
    Python task that copies x and assigns. The value takes x's type."""
    items = list(key) if isinstance(key, tuple) else [key]
    for k in items:
        if not (k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer, ndarray, np.ndarray, list))):
            raise IndexError(f"ferry.numpy cannot assign through an index of type {type(k).__name__}")
    arrays = [p for p, k in enumerate(items) if isinstance(k, (ndarray, np.ndarray, list))]
    if len(arrays) > 1:
        raise NotImplementedError("ferry.numpy assigns through at most one index array per subscript")
    scalar = isinstance(value, (bool, int, float, np.generic))
    if arrays and scalar and len(items) == 1:
        mask = asarray(items[0])
        if mask.dtype == dt.bool_ and mask.shape == x.shape:
            return astype(where(mask, x.dtype.type(value), x), x.dtype)
    inputs = [x]
    value_at = index_at = -1
    if not scalar:
        value_at = len(inputs)
        inputs.append(astype(asarray(value), x.dtype))
    if arrays:
        index_at = len(inputs)
        inputs.append(asarray(items[arrays[0]]))
    fixed = value if scalar else None

    def assign(*vs: np.ndarray) -> np.ndarray:
        out = vs[0].copy()
        k = tuple(vs[index_at] if p in arrays else item for p, item in enumerate(items))
        out[k if isinstance(key, tuple) else k[0]] = fixed if value_at < 0 else vs[value_at]
        return out

    return host("setitem", assign, inputs, x.shape, x.dtype)


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> ndarray:
    """Where x2's values would go in the sorted 1-D x1 (by `sorter`'s order
    when given) to keep it sorted."""
    a, v = asarray(x1), asarray(x2)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be 1-D, not of shape {a.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    inputs = [a, v] + ([_indices(sorter, "searchsorted")] if sorter is not None else [])

    def run(s: np.ndarray, values: np.ndarray, *order: np.ndarray) -> np.ndarray:
        return np.searchsorted(s, values, side=side, sorter=order[0] if order else None)

    return host("searchsorted", run, inputs, v.shape, dt.int64)


def nonzero(x: Any, /) -> tuple[ndarray, ...]:
    """The positions of the non-zero elements, one int64 array per axis; how
    many there are is one number to wait for (a fused count)."""
    a = asarray(x)
    if a.ndim == 0:
        raise ValueError("nonzero of a 0-d array is not defined; use atleast_1d (NumPy's error)")
    count = int(count_nonzero(a))
    return tuple(host("nonzero", lambda v, d=d: np.nonzero(v)[d], [a], (count,), dt.int64) for d in range(a.ndim))
