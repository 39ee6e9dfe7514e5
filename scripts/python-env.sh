#!/usr/bin/env bash
# Makes the Python environment the README's commands use: a virtual
# environment (FERRY_VENV, default .venv) with the test and notebook tools,
# and the ferry package installed into it from this checkout with pip.
#   python-env.sh                      tools, then `pip install .` (its own build)
#   python-env.sh --tools-only         the environment and tools, no ferry
#   python-env.sh --from-build BUILD   `pip install .` from the CMake build tree
#                                      BUILD (configured with -DFERRY_WITH_PYTHON=ON
#                                      for this environment's Python): nothing is
#                                      compiled twice (scripts/run uses this)
# Reinstalling is incremental: scikit-build-core keeps its build folder.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-all}
venv=${FERRY_VENV:-.venv}
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

if [ "$mode" != --from-build ]; then
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  "${pip[@]}" install --quiet --upgrade pip
  # The build backend and the tools the tests (scikit-learn: an array-API estimator
  # fitted on ferry.numpy arrays), the notebook and the trace plot use, and
  # JupyterLab and nbconvert, which docs/python.md tells people to run.
  "${pip[@]}" install --quiet "scikit-build-core>=0.10" "nanobind>=2.0" numpy pytest hypothesis scikit-learn matplotlib nbclient nbformat ipykernel \
    jupyterlab nbconvert
  [ "$mode" = --tools-only ] && exit 0
fi

settings=()
if [ "$mode" = --from-build ]; then
  build=${2:?usage: python-env.sh --from-build BUILD}
  cache=$build/CMakeCache.txt
  [ -f "$cache" ] || { echo "python-env.sh: $cache not found: configure $build with CMake first" >&2; exit 1; }
  # scikit-build-core configures the same tree again: with the tree's own
  # build type and options (pyproject.toml's would turn its tests off and
  # rebuild it as Release), so only the install into the wheel is new.
  settings+=(-C "build-dir=$build" -C "cmake.build-type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")")
  while IFS= read -r option; do
    settings+=(-C "cmake.define.$option")
  done < <(sed -n 's/^\(FERRY_[A-Z_]*\):BOOL=\(.*\)$/\1=\2/p' "$cache")
fi
echo "== pip install . (the ferry Python package, into $venv${build:+, from $build})"
"${pip[@]}" install --quiet --no-build-isolation "${settings[@]}" .
"$venv/bin/python" -c "import ferry; print('ferry', ferry.__version__, 'installed in', ferry.__file__)"
