#!/usr/bin/env bash
# The tools that check deploy/ offline: kubernetes-validate (schemas of a
# pinned Kubernetes version) and checkov (misconfiguration scan), in a virtual
# environment of their own (FERRY_DEPLOY_VENV, default .venv-deploy) so their
# pinned dependencies never meet the ferry package's.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FERRY_DEPLOY_VENV:-.venv-deploy}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
want=("kubernetes-validate==1.37.0" "checkov==3.3.30")
if ! "${pip[@]}" show kubernetes-validate checkov >/dev/null 2>&1; then
  echo "== pip install ${want[*]} (into $venv)"
  "${pip[@]}" install --quiet "${want[@]}"
fi
