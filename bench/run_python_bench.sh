#!/usr/bin/env bash
# The Python benchmarks: per-task overhead against the same loop in C++, and a
# remote round trip against Dask distributed (installed here from PyPI; it is
# a peer for this benchmark only). Needs the venv scripts/python-env.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FERRY_VENV:-.venv}
[ -x "$venv/bin/python" ] || bash scripts/python-env.sh
"$venv/bin/python" -c "import ferry" 2>/dev/null || bash scripts/python-env.sh
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "distributed>=2024.1"
python=$(cd "$venv/bin" && pwd)/python
bench=$(pwd)/bench/python_overhead_bench.py
cd "$(mktemp -d)"  # so `import ferry` finds the installed package, not the source tree
exec "$python" "$bench" "$@"
