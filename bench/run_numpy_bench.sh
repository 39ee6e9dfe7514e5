#!/usr/bin/env bash
# ferry.numpy against NumPy, numexpr and Dask array (numexpr and Dask are
# installed here from PyPI: peers for this benchmark only, not test
# dependencies). Needs the venv scripts/python-env.sh makes.
#   run_numpy_bench.sh [numpy_bench.py args...]   e.g. --n 2e8 --gemm 8192 4096 1024
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FERRY_VENV:-.venv}
[ -x "$venv/bin/python" ] || bash scripts/python-env.sh
"$venv/bin/python" -c "import ferry.numpy" 2>/dev/null || bash scripts/python-env.sh
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "dask[array]>=2024.1" numexpr
python=$(cd "$venv/bin" && pwd)/python
bench=$(pwd)/bench/numpy_bench.py
threads=${BENCH_THREADS:-$(nproc)}
cd "$(mktemp -d)"  # so `import ferry` finds the installed package, not the source tree
# NumPy's OpenBLAS (the sgemm peer) gets the same threads as everyone else.
OPENBLAS_NUM_THREADS=$threads exec "$python" "$bench" --threads "$threads" "$@"
