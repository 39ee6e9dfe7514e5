"""Where ferry.numpy arrays live: tiles (Ferry arrays of their own) along the
first axis, the runtime they belong to, and the tile size."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import re
import threading
import weakref
from typing import Any, Callable, Iterator, Sequence

import numpy as np

import ferry

from . import _dtypes as dt

_state = threading.local()
_default: list[ferry.Runtime] = []
# 4 MiB: a task of a few hundred microseconds at memory speed, many times the
# ~20 us a task costs, and enough tiles to keep every worker busy.
DEFAULT_TILE_BYTES = 4 << 20
# Arrays up to tile_bytes / 64 (64 KiB by default) are worked on at once
# with NumPy in this process: NumPy takes a few microseconds there, a task
# some tens. None: that default; 0: never.
_options: dict[str, Any] = {"tile_bytes": DEFAULT_TILE_BYTES, "on": None, "cuda": False, "eager_bytes": None}


def runtime() -> ferry.Runtime:
    """The runtime ferry.numpy submits to: the one given by using(), else a
    process-wide ferry.Runtime() made on first use (it reads FERRY_REMOTES)."""
    rt = getattr(_state, "rt", None)
    if rt is not None:
        return rt
    if not _default or _default[0].closed:
        _default[:] = [ferry.Runtime()]
    return _default[0]


@contextlib.contextmanager
def using(rt: ferry.Runtime, on: str | None = None) -> Iterator[ferry.Runtime]:
    """Runs the ferry.numpy work of the block on `rt` (and places its tasks
    `on` a device: "cpu", "gpu", "remote", ...; None lets the scheduler
    choose)."""
    before = getattr(_state, "rt", None), _options["on"]
    _state.rt = rt
    _options["on"] = on
    try:
        yield rt
    finally:
        _state.rt, _options["on"] = before


_UNSET: Any = object()


def set_options(*, tile_bytes: int | None = None, on: Any = _UNSET, cuda: bool | None = None,
                eager_bytes: Any = _UNSET) -> None:
    """tile_bytes: the size arrays are cut into (default 4 MiB); on: where
    tasks go by default ("cpu", "remote", ...; None: the scheduler decides);
    cuda: run elementwise programs as CUDA source (NVRTC) on a local GPU or a
    GPU ferryd, wherever the scheduler puts them (on="gpu" implies it);
    eager_bytes: arrays up to this size are made and worked on at once with
    NumPy in this process (None: tile_bytes / 64; 0: never)."""
    if eager_bytes is not _UNSET:
        _options["eager_bytes"] = eager_bytes
    if cuda is not None:
        _options["cuda"] = bool(cuda)
    if tile_bytes is not None:
        if tile_bytes < 1:
            raise ValueError(f"tile_bytes={tile_bytes}: it must be positive")
        _options["tile_bytes"] = int(tile_bytes)
    if on is not _UNSET:
        _options["on"] = on


def placement() -> str | None:
    return _options["on"]


def stays_here(nbytes: int) -> bool:
    """Whether an array of `nbytes` is small enough to stay in this process
    (never while tasks are placed or run as CUDA programs: the user asked for
    a device)."""
    if _options["on"] is not None or _options["cuda"]:
        return False
    limit = _options["eager_bytes"]
    limit = _options["tile_bytes"] // 64 if limit is None else int(limit)
    return 0 < limit and nbytes <= limit


def cuda_programs() -> bool:
    return bool(_options["cuda"])


def tile_rows(shape: tuple[int, ...], itemsize: int) -> int:
    """How many slices along the first axis one tile holds."""
    if not shape:
        return 1
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize
    return max(1, _options["tile_bytes"] // max(row, 1))


def buffer_shape(shape: tuple[int, ...], rows: int) -> tuple[int, ...]:
    """A tile's Ferry shape: rows x last axis (a matrix for gemm), 1-D for vectors."""
    if len(shape) <= 1:
        return (rows if shape else 1,)
    return (rows * int(np.prod(shape[1:-1], dtype=np.int64)), shape[-1])


