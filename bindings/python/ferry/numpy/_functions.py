"""ferry.numpy's functions: elementwise operations, reductions, linear algebra and
array manipulation. Each builds graph nodes; _creation.py, linalg.py and
random.py hold the rest."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any, Sequence

import numpy as np

from . import _dtypes as dt
from ._array import _Unsupported, ndarray, wrap
from ._engine import materialize
from ._graph import Const, Data, Host, Index, Map, MatMul, Node, Reduce, Reshape
from ._tiles import Tiled, runtime

# ---- operands ----


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


array = asarray


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> ndarray:
    return asarray(np.from_dlpack(x))


def _node(x: Any) -> Node:
    if isinstance(x, ndarray):
        return x._node
    if isinstance(x, (bool, int, float, np.generic)):
        v = x.item() if isinstance(x, np.generic) else x
        return Const(v, dt.result_type(v) if not isinstance(x, np.generic) else dt.dtype(x.dtype))
    if isinstance(x, (np.ndarray, list, tuple)):
        return asarray(x)._node
    raise _Unsupported(f"ferry.numpy cannot use a {type(x).__name__} as an array")


def _weak(x: Any) -> Any:
    """What promotion sees: arrays by type, Python scalars as weak scalars."""
    if isinstance(x, ndarray):
        return x
    if isinstance(x, (bool, int, float)):
        return x
    return _node(x)


def _cast(n: Node, t: np.dtype) -> Node:
    if n.dtype == t:
        return n
    if isinstance(n, Const) and n.value is None:
        return Const(n.number, t, n.shape)
    return Map("cast", [n], t)


def _map(op: str, args: Sequence[Node], t: np.dtype, seed: int = 0) -> ndarray:
    return wrap(Map(op, args, t, seed))


# ---- elementwise: binary ----

def _arith(op: str, a: Any, b: Any) -> ndarray:
    t = dt.result_type(_weak(a), _weak(b))
    x, y = _cast(_node(a), t), _cast(_node(b), t)
    if t == dt.bool_:
        if op in ("add", "maximum"):
            op = "or"
        elif op in ("mul", "minimum"):
            op = "and"
        elif op != "pow":
            raise TypeError(f"numpy boolean {op} is not supported; use logical_xor or cast to an integer type")
        else:
            x, y, t = _cast(x, dt.int64), _cast(y, dt.int64), dt.int64
    return _map(op, [x, y], t)


def add(a: Any, b: Any) -> ndarray:
    return _arith("add", a, b)


def subtract(a: Any, b: Any) -> ndarray:
    return _arith("sub", a, b)


def multiply(a: Any, b: Any) -> ndarray:
    return _arith("mul", a, b)


def divide(a: Any, b: Any) -> ndarray:
    t = dt.result_type(_weak(a), _weak(b))
    t = t if dt.is_float(t) else dt.float64
    return _map("div", [_cast(_node(a), t), _cast(_node(b), t)], t)


true_divide = divide


def floor_divide(a: Any, b: Any) -> ndarray:
    return _arith("floordiv", a, b)


def remainder(a: Any, b: Any) -> ndarray:
    return _arith("mod", a, b)


mod = remainder


def pow(a: Any, b: Any) -> ndarray:  # noqa: A001 - the array API's name
    return _arith("pow", a, b)


power = pow


def maximum(a: Any, b: Any) -> ndarray:
    return _arith("maximum", a, b)


def minimum(a: Any, b: Any) -> ndarray:
    return _arith("minimum", a, b)


def _compare(op: str, a: Any, b: Any) -> ndarray:
    t = dt.result_type(_weak(a), _weak(b))
    return _map(op, [_cast(_node(a), t), _cast(_node(b), t)], dt.bool_)


def equal(a: Any, b: Any) -> ndarray:
    return _compare("eq", a, b)


def not_equal(a: Any, b: Any) -> ndarray:
    return _compare("ne", a, b)


def less(a: Any, b: Any) -> ndarray:
    return _compare("lt", a, b)


def less_equal(a: Any, b: Any) -> ndarray:
    return _compare("le", a, b)


def greater(a: Any, b: Any) -> ndarray:
    return _compare("gt", a, b)


def greater_equal(a: Any, b: Any) -> ndarray:
    return _compare("ge", a, b)


def _bitwise(op: str, a: Any, b: Any) -> ndarray:
    t = dt.result_type(_weak(a), _weak(b))
    if dt.is_float(t):
        raise TypeError(f"bitwise {op} needs bool or integer arrays, not {t}")
    return _map(op, [_cast(_node(a), t), _cast(_node(b), t)], t)


def bitwise_and(a: Any, b: Any) -> ndarray:
    return _bitwise("and", a, b)


def bitwise_or(a: Any, b: Any) -> ndarray:
    return _bitwise("or", a, b)


def bitwise_xor(a: Any, b: Any) -> ndarray:
    return _bitwise("xor", a, b)


def logical_and(a: Any, b: Any) -> ndarray:
    return _map("and", [_truth(a), _truth(b)], dt.bool_)


def logical_or(a: Any, b: Any) -> ndarray:
    return _map("or", [_truth(a), _truth(b)], dt.bool_)


def logical_xor(a: Any, b: Any) -> ndarray:
    return _map("xor", [_truth(a), _truth(b)], dt.bool_)


def _truth(a: Any) -> Node:
    return _cast(_node(a), dt.bool_)


def logical_not(a: Any) -> ndarray:
    return _map("not", [_truth(a)], dt.bool_)


def bitwise_invert(a: Any) -> ndarray:
    n = _node(a)
    if n.dtype == dt.bool_:
        return _map("not", [n], dt.bool_)
    if dt.is_float(n.dtype):
        raise TypeError(f"bitwise invert needs bool or integer arrays, not {n.dtype}")
    return _map("xor", [n, Const(-1, n.dtype)], n.dtype)


invert = bitwise_invert


def where(condition: Any, a: Any, b: Any) -> ndarray:
    t = dt.result_type(_weak(a), _weak(b))
    return _map("where", [_truth(condition), _cast(_node(a), t), _cast(_node(b), t)], t)


def clip(x: Any, min: Any = None, max: Any = None) -> ndarray:  # noqa: A002 - NumPy's names
    if min is None and max is None:
        return asarray(x)
    parts = [p for p in (x, min, max) if p is not None]
    t = dt.result_type(*[_weak(p) for p in parts])
    n = _cast(_node(x), t)
    if min is None:
        return _map("minimum", [n, _cast(_node(max), t)], t)
    if max is None:
        return _map("maximum", [n, _cast(_node(min), t)], t)
    return _map("clip", [n, _cast(_node(min), t), _cast(_node(max), t)], t)


# ---- elementwise: unary ----

def negative(x: Any) -> ndarray:
    n = _node(x)
    if n.dtype == dt.bool_:
        raise TypeError("the numpy boolean negative, the `-` operator, is not supported; use ~ or logical_not")
    return _map("neg", [n], n.dtype)


def positive(x: Any) -> ndarray:
    return asarray(x)


def abs(x: Any) -> ndarray:  # noqa: A001
    n = _node(x)
    return _map("abs", [n], n.dtype) if n.dtype != dt.bool_ else wrap(n)


absolute = abs


def square(x: Any) -> ndarray:
    n = _node(x)
    return _map("square", [n], n.dtype) if n.dtype != dt.bool_ else wrap(n)


def sign(x: Any) -> ndarray:
    n = _node(x)
    return _map("sign", [n], n.dtype)


def floor(x: Any) -> ndarray:
    n = _node(x)
    return _map("floor", [n], n.dtype)


def ceil(x: Any) -> ndarray:
    n = _node(x)
    return _map("ceil", [n], n.dtype)


def _float_fn(op: str) -> Any:
    def fn(x: Any) -> ndarray:
        n = _node(x)
        t = dt.float_of(n.dtype)
        return _map(op, [_cast(n, t)], t)
    fn.__name__ = op
    fn.__doc__ = f"{op}(x) elementwise (integers give float64)"
    return fn


exp = _float_fn("exp")
log = _float_fn("log")
log1p = _float_fn("log1p")
sqrt = _float_fn("sqrt")
sin = _float_fn("sin")
cos = _float_fn("cos")
tanh = _float_fn("tanh")
sigmoid = _float_fn("sigmoid")


def expm1(x: Any) -> ndarray:
    return exp(x) - 1


def log2(x: Any) -> ndarray:
    lx = log(x)
    return lx * (1 / math.log(2))


def log10(x: Any) -> ndarray:
    lx = log(x)
    return lx * (1 / math.log(10))


def isnan(x: Any) -> ndarray:
    return _map("isnan", [_node(x)], dt.bool_)


def isfinite(x: Any) -> ndarray:
    return _map("isfinite", [_node(x)], dt.bool_)


def isinf(x: Any) -> ndarray:
    return logical_not(logical_or(isfinite(x), isnan(x)))


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> ndarray:
    n = _node(x)
    return wrap(_cast(n, dt.dtype(dtype)))


# ---- creation ----

def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    out = tuple(int(operator.index(d)) for d in shape)
    if builtins.any(d < 0 for d in out):
        raise ValueError(f"negative dimensions are not allowed: {out}")
    return out


# ---- reductions ----

def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
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


def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    n = _node(x)
    out = dt.dtype(dtype) if dtype is not None else dt.sum_type(n.dtype)
    acc = dt.float64 if dt.is_float(out) else dt.int64
    return astype(wrap(Reduce("add", _cast(n, acc), _axes(axis, len(n.shape)), keepdims, acc)), out)


def prod(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ndarray:
    n = _node(x)
    out = dt.dtype(dtype) if dtype is not None else dt.sum_type(n.dtype)
    acc = dt.float64 if dt.is_float(out) else dt.int64
    return astype(wrap(Reduce("mul", _cast(n, acc), _axes(axis, len(n.shape)), keepdims, acc)), out)


def _extreme(fold: str, x: Any, axis: Any, keepdims: bool) -> ndarray:
    n = _node(x)
    axes = _axes(axis, len(n.shape))
    if n.size == 0 or _count(n.shape, axes) == 0:
        raise ValueError(f"zero-size array to reduction operation {'minimum' if fold == 'min' else 'maximum'} "
                         "which has no identity")
    return wrap(Reduce(fold, n, axes, keepdims, n.dtype))


def min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    return _extreme("min", x, axis, keepdims)


def max(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    return _extreme("max", x, axis, keepdims)


amin, amax = min, max


def any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    n = _truth(x)
    return wrap(Reduce("max", n, _axes(axis, len(n.shape)), keepdims, dt.bool_))


def all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A001
    n = _truth(x)
    return wrap(Reduce("min", n, _axes(axis, len(n.shape)), keepdims, dt.bool_))


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> ndarray:
    n = _node(x)
    axes = _axes(axis, len(n.shape))
    out = dt.dtype(dtype) if dtype is not None else dt.float_of(n.dtype) if n.dtype != dt.bool_ else dt.float64
    total = wrap(Reduce("add", _cast(n, dt.float64), axes, keepdims, dt.float64))
    count = _count(n.shape, axes)
    return astype(total / count if count else total * math.nan, out)


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False,
        ddof: float | None = None) -> ndarray:
    n = _node(x)
    if ddof is not None:
        correction = ddof
    axes = _axes(axis, len(n.shape))
    out = dt.float_of(n.dtype) if n.dtype != dt.bool_ else dt.float64
    x64 = wrap(_cast(n, dt.float64))
    count = _count(n.shape, axes)
    centre = wrap(Reduce("add", x64._node, axes, True, dt.float64)) / builtins.max(count, 1)
    d = x64 - centre
    total = wrap(Reduce("add", (d * d)._node, axes, keepdims, dt.float64))
    dof = count - correction
    return astype(total / dof if dof > 0 else total * math.nan, out)


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False,
        ddof: float | None = None) -> ndarray:
    v = var(x, axis=axis, correction=correction, keepdims=keepdims, ddof=ddof)
    return sqrt(v)


def _arg(fold: str, x: Any, axis: Any, keepdims: bool) -> ndarray:
    n = _node(x)
    if n.size == 0:
        raise ValueError(f"attempt to get arg{fold} of an empty sequence")
    if axis is None:
        from ._creation import flat_index
        axes = tuple(range(len(n.shape)))
        where_ = flat_index(n.shape)
    else:
        axes = _axes(axis, len(n.shape))
        where_ = Index(n.shape, axes[0])
    if not n.shape:
        return wrap(Const(0, dt.int64))
    extreme = wrap(Reduce(fold, n, axes, True, n.dtype))
    xs = wrap(n)
    hit = xs == extreme
    if dt.is_float(n.dtype):
        hit = hit | isnan(xs)
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


# ---- linear algebra ----

def matmul(a: Any, b: Any) -> ndarray:
    x, y = _node(a), _node(b)
    if not x.shape or not y.shape:
        raise ValueError("matmul: an operand is 0-d; use multiply or *")
    t = dt.result_type(wrap(x), wrap(y))
    work = t if dt.is_float(t) else dt.float64
    x, y = _cast(x, work), _cast(y, work)
    squeeze_a, squeeze_b = len(x.shape) == 1, len(y.shape) == 1
    if squeeze_a:
        x = Reshape(x, (1, x.shape[0]))
    if squeeze_b:
        y = Reshape(y, (y.shape[0], 1))
    if x.shape[-1] != y.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {y.shape[-2]} is different from {x.shape[-1]})")
    m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
    batch_x, batch_y = x.shape[:-2], y.shape[:-2]
    if not batch_y:
        # Leading dimensions of a become rows: one big gemm per tile.
        rows = int(np.prod(batch_x, dtype=np.int64)) * m
        node: Node = MatMul(Reshape(x, (rows, k)) if batch_x else x, y, (rows, n))
        node = Reshape(node, (*batch_x, m, n)) if batch_x else node
    elif batch_x == batch_y:
        b = int(np.prod(batch_x, dtype=np.int64))
        node = MatMul(Reshape(x, (b, m, k)), Reshape(y, (b, k, n)), (b, m, n))
        node = Reshape(node, (*batch_x, m, n))
    else:
        raise NotImplementedError(f"matmul with broadcast batch dimensions {batch_x} and {batch_y}")
    out_shape = node.shape
    if squeeze_a:
        out_shape = out_shape[:-2] + out_shape[-1:]
    if squeeze_b:
        out_shape = out_shape[:-1]
    if out_shape != node.shape:
        node = Reshape(node, out_shape)
    return astype(wrap(node), t)


def dot(a: Any, b: Any) -> ndarray:
    x, y = _node(a), _node(b)
    if not x.shape or not y.shape:
        return multiply(a, b)
    if len(x.shape) == 1 and len(y.shape) == 1:
        if x.shape != y.shape:
            raise ValueError(f"shapes {x.shape} and {y.shape} not aligned")
        return sum(multiply(a, b))
    if len(y.shape) <= 2:
        return matmul(a, b)
    raise NotImplementedError("dot of arrays of rank > 2 (use matmul or tensordot)")


def vdot(a: Any, b: Any, /) -> ndarray:
    x, y = reshape(asarray(a), (-1,)), reshape(asarray(b), (-1,))
    return dot(x, y)


def vecdot(a: Any, b: Any, /, *, axis: int = -1) -> ndarray:
    return sum(multiply(a, b), axis=axis)


def tensordot(a: Any, b: Any, /, *, axes: Any = 2) -> ndarray:
    x, y = asarray(a), asarray(b)
    if x.ndim == 2 and y.ndim == 2:
        if axes == 1 or axes == ([1], [0]) or axes == ((1,), (0,)):
            return matmul(x, y)
        if axes == 2 or axes == ([0, 1], [0, 1]):
            return sum(x * y)
        if axes == 0:
            return reshape(x, (*x.shape, 1, 1)) * reshape(y, (1, 1, *y.shape))
    raise NotImplementedError(f"tensordot beyond the 2-D cases (axes={axes!r})")


def outer(a: Any, b: Any) -> ndarray:
    x, y = reshape(asarray(a), (-1, 1)), reshape(asarray(b), (1, -1))
    return x * y


# ---- manipulation ----

def _host(name: str, fn: Any, args: Sequence[ndarray], shape: tuple[int, ...], t: np.dtype) -> ndarray:
    return wrap(Host(name, fn, [a._node for a in args], shape, t))


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
    return _host("transpose", lambda v: np.transpose(v, perm), [a], shape, a.dtype)


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
    axes = _axes(axis, a.ndim)
    if builtins.any(a.shape[i] != 1 for i in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


def broadcast_to(x: Any, /, shape: Any) -> ndarray:
    a = asarray(x)
    target = _shape(shape)
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
    return _host("concat", lambda *vs: np.concatenate(vs, axis=ax), xs, shape, t)


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


def getitem(x: ndarray, key: Any) -> ndarray:
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if isinstance(k, (ndarray, np.ndarray, list)):
            from ._indexing import advanced_getitem
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
    return _host("getitem", lambda v: v[key], [x], shape, x.dtype)


# ---- evaluation ----

def compute(*arrays: ndarray) -> tuple[ndarray, ...] | ndarray:
    """Submits the work of all `arrays` at once, then waits for it."""
    values = [materialize(asarray(a)._node) for a in arrays]
    for v in values:
        v.wait()
    return arrays[0] if len(arrays) == 1 else arrays
