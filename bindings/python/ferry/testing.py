"""Helpers for examples and tests: a real ferryd on loopback.

    with ferry.testing.local_server() as server:
        with ferry.Runtime(remotes=[server.address], token=server.token) as rt:
            ...

or, in a notebook, server = ferry.testing.local_server() ... server.close().

Keys instead of the token (docs/security.md):

    key = ferry.testing.keygen(tmp / "id")                 # `ferry keygen`
    with ferry.testing.local_server(authorized_keys=[key.public_line],
                                    host_key=tmp / "host_key") as server:
        # server.host_key_line: the line to pin it with in known_hosts
        with ferry.Runtime(remotes=[server.address], identity=key.path) as rt:
            ...
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


class Key:
    """A client key made by keygen(): the private key's path and its public line."""

    def __init__(self, path: Path, public_line: str) -> None:
        self.path = path
        self.public_line = public_line

    def __repr__(self) -> str:
        return f"Key({str(self.path)!r})"


def keygen(path: str | os.PathLike[str], name: str = "") -> Key:
    """Makes a client key with `ferry keygen PATH [--name NAME]` (private key
    at PATH, mode 600; the public line at PATH.pub, for ferryd's
    --authorized-keys)."""
    path = Path(path)
    command = [str(program("ferry")), "keygen", str(path)] + (["--name", name] if name else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise FerryError(f"ferry keygen {path} failed: {done.stderr.strip() or done.stdout.strip()}")
    return Key(path, Path(str(path) + ".pub").read_text().strip())


class LocalServer:
    """A ferryd started by local_server(): where it listens and how to log in.

    Stop it with close(), or use it as a context manager; one never closed
    is stopped when Python exits."""

    def __init__(self, address: str, token: str, token_file: Path, log_file: Path, process: subprocess.Popen,
                 scratch: Path, host_key: Path | None = None) -> None:
        self.address = address
        self.token = token
        self.token_file = token_file
        self.log_file = log_file
        self.process = process
        self.host_key = host_key
        self._finalizer = weakref.finalize(self, _stop, process, scratch)

    @property
    def host_key_line(self) -> str:
        """The known_hosts line that pins this ferryd: its address and the
        public line ferryd wrote to HOST_KEY.pub (local_server(host_key=...))."""
        if self.host_key is None:
            raise FerryError("this ferryd was started without host_key=: it made a new host key, in no file")
        return f"{self.address} {Path(str(self.host_key) + '.pub').read_text().strip()}"

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
    authorized_keys: Sequence[str] | None = None,
    host_key: str | os.PathLike[str] | None = None,
) -> LocalServer:
    """Starts ferryd on 127.0.0.1 (a free port, a fresh token) and returns
    once it listens. Use it in a with block, or keep it (a notebook) and call
    close() when done.

    authorized_keys: public key lines (Key.public_line) ferryd admits, as its
    --authorized-keys file; the token is accepted too. host_key: ferryd's
    --host-key file (made on first start; ferryd writes HOST_KEY.pub), so
    that clients can pin it (LocalServer.host_key_line)."""
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
    if authorized_keys is not None:
        keys_file = scratch / "authorized_keys"
        keys_file.write_text("".join(line.strip() + "\n" for line in authorized_keys))
        keys_file.chmod(0o600)
        command += ["--authorized-keys", str(keys_file)]
    if host_key is not None:
        host_key = Path(host_key)
        command += ["--host-key", str(host_key)]
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
    return LocalServer(f"127.0.0.1:{port}", token, token_file, log_file, process, scratch, host_key)
