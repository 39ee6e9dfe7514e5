"""What every family of functions builds with: operands turned into graph
nodes (asarray, node, cast), shapes and axes checked, and Python tasks on
the CPU workers (host). The families (_elementwise, _reductions, ...) sit
above this floor and import only from it and the floors below."""

from __future__ import annotations

import builtins
import operator
from typing import Any, Sequence

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._engine import materialize
from ._graph import Const, Data, Host, Map, Node
from ._tiles import TaskFailure, Tiled, runtime


class Unsupported(TypeError):
    """An operand an operator cannot take; Python then tries the other side."""


def asarray(obj: Any, dtype: Any = None, *, copy: bool | None = None, device: Any = None) -> ndarray:
    """An array from a ferry.numpy array, a NumPy array, a DLPack array, a
    (nested) list or a scalar; the data is copied into Ferry's memory once."""
    if isinstance(obj, ndarray):
        return astype(obj, dtype) if dtype is not None and np.dtype(dtype) != obj.dtype else obj
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        obj = np.from_dlpack(obj)
    a = np.asarray(obj, dtype=np.dtype(dtype) if dtype is not None else None)
    if dtype is None and a.dtype.kind == "i" and a.dtype != dt.int32:
        a = a.astype(np.int64)
    dt.dtype(a.dtype)
    return wrap(Data(Tiled.from_numpy(a, runtime())))


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> ndarray:
    return asarray(np.from_dlpack(x))


def node(x: Any) -> Node:
    """The graph node of an array, a scalar (a constant) or anything NumPy reads."""
    if isinstance(x, ndarray):
        return x._node
    if isinstance(x, (bool, int, float, np.generic)):
        v = x.item() if isinstance(x, np.generic) else x
        return Const(v, dt.result_type(v) if not isinstance(x, np.generic) else dt.dtype(x.dtype))
    if isinstance(x, (np.ndarray, list, tuple)):
        return asarray(x)._node
    raise Unsupported(f"ferry.numpy cannot use a {type(x).__name__} as an array")


def weak(x: Any) -> Any:
    """What promotion sees: arrays by type, Python scalars as weak scalars."""
    if isinstance(x, (ndarray, bool, int, float)):
        return x
    return node(x)


def cast(n: Node, t: np.dtype) -> Node:
    if n.dtype == t:
        return n
    if isinstance(n, Const) and n.value is None:
        return Const(n.number, t, n.shape)
    return Map("cast", [n], t)


def truth(x: Any) -> Node:
    return cast(node(x), dt.bool_)


def apply(op: str, args: Sequence[Node], t: np.dtype, seed: int = 0) -> ndarray:
    """One elementwise instruction of a fused program over `args`."""
    return wrap(Map(op, args, t, seed))


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> ndarray:
    return wrap(cast(node(x), dt.dtype(dtype)))


def shape_of(shape: Any) -> tuple[int, ...]:
    """A shape argument as a tuple of non-negative ints."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    out = tuple(int(operator.index(d)) for d in shape)
    if builtins.any(d < 0 for d in out):
        raise ValueError(f"negative dimensions are not allowed: {out}")
    return out


def axes_of(axis: Any, ndim: int) -> tuple[int, ...]:
    """An axis argument (None, an int or a tuple) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in items:
        a = int(a)
        if not -ndim <= a < builtins.max(ndim, 1):
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(out)) if ndim else ()


def host(name: str, fn: Any, args: Sequence[ndarray], shape: tuple[int, ...], t: np.dtype) -> ndarray:
    """fn applied to the arrays' values as NumPy arrays, in a Python task on
    the CPU workers."""
    return wrap(Host(name, fn, [a._node for a in args], shape, t))


def compute(*arrays: ndarray) -> tuple[ndarray, ...] | ndarray:
    """Submits the work of all `arrays` at once, then waits for it."""
    values = [materialize(asarray(a)._node) for a in arrays]
    try:
        for v in values:
            v.wait()
    except TaskFailure as error:
        raise error.with_traceback(None)  # noqa: B904 - the caller's line, not the wait's
    return arrays[0] if len(arrays) == 1 else arrays
