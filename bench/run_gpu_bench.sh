#!/usr/bin/env bash
# The GPU benchmarks, with a ferryd --gpus all on 127.0.0.1 for the
# remote-vs-local row.   run_gpu_bench.sh BUILD_DIR [ferry_bench_gpu args...]
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [args...]}" && pwd); shift
ferryd=$build/tools/ferryd bench=$build/bench/ferry_bench_gpu
[[ -x $ferryd && -x $bench ]] || { echo "run_gpu_bench: build ferryd and ferry_bench_gpu first" >&2; exit 2; }
tmp=$(mktemp -d) ferryd_pid=""
trap '[[ -n $ferryd_pid ]] && kill "$ferryd_pid" 2>/dev/null && wait "$ferryd_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")
"$ferryd" --listen 127.0.0.1:0 --token-file "$tmp/token" --port-file "$tmp/port" --gpus all >"$tmp/ferryd.log" 2>&1 &
ferryd_pid=$!
for _ in {1..100}; do [[ -s $tmp/port ]] && break; sleep 0.1; done
[[ -s $tmp/port ]] || { cat "$tmp/ferryd.log"; echo "run_gpu_bench: ferryd did not start" >&2; exit 1; }
"$bench" --remote="127.0.0.1:$(cat "$tmp/port")" --token-file="$tmp/token" "$@"
