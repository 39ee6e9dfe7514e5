"""ferry.numpy.random: seeded generators computed by the fused kernel from
each element's position, so an array's values do not depend on its tiles
or on which host made them (but they differ from NumPy's streams)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._creation import flat_index
from ._builders import astype, shape_of
from ._elementwise import add, floor, multiply
from ._graph import Map

__all__ = ["Generator", "default_rng", "normal", "random", "seed", "standard_normal", "uniform"]

_MASK = (1 << 64) - 1


class Generator:
    """Like numpy.random.Generator: every call draws a fresh stream from the seed."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            seed = int.from_bytes(np.random.SeedSequence().generate_state(2, np.uint32).tobytes(), "little")
        self._seed = int(seed) & _MASK
        self._calls = itertools.count()

    def _stream(self) -> int:
        return (self._seed * 0x9E3779B97F4A7C15 + next(self._calls) * 0xD1B54A32D192ED03 + 1) & _MASK

    def _draw(self, kind: str, size: Any) -> ndarray:
        shape = shape_of(size if size is not None else ())
        return wrap(Map(kind, [flat_index(shape)] if shape else [flat_index(())], dt.float64, self._stream()))

    def random(self, size: Any = None, dtype: Any = dt.float64) -> ndarray:
        """Uniform in [0, 1)."""
        return astype(self._draw("uniform", size), dt.dtype(dtype))

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> ndarray:
        return add(multiply(self._draw("uniform", size), high - low), low)

    def standard_normal(self, size: Any = None, dtype: Any = dt.float64) -> ndarray:
        return astype(self._draw("normal", size), dt.dtype(dtype))

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None) -> ndarray:
        return add(multiply(self._draw("normal", size), scale), loc)

    def integers(self, low: int, high: int | None = None, size: Any = None, dtype: Any = dt.int64) -> ndarray:
        if high is None:
            low, high = 0, low
        if high <= low:
            raise ValueError(f"high ({high}) must be greater than low ({low})")
        return astype(add(floor(multiply(self._draw("uniform", size), float(high - low))), low), dt.dtype(dtype))


def default_rng(seed: int | None = None) -> Generator:
    return Generator(seed)


_global = [Generator(0)]


def seed(value: int) -> None:
    _global[0] = Generator(value)


def random(size: Any = None) -> ndarray:
    return _global[0].random(size)


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None) -> ndarray:
    return _global[0].uniform(low, high, size)


def normal(loc: float = 0.0, scale: float = 1.0, size: Any = None) -> ndarray:
    return _global[0].normal(loc, scale, size)


def standard_normal(size: Any = None) -> ndarray:
    return _global[0].standard_normal(size)


del math
