"""The lazy expression graph behind ferry.numpy arrays. Operators build
nodes; nothing runs until a value is needed (see _engine.materialize)."""

from __future__ import annotations

import linecache
import sys
from typing import Any, Callable, Sequence

import numpy as np

from . import _dtypes as dt


class Node:
    """An array-valued expression: its shape and element type are known at
    once; its value (a Tiled) once materialized."""

    __slots__ = ("shape", "dtype", "value", "__weakref__")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.value = None  # a _tiles.Tiled once computed

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def children(self) -> Sequence["Node"]:
        return ()

    def describe(self) -> str:
        return type(self).__name__.lower()


class Data(Node):
    """An array whose value exists (or is being computed) as tiles."""

    __slots__ = ()

    def __init__(self, tiled: Any) -> None:
        super().__init__(tiled.shape, tiled.dtype)
        self.value = tiled

    def describe(self) -> str:
        return f"data{self.shape}"


class Const(Node):
    """A value broadcast to `shape` (full, zeros, ones, Python scalars)."""

    __slots__ = ("number",)

    def __init__(self, number: Any, dtype: np.dtype, shape: tuple[int, ...] = ()) -> None:
        super().__init__(shape, dtype)
        self.number = dtype.type(number).item()

    def describe(self) -> str:
        return repr(self.number)


class Index(Node):
    """The position along `axis` at every element of `shape` (int64)."""

    __slots__ = ("axis",)

    def __init__(self, shape: tuple[int, ...], axis: int) -> None:
        super().__init__(shape, dt.int64)
        self.axis = axis

    def describe(self) -> str:
        return f"index{self.axis}"


class Map(Node):
    """An elementwise operation (a fused-program instruction) on operands of
    one type, broadcast to a common shape; fused with its neighbours."""

    __slots__ = ("op", "args", "seed")

    def __init__(self, op: str, args: Sequence[Node], dtype: np.dtype, seed: int = 0) -> None:
        shape = np.broadcast_shapes(*(a.shape for a in args))
        super().__init__(shape, dtype)
        self.op = op
        self.args = tuple(args)
        self.seed = seed

    def children(self) -> Sequence[Node]:
        return self.args

    def describe(self) -> str:
        return self.op


class Reduce(Node):
    """A fold (add, mul, min, max) of x over `axes`, accumulated in `dtype`."""

    __slots__ = ("fold", "x", "axes", "keepdims")

    def __init__(self, fold: str, x: Node, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> None:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
        super().__init__(shape, dtype)
        self.fold, self.x, self.axes, self.keepdims = fold, x, axes, keepdims

    def children(self) -> Sequence[Node]:
        return (self.x,)

    def describe(self) -> str:
        return f"reduce-{self.fold}{list(self.axes)}"


class MatMul(Node):
    """a @ b with the operands already cast to one floating type."""

    __slots__ = ("a", "b")

    def __init__(self, a: Node, b: Node, shape: tuple[int, ...]) -> None:
        super().__init__(shape, a.dtype)
        self.a, self.b = a, b

    def children(self) -> Sequence[Node]:
        return (self.a, self.b)

    def describe(self) -> str:
        return "matmul"


def user_frame() -> tuple[str, int] | None:
    """The file and line, outside ferry.numpy, that is building a node: what
    an error raised when the node runs, later and in a task, points at."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("ferry.numpy"):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def describe_origin(origin: tuple[str, int] | None) -> str:
    if origin is None:
        return ""
    source = linecache.getline(*origin).strip()
    return f", made at {origin[0]}:{origin[1]}" + (f": {source}" if source else "")


class Host(Node):
    """A layout operation (transpose, reshape across tiles, slicing, concat,
    stack) or a LAPACK call without a Ferry kernel: a Python task on the CPU
    workers applies `fn` to the inputs as NumPy arrays. Such a task can fail
    on the data (an index out of range, a singular matrix), so the node keeps
    the user's line that made it."""

    __slots__ = ("fn", "args", "name", "origin")

    def __init__(self, name: str, fn: Callable[..., np.ndarray], args: Sequence[Node], shape: tuple[int, ...],
                 dtype: np.dtype) -> None:
        super().__init__(shape, dtype)
        self.fn, self.args, self.name = fn, tuple(args), name
        self.origin = user_frame()

    def children(self) -> Sequence[Node]:
        return self.args

    def describe(self) -> str:
        return self.name


class Reshape(Node):
    """x's elements in C order under another shape (no copy: tiles are flat)."""

    __slots__ = ("x",)

    def __init__(self, x: Node, shape: tuple[int, ...]) -> None:
        super().__init__(shape, x.dtype)
        self.x = x

    def children(self) -> Sequence[Node]:
        return (self.x,)

    def describe(self) -> str:
        return f"reshape{self.shape}"
