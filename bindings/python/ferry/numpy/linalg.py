"""ferry.numpy.linalg: cholesky (Ferry's potrf kernel), svd, eigh and qr
(the gesdd, syevd and geqrf kernels: LAPACK on CPU workers, cuSOLVER on
GPUs), solve, det, slogdet, matrix_power, matrix_rank and cross (NumPy's
LAPACK in a CPU task, as are stacks of matrices and complex matrices for
the kernels' functions), norm (fused reductions), diagonal and trace, and
matmul-family re-exports."""

from __future__ import annotations

import builtins
import math
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes as dt
from ._array import wrap
from ._builders import asarray, astype, axes_of, host
from ._creation import eye, zeros
from ._elementwise import abs, divide, greater, greater_equal, multiply, not_equal, pow, sqrt, where  # noqa: A004
from ._engine import materialize, matrix_tiles, whole
from ._graph import Data, Index
from ._manipulation import matrix_transpose, reshape
from ._products import matmul, tensordot, vecdot
from ._products import outer as _outer
from ._reductions import max, min, sum  # noqa: A004
from ._tiles import Tiled, placement

__all__ = ["EighResult", "QRResult", "SVDResult", "SlogdetResult", "cholesky", "cross", "det", "diagonal", "eigh",
           "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "norm",
           "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm"]


class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    Q: Any
    R: Any


class SlogdetResult(NamedTuple):
    sign: Any
    logabsdet: Any


def _matrix(a: Any, name: str) -> Any:
    x = asarray(a)
    if x.ndim != 2:
        raise NotImplementedError(f"linalg.{name} of an array of shape {x.shape}: ferry.numpy takes one matrix "
                                  "(stacks of matrices are not supported)")
    t = x.dtype if dt.is_float(x.dtype) else dt.float64
    return astype(x, t)


def _square(a: Any, name: str) -> Any:
    x = _matrix(a, name)
    if x.shape[0] != x.shape[1]:
        raise ValueError(f"linalg.{name}: the matrix is {x.shape[0]} x {x.shape[1]}; it must be square")
    return x


def _one_tile(x: Any) -> Any:
    """x's value as one tile of Ferry shape rows x columns (what the LAPACK
    kernels read)."""
    value = materialize(x._node)
    return matrix_tiles(whole(value, value.rt), value.rt)


def _decompose(kernel: str, a: Any, outputs: list[tuple[int, ...]], extra: tuple[Any, ...], label: str) -> list[Any]:
    """One task of the built-in `kernel` on a (one tile) writing new arrays of
    the given shapes (LAPACK on a CPU worker, cuSOLVER where placed on a GPU)."""
    v = _one_tile(a)
    rt = v.rt
    on = placement() or ""
    name = dt.STORAGE[a.dtype].name
    buffers = [rt._empty(list(s), name, False) for s in outputs]
    future = rt._submit(kernel, (v.tiles[0], *buffers, *extra), on, label)
    return [wrap(Data(Tiled(s, a.dtype, rt, [b], [0, s[0]], [future], label))) for s, b in zip(outputs, buffers)]


def _by_numpy(x: Any) -> Any:
    """x when the kernels cannot take it (a stack of matrices, or complex
    matrices: they factor one real matrix), for NumPy's LAPACK in a Python
    task on the CPU workers; None when they can."""
    a = asarray(x)
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at least two-dimensional")
    if a.ndim == 2 and not dt.is_complex(a.dtype):
        return None
    return a if dt.is_inexact(a.dtype) else astype(a, dt.float64)


def _parts(name: str, fn: Any, a: Any, shapes: list[tuple[int, ...]], types: list[Any]) -> list[Any]:
    """Each output of a decomposition as an array of its own. One task
    factors the matrices and packs every output, flat, into one array of
    a's type (real outputs of complex matrices exactly, as complex numbers);
    each output is then a copy out of it, so the factoring runs once."""
    sizes = [math.prod(shape) for shape in shapes]
    offsets = [builtins.sum(sizes[:i]) for i in range(len(sizes))]

    def pack(v: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(part, a.dtype).reshape(-1) for part in fn(v)])

    def unpack(p: np.ndarray, o: int, n: int, shape: tuple[int, ...], t: Any) -> np.ndarray:
        part = p[o:o + n].reshape(shape)
        return part if dt.is_complex(t) else part.real.astype(t)

    packed = host(name, pack, [a], (builtins.sum(sizes),), a.dtype)
    return [host(name, lambda p, o=o, n=n, shape=shape, t=t: unpack(p, o, n, shape, t), [packed], shape, t)
            for o, n, shape, t in zip(offsets, sizes, shapes, types)]


