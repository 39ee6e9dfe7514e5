#!/usr/bin/env bash
# Installs the build tree into a scratch prefix and builds and runs a
# consumer project against it with find_package(ferry) — with CMake forbidden
# to find the CUDA Toolkit, so a CUDA build's package must not need it. The
# installed core libraries must name no CUDA library; a CUDA build installs
# its CUDA module beside them.
set -euo pipefail
build=$1
source_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
lib=$(dirname "$(find "$scratch/prefix" -name 'libferry_common.so*' -print -quit)")
for core in ferry_common ferry_allocator ferry_transport ferry_runtime; do
  file="$lib/lib$core.so"
  [[ -f $file ]] || { echo "not installed: $file" >&2; exit 1; }
  if readelf -d "$file" | grep '(NEEDED)' | grep -Ei 'libcuda|libcublas|libcusolver|libcusparse|libnvrtc|libnvjitlink'; then
    echo "$file links a CUDA library (above)" >&2
    exit 1
  fi
done
if grep -q 'set(FERRY_WITH_CUDA ON)' "$lib/cmake/ferry/ferryConfig.cmake"; then
  [[ -f $lib/libferry_cuda.so ]] || { echo "a CUDA build installed no $lib/libferry_cuda.so" >&2; exit 1; }
fi
cmake -S "$source_dir" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  --no-warn-unused-cli -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON >/dev/null
cmake --build "$scratch/consumer" >"$scratch/build.log" || { cat "$scratch/build.log"; exit 1; }
"$scratch/consumer/consumer"
