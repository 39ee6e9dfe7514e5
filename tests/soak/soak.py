"""The soak (issue 35): three loopback ferryd, four clients, the mixed DAG in
a loop, a fault every few minutes, for as long as asked; then four checks.

    python tests/soak/soak.py --build BUILD --minutes 10 [--out DIR] [--plot DIR]

The pool: three ferryd on 127.0.0.1 (--memory-limit 640MiB, room for the four
clients' data: a host's "no room" is not an injected fault; --metrics on a
port of each), clients signing in with keys of their own, so that each
client is a series of ferry_client_tasks_total{client=NAME} of its own
(a token client is labelled by its host name only, and all four would share
one). The clients, until the deadline, all under remote_policy="prefer" with
a liveness limit of --liveness-ms:
  cpp0   soak_client: the chaos harness's mixed DAG, one Runtime for the soak
  cpp1   soak_client --fresh-runtime: the same, a new Runtime each iteration
  py     soak_py_client.py: a ferry.numpy pipeline and tasks on="remote"
  nb     the same inside a Jupyter kernel (soak_notebook.py runs
         soak_notebook.ipynb with nbclient); the kernel is sampled
Each iteration is checked by the client (bit for bit against the CPU for the
DAG, exactly against NumPy for the pipeline) and reported as a JSON line.

Faults, every --fault-every seconds from then on until --quiet seconds before
the deadline, in turn: kill -9 of a host of --kill-hosts (default 1,2: host 0
lives the whole soak, stopped now and then) and, --down-s later, a new
ferryd on the same port with the same host key; SIGSTOP of a host (all three
in turn) for --stop-s (past the liveness limit), then SIGCONT. Each is logged
with its time and host (faults.csv).

Sampled every --sample-s seconds: VmRSS and the number of open fds of every
process (each ferryd incarnation apart, each client, the notebook's kernel)
into samples.csv; each host's /metrics into metrics.csv. What a process's
fds are is listed too (fds/NAME-SECONDS.txt, seconds into its life: each
fd and what it points to), at its first sample after warm-up and whenever
their count passes its highest since (20 lists at most): what a step in
fds is made of.

The checks (each can fail the soak; all are printed):
 1. right: every client iteration right, every client done with exit 0.
 2. flat: per process incarnation that lived at least warm-up + 2 windows:
    the median of its samples in the first window after its warm-up
    (--warmup-s from its own start) against the median in its last window
    (--window-s before its last sample); |change| <= --tolerance % (5) for
    RSS and for fds. Shorter lives are listed, not judged. A ferryd's RSS is
    judged without its pool (ferry_pool_bytes, scraped with each sample):
    the pool maps whole 64 MiB slabs as its replicas reach a new high-water
    mark and keeps them for reuse, a step by design; the pool itself is
    checked against its bound instead, never above --memory-limit plus two
    slabs (replicas are refused past the limit; the rest is staging).
    cpp1, which opens and closes a runtime every iteration, is judged on
    its own RSS and fds taken just after each close (its lines' "rest"):
    sampled from outside, it alternates between two levels, and a window's
    median only says which one most samples fell on.
 3. metrics: for every client iteration that no fault came near (its
    [start, end] outside every fault's [begin - 1 s, end + --settle-s]) and
    every host scraped before and after it: the growth of the host's
    ferry_client_tasks_total{client=NAME} equals the tasks the client
    counted as run on that host (DeviceInfo::tasks_run, less the joins of
    split tasks). And at every scrape, each host's ferry_tasks_total equals
    the sum of its per-client series.
 4. logs: every line at warning level or above (spdlog's [warning],
    [error], [critical]) and every Traceback in any process's output is
    explained by a fault: it is stamped within [begin - 1 s, end +
    --explain-s] of a fault and names that fault's host (its address or
    port) or no host at all, or it is the faulted ferryd's own. Any other is
    printed and fails the soak.

Outputs in --out: samples.csv, metrics.csv, faults.csv, fds/, iterations.jsonl
(all clients), each process's log, summary.md (the tables); with --plot DIR,
rss.png and fds.png (fault times marked).
"""

