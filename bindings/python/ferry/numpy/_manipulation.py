"""Layout: reshape, transpose and friends, broadcasting, concat and stack,
moveaxis, repeat, roll, tile, unstack. reshape and concat along the first
axis share tiles where tile bounds allow; other layout changes copy in one
Python task on the CPU workers."""

from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import asarray, astype, axes_of, host, shape_of
from ._engine import materialize
from ._graph import Const, Data, Map, Reshape, Transposed
from ._tiles import Tiled


# ---- manipulation ----

def reshape(x: Any, /, shape: Any, *, copy: bool | None = None) -> ndarray:
    a = asarray(x)
    new = list(_shape_with_unknown(shape))
    if -1 in new:
        known = int(np.prod([d for d in new if d != -1], dtype=np.int64))
        if new.count(-1) > 1 or (known == 0 or a.size % known):
            raise ValueError(f"cannot reshape array of size {a.size} into shape {tuple(shape)}")
        new[new.index(-1)] = a.size // known
    target = tuple(new)
    if int(np.prod(target, dtype=np.int64)) != a.size:
        raise ValueError(f"cannot reshape array of size {a.size} into shape {target}")
    return a if target == a.shape else wrap(Reshape(a._node, target))


def _shape_with_unknown(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def transpose(x: Any, axes: Any = None) -> ndarray:
    a = asarray(x)
    perm = tuple(range(a.ndim))[::-1] if axes is None else tuple(int(p) % builtins.max(a.ndim, 1) for p in axes)
    if sorted(perm) != list(range(a.ndim)):
        raise ValueError(f"axes {axes} don't match an array of rank {a.ndim}")
    if perm == tuple(range(a.ndim)):
        return a
    if perm == (1, 0):
        return wrap(Transposed(a._node))
    shape = tuple(a.shape[p] for p in perm)
    return host("transpose", lambda v: np.transpose(v, perm), [a], shape, a.dtype)


permute_dims = transpose


def matrix_transpose(x: Any, /) -> ndarray:
    a = asarray(x)
    if a.ndim < 2:
        raise ValueError("matrix_transpose needs an array of rank >= 2")
    return transpose(a, (*range(a.ndim - 2), a.ndim - 1, a.ndim - 2))


def swapaxes(x: Any, axis1: int, axis2: int) -> ndarray:
    a = asarray(x)
    perm = list(range(a.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(a, perm)


def expand_dims(x: Any, /, axis: int = 0) -> ndarray:
    a = asarray(x)
    if not -a.ndim - 1 <= axis <= a.ndim:
        # The array API's IndexError (NumPy's AxisError is one).
        raise np.exceptions.AxisError(axis, a.ndim + 1)
    ax = axis % (a.ndim + 1)
    return reshape(a, (*a.shape[:ax], 1, *a.shape[ax:]))


def squeeze(x: Any, /, axis: Any = None) -> ndarray:
    a = asarray(x)
    if axis is None:
        return reshape(a, tuple(d for d in a.shape if d != 1))
    axes = axes_of(axis, a.ndim)
    if builtins.any(a.shape[i] != 1 for i in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


def broadcast_to(x: Any, /, shape: Any) -> ndarray:
    a = asarray(x)
    target = shape_of(shape)
    np.broadcast_shapes(a.shape, target)
    return wrap(Map("where", [Const(True, dt.bool_, target), a._node, a._node], a.dtype))


def broadcast_arrays(*arrays: Any) -> list[ndarray]:
    shape = np.broadcast_shapes(*(asarray(a).shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> ndarray:
    xs = [asarray(a) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        xs, axis = [reshape(a, (-1,)) for a in xs], 0
    t = dt.result_type(*xs)
    xs = [astype(a, t) for a in xs]
    nd = xs[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = axis % nd
    for a in xs:
        if a.ndim != nd or builtins.any(a.shape[i] != xs[0].shape[i] for i in range(nd) if i != ax):
            raise ValueError(f"all the input array dimensions except for the concatenation axis must match "
                             f"exactly: {xs[0].shape} and {a.shape}")
    shape = tuple(builtins.sum(a.shape[ax] for a in xs) if i == ax else d for i, d in enumerate(xs[0].shape))
    if ax == 0:
        # Along the first axis the tiles just line up: no copy.
        values = [materialize(a._node) for a in xs]
        tiles, bounds, futures = [], [0], []
        for v in values:
            tiles.extend(v.tiles)
            futures.extend(v.futures)
            bounds.extend(bounds[-1] + b for b in v.bounds[1:])
        rt = values[0].rt
        if not tiles:
            return wrap(Data(Tiled(shape, t, rt, [], [0])))
        return wrap(Data(Tiled(shape, t, rt, tiles, _dedupe(bounds), futures, "concat")))
    return host("concat", lambda *vs: np.concatenate(vs, axis=ax), xs, shape, t)


def _dedupe(bounds: list[int]) -> list[int]:
    out = [bounds[0]]
    for b in bounds[1:]:
        if b != out[-1]:
            out.append(b)
    return out


concatenate = concat


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> ndarray:
    xs = [asarray(a) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    if builtins.any(a.shape != xs[0].shape for a in xs):
        raise ValueError("all input arrays must have the same shape")
    ax = axis % (xs[0].ndim + 1)
    return concat([expand_dims(a, ax) for a in xs], axis=ax)


def _axis(axis: Any, ndim: int) -> int:
    """One axis of an array of rank ndim, non-negative; AxisError (an
    IndexError and a ValueError) when out of range, as NumPy."""
    a = int(axis)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(a, ndim)
    return a % ndim


def moveaxis(x: Any, source: Any, destination: Any, /) -> ndarray:
    a = asarray(x)
    src = [_axis(s, a.ndim) for s in np.atleast_1d(source)]
    dst = [_axis(d, a.ndim) for d in np.atleast_1d(destination)]
    if len(src) != len(dst):
        raise ValueError("moveaxis: `source` and `destination` must have the same number of elements")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("moveaxis: repeated axis")
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def repeat(x: Any, repeats: Any, /, *, axis: int | None = None) -> ndarray:
    """Each element `repeats` times along `axis` (the flattened array when
    None). With an array of counts, the result's length is their sum: one
    number to wait for, as a boolean mask's count."""
    a = asarray(x)
    if axis is None:
        a, ax = reshape(a, (-1,)), 0
    else:
        ax = _axis(axis, a.ndim)
    if isinstance(repeats, (int, np.integer)):
        if repeats < 0:
            raise ValueError("repeat: negative repeats are not allowed")
        length, counts = a.shape[ax] * int(repeats), []
        inputs = [a]
    else:
        r = asarray(repeats)
        if not dt.is_int(r.dtype) or r.ndim > 1 or r.shape[0] not in (1, a.shape[ax]):
            raise ValueError(f"repeat: repeats must be an int or a 1-d integer array of length 1 or "
                             f"{a.shape[ax]}, not {r.dtype}{list(r.shape)}")
        length = int(r.sum()) * (a.shape[ax] if r.shape[0] == 1 else 1)
        counts, inputs = [r], [a, r]
    shape = tuple(length if i == ax else d for i, d in enumerate(a.shape))
    fixed = None if counts else int(repeats)
    return host("repeat", lambda v, *k: np.repeat(v, k[0] if k else fixed, axis=ax), inputs, shape, a.dtype)


def roll(x: Any, /, shift: Any, *, axis: Any = None) -> ndarray:
    a = asarray(x)
    if axis is not None:
        axis = tuple(_axis(v, a.ndim) for v in np.atleast_1d(axis))
        shift = tuple(int(v) for v in np.atleast_1d(shift))
        if len(shift) != len(axis) and len(shift) != 1:
            raise ValueError("roll: 'shift' and 'axis' should be scalars or 1D sequences of one length")
    else:
        shift = int(shift) if isinstance(shift, (int, np.integer)) else tuple(int(v) for v in shift)
    return host("roll", lambda v: np.roll(v, shift, axis=axis), [a], a.shape, a.dtype)


def tile(x: Any, repetitions: Any, /) -> ndarray:
    a = asarray(x)
    reps = tuple(int(r) for r in np.atleast_1d(repetitions))
    if builtins.any(r < 0 for r in reps):
        raise ValueError("tile: negative repetitions are not allowed")
    rank = builtins.max(len(reps), a.ndim)
    reps = (1,) * (rank - len(reps)) + reps
    shape = tuple(d * r for d, r in zip((1,) * (rank - a.ndim) + a.shape, reps))
    return host("tile", lambda v: np.tile(v, reps), [a], shape, a.dtype)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[ndarray, ...]:
    a = asarray(x)
    if a.ndim == 0:
        raise ValueError("unstack needs an array of rank 1 or more")
    ax = _axis(axis, a.ndim)
    return tuple(a[(slice(None),) * ax + (i,)] for i in range(a.shape[ax]))
