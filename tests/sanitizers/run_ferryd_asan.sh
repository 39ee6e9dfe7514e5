#!/usr/bin/env bash
# ferryd built with AddressSanitizer and UndefinedBehaviorSanitizer, under
# the integration tests that exercise its parsing, sessions and faults: a
# test binary of BINARY_DIR (built as usual) runs against it
# (FERRY_TEST_FERRYD), so a memory error or undefined behaviour in ferryd
# fails the test that provoked it, and a leak fails ferryd's clean exit.
#   run_ferryd_asan.sh build SOURCE_DIR BINARY_DIR
#       builds it in BINARY_DIR/ferryd-asan (only ferryd and what it links;
#       CUDA, Python, tests, benchmarks and samples left out): ctest's
#       fixture set-up, so the test binaries below run in parallel beside it
#   run_ferryd_asan.sh test BINARY_DIR TEST [GTEST_FILTER]
#       runs tests/integration/TEST against that ferryd
# Exit status: 0 clean, 77 skipped (the test binary is not built), anything
# else a failure.
set -euo pipefail

usage="usage: run_ferryd_asan.sh build SOURCE_DIR BINARY_DIR | test BINARY_DIR TEST [GTEST_FILTER]"
what=${1:?$usage}
case "$what" in
  build)
    src=${2:?$usage}
    bin=${3:?$usage}
    asan=$bin/ferryd-asan
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    launcher=()
    if command -v ccache >/dev/null 2>&1; then
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    fi
    echo "configuring ferryd with ASan and UBSan in $asan"
    cmake -S "$src" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_WITH_CUDA=OFF \
      -DFERRY_WITH_PYTHON=OFF -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF -DFERRY_BUILD_SAMPLES=OFF \
      "${launcher[@]}" \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
      >"$asan.configure.log" 2>&1 || { cat "$asan.configure.log"; exit 1; }
    echo "building ferryd with ASan and UBSan"
    cmake --build "$asan" --target ferryd >"$asan.build.log" 2>&1 || { tail -50 "$asan.build.log"; exit 1; }
    # UCX keeps a few small allocations per closed endpoint past their end
    # (Debian's 1.13), and OpenBLAS its thread buffers: theirs, not ferryd's.
    printf 'leak:libucs.so\nleak:libucp.so\nleak:libuct.so\nleak:libopenblas\n' >"$asan/lsan.supp"
    echo "ferryd with ASan and UBSan: $asan/tools/ferryd"
    ;;
  test)
    bin=${2:?$usage}
    t=${3:?$usage}
    filter=${4:-*}
    asan=$bin/ferryd-asan
    if [[ ! -x $bin/tests/integration/$t ]]; then
      echo "$bin/tests/integration/$t is not built: skipped"
      exit 77
    fi
    if [[ ! -x $asan/tools/ferryd ]]; then
      echo "$asan/tools/ferryd is not built (the ferryd_asan_build test builds it)" >&2
      exit 1
    fi
    export FERRY_TEST_FERRYD=$asan/tools/ferryd
    export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:halt_on_error=1
    export LSAN_OPTIONS=suppressions=$asan/lsan.supp:print_suppressions=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    echo "== $t ($filter) against ferryd with ASan and UBSan"
    # GPU tests skip here as everywhere without a GPU; the tests' own runtimes are not sanitized.
    if ! "$bin/tests/integration/$t" --gtest_brief=1 "--gtest_filter=$filter"; then
      echo "ferryd under ASan/UBSan: $t FAILED (its reports are in the failing tests' output above)" >&2
      exit 1
    fi
    echo "ferryd under ASan/UBSan: every test of $t passed"
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
