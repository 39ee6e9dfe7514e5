"""Turning an expression graph into Ferry tasks. Elementwise chains become
one fused-kernel task per tile (runtime/kernels/cpu/fused.cpp runs the
program); reductions fold inside that pass and then combine across tiles in
a tree; matmul is a gemm per tile; layout operations are Python tasks."""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

import ferry

from . import _dtypes as dt
from ._graph import Const, Data, Host, HostArray, Index, Map, MatMul, Node, Reduce, Reshape, describe_origin
from ._tiles import Tiled, buffer_shape, cuda_programs, forget_at_exit, host_task, per_runtime, placement, runtime

MAX_INPUTS = 8
MAX_DIMS = 8  # the fused programs' dimensions after merging (fused_program.hpp: max_dims)
MAX_CODE_BYTES = 800
ARITY = {"where": 3, "clip": 3}


def materialize(node: Node) -> Tiled:
    """The node's value, submitting the tasks that compute it (they run
    asynchronously; Tiled.numpy() waits)."""
    if node.value is None:
        if isinstance(node, (Map, Const, Index)):
            node.value = _elementwise(node, None)
        elif isinstance(node, Reduce):
            node.value = _reduce(node)
        elif isinstance(node, MatMul):
            node.value = _matmul(node)
        elif isinstance(node, Host):
            node.value = _host(node)
        elif isinstance(node, Reshape):
            node.value = _reshape(node)
        elif isinstance(node, HostArray):
            node.value = Tiled.from_numpy(node.array, node.rt)
        else:
            raise TypeError(f"cannot evaluate a {type(node).__name__}")
    return node.value


def _rt_of(values: Sequence[Tiled]) -> ferry.Runtime:
    rts = {id(v.rt): v.rt for v in values}
    if len(rts) > 1:
        raise ValueError("these arrays belong to different Ferry runtimes; copy one over with fnp.asarray(x.numpy())")
    return next(iter(rts.values())) if rts else runtime()


# ---- fused elementwise programs ----

class Program:
    """The postfix code of a fused subgraph and the leaves it loads."""

    def __init__(self, root: Node, dry: bool = False) -> None:
        # dry: only describe (fnp.explain): leaves are not computed, and the
        # root is read as an expression even when its value exists.
        self.leaves: list[Any] = []
        self.leaf_shapes: list[tuple[int, ...]] = []
        self.uses_index = False
        self.index_axes: set[int] = set()  # dimensions whose positions the code reads
        self.ops: list[str] = []
        self.tokens: list[str] = []
        self.shape = root.shape
        self.dry, self.root = dry, root
        self._emit(root)

    def _leaf(self, node: Node) -> int:
        value = node if self.dry else materialize(node)
        for k, (v, s) in enumerate(zip(self.leaves, self.leaf_shapes)):
            if v is value and s == node.shape:
                return k
        self.leaves.append(value)
        self.leaf_shapes.append(node.shape)
        return len(self.leaves) - 1

    def _emit(self, node: Node) -> None:
        if isinstance(node, Map) and (node.value is None or (self.dry and node is self.root)):
            for a in node.args:
                self._emit(a)
            self.ops.append(node.op)
            if node.op == "cast":
                self.tokens.append("as:" + dt.CODE[node.dtype])
            elif node.op in ("uniform", "normal"):
                self.tokens.append(f"{node.op}:{node.seed}")
            else:
                self.tokens.append(node.op)
        elif isinstance(node, Const) and node.value is None:
            self.tokens.append(constant(node.number, node.dtype))
        elif isinstance(node, Index) and node.value is None:
            pad = len(self.shape) - len(node.shape)
            if node.shape[node.axis] == 1 and self.shape[node.axis + pad] != 1:
                self.tokens.append("i64:0")
            else:
                self.uses_index = True
                self.index_axes.add(node.axis + pad)
                self.tokens.append(f"i{node.axis + pad}")
        else:
            self.tokens.append(f"x{self._leaf(node)}")

    def text(self) -> str:
        return " ".join(self.tokens)


def _real_text(v: float) -> str:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def constant(number: Any, t: np.dtype) -> str:
    if dt.is_float(t):
        return f"{dt.CODE[t]}:{_real_text(float(number))}"
    if dt.is_complex(t):
        z = complex(number)
        return f"{dt.CODE[t]}:{_real_text(z.real)},{_real_text(z.imag)}"
    if t == dt.bool_:
        return f"b8:{int(bool(number))}"
    # An integer constant wraps into its type, as NumPy's casts do (-1 as uint64 is 2**64 - 1).
    info = np.iinfo(t)
    return f"{dt.CODE[t]}:{(int(number) - int(info.min)) % (1 << info.bits) + int(info.min)}"


