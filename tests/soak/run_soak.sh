#!/usr/bin/env bash
# The soak by hand (tests/soak/soak.py; ctest runs its 10-minute form as
# soak_ci). The hour, as bench/README.md reports it:
#   bash tests/soak/run_soak.sh build --minutes 60 --plot bench/soak
# BUILD: a build tree with ferryd, ferry and soak_client; the clients' Python
# is FERRY_PYTHON, or .venv/bin/python (scripts/python-env.sh). Defaults for
# the hour: a fault every 3 minutes, a 3-minute warm-up, 3-minute windows;
# later arguments override them. Prints the tables (summary.md in --out) and,
# with --plot DIR, writes DIR/rss.png and DIR/fds.png.
set -euo pipefail
build=${1:?usage: run_soak.sh BUILD [soak.py arguments]}
shift
here=$(cd "$(dirname "$0")" && pwd)
python=${FERRY_PYTHON:-$here/../../.venv/bin/python}
exec "$python" "$here/soak.py" --build "$build" --python "$python" \
  --fault-every-s 180 --warmup-s 180 --window-s 180 --sample-s 10 "$@"
