"""Elementwise functions: arithmetic, comparisons, logical and bitwise
operations, where/clip and the unary functions. Each is one instruction of
a fused program (_engine.Program); chains of them run as one task per tile."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import apply, asarray, astype, cast, host, node, truth, weak
from ._graph import Const


# ---- elementwise: binary ----

# What the array API leaves undefined for complex numbers (no order, no floor).
_REAL_ONLY = {"floordiv": "floor_divide", "mod": "remainder", "maximum": "maximum", "minimum": "minimum",
              "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "floor": "floor",
              "ceil": "ceil", "trunc": "trunc", "sigmoid": "sigmoid", "signbit": "signbit", "atan2": "atan2",
              "copysign": "copysign", "hypot": "hypot", "logaddexp": "logaddexp"}


def _real_only(op: str, t: np.dtype) -> None:
    if dt.is_complex(t) and op in _REAL_ONLY:
        raise TypeError(f"{_REAL_ONLY[op]} is not defined for complex numbers ({t})")


def _arith(op: str, a: Any, b: Any) -> ndarray:
    t = dt.result_type(weak(a), weak(b))
    _real_only(op, t)
    x, y = cast(node(a), t), cast(node(b), t)
    if t == dt.bool_:
        if op in ("add", "maximum"):
            op = "or"
        elif op in ("mul", "minimum"):
            op = "and"
        elif op not in ("pow", "floordiv", "mod"):
            raise TypeError(f"numpy boolean {op} is not supported; use logical_xor or cast to an integer type")
        else:  # NumPy computes these in int8
            x, y, t = cast(x, dt.int8), cast(y, dt.int8), dt.int8
    return apply(op, [x, y], t)


def add(a: Any, b: Any) -> ndarray:
    return _arith("add", a, b)


def subtract(a: Any, b: Any) -> ndarray:
    return _arith("sub", a, b)


def multiply(a: Any, b: Any) -> ndarray:
    return _arith("mul", a, b)


def divide(a: Any, b: Any) -> ndarray:
    t = dt.result_type(weak(a), weak(b))
    t = t if dt.is_inexact(t) else dt.float64
    return apply("div", [cast(node(a), t), cast(node(b), t)], t)


true_divide = divide


def floor_divide(a: Any, b: Any) -> ndarray:
    return _arith("floordiv", a, b)


def remainder(a: Any, b: Any) -> ndarray:
    return _arith("mod", a, b)


mod = remainder


def pow(a: Any, b: Any) -> ndarray:  # noqa: A001 - the array API's name
    if dt.is_int(dt.result_type(weak(a), weak(b))) and _negative_on_host(b):
        raise ValueError("Integers to negative integer powers are not allowed.")
    return _arith("pow", a, b)


def _negative_on_host(b: Any) -> bool:
    """Whether an exponent known here (a scalar, a NumPy array or a list) has
    a negative value. A ferry.numpy exponent is not read: that would wait for
    it; its negative entries give 0."""
    if isinstance(b, (bool, ndarray)):
        return False
    if isinstance(b, (int, np.integer)):
        return b < 0
    if isinstance(b, (np.ndarray, list, tuple)):
        v = np.asarray(b)
        return v.dtype.kind == "i" and bool((v < 0).any())
    return False


power = pow


def _real_float(op: str, a: Any, b: Any) -> ndarray:
    """A function of two real floating-point arrays (integers give float64,
    as NumPy's; the array API defines these for real floats only)."""
    t = dt.result_type(weak(a), weak(b))
    _real_only(op, t)
    if t == dt.bool_ or not dt.is_inexact(t):
        t = dt.float_of(t)
    return apply(op, [cast(node(a), t), cast(node(b), t)], t)


def atan2(x1: Any, x2: Any, /) -> ndarray:
    return _real_float("atan2", x1, x2)


arctan2 = atan2


def copysign(x1: Any, x2: Any, /) -> ndarray:
    return _real_float("copysign", x1, x2)


def hypot(x1: Any, x2: Any, /) -> ndarray:
    return _real_float("hypot", x1, x2)


def logaddexp(x1: Any, x2: Any, /) -> ndarray:
    return _real_float("logaddexp", x1, x2)


def maximum(a: Any, b: Any) -> ndarray:
    return _arith("maximum", a, b)


def minimum(a: Any, b: Any) -> ndarray:
    return _arith("minimum", a, b)


def _compare(op: str, a: Any, b: Any) -> ndarray:
    t = dt.result_type(weak(a), weak(b))
    _real_only(op, t)
    known = _beyond_range(op, a, b, t)
    if known is not None:
        return known
    return apply(op, [cast(node(a), t), cast(node(b), t)], dt.bool_)


def _beyond_range(op: str, a: Any, b: Any, t: np.dtype) -> ndarray | None:
    """NumPy compares an integer array with a Python int outside its type's
    range (uint8_array == -2) without casting it: every answer is known."""
    if not dt.is_int(t):
        return None
    for array, scalar, flipped in ((a, b, False), (b, a, True)):
        if isinstance(scalar, int) and not isinstance(scalar, bool) and isinstance(array, ndarray):
            info = np.iinfo(t)
            if info.min <= scalar <= info.max:
                return None
            above = scalar > info.max  # the scalar beats every element
            if flipped:
                op = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}.get(op, op)
            value = {"eq": False, "ne": True, "lt": above, "le": above, "gt": not above, "ge": not above}[op]
            return wrap(Const(value, dt.bool_, array.shape))
    return None


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
    t = dt.result_type(weak(a), weak(b))
    if dt.is_inexact(t):
        raise TypeError(f"bitwise {op} needs bool or integer arrays, not {t}")
    return apply(op, [cast(node(a), t), cast(node(b), t)], t)


