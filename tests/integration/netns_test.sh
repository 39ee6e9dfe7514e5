#!/usr/bin/env bash
# ctest two_hosts_netns: the offload sample across a shaped link between two
# network namespaces. Exit 77 (skip) comes from two_hosts.sh when not root.
#   netns_test.sh FERRYD TWO_HOSTS_OFFLOAD
set -euo pipefail
[[ $# == 2 ]] || { echo "usage: $0 FERRYD TWO_HOSTS_OFFLOAD" >&2; exit 2; }
script=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../samples/two_hosts" && pwd)/two_hosts.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
FERRYD=$1 bash "$script" --delay 0.5ms --rate 1gbit -- "$2" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
((rc == 0)) || exit "$rc"
# The sample exits non-zero on a wrong result or a task that did not run
# remotely; these lines make sure it really offloaded, over the link.
grep -q 'all results correct' "$log" || { echo "netns_test: the sample did not report correct results" >&2; exit 1; }
grep -q 'axpy on remote:10.77.0.2' "$log" || { echo "netns_test: nothing ran on the remote" >&2; exit 1; }
echo "netns_test: passed"
