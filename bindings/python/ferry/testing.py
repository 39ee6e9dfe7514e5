"""Helpers for examples and tests: a real ferryd on loopback.

    with ferry.testing.local_server() as server:
        with ferry.Runtime(remotes=[server.address], token=server.token) as rt:
            ...

or, in a notebook, server = ferry.testing.local_server() ... server.close().
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Sequence

from ._bin import program
from ._errors import FerryError


class LocalServer:
    """A ferryd started by local_server(): where it listens and how to log in.

    Stop it with close(), or use it as a context manager; one never closed
    is stopped when Python exits."""

    def __init__(self, address: str, token: str, token_file: Path, log_file: Path, process: subprocess.Popen,
                 scratch: Path) -> None:
        self.address = address
        self.token = token
        self.token_file = token_file
        self.log_file = log_file
        self.process = process
        self._finalizer = weakref.finalize(self, _stop, process, scratch)

    def log(self) -> str:
        """What ferryd has logged so far."""
        return self.log_file.read_text(errors="replace")

    def close(self) -> None:
        """Stops ferryd (SIGTERM, then SIGKILL after 10 s) and removes its files."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalServer({self.address!r}{', closed' if self.closed else ''})"


def _stop(process: subprocess.Popen, scratch: Path) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(scratch, ignore_errors=True)


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


def local_server(
    *,
    workers: int = 1,
    gpus: str = "none",
    memory_limit: str | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout: float = 30.0,
) -> LocalServer:
    """Starts ferryd on 127.0.0.1 (a free port, a fresh token) and returns
    once it listens. Use it in a with block, or keep it (a notebook) and call
    close() when done."""
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
    except BaseException:
        _stop(process, scratch)
        raise
    return LocalServer(f"127.0.0.1:{port}", token, token_file, log_file, process, scratch)
