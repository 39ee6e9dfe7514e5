"""ferry.numpy is built in floors: a module imports only from floors below
its own, at module level or inside a function, so there is no import
circle. The floors are written here and in docs/architecture.md ("Python",
ferry.numpy's floors); this test holds the two to each other and every
module of the installed package to them."""

from __future__ import annotations

import ast
import pathlib
import re

import ferry.numpy

# Bottom to top. Modules on one floor do not import each other.
FLOORS = [
    ["_dtypes"],
    ["_graph"],
    ["_tiles"],
    ["_engine"],
    ["_array"],
    ["_builders"],
    ["_elementwise", "_manipulation", "_sets", "_explain", "_info"],
    ["_creation"],
    ["_reductions"],
    ["_products", "_indexing"],
    ["fft", "linalg", "random"],
    ["_interop"],
    ["_operators"],
    ["__init__"],
]
FLOOR = {module: level for level, modules in enumerate(FLOORS) for module in modules}
PACKAGE = "ferry.numpy"
ARCHITECTURE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def imported_modules(source: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module of the package) for every import in `source`: module
    level or in a function, relative or absolute, and __import__ /
    importlib.import_module with a literal name."""
    found = []

    def of_dotted(name: str) -> str | None:
        if name == PACKAGE:
            return "__init__"
        if name.startswith(PACKAGE + "."):
            return name[len(PACKAGE) + 1:].split(".")[0]
        return None

    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            for alias in n.names:
                if (m := of_dotted(alias.name)) is not None:
                    found.append((n.lineno, m))
        elif isinstance(n, ast.ImportFrom):
            if n.level == 1:
                if n.module:
                    found.append((n.lineno, n.module.split(".")[0]))
                else:
                    # `from . import x`: a submodule if there is one, else a name of __init__.
                    found.extend((n.lineno, a.name if a.name in modules else "__init__") for a in n.names)
            elif n.level == 0 and n.module:
                if n.module == PACKAGE:
                    found.extend((n.lineno, a.name if a.name in modules else "__init__") for a in n.names)
                elif (m := of_dotted(n.module)) is not None:
                    found.append((n.lineno, m))
        elif isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) \
                and isinstance(n.args[0].value, str):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in ("__import__", "import_module") and (m := of_dotted(n.args[0].value)) is not None:
                found.append((n.lineno, m))
    return found


def violations(sources: dict[str, str]) -> list[str]:
    modules = set(sources)
    out = []
    for module, source in sorted(sources.items()):
        if module not in FLOOR:
            out.append(f"{module}.py has no floor")
            continue
        for line, target in imported_modules(source, modules):
            if target not in FLOOR:
                out.append(f"{module}.py:{line} imports {target}, which has no floor")
            elif FLOOR[target] >= FLOOR[module]:
                out.append(f"{module}.py:{line} (floor {FLOOR[module]}) imports {target} (floor {FLOOR[target]})")
    return out


def package_sources() -> dict[str, str]:
    folder = pathlib.Path(ferry.numpy.__file__).parent
    return {p.stem: p.read_text() for p in folder.glob("*.py")}


def test_every_module_has_a_floor():
    assert sorted(package_sources()) == sorted(FLOOR)


def test_no_module_imports_from_its_floor_or_above():
    assert violations(package_sources()) == []


def test_the_check_sees_imports_hidden_in_functions_and_lambdas():
    sources = {m: "" for m in FLOOR}
    sources["_array"] = ("def f():\n    from ._operators import install\n"
                         "g = lambda: __import__('ferry.numpy._functions', fromlist=['x'])\n")
    sources["_elementwise"] = "from . import _manipulation\nfrom . import isdtype\n"
    assert violations(sources) == [
        "_array.py:2 (floor 4) imports _operators (floor 12)",
        "_array.py:3 imports _functions, which has no floor",
        "_elementwise.py:1 (floor 6) imports _manipulation (floor 6)",
        "_elementwise.py:2 (floor 6) imports __init__ (floor 13)",
    ]


def test_docs_list_the_same_floors():
    text = ARCHITECTURE.read_text()
    block = text.split("ferry.numpy's floors, top to bottom:", 1)[1].split("```")[1]
    documented = {}
    for line in block.strip().splitlines():
        level, rest = re.match(r"\s*(\d+)\s+(.*)", line).groups()
        documented[int(level)] = rest.split("—")[0].split()
    assert [documented[level] for level in range(len(FLOORS))] == FLOORS