def svd(x: Any, /, *, full_matrices: bool = True) -> SVDResult:
    """U, S, Vh with x = U @ diag(S) @ Vh, S descending (Ferry's gesdd kernel:
    LAPACK's divide and conquer on the CPU, cuSOLVER's Jacobi SVD on a GPU)."""
    if (h := _by_numpy(x)) is not None:
        *batch, m, n = h.shape
        k = builtins.min(m, n)
        u, vt = ((m, m), (n, n)) if full_matrices else ((m, k), (k, n))
        shapes = [(*batch, *u), (*batch, k), (*batch, *vt)]
        return SVDResult(*_parts("svd", lambda v: np.linalg.svd(v, full_matrices=full_matrices), h, shapes,
                                 [h.dtype, dt.real_of(h.dtype), h.dtype]))
    a = _matrix(x, "svd")
    m, n = a.shape
    k = builtins.min(m, n)
    u_shape, vt_shape = ((m, m), (n, n)) if full_matrices else ((m, k), (k, n))
    if k == 0:  # nothing to decompose: identities (full) or empty factors
        return SVDResult(eye(m, dtype=a.dtype) if full_matrices else zeros(u_shape, dtype=a.dtype),
                         zeros((0,), dtype=a.dtype),
                         eye(n, dtype=a.dtype) if full_matrices else zeros(vt_shape, dtype=a.dtype))
    s, u, vt = _decompose("gesdd", a, [(k,), u_shape, vt_shape], (int(bool(full_matrices)),), "fnp:svd")
    return SVDResult(u, s, vt)


def svdvals(x: Any, /) -> Any:
    """The singular values of x, descending."""
    return svd(x, full_matrices=False).S


