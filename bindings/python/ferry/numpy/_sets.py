"""The array API's set functions: unique_values, unique_counts,
unique_inverse, unique_all. Python tasks on the CPU workers like the other
gathers; how many unique values there are decides the results' shape, so
building them waits for that one number (a task of its own), never for the
array. NaNs are distinct values, as the array API says (NumPy's
np.unique merges them)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _dtypes as dt
from ._builders import asarray, host


class UniqueAllResult(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    values: Any
    inverse_indices: Any


def _unique(v: np.ndarray, part: str) -> np.ndarray:
    values, indices, inverse, counts = np.unique(v.reshape(-1), return_index=True, return_inverse=True,
                                                 return_counts=True, equal_nan=False)
    return {"values": values, "indices": indices, "inverse": inverse.reshape(v.shape), "counts": counts}[part]


def _parts(x: Any, parts: list[str]) -> list[Any]:
    a = asarray(x)
    count = int(host("unique-count", lambda v: np.int64(_unique(v, "values").size), [a], (), dt.int64))
    out = []
    for part in parts:
        shape = a.shape if part == "inverse" else (count,)
        t = a.dtype if part == "values" else dt.int64
        out.append(host(f"unique_{part}", lambda v, p=part: _unique(v, p), [a], shape, t))
    return out


def unique_values(x: Any, /) -> Any:
    return _parts(x, ["values"])[0]


def unique_counts(x: Any, /) -> UniqueCountsResult:
    return UniqueCountsResult(*_parts(x, ["values", "counts"]))


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    return UniqueInverseResult(*_parts(x, ["values", "inverse"]))


def unique_all(x: Any, /) -> UniqueAllResult:
    return UniqueAllResult(*_parts(x, ["values", "indices", "inverse", "counts"]))
