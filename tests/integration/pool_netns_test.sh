#!/usr/bin/env bash
# ctest pool_netns: three ferryd behind differently shaped links
# (pool_hosts.sh), placement checked by pool_placement. Exit 77 (skip) comes
# from pool_hosts.sh when not root or without network namespaces.
#   pool_netns_test.sh FERRYD POOL_PLACEMENT SLEEP_PLUGIN
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: $0 FERRYD POOL_PLACEMENT SLEEP_PLUGIN" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$here/pool_hosts.sh" --rates 1gbit,200mbit,50mbit --workers 2 --plugin "$3" "$1" -- "$2" "$3"
