#!/usr/bin/env bash
# ferryd built with AddressSanitizer and UndefinedBehaviorSanitizer, under
# the integration tests that drive it hardest: every protocol, security and
# remote-runtime test of BINARY_DIR (built as usual) runs against it
# (FERRY_TEST_FERRYD), so a memory error or undefined behaviour in ferryd
# fails the test that provoked it, and a leak fails ferryd's clean exit.
#   run_ferryd_asan.sh SOURCE_DIR BINARY_DIR
# Builds in BINARY_DIR/ferryd-asan (only ferryd and what it links; CUDA,
# Python, tests, benchmarks and samples left out). Exit status: 0 clean,
# 77 skipped (the test binaries are not built), anything else a failure.
set -euo pipefail

src=${1:?usage: run_ferryd_asan.sh SOURCE_DIR BINARY_DIR}
bin=${2:?usage: run_ferryd_asan.sh SOURCE_DIR BINARY_DIR}
tests=(ferryd_test ferryd_security_test remote_test host_to_host_test hostile_peer_test ferryd_fetch_limits_test)
for t in "${tests[@]}"; do
  if [[ ! -x $bin/tests/integration/$t ]]; then
    echo "$bin/tests/integration/$t is not built: skipped"
    exit 77
  fi
done

asan=$bin/ferryd-asan
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
echo "configuring ferryd with ASan and UBSan in $asan"
cmake -S "$src" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_WITH_CUDA=OFF \
  -DFERRY_WITH_PYTHON=OFF -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF -DFERRY_BUILD_SAMPLES=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
  >"$asan.configure.log" 2>&1 || { cat "$asan.configure.log"; exit 1; }
echo "building ferryd with ASan and UBSan"
cmake --build "$asan" --target ferryd >"$asan.build.log" 2>&1 || { tail -50 "$asan.build.log"; exit 1; }

# UCX keeps a few small allocations per closed endpoint past their end
# (Debian's 1.13), and OpenBLAS its thread buffers: theirs, not ferryd's.
printf 'leak:libucs.so\nleak:libucp.so\nleak:libuct.so\nleak:libopenblas\n' >"$asan/lsan.supp"
export FERRY_TEST_FERRYD=$asan/tools/ferryd
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$asan/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${tests[@]}"; do
  echo "== $t against ferryd with ASan and UBSan"
  # GPU tests skip here as everywhere without a GPU; the tests' own runtimes are not sanitized.
  "$bin/tests/integration/$t" --gtest_brief=1 || status=1
done
if [[ $status != 0 ]]; then
  echo "ferryd under ASan/UBSan: FAILED (its reports are in the failing tests' output above)" >&2
  exit 1
fi
echo "ferryd under ASan/UBSan: every test passed"
