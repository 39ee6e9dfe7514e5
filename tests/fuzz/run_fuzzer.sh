#!/usr/bin/env bash
# Builds tests/fuzz/protocol_fuzzer.cpp with libFuzzer, ASan and UBSan, seeds
# a corpus with valid messages and fuzzes for FERRY_FUZZ_SECONDS (default 30).
#   run_fuzzer.sh SOURCE_DIR [BINARY_DIR]
# Exit status: 0 clean, 77 skipped (no clang++ or no libFuzzer runtime), any
# other non-zero a build failure or a finding; a crashing input is kept in
# BINARY_DIR/fuzz-artifacts (or the temp dir, whose path is printed).
# The protocol sources are compiled directly, so the fuzzer needs neither
# the project's compiler nor its dependencies (UCX, spdlog, fmt).
set -euo pipefail

src=${1:?usage: run_fuzzer.sh SOURCE_DIR [BINARY_DIR]}
bin=${2:-}
cxx=${FERRY_FUZZ_CXX:-clang++}
seconds=${FERRY_FUZZ_SECONDS:-30}

source "$src/tests/fuzz/fuzz_lib.sh"
fuzz_workdir protocol "$bin"
require_libfuzzer "$cxx" "$work"

echo "building the protocol fuzzer with $cxx"
fuzz_build "$work/protocol_fuzzer" \
  "$src/tests/fuzz/protocol_fuzzer.cpp" "$src/transport/src/protocol.cpp" "$src/transport/src/protocol_names.cpp" \
  -- -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Wpedantic -include "$src/tests/fuzz/source_location_shim.hpp" \
  -I"$src/transport/include" -I"$src/common/include"

FERRY_FUZZ_SEED_DIR="$work/corpus" "$work/protocol_fuzzer"
fuzz_seed protocol
echo "seeded $(ls "$work/corpus" | wc -l) messages; fuzzing for ${seconds}s"

# max_len: past the decoder's 64 KiB bound, so the size check is exercised too.
fuzz_run protocol "$work/protocol_fuzzer" -max_total_time="$seconds" -max_len=66000
