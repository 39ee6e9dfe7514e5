#!/usr/bin/env bash
# A CUDA build on a machine without the CUDA Toolkit: in a private mount
# namespace the folders holding the CUDA libraries the module links are
# hidden under empty tmpfs mounts; `ferry info` must then report the
# module's load error (dlerror's text naming the missing library), and a
# program asking for all GPUs must still run on the CPU. Exits 77 (skipped)
# where a mount namespace is not allowed.
set -euo pipefail
module=$1      # libferry_cuda.so
ferry=$2       # the ferry tool
quickstart=$3  # a sample program
if [[ ${FERRY_HIDDEN_TOOLKIT:-} != 1 ]]; then
  if ! unshare -m true 2>/dev/null; then
    echo "skipped: no private mount namespace here (needs root or user namespaces)"
    exit 77
  fi
  exec unshare -m env FERRY_HIDDEN_TOOLKIT=1 bash "$0" "$@"
fi
# Every folder a CUDA library of the module resolves to, through symlinks.
mapfile -t dirs < <(ldd "$module" | awk '/lib(cuda|cublas|cusolver|cusparse|nvrtc|nvJitLink)/ && $3 ~ /^\// {print $3}' |
                    xargs -r readlink -f | xargs -r -n1 dirname | sort -u)
[[ ${#dirs[@]} -gt 0 ]] || { echo "ldd found no CUDA library in $module"; exit 1; }
for dir in "${dirs[@]}"; do mount -t tmpfs none "$dir"; done
info=$("$ferry" info 2>&1)
grep -E "module +load error — lib[A-Za-z]+\.so[.0-9]*: cannot open shared object file" <<<"$info" || {
  echo "ferry info did not report the module's load error:"
  echo "$info"
  exit 1
}
FERRY_GPUS=all "$quickstart"
