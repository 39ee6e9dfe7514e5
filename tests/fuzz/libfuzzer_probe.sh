# Sourced by the fuzz scripts: exits 77 (ctest's "skipped") unless $1, the
# compiler, exists and can link a libFuzzer binary in directory $2. clang++
# without its runtime libraries (libclang-rt-*-dev) cannot link a fuzzer at
# all; that is a missing tool, not a finding.
require_libfuzzer() {
  local cxx=$1 work=$2
  if ! command -v "$cxx" >/dev/null 2>&1; then
    echo "$cxx not found: fuzzing skipped"
    exit 77
  fi
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$work/probe.cpp"
  if ! "$cxx" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" >/dev/null 2>&1; then
    echo "$cxx cannot link libFuzzer (is libclang-rt-dev installed?): fuzzing skipped"
    exit 77
  fi
}
