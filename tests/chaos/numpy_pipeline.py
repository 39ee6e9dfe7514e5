"""The chaos harness's ferry.numpy part: a pipeline of tiled NumPy code
(fused elementwise programs, a matmul per tile, reductions) run on the pool
while chaos_test injects its faults, checked bit for bit against the same
pipeline on this process's CPU alone.

chaos_test starts it once per pool and talks to it through stdin/stdout,
one line each way per run, so that the pipeline runs beside the mixed DAG
and meets the same fault. It says "connected" before the run starts: the
faults come once both clients are connected (a host killed while a client's
UCX endpoint to it is still wiring up aborts the client inside UCX 1.13,
docs/protocol.md):

    in:  "run"                       out: "connected" (the pool dialled),
                                          then "ok SECONDS TASKS_ON_THE_POOL"
                                          or "wrong WHAT" / "error WHAT"
    in:  "quit" (or end of input)

Arguments: --remotes A,B,C --token-file F [--liveness S]. It prints "ready"
once the CPU reference is computed.
"""

import argparse
import os
import sys
import time

import numpy as np

import ferry
import ferry.numpy as fnp

# 64 KiB tiles: the 1 MiB input is cut into 16, so the pipeline is a few
# dozen tasks that the scheduler spreads over the pool.
TILE_BYTES = 64 << 10


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(35)
    return rng.standard_normal((512, 256)), rng.standard_normal((256, 64))


def pipeline(rt: ferry.Runtime, on: str) -> list[np.ndarray]:
    """The pipeline's outputs, as NumPy arrays."""
    a, w = inputs()
    with fnp.using(rt, on=on):
        x = fnp.asarray(a)
        y = fnp.tanh(x * 0.5 + 1.0) - fnp.exp(-fnp.abs(x))  # one fused program per tile
        z = y @ fnp.asarray(w)  # a gemm per tile of y
        column_energy = (z * z).sum(axis=0)
        positive_mean = fnp.maximum(z, 0.0).mean(axis=1)
        return [o.to_numpy() for o in (z, column_energy, positive_mean)]


def tasks_on(rt: ferry.Runtime, address: str) -> int:
    """The tasks a host of the pool ran for this runtime (0 for one lost)."""
    try:
        return int(rt.remote_stats(address)["server_tasks"])
    except ferry.FerryError:
        return 0


def differs(got: np.ndarray, expected: np.ndarray) -> str:
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"{got.dtype}{got.shape} against {expected.dtype}{expected.shape}"
    same = got.view(np.uint8) == expected.view(np.uint8)
    if same.all():
        return ""
    bad = np.flatnonzero(got.ravel() != expected.ravel())
    first = int(bad[0]) if bad.size else 0
    return (f"{bad.size} of {expected.size} elements differ, first at {first}: "
            f"{got.ravel()[first]!r} against {expected.ravel()[first]!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remotes", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--liveness", type=float, default=1.0)
    args = parser.parse_args()
    # The answers get stdout to themselves: UCX writes its own log lines
    # to fd 1, which from here on is stderr.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    fnp.set_options(tile_bytes=TILE_BYTES)

    with ferry.Runtime(workers=2, gpus="none", persist_perf_models=False, read_environment=False) as cpu:
        expected = pipeline(cpu, "cpu")
    print("ready", file=answers)

    for line in sys.stdin:
        if line.strip() != "run":
            break
        start = time.monotonic()
        connected = answered = False
        try:
            with ferry.Runtime(args.remotes.split(","), workers=2, gpus="none", persist_perf_models=False,
                               read_environment=False, token_file=args.token_file, remote_policy="prefer",
                               remote_liveness=args.liveness) as rt:
                print("connected", file=answers)
                connected = True
                got = pipeline(rt, "remote")
                on_hosts = sum(tasks_on(rt, a) for a in args.remotes.split(","))
                # Answered before the runtime closes: the run's time is its
                # work's, as the mixed DAG's is. Closing beside a host that is
                # still stopped waits for its endpoints up to the worker's
                # close deadline (2 s), which is not the pipeline's.
                seconds = time.monotonic() - start
                wrong = [f"output {i}: {d}" for i, (g, e) in enumerate(zip(got, expected)) if (d := differs(g, e))]
                print("wrong " + "; ".join(wrong) if wrong else f"ok {seconds:.3f} {on_hosts}", file=answers)
                answered = True
        except Exception as e:  # noqa: BLE001 - reported to the harness, which fails the run
            if answered:  # the runtime's close failed after the answer: the harness reads no more of this run
                print(f"numpy client: closing the runtime failed: {e}", file=sys.stderr)
                continue
            if not connected:  # the harness waits for it before it reads the answer
                print("connected", file=answers)
            print(f"error {type(e).__name__}: {' '.join(str(e).split())}", file=answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
