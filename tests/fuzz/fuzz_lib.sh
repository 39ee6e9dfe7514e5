# Sourced by the fuzz scripts (run_*fuzzer.sh): what each does alike.

# Exits 77 (ctest's "skipped") unless $1, the compiler, exists and can link
# a libFuzzer binary in directory $2. clang++ without its runtime libraries
# (libclang-rt-*-dev) cannot link a fuzzer at all; that is a missing tool,
# not a finding.
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

# fuzz_workdir NAME [BINARY_DIR]: sets $work, a temporary folder (with
# $work/corpus) removed at exit unless a finding keeps it, and $artifacts,
# where a crashing input goes (BINARY_DIR/fuzz-artifacts, else in $work).
fuzz_workdir() {
  local name=$1 bin=${2:-}
  work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-$name-fuzz.XXXXXX")
  artifacts=${bin:+$bin/fuzz-artifacts}
  artifacts=${artifacts:-$work/artifacts}
  mkdir -p "$artifacts" "$work/corpus"
  keep_work=0
  trap 'if [[ $keep_work == 0 ]]; then rm -rf "$work"; fi' EXIT
}

# fuzz_run WHAT FUZZER [LIBFUZZER FLAGS...]: fuzzes from $work/corpus; the
# caller's flags come last and win. On a finding, keeps $work, names the
# reproducer and exits with the fuzzer's status.
fuzz_run() {
  local what=$1 fuzzer=$2
  shift 2
  local status=0
  # -error_exitcode: libFuzzer's default, 77, is what these scripts mean by "skipped".
  "$fuzzer" "$work/corpus" -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$@" || status=$?
  if [[ $status != 0 ]]; then
    keep_work=1
    echo "$what fuzzer FAILED (status $status); reproducer in $artifacts, build in $work" >&2
    exit "$status"
  fi
  echo "$what fuzzer: no findings"
}

# fuzz_build OUT SOURCES... -- CFLAGS... [-- LDFLAGS...]: compiles each
# source alone with CFLAGS (through ccache where it is installed, so a second
# run recompiles only what changed; one clang++ call over many sources is
# never cached) and links them into OUT with the sanitizer flags of CFLAGS
# and LDFLAGS.
fuzz_build() {
  local out=$1
  shift
  local sources=() cflags=() ldflags=() objects=()
  while [[ $# -gt 0 && $1 != -- ]]; do sources+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  while [[ $# -gt 0 && $1 != -- ]]; do cflags+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  ldflags=("$@")
  local compile=("$cxx")
  command -v ccache >/dev/null 2>&1 && compile=(ccache "$cxx")
  mkdir -p "$work/objects"
  local i
  for i in "${!sources[@]}"; do
    objects+=("$work/objects/$i-$(basename "${sources[$i]%.*}").o")
  done
  # Two at a time: the machine the README names has two cores.
  local pids=() status=0
  for i in "${!sources[@]}"; do
    "${compile[@]}" "${cflags[@]}" -c "${sources[$i]}" -o "${objects[$i]}" &
    pids+=($!)
    if [[ ${#pids[@]} -ge 2 ]]; then
      wait "${pids[0]}" || status=1
      pids=("${pids[@]:1}")
    fi
  done
  for i in "${pids[@]}"; do wait "$i" || status=1; done
  [[ $status == 0 ]] || { echo "compiling $(basename "$out") failed" >&2; return 1; }
  local f link=()
  for f in "${cflags[@]}"; do
    [[ $f == -fsanitize* || $f == -fno-sanitize* ]] && link+=("$f")
  done
  "$cxx" "${link[@]}" "${objects[@]}" "${ldflags[@]}" -o "$out"
}

# fuzz_seed NAME: copies the corpus kept in the repository
# (tests/fuzz/corpus/NAME: the seeds and the findings kept as seeds, so each
# run tries them again first) into $work/corpus.
fuzz_seed() {
  local kept=$src/tests/fuzz/corpus/$1
  if [[ -d $kept ]]; then cp "$kept"/* "$work/corpus/"; fi
}
