"""The soak's checks, tables and plots (soak.py's docstring defines the
checks). Also on its own, for a finished soak's folder (soak.py leaves
state.json there before it checks):

    python tests/soak/soak_report.py DIR [--plot DIR]
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import statistics
import sys
from argparse import Namespace
from collections import defaultdict
from pathlib import Path

SLAB = 64 << 20  # the host pool's growth unit (SlabPool::Options::slab_bytes)
LEVEL = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\.(\d{3})\] \[[^\]]*\] \[(warning|error|critical)\] ")
ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")


def parse_bytes(text: str) -> int:
    """'640MiB' and the like, as ferryd's --memory-limit reads them."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*", text, re.I)
    if not m:
        raise ValueError(f"not a byte count: {text!r}")
    unit = (m.group(2) or "B").upper()[0]
    return int(float(m.group(1)) * {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit])


def load_state(out: Path) -> Namespace:
    """What soak.py knew (processes, faults, ports, arguments), from state.json."""
    state = json.loads((out / "state.json").read_text())
    procs = [Namespace(**{**p, "log": Path(p["log"]) if p["log"] else None}) for p in state["procs"]]
    faults = [Namespace(**f) for f in state["faults"]]
    return Namespace(args=Namespace(**state["args"]), out=out, procs=procs, faults=faults, ports=state["ports"],
                     failures=state["failures"])


