"""fnp.ndarray: an N-d array over Ferry buffers, lazily evaluated."""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from . import _dtypes as dt
from ._engine import materialize
from ._graph import Data, HostArray, Node
from ._tiles import TaskFailure


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

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # ---- evaluation ----
    def compute(self) -> "ndarray":
        """Submits the tasks computing this array and waits for them."""
        if not isinstance(self._node, HostArray):
            materialize(self._node).wait()
        return self

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (computing it first)."""
        if isinstance(self._node, HostArray):
            return self._node.array
        return materialize(self._node).numpy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return a.copy() if copy else a

    def __dlpack__(self, /, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        a = self.numpy()
        # DLPack has no read-only flag: hand out a copy, never the tile itself.
        a = a.copy() if not a.flags.writeable else np.ascontiguousarray(a)
        return a.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

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

    def __format__(self, spec: str) -> str:
        # NumPy's rule: a 0-d array formats as its scalar, others only with
        # an empty spec.
        if not self.shape:
            return format(self.item(), spec)
        if spec:
            raise TypeError(f"unsupported format string passed to {type(self).__name__}.__format__")
        return str(self)

    __hash__ = None  # type: ignore[assignment]

    # ---- devices, iteration, copies ----
    def to_device(self, device: Any, /, *, stream: Any = None) -> "ndarray":
        if device not in ("ferry", None):
            raise ValueError(f"ferry.numpy arrays live on device 'ferry', not {device!r}")
        return self

    def __iter__(self) -> Any:
        # Eager, so that iter() of a 0-d array raises at once as NumPy's does:
        # matplotlib (and others) ask iter(element) whether an element is a
        # sequence, and a lazy generator answers yes.
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def copy(self) -> "ndarray":
        # Values never change in place (x[k] = v gives x a new node), so a
        # copy may share the node.
        return ndarray(self._node)

    def to_numpy(self) -> np.ndarray:
        """pandas' spelling of .numpy(): matplotlib and seaborn convert
        containers that have it in one step instead of element by element."""
        return self.numpy()

    def flatten(self) -> "ndarray":
        return self.reshape(-1)

    ravel = flatten


def _asks_for_the_value(method: Callable[..., Any]) -> Callable[..., Any]:
    # An exception raised in a task arrives at the line that asked for the
    # value: the frames between it and the wait are ferry.numpy's, not the user's.
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except TaskFailure as error:
            raise error.with_traceback(None)  # noqa: B904 - the same error, fewer frames
    return call


for _name in ("compute", "numpy", "__array__", "__dlpack__", "item", "__float__", "__int__", "__index__", "__bool__",
              "__complex__", "tolist", "__repr__", "__str__", "__format__", "to_numpy"):
    setattr(ndarray, _name, _asks_for_the_value(getattr(ndarray, _name)))


def wrap(node: Node) -> ndarray:
    return ndarray(node)


def from_tiled(tiled: Any) -> ndarray:
    return ndarray(Data(tiled))