def _fusable_leaves(node: Node, seen: set[int], out: list[Node]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, Map) and node.value is None:
        for a in node.args:
            _fusable_leaves(a, seen, out)
    elif not (isinstance(node, (Const, Index)) and node.value is None):
        out.append(node)


def _split_if_needed(root: Node) -> None:
    """A program loads at most 8 inputs: materialize operand subtrees until
    this one fits."""
    while True:
        leaves: list[Node] = []
        _fusable_leaves(root, set(), leaves)
        distinct = {id(n.value) if n.value is not None else id(n) for n in leaves}
        # A remote host takes programs of at most 1024 bytes (the header needs the rest).
        if len(distinct) <= MAX_INPUTS and len(Program(root, dry=True).text()) <= MAX_CODE_BYTES:
            return
        candidates = [a for a in _maps_below(root) if a.value is None and a is not root]
        if not candidates:
            raise NotImplementedError("an elementwise expression over more than 8 distinct arrays, or too long "
                                      "for one fused program")
        # The biggest operand subtree first: it removes the most leaves.
        best = max(candidates, key=lambda n: _count_leaves(n))
        materialize(best)


def _maps_below(node: Node) -> list[Node]:
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Map) and n.value is None:
            out.append(n)
            stack.extend(n.args)
    return out


def _count_leaves(node: Node) -> int:
    leaves: list[Node] = []
    _fusable_leaves(node, set(), leaves)
    return len(leaves)


def _natural(shape: Sequence[int]) -> list[int]:
    s = [1] * len(shape)
    for i in range(len(shape) - 1, 0, -1):
        s[i - 1] = s[i] * shape[i]
    return s


