#!/usr/bin/env bash
# METG(50%) for Ferry, StarPU and OpenMP tasks, and for Ferry with every task
# on a loopback ferryd (over TCP and over the shared-memory lane): starts a
# ferryd with the benchmark's kernel plugin and as many workers as the local
# rows use, then runs ferry_bench_metg against it. Extra args go to
# ferry_bench_metg (--width= --steps= --reps= --grains= --only= ...).
#   run_metg_bench.sh BUILD_DIR [ferry_bench_metg args...]
# Env: METG_CORES (2): workers of every system, ferryd's included.
# OMP_WAIT_POLICY (passive): libgomp reads it when it loads, before main.
# Its default lets idle threads spin, which on a 2-core machine shared with
# other work kept OpenMP below 50 % efficiency even at 60 µs tasks;
# passive gave it a METG of 30 µs in the same minutes, so the peer runs
# with its better setting.
# JSON lands in BUILD_DIR/bench/bench-metg.json unless --out= says otherwise.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [args...]}" && pwd); shift
ferryd=$build/tools/ferryd bench=$build/bench/ferry_bench_metg plugin=$build/bench/libferry_metg_plugin.so
cores=${METG_CORES:-2}
[[ -x $ferryd && -x $bench && -f $plugin ]] || {
  echo "run_metg_bench: build ferryd, ferry_bench_metg and ferry_metg_plugin first" >&2; exit 2; }

tmp=$(mktemp -d) ferryd_pid=""
trap '[[ -n $ferryd_pid ]] && kill "$ferryd_pid" 2>/dev/null && wait "$ferryd_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")
"$ferryd" --listen 127.0.0.1:0 --token-file "$tmp/token" --port-file "$tmp/port" --gpus none --workers "$cores" \
  --plugin "$plugin" >"$tmp/ferryd.log" 2>&1 &
ferryd_pid=$!
for _ in {1..100}; do [[ -s $tmp/port ]] && break; sleep 0.1; done
[[ -s $tmp/port ]] || { echo "run_metg_bench: ferryd wrote no port" >&2; cat "$tmp/ferryd.log" >&2; exit 1; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
rc=0
"$bench" --remote="127.0.0.1:$(cat "$tmp/port")" --token-file="$tmp/token" --plugin="$plugin" --ferryd-pid="$ferryd_pid" --cores="$cores" \
  --out="$build/bench/bench-metg.json" "$@" || rc=$?
((rc == 0)) || { echo "run_metg_bench: ferry_bench_metg failed ($rc); ferryd's log:" >&2; tail -50 "$tmp/ferryd.log" >&2; }
exit "$rc"