class Tiled:
    """An array's value: `tiles[i]` holds slices bounds[i]:bounds[i+1] of the
    first axis (all of a 0-d array), C order; a size-0 array has no tiles."""

    __slots__ = ("shape", "dtype", "rt", "tiles", "bounds", "futures", "label")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, rt: ferry.Runtime, tiles: list[Any],
                 bounds: list[int], futures: list[Any] | None = None, label: str = "") -> None:
        self.shape, self.dtype, self.rt = tuple(shape), np.dtype(dtype), rt
        self.tiles, self.bounds = tiles, bounds
        self.futures = futures or []
        self.label = label

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def row(self) -> int:
        """Elements per slice of the first axis."""
        return int(np.prod(self.shape[1:], dtype=np.int64)) if self.shape else 1

    @staticmethod
    def plan(shape: tuple[int, ...], dtype: np.dtype) -> list[int]:
        """The bounds an array of this shape is cut at."""
        if int(np.prod(shape, dtype=np.int64)) == 0:
            return [0]
        if not shape:
            return [0, 1]
        step = tile_rows(shape, dtype.itemsize)
        return list(range(0, shape[0], step)) + [shape[0]]

    @classmethod
    def allocate(cls, shape: tuple[int, ...], dtype: np.dtype, rt: ferry.Runtime,
                 bounds: list[int] | None = None) -> "Tiled":
        bounds = bounds if bounds is not None else cls.plan(shape, dtype)
        if int(np.prod(shape, dtype=np.int64)) == 0:
            return cls(shape, dtype, rt, [], [0])
        # rt._empty with the type's name: rt.empty's dtype lookup costs more than the allocation.
        name = dt.STORAGE[dtype].name
        tiles = [rt._empty(list(buffer_shape(shape, hi - lo)), name, False) for lo, hi in zip(bounds, bounds[1:])]
        return cls(shape, dtype, rt, tiles, bounds)

    @classmethod
    def from_numpy(cls, a: np.ndarray, rt: ferry.Runtime) -> "Tiled":
        t = dt.dtype(a.dtype)
        bounds = cls.plan(a.shape, t)
        if a.size == 0:
            return cls(a.shape, t, rt, [], [0])
        store = a
        tiles = []
        for lo, hi in zip(bounds, bounds[1:]):
            part = store[lo:hi] if a.ndim else store.reshape(1)
            tiles.append(rt.array(np.ascontiguousarray(part).reshape(buffer_shape(a.shape, hi - lo))))
        return cls(a.shape, t, rt, tiles, bounds)

    def wait(self) -> None:
        for f in self.futures:
            try:
                f.result()
            except ferry.KernelError as error:
                typed = translated(error)
                if typed is None:
                    raise
                raise typed from None

    def numpy(self) -> np.ndarray:
        """A NumPy copy (a view when there is one tile)."""
        self.wait()
        if not self.tiles:
            return np.zeros(self.shape, self.dtype)
        parts = [t.numpy(readonly=True).reshape(-1) for t in self.tiles]
        flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return flat.reshape(self.shape)

    def reshaped(self, shape: tuple[int, ...]) -> "Tiled | None":
        """The same tiles under another shape when every tile boundary falls
        on a slice of the new first axis; None otherwise."""
        if not self.tiles:
            return Tiled(shape, self.dtype, self.rt, [], [0])
        row = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
        starts = [b * self.row for b in self.bounds]
        if len(self.tiles) > 1 and any(s % row for s in starts):
            return None
        bounds = [s // row for s in starts] if shape else [0, 1]
        return Tiled(shape, self.dtype, self.rt, self.tiles, bounds, self.futures)


# ---- Python tasks for layout operations ----

_pending: dict[str, tuple[Callable[..., None], str]] = {}
_kernels: dict[tuple[int, int, int], Any] = {}
_ids = itertools.count()


def per_runtime(cache: dict[Any, Any], key: tuple[Any, ...], rt: ferry.Runtime, make: Callable[[], Any]) -> Any:
    """cache[key] made for `rt` (key starts with id(rt)). Once a runtime is
    gone, a new one may get its id: entries keep a weak reference to the
    runtime they belong to, and one for another runtime is made anew (its
    kernels died with their runtime)."""
    entry = cache.get(key)
    if entry is not None and entry[0]() is rt:
        return entry[1]
    value = make()
    cache[key] = (weakref.ref(rt), value)
    return value


# ---- failures: an exception raised in a task reaches the caller with its type ----

_failures: dict[str, tuple[Exception, str]] = {}
_KEPT_FAILURES = 64
_CALL = re.compile(r"\[fnp task ([^\]]+)\]")
# LAPACK's kernels fail on the data (not positive definite, no convergence):
# NumPy's LinAlgError, as np.linalg would raise.
_LAPACK = re.compile(r"task '([^']*)' \(kernel (?:potrf|gesdd|syevd|geqrf)\) failed on [^:]*: ([^\n]*)")
_typed: dict[type, type] = {}

_caches: list[dict[Any, Any]] = [_kernels, _pending, _failures]


def forget_at_exit(cache: dict[Any, Any]) -> None:
    """Empties `cache` at exit: kernel handles held by the floors above (the
    engine's CUDA programs) must go before the extension does."""
    _caches.append(cache)


@atexit.register
def _forget() -> None:
    for cache in _caches:
        cache.clear()
    _default.clear()


def host_task(rt: ferry.Runtime, inputs: Sequence[Any], outputs: Sequence[Any], fn: Callable[..., None],
              name: str, what: str = "") -> Any:
    """Submits one Python task reading the Ferry arrays `inputs` and writing
    `outputs`: fn(inputs, outputs) gets NumPy views of both. `what` names
    the task in the error its failure raises (translated)."""
    def make() -> Any:
        params = [(f"x{i}", "read") for i in range(len(inputs))] + [(f"y{i}", "write") for i in range(len(outputs))]
        params.append(("call", "text"))
        n_in = len(inputs)

        def run(*args: Any) -> None:
            *arrays, call = args
            task, description = _pending.pop(call)
            try:
                task(arrays[:n_in], arrays[n_in:])
            except Exception as exc:
                # Keep the exception itself for the caller; the task's own
                # error (a KernelError's text) only needs to say which one.
                _failures[call] = (exc.with_traceback(None), description)  # its frames hold the tiles
                while len(_failures) > _KEPT_FAILURES:
                    del _failures[next(iter(_failures))]
                raise RuntimeError(f"[fnp task {call}] {type(exc).__name__}: {exc}") from None

        base = f"fnp.host{len(inputs)}x{len(outputs)}"
        unique, n = base, 1
        while rt.has_kernel(unique):
            n += 1
            unique = f"{base}#{n}"
        return rt._python_kernel(unique, params, run, False)

    kernel = per_runtime(_kernels, (id(rt), len(inputs), len(outputs)), rt, make)
    call = f"{name}#{next(_ids)}"
    _pending[call] = (fn, what or name)
    return rt._submit(kernel, (*inputs, *outputs, call), "cpu", name)


class TaskFailure(ferry.KernelError):
    """The base of the classes an exception raised inside a ferry.numpy task
    is re-raised with: each derives from the exception's own type (IndexError,
    LinAlgError, ...) and from this one, so `except IndexError` and `except
    ferry.KernelError` both catch it."""


def typed_failure(kind: type, message: str) -> Exception | None:
    """An exception of `kind` that is also a TaskFailure; None where the two
    cannot be combined (a built-in with its own layout or arguments)."""
    cls = _typed.get(kind)
    try:
        if cls is None:
            cls = type(kind.__name__, (kind, TaskFailure),
                       {"__module__": kind.__module__, "__qualname__": kind.__qualname__})
            _typed[kind] = cls
        return cls(message)
    except Exception:  # noqa: BLE001 - any type that refuses is left as the KernelError
        return None


def translated(error: ferry.KernelError) -> Exception | None:
    """The error a task failure means to the caller, or None to keep `error`."""
    text = str(error)
    call = _CALL.search(text)
    if call and call.group(1) in _failures:
        exc, what = _failures[call.group(1)]
        return typed_failure(type(exc), f"{exc} (in {what})")
    lapack = _LAPACK.search(text)
    if lapack:
        return typed_failure(np.linalg.LinAlgError, f"{lapack.group(2)} (in {lapack.group(1)})")
    return None
