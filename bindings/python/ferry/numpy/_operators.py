"""The operator table: ndarray's dunder methods and the methods that are
functions (x.sum(), x.T, x[k], x + y, ...), bound to the families' functions.
Installed last, from __init__, so that the class (_array) sits below every
family and no family needs the class to know about it."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import numpy as np

from . import _elementwise as e
from . import _manipulation as m
from . import _products as p
from . import _reductions as r
from ._array import ndarray
from ._builders import Unsupported, astype
from ._explain import explain
from ._indexing import getitem, setitem
from ._interop import array_function, array_ufunc

_BINARY = {
    "add": e.add, "sub": e.subtract, "mul": e.multiply, "truediv": e.divide, "floordiv": e.floor_divide,
    "mod": e.remainder, "pow": e.pow, "matmul": p.matmul, "and": e.bitwise_and, "or": e.bitwise_or,
    "xor": e.bitwise_xor, "lshift": e.bitwise_left_shift, "rshift": e.bitwise_right_shift,
}
_COMPARISONS = {"lt": e.less, "le": e.less_equal, "gt": e.greater, "ge": e.greater_equal, "eq": e.equal,
                "ne": e.not_equal}
# The methods that are functions, with NumPy's positional parameters
# (x.sum(0) is x.sum(axis=0)); the functions themselves take them by keyword,
# as the array API says.
_REDUCE = ("axis", "dtype", "out", "keepdims")
_FOLD = ("axis", "out", "keepdims")
_METHODS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "sum": (r.sum, _REDUCE), "prod": (r.prod, _REDUCE), "mean": (r.mean, _REDUCE),
    "min": (r.min, _FOLD), "max": (r.max, _FOLD), "any": (r.any, _FOLD), "all": (r.all, _FOLD),
    "argmin": (r.argmin, ("axis", "out")), "argmax": (r.argmax, ("axis", "out")),
    "std": (r.std, ("axis", "dtype", "out", "ddof", "keepdims")),
    "var": (r.var, ("axis", "dtype", "out", "ddof", "keepdims")),
    "clip": (e.clip, ("min", "max", "out")), "dot": (p.dot, ("b", "out")),
}


def _binary(fn: Callable[[Any, Any], ndarray], reflected: bool = False) -> Callable[[ndarray, Any], Any]:
    def op(self: ndarray, other: Any) -> Any:
        try:
            return fn(other, self) if reflected else fn(self, other)
        except Unsupported:
            return NotImplemented
    return op


def _method(name: str, fn: Callable[..., Any], positional: tuple[str, ...]) -> Callable[..., Any]:
    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(positional):
            raise TypeError(f"ndarray.{name}() takes at most {len(positional)} positional arguments")
        for parameter, value in zip(positional, args):
            if parameter in kwargs:
                raise TypeError(f"ndarray.{name}() got multiple values for argument {parameter!r}")
            kwargs[parameter] = value
        if kwargs.pop("out", None) is not None:
            raise NotImplementedError(f"ndarray.{name}(..., out=...): ferry.numpy never writes into an array; "
                                      "use the result")
        if "dtype" in kwargs and kwargs["dtype"] is None:
            del kwargs["dtype"]
        return fn(self, **kwargs)
    method.__name__ = name
    return method


def _reshape(self: ndarray, *shape: Any, **kwargs: Any) -> ndarray:
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return m.reshape(self, shape, **kwargs)


def _transpose(self: ndarray, *axes: Any) -> ndarray:
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = tuple(axes[0])
    return m.transpose(self, axes or None)


def _setitem(self: ndarray, key: Any, value: Any) -> None:
    # This array takes a new value (x[key] = v is x = x.at[key].set(v) in
    # JAX's words); arrays made from it before, slices included, keep the
    # old one: ferry.numpy has no views to write through.
    self._node = setitem(self, key, value)._node


def install(namespace: ModuleType) -> None:
    """Binds the table onto ndarray; `namespace` is ferry.numpy itself (what
    __array_namespace__ returns)."""
    for dunder, fn in _BINARY.items():
        setattr(ndarray, f"__{dunder}__", _binary(fn))
        setattr(ndarray, f"__r{dunder}__", _binary(fn, reflected=True))
    for dunder, fn in _COMPARISONS.items():
        setattr(ndarray, f"__{dunder}__", _binary(fn))
    for name, (fn, positional) in _METHODS.items():
        setattr(ndarray, name, _method(name, fn, positional))
    ndarray.__neg__ = lambda self: e.negative(self)
    ndarray.__pos__ = lambda self: self
    ndarray.__abs__ = lambda self: e.abs(self)
    ndarray.__invert__ = lambda self: e.bitwise_invert(self)
    ndarray.T = property(lambda self: m.transpose(self))
    ndarray.mT = property(lambda self: m.matrix_transpose(self))
    ndarray.__getitem__ = getitem
    ndarray.__setitem__ = _setitem
    ndarray.astype = lambda self, dtype, copy=True: astype(self, dtype)
    ndarray.reshape = _reshape
    ndarray.transpose = _transpose
    def array_namespace(self: ndarray, *, api_version: str | None = None) -> Any:
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"ferry.numpy implements the array API up to 2024.12, not {api_version!r}")
        return namespace

    ndarray.__array_namespace__ = array_namespace
    ndarray.__array_ufunc__ = lambda self, ufunc, method, *inputs, **kwargs: array_ufunc(ufunc, method, inputs,
                                                                                          kwargs)
    ndarray.__array_function__ = lambda self, func, types, args, kwargs: array_function(func, args, kwargs)
    ndarray._repr_html_ = lambda self: (f"<pre>{self!r}</pre><details><summary>tasks</summary>"
                                        f"<pre>{explain(self)}</pre></details>")