def _broadcast_strides(leaf_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    pad = len(out_shape) - len(leaf_shape)
    full = (1,) * pad + tuple(leaf_shape)
    nat = _natural(full)
    return [0 if full[d] == 1 and out_shape[d] != 1 else nat[d] for d in range(len(out_shape))]


def _collapse(dims: list[int], strides: list[list[int]],
              keep: frozenset[int] = frozenset()) -> tuple[list[int], list[list[int]], dict[int, int]]:
    """Merges neighbouring dimensions every operand walks as one, but never
    a dimension in `keep` (the code reads its positions). Returns the new
    dimensions, strides, and where each kept dimension went."""
    out_dims = [dims[-1]]
    out_strides = [[s[-1]] for s in strides]
    groups = [[len(dims) - 1]]  # the old dimensions in each new one, innermost group first
    for d in range(len(dims) - 2, -1, -1):
        n = out_dims[0]
        separate = d in keep or any(g in keep for g in groups[0])
        if not separate and (dims[d] == 1 or all(s[d] == o[0] * n for s, o in zip(strides, out_strides))):
            out_dims[0] *= dims[d]
            groups[0].append(d)
            continue
        out_dims.insert(0, dims[d])
        groups.insert(0, [d])
        for s, o in zip(strides, out_strides):
            o.insert(0, s[d])
    moved = {g[0]: i for i, g in enumerate(groups) if g[0] in keep}
    return out_dims, out_strides, moved


def _aligned(leaf: Tiled, bounds: list[int], rt: ferry.Runtime) -> Tiled:
    """The leaf cut at `bounds` (a copy when its own tiles differ)."""
    if leaf.bounds == bounds:
        return leaf
    return _retile(leaf, bounds, rt)


def whole(leaf: Tiled, rt: ferry.Runtime) -> Tiled:
    """The leaf as one tile (broadcast operands are read whole by every task)."""
    if len(leaf.tiles) <= 1:
        return leaf
    return _retile(leaf, [0, leaf.shape[0]], rt)


def _retile(leaf: Tiled, bounds: list[int], rt: ferry.Runtime) -> Tiled:
    out = Tiled.allocate(leaf.shape, leaf.dtype, rt, bounds)
    src_starts = [b * leaf.row for b in leaf.bounds]
    dst_starts = [b * leaf.row for b in bounds]

    def copy(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> None:
        flat = np.concatenate([a.reshape(-1) for a in ins]) if len(ins) > 1 else ins[0].reshape(-1)
        for o, lo, hi in zip(outs, dst_starts, dst_starts[1:]):
            o.reshape(-1)[:] = flat[lo - src_starts[0]:hi - src_starts[0]]

    out.futures = [host_task(rt, leaf.tiles, out.tiles, copy, "fnp.retile")]
    return out


def _elementwise(root: Node, fold: tuple[str, tuple[int, ...], np.dtype] | None) -> Tiled:
    """One fused task per tile computing `root`; with `fold` = (op, axes,
    type), the tasks also fold over those axes (a reduction's first stage)."""
    _split_if_needed(root)
    prog = Program(root)
    shape = root.shape
    values = prog.leaves
    rt = _rt_of(values)
    out_shape, out_dtype = shape, root.dtype
    axes: tuple[int, ...] = ()
    if fold is not None:
        fold_op, axes, out_dtype = fold
        out_shape = tuple(d for i, d in enumerate(shape) if i not in axes)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return _identity(out_shape, out_dtype, fold[0] if fold else None, rt)

    # The output's tiles follow the first leaf spanning the first axis.
    bounds = None
    if shape:
        for v, s in zip(values, prog.leaf_shapes):
            if len(s) == len(shape) and s[0] == shape[0] and shape[0] > 1 and v.tiles:
                bounds = v.bounds
                break
    if bounds is None:
        bounds = Tiled.plan(shape, root.dtype)
    if not shape:
        dims_full: list[int] = [1]
    else:
        dims_full = list(shape)

    inputs: list[Tiled] = []
    per_tile: list[bool] = []
    strides: list[list[int]] = []
    for v, s in zip(values, prog.leaf_shapes):
        st = _broadcast_strides(s, shape) if shape else [0]
        along = bool(shape) and len(s) == len(shape) and s[0] == shape[0] and shape[0] != 1
        inputs.append(_aligned(v, bounds, rt) if along else whole(v, rt))
        per_tile.append(along)
        strides.append(st)

    y_dims = dims_full
    if fold is not None:
        kept = [d for i, d in enumerate(dims_full) if i not in axes] if shape else []
        nat = _natural(kept)
        y_strides, j = [], 0
        for i in range(len(dims_full)):
            if shape and i not in axes:
                y_strides.append(nat[j])
                j += 1
            else:
                y_strides.append(0)
    else:
        y_strides = _natural(dims_full)

    folds_first = fold is not None and (not shape or 0 in axes)
    if folds_first:
        out = None
        tiles_out = []
    else:
        out = Tiled.allocate(out_shape, out_dtype, rt, bounds if shape else None)
        tiles_out = out.tiles

    code = prog.text()
    kernel = rt.kernel(f"fused{len(inputs)}")
    fold_text = f" f={fold[0]}" if fold is not None else ""
    on = placement() or ""
    futures, partials = [], []
    label = _label(root, fold)
    # By tile rows: most tiles share one layout (and, without positions, one
    # program text); with positions only the first dimension's offset varies.
    layouts: dict[int, tuple[str, int, int, str]] = {}

    def layout(rows: int) -> tuple[str, int, int, str]:
        """The program's dimensions, their count, the slot of the tile's
        offset (-1: none), and the rest of the text."""
        dims = list(y_dims)
        if shape:
            dims[0] = rows
        all_strides = strides + [y_strides]
        body, slot = code, -1
        if prog.uses_index:
            # Dimensions whose positions the code reads stay whole (and the
            # first one keeps the tile's offset); the others merge as usual.
            cdims, cstrides, moved = _collapse(dims, all_strides, frozenset(prog.index_axes))
            if len(cdims) > MAX_DIMS:
                raise NotImplementedError(f"positions (arange, eye, random) along {len(prog.index_axes)} axes of an "
                                          f"array that stays {len(cdims)}-dimensional after merging the others "
                                          f"(at most {MAX_DIMS})")
            slot = moved.get(0, -1)
            body = " ".join(f"i{moved[int(t[1:])]}" if t[0] == "i" and t[1:].isdigit() else t for t in code.split())
        else:
            cdims, cstrides, _ = _collapse(dims, all_strides)
            if len(cdims) > MAX_DIMS:
                raise NotImplementedError(f"a broadcast that alternates across {len(cdims)} dimensions "
                                          f"(at most {MAX_DIMS})")
        parts = [f"s{k}={_csv(st)}" for k, st in enumerate(cstrides[:-1])]
        parts.append(f"y={_csv(cstrides[-1])}{fold_text}")
        return f"d={_csv(cdims)}", len(cdims), slot, " ".join(parts) + " " + body

    def program_text(rows: int, lo: int) -> str:
        entry = layouts.get(rows)
        if entry is None:
            entry = layouts[rows] = layout(rows)
        dims, count, slot, rest = entry
        if not prog.uses_index:
            return f"{dims} {rest}"
        offsets = ["0"] * count
        if slot >= 0:
            offsets[slot] = str(lo)
        return f"{dims} o={','.join(offsets)} {rest}"

    submit = rt._submit
    # Placed on a GPU: the same program as CUDA source; a fold first fills
    # y with its identity (the source's second entry), then folds into it.
    gpu = on.startswith("gpu") or cuda_programs()
    in_types = [dt.STORAGE[v.dtype].name for v in inputs]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        text = program_text(hi - lo, lo)
        args = [inp.tiles[i] if tiled else inp.tiles[0] for inp, tiled in zip(inputs, per_tile)]
        if folds_first:
            partial = rt._empty(list(_partial_shape(out_shape)), dt.STORAGE[out_dtype].name, False)
            partials.append(partial)
            y = partial
        else:
            y = tiles_out[i]
        if gpu:
            n = (hi - lo) * (int(np.prod(shape[1:], dtype=np.int64)) if shape else 1)
            y_type = dt.STORAGE[out_dtype].name
            cuda = _cuda_fused(rt, text, in_types, y_type, fold is not None)
            if fold is not None:
                ny = int(np.prod(y.shape, dtype=np.int64))
                fill = _cuda_identity(rt, text, in_types, y_type)
                futures.append(fill(ny, y, grid=(min(4096, -(-ny // 256)),), block=(256,), on=on,
                                    name=label + ",identity"))
            futures.append(cuda(n, y, *args, grid=(min(4096, -(-n // 256)),), block=(256,), on=on, name=label))
        else:
            futures.append(submit(kernel, (y, *args, text), on, label))
    if folds_first:
        return _combine(partials, futures, out_shape, out_dtype, fold[0], rt, label)
    out.futures = futures
    out.label = label
    return out


_cuda_kernels: dict[tuple[int, str, tuple[str, ...], str], Any] = {}
_cuda_identities: dict[tuple[int, str, tuple[str, ...], str], Any] = {}
_cuda_entries = itertools.count()
forget_at_exit(_cuda_kernels)
forget_at_exit(_cuda_identities)


def _cuda_fused(rt: ferry.Runtime, text: str, inputs: list[str], y: str, folds: bool = False) -> Any:
    """The program as a kernel from CUDA source (NVRTC compiles it on the GPU's
    host, cached there), one per program and element types. A folding one
    reads y too: y must arrive holding the identity (_cuda_identity)."""
    key = (id(rt), text, tuple(inputs), y)

    def make() -> Any:
        entry = f"fnp_fused_{next(_cuda_entries)}"
        source = ferry._ferry._fused_cuda_source(text, inputs, y, entry)
        if folds:
            per_runtime(_cuda_identities, key, rt,
                        lambda: rt.cuda_kernel(source, entry + "_identity", writes=["y"]))
        return rt.cuda_kernel(source, entry, writes=[] if folds else ["y"])

    return per_runtime(_cuda_kernels, key, rt, make)


def _cuda_identity(rt: ferry.Runtime, text: str, inputs: list[str], y: str) -> Any:
    """The kernel filling y with the identity of the folding program's fold
    (the same source's second entry)."""
    _cuda_fused(rt, text, inputs, y, True)
    return per_runtime(_cuda_identities, (id(rt), text, tuple(inputs), y), rt, lambda: None)


def _csv(values: Sequence[int]) -> str:
    return ",".join(str(int(v)) for v in values)


def _partial_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    n = int(np.prod(shape, dtype=np.int64))
    return (max(n, 1),)


def _label(root: Node, fold: Any) -> str:
    ops = [n.op for n in _maps_below(root)][::-1]
    text = "fnp:" + (",".join(ops[:6]) + (",..." if len(ops) > 6 else "") if ops else root.describe())
    return text + (f"->{fold[0]}" if fold else "")


def _combine(partials: list[Any], futures: list[Any], shape: tuple[int, ...], t: np.dtype, fold: str,
             rt: ferry.Runtime, label: str) -> Tiled:
    """Folds per-tile partial results into one, eight at a time."""
    op = {"add": "add", "mul": "mul", "min": "minimum", "max": "maximum"}[fold]
    n = int(np.prod(shape, dtype=np.int64))
    on = placement() or ""
    while len(partials) > 1:
        nxt, fut = [], []
        for i in range(0, len(partials), MAX_INPUTS):
            group = partials[i:i + MAX_INPUTS]
            if len(group) == 1:
                nxt.append(group[0])
                continue
            y = rt.empty((max(n, 1),), dt.STORAGE[t])
            code = "x0 " + " ".join(f"x{k} {op}" for k in range(1, len(group)))
            text = f"d={max(n, 1)} {code}"
            if on.startswith("gpu") or cuda_programs():
                name = dt.STORAGE[t].name
                cuda = _cuda_fused(rt, text, [name] * len(group), name)
                size = max(n, 1)
                fut.append(cuda(size, y, *group, grid=(min(4096, -(-size // 256)),), block=(256,), on=on,
                                name=label + ",combine"))
            else:
                fut.append(rt._submit(rt.kernel(f"fused{len(group)}"), (y, *group, text), on, label + ",combine"))
            nxt.append(y)
        partials, futures = nxt, futures + fut
    out = Tiled(shape, t, rt, [], [0], futures, label)
    single = _single(partials[0], shape, t, rt)
    out.tiles, out.bounds = single.tiles, single.bounds
    return out


def _single(buffer: Any, shape: tuple[int, ...], t: np.dtype, rt: ferry.Runtime) -> Tiled:
    """One buffer holding a whole (small) result, as a Tiled of one tile."""
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return Tiled(shape, t, rt, [], [0])
    return Tiled(shape, t, rt, [buffer], [0, shape[0] if shape else 1])


def _identity(shape: tuple[int, ...], t: np.dtype, fold: str | None, rt: ferry.Runtime) -> Tiled:
    """What folding nothing gives (sum 0, prod 1); an empty elementwise result."""
    if int(np.prod(shape, dtype=np.int64)) == 0 or fold is None:
        return Tiled(shape, t, rt, [], [0])
    if fold in ("min", "max") and t == dt.bool_:  # all() of nothing is True, any() of nothing False
        return materialize(Const(fold == "min", t, shape))
    if fold in ("min", "max"):
        raise ValueError(f"zero-size array to reduction operation {'minimum' if fold == 'min' else 'maximum'} "
                         "which has no identity")
    return materialize(Const(1 if fold == "mul" else 0, t, shape))


# ---- reductions ----

def _reduce(node: Reduce) -> Tiled:
    x = node.x
    axes = tuple(sorted(node.axes))
    t = node.dtype
    value = _elementwise_or_leaf(x, (node.fold, axes, t))
    kept = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if node.keepdims:
        reshaped = value.reshaped(node.shape)
        assert reshaped is not None  # inserting 1s never moves a tile boundary off a slice
        return reshaped
    assert value.shape == kept
    return value


def _elementwise_or_leaf(x: Node, fold: tuple[str, tuple[int, ...], np.dtype]) -> Tiled:
    if isinstance(x, Map) and x.value is None:
        return _elementwise(x, fold)
    # A leaf (an array, a matmul's result ...): a program that only loads it.
    return _elementwise(Map("cast", [x], x.dtype), fold)


# ---- matmul ----

def _matmul(node: MatMul) -> Tiled:
    a, b = materialize(node.a), materialize(node.b)
    rt = _rt_of([a, b])
    t = node.dtype
    if a.size == 0 or b.size == 0 or node.size == 0:
        return materialize(Const(0, t, node.shape)) if node.size else Tiled(node.shape, t, rt, [], [0])
    on = placement() or ""
    if node.trans_a:
        return _matmul_trans_a(a, b, node, rt, on)
    if node.trans_b:
        a = matrix_tiles(a, rt)
        b = matrix_tiles(whole(b, rt), rt)
        out = Tiled.allocate(node.shape, t, rt, a.bounds)
        out.futures = [rt.gemm(at, b.tiles[0], ct, trans_b=True, on=on, name="fnp:matmul")
                       for at, ct in zip(a.tiles, out.tiles)]
        out.label = "fnp:matmul"
        return out
    if len(a.shape) == 2 and len(b.shape) == 2:
        a = matrix_tiles(a, rt)
        b = matrix_tiles(whole(b, rt), rt)
        out = Tiled.allocate(node.shape, t, rt, a.bounds)
        out.futures = [rt.gemm(at, b.tiles[0], ct, on=on, name="fnp:matmul")
                       for at, ct in zip(a.tiles, out.tiles)]
        out.label = "fnp:matmul"
        return out
    # Batched: (batch, m, k) @ (batch, k, n), tiles along the batch.
    a = matrix_tiles(a, rt)
    b = matrix_tiles(_aligned(b, a.bounds, rt), rt)
    m, k, n = a.shape[1], a.shape[2], b.shape[2]
    out = Tiled.allocate(node.shape, t, rt, a.bounds)
    futures = []
    for at, bt, ct in zip(a.tiles, b.tiles, out.tiles):
        ag, bg, cg = at.tiles(m, k), bt.tiles(k, n), ct.tiles(m, n)
        for i in range(len(ag)):
            futures.append(rt.gemm(ag[i][0], bg[i][0], cg[i][0], on=on, name="fnp:matmul"))
    out.futures = futures
    out.label = "fnp:matmul"
    return out


def _matmul_trans_a(a: Tiled, b: Tiled, node: MatMul, rt: ferry.Runtime, on: str) -> Tiled:
    """a.T @ b with a and b (k x m, k x n) cut alike along k: the sum over
    tiles of a_i.T @ b_i, gemm after gemm into one output (beta = 1 after the
    first), each reading its tile of a with the transpose flag."""
    a = matrix_tiles(a, rt)
    b = matrix_tiles(_aligned(b, a.bounds, rt), rt)
    out = Tiled.allocate(node.shape, node.dtype, rt, [0, node.shape[0]])
    out.futures = [rt.gemm(at, bt, out.tiles[0], beta=1.0 if i else 0.0, trans_a=True, on=on, name="fnp:matmul")
                   for i, (at, bt) in enumerate(zip(a.tiles, b.tiles))]
    out.label = "fnp:matmul"
    return out


def matrix_tiles(v: Tiled, rt: ferry.Runtime) -> Tiled:
    """Tiles whose Ferry shape is rows x last axis, as gemm reads them (a
    reshaped array's tiles may have another: those are copied)."""
    if all(tuple(t.shape) == buffer_shape(v.shape, hi - lo) for t, lo, hi in zip(v.tiles, v.bounds, v.bounds[1:])):
        return v
    return _retile(v, v.bounds, rt)


# ---- reshape and host operations ----

def _reshape(node: Reshape) -> Tiled:
    x = materialize(node.x)
    # Fused programs read tiles flat, so the same tiles serve; gemm fixes a
    # tile's own shape where it needs to (matrix_tiles).
    same = x.reshaped(node.shape)
    if same is not None:
        return same
    rt = x.rt
    out = Tiled.allocate(node.shape, node.dtype, rt)

    def copy(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> None:
        flat = np.concatenate([a.reshape(-1) for a in ins]) if len(ins) > 1 else ins[0].reshape(-1)
        pos = 0
        for o in outs:
            n = o.size
            o.reshape(-1)[:] = flat[pos:pos + n]
            pos += n

    if x.tiles:
        out.futures = [host_task(rt, x.tiles, out.tiles, copy, "fnp.reshape")]
    return out


def _host(node: Host) -> Tiled:
    values = [materialize(a) for a in node.args]
    rt = _rt_of(values)
    out = Tiled.allocate(node.shape, node.dtype, rt)
    if not out.tiles:
        return out
    shapes = [(v.shape, v.dtype, len(v.tiles)) for v in values]
    fn = node.fn

    def run(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> None:
        arrays, pos = [], 0
        for shape, t, count in shapes:
            parts = [a.reshape(-1) for a in ins[pos:pos + count]]
            pos += count
            flat = np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else np.zeros(0, dt.STORAGE[t]))
            arrays.append(flat.reshape(shape))
        result = np.asarray(fn(*arrays), dtype=node.dtype).reshape(-1)
        p = 0
        for o in outs:
            n = o.size
            o.reshape(-1)[:] = result[p:p + n]
            p += n

    inputs = [t for v in values for t in v.tiles]
    out.futures = [host_task(rt, inputs, out.tiles, run, f"fnp.{node.name}",
                             f"fnp.{node.name}{describe_origin(node.origin)}")]
    out.label = f"fnp.{node.name}"
    return out
