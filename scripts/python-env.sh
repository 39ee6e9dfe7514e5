#!/usr/bin/env bash
# Makes the Python environment the README's commands use: a virtual
# environment (FERRY_VENV, default .venv) with the test and notebook tools,
# and the ferry package installed into it from this checkout with pip.
# Reinstalling is incremental: scikit-build-core keeps its build folder.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FERRY_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
# The build backend and the tools the tests (scikit-learn: an array-API estimator
# fitted on ferry.numpy arrays), the notebook and the trace plot use.
"${pip[@]}" install --quiet "scikit-build-core>=0.10" "nanobind>=2.0" numpy pytest hypothesis scikit-learn matplotlib nbclient nbformat ipykernel
echo "== pip install . (the ferry Python package, into $venv)"
"${pip[@]}" install --quiet --no-build-isolation .
"$venv/bin/python" -c "import ferry; print('ferry', ferry.__version__, 'installed in', ferry.__file__)"
