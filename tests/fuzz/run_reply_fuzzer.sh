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

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-reply-fuzz.XXXXXX")
artifacts=${bin:+$bin/fuzz-artifacts}
artifacts=${artifacts:-$work/artifacts}
mkdir -p "$artifacts" "$work/corpus"
keep_work=0
cleanup() { if [[ $keep_work == 0 ]]; then rm -rf "$work"; fi; }
trap cleanup EXIT

source "$src/tests/fuzz/libfuzzer_probe.sh"
require_libfuzzer "$cxx" "$work"

echo "building the reply fuzzer with $cxx"
"$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Wpedantic -include "$src/tests/fuzz/source_location_shim.hpp" \
  -I"$src/transport/include" -I"$src/common/include" -I"$src/allocator/include" \
  "$src/tests/fuzz/reply_fuzzer.cpp" "$src/transport/src/rpc_client.cpp" "$src/transport/src/protocol.cpp" \
  "$src/transport/src/protocol_names.cpp" -lfmt -o "$work/reply_fuzzer"

FERRY_FUZZ_SEED_DIR="$work/corpus" "$work/reply_fuzzer"
if [[ -d $src/tests/fuzz/corpus/reply ]]; then cp "$src/tests/fuzz/corpus/reply/"* "$work/corpus/"; fi
echo "seeded $(ls "$work/corpus" | wc -l) inputs; fuzzing for ${seconds}s (runs: $runs)"

# -error_exitcode: libFuzzer's default, 77, is what this script means by "skipped".
status=0
"$work/reply_fuzzer" "$work/corpus" -max_total_time="$seconds" -runs="$runs" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 -artifact_prefix="$artifacts/" || status=$?
if [[ $status != 0 ]]; then
  keep_work=1
  echo "reply fuzzer FAILED (status $status); reproducer in $artifacts, build in $work" >&2
  exit "$status"
fi
echo "reply fuzzer: no findings"
