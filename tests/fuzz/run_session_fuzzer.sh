#!/usr/bin/env bash
# Builds tests/fuzz/session_fuzzer.cpp with libFuzzer, ASan and UBSan and
# fuzzes ferryd's sessions for FERRY_FUZZ_SECONDS (default 20).
#   run_session_fuzzer.sh SOURCE_DIR BINARY_DIR
# ferryd's session sources are compiled into the fuzzer (instrumented); the
# runtime, transport and common libraries come from BINARY_DIR as the
# project's compiler built them (same C++ library, not instrumented).
# Exit status: 0 clean, 77 skipped (no clang++, no libFuzzer runtime, or the
# libraries not built yet), any other non-zero a build failure or a finding;
# a crashing input is kept in BINARY_DIR/fuzz-artifacts.
set -euo pipefail

src=${1:?usage: run_session_fuzzer.sh SOURCE_DIR BINARY_DIR}
bin=${2:?usage: run_session_fuzzer.sh SOURCE_DIR BINARY_DIR}
cxx=${FERRY_FUZZ_CXX:-clang++}
seconds=${FERRY_FUZZ_SECONDS:-20}

for lib in runtime/libferry_runtime.so transport/libferry_transport.so common/libferry_common.so; do
  if [[ ! -e $bin/$lib ]]; then
    echo "$bin/$lib is not built: fuzzing skipped"
    exit 77
  fi
done

source "$src/tests/fuzz/fuzz_lib.sh"
fuzz_workdir session "$bin"
require_libfuzzer "$cxx" "$work"

echo "building the session fuzzer with $cxx"
ferryd=$src/tools/ferryd
# vptr is left out: the libraries' types come from objects UBSan did not see.
fuzz_build "$work/session_fuzzer" \
  "$src/tests/fuzz/session_fuzzer.cpp" "$ferryd/server.cpp" "$ferryd/session.cpp" "$ferryd/session_data.cpp" "$ferryd/session_peer.cpp" \
  "$ferryd/session_run.cpp" "$ferryd/metrics.cpp" "$ferryd/audit.cpp" "$ferryd/background.cpp" \
  "$ferryd/written_ranges.cpp" "$ferryd/capabilities.cpp" "$ferryd/peer_fetch.cpp" "$ferryd/fetch_sources.cpp" "$ferryd/metrics_http.cpp" "$ferryd/authorized_keys.cpp" "$ferryd/fair_share.cpp" "$ferryd/gpu_health.cpp" \
  -- -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize=vptr -fno-sanitize-recover=all \
  -include "$src/tests/fuzz/source_location_shim.hpp" \
  -DFMT_SHARED -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB \
  -I"$src/runtime/include" -I"$src/allocator/include" -I"$src/common/include" -I"$bin/common/include" \
  -I"$src/transport/include" -I"$ferryd" -I"$src/tests/integration" -isystem /usr/local/cuda/include \
  -- -L"$bin/runtime" -L"$bin/transport" -L"$bin/common" -L"$bin/allocator" \
  -Wl,-rpath,"$bin/runtime:$bin/transport:$bin/common:$bin/allocator" \
  -lferry_runtime -lferry_transport -lferry_allocator -lferry_common -lprometheus-cpp-core -lsodium -lspdlog -lfmt \
  -lucp -lucs -lpthread

# Seeds (tests/fuzz/corpus/session): a put then a get, a run, a kernel
# definition, a stats request; fetches from the fake source, one whose
# second answer is short and not ok, one answered right in three chunks; and
# findings kept as seeds, so each run tries them again first
# (abandoned_receive: a fetch from ferryd itself, then a refused frame:
# ferryd closes while a reply payload is still arriving by rendezvous over
# the shared-memory lane, a receive UCX never completes; the worker's
# shutdown releases it, it leaked before).
fuzz_seed session

# UCX keeps a few small allocations per closed endpoint past their end
# (Debian's 1.13); they are UCX's, not ferryd's, and would stop every run.
printf 'leak:libucs.so\nleak:libucp.so\nleak:libuct.so\n' >"$work/lsan.supp"

echo "fuzzing ferryd sessions for ${seconds}s"
# UCX_NET_DEVICES=lo: the fuzzer's client and ferryd talk over loopback only.
# UCX otherwise offers every interface of the moment in each worker's
# address, and the namespace tests, which ctest may run beside this one,
# add and remove veths: a dial that met one of theirs going away failed its
# handshake, and the harness took that for a finding.
export FERRY_LOG=off UCX_NET_DEVICES=lo LSAN_OPTIONS="suppressions=$work/lsan.supp:print_suppressions=0"
fuzz_run session "$work/session_fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=60 -rss_limit_mb=4096
