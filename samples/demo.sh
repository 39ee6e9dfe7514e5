#!/usr/bin/env bash
# The main demo: what this machine offers Ferry, then how fast its pinned
# memory pool is next to malloc and mmap. Run through `bash scripts/run demo`.
set -euo pipefail
build=${1:-build}
ferry="$build/tools/ferry/ferry"
echo "== ferry info: the memory and compute picture of this machine"
"$ferry" info
echo
echo "== ferry bench-alloc: pooled pinned memory against malloc and mmap"
"$ferry" bench-alloc
