#!/usr/bin/env bash
# Builds tests/fuzz/reply_fuzzer.cpp with libFuzzer, ASan and UBSan, seeds a
# corpus (the harness writes it, plus tests/fuzz/corpus/reply) and fuzzes
# RpcClient's handling of a peer's replies for FERRY_FUZZ_SECONDS (default
# 20), or FERRY_FUZZ_RUNS executions when that is set.
#   run_reply_fuzzer.sh SOURCE_DIR [BINARY_DIR]
# Exit status: 0 clean, 77 skipped (no clang++ or no libFuzzer runtime), any
# other non-zero a build failure or a finding; a crashing input is kept in
# BINARY_DIR/fuzz-artifacts (or the temp dir, whose path is printed).
# RpcClient and the protocol are compiled directly (instrumented); only fmt
# is linked. The transport is a fake: no UCX.
set -euo pipefail

src=${1:?usage: run_reply_fuzzer.sh SOURCE_DIR [BINARY_DIR]}
bin=${2:-}
cxx=${FERRY_FUZZ_CXX:-clang++}
seconds=${FERRY_FUZZ_SECONDS:-20}
runs=${FERRY_FUZZ_RUNS:--1}

source "$src/tests/fuzz/fuzz_lib.sh"
fuzz_workdir reply "$bin"
require_libfuzzer "$cxx" "$work"

echo "building the reply fuzzer with $cxx"
fuzz_build "$work/reply_fuzzer" \
  "$src/tests/fuzz/reply_fuzzer.cpp" "$src/transport/src/rpc_client.cpp" "$src/transport/src/protocol.cpp" \
  "$src/transport/src/protocol_names.cpp" \
  -- -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Wpedantic -include "$src/tests/fuzz/source_location_shim.hpp" \
  -I"$src/transport/include" -I"$src/common/include" -I"$src/allocator/include" \
  -- -lfmt

FERRY_FUZZ_SEED_DIR="$work/corpus" "$work/reply_fuzzer"
fuzz_seed reply
echo "seeded $(ls "$work/corpus" | wc -l) inputs; fuzzing for ${seconds}s (runs: $runs)"

fuzz_run reply "$work/reply_fuzzer" -max_total_time="$seconds" -runs="$runs" -max_len=4096