from __future__ import annotations

import argparse
import atexit
import csv
import ctypes
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENTS = ("cpp0", "cpp1", "py", "nb")

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: a child outlives no driver, however the driver ends
    # (a CI timeout's SIGKILL included). Spawned from the main thread only:
    # the signal follows the thread that spawned.
    _libc.prctl(1, signal.SIGKILL)


def free_port(taken: set[int]) -> int:
    """A free port below Linux's ephemeral range, so a restarted ferryd finds it free."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


@dataclass
class Proc:
    """One process the soak samples: a ferryd incarnation, a client, the kernel."""
    name: str          # ferryd0#1, cpp0, nb-kernel ...
    role: str          # ferryd, client, kernel, runner
    pid: int
    start: float
    log: Path | None = None
    popen: subprocess.Popen | None = None
    end: float | None = None
    host: int | None = None  # a ferryd's host index


@dataclass
class Fault:
    kind: str       # kill, stop
    host: int
    address: str
    port: int
    begin: float
    end: float = 0.0  # restarted / resumed
    pid: int = 0


@dataclass
class Soak:
    args: argparse.Namespace
    out: Path
    procs: list[Proc] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop_sampling: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)

    # --- the pool -----------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        self.ferryd = Path(a.build) / "tools" / "ferryd"
        self.ferry = Path(a.build) / "tools" / "ferry"
        self.soak_client = Path(a.build) / "tests" / "soak" / "soak_client"
        for p in (self.ferryd, self.ferry, self.soak_client):
            if not p.exists():
                raise SystemExit(f"soak: {p} not found (build the targets ferryd, ferry_cli, soak_client)")
        # A copy of a build (the hour runs from one, so that rebuilding does not
        # change its programs): BUILD/lib holds the libraries, for the C++
        # programs only (the Python clients' ferry has its own).
        self.cpp_env = dict(os.environ)
        if (Path(a.build) / "lib").is_dir():
            self.cpp_env["LD_LIBRARY_PATH"] = str(Path(a.build).resolve() / "lib")
        keys = self.out / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        lines = []
        for c in CLIENTS:
            subprocess.run([self.ferry, "keygen", keys / f"id_{c}", "--name", c], check=True, capture_output=True,
                           env=self.cpp_env)
            lines.append((keys / f"id_{c}.pub").read_text().strip())
        self.authorized = keys / "authorized_keys"
        self.authorized.write_text("\n".join(lines) + "\n")
        taken: set[int] = set()
        self.ports = [free_port(taken) for _ in range(3)]
        self.metrics_ports = [free_port(taken) for _ in range(3)]
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]
        self.incarnation = [0, 0, 0]
        self.hosts: list[Proc | None] = [None, None, None]
        for i in range(3):
            self.start_host(i)

    def start_host(self, i: int) -> None:
        self.incarnation[i] += 1
        name = f"ferryd{i}#{self.incarnation[i]}"
        log = self.out / f"{name.replace('#', '.')}.log"
        port_file = self.out / f"ferryd{i}.port"
        port_file.unlink(missing_ok=True)
        cmd = [str(self.ferryd), "--listen", self.addresses[i], "--authorized-keys", str(self.authorized),
               "--host-key", str(self.out / "keys" / f"host{i}"), "--gpus", "none", "--workers", "2",
               "--memory-limit", self.args.memory_limit, "--metrics", f"127.0.0.1:{self.metrics_ports[i]}",
               "--port-file", str(port_file)]
        # The old one's socket may linger a moment: retry as a supervisor would.
        for attempt in range(40):
            with open(log, "ab") as f:
                p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.cpp_env,
                                     preexec_fn=_die_with_parent)
            deadline = time.time() + 20
            while time.time() < deadline and p.poll() is None and not port_file.exists():
                time.sleep(0.02)
            if p.poll() is None and port_file.exists():
                break
            if p.poll() is None:
                p.kill()
                p.wait()
            time.sleep(0.25)
        else:
            raise RuntimeError(f"soak: {name} did not start; see {log}")
        proc = Proc(name, "ferryd", p.pid, time.time(), log, p, host=i)
        with self.lock:
            self.procs.append(proc)
            self.hosts[i] = proc

    # --- the clients ----------------------------------------------------------
    def start_clients(self) -> None:
        a = self.args
        self.deadline = time.time() + a.minutes * 60
        keys = self.out / "keys"
        common = ["--remotes", ",".join(self.addresses), "--metrics", ",".join(map(str, self.metrics_ports)),
                  "--deadline", f"{self.deadline:.3f}", "--liveness-ms", str(a.liveness_ms),
                  "--pause-ms", str(a.pause_ms)]
        def spawn(name: str, role: str, cmd: list[str], extra_env: dict[str, str] | None = None) -> Proc:
            log = self.out / f"{name}.log"
            env = {**(self.cpp_env if role == "client" and cmd[0] == str(self.soak_client) else os.environ),
                   **(extra_env or {})}
            env.pop("FERRY_REMOTES", None)
            with open(log, "wb") as f:
                p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
            proc = Proc(name, role, p.pid, time.time(), log, p)
            with self.lock:
                self.procs.append(proc)
            return proc

        def own(c: str) -> list[str]:
            return ["--name", c, "--identity", str(keys / f"id_{c}"), "--known-hosts", str(keys / f"known_hosts_{c}"),
                    "--out", str(self.out / f"{c}.jsonl")]

        spawn("cpp0", "client", [str(self.soak_client), *own("cpp0"), *common])
        spawn("cpp1", "client", [str(self.soak_client), *own("cpp1"), *common, "--fresh-runtime"])
        spawn("py", "client", [a.python, str(HERE / "soak_py_client.py"), *own("py"), *common])
        nb_args = " ".join(own("nb") + common)
        spawn("nb-runner", "runner", [a.python, str(HERE / "soak_notebook.py"), str(HERE / "soak_notebook.ipynb")],
              {"FERRY_SOAK_DIR": str(HERE), "FERRY_SOAK_ARGS": nb_args})
        self.kernel_found = False

    def find_kernel(self) -> None:
        """The notebook's kernel, once its first line names its pid."""
        if self.kernel_found:
            return
        path = self.out / "nb.jsonl"
        if not path.exists():
            return
        with open(path) as f:
            first = f.readline()
        if not first.endswith("\n"):
            return
        pid = json.loads(first).get("pid")
        if pid:
            with self.lock:
                self.procs.append(Proc("nb", "kernel", int(pid), time.time()))
            self.kernel_found = True

    # --- faults ---------------------------------------------------------------
    def inject(self, k: int) -> None:
        a = self.args
        kill_hosts = [int(h) for h in a.kill_hosts.split(",") if h != ""]
        kind = a.faults[k % len(a.faults)]
        n = k // len(a.faults)
        host = kill_hosts[n % len(kill_hosts)] if kind == "kill" else n % 3
        proc = self.hosts[host]
        assert proc is not None and proc.popen is not None
        f = Fault(kind, host, self.addresses[host], self.ports[host], time.time(), pid=proc.pid)
        self.note(f"fault {k}: {kind} {proc.name} ({f.address}, pid {proc.pid})")
        if kind == "kill":
            proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait()
            proc.end = time.time()
            time.sleep(a.down_s)
            self.start_host(host)
            self.note(f"fault {k}: {self.hosts[host].name} started on {f.address} (pid {self.hosts[host].pid})")
        else:
            proc.popen.send_signal(signal.SIGSTOP)
            time.sleep(a.stop_s)
            proc.popen.send_signal(signal.SIGCONT)
            self.note(f"fault {k}: {proc.name} resumed")
        f.end = time.time()
        with self.lock:
            self.faults.append(f)

    def note(self, text: str) -> None:
        stamp = dt.datetime.now().strftime("%H:%M:%S")
        print(f"[{stamp}] soak: {text}", flush=True)

    # --- sampling -------------------------------------------------------------
    def sampler(self) -> None:
        samples = open(self.out / "samples.csv", "w", newline="")
        metrics = open(self.out / "metrics.csv", "w", newline="")
        sw, mw = csv.writer(samples), csv.writer(metrics)
        sw.writerow(["t", "process", "role", "pid", "rss_kib", "fds"])
        mw.writerow(["t", "host", "incarnation", "series", "value"])
        fd_high: dict[str, int] = {}
        fd_lists: dict[str, int] = {}
        next_t = time.time()
        while not self.stop_sampling.is_set():
            self.find_kernel()
            now = time.time()
            with self.lock:
                procs = [p for p in self.procs if p.end is None]
            for p in procs:
                rss, fds = read_proc(p.pid)
                if rss is None:
                    if p.role in ("kernel",):
                        p.end = now
                    continue
                sw.writerow([f"{now:.3f}", p.name, p.role, p.pid, rss, fds])
                warm = now - p.start >= self.args.warmup_s
                if warm and fds > fd_high.get(p.name, -1) and fd_lists.get(p.name, 0) < 20:
                    list_fds(self.out / "fds" / f"{p.name}-{now - p.start:.0f}.txt", p.pid)
                    fd_lists[p.name] = fd_lists.get(p.name, 0) + 1
                if warm:
                    fd_high[p.name] = max(fds, fd_high.get(p.name, -1))
            samples.flush()
            for i in range(3):
                host = self.hosts[i]
                text = scrape(self.metrics_ports[i], timeout=1.0)
                if text is None or host is None:
                    continue
                for series, value in parse_metrics(text):
                    mw.writerow([f"{now:.3f}", i, host.name, series, value])
            metrics.flush()
            next_t += self.args.sample_s
            self.stop_sampling.wait(max(0.0, next_t - time.time()))
        samples.close()
        metrics.close()

    # --- the run --------------------------------------------------------------
    def run(self) -> int:
        a = self.args
        self.note(f"{a.minutes} minutes, a fault every {a.fault_every_s} s, results in {self.out}")
        self.setup()
        self.start_clients()
        self.note(f"pool {', '.join(self.addresses)} (metrics on {', '.join(map(str, self.metrics_ports))}); "
                  f"clients {', '.join(CLIENTS)} until {dt.datetime.fromtimestamp(self.deadline):%H:%M:%S}")
        sampling = threading.Thread(target=self.sampler, daemon=True)
        sampling.start()
        start = time.time()
        k = 0
        while True:
            at = start + (k + 1) * a.fault_every_s
            if at > self.deadline - a.quiet_s:
                break
            while time.time() < at:
                time.sleep(min(1.0, at - time.time()))
                self.check_alive()
            self.inject(k)
            k += 1
        # The clients end at the deadline, each after its iteration.
        for p in [p for p in self.procs if p.role in ("client", "runner")]:
            try:
                rc = p.popen.wait(timeout=max(0.0, self.deadline - time.time()) + a.grace_s)
            except subprocess.TimeoutExpired:
                self.failures.append(f"{p.name} did not end within {a.grace_s} s of the deadline: killed")
                p.popen.kill()
                rc = p.popen.wait()
            p.end = time.time()
            if rc != 0:
                self.failures.append(f"{p.name} exited with {rc} (its log: {p.log})")
        time.sleep(a.sample_s)  # one more sample and scrape of the pool after the clients
        self.stop_sampling.set()
        sampling.join()
        for h in self.hosts:
            if h and h.popen and h.popen.poll() is None:
                h.popen.send_signal(signal.SIGTERM)
                try:
                    h.popen.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    h.popen.kill()
                h.end = time.time()
        self.check_alive(final=True)
        return self.analyse()

    def check_alive(self, final: bool = False) -> None:
        """A ferryd that died by itself fails the soak."""
        with self.lock:
            for h in self.hosts:
                if h and h.end is None and h.popen.poll() is not None:
                    h.end = time.time()
                    self.failures.append(f"{h.name} died by itself ({h.popen.returncode}); its log: {h.log}")

    def kill_all(self) -> None:
        """On any exit: nothing left behind, stopped or running."""
        for p in self.procs:
            if p.end is None or (p.popen and p.popen.poll() is None):
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(p.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass

    # --- the checks -------------------------------------------------------------
    def analyse(self) -> int:
        # What the checks need, kept first: soak_report.py DIR checks again from it.
        state = {"args": vars(self.args), "ports": self.ports, "failures": self.failures,
                 "procs": [{"name": p.name, "role": p.role, "pid": p.pid, "start": p.start, "end": p.end,
                            "host": p.host, "log": str(p.log) if p.log else None} for p in self.procs],
                 "faults": [vars(f) for f in self.faults]}
        (self.out / "state.json").write_text(json.dumps(state, indent=1))
        from soak_report import Report  # beside this file
        return Report(self).write()


def list_fds(path: Path, pid: int) -> None:
    """Each open fd of `pid` and what it points to (a socket, a shared-memory segment, a file), into `path`."""
    lines = []
    try:
        for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
            try:
                lines.append(f"{fd} -> {os.readlink(f'/proc/{pid}/fd/{fd}')}")
            except OSError:
                continue  # closed meanwhile
    except OSError:
        return  # the process ended
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def read_proc(pid: int) -> tuple[int | None, int | None]:
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), None)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None, None