def bitwise_and(a: Any, b: Any) -> ndarray:
    return _bitwise("and", a, b)


def bitwise_or(a: Any, b: Any) -> ndarray:
    return _bitwise("or", a, b)


def bitwise_xor(a: Any, b: Any) -> ndarray:
    return _bitwise("xor", a, b)


def _shift(op: str, a: Any, b: Any) -> ndarray:
    t = dt.result_type(weak(a), weak(b))
    if not dt.is_int(t):
        raise TypeError(f"bitwise shifts need integer arrays, not {t}")
    return apply(op, [cast(node(a), t), cast(node(b), t)], t)


def bitwise_left_shift(x1: Any, x2: Any, /) -> ndarray:
    return _shift("shl", x1, x2)


def bitwise_right_shift(x1: Any, x2: Any, /) -> ndarray:
    return _shift("shr", x1, x2)


left_shift, right_shift = bitwise_left_shift, bitwise_right_shift


def logical_and(a: Any, b: Any) -> ndarray:
    return apply("and", [truth(a), truth(b)], dt.bool_)


def logical_or(a: Any, b: Any) -> ndarray:
    return apply("or", [truth(a), truth(b)], dt.bool_)


def logical_xor(a: Any, b: Any) -> ndarray:
    return apply("xor", [truth(a), truth(b)], dt.bool_)


def logical_not(a: Any) -> ndarray:
    return apply("not", [truth(a)], dt.bool_)


def bitwise_invert(a: Any) -> ndarray:
    n = node(a)
    if n.dtype == dt.bool_:
        return apply("not", [n], dt.bool_)
    if dt.is_inexact(n.dtype):
        raise TypeError(f"bitwise invert needs bool or integer arrays, not {n.dtype}")
    ones = -1 if n.dtype.kind == "i" else int(np.iinfo(n.dtype).max)  # every bit set
    return apply("xor", [n, Const(ones, n.dtype)], n.dtype)


invert = bitwise_invert


def where(condition: Any, a: Any, b: Any) -> ndarray:
    t = dt.result_type(weak(a), weak(b))
    return apply("where", [truth(condition), cast(node(a), t), cast(node(b), t)], t)


def clip(x: Any, min: Any = None, max: Any = None) -> ndarray:  # noqa: A002 - NumPy's names
    if min is None and max is None:
        return asarray(x)
    parts = [p for p in (x, min, max) if p is not None]
    t = dt.result_type(*[weak(p) for p in parts])
    if dt.is_complex(t):
        raise TypeError(f"clip is not defined for complex numbers ({t})")
    n = cast(node(x), t)
    if min is None:
        return apply("minimum", [n, cast(node(max), t)], t)
    if max is None:
        return apply("maximum", [n, cast(node(min), t)], t)
    return apply("clip", [n, cast(node(min), t), cast(node(max), t)], t)


# ---- elementwise: unary ----

def negative(x: Any) -> ndarray:
    n = node(x)
    if n.dtype == dt.bool_:
        raise TypeError("the numpy boolean negative, the `-` operator, is not supported; use ~ or logical_not")
    return apply("neg", [n], n.dtype)


def positive(x: Any) -> ndarray:
    return asarray(x)


def abs(x: Any) -> ndarray:  # noqa: A001
    """|x|; of complex numbers their magnitude (hypot), of the real type."""
    n = node(x)
    return apply("abs", [n], dt.real_of(n.dtype)) if n.dtype != dt.bool_ else wrap(n)


absolute = abs


def square(x: Any) -> ndarray:
    n = node(x)
    return apply("square", [n], n.dtype) if n.dtype != dt.bool_ else wrap(n)


def sign(x: Any) -> ndarray:
    n = node(x)
    return apply("sign", [n], n.dtype)


def _bool_as_float(n: Any) -> Any:
    """Bools rounded: float32 (NumPy gives float16, which ferry.numpy lacks)."""
    return cast(n, dt.float32) if n.dtype == dt.bool_ else n


