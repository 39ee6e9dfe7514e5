#!/usr/bin/env bash
# ctest's entry to the Python tests: run.sh PYTHON pytest | notebook NOTEBOOK.
# Exits 77 (ctest: skipped) when PYTHON lacks the ferry package.
set -uo pipefail
python=$1
what=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$python" ] || ! "$python" -c "import ferry" 2>/dev/null; then
  echo "SKIPPED: the ferry Python package is not installed for $python (bash scripts/python-env.sh installs it)"
  exit 77
fi
# Run from outside the source tree, so `import ferry` finds the installed package.
cd "$(mktemp -d)"
case "$what" in
  pytest)
    "$python" -m pytest -q -rs -p no:cacheprovider "$here"
    status=$?
    # 5: nothing was collected, which is a broken test tree, not a pass.
    [ $status -eq 5 ] && echo "pytest collected no tests in $here" >&2
    exit $status
    ;;
  notebook)
    exec "$python" "$here/run_notebook.py" "$3"
    ;;
  *)
    echo "usage: run.sh PYTHON pytest|notebook NOTEBOOK" >&2
    exit 2
    ;;
esac
