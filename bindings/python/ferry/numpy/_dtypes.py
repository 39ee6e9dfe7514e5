"""Element types: the five ferry.numpy stores, their names in fused
programs, and type promotion (NumPy 2's rules, which for these types are
the array API standard's, with Python scalars taking the array's type)."""

from __future__ import annotations

from typing import Any

import numpy as np

bool_ = np.dtype(np.bool_)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

SUPPORTED = (bool_, int32, int64, float32, float64)
# The element type of a fused program's value; bools are stored as u8 (0 or 1).
CODE = {bool_: "u8", int32: "i32", int64: "i64", float32: "f32", float64: "f64"}
# What a Ferry buffer holds for each.
STORAGE = {bool_: np.dtype(np.uint8), int32: int32, int64: int64, float32: float32, float64: float64}


def dtype(d: Any) -> np.dtype:
    """The NumPy dtype for `d`, refused with TypeError unless Ferry stores it."""
    t = np.dtype(d)
    if t not in SUPPORTED:
        raise TypeError(f"ferry.numpy stores bool, int32, int64, float32 and float64, not {t}")
    return t


def is_float(t: np.dtype) -> bool:
    return t.kind == "f"


def is_int(t: np.dtype) -> bool:
    return t.kind == "i"


def result_type(*args: Any) -> np.dtype:
    """The promoted type of arrays (anything with .dtype) and Python scalars."""
    parts = []
    for a in args:
        if hasattr(a, "dtype"):
            parts.append(np.dtype(a.dtype))
        elif isinstance(a, (bool, int, float)):
            parts.append(a)
        else:
            raise TypeError(f"ferry.numpy cannot combine a {type(a).__name__} with arrays")
    if not any(isinstance(p, np.dtype) for p in parts):
        # Only Python scalars: their default types.
        parts = [np.dtype(type(p)) if not isinstance(p, bool) else bool_ for p in parts]
        parts = [int64 if p.kind == "i" else p for p in parts]
    t = np.result_type(*parts)
    if t not in SUPPORTED:
        raise TypeError(f"the result type {t} of {', '.join(str(p) for p in parts)} is not one ferry.numpy stores")
    return t


def float_of(t: np.dtype) -> np.dtype:
    """The floating type a transcendental function returns for `t` (NumPy's,
    except bool, where NumPy's float16 becomes float32)."""
    if is_float(t):
        return t
    return float32 if t == bool_ else float64


def sum_type(t: np.dtype) -> np.dtype:
    """sum/prod's result: integers and bools add up in int64."""
    return t if is_float(t) else int64


def isdtype(dtype: Any, kind: Any) -> bool:
    """The array API's dtype-kind test."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    d = np.dtype(dtype)
    if isinstance(kind, str):
        return {"bool": d.kind == "b", "signed integer": d.kind == "i", "unsigned integer": d.kind == "u",
                "integral": d.kind in "iu", "real floating": d.kind == "f", "complex floating": d.kind == "c",
                "numeric": d.kind in "iuf"}[kind]
    return d == np.dtype(kind)