class Report:
    def __init__(self, soak) -> None:
        self.s = soak
        self.a = soak.args
        self.out = soak.out
        self.failures: list[str] = list(soak.failures)
        self.t0 = min(p.start for p in soak.procs)
        self.t_end = max((p.end or p.start) for p in soak.procs)
        self.totals: dict[str, tuple[float, float]] = {}

    # --- inputs ---------------------------------------------------------------
    def samples(self) -> dict[str, list[tuple[float, int, int]]]:
        out: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
        with open(self.out / "samples.csv") as f:
            for row in csv.DictReader(f):
                out[row["process"]].append((float(row["t"]), int(row["rss_kib"]), int(row["fds"])))
        return out

    def iterations(self) -> list[dict]:
        rows = []
        with open(self.out / "iterations.jsonl", "w") as all_rows:
            for c in ("cpp0", "cpp1", "py", "nb"):
                path = self.out / f"{c}.jsonl"
                if not path.exists():
                    self.failures.append(f"{c} wrote no iterations")
                    continue
                for line in path.read_text().splitlines():
                    r = json.loads(line)
                    all_rows.write(line + "\n")
                    rows.append(r)
        return rows

    # --- 1. right --------------------------------------------------------------
    def check_right(self, rows: list[dict]) -> dict[str, dict]:
        per: dict[str, dict] = {}
        for c in ("cpp0", "cpp1", "py", "nb"):
            its = [r for r in rows if r.get("client") == c and "iter" in r]
            done = [r for r in rows if r.get("client") == c and r.get("done")]
            wrong = [r for r in its if not r["ok"]]
            per[c] = {"iterations": len(its), "wrong": len(wrong), "tasks": sum(r["tasks"] for r in its),
                      "done": bool(done)}
            for r in wrong:
                self.failures.append(f"{c} iteration {r['iter']} wrong: {r.get('why')}")
            if not its:
                self.failures.append(f"{c}: no iteration")
            if not done:
                self.failures.append(f"{c} did not end at its deadline (no final line)")
        return per

    def pools(self) -> dict[str, dict[float, int]]:
        """Each ferryd incarnation's ferry_pool_bytes in KiB, by the time of the sample it was scraped with."""
        out: dict[str, dict[float, int]] = defaultdict(dict)
        with open(self.out / "metrics.csv") as f:
            for row in csv.DictReader(f):
                if row["series"] == "ferry_pool_bytes":
                    out[row["incarnation"]][float(row["t"])] = int(float(row["value"])) // 1024
        return out

    # --- 2. flat ----------------------------------------------------------------
    def at_rest(self, rows: list[dict]) -> dict[str, list[tuple[float, int, int]]]:
        """A fresh-runtime client's own RSS and fds just after each runtime closed (soak_client --fresh-runtime)."""
        out: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
        for r in rows:
            if "rest" in r:
                out[r["client"]].append((r["t1"], r["rest"]["rss_kib"], r["rest"]["fds"]))
        return out

    def check_flat(self, samples, rows: list[dict]) -> list[dict]:
        out = []
        warm, win, tol = self.a.warmup_s, self.a.window_s, self.a.tolerance
        pools = self.pools()
        rest = self.at_rest(rows)
        bound = parse_bytes(self.a.memory_limit) + 2 * SLAB
        for p in self.s.procs:
            # A client that opens and closes a runtime every iteration is
            # judged between runtimes: what a runtime leaves behind is there.
            s = rest.get(p.name) or samples.get(p.name, [])
            pool = pools.get(p.name, {}) if p.role == "ferryd" else {}
            pool_most = max(pool.values(), default=0) / 1024  # MiB
            if pool and s:
                # Judged without the pool, sample by sample; a sample whose
                # scrape did not answer (the host stopped) is left out.
                if pool_most * 2**20 > bound:
                    self.failures.append(f"{p.name}: its pool mapped {pool_most:.0f} MiB, over the "
                                         f"memory limit plus two slabs ({bound / 2**20:.0f} MiB)")
                s = [(t, rss - pool[t], fds) for t, rss, fds in s if t in pool]
            if not s:
                continue
            start, last = p.start, s[-1][0]
            name = f"{p.name} (pool at most {pool_most:.0f} MiB)" if pool else p.name
            if p.name in rest:
                name = f"{p.name} (between runtimes)"
            row = {"process": name, "role": p.role, "lived_min": (last - start) / 60, "judged": False,
                   "rss0": s[0][1], "rss1": s[-1][1], "fd0": s[0][2], "fd1": s[-1][2]}
            if last - start >= warm + 2 * win:
                base = [x for x in s if start + warm <= x[0] < start + warm + win]
                final = [x for x in s if x[0] > last - win]
                rb, rf = statistics.median(x[1] for x in base), statistics.median(x[1] for x in final)
                fb, ff = statistics.median(x[2] for x in base), statistics.median(x[2] for x in final)
                row.update(judged=True, rss_base=rb, rss_final=rf, rss_pct=100 * (rf - rb) / rb,
                           fd_base=fb, fd_final=ff, fd_pct=100 * (ff - fb) / fb)
                for what, pct in (("RSS", row["rss_pct"]), ("open fds", row["fd_pct"])):
                    if abs(pct) > tol:
                        self.failures.append(f"{p.name}: {what} changed {pct:+.1f} % after warm-up "
                                             f"(median of its first window against its last; limit {tol} %)")
            out.append(row)
        return out

    # --- 3. metrics ---------------------------------------------------------------
    def near_fault(self, t0: float, t1: float) -> bool:
        return any(t1 >= f.begin - 1 and t0 <= f.end + self.a.settle_s for f in self.s.faults)

    def check_metrics(self, rows: list[dict]) -> dict[str, dict]:
        per: dict[str, dict] = defaultdict(lambda: {"checked": 0, "host_checks": 0, "mismatches": 0, "tasks": 0})
        for r in rows:
            if "iter" not in r or not r["ok"] or self.near_fault(r["t0"], r["t1"]):
                continue
            c = per[r["client"]]
            c["checked"] += 1
            for host, after in r["after"].items():
                before = r["before"].get(host)
                if before is None or after is None:
                    continue
                c["host_checks"] += 1
                ran = r["ran"].get(host, 0)
                c["tasks"] += ran
                if after - before != ran:
                    c["mismatches"] += 1
                    self.failures.append(f"{r['client']} iteration {r['iter']}: {host}'s ferry_client_tasks_total"
                                         f"{{client=\"{r['client']}\"}} grew by {after - before}, the client ran {ran} there")
        for c in ("cpp0", "cpp1", "py", "nb"):
            if per[c]["checked"] == 0:
                self.failures.append(f"{c}: no fault-free iteration to check /metrics against")
        # At the last scrape (the clients gone, the pool idle), each host's
        # total is the sum of its per-client series.
        last: dict[str, dict[str, float]] = defaultdict(dict)
        last_t: dict[str, float] = {}
        with open(self.out / "metrics.csv") as f:
            for row in csv.DictReader(f):
                inc, t = row["incarnation"], float(row["t"])
                if t != last_t.get(inc):
                    last[inc] = {}
                    last_t[inc] = t
                last[inc][row["series"]] = float(row["value"])
        self.totals = {}
        for inc, series in last.items():
            total = series.get("ferry_tasks_total", 0)
            clients = sum(v for k, v in series.items() if k.startswith("ferry_client_tasks_total{"))
            self.totals[inc] = (total, clients)
            if total != clients:
                self.failures.append(f"{inc} at its last scrape: ferry_tasks_total {total:.0f}, "
                                     f"its clients' series sum to {clients:.0f}")
        return per

    # --- 4. logs --------------------------------------------------------------------
    def stamp(self, h: int, m: int, s: int, ms: int) -> float:
        """A log line's local time of day as UNIX time, on the day nearest the soak's middle."""
        middle = (self.t0 + self.t_end) / 2
        day = dt.datetime.fromtimestamp(middle).date()
        candidates = [dt.datetime.combine(d, dt.time(h, m, s, ms * 1000)).timestamp()
                      for d in (day - dt.timedelta(days=1), day, day + dt.timedelta(days=1))]
        return min(candidates, key=lambda t: abs(t - middle))

    def explained(self, t: float, text: str, proc) -> bool:
        hosts = {int(p) for p in ADDRESS.findall(text)} & set(self.s.ports)
        for f in self.s.faults:
            if not f.begin - 1 <= t <= f.end + self.a.explain_s:
                continue
            if proc.role == "ferryd" and proc.host == f.host:
                return True  # the faulted ferryd's own
            if not hosts or hosts == {f.port}:
                return True
        return False

    def check_logs(self) -> dict:
        counts = {"warnings": 0, "explained": 0, "unexplained": []}
        for p in self.s.procs:
            if p.log is None or not p.log.exists():
                continue
            for line in p.log.read_text(errors="replace").splitlines():
                m = LEVEL.match(line)
                if m:
                    counts["warnings"] += 1
                    t = self.stamp(*(int(g) for g in m.groups()[:4]))
                    if self.explained(t, line, p):
                        counts["explained"] += 1
                        continue
                    counts["unexplained"].append(f"{p.name}: {line}")
                elif "Traceback (most recent call last)" in line or "a cell failed" in line:
                    counts["warnings"] += 1
                    counts["unexplained"].append(f"{p.name}: {line}")
        for line in counts["unexplained"]:
            self.failures.append(f"unexplained: {line}")
        return counts

    # --- output -----------------------------------------------------------------------
    def write(self) -> int:
        samples = self.samples()
        rows = self.iterations()
        right = self.check_right(rows)
        flat = self.check_flat(samples, rows)
        metrics = self.check_metrics(rows)
        logs = self.check_logs()
        with open(self.out / "faults.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["begin", "end", "kind", "host", "address", "pid"])
            for x in self.s.faults:
                w.writerow([f"{x.begin:.3f}", f"{x.end:.3f}", x.kind, x.host, x.address, x.pid])
        md = self.markdown(right, flat, metrics, logs)
        (self.out / "summary.md").write_text(md)
        print(md)
        if self.a.plot:
            self.plot(samples, Path(self.a.plot))
        if self.failures:
            print(f"soak: FAILED ({len(self.failures)}):")
            for f in self.failures[:200]:
                print("  " + f)
            return 1
        print("soak: passed")
        return 0

    def markdown(self, right, flat, metrics, logs) -> str:
        a, m = self.a, (self.t_end - self.t0) / 60
        kinds = defaultdict(int)
        for f in self.s.faults:
            kinds[f.kind] += 1
        L = [f"Soak of {m:.1f} minutes: 3 ferryd, 4 clients, {len(self.s.faults)} faults "
             f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), one every {a.fault_every_s:g} s; "
             f"liveness {a.liveness_ms} ms; warm-up {a.warmup_s:g} s, windows {a.window_s:g} s, "
             f"tolerance {a.tolerance:g} %.", "",
             "| client | iterations | wrong | tasks | iterations checked against /metrics | host counts compared | mismatches |",
             "|---|---:|---:|---:|---:|---:|---:|"]
        for c, r in right.items():
            mm = metrics[c]
            L.append(f"| {c} | {r['iterations']} | {r['wrong']} | {r['tasks']} | {mm['checked']} | "
                     f"{mm['host_checks']} | {mm['mismatches']} |")
        L += ["", "RSS of a ferryd is without its pool (ferry_pool_bytes: whole slabs kept for reuse); its pool's "
                  "most is beside it.", "",
              "| process | lived (min) | RSS MiB, first window → last | change | open fds, first → last | change |",
              "|---|---:|---:|---:|---:|---:|"]
        for r in flat:
            if r["judged"]:
                L.append(f"| {r['process']} | {r['lived_min']:.1f} | {r['rss_base'] / 1024:.1f} → "
                         f"{r['rss_final'] / 1024:.1f} | {r['rss_pct']:+.1f} % | {r['fd_base']:g} → "
                         f"{r['fd_final']:g} | {r['fd_pct']:+.1f} % |")
            else:
                L.append(f"| {r['process']} | {r['lived_min']:.1f} | {r['rss0'] / 1024:.1f} → {r['rss1'] / 1024:.1f}"
                         f" (too short to judge) | | {r['fd0']} → {r['fd1']} | |")
        L += ["", "| fault | at (min) | kind | host | for (s) |", "|---:|---:|---|---|---:|"]
        for i, f in enumerate(self.s.faults):
            L.append(f"| {i} | {(f.begin - self.t0) / 60:.1f} | {f.kind} | {f.host} ({f.address}) | "
                     f"{f.end - f.begin:.1f} |")
        L += ["", f"Warning and error lines: {logs['warnings']}, explained by a fault {logs['explained']}, "
                  f"unexplained {len(logs['unexplained'])}."]
        tot = ", ".join(f"{k} {v[0]:.0f} = {v[1]:.0f}" for k, v in sorted(self.totals.items()))
        L += [f"ferry_tasks_total against the sum of the per-client series at each incarnation's last scrape: {tot}."]
        L += ["", f"Verdict: {'FAILED' if self.failures else 'passed'}.", ""]
        return "\n".join(L)

    def plot(self, samples, folder: Path) -> None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        folder.mkdir(parents=True, exist_ok=True)
        colors = {"ferryd0": "tab:blue", "ferryd1": "tab:orange", "ferryd2": "tab:green", "cpp0": "tab:red",
                  "cpp1": "tab:purple", "py": "tab:brown", "nb": "tab:pink", "nb-runner": "tab:gray"}
        for column, what, fname, scale in ((1, "RSS (MiB)", "rss.png", 1 / 1024), (2, "open fds", "fds.png", 1)):
            fig, ax = plt.subplots(figsize=(10, 4.5), dpi=80)
            labelled = set()
            for p in self.s.procs:
                s = samples.get(p.name)
                if not s:
                    continue
                key = p.name.split("#")[0]
                ax.plot([(x[0] - self.t0) / 60 for x in s], [x[column] * scale for x in s], color=colors.get(key),
                        lw=1.2, label=None if key in labelled else key)
                labelled.add(key)
            for f in self.s.faults:
                ax.axvline((f.begin - self.t0) / 60, color="red" if f.kind == "kill" else "darkorange", lw=0.7,
                           ls="--" if f.kind == "kill" else ":")
            ax.set_xlabel("minutes (dashed: kill -9 and restart of a host, dotted: SIGSTOP/SIGCONT)")
            ax.set_ylabel(what)
            ax.set_title(f"soak: {what} of every process ({len(self.s.faults)} faults)")
            ax.legend(loc="upper left", fontsize=8, ncol=4)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            fig.savefig(folder / fname)
            plt.close(fig)


def main() -> int:
    out = Path(sys.argv[1])
    soak = load_state(out)
    if len(sys.argv) > 3 and sys.argv[2] == "--plot":
        soak.args.plot = sys.argv[3]
    return Report(soak).write()


if __name__ == "__main__":
    sys.exit(main())
