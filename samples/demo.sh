#!/usr/bin/env bash
# The main demo, run by `bash scripts/run demo`: what this machine offers
# Ferry, how fast its pinned memory pool is, then tasks: the quickstart and a
# tiled Cholesky with a trace of where each task ran.
set -euo pipefail
build=${1:-build}
trace=${FERRY_DEMO_TRACE:-$build/cholesky-trace.json}

echo "== ferry info: the memory and compute picture of this machine"
"$build/tools/ferry" info
echo
echo "== ferry bench-alloc: pooled pinned memory against malloc and mmap"
"$build/tools/ferry" bench-alloc --seconds 1
echo
echo "== quickstart: buffers, a built-in kernel, your own kernel, a result"
"$build/samples/quickstart"
echo
echo "== tiled Cholesky, N=2048, 256 x 256 tiles (trace: $trace, open it in Perfetto)"
FERRY_TRACE="$trace" "$build/samples/cholesky" 2048 256
