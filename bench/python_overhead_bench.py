"""Python-side cost of Ferry(≤ 3 µs extra per task), and
a remote round trip against Dask distributed's client.submit on loopback.

Run through bench/run_python_bench.sh (it installs Dask into the venv).
Everything is measured in this one run, on this machine; ratios are printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ferry
import ferry.testing
from ferry import _ferry


def best(fn, reps: int) -> float:
    return min(fn() for _ in range(reps))


def per_task_overhead(n: int, reps: int, workers: int) -> None:
    with ferry.Runtime(workers=workers, persist_perf_models=False) as rt:
        k = _ferry._bench_kernels(rt)
        x = rt.zeros(1, np.float64)

        def cpp(kernel, array=None):
            return lambda: _ferry._cpp_submit_loop(rt, kernel, n, array)

        def py_empty():
            submit = rt.submit
            e = k["empty"]
            start = time.perf_counter()
            for _ in range(n):
                submit(e)
            rt.wait()
            return time.perf_counter() - start

        def py_chain():
            submit = rt.submit
            t = k["touch"]
            start = time.perf_counter()
            for _ in range(n):
                submit(t, x)
            rt.wait()
            return time.perf_counter() - start

        rows = [
            ("independent empty tasks", best(cpp(k["empty"]), reps), best(py_empty, reps)),
            ("chained tasks (readwrite one array)", best(cpp(k["touch"], x), reps), best(py_chain, reps)),
        ]
    print(f"\nPer-task cost, {n} tasks, {workers} workers, best of {reps} (µs per task, first submit to wait returning)")
    print(f"{'':38} {'C++':>8} {'Python':>8} {'extra':>8}  target ≤ 3 µs extra")
    for what, c, p in rows:
        extra = (p - c) / n * 1e6
        print(f"{what:38} {c / n * 1e6:8.3f} {p / n * 1e6:8.3f} {extra:8.3f}  {'PASS' if extra <= 3 else 'MISS'}"
              f"  (Python/C++ = {p / c:.2f}x)")


def dask_round_trips(samples: int) -> list[float]:
    from dask.distributed import Client, LocalCluster

    def noop(v):
        return v

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        client.submit(noop, 0, pure=False).result()  # warm
        dask = []
        for i in range(samples):
            start = time.perf_counter()
            client.submit(noop, i, pure=False).result()
            dask.append(time.perf_counter() - start)
    return dask


def round_trips(samples: int, with_dask: bool) -> None:
    dask = dask_round_trips(samples) if with_dask else None

    with ferry.testing.local_server(workers=1) as server, \
            ferry.Runtime(remotes=[server.address], token=server.token, workers=1, persist_perf_models=False) as rt:
        x = rt.zeros(1, np.float64)
        rt.scal(x, 1.0, on="remote").result()  # warm; x now lives on the remote
        remote = []
        for _ in range(samples):
            start = time.perf_counter()
            rt.scal(x, 1.0, on="remote").result()
            remote.append(time.perf_counter() - start)
        # The same round trip driven from C++ on this runtime, beside it.
        cpp_remote = _ferry._cpp_round_trips(rt, "scal", x, 1.0, "remote", samples)
        local = []
        for _ in range(samples):
            start = time.perf_counter()
            rt.scal(x, 1.0, on="cpu").result()
            local.append(time.perf_counter() - start)
        # A chain of tasks on one array, then one wait: remote and local.
        chain = 5000

        def chain_on(place):
            rt.scal(x, 1.0, on=place).result()  # x where the chain runs
            start = time.perf_counter()
            for _ in range(chain):
                rt.scal(x, 1.0, on=place)
            rt.wait()
            return (time.perf_counter() - start) / chain

        remote_chain = min(chain_on("remote") for _ in range(3))
        local_chain = min(chain_on("cpu") for _ in range(3))
        cpp_remote_chain = min(_ferry._cpp_chain(rt, "scal", x, 1.0, "remote", chain) for _ in range(3)) / chain

    r, c = statistics.median(remote), statistics.median(local)
    cr = statistics.median(cpp_remote)
    print(f"\nRound trip of one tiny task, median of {samples} (ms):")
    if dask:
        d = statistics.median(dask)
        print(f"  Dask distributed client.submit(f).result(), loopback worker process: {d * 1e3:8.3f}")
    print(f"  Ferry remote task (ferryd on loopback, data resident there):         {r * 1e3:8.3f}"
          + (f"   Dask/Ferry = {d / r:.1f}x" if dask else ""))
    print(f"  the same from C++ (Task::wait), same runtime:                        {cr * 1e3:8.3f}"
          f"   Python - C++ = {(r - cr) * 1e6:.1f} µs (target ≤ 10)")
    print(f"  Ferry local CPU task, for reference:                                 {c * 1e3:8.3f}")
    print(f"\nChain of {chain} tasks on one array, then wait(), best of 3 (µs per task):")
    print(f"  Python remote {remote_chain * 1e6:7.2f}   Python local {local_chain * 1e6:7.2f}"
          f"   remote/local = {remote_chain / local_chain:.2f}x (target ≤ 3)")
    print(f"  C++ remote    {cpp_remote_chain * 1e6:7.2f}   (same runtime)   Python/C++ remote = "
          f"{remote_chain / cpp_remote_chain:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--skip-dask", action="store_true")
    args = parser.parse_args()
    print(f"ferry {ferry.__version__}, numpy {np.__version__}")
    per_task_overhead(args.tasks, args.reps, args.workers)
    round_trips(args.samples, with_dask=not args.skip_dask)


if __name__ == "__main__":
    main()
