"""What deploy/kubernetes must say once rendered, beyond the schemas.

Usage: check_rendered.py FERRYD RENDERED_BASE.yaml [OVERLAY_NAME=RENDERED.yaml ...]

Every FERRYD_* variable the manifests set is an option the ferryd binary
reads (its --help lists "(Env:NAME)"), so a renamed option cannot silently
stop applying in a pod. Every rendering: CPU workers from the container's
CPU limit, a drain shorter than the grace period, a readiness probe quick
enough to see it. Overlays: the image pinned by digest; key mode with no
token left, a host key per pod and the clients' keys mounted.
"""
import re
import subprocess
import sys

import yaml

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def ferryd_container(documents):
    sets = [d for d in documents if d and d.get("kind") == "StatefulSet"]
    assert len(sets) == 1, f"expected one StatefulSet, found {len(sets)}"
    spec = sets[0]["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "ferryd"]
    return spec, container


def check_rendering(name, documents, ferryd_env):
    spec, container = ferryd_container(documents)
    env = container.get("env", [])
    names = [e["name"] for e in env]
    by_name = {e["name"]: e for e in env}
    for variable in names:
        if variable.startswith("FERRYD_"):
            check(variable in ferryd_env, f"{name}: {variable} is not an option ferryd reads ({sorted(ferryd_env)})")
    check(len(names) == len(set(names)), f"{name}: an environment variable is set twice: {names}")
    workers = by_name.get("FERRYD_WORKERS", {}).get("valueFrom", {}).get("resourceFieldRef", {})
    check(workers.get("resource") == "limits.cpu", f"{name}: FERRYD_WORKERS does not come from limits.cpu: {workers}")
    check("cpu" in container.get("resources", {}).get("limits", {}), f"{name}: no CPU limit for the workers to follow")
    drain = float(by_name.get("FERRYD_DRAIN_SECONDS", {}).get("value", "0"))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    check(0 < drain < grace, f"{name}: drain {drain} s must be above 0 and below the grace period {grace} s")
    probe = container.get("readinessProbe", {})
    check(probe.get("httpGet", {}).get("path") == "/readyz", f"{name}: readiness is not /readyz")
    seen = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
    check(seen < drain, f"{name}: readiness takes {seen} s to see a drain of {drain} s")
    # A variable may only name those defined above it.
    for i, e in enumerate(env):
        for used in re.findall(r"\$\(([A-Za-z_0-9]+)\)", e.get("value", "")):
            check(used in names[:i], f"{name}: {e['name']} uses $({used}) before it is defined")
    return spec, container, by_name


def main():
    ferryd, base_file, *overlays = sys.argv[1:]
    help_text = subprocess.run([ferryd, "--help"], capture_output=True, text=True, check=True).stdout
    ferryd_env = set(re.findall(r"\(Env:(FERRYD_[A-Z_]+)\)", help_text))
    check("FERRYD_WORKERS" in ferryd_env, f"ferryd --help lists no FERRYD_* variables: {help_text[:200]}")

    with open(base_file) as f:
        _, base, _ = check_rendering("base", list(yaml.safe_load_all(f)), ferryd_env)
    check(base.get("imagePullPolicy") == "IfNotPresent", "base: imagePullPolicy should be IfNotPresent")

    for overlay in overlays:
        name, path = overlay.split("=", 1)
        with open(path) as f:
            documents = list(yaml.safe_load_all(f))
        spec, container, by_name = check_rendering(name, documents, ferryd_env)
        check(re.search(r"@sha256:[0-9a-f]{64}$", container["image"]) is not None,
              f"{name}: the image is not pinned by digest: {container['image']}")
        check(container.get("args") == base.get("args"), f"{name}: repeats or changes the base's args: {container.get('args')}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        if name == "key-mode":
            check("FERRYD_TOKEN_FILE" not in by_name and "token" not in volumes, f"{name}: the shared token is still there")
            check(by_name.get("FERRYD_HOST_KEY", {}).get("value", "").endswith("/$(POD_NAME)"),
                  f"{name}: the host key is not one per pod: {by_name.get('FERRYD_HOST_KEY')}")
            check(volumes.get("host-keys", {}).get("secret", {}).get("defaultMode") == 0o440,
                  f"{name}: host keys not from a Secret mounted 0440: {volumes.get('host-keys')}")
            maps = [d for d in documents if d and d.get("kind") == "ConfigMap"]
            check(any("authorized_keys" in (m.get("data") or {}) for m in maps), f"{name}: no authorized_keys ConfigMap")
            check(by_name.get("FERRYD_AUTHORIZED_KEYS", {}).get("value", "").startswith("/etc/ferry/authorized-keys/"),
                  f"{name}: FERRYD_AUTHORIZED_KEYS is not the mounted ConfigMap")

    for failure in failures:
        print("FAILED:", failure)
    if failures:
        return 1
    print(f"rendered manifests: base and {len(overlays)} overlays say what they must")
    return 0


if __name__ == "__main__":
    sys.exit(main())
