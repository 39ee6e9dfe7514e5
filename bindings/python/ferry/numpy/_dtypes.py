"""Element types: the array API standard's (bool, int8..int64, uint8..uint64,
float32, float64, complex64, complex128), their names in fused programs, and type promotion (NumPy
2's rules, which for these types are the array API standard's: no
value-based casting, Python scalars taking the array's type)."""

from __future__ import annotations

from typing import Any

import numpy as np

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

SUPPORTED = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64, complex64, complex128)
# The element type of a fused program's value (b8: bools, stored one byte each).
CODE = {bool_: "b8", int8: "i8", int16: "i16", int32: "i32", int64: "i64", uint8: "u8", uint16: "u16",
        uint32: "u32", uint64: "u64", float32: "f32", float64: "f64", complex64: "c64", complex128: "c128"}
# What a Ferry buffer holds for each: the type itself.
STORAGE = {t: t for t in SUPPORTED}


def dtype(d: Any) -> np.dtype:
    """The NumPy dtype for `d`, refused with TypeError unless Ferry stores it."""
    t = np.dtype(d)
    if t not in SUPPORTED:
        raise TypeError(f"ferry.numpy stores bool, (u)int8..64, float32/64 and complex64/128, not {t}")
    return t


def is_float(t: np.dtype) -> bool:
    return t.kind == "f"


def is_complex(t: np.dtype) -> bool:
    return t.kind == "c"


def is_inexact(t: np.dtype) -> bool:
    """Floating point, real or complex."""
    return t.kind in "fc"


def real_of(t: np.dtype) -> np.dtype:
    """The real type of a complex one (complex64 -> float32); others unchanged."""
    return {complex64: float32, complex128: float64}.get(t, t)


def is_int(t: np.dtype) -> bool:
    """Signed or unsigned integers (not bool)."""
    return t.kind in "iu"


def result_type(*args: Any) -> np.dtype:
    """The promoted type of arrays (anything with .dtype) and Python scalars."""
    parts = []
    for a in args:
        if hasattr(a, "dtype"):
            parts.append(np.dtype(a.dtype))
        elif isinstance(a, (bool, int, float, complex)):
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
    except where NumPy gives float16 (bool, 8-bit integers): float32)."""
    if is_inexact(t):
        return t
    return float32 if t.itemsize <= 2 else float64


def sum_type(t: np.dtype) -> np.dtype:
    """sum/prod's result: signed integers and bools add up in int64,
    unsigned integers in uint64 (NumPy's and the array API's defaults)."""
    return t if is_inexact(t) else uint64 if t.kind == "u" else int64


def isdtype(dtype: Any, kind: Any) -> bool:
    """The array API's dtype-kind test."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    d = np.dtype(dtype)
    if isinstance(kind, str):
        return {"bool": d.kind == "b", "signed integer": d.kind == "i", "unsigned integer": d.kind == "u",
                "integral": d.kind in "iu", "real floating": d.kind == "f", "complex floating": d.kind == "c",
                "numeric": d.kind in "iufc"}[kind]
    return d == np.dtype(kind)
