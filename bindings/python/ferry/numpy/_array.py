"""fnp.ndarray: an N-d array over Ferry buffers, lazily evaluated."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _dtypes as dt
from ._engine import materialize
from ._graph import Data, Node


class ndarray:  # noqa: N801 - NumPy's spelling
    """An N-d array whose value is computed by Ferry tasks when needed.

    Operators and ferry.numpy functions build an expression; .numpy(),
    float(), print(), np.asarray() or fnp.compute() run it. Large arrays are
    cut into tiles along the first axis; each tile is a Ferry array, and
    elementwise chains become one fused task per tile."""

    __slots__ = ("_node", "__weakref__")
    __array_priority__ = 100

    def __init__(self, node: Node) -> None:
        self._node = node

    # ---- attributes ----
    @property
    def shape(self) -> tuple[int, ...]:
        return self._node.shape

    @property
    def dtype(self) -> np.dtype:
        return self._node.dtype

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def size(self) -> int:
        return self._node.size

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def device(self) -> str:
        return "ferry"

    @property
    def T(self) -> "ndarray":  # noqa: N802
        from . import _functions as f
        return f.transpose(self)

    @property
    def mT(self) -> "ndarray":  # noqa: N802
        from . import _functions as f
        return f.matrix_transpose(self)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # ---- evaluation ----
    def compute(self) -> "ndarray":
        """Submits the tasks computing this array and waits for them."""
        materialize(self._node).wait()
        return self

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (computing it first)."""
        return materialize(self._node).numpy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return a.copy() if copy else a

    def __dlpack__(self, **kwargs: Any) -> Any:
        a = self.numpy()
        # DLPack has no read-only flag: hand out a copy, never the tile itself.
        return (a.copy() if not a.flags.writeable else np.ascontiguousarray(a)).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: the value is read back to host memory

    def item(self) -> Any:
        if self.size != 1:
            raise ValueError(f"can only convert an array of size 1 to a Python scalar, not size {self.size}")
        return self.numpy().reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not dt.is_int(self.dtype):
            raise TypeError(f"only integer arrays can be used as an index, not {self.dtype}")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError("the truth value of an array with more than one element is ambiguous; use .any() or .all()")
        return bool(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __repr__(self) -> str:
        text = np.array2string(self.numpy(), separator=", ", prefix="fnp.array(")
        return f"fnp.array({text}, dtype={self.dtype})"

    def __str__(self) -> str:
        return str(self.numpy())

    def _repr_html_(self) -> str:
        from ._explain import explain
        return f"<pre>{self!r}</pre><details><summary>tasks</summary><pre>{explain(self)}</pre></details>"

    __hash__ = None  # type: ignore[assignment]

    # ---- NumPy and array API protocols ----
    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        import ferry.numpy
        return ferry.numpy

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from ._interop import array_ufunc
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from ._interop import array_function
        return array_function(func, args, kwargs)

    def to_device(self, device: Any, /, *, stream: Any = None) -> "ndarray":
        if device not in ("ferry", None):
            raise ValueError(f"ferry.numpy arrays live on device 'ferry', not {device!r}")
        return self

    # ---- indexing ----
    def __getitem__(self, key: Any) -> "ndarray":
        from ._functions import getitem
        return getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        # This array takes a new value (x[key] = v is x = x.at[key].set(v) in
        # JAX's words); arrays made from it before, slices included, keep the
        # old one: ferry.numpy has no views to write through.
        from ._indexing import setitem
        self._node = setitem(self, key, value)._node

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

    # ---- methods that are functions ----
    def astype(self, dtype: Any, copy: bool = True) -> "ndarray":
        from ._functions import astype
        return astype(self, dtype)

    def reshape(self, *shape: Any, **kwargs: Any) -> "ndarray":
        from ._functions import reshape
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return reshape(self, shape, **kwargs)

    def transpose(self, *axes: Any) -> "ndarray":
        from ._functions import transpose
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        return transpose(self, axes or None)

    def flatten(self) -> "ndarray":
        return self.reshape(-1)

    ravel = flatten


def _method(name: str) -> Any:
    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        from . import _functions as f
        return getattr(f, name)(self, *args, **kwargs)
    method.__name__ = name
    return method


for _name in ("sum", "mean", "prod", "min", "max", "argmin", "argmax", "std", "var", "any", "all", "clip", "dot"):
    setattr(ndarray, _name, _method(_name))


def _binary(name: str, reflected: bool = False) -> Any:
    def op(self: ndarray, other: Any) -> Any:
        from . import _functions as f
        try:
            return getattr(f, name)(other, self) if reflected else getattr(f, name)(self, other)
        except _Unsupported:
            return NotImplemented
    return op


class _Unsupported(TypeError):
    """An operand an operator cannot take; Python then tries the other side."""


_operators = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
    "eq": "equal", "ne": "not_equal",
}
for _dunder, _fn in _operators.items():
    setattr(ndarray, f"__{_dunder}__", _binary(_fn))
    if _dunder not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(ndarray, f"__r{_dunder}__", _binary(_fn, reflected=True))
ndarray.__neg__ = lambda self: __import__("ferry.numpy._functions", fromlist=["negative"]).negative(self)  # type: ignore
ndarray.__pos__ = lambda self: self  # type: ignore
ndarray.__abs__ = lambda self: __import__("ferry.numpy._functions", fromlist=["abs"]).abs(self)  # type: ignore
ndarray.__invert__ = lambda self: __import__("ferry.numpy._functions", fromlist=["bitwise_invert"]).bitwise_invert(self)  # type: ignore


def wrap(node: Node) -> ndarray:
    return ndarray(node)


def from_tiled(tiled: Any) -> ndarray:
    return ndarray(Data(tiled))
