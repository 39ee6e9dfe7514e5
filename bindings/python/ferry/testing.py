"""Helpers for examples and tests: a real ferryd on loopback.

    with ferry.testing.local_server() as server:
        with ferry.Runtime(remotes=[server.address], token=server.token) as rt:
            ...
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from ._bin import program
from ._errors import FerryError


@dataclass
class LocalServer:
    """A ferryd started by local_server(): where it listens and how to log in."""

    address: str
    token: str
    token_file: Path
    log_file: Path
    process: subprocess.Popen

    def log(self) -> str:
        """What ferryd has logged so far."""
        return self.log_file.read_text(errors="replace")


def find_ferryd() -> str:
    """$FERRY_FERRYD, else the ferryd inside this package, else ferryd on PATH."""
    explicit = os.environ.get("FERRY_FERRYD")
    if explicit:
        return explicit
    try:
        return str(program("ferryd"))
    except FileNotFoundError:
        pass
    found = shutil.which("ferryd")
    if found:
        return found
    raise FerryError("ferryd not found: set FERRY_FERRYD to its path or install ferry with pip (which bundles it)")


@contextlib.contextmanager
def local_server(
    *,
    workers: int = 1,
    gpus: str = "none",
    memory_limit: str | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout: float = 30.0,
) -> Iterator[LocalServer]:
    """Starts ferryd on 127.0.0.1 (a free port, a fresh token) and stops it
    (SIGTERM, then SIGKILL after 10 s) when the block ends."""
    scratch = Path(tempfile.mkdtemp(prefix="ferryd-"))
    token = secrets.token_hex(32)
    token_file = scratch / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    port_file = scratch / "port"
    log_file = scratch / "ferryd.log"
    command = [
        find_ferryd(),
        "--listen", "127.0.0.1:0",
        "--token-file", str(token_file),
        "--port-file", str(port_file),
        "--gpus", gpus,
        "--workers", str(workers),
    ]
    if memory_limit is not None:
        command += ["--memory-limit", str(memory_limit)]
    command += list(extra_args)
    with open(log_file, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + startup_timeout
        port = ""
        while not port:
            if process.poll() is not None:
                raise FerryError(
                    f"ferryd exited with status {process.returncode} before listening:\n"
                    + log_file.read_text(errors="replace")[-4000:]
                )
            if time.monotonic() > deadline:
                raise FerryError(f"ferryd did not start listening within {startup_timeout} s")
            if port_file.exists():
                port = port_file.read_text().strip()
            if not port:
                time.sleep(0.02)
        yield LocalServer(f"127.0.0.1:{port}", token, token_file, log_file, process)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(scratch, ignore_errors=True)