def scrape(port: int, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            return r.read().decode()
    except Exception:
        return None


WATCHED = re.compile(r"^(ferry_tasks_total|ferry_client_tasks_total|ferry_clients|ferry_memory_in_use_bytes|ferry_pool_bytes|"
                     r"ferry_bytes_in_total|ferry_bytes_out_total|ferry_protocol_errors_total)\b")


def parse_metrics(text: str):
    for line in text.splitlines():
        if WATCHED.match(line):
            series, _, value = line.rpartition(" ")
            yield series, value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="the CMake build tree (ferryd, ferry, soak_client)")
    p.add_argument("--python", default=sys.executable, help="Python with ferry, numpy, nbclient (default: this one)")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--out", help="results folder (default: a new one under /tmp)")
    p.add_argument("--plot", help="write rss.png and fds.png here")
    p.add_argument("--fault-every-s", type=float, default=90)
    p.add_argument("--faults", default="kill,stop", type=lambda s: s.split(","))
    p.add_argument("--kill-hosts", default="1,2", help="hosts that are killed (the others only stopped)")
    p.add_argument("--down-s", type=float, default=5, help="a killed host's time down before its restart")
    p.add_argument("--stop-s", type=float, default=3, help="how long a host stays stopped")
    p.add_argument("--quiet-s", type=float, default=60, help="no fault in the soak's last seconds")
    p.add_argument("--liveness-ms", type=int, default=1000)
    p.add_argument("--memory-limit", default="640MiB",
                   help="each ferryd's (four clients' replicas fit: a full host is not a fault)")
    p.add_argument("--pause-ms", type=int, default=100, help="each client's pause between iterations")
    p.add_argument("--sample-s", type=float, default=5)
    p.add_argument("--warmup-s", type=float, default=120, help="from each process's start")
    p.add_argument("--window-s", type=float, default=120)
    p.add_argument("--tolerance", type=float, default=5, help="percent")
    p.add_argument("--settle-s", type=float, default=15, help="after a fault, before iterations count for metrics")
    p.add_argument("--explain-s", type=float, default=30, help="after a fault, lines it explains")
    p.add_argument("--grace-s", type=float, default=120, help="after the deadline, for clients to end")
    return p


def main() -> int:
    args = parser().parse_args()
    out = Path(args.out) if args.out else Path(f"/tmp/ferry-soak-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    args.python = os.path.abspath(args.python) if os.sep in args.python else shutil.which(args.python) or args.python
    check = subprocess.run([args.python, "-c", "import ferry, ferry.numpy, nbclient, ipykernel"], capture_output=True,
                           text=True)
    if check.returncode != 0:
        print(f"soak: skipped: {args.python} cannot import ferry, nbclient and ipykernel (scripts/python-env.sh "
              f"installs them):\n{check.stderr.strip()}")
        return 77
    soak = Soak(args, out)
    atexit.register(soak.kill_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signo, _: sys.exit(128 + signo))
    sys.path.insert(0, str(HERE))
    return soak.run()


if __name__ == "__main__":
    sys.exit(main())
