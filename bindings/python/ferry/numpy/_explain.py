"""fnp.explain(x): the tasks an expression becomes and, once it ran, where
each ran."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ._builders import asarray
from ._engine import Program
from ._graph import Const, Data, Host, Index, Map, MatMul, Node, Reduce, Reshape


def explain(x: Any) -> str:
    lines: list[str] = []
    _walk(asarray(x)._node, lines, 0, set())
    return "\n".join(lines)


def _where(node: Node, fused: bool = False) -> str:
    v = node.value
    if v is None and fused:
        return "fused into the task above"
    if v is None or not v.futures:
        return "not run yet" if v is None else "ready"
    places = Counter()
    for f in v.futures:
        try:
            places[f.device] += 1
        except Exception:  # noqa: BLE001 - a task that failed has no device to show
            places["failed"] += 1
    return "ran on " + ", ".join(f"{d} ×{n}" for d, n in places.items())


def _tiles(node: Node) -> str:
    v = node.value
    return f"{len(v.tiles)} tile{'s' if len(v.tiles) != 1 else ''}" if v is not None else "tiles"


def _walk(node: Node, lines: list[str], depth: int, seen: set[int], fused: bool = False) -> None:
    pad = "  " * depth
    if id(node) in seen:
        lines.append(f"{pad}(shared) {node.describe()} {node.shape}")
        return
    seen.add(id(node))
    head = f"{pad}{type(node).__name__.lower()} {node.shape} {node.dtype}"
    if isinstance(node, Data):
        lines.append(f"{head}: {len(node.value.tiles)} tile(s) in Ferry memory ({_where(node)})")
        return
    if isinstance(node, (Map, Const, Index)):
        prog = Program(node, dry=True)
        code = prog.text()
        lines.append(f"{head}: one fused{len(prog.leaves)} task per tile, program `{code}` ({_where(node, fused)})")
        for child in _leaf_nodes(node):
            _walk(child, lines, depth + 1, seen)
        return
    if isinstance(node, Reduce):
        lines.append(f"{head}: fold {node.fold} over axes {list(node.axes)} inside the fused pass, then a tree "
                     f"of fused adds across tiles ({_where(node)})")
    elif isinstance(node, MatMul):
        lines.append(f"{head}: one gemm task per tile of a ({_where(node)})")
    elif isinstance(node, Host):
        lines.append(f"{head}: {node.name} as one Python task on the CPU workers ({_where(node)})")
    elif isinstance(node, Reshape):
        lines.append(f"{head}: reshape (shares tiles where their bounds allow, else a copy task)")
    for child in node.children():
        # A reduction runs the elementwise expression below it in its own pass.
        _walk(child, lines, depth + 1, seen, fused=isinstance(node, Reduce))


def _leaf_nodes(node: Node) -> list[Node]:
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Map) and (n.value is None or n is node):
            stack.extend(n.args)
        elif not isinstance(n, (Const, Index)) and n is not node:
            out.append(n)
    return out
