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
import sys as _sys
from typing import NamedTuple as _NamedTuple

import numpy as _np

from . import _operators, fft, linalg, random
from ._array import ndarray
from ._builders import asarray, astype, compute, from_dlpack
from ._creation import (arange, empty, empty_like, eye, full, full_like, linspace, meshgrid, ones, ones_like, tril,
    triu, zeros, zeros_like)
from ._dtypes import (bool_, complex64, complex128, float32, float64, int8, int16, int32, int64, isdtype, uint8,
    uint16, uint32, uint64)
from ._dtypes import result_type as _result_type
from ._elementwise import (abs, absolute, acos, acosh, add, arccos, arccosh, arcsin, arcsinh, arctan,  # noqa: A004
    arctan2, arctanh, around, asin, asinh, atan, atan2, atanh, bitwise_and, bitwise_invert, bitwise_left_shift,
    bitwise_or, bitwise_right_shift, bitwise_xor, ceil, clip, conj, copysign, cos, cosh, divide, equal, exp, expm1,
    floor, floor_divide, greater, greater_equal, hypot, imag, invert, isfinite, isinf, isnan, left_shift, less,
    less_equal, log, log1p, log2, log10, logaddexp, logical_and, logical_not, logical_or, logical_xor, maximum,
    minimum, mod, multiply, negative, nextafter, not_equal, positive, pow, power, real, reciprocal, remainder,
    right_shift, round, sigmoid, sign, signbit, sin, sinh, sqrt, square, subtract, tan, tanh, true_divide, trunc,
    where)
from ._explain import explain
from ._indexing import (argsort, cumulative_prod, cumulative_sum, diff, flip, nonzero, searchsorted, sort, take,
    take_along_axis)
from ._info import __array_namespace_info__
from ._interop import HostCopyWarning
from ._manipulation import (broadcast_arrays, broadcast_to, concat, concatenate, expand_dims, matrix_transpose,
    moveaxis, permute_dims, repeat, reshape, roll, squeeze, stack, swapaxes, tile, transpose, unstack)
from ._products import dot, matmul, outer, tensordot, vdot, vecdot
from ._reductions import (all, amax, amin, any, argmax, argmin, count_nonzero, max, mean, min, prod, std,  # noqa: A004
    sum, var)
from ._sets import unique_all, unique_counts, unique_inverse, unique_values
from ._tiles import runtime, set_options, using

__array_api_version__ = "2024.12"

array = asarray
bool = bool_  # noqa: A001 - the array API's name
e, pi, inf, nan = _math.e, _math.pi, _math.inf, _math.nan
newaxis = None


def result_type(*arrays_and_dtypes: object) -> _np.dtype:
    return _result_type(*[a if isinstance(a, (ndarray, _np.ndarray, _builtins.bool, int, float, complex))
                          else _np.empty(0, a) for a in arrays_and_dtypes])


def can_cast(from_: object, to: object, /) -> _builtins.bool:
    return _np.can_cast(from_.dtype if hasattr(from_, "dtype") else from_, to)


class finfo_object(_NamedTuple):  # noqa: N801 - the array API's name
    """The array API's finfo: Python floats (NumPy's finfo gives NumPy
    scalars of the type, which are not `float` for float32), the real dtype."""
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: _np.dtype
    resolution: float


def finfo(type: object, /) -> finfo_object:  # noqa: A002 - the array API's name
    f = _np.finfo(type.dtype if isinstance(type, (ndarray, _np.ndarray)) else type)
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal),
                        _np.dtype(f.dtype), float(f.resolution))


def iinfo(type: object, /) -> _np.iinfo:  # noqa: A002 - the array API's name
    return _np.iinfo(type.dtype if isinstance(type, (ndarray, _np.ndarray)) else type)


class NotInFerryNumpy(AttributeError, NotImplementedError):
    """A NumPy name ferry.numpy lacks. An AttributeError, so that hasattr()
    and getattr(..., default) answer as they do for any missing name (libraries
    duck-type namespaces that way: scikit-learn asks for float16)."""


def __getattr__(name: str) -> object:
    if hasattr(_np, name):
        raise NotInFerryNumpy(f"ferry.numpy does not implement numpy.{name}", name=name, obj=_sys.modules[__name__])
    raise AttributeError(f"module 'ferry.numpy' has no attribute {name!r}")


# Last: the operators need every family above, and __array_namespace__ this module.
_operators.install(_sys.modules[__name__])
