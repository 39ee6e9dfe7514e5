"""Every metric the Grafana dashboards in deploy/grafana query exists in a
real scrape of a real ferryd's /metrics.

GPU gauges (ferry_gpu_*) come from NVML and exist only on hosts with an
NVIDIA driver; a scrape saying ferry_nvml_available 0 has none of them, and
there each must instead be a name ferryd's binary declares.

Before the scrape, WORKLOAD (tests/deploy/dashboard_workload.cpp) runs
tasks on that ferryd, one failing, and fetches data: a client's, a kernel's
and a transfer's series exist only once something was counted for them
(ferryd makes no zero series for labels nothing used).

Usage: dashboard_metrics.py FERRYD WORKLOAD DASHBOARD.json...
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# Prometheus' own series and PromQL words that appear in queries but are no metrics of ours.
NOT_METRICS = {"up", "rate", "irate", "increase", "sum", "count", "avg", "max", "min", "by", "without",
               "histogram_quantile", "label_values", "le", "job", "instance", "on", "ignoring"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exprs(node):
    """Every PromQL string in a dashboard: targets' expr and templating queries."""
    if isinstance(node, dict):
        if node.get("type") == "datasource":  # its query names a data source type, not PromQL
            return
        for key, value in node.items():
            if key in ("expr", "query") and isinstance(value, str):
                yield value
            else:
                yield from exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs(item)


def metric_names(expr):
    expr = re.sub(r'\{[^}]*\}', '', expr)      # label matchers
    expr = re.sub(r'\[[^\]]*\]', '', expr)     # range selectors
    expr = re.sub(r'"[^"]*"', '', expr)        # strings
    expr = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', '', expr)  # label lists
    names = set(re.findall(r'[a-zA-Z_:][a-zA-Z0-9_:]*', expr))
    return {n for n in names if n not in NOT_METRICS and not n.startswith("$")}


def scrape(ferryd, workload):
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("dashboard-test-token-0123456789abcdef")
        os.chmod(token, 0o600)
        port_file = os.path.join(tmp, "port")
        server = subprocess.Popen([ferryd, "--listen", "127.0.0.1:0", "--token-file", token, "--port-file", port_file,
                                   "--metrics", f"127.0.0.1:{port}", "--gpus", "none", "--workers", "1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while not (os.path.exists(port_file) and open(port_file).read().strip()):
                if server.poll() is not None or time.monotonic() > deadline:
                    out = server.stdout.read().decode(errors="replace") if server.poll() is not None else ""
                    raise SystemExit(f"ferryd never listened\n{out}")
                time.sleep(0.05)
            address = "127.0.0.1:" + open(port_file).read().strip()
            work = subprocess.run([workload, address, token], capture_output=True, text=True, timeout=60)
            if work.returncode != 0:
                raise SystemExit(f"the workload failed ({work.returncode}):\n{work.stdout}{work.stderr}")
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                        return r.read().decode()
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        out = server.stdout.read().decode(errors="replace") if server.poll() is not None else ""
                        raise SystemExit(f"ferryd's metrics never answered on port {port}\n{out}")
                    time.sleep(0.1)
        finally:
            server.terminate()
            server.wait(timeout=20)


def main():
    ferryd, workload, dashboards = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = scrape(ferryd, workload)
    exposed = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = re.match(r'[a-zA-Z_:][a-zA-Z0-9_:]*', line).group(0)
            exposed.add(name)
            # A histogram's or summary's series also answer to the family's name.
            exposed.add(re.sub(r'_(bucket|sum|count)$', '', name))
    # Without NVML the GPU series are absent by design: ferryd must still know them.
    nvml = re.search(r'^ferry_nvml_available (\S+)$', text, re.M)
    if nvml is None:
        raise SystemExit("the scrape has no ferry_nvml_available: cannot tell whether GPU series should exist")
    if float(nvml.group(1)) == 0:
        with open(ferryd, "rb") as f:
            binary = f.read()
        exposed |= {name.decode() for name in re.findall(rb'ferry_gpu_[a-z_]+', binary)}
    missing = {}
    checked = 0
    for path in dashboards:
        with open(path) as f:
            dashboard = json.load(f)
        for expr in exprs(dashboard):
            for name in metric_names(expr):
                checked += 1
                if name not in exposed:
                    missing.setdefault(path, set()).add(name)
    if checked == 0:
        raise SystemExit("no metric names found in the dashboards: the test would prove nothing")
    if missing:
        for path, names in missing.items():
            print(f"{path}: queries metrics ferryd does not expose: {', '.join(sorted(names))}")
        print("ferryd exposes:", ", ".join(sorted(n for n in exposed if n.startswith("ferry"))))
        return 1
    print(f"{checked} metric references in {len(dashboards)} dashboard(s), all exposed by ferryd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
