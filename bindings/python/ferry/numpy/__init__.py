"""ferry.numpy: NumPy-style arrays whose work runs as Ferry tasks on the CPU
workers, a local GPU or a remote GPU host.

    import ferry.numpy as fnp
    x = fnp.random.default_rng(0).standard_normal((10_000, 512), dtype="float32")
    w = fnp.ones((512, 64), dtype="float32")
    print(float(fnp.maximum(x @ w, 0).sum()))

Arrays are lazy: operators build an expression, and chains of elementwise
operations run as one fused task per tile. Values are computed by .numpy(),
float(), print(), np.asarray(), or fnp.compute(). docs/numpy.md has the
details and the list of what is covered."""

from __future__ import annotations

import builtins as _builtins
import math as _math

import numpy as _np

from . import linalg, random
from ._array import ndarray
from ._dtypes import bool_, float32, float64, int32, int64
from ._explain import explain
from ._info import __array_namespace_info__
from ._indexing import argsort, cumulative_sum, flip, searchsorted, sort, take, take_along_axis
from ._sets import unique_all, unique_counts, unique_inverse, unique_values
from ._creation import (arange, empty, empty_like, eye, full, full_like, linspace, ones, ones_like, zeros,
    zeros_like)
from ._functions import (abs, absolute, add, all, amax, amin, any, argmax, argmin, array, asarray, astype,  # noqa: A004
    bitwise_and, bitwise_invert, bitwise_or, bitwise_xor, broadcast_arrays, broadcast_to, ceil, clip, compute,
    concat, concatenate, cos, divide, dot, equal, exp, expand_dims, expm1, floor, floor_divide, from_dlpack,
    greater, greater_equal, invert, isfinite, isinf, isnan, less, less_equal, log, log1p, log2, log10,
    logical_and, logical_not, logical_or, logical_xor, matmul, matrix_transpose, max, maximum, mean, min,
    minimum, mod, multiply, negative, not_equal, outer, permute_dims, positive, pow, power, prod, remainder,
    reshape, sigmoid, sign, sin, sqrt, square, squeeze, stack, std, subtract, sum, swapaxes, tanh, tensordot,
    transpose, true_divide, var, vdot, vecdot, where)
from ._tiles import runtime, set_options, using

__array_api_version__ = "2023.12"

bool = bool_  # noqa: A001 - the array API's name
e, pi, inf, nan = _math.e, _math.pi, _math.inf, _math.nan
newaxis = None


def isdtype(dtype: _np.dtype, kind: object) -> _builtins.bool:
    """The array API's dtype-kind test."""
    if isinstance(kind, tuple):
        return _builtins.any(isdtype(dtype, k) for k in kind)
    d = _np.dtype(dtype)
    if isinstance(kind, str):
        return {"bool": d.kind == "b", "signed integer": d.kind == "i", "unsigned integer": d.kind == "u",
                "integral": d.kind in "iu", "real floating": d.kind == "f", "complex floating": d.kind == "c",
                "numeric": d.kind in "iuf"}[kind]
    return d == _np.dtype(kind)


def result_type(*arrays_and_dtypes: object) -> _np.dtype:
    from ._dtypes import result_type as _rt
    return _rt(*[a if hasattr(a, "dtype") or isinstance(a, (int, float)) else _np.empty(0, a)
                 for a in arrays_and_dtypes])


def can_cast(from_: object, to: object, /) -> _builtins.bool:
    return _np.can_cast(from_.dtype if hasattr(from_, "dtype") else from_, to)


finfo, iinfo = _np.finfo, _np.iinfo


def __getattr__(name: str) -> object:
    if hasattr(_np, name):
        raise NotImplementedError(f"ferry.numpy does not implement numpy.{name}")
    raise AttributeError(f"module 'ferry.numpy' has no attribute {name!r}")
