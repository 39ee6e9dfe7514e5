#!/usr/bin/env bash
# The main demo, run by `bash scripts/run demo`: what this machine offers
# Ferry, how fast its pinned memory pool is, the quickstart, then offloading:
# a local ferryd on 127.0.0.1 (a free port, a fresh token) stands in for the
# GPU host, and a runtime places a gemm sweep, a chunked streaming transform
# and a tiled Cholesky between its CPU and that host.
set -euo pipefail
build=${1:-build}
trace=${FERRY_DEMO_TRACE:-$build/offload-trace.json}

echo "== ferry info: the memory and compute picture of this machine"
"$build/tools/ferry" info
echo
echo "== ferry bench-alloc: pooled pinned memory against malloc and mmap"
"$build/tools/ferry" bench-alloc --seconds 1
echo
echo "== quickstart: buffers, a built-in kernel, your own kernel, a result"
"$build/samples/ferry-quickstart"
echo
echo "== tiled Cholesky on this machine's CPU, N=2048"
"$build/samples/ferry-cholesky" 2048 256

scratch=$(mktemp -d)
ferryd_pid=
cleanup() {
  [ -n "$ferryd_pid" ] && kill "$ferryd_pid" 2>/dev/null && wait "$ferryd_pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$scratch/token"
chmod 600 "$scratch/token"
"$build/tools/ferryd" --listen 127.0.0.1:0 --token-file "$scratch/token" --port-file "$scratch/port" \
  > "$scratch/ferryd.log" 2>&1 &
ferryd_pid=$!
for _ in $(seq 100); do [ -s "$scratch/port" ] && break; sleep 0.05; done
[ -s "$scratch/port" ] || { cat "$scratch/ferryd.log"; echo "ferryd did not start" >&2; exit 1; }
port=$(cat "$scratch/port")
echo
echo "== offload to a local ferryd on 127.0.0.1:$port (trace: $trace, open it in Perfetto)"
FERRY_REMOTES="ucx://127.0.0.1:$port" FERRY_TOKEN_FILE="$scratch/token" FERRY_TRACE="$trace" \
  FERRY_PERFMODELS=off "$build/samples/ferry-offload"