def eigh(x: Any, /) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric x,
    read from its lower triangle as NumPy does (Ferry's syevd kernel)."""
    if (h := _by_numpy(x)) is not None:
        _square_shape(h, "eigh")
        return EighResult(*_parts("eigh", np.linalg.eigh, h, [h.shape[:-1], h.shape],
                                  [dt.real_of(h.dtype), h.dtype]))
    a = _square(x, "eigh")
    n = a.shape[0]
    if n == 0:
        return EighResult(zeros((0,), dtype=a.dtype), zeros((0, 0), dtype=a.dtype))
    w, v = _decompose("syevd", a, [(n,), (n, n)], (), "fnp:eigh")
    return EighResult(w, v)


def qr(x: Any, /, *, mode: str = "reduced") -> QRResult:
    """Q with orthonormal columns and upper triangular R, x = Q @ R (Ferry's
    geqrf kernel: LAPACK's Householder QR, cuSOLVER's on a GPU); mode
    'reduced' (Q is m x k, R k x n, k = min(m, n)) or 'complete' (Q m x m)."""
    if mode not in ("reduced", "complete"):
        raise NotImplementedError(f"linalg.qr(mode={mode!r}): ferry.numpy has 'reduced' and 'complete'")
    if (h := _by_numpy(x)) is not None:
        *batch, m, n = h.shape
        rows = m if mode == "complete" else builtins.min(m, n)
        return QRResult(*_parts("qr", lambda v: np.linalg.qr(v, mode=mode), h,
                                [(*batch, m, rows), (*batch, rows, n)], [h.dtype, h.dtype]))
    a = _matrix(x, "qr")
    m, n = a.shape
    k = builtins.min(m, n)
    rows = m if mode == "complete" else k
    if k == 0:
        return QRResult(eye(m, dtype=a.dtype) if mode == "complete" else zeros((m, 0), dtype=a.dtype),
                        zeros((rows, n), dtype=a.dtype))
    q, r = _decompose("geqrf", a, [(m, rows), (rows, n)], (int(mode == "complete"),), "fnp:qr")
    return QRResult(q, r)


def pinv(x: Any, /, *, rtol: float | None = None) -> Any:
    """The Moore-Penrose pseudo-inverse from the SVD (gesdd): singular values
    at most rtol * the largest (default max(m, n) * eps, the array API's)
    count as zero."""
    if (h := _by_numpy(x)) is not None:
        shape = (*h.shape[:-2], h.shape[-1], h.shape[-2])
        return host("pinv", lambda v: np.linalg.pinv(v, rtol=rtol), [h], shape, h.dtype)
    a = _matrix(x, "pinv")
    m, n = a.shape
    if builtins.min(m, n) == 0:
        return zeros((n, m), dtype=a.dtype)
    u, s, vt = svd(a, full_matrices=False)
    cut = multiply(max(s), builtins.max(m, n) * float(np.finfo(a.dtype).eps) if rtol is None else float(rtol))
    kept = greater(s, cut)
    inverse = where(kept, divide(1, where(kept, s, 1)), 0)
    return matmul(multiply(matrix_transpose(vt), inverse), matrix_transpose(u))


def inv(x: Any, /) -> Any:
    """The inverse of a square matrix (solve against the identity; a singular
    matrix fails the task with KernelError)."""
    if (h := _by_numpy(x)) is not None:
        _square_shape(h, "inv")
        return host("inv", np.linalg.inv, [h], h.shape, h.dtype)
    a = _square(x, "inv")
    return solve(a, eye(a.shape[0], dtype=a.dtype))


def eigvalsh(x: Any, /) -> Any:
    """The eigenvalues of a symmetric x, ascending."""
    if (h := _by_numpy(x)) is not None:
        _square_shape(h, "eigvalsh")
        return host("eigvalsh", np.linalg.eigvalsh, [h], h.shape[:-1], dt.real_of(h.dtype))
    return eigh(x).eigenvalues


def cholesky(x: Any, /, *, upper: bool = False) -> Any:
    """The lower factor L with x = L @ L.T (Ferry's potrf kernel; a matrix
    that is not positive definite makes the task fail with KernelError)."""
    if (h := _by_numpy(x)) is not None:
        _square_shape(h, "cholesky")
        return host("cholesky", lambda v: np.linalg.cholesky(v, upper=upper), [h], h.shape, h.dtype)
    a = _square(x, "cholesky")
    n = a.shape[0]
    if n == 0:
        return a
    v = matrix_tiles(whole(materialize(a._node), materialize(a._node).rt), materialize(a._node).rt)
    rt = v.rt
    on = placement() or ""
    factor = rt.empty((n, n), a.dtype)
    futures = [rt.copy(v.tiles[0], factor, on=on, name="fnp:cholesky-copy"),
               rt.potrf(factor, on=on, name="fnp:cholesky")]
    full = wrap(Data(Tiled((n, n), a.dtype, rt, [factor], [0, n], futures, "fnp:cholesky")))
    lower = greater_equal(wrap(Index((n, n), 0)), wrap(Index((n, n), 1)))
    low = where(lower, full, 0)
    return matrix_transpose(low) if upper else low


def solve(a: Any, b: Any, /) -> Any:
    """x with a @ x = b (LAPACK gesv, in a Python task on the CPU workers):
    b a vector (shape (M,)) or a stack of matrices (..., M, K), the stacks
    broadcast as NumPy 2 does."""
    x, y = asarray(a), asarray(b)
    if x.ndim < 2:
        raise np.linalg.LinAlgError(f"{x.ndim}-dimensional array given. Array must be at least two-dimensional")
    _square_shape(x, "solve")
    t = dt.result_type(x, y)
    t = t if dt.is_inexact(t) else dt.float64
    m = x.shape[-1]
    if y.ndim == 1:
        if y.shape[0] != m:
            raise ValueError(f"solve: a is {x.shape} but b is {y.shape}")
        shape = (*x.shape[:-2], m)
    else:
        if y.shape[-2] != m:
            raise ValueError(f"solve: a is {x.shape} but b is {y.shape}")
        shape = (*np.broadcast_shapes(x.shape[:-2], y.shape[:-2]), m, y.shape[-1])
    return host("solve", lambda p, q: np.linalg.solve(p, q), [astype(x, t), astype(y, t)], shape, t)


def _square_shape(a: Any, name: str) -> None:
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError(f"linalg.{name}: last 2 dimensions of the array must be square, not {a.shape}")


def _largest(v: Any, axis: Any, keepdims: bool) -> Any:
    """The max of values >= 0 (magnitudes, sums of them), 0 where there are
    none: NumPy's norms reduce with initial=0, so an empty vector's inf-norm
    is 0 where a plain max would have no identity."""
    if math.prod(v.shape[a] for a in axes_of(axis, v.ndim)) == 0:
        return sum(v, axis=axis, keepdims=keepdims)
    return max(v, axis=axis, keepdims=keepdims)


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:  # noqa: A002
    a = asarray(x)
    t = dt.float_of(a.dtype) if a.dtype != dt.bool_ else dt.float64
    a = astype(a, t)
    if dt.is_complex(t):  # the norm of the magnitudes, a real number
        t = dt.real_of(t)
        a = abs(a)
    if ord == 2:
        return sqrt(sum(multiply(a, a), axis=axis, keepdims=keepdims))
    if ord == math.inf:
        return _largest(abs(a), axis, keepdims)
    if ord == -math.inf:
        return min(abs(a), axis=axis, keepdims=keepdims)
    if ord == 1:
        return sum(abs(a), axis=axis, keepdims=keepdims)
    if ord == 0:
        return astype(sum(not_equal(a, 0), axis=axis, keepdims=keepdims), t)
    if isinstance(ord, (int, float)):
        return pow(sum(pow(abs(a), float(ord)), axis=axis, keepdims=keepdims), 1.0 / ord)
    raise ValueError(f"vector norm order {ord!r} is not a number")


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002
    a = asarray(x)
    axes = (a.ndim - 2, a.ndim - 1)
    if ord == "fro":
        return vector_norm(a, axis=axes, keepdims=keepdims)
    t = dt.float_of(a.dtype) if a.dtype != dt.bool_ else dt.float64
    if ord in (2, -2, "nuc"):  # from the singular values
        if a.ndim != 2 or dt.is_complex(a.dtype):
            shape = (*a.shape[:-2], 1, 1) if keepdims else a.shape[:-2]
            b = a if dt.is_inexact(a.dtype) else astype(a, t)
            return host("matrix_norm", lambda v: np.linalg.matrix_norm(v, keepdims=keepdims, ord=ord), [b], shape,
                        dt.real_of(t))
        s = svdvals(astype(a, t))
        value = max(s) if ord == 2 else min(s) if ord == -2 else sum(s)
        return reshape(value, (1, 1)) if keepdims else value
    a = abs(astype(a, t))
    if ord in (1, -1):
        col = sum(a, axis=axes[0], keepdims=True)
        out = _largest(col, axes[1], True) if ord == 1 else min(col, axis=axes[1], keepdims=True)
    elif ord in (math.inf, -math.inf):
        row = sum(a, axis=axes[1], keepdims=True)
        out = _largest(row, axes[0], True) if ord == math.inf else min(row, axis=axes[0], keepdims=True)
    else:
        raise ValueError(f"matrix norm order {ord!r} is not one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf")
    return out if keepdims else reshape(out, a.shape[:-2])


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A002
    """NumPy's numpy.linalg.norm for vectors and matrices (not 2 / nuc)."""
    a = asarray(x)
    if axis is None and ord is None:
        flat = vector_norm(a, keepdims=keepdims)
        return flat
    if axis is None:
        axis = tuple(range(a.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(axes) == 1:
        return vector_norm(a, axis=axes[0], keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axes) == 2 and builtins.sorted(int(v) % a.ndim for v in axes) == [a.ndim - 2, a.ndim - 1]:
        return matrix_norm(a, keepdims=keepdims, ord="fro" if ord is None else ord)
    raise NotImplementedError(f"linalg.norm over axes {axis}")


def _stack(x: Any, name: str) -> Any:
    """x as a stack of square matrices of a floating type (integers become
    float64, as NumPy's linalg makes them)."""
    a = asarray(x)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"linalg.{name} takes square matrices (shape (..., n, n)), not shape {a.shape}")
    return a if dt.is_inexact(a.dtype) else astype(a, dt.float64)


def det(x: Any, /) -> Any:
    a = _stack(x, "det")
    return host("det", np.linalg.det, [a], a.shape[:-2], a.dtype)


def slogdet(x: Any, /) -> SlogdetResult:
    """The sign (of a complex matrix: a number of magnitude 1) and the
    logarithm of the absolute value of the determinant."""
    a = _stack(x, "slogdet")
    real = dt.real_of(a.dtype)
    return SlogdetResult(host("slogdet", lambda v: np.linalg.slogdet(v)[0], [a], a.shape[:-2], a.dtype),
                         host("slogdet", lambda v: np.linalg.slogdet(v)[1], [a], a.shape[:-2], real))


def matrix_power(x: Any, n: int, /) -> Any:
    a = asarray(x)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"linalg.matrix_power takes square matrices (shape (..., n, n)), not shape {a.shape}")
    n = int(n)
    t = a.dtype if n >= 0 or dt.is_inexact(a.dtype) else dt.float64
    if n < 0 and not dt.is_inexact(a.dtype):
        raise TypeError("linalg.matrix_power: negative powers need floating-point matrices (NumPy's error)")
    return host("matrix_power", lambda v: np.linalg.matrix_power(v, n), [a], a.shape, t)


def matrix_rank(x: Any, /, *, rtol: Any = None) -> Any:
    a = asarray(x)
    if a.ndim < 2:
        raise ValueError(f"linalg.matrix_rank takes matrices (shape (..., m, n)), not shape {a.shape}")
    a = a if dt.is_inexact(a.dtype) else astype(a, dt.float64)
    inputs = [a]
    if rtol is not None and not isinstance(rtol, (int, float)):
        inputs.append(asarray(rtol))
        return host("matrix_rank", lambda v, r: np.linalg.matrix_rank(v, rtol=r), inputs, a.shape[:-2], dt.int64)
    return host("matrix_rank", lambda v: np.linalg.matrix_rank(v, rtol=rtol), inputs, a.shape[:-2], dt.int64)


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The cross product of 3-element vectors along `axis` (broadcast)."""
    a, b = asarray(x1), asarray(x2)
    t = dt.result_type(a, b)
    if t == dt.bool_:
        raise TypeError("linalg.cross takes numeric arrays, not bool")
    shape = np.broadcast_shapes(a.shape, b.shape)
    low = builtins.min(a.ndim, b.ndim)
    if not -low <= axis < low:
        raise np.exceptions.AxisError(axis, low)
    # The array API counts the axis from the last one, in both operands.
    ax = axis - low if axis >= 0 else axis
    if a.shape[ax] != 3 or b.shape[ax] != 3:
        raise ValueError(f"linalg.cross needs 3 elements along axis {axis}: shapes {a.shape} and {b.shape}")
    return host("cross", lambda v, w: np.cross(v, w, axis=ax), [astype(a, t), astype(b, t)], shape, t)


def diagonal(x: Any, /, *, offset: int = 0) -> Any:
    """The diagonal of each matrix in the last two axes (offset > 0: above)."""
    a = asarray(x)
    if a.ndim < 2:
        raise ValueError(f"linalg.diagonal takes matrices (shape (..., m, n)), not shape {a.shape}")
    m, n = a.shape[-2:]
    k = int(offset)
    length = builtins.max(0, builtins.min(m, n - k) if k >= 0 else builtins.min(m + k, n))
    return host("diagonal", lambda v: np.diagonal(v, k, -2, -1).copy(), [a], (*a.shape[:-2], length), a.dtype)


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    """The sum of each matrix's diagonal, of sum's type (int64 for small
    signed integers, uint64 for unsigned)."""
    return sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def outer(x1: Any, x2: Any, /) -> Any:
    a, b = asarray(x1), asarray(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"linalg.outer takes 1-d arrays, not shapes {a.shape} and {b.shape}")
    return _outer(a, b)
