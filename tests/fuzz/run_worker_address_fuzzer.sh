#!/usr/bin/env bash
# Builds tests/fuzz/worker_address_fuzzer.cpp with libFuzzer, ASan and UBSan,
# seeds a corpus with this host's real UCX worker addresses and fuzzes for
# FERRY_FUZZ_SECONDS (default 20).
#   run_worker_address_fuzzer.sh SOURCE_DIR [BINARY_DIR]
# Exit status: 0 clean, 77 skipped (no clang++, no libFuzzer runtime or no
# UCX to link), any other non-zero a build failure or a finding; a crashing
# input is kept in BINARY_DIR/fuzz-artifacts (or the temp dir, whose path is
# printed). The check is compiled directly; UCX is linked only to make seeds.
set -euo pipefail

src=${1:?usage: run_worker_address_fuzzer.sh SOURCE_DIR [BINARY_DIR]}
bin=${2:-}
cxx=${FERRY_FUZZ_CXX:-clang++}
seconds=${FERRY_FUZZ_SECONDS:-20}

source "$src/tests/fuzz/fuzz_lib.sh"
fuzz_workdir address "$bin"
require_libfuzzer "$cxx" "$work"
ucx_libs=$(pkg-config --libs ucx 2>/dev/null || echo "-lucp -luct -lucs")

echo "building the worker address fuzzer with $cxx"
if ! fuzz_build "$work/worker_address_fuzzer" \
  "$src/tests/fuzz/worker_address_fuzzer.cpp" "$src/transport/src/worker_address.cpp" \
  -- -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Wpedantic -I"$src/transport/src" \
  -- $ucx_libs; then
  if ! echo '#include <ucp/api/ucp.h>' | "$cxx" -x c++ -fsyntax-only - 2>/dev/null; then
    echo "UCX headers not found: fuzzing skipped"
    exit 77
  fi
  exit 1
fi

# UCX's own allocations at exit are not this check's leaks.
ASAN_OPTIONS=detect_leaks=0 FERRY_FUZZ_SEED_DIR="$work/corpus" "$work/worker_address_fuzzer"
fuzz_seed address
echo "seeded $(ls "$work/corpus" | wc -l) addresses; fuzzing for ${seconds}s"

# max_len: past any real address (a few hundred bytes), so long garbage is tried too.
export UCX_TLS=tcp
fuzz_run "worker address" "$work/worker_address_fuzzer" -max_total_time="$seconds" -max_len=4096
