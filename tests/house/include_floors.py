#!/usr/bin/env python3
"""The house's floors, read from the #include lines.

A file may include from its own folder and from the floors below it, never
from one above it or beside it. Two levels are checked:

- components: common < allocator < transport < runtime < tools, bindings,
  by the public header an include names (ferry/<component>/..., and
  ferry/... for common); outside runtime/ no private header of the runtime;
- the folders of runtime/src, with runtime/kernels, in the order FLOORS
  gives, which docs/architecture.md states word for word (floor_line()).

Each fault is one line naming the file, the line and the include.

    include_floors.py [ROOT]   check the tree at ROOT (default: this checkout)
    include_floors.py --test   first prove that the check fails: a copy of
                               runtime/src with one include up a floor must be
                               refused, by name; then check this checkout
"""

import re
import shutil
import sys
import tempfile
from pathlib import Path

# runtime/src's floors, bottom first; folders on one floor may not use each other.
FLOORS = [["base", "cuda_port"], ["kernels"], ["registry", "scheduling", "cuda_source"], ["data"], ["devices"], ["core"]]
# The components, bottom first.
COMPONENTS = [["common"], ["allocator"], ["transport"], ["runtime"], ["tools", "bindings"]]
SOURCES = {".cpp", ".hpp", ".h", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def floor_line():
    return "runtime/src floors, bottom first: " + " < ".join(" ".join(f) for f in FLOORS)


def level(name, levels):
    return next((i for i, names in enumerate(levels) if name in names), -1)


def path_component(rel):
    return rel.parts[0]


def include_component(inc):
    if not inc.startswith("ferry/"):
        return None
    for name in ("allocator", "transport", "runtime"):
        if inc.startswith(f"ferry/{name}/"):
            return name
    return "runtime" if inc == "ferry/ferry.hpp" else "common"


def runtime_folder(rel):
    """The floor a file of runtime/ stands on: its folder of src/, or kernels."""
    if rel.parts[:2] == ("runtime", "src") and len(rel.parts) > 3:
        return rel.parts[2]
    if rel.parts[:2] == ("runtime", "kernels"):
        return "kernels"
    return None


def include_folder(inc, root):
    """The floor an include names: a folder of runtime/src, runtime/kernels, or none."""
    if "/" not in inc or inc.startswith("."):
        return None
    first = inc.split("/", 1)[0]
    if (root / "runtime" / "src" / first).is_dir():
        return first
    if (root / "runtime" / "kernels" / inc).exists():
        return "kernels"
    return None


def check(root):
    faults = []
    doc = root / "docs" / "architecture.md"
    if floor_line() not in doc.read_text().splitlines():
        faults.append(f"docs/architecture.md does not state the floors as this check has them: '{floor_line()}'")
    files = sorted(p for top in ("common", "allocator", "transport", "runtime", "tools", "bindings")
                   for p in (root / top).rglob("*") if p.suffix in SOURCES and p.is_file())
    for path in files:
        rel = path.relative_to(root)
        for lineno, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(text)
            if not m:
                continue
            inc = m.group(1)
            mine, theirs = path_component(rel), include_component(inc)
            if theirs and theirs != mine and level(theirs, COMPONENTS) >= level(mine, COMPONENTS):
                faults.append(f'{rel}:{lineno}: includes "{inc}": {mine} may not use {theirs} '
                              f"(components, bottom first: {' < '.join(' '.join(c) for c in COMPONENTS)})")
            theirs = include_folder(inc, root)
            if theirs is None:
                continue
            mine = runtime_folder(rel)
            if mine is None:
                if rel.parts[0] != "runtime":
                    faults.append(f'{rel}:{lineno}: includes "{inc}": outside the runtime only its public '
                                  "headers (ferry/...) may be used")
                continue
            if mine == theirs:
                continue
            if level(mine, FLOORS) < 0:
                faults.append(f"{rel}: runtime/src/{mine} is on no floor: add it to FLOORS here and to "
                              "docs/architecture.md")
            elif level(theirs, FLOORS) < 0 or level(theirs, FLOORS) >= level(mine, FLOORS):
                faults.append(f'{rel}:{lineno}: includes "{inc}": {mine} may not use {theirs} ({floor_line()})')
    for fault in faults:
        print(fault)
    if faults:
        print(f"include_floors: {len(faults)} include(s) against the floors")
    return not faults


def refuses_a_bad_copy(root):
    """A copy whose base/ includes core/ must be refused, naming the file and the include."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        shutil.copytree(root / "runtime" / "src", copy / "runtime" / "src")
        shutil.copytree(root / "runtime" / "kernels", copy / "runtime" / "kernels")
        (copy / "docs").mkdir()
        shutil.copy(root / "docs" / "architecture.md", copy / "docs")
        bad = copy / "runtime" / "src" / "base" / "task_label.hpp"
        bad.write_text(bad.read_text() + '#include "core/core.hpp"\n')
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            passed = check(copy)
        want = re.compile(r'runtime/src/base/task_label\.hpp:\d+: includes "core/core\.hpp": base may not use core')
        if passed or not want.search(out.getvalue()):
            print("include_floors: a copy with base/task_label.hpp including core/core.hpp was not refused by name:")
            print(out.getvalue())
            return False
        print("the check refuses an include up a floor:", want.search(out.getvalue()).group(0))
        return True


def main(argv):
    here = Path(__file__).resolve().parent.parent.parent
    if argv[1:2] == ["--test"]:
        return 0 if refuses_a_bad_copy(here) and check(here) else 1
    root = Path(argv[1]).resolve() if len(argv) > 1 else here
    return 0 if check(root) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
