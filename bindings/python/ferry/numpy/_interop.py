"""NumPy calling back into ferry.numpy: np.exp(x), np.sum(x), np.concatenate
([x, y]) on ferry.numpy arrays run in Ferry. A NumPy function ferry.numpy
lacks runs on NumPy copies of the arrays (read back to the host), with a
HostCopyWarning naming the function and the arrays the first time: the
answer is NumPy's, and the copy is said aloud, never silent."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import _creation as c
from . import _elementwise as e
from . import _indexing as ix
from . import _manipulation as m
from . import _products as p
from . import _reductions as r
from . import linalg
from ._array import ndarray


class HostCopyWarning(UserWarning):
    """A NumPy function ferry.numpy does not implement ran on NumPy copies of
    ferry.numpy arrays: their values were read back to the host. Given once
    per function."""


_warned: set[str] = set()


def _on_host(name: str, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    copied: list[str] = []

    def home(v: Any) -> Any:
        if isinstance(v, ndarray):
            copied.append(f"{v.dtype}{list(v.shape)}")
            return v.numpy()
        if type(v) in (list, tuple):
            return type(v)(home(item) for item in v)
        if type(v) is dict:
            return {key: home(item) for key, item in v.items()}
        return v

    args, kwargs = home(args), home(kwargs)
    if name not in _warned:
        _warned.add(name)
        # stacklevel 4: the caller of the NumPy function (past this, the
        # protocol function and ndarray's method; NumPy's dispatch is C).
        warnings.warn(f"ferry.numpy does not implement {name}: it ran on NumPy copies of the arrays "
                      f"{', '.join(copied)}, read back to the host; the result is NumPy's", HostCopyWarning,
                      stacklevel=4)
    return func(*args, **kwargs)


def _holds_ferry_array(v: Any) -> bool:
    return isinstance(v, ndarray) or (type(v) in (list, tuple) and any(_holds_ferry_array(x) for x in v))

_UFUNCS = {
    "add": e.add, "subtract": e.subtract, "multiply": e.multiply, "divide": e.divide, "true_divide": e.divide,
    "floor_divide": e.floor_divide, "remainder": e.remainder, "power": e.pow, "maximum": e.maximum,
    "minimum": e.minimum, "equal": e.equal, "not_equal": e.not_equal, "less": e.less, "less_equal": e.less_equal,
    "greater": e.greater, "greater_equal": e.greater_equal, "logical_and": e.logical_and,
    "logical_or": e.logical_or, "logical_xor": e.logical_xor, "logical_not": e.logical_not,
    "bitwise_and": e.bitwise_and, "bitwise_or": e.bitwise_or, "bitwise_xor": e.bitwise_xor,
    "invert": e.bitwise_invert, "negative": e.negative, "positive": e.positive, "absolute": e.abs,
    "square": e.square, "sign": e.sign, "floor": e.floor, "ceil": e.ceil, "exp": e.exp, "expm1": e.expm1,
    "log": e.log, "log1p": e.log1p, "log2": e.log2, "log10": e.log10, "sqrt": e.sqrt, "sin": e.sin, "cos": e.cos,
    "tan": e.tan, "arcsin": e.asin, "arccos": e.acos, "arctan": e.atan, "sinh": e.sinh, "cosh": e.cosh,
    "tanh": e.tanh, "arcsinh": e.asinh, "arccosh": e.acosh, "arctanh": e.atanh, "arctan2": e.atan2,
    "copysign": e.copysign, "hypot": e.hypot, "logaddexp": e.logaddexp, "trunc": e.trunc, "rint": e.round,
    "signbit": e.signbit, "left_shift": e.bitwise_left_shift, "right_shift": e.bitwise_right_shift,
    "isnan": e.isnan, "isfinite": e.isfinite, "isinf": e.isinf, "matmul": p.matmul,
}

_REDUCE = {"add": r.sum, "multiply": r.prod, "maximum": r.max, "minimum": r.min, "logical_or": r.any,
           "logical_and": r.all}


def array_ufunc(ufunc: Any, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    name = getattr(ufunc, "__name__", str(ufunc))
    if _holds_ferry_array(kwargs.get("out")):
        raise NotImplementedError(f"numpy.{name}(..., out=...) on ferry.numpy arrays: results are new arrays, never written into one")
    extra = {k: v for k, v in kwargs.items() if k != "out" or v is not None}
    if method == "__call__" and name in _UFUNCS and not extra:
        return _UFUNCS[name](*inputs)
    if method == "reduce" and name in _REDUCE and len(inputs) == 1:
        axis = extra.pop("axis", 0)
        keepdims = extra.pop("keepdims", False)
        if not extra:
            return _REDUCE[name](inputs[0], axis=axis, keepdims=keepdims)
    full = f"numpy.{name}" + (f".{method}" if method != "__call__" else "")
    return _on_host(full, ufunc if method == "__call__" else getattr(ufunc, method), inputs, kwargs)


def _svd(a: Any, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False) -> Any:
    if hermitian:
        raise NotImplementedError("numpy.linalg.svd(..., hermitian=True) on ferry.numpy arrays")
    return linalg.svd(a, full_matrices=full_matrices) if compute_uv else linalg.svdvals(a)


def _pinv(a: Any, rcond: Any, hermitian: bool, rtol: Any) -> Any:
    if hermitian:
        raise NotImplementedError("numpy.linalg.pinv(..., hermitian=True) on ferry.numpy arrays")
    return linalg.pinv(a, rtol=rtol if rtol is not None else rcond)


def _qr(a: Any, mode: str = "reduced") -> Any:
    if mode not in ("reduced", "complete"):
        raise NotImplementedError(f"numpy.linalg.qr(..., mode={mode!r}) on ferry.numpy arrays")
    return linalg.qr(a, mode=mode)


def _eigh(a: Any, UPLO: str = "L") -> Any:  # noqa: N803 - NumPy's name
    if UPLO != "L":
        raise NotImplementedError("numpy.linalg.eigh(..., UPLO='U') on ferry.numpy arrays (the lower triangle is read)")
    return linalg.eigh(a)


def _no_out(name: str, out: Any) -> None:
    if out is not None:
        raise NotImplementedError(f"numpy.{name}(..., out=...) on ferry.numpy arrays")


def _meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> Any:
    if sparse:
        raise NotImplementedError("numpy.meshgrid(..., sparse=True) on ferry.numpy arrays")
    return tuple(c.meshgrid(*xi, indexing=indexing))


def _matrix_rank(a: Any, tol: Any, hermitian: bool, rtol: Any) -> Any:
    if tol is not None or hermitian:
        raise NotImplementedError("numpy.linalg.matrix_rank(..., tol=/hermitian=) on ferry.numpy arrays: use rtol")
    return linalg.matrix_rank(a, rtol=rtol)


def _reduction(fn: Any) -> Any:
    def call(x: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        if out is not None:
            raise NotImplementedError(f"numpy.{fn.__name__}(..., out=...) on ferry.numpy arrays")
        if dtype is not None:
            return fn(x, axis=axis, keepdims=keepdims, dtype=dtype, **kw)
        return fn(x, axis=axis, keepdims=keepdims, **kw)
    return call


def _plain(fn: Any, *names: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return call


_FUNCTIONS: dict[Any, Any] = {
    np.sum: _reduction(r.sum), np.prod: _reduction(r.prod), np.mean: _reduction(r.mean),
    np.min: lambda x, axis=None, keepdims=False, **k: r.min(x, axis=axis, keepdims=keepdims),
    np.max: lambda x, axis=None, keepdims=False, **k: r.max(x, axis=axis, keepdims=keepdims),
    np.amin: lambda x, axis=None, keepdims=False, **k: r.min(x, axis=axis, keepdims=keepdims),
    np.amax: lambda x, axis=None, keepdims=False, **k: r.max(x, axis=axis, keepdims=keepdims),
    np.any: lambda x, axis=None, keepdims=False, **k: r.any(x, axis=axis, keepdims=keepdims),
    np.all: lambda x, axis=None, keepdims=False, **k: r.all(x, axis=axis, keepdims=keepdims),
    np.std: lambda x, axis=None, dtype=None, out=None, ddof=0, keepdims=False: r.std(x, axis=axis, ddof=ddof,
                                                                                     keepdims=keepdims),
    np.var: lambda x, axis=None, dtype=None, out=None, ddof=0, keepdims=False: r.var(x, axis=axis, ddof=ddof,
                                                                                     keepdims=keepdims),
    np.argmin: lambda x, axis=None, out=None, keepdims=False: r.argmin(x, axis=axis, keepdims=keepdims),
    np.argmax: lambda x, axis=None, out=None, keepdims=False: r.argmax(x, axis=axis, keepdims=keepdims),
    np.where: lambda c, a, b: e.where(c, a, b),
    np.clip: lambda x, a_min=None, a_max=None, **k: e.clip(x, k.get("min", a_min), k.get("max", a_max)),
    np.dot: lambda a, b: p.dot(a, b), np.vdot: p.vdot, np.matmul: p.matmul,
    np.tensordot: lambda a, b, axes=2: p.tensordot(a, b, axes=axes), np.outer: p.outer,
    np.transpose: lambda x, axes=None: m.transpose(x, axes), np.reshape: lambda x, *a, **k: m.reshape(x, *a, **k),
    np.concatenate: lambda arrays, axis=0: m.concat(arrays, axis=axis),
    np.stack: lambda arrays, axis=0: m.stack(arrays, axis=axis),
    np.expand_dims: lambda x, axis: m.expand_dims(x, axis), np.squeeze: lambda x, axis=None: m.squeeze(x, axis),
    np.broadcast_to: lambda x, shape: m.broadcast_to(x, shape), np.swapaxes: m.swapaxes,
    np.zeros_like: lambda x, dtype=None: c.zeros_like(x, dtype=dtype),
    np.ones_like: lambda x, dtype=None: c.ones_like(x, dtype=dtype),
    np.full_like: lambda x, fill_value, dtype=None: c.full_like(x, fill_value, dtype=dtype),
    np.empty_like: lambda x, dtype=None: c.empty_like(x, dtype=dtype),
    np.ravel: lambda x: m.reshape(x, (-1,)), np.shape: lambda x: x.shape, np.ndim: lambda x: x.ndim,
    np.size: lambda x: x.size,
    np.linalg.norm: lambda x, ord=None, axis=None, keepdims=False: linalg.norm(x, ord=ord, axis=axis,
                                                                               keepdims=keepdims),
    np.linalg.cholesky: lambda x: linalg.cholesky(x), np.linalg.solve: lambda a, b: linalg.solve(a, b),
    np.linalg.qr: _qr, np.linalg.svd: _svd, np.linalg.inv: lambda a: linalg.inv(a),
    np.linalg.pinv: lambda a, rcond=None, hermitian=False, *, rtol=None: _pinv(a, rcond, hermitian, rtol), np.linalg.eigh: _eigh, np.linalg.eigvalsh: lambda a, UPLO="L": _eigh(a, UPLO)[0],
    np.take: lambda a, indices, axis=None: ix.take(a, indices, axis=axis),
    np.flip: lambda m, axis=None: ix.flip(m, axis=axis),
    np.sort: lambda a, axis=-1, kind=None, order=None, **k: ix.sort(a, axis=axis),
    np.argsort: lambda a, axis=-1, kind=None, order=None, **k: ix.argsort(a, axis=axis),
    np.nonzero: lambda a: ix.nonzero(a), np.moveaxis: lambda a, source, destination: m.moveaxis(a, source, destination),
    np.repeat: lambda a, repeats, axis=None: m.repeat(a, repeats, axis=axis),
    np.roll: lambda a, shift, axis=None: m.roll(a, shift, axis=axis), np.tile: lambda a, reps: m.tile(a, reps),
    np.tril: lambda a, k=0: c.tril(a, k=k), np.triu: lambda a, k=0: c.triu(a, k=k),
    np.meshgrid: _meshgrid,
    np.round: lambda a, decimals=0, out=None: _no_out("round", out) or e.round(a, decimals=decimals),
    np.around: lambda a, decimals=0, out=None: _no_out("around", out) or e.round(a, decimals=decimals),
    np.linalg.det: lambda a: linalg.det(a), np.linalg.slogdet: lambda a: linalg.slogdet(a),
    np.linalg.matrix_power: lambda a, n: linalg.matrix_power(a, n),
    np.linalg.matrix_rank: lambda a, tol=None, hermitian=False, *, rtol=None: _matrix_rank(a, tol, hermitian, rtol),
}


def array_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    impl = _FUNCTIONS.get(func)
    if impl is None:
        module = getattr(func, "__module__", None) or "numpy"
        module = ".".join(part for part in module.split(".") if not part.startswith("_"))
        return _on_host(f"{module}.{func.__name__}", func, args, kwargs)
    return impl(*args, **kwargs)
