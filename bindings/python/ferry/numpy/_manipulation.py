"""Layout: reshape, transpose and friends, broadcasting, concat and stack.
reshape and concat along the first axis share tiles where tile bounds
allow; other layout changes copy in one Python task on the CPU workers."""

from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import asarray, astype, axes_of, host, shape_of
from ._engine import materialize
from ._graph import Const, Data, Map, Reshape
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
