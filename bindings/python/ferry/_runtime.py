"""ferry.Runtime: arrays, the built-in kernels as methods, Python tasks,
CUDA kernels from source, traces and notebook views."""

from __future__ import annotations

import atexit
import html
import inspect
import os
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import _dlpack, _ferry
from ._errors import UsageError
from ._ferry import Array, Future, Kernel
from ._trace import Trace

Place = str  # "cpu", "gpu", "gpu:N", "remote", "remote:host:port"; None or "" lets the scheduler choose

_live: "weakref.WeakSet[Runtime]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # A runtime still open at exit waits for its tasks while Python can still run them.
    for rt in list(_live):
        try:
            rt.close()
        except Exception:  # noqa: BLE001 - exiting anyway; the error was reported by wait()
            pass


def _dtype_name(dtype: Any) -> str:
    return np.dtype(dtype).name


def _shape(shape: int | Iterable[int]) -> list[int]:
    if isinstance(shape, (int, np.integer)):
        return [int(shape)]
    dims = [int(d) for d in shape]
    if not dims:
        raise UsageError("a Ferry array needs at least one dimension (a 0-d scalar is a Python number)")
    if any(d < 0 for d in dims):
        raise UsageError(f"shape {tuple(dims)} has a negative dimension")
    return dims



def _require_matrices(kernel: str, **arrays: Any) -> None:
    """Matrix kernels refuse an N-D array as what it is: the runtime stores it
    as rows x last axis, and a refusal of that shape (6 x 4) would puzzle."""
    for position, (param, array) in enumerate(arrays.items(), start=1):
        shape = getattr(array, "shape", None)
        if isinstance(array, Array) and shape is not None and len(shape) > 2:
            raise UsageError(f"{kernel}: argument {position} '{param}' is a {len(shape)}-D array of shape "
                             f"{tuple(shape)}; {kernel} takes matrices (1-D or 2-D arrays)")

