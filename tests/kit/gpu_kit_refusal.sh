#!/usr/bin/env bash
# The GPU kit, checked where there is no GPU: it packs from this build within
# its 60 MiB, holds what a bare GPU machine needs and every gpu test binary,
# and its `run` refuses with exit 2, naming the reason, on a machine without
# an NVIDIA driver (FERRY_KIT_NVIDIA_SMI names an nvidia-smi that is not
# there, so this holds on a GPU host too).
#   gpu_kit_refusal.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=${1:?usage: $0 SOURCE_DIR BUILD_DIR} build=${2:?usage: $0 SOURCE_DIR BUILD_DIR}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

bash "$src/scripts/gpu-kit" --build-dir "$build" --out "$out/kit" >"$out/pack.log" 2>&1 ||
  { cat "$out/pack.log"; fail "scripts/gpu-kit did not pack the kit"; }
cat "$out/pack.log" | tail -n 3
size=$(stat -c %s "$out/kit/ferry-gpu-kit.tar.xz")
((size <= 60 << 20)) || fail "the kit is ${size} bytes, over 60 MiB"

listing=$(tar -tJf "$out/kit/ferry-gpu-kit.tar.xz") || fail "the kit is not a readable tar.xz"
for f in bin/ferryd bin/ferry bin/ferry_bench_gpu lib/libferry_cuda.so lib/libferry_runtime.so NEEDS_FROM_TOOLKIT; do
  grep -qx "ferry-gpu-kit/$f" <<<"$listing" || fail "the kit lacks $f"
done
grep -q '^ferry-gpu-kit/lib/libucp\.so' <<<"$listing" || fail "the kit lacks UCX (libucp), which a bare GPU machine does not have"
if grep -qE '^ferry-gpu-kit/lib/lib(c|cudart|cublas|cuda)\.so' <<<"$listing"; then
  fail "the kit carries a library the GPU machine provides: $(grep -E '^ferry-gpu-kit/lib/lib(c|cudart|cublas|cuda)\.so' <<<"$listing")"
fi
# Every gpu-labelled test binary this build's ctest knows is in the kit.
expected=$(ctest --test-dir "$build" -N -L gpu --show-only=json-v1 2>/dev/null |
  python3 -c 'import json,sys,os; print("\n".join(sorted({os.path.basename(t["command"][0]) for t in json.load(sys.stdin)["tests"] if t.get("command")})))')
[[ -n $expected ]] || fail "ctest lists no gpu test in $build"
for t in $expected; do
  grep -qx "ferry-gpu-kit/tests/$t" <<<"$listing" || fail "the kit lacks the gpu test binary $t"
done
[[ -x $out/kit/run ]] || fail "the kit has no run script"

FERRY_KIT_NVIDIA_SMI=ferry-no-such-nvidia-smi bash "$out/kit/run" "$out/results" >"$out/run.log" 2>&1
rc=$?
cat "$out/run.log"
((rc == 2)) || fail "run exited ${rc} on a machine without a driver; 2 means it cannot run here"
reason="cannot run here: ferry-no-such-nvidia-smi is not installed (no NVIDIA driver on this machine)"
grep -qF "$reason" "$out/run.log" || fail "run did not say why it cannot run"
grep -qF "$reason" "$out/results/verdict.txt" || fail "the verdict file does not say why"
echo "PASS: the kit is $((size >> 20)) MiB with $(wc -l <<<"$expected") gpu test binaries; run refused, naming the reason"
