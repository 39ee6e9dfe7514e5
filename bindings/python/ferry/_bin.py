"""Console entry points for the programs shipped inside the package."""

import os
import sys
from pathlib import Path


def program(name: str) -> Path:
    """The path of a Ferry program (ferryd, ferry) inside this package."""
    path = Path(__file__).resolve().parent / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"{name} is not part of this installation of ferry (looked for {path})")
    return path


def ferryd() -> None:
    path = program("ferryd")
    os.execv(path, [str(path), *sys.argv[1:]])


def ferry() -> None:
    """The `ferry` command (info, keygen, check, models, bench-alloc)."""
    path = program("ferry")
    os.execv(path, [str(path), *sys.argv[1:]])