class Runtime(_ferry._Runtime):
    """Ferry's runtime: it places each task on the CPU workers, a local GPU or
    a remote GPU host (ferryd), and moves the data there.

    remotes: GPU hosts as "host:port" or "ucx://host:port" (or FERRY_REMOTES).
    policy: "heft" (default), "eager", "cpu", "gpu" or "random".
    trace: record what ran where (see trace()); a string is also a file the
           trace is written to when the runtime closes.
    gpus: the local GPUs to use: "all" (default), "none" or "0,1" (FERRY_GPUS).
    gpu_memory_limit: bytes of device memory per GPU (FERRY_GPU_MEMORY).
    remote_policy: "require" (default: the constructor raises RemoteError,
           naming the host and why, unless every remote answers and
           authenticates within remote_timeout seconds) or "prefer" (an
           unusable host is warned about once and its tasks run here)
           (FERRY_REMOTE_POLICY, FERRY_REMOTE_TIMEOUT).
    remote_liveness: seconds a connected host may stay silent while work
           waits on it before it is treated as lost (a stopped, hung or
           cut-off ferryd; default 5, 0 turns it off; FERRY_REMOTE_LIVENESS).
    identity: sign in with this private key (`ferry keygen FILE`; ferryd
           admits it with --authorized-keys) instead of a token
           (FERRY_IDENTITY).
    known_hosts: the file pinning ferryd host keys, one "HOST:PORT
           ferry-ed25519 BASE64" line each (FERRY_KNOWN_HOSTS; default
           ~/.config/ferry/known_hosts when signing in with a key).
    strict_host_keys: refuse a ferryd whose key known_hosts does not pin,
           instead of pinning it on first use (FERRY_STRICT_HOST_KEYS).
    plaintext: let a ferryd started with --plaintext skip encryption
           (trusted networks only; FERRY_PLAINTEXT).
    encrypt_loopback: encrypt links on loopback too (FERRY_ENCRYPT_LOOPBACK).
    The FERRY_* variables named above override these arguments where they
    are set, as in C++; read_environment=False makes the arguments final.
    Use it as a context manager, or call close().
    """

    def __init__(
        self,
        remotes: str | Sequence[str] | None = None,
        policy: str | None = None,
        trace: bool | str = False,
        *,
        workers: int = 0,
        explain: bool = False,
        token: str | None = None,
        token_file: str | None = None,
        chunk_bytes: int | None = None,
        chunk_window: int | None = None,
        persist_perf_models: bool | None = None,
        perf_model_dir: str | None = None,
        read_environment: bool = True,
        gpus: str | None = None,
        gpu_memory_limit: int | None = None,
        remote_policy: str | None = None,
        remote_timeout: float | None = None,
        remote_liveness: float | None = None,
        identity: str | os.PathLike[str] | None = None,
        known_hosts: str | os.PathLike[str] | None = None,
        strict_host_keys: bool | None = None,
        plaintext: bool | None = None,
        encrypt_loopback: bool | None = None,
    ) -> None:
        if isinstance(remotes, str):
            remotes = [remotes]
        trace_path = trace if isinstance(trace, str) else None
        super().__init__(
            workers=workers, policy=policy, trace=bool(trace), trace_path=trace_path, explain=explain,
            remotes=list(remotes) if remotes is not None else None, token=token,
            token_file=str(token_file) if token_file is not None else None, chunk_bytes=chunk_bytes,
            chunk_window=chunk_window, persist_perf_models=persist_perf_models,
            perf_model_dir=str(perf_model_dir) if perf_model_dir is not None else None,
            read_environment=read_environment, gpus=gpus, gpu_memory_limit=gpu_memory_limit,
            remote_policy=remote_policy, remote_timeout=remote_timeout, remote_liveness=remote_liveness,
            identity=os.path.expanduser(os.fspath(identity)) if identity is not None else None,
            known_hosts=os.path.expanduser(os.fspath(known_hosts)) if known_hosts is not None else None,
            strict_host_keys=strict_host_keys, plaintext=plaintext, encrypt_loopback=encrypt_loopback)
        _live.add(self)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- arrays ----

    def array(self, data: Any, dtype: Any = None, *, name: str | None = None) -> Array:
        """A Ferry array holding a copy of `data` (one copy, into pinned memory)."""
        if isinstance(data, Array):
            data = data.numpy()
        if hasattr(data, "__dlpack_device__") and data.__dlpack_device__()[0] not in (1, 3):
            raise UsageError("rt.array() takes host data; this array lives on a device "
                             f"(DLPack device {data.__dlpack_device__()}): use rt.from_dlpack()")
        source = np.asarray(data)
        if dtype is not None:
            source = source.astype(dtype, copy=False)
        if source.ndim == 0:
            raise UsageError("a Ferry array needs at least one dimension (a 0-d scalar is a Python number)")
        a = self._array(np.ascontiguousarray(source))
        if name is not None:
            a.name = name
        return a

    def empty(self, shape: int | Iterable[int], dtype: Any = np.float32, *, name: str | None = None) -> Array:
        """An array with undefined contents (like numpy.empty)."""
        a = self._empty(_shape(shape), _dtype_name(dtype), False)
        if name is not None:
            a.name = name
        return a

    def zeros(self, shape: int | Iterable[int], dtype: Any = np.float32, *, name: str | None = None) -> Array:
        """An array of zeros."""
        a = self._empty(_shape(shape), _dtype_name(dtype), True)
        if name is not None:
            a.name = name
        return a

    def unified(self, shape: int | Iterable[int], dtype: Any = np.float32, *, zero: bool = True,
                name: str | None = None) -> Array:
        """An array in CUDA unified (managed) memory: before a GPU task the
        runtime prefetches it to the GPU instead of copying. Without a GPU it
        is an ordinary host array."""
        a = self._unified(_shape(shape), _dtype_name(dtype), zero)
        if name is not None:
            a.name = name
        return a

    def from_dlpack(self, data: Any, *, name: str | None = None) -> Array:
        """An array holding a copy of any DLPack-capable array (NumPy, CuPy,
        PyTorch). Host arrays take one copy into pinned memory; a CUDA array on
        a GPU this runtime uses is copied device to device and stays there (no
        host trip until someone reads it on the host)."""
        device, ordinal = _dlpack.device_of(data)
        if device in _dlpack.HOST_READABLE:
            return self.array(_dlpack.host_view(data), name=name)
        gpus = [d["name"] for d in self.devices() if d["name"].startswith("cuda:")]
        if device == _dlpack.KDL_CUDA and f"cuda:{ordinal}" in gpus:
            a = self.empty(tuple(data.shape), np.dtype(str(data.dtype).replace("torch.", "")), name=name)
            # Asked with Ferry's stream (_dlpack.consumer_stream), so the
            # producer's pending writes are done before the copy reads; copied
            # on the GPU the data is on, which the capsule must confirm.
            self._import_cuda(a, ordinal, _dlpack.export(data, device))
            return a
        # On a GPU this runtime does not use (or managed memory): through the host.
        cuda_like = (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED)
        if device in cuda_like and hasattr(data, "get"):  # CuPy-style .get()
            return self.array(data.get(), name=name)
        if device in cuda_like and hasattr(data, "cpu"):  # PyTorch
            return self.array(data.cpu().numpy(), name=name)
        where = f"CUDA GPU {ordinal}" if device == _dlpack.KDL_CUDA else f"DLPack device type {device}, id {ordinal}"
        raise UsageError(f"rt.from_dlpack(): the array is on {where}, which Ferry cannot read: this runtime's GPUs "
                         f"are {', '.join(gpus) or 'none'}, and the array offers no .get() or .cpu() to copy it "
                         "to the host")

    # ---- tasks ----

    def submit(self, kernel: str | Kernel, *args: Any, on: Place | None = None, name: str | None = None) -> Future:
        """Submits a task running `kernel` (a name or a ferry.Kernel) on `args`:
        arrays (used as the kernel declares, or as ferry.read/write/readwrite
        say), numbers and strings. Returns at once with a Future."""
        return self._submit(kernel, args, on or "", name or "")

    def axpy(self, x: Array, y: Array, alpha: float = 1.0, *, on: Place | None = None,
             name: str | None = None) -> Future:
        """y += alpha * x"""
        return self._submit("axpy", (x, y, alpha), on or "", name or "")

    def scal(self, x: Array, alpha: float, *, on: Place | None = None, name: str | None = None) -> Future:
        """x *= alpha"""
        return self._submit("scal", (x, alpha), on or "", name or "")

    def dot(self, x: Array, y: Array, *, on: Place | None = None, name: str | None = None) -> float:
        """The dot product of x and y (waits for it)."""
        return self._submit("dot", (x, y), on or "", name or "").result()

    def nrm2(self, x: Array, *, on: Place | None = None, name: str | None = None) -> float:
        """The Euclidean norm of x (waits for it)."""
        return self._submit("nrm2", (x,), on or "", name or "").result()

    def sum(self, x: Array, *, on: Place | None = None, name: str | None = None) -> float:
        """The sum of x's elements (waits for it)."""
        return self._submit("sum", (x,), on or "", name or "").result()

    def gemm(self, a: Array, b: Array, c: Array, alpha: float = 1.0, beta: float = 0.0, *, trans_a: bool = False,
             trans_b: bool = False, on: Place | None = None, name: str | None = None) -> Future:
        """c = alpha * op(a) @ op(b) + beta * c, op transposing when asked."""
        _require_matrices("gemm", a=a, b=b, c=c)
        return self._submit("gemm", (a, b, c, alpha, beta, int(trans_a), int(trans_b)), on or "", name or "")

    def potrf(self, a: Array, *, on: Place | None = None, name: str | None = None) -> Future:
        """Cholesky factor in place: a's lower triangle becomes L with a = L @ L.T."""
        _require_matrices("potrf", a=a)
        return self._submit("potrf", (a,), on or "", name or "")

    def gesdd(self, a: Array, s: Array, u: Array, vt: Array, *, full_matrices: bool = False,
              on: Place | None = None, name: str | None = None) -> Future:
        """Singular value decomposition a = u @ diag(s) @ vt, s descending; a
        is m x n, s holds min(m, n), u is m x min(m, n) and vt min(m, n) x n
        (m x m and n x n with full_matrices). a is only read."""
        return self._submit("gesdd", (a, s, u, vt, int(full_matrices)), on or "", name or "")

    def syevd(self, a: Array, w: Array, v: Array, *, on: Place | None = None, name: str | None = None) -> Future:
        """Eigenvalues w (ascending) and eigenvectors (v's columns) of the
        symmetric a, read from its lower triangle; a is only read."""
        return self._submit("syevd", (a, w, v), on or "", name or "")

    def geqrf(self, a: Array, q: Array, r: Array, *, complete: bool = False, on: Place | None = None,
              name: str | None = None) -> Future:
        """QR decomposition a = q @ r: a is m x n, q m x min(m, n) with
        orthonormal columns, r min(m, n) x n upper triangular (q m x m and r
        m x n when complete). a is only read."""
        return self._submit("geqrf", (a, q, r, int(complete)), on or "", name or "")

    def trsm(self, l: Array, b: Array, *, on: Place | None = None, name: str | None = None) -> Future:  # noqa: E741
        """b = b @ inv(l).T for lower triangular l (tiled Cholesky's panel update)."""
        _require_matrices("trsm", l=l, b=b)
        return self._submit("trsm", (l, b), on or "", name or "")

    def syrk(self, a: Array, c: Array, *, on: Place | None = None, name: str | None = None) -> Future:
        """c -= a @ a.T on c's lower triangle (tiled Cholesky's diagonal update)."""
        _require_matrices("syrk", a=a, c=c)
        return self._submit("syrk", (a, c), on or "", name or "")

    def fill(self, x: Array, value: float, *, on: Place | None = None, name: str | None = None) -> Future:
        """x[:] = value"""
        return self._submit("fill", (x, value), on or "", name or "")

    def copy(self, x: Array, y: Array, *, on: Place | None = None, name: str | None = None) -> Future:
        """y[:] = x"""
        return self._submit("copy", (x, y), on or "", name or "")

    def map(self, x: Array, y: Array, op: str, alpha: float = 1.0, *, on: Place | None = None,
            name: str | None = None) -> Future:
        """y = op(x) elementwise; op is copy, neg, abs, sqrt, exp, log, square,
        relu, sigmoid or scale (by alpha)."""
        return self._submit("map", (x, y, op, alpha), on or "", name or "")

    def task(self, fn: Callable[..., Any] | None = None, *, reads: Sequence[str] = (), writes: Sequence[str] = (),
             name: str | None = None, result: bool = False) -> Any:
        """Turns a Python function into a task kernel run by the CPU workers:

            @rt.task(reads=["x"], writes=["y"])
            def double(x, y):
                y[:] = 2 * x

            double(a, b)          # a Future; runs when a is ready

        Parameters named in `reads`/`writes` (both: read and written) take
        arrays, which arrive as NumPy views (inputs read-only); the others are
        numbers or strings (annotate int or str parameters, unannotated ones
        are floats). With result=True the function's return value (a number)
        is the Future's result. The GIL is held only while the function runs.
        """
        def wrap(f: Callable[..., Any]) -> PythonTask:
            return PythonTask(self, f, reads, writes, name, result)

        return wrap(fn) if fn is not None else wrap

    def cuda_kernel(self, source: str, name: str, *, writes: Sequence[str] = (),
                    options: Sequence[str] = ()) -> "CudaKernel":
        """A kernel from CUDA C++ source (an extern "C" __global__ function
        called `name`), compiled with NVRTC on the host that runs it (this
        machine's GPU or a remote ferryd's). Pointer parameters take arrays
        (const T* is read, T* is read and written, or only written if named in
        `writes`); scalar parameters take numbers. Call the result like a
        function: k(x, y, 2.0, grid=(g,), block=(256,))."""
        return CudaKernel(self, self._cuda_kernel(source, name, list(writes), list(options)))

    # ---- looking at it ----

    def explain(self, future: Future) -> str:
        """Why a task went where it went: the candidates and their estimates."""
        return future.explain()

    def trace(self) -> Trace:
        """The trace so far (tasks and transfers per lane); needs trace=True."""
        text = self.trace_json()
        if text is None:
            raise UsageError("this runtime is not tracing: create it with ferry.Runtime(trace=True)")
        return Trace(text, self.summary())

    def __repr__(self) -> str:
        if self.closed:
            return "ferry.Runtime(closed)"
        return f"ferry.Runtime({self.describe()})"

    def _repr_html_(self) -> str:
        if self.closed:
            return "<b>ferry.Runtime</b> (closed)"
        esc = html.escape
        rows = "".join(
            f"<tr><td>{esc(d['name'])}</td><td>{esc(d['kind'])}</td><td>{d['lanes']}</td><td>{d['tasks_run']}</td></tr>"
            for d in self.devices())
        parts = [f"<b>ferry.Runtime</b> — policy <code>{esc(self.policy)}</code>",
                 "<table><tr><th>device</th><th>kind</th><th>lanes</th><th>tasks run</th></tr>" + rows + "</table>"]
        if self.remotes:
            rrows = ""
            for address in self.remotes:
                try:
                    s = self.remote_stats(address)
                except Exception as e:  # noqa: BLE001 - a view must render even when a remote is down
                    rrows += f"<tr><td>{esc(address)}</td><td colspan=4>{esc(str(e))}</td></tr>"
                    continue
                state = "yes" if s["connected"] else f"down: {esc(s['down_reason'])}"
                rrows += (f"<tr><td>{esc(address)}</td><td>{state}</td>"
                          f"<td>{_mib(s['bytes_shipped'])}</td><td>{_mib(s['bytes_fetched'])}</td>"
                          f"<td>{_mib(s['server_memory_in_use'])}</td></tr>")
            parts.append("<table><tr><th>remote</th><th>connected</th><th>shipped</th><th>fetched</th>"
                         "<th>its memory in use</th></tr>" + rrows + "</table>")
        mem = self.host_memory()
        if "reserved" in mem:
            parts.append(f"host memory (pinned pool): {_mib(mem['in_use'])} in use of {_mib(mem['reserved'])} "
                         f"reserved (peak {_mib(mem['peak_reserved'])})")
        return "<br>".join(parts)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _array_repr_html(self: Array) -> str:
    shape = "×".join(str(d) for d in self.shape)
    return (f"<b>ferry.Array</b> <code>{html.escape(self.name)}</code>: {shape} {self.dtype}, "
            f"{_mib(self.nbytes)}{' (view)' if self.is_view else ''}")


