"""A Python soak client (tests/soak/soak.py runs it as a script and inside a
Jupyter kernel): a ferry.numpy pipeline and tasks pinned to the pool
(`rt.submit(..., on="remote")`) in a loop until a deadline, on one Runtime
under remote_policy="prefer". Every result is checked against NumPy exactly:
the inputs are small integers held as floats, so every sum and product is
exact whatever order the tiles and hosts add them in.

Each iteration writes one JSON line, as soak_client does (the driver reads
both alike): its own per-device task counts (rt.devices()'s tasks_run,
differenced), and this client's ferry_client_tasks_total on every host's
/metrics just before and after the iteration (null: the scrape failed).

    python soak_py_client.py --name py --remotes A,B,C --metrics P,Q,R \\
        --identity KEY --known-hosts FILE --deadline UNIX_SECONDS [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request

import numpy as np

import ferry
import ferry.numpy as fnp


def client_tasks(port: int, name: str) -> int | None:
    """This client's ferry_client_tasks_total on one host, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except Exception:  # down, or stopped (the read gave up)
        return None
    series = f'ferry_client_tasks_total{{client="{name}"}} '
    for line in text.splitlines():
        if line.startswith(series):
            return int(float(line[len(series):]))
    return 0  # nothing counted for it yet


def tasks_run(rt: ferry.Runtime) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in rt.devices():
        name = d["name"].removeprefix("remote:")
        out[name] = out.get(name, 0) + d["tasks_run"]
    return out


def one_iteration(rt: ferry.Runtime, rng: np.random.Generator) -> tuple[int, str]:
    """Runs the pipeline once; (tasks submitted, "" or what was wrong)."""
    # ferry.numpy: a matmul per tile, a fused elementwise pass, reductions.
    x = rng.integers(-3, 4, size=(8192, 96)).astype(np.float64)  # 6 MiB: two tiles
    w = rng.integers(-3, 4, size=(96, 16)).astype(np.float64)
    with fnp.using(rt):
        fx, fw = fnp.asarray(x), fnp.asarray(w)
        score = float(fnp.maximum(fx @ fw, 0).sum())
        cols = np.asarray(fnp.sum(fx * 2.0 - 1.0, axis=0))
    want_score = float(np.maximum(x @ w, 0).sum())
    want_cols = np.sum(x * 2.0 - 1.0, axis=0)
    if score != want_score:
        return 0, f"ferry.numpy score {score} != NumPy's {want_score}"
    if not np.array_equal(cols, want_cols):
        return 0, "ferry.numpy column sums differ from NumPy's"

    # Tasks pinned to the pool: a chain on one array, then its sum.
    a = rng.integers(-8, 9, size=1 << 15).astype(np.float64)
    b = rng.integers(-8, 9, size=1 << 15).astype(np.float64)
    fa, fb = rt.array(a), rt.array(b)
    futures = [rt.submit("axpy", fa, fb, 2.0, on="remote"), rt.submit("scal", fb, 0.5, on="remote")]
    total = rt.submit("sum", fb, on="remote")
    futures.append(total)
    got = total.result()
    rt.wait()
    want = (b + 2.0 * a) * 0.5
    if got != float(want.sum()):
        return len(futures), f"remote sum {got} != NumPy's {want.sum()}"
    if not np.array_equal(fb.numpy(), want):
        return len(futures), "remote chain's array differs from NumPy's"
    return len(futures), ""


def run(args: argparse.Namespace) -> int:
    out = open(args.out, "a") if args.out else sys.stdout
    remotes = args.remotes.split(",")
    ports = [int(p) for p in args.metrics.split(",")]

    def scrape() -> dict[str, int | None]:
        return {r: client_tasks(p, args.name) for r, p in zip(remotes, ports)}

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    rt = ferry.Runtime(remotes=remotes, identity=args.identity, known_hosts=args.known_hosts,
                       remote_policy="prefer", remote_liveness=args.liveness_ms / 1000, workers=2,
                       gpus="none", persist_perf_models=False, read_environment=False)
    rng = np.random.default_rng(7)
    wrong = 0
    it = 0
    emit({"client": args.name, "pid": os.getpid(), "started": time.time()})
    while time.time() < args.deadline:
        ran_before = tasks_run(rt)
        t0 = time.time()
        before = scrape()
        try:
            tasks, why = one_iteration(rt, rng)
        except Exception as e:  # a failure is a wrong iteration, not the end of the soak
            tasks, why = 0, f"raised {type(e).__name__}: {e}"
        after = scrape()
        t1 = time.time()
        ran_after = tasks_run(rt)
        ran = {d: n - ran_before.get(d, 0) for d, n in ran_after.items()}
        record = {"client": args.name, "iter": it, "t0": round(t0, 3), "t1": round(t1, 3), "ok": not why,
                  "tasks": tasks, "ran": ran, "before": before, "after": after}
        if why:
            record["why"] = why
            wrong += 1
        emit(record)
        it += 1
        time.sleep(args.pause_ms / 1000)
    rt.close()
    emit({"client": args.name, "done": True, "wrong": wrong})
    return 0 if wrong == 0 else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="the key's name: this client's client= label")
    p.add_argument("--remotes", required=True)
    p.add_argument("--metrics", required=True, help="each host's metrics port, in --remotes' order")
    p.add_argument("--identity", required=True)
    p.add_argument("--known-hosts", required=True)
    p.add_argument("--deadline", type=float, required=True, help="UNIX seconds")
    p.add_argument("--liveness-ms", type=int, default=1000)
    p.add_argument("--pause-ms", type=int, default=0)
    p.add_argument("--out")
    return p


if __name__ == "__main__":
    sys.exit(run(parser().parse_args()))
