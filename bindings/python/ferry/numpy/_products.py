"""Products: matmul (one gemm task per tile of the left operand, or per
matrix of a batch; complex matrices and broadcast batches NumPy's in a
Python task), dot, vdot, vecdot, tensordot (2-D cases fused or gemm, the
rest NumPy's in a Python task), outer."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import ndarray, wrap
from ._builders import asarray, astype, cast, host, node
from ._elementwise import conj, multiply
from ._graph import MatMul, Node, Reshape, Transposed
from ._manipulation import reshape
from ._reductions import sum  # noqa: A004


# ---- linear algebra ----

def matmul(a: Any, b: Any) -> ndarray:
    x, y = node(a), node(b)
    if not x.shape or not y.shape:
        raise ValueError("matmul: an operand is 0-d; use multiply or *")
    t = dt.result_type(wrap(x), wrap(y))
    if dt.is_complex(t):
        return _matmul_by_numpy(x, y, t)
    work = t if dt.is_float(t) else dt.float64
    if len(x.shape) == 2 and len(y.shape) == 2 and x.shape[1] == y.shape[0]:
        # x.T @ y and x @ y.T: gemm reads the matrix under .T with its
        # transpose flag, so x.T is never copied. (In x.T @ y.T, y.T is.)
        if isinstance(x, Transposed):
            return astype(wrap(MatMul(cast(x.x, work), cast(y, work), (x.shape[0], y.shape[1]), trans_a=True)), t)
        if isinstance(y, Transposed):
            return astype(wrap(MatMul(cast(x, work), cast(y.x, work), (x.shape[0], y.shape[1]), trans_b=True)), t)
    x, y = cast(x, work), cast(y, work)
    squeeze_a, squeeze_b = len(x.shape) == 1, len(y.shape) == 1
    if squeeze_a:
        x = Reshape(x, (1, x.shape[0]))
    if squeeze_b:
        y = Reshape(y, (y.shape[0], 1))
    if x.shape[-1] != y.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {y.shape[-2]} is different from {x.shape[-1]})")
    m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
    batch_x, batch_y = x.shape[:-2], y.shape[:-2]
    if not batch_y:
        # Leading dimensions of a become rows: one big gemm per tile.
        rows = int(np.prod(batch_x, dtype=np.int64)) * m
        out: Node = MatMul(Reshape(x, (rows, k)) if batch_x else x, y, (rows, n))
        out = Reshape(out, (*batch_x, m, n)) if batch_x else out
    elif batch_x == batch_y:
        b = int(np.prod(batch_x, dtype=np.int64))
        out = MatMul(Reshape(x, (b, m, k)), Reshape(y, (b, k, n)), (b, m, n))
        out = Reshape(out, (*batch_x, m, n))
    else:
        return _matmul_by_numpy(node(a), node(b), t)
    out_shape = out.shape
    if squeeze_a:
        out_shape = out_shape[:-2] + out_shape[-1:]
    if squeeze_b:
        out_shape = out_shape[:-1]
    if out_shape != out.shape:
        out = Reshape(out, out_shape)
    return astype(wrap(out), t)


def _matmul_by_numpy(x: Node, y: Node, t: np.dtype) -> ndarray:
    """NumPy's matmul in a Python task on the CPU workers, for what gemm
    tasks do not take: complex matrices (the gemm kernels are real) and
    batches that broadcast against each other."""
    xm = x.shape if len(x.shape) > 1 else (1, *x.shape)
    ym = y.shape if len(y.shape) > 1 else (*y.shape, 1)
    if xm[-1] != ym[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {ym[-2]} is different from {xm[-1]})")
    batch = np.broadcast_shapes(xm[:-2], ym[:-2])
    shape = (*batch, *xm[-2:-1][:len(x.shape) - 1], *ym[-1:][:len(y.shape) - 1])
    return host("matmul", np.matmul, [wrap(cast(x, t)), wrap(cast(y, t))], shape, t)


def dot(a: Any, b: Any) -> ndarray:
    x, y = node(a), node(b)
    if not x.shape or not y.shape:
        return multiply(a, b)
    if len(x.shape) == 1 and len(y.shape) == 1:
        if x.shape != y.shape:
            raise ValueError(f"shapes {x.shape} and {y.shape} not aligned")
        return sum(multiply(a, b))
    if len(y.shape) <= 2:
        return matmul(a, b)
    raise NotImplementedError("dot of arrays of rank > 2 (use matmul or tensordot)")


def vdot(a: Any, b: Any, /) -> ndarray:
    x, y = reshape(asarray(a), (-1,)), reshape(asarray(b), (-1,))
    return dot(x, y)


def vecdot(a: Any, b: Any, /, *, axis: int = -1) -> ndarray:
    """sum(conj(a) * b) along axis, of the operands' promoted type (uint8 stays uint8)."""
    x, y = asarray(a), asarray(b)
    for v in (x, y):
        if not -v.ndim <= axis < v.ndim:
            raise ValueError(f"vecdot: axis {axis} is out of range for an array of {v.ndim} dimensions")
    if x.shape[axis] != y.shape[axis]:
        raise ValueError(f"vecdot: the arrays have {x.shape[axis]} and {y.shape[axis]} elements along axis {axis}")
    t = dt.result_type(x, y)
    return sum(multiply(conj(x), y), axis=axis, dtype=t)


def tensordot(a: Any, b: Any, /, *, axes: Any = 2) -> ndarray:
    x, y = asarray(a), asarray(b)
    if x.ndim == 2 and y.ndim == 2:
        if axes == 1 or axes == ([1], [0]) or axes == ((1,), (0,)):
            return matmul(x, y)
        if axes == 2 or axes == ([0, 1], [0, 1]):
            return sum(multiply(x, y), dtype=dt.result_type(x, y))
        if axes == 0:
            return multiply(reshape(x, (*x.shape, 1, 1)), reshape(y, (1, 1, *y.shape)))
    # Other cases: NumPy's tensordot in a Python task on the CPU workers.
    if isinstance(axes, (int, np.integer)):
        if axes < 0 or axes > builtins.min(x.ndim, y.ndim):
            raise ValueError(f"tensordot: axes={axes} is out of range for ranks {x.ndim} and {y.ndim}")
        ax, ay = list(range(x.ndim - axes, x.ndim)), list(range(int(axes)))
    else:
        ax, ay = [list(np.atleast_1d(v).astype(int)) for v in axes]
        ax, ay = [int(v) % builtins.max(x.ndim, 1) for v in ax], [int(v) % builtins.max(y.ndim, 1) for v in ay]
    if len(ax) != len(ay) or builtins.any(x.shape[i] != y.shape[j] for i, j in zip(ax, ay)):
        raise ValueError(f"tensordot: shape mismatch for sum over axes {ax} of {x.shape} and {ay} of {y.shape}")
    t = dt.result_type(x, y)
    shape = (*(d for i, d in enumerate(x.shape) if i not in ax), *(d for j, d in enumerate(y.shape) if j not in ay))
    return host("tensordot", lambda v, w: np.tensordot(v, w, axes=(ax, ay)), [astype(x, t), astype(y, t)], shape, t)


def outer(a: Any, b: Any) -> ndarray:
    return multiply(reshape(asarray(a), (-1, 1)), reshape(asarray(b), (1, -1)))