Array._repr_html_ = _array_repr_html


class PythonTask:
    """A Python function made a task kernel by Runtime.task(); calling it
    submits a task and returns a Future."""

    def __init__(self, rt: Runtime, fn: Callable[..., Any], reads: Sequence[str], writes: Sequence[str],
                 name: str | None, result: bool) -> None:
        if isinstance(reads, str) or isinstance(writes, str):
            raise UsageError("reads= and writes= take lists of parameter names, e.g. reads=['x']")
        self._signature = inspect.signature(fn)
        names = list(self._signature.parameters)
        for p in self._signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise UsageError(f"task {fn.__qualname__}: *{p.name} parameters cannot become task arguments")
        for listed in (*reads, *writes):
            if listed not in names:
                raise UsageError(f"task {fn.__qualname__}: '{listed}' is not a parameter of the function "
                                 f"(it has {', '.join(names) or 'none'})")
        params = []
        for p in self._signature.parameters.values():
            if p.name in reads and p.name in writes:
                kind = "readwrite"
            elif p.name in reads:
                kind = "read"
            elif p.name in writes:
                kind = "write"
            elif p.annotation in (int, "int", bool, "bool") or (type(p.default) is int):
                kind = "integer"
            elif p.annotation in (str, "str") or isinstance(p.default, str):
                kind = "text"
            else:
                kind = "real"
            params.append((p.name, kind))
        base = name or fn.__qualname__
        unique, n = base, 1
        while rt.has_kernel(unique):  # a notebook cell run twice defines it again
            n += 1
            unique = f"{base}#{n}"
        self._rt = rt
        self.fn = fn
        self.kernel = rt._python_kernel(unique, params, fn, result)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", unique)

    def __call__(self, *args: Any, on: Place | None = None, name: str | None = None, **kwargs: Any) -> Future:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise UsageError(f"task {self.kernel.name}: {e}") from None
        bound.apply_defaults()
        return self._rt._submit(self.kernel, tuple(bound.arguments.values()), on or "", name or "")

    def __repr__(self) -> str:
        return f"ferry.PythonTask({self.kernel.name})"


class CudaKernel:
    """A kernel compiled from CUDA source; call it like a function."""

    def __init__(self, rt: Runtime, kernel: Kernel) -> None:
        self._rt = rt
        self.kernel = kernel

    def __call__(self, *args: Any, grid: Sequence[int] | int | None = None, block: Sequence[int] | int | None = None,
                 shared_bytes: int = 0, on: Place | None = None, name: str | None = None) -> Future:
        def dims(v: Sequence[int] | int | None) -> list[int]:
            if v is None:
                return [0, 0, 0]
            v = [int(v)] if isinstance(v, (int, np.integer)) else [int(d) for d in v]
            if not 1 <= len(v) <= 3 or any(d <= 0 for d in v):
                raise UsageError(f"{self.kernel.name}: grid and block are 1 to 3 positive extents, not {v}")
            return v + [1] * (3 - len(v))
        launch = (*dims(grid), *dims(block), int(shared_bytes))
        return self._rt._submit(self.kernel, (*args, *launch), on or "", name or "")

    def __repr__(self) -> str:
        return f"ferry.CudaKernel({self.kernel.name})"
