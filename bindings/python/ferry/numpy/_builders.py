"""What every family of functions builds with: operands turned into graph
nodes (asarray, node, cast), shapes and axes checked, and Python tasks on
the CPU workers (host). The families (_elementwise, _reductions, ...) sit
above this floor and import only from it and the floors below."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Sequence

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._engine import materialize
from ._graph import Const, Data, Host, HostArray, Map, Node
from ._tiles import TaskFailure, Tiled, runtime, stays_here


class Unsupported(TypeError):
    """An operand an operator cannot take; Python then tries the other side."""


def asarray(obj: Any, dtype: Any = None, *, copy: bool | None = None, device: Any = None) -> ndarray:
    """An array from a ferry.numpy array, a NumPy array, a DLPack array, a
    (nested) list or a scalar; the data is copied into Ferry's memory once."""
    if isinstance(obj, ndarray):
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            return astype(obj, dtype)
        # A copy is a new array of the same (immutable) value: x[k] = v on
        # either later gives that one a new value, not the other.
        return wrap(obj._node) if copy else obj
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        obj = np.from_dlpack(obj)
    a = np.asarray(obj, dtype=np.dtype(dtype) if dtype is not None else None)
    dt.dtype(a.dtype)
    if stays_here(a.nbytes):
        return wrap(HostArray(np.array(a, copy=True), runtime()))
    return wrap(Data(Tiled.from_numpy(a, runtime())))


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> ndarray:
    return asarray(np.from_dlpack(x))


def node(x: Any) -> Node:
    """The graph node of an array, a scalar (a constant) or anything NumPy reads."""
    if isinstance(x, ndarray):
        return x._node
    if isinstance(x, (bool, int, float, complex, np.generic)):
        v = x.item() if isinstance(x, np.generic) else x
        return Const(v, dt.result_type(v) if not isinstance(x, np.generic) else dt.dtype(x.dtype))
    if isinstance(x, (np.ndarray, list, tuple)):
        return asarray(x)._node
    raise Unsupported(f"ferry.numpy cannot use a {type(x).__name__} as an array")


def weak(x: Any) -> Any:
    """What promotion sees: arrays by type, Python scalars as weak scalars."""
    if isinstance(x, (ndarray, bool, int, float, complex)):
        return x
    return node(x)


def cast(n: Node, t: np.dtype) -> Node:
    if n.dtype == t:
        return n
    if isinstance(n, Const) and n.value is None:
        return Const(n.number, t, n.shape)
    if isinstance(n, HostArray) and np.can_cast(n.dtype, t, "same_kind") and stays_here(n.size * t.itemsize):
        # Casts where NumPy and the fused programs agree (not float to int:
        # NaN and out-of-range values differ).
        return HostArray(n.array.astype(t), n.rt)
    return Map("cast", [n], t)


# The fused instructions whose NumPy function gives the same values, bit for
# bit (IEEE operations, comparisons, selection): small arrays run them here.
_SAME_IN_NUMPY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
                  "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                  "gt": np.greater, "ge": np.greater_equal, "neg": np.negative, "abs": np.absolute,
                  "square": np.square, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint,
                  "sqrt": np.sqrt, "isnan": np.isnan, "isfinite": np.isfinite, "signbit": np.signbit,
                  "copysign": np.copysign, "shl": np.left_shift, "shr": np.right_shift, "where": np.where}


def _eager(op: str, args: Sequence[Node], t: np.dtype) -> Node | None:
    """The instruction computed now with NumPy when its operands are small
    arrays in this process (or constants) and NumPy gives the same values."""
    fn = _SAME_IN_NUMPY.get(op)
    if fn is None or t == dt.bool_ and op in ("add", "sub", "mul", "neg", "square", "abs"):
        return None
    if op in ("floor", "ceil", "trunc", "round") and not dt.is_float(t):
        return None  # NumPy's floor of an integer goes through float64: int64 beyond 2**53 would round
    if op in ("mul", "div", "square", "sqrt") and any(dt.is_complex(a.dtype) for a in args):
        return None  # NumPy's complex loops may use FMA and other formulas: the fused program decides
    rt, values = None, []
    for a in args:
        if isinstance(a, HostArray):
            rt = a.rt
            values.append(a.array)
        elif isinstance(a, Const) and a.value is None:
            values.append(a.dtype.type(a.number) if not a.shape else np.full(a.shape, a.number, a.dtype))
        else:
            return None
    if rt is None:
        return None
    shapes = {v.shape for v in values if v.shape}
    shape = (shapes.pop() if shapes else ()) if len(shapes) <= 1 else np.broadcast_shapes(*shapes)
    if not stays_here(math.prod(shape) * t.itemsize):
        return None
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*values))
    return HostArray(out if out.dtype == t else out.astype(t), rt)


def truth(x: Any) -> Node:
    return cast(node(x), dt.bool_)


def apply(op: str, args: Sequence[Node], t: np.dtype, seed: int = 0) -> ndarray:
    """One elementwise instruction of a fused program over `args` (or, for
    small arrays in this process, its value at once: _eager)."""
    done = _eager(op, args, t) if not seed else None
    return wrap(done if done is not None else Map(op, args, t, seed))


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
    # A small array in this process is already computed: nothing to upload.
    values = [materialize(n) for n in (asarray(a)._node for a in arrays) if not isinstance(n, HostArray)]
    try:
        for v in values:
            v.wait()
    except TaskFailure as error:
        raise error.with_traceback(None)  # noqa: B904 - the caller's line, not the wait's
    return arrays[0] if len(arrays) == 1 else arrays