def floor(x: Any) -> ndarray:
    n = node(x)
    _real_only("floor", n.dtype)
    n = _bool_as_float(n)
    return apply("floor", [n], n.dtype)


def ceil(x: Any) -> ndarray:
    n = node(x)
    _real_only("ceil", n.dtype)
    n = _bool_as_float(n)
    return apply("ceil", [n], n.dtype)


def trunc(x: Any, /) -> ndarray:
    n = node(x)
    _real_only("trunc", n.dtype)
    n = _bool_as_float(n)
    return apply("trunc", [n], n.dtype)


def round(x: Any, /, decimals: int = 0) -> ndarray:  # noqa: A001 - the array API's name
    """To the nearest integer, halves to even (NumPy's); a complex number
    rounds each part. `decimals` (NumPy's) scales by a power of ten first."""
    n = node(x)
    if n.dtype == dt.bool_:
        return wrap(n)
    if decimals == 0 or (decimals > 0 and not dt.is_inexact(n.dtype)):
        return apply("round", [n], n.dtype)
    if not dt.is_inexact(n.dtype):  # integers to tens, hundreds...: NumPy's, exact beyond 2**53
        return host("round", lambda v: np.round(v, decimals), [wrap(n)], n.shape, n.dtype)
    # NumPy's order of operations, so that the same values round alike.
    if decimals > 0:
        return divide(apply("round", [node(multiply(wrap(n), 10.0 ** decimals))], n.dtype), 10.0 ** decimals)
    scale = 10.0 ** -decimals
    return multiply(apply("round", [node(divide(wrap(n), scale))], n.dtype), scale)


around = round


def signbit(x: Any, /) -> ndarray:
    n = node(x)
    _real_only("signbit", n.dtype)
    return apply("signbit", [n], dt.bool_)


def real(x: Any, /) -> ndarray:
    """The real part (of a real array, the array itself)."""
    n = node(x)
    return apply("real", [n], dt.real_of(n.dtype)) if dt.is_complex(n.dtype) else wrap(n)


def imag(x: Any, /) -> ndarray:
    """The imaginary part (of a real array, zeros of its type)."""
    n = node(x)
    if dt.is_complex(n.dtype):
        return apply("imag", [n], dt.real_of(n.dtype))
    return wrap(Const(0, n.dtype, n.shape))


def conj(x: Any, /) -> ndarray:
    """The complex conjugate (of a real array, the array itself)."""
    n = node(x)
    return apply("conj", [n], n.dtype) if dt.is_complex(n.dtype) else wrap(n)


def _float_fn(op: str) -> Any:
    def fn(x: Any) -> ndarray:
        n = node(x)
        t = dt.float_of(n.dtype)
        _real_only(op, t)
        return apply(op, [cast(n, t)], t)
    fn.__name__ = op
    fn.__doc__ = f"{op}(x) elementwise (integers give float64)"
    return fn


exp = _float_fn("exp")
expm1 = _float_fn("expm1")
log = _float_fn("log")
log1p = _float_fn("log1p")
log2 = _float_fn("log2")
log10 = _float_fn("log10")
sqrt = _float_fn("sqrt")
sin = _float_fn("sin")
cos = _float_fn("cos")
tan = _float_fn("tan")
asin = arcsin = _float_fn("asin")
acos = arccos = _float_fn("acos")
atan = arctan = _float_fn("atan")
sinh = _float_fn("sinh")
cosh = _float_fn("cosh")
tanh = _float_fn("tanh")
asinh = arcsinh = _float_fn("asinh")
acosh = arccosh = _float_fn("acosh")
atanh = arctanh = _float_fn("atanh")
sigmoid = _float_fn("sigmoid")


def reciprocal(x: Any, /) -> ndarray:
    """1 / x for floating-point x (the array API defines it for floats only;
    NumPy's integer reciprocal truncates, 1 // x would floor)."""
    n = node(x)
    if not dt.is_inexact(n.dtype):
        raise TypeError(f"reciprocal takes a floating-point array, not {n.dtype}")
    return divide(1.0, wrap(n))


def nextafter(x1: Any, x2: Any, /) -> ndarray:
    """The next representable value after x1 towards x2: a bit-level step
    that the fused programs have no instruction for, so a Python task."""
    t = dt.result_type(weak(x1), weak(x2))
    if not dt.is_float(t):
        raise TypeError(f"nextafter takes floating-point arrays, not {t}")
    a, b = astype(x1, t), astype(x2, t)
    shape = np.broadcast_shapes(a.shape, b.shape)
    return host("nextafter", np.nextafter, [a, b], shape, t)


def isnan(x: Any) -> ndarray:
    return apply("isnan", [node(x)], dt.bool_)


def isfinite(x: Any) -> ndarray:
    return apply("isfinite", [node(x)], dt.bool_)


def isinf(x: Any) -> ndarray:
    return logical_not(logical_or(isfinite(x), isnan(x)))
