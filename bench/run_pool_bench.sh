#!/usr/bin/env bash
# A pool of hosts on one box (tests/integration/pool_hosts.sh: each ferryd in
# its own network namespace behind its own tbf-shaped link; needs root):
#   scaling   - three hosts on equal 1 Gbit/s links, sleep_ms tasks on 1, 2, 3
#   placement - two hosts, on 1 Gbit/s (A) and 100 Mbit/s (B), beside the
#               client's CPU: gemm sweep and mixed DAG, default vs fixed
# Ratios are printed; JSON lands in BUILD_DIR/bench/bench-pool-*.json.
#   run_pool_bench.sh BUILD_DIR [--only=scaling|placement] [--reps=N]
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [--only=scaling|placement] [--reps=N]}" && pwd); shift
only="scaling placement" reps=()
for arg in "$@"; do
  case $arg in
    --only=*) only=${arg#--only=} ;;
    --reps=*) reps=("$arg") ;;
    *) echo "run_pool_bench: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
ferryd=$build/tools/ferryd bench=$build/bench/ferry_bench_pool
plugin=$(find "$build/tests" -name 'libferry_sleep_plugin.so' -print -quit 2>/dev/null || true)
[[ -x $ferryd && -x $bench && -n $plugin ]] || {
  echo "run_pool_bench: build ferryd, ferry_bench_pool and ferry_sleep_plugin first" >&2; exit 2; }
hosts=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/integration" && pwd)/pool_hosts.sh
mkdir -p "$build/bench"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (other work on this machine shows in the figures)"
for mode in $only; do
  case $mode in
    scaling)
      bash "$hosts" --rates 1gbit,1gbit,1gbit --workers 2 --plugin "$plugin" "$ferryd" -- \
        "$bench" --mode=scaling --plugin="$plugin" --out="$build/bench/bench-pool-scaling.json" "${reps[@]}" ;;
    placement)
      bash "$hosts" --rates 1gbit,100mbit --workers 1 --client-cpus 0 --host-cpus 1 "$ferryd" -- \
        "$bench" --mode=placement --out="$build/bench/bench-pool-placement.json" "${reps[@]}" ;;
    *) echo "run_pool_bench: unknown mode '$mode'" >&2; exit 2 ;;
  esac
done
