#!/usr/bin/env bash
# "chunked pipeline over a shaped link": runs ferry_bench_pipeline in
# one network namespace against ferryd in another, over a veth link shaped to
# ~1 GB/s and 0.5 ms each way (samples/two_hosts/two_hosts.sh sets it up).
#   run_pipeline_bench.sh BUILD_DIR [ferry_bench_pipeline args...]
# Env: PIPELINE_RATE (8gbit), PIPELINE_DELAY (0.5ms). The JSON and a trace of
# the first window's runs land in BUILD_DIR/bench/. Not root: says so, exits 0,
# so that `bench` still runs the rest.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [args...]}" && pwd); shift
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rate=${PIPELINE_RATE:-8gbit} delay=${PIPELINE_DELAY:-0.5ms}
rc=0
bash "$src/samples/two_hosts/two_hosts.sh" --rate "$rate" --delay "$delay" --build "$build" -- \
  "$build/bench/ferry_bench_pipeline" --link="veth, tcp, $rate, $delay each way" \
  --out="$build/bench/bench-pipeline.json" --trace="$build/bench/bench-pipeline-trace.json" "$@" || rc=$?
if ((rc == 77)); then
  echo "run_pipeline_bench: skipped (needs root and ip netns)"
  exit 0
fi
exit "$rc"
